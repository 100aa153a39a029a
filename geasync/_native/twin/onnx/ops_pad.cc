// Pad (constant / reflect / edge / wrap, negative pads crop, optional axes) and Tile as one gather kernel: every
// output dim maps each output index to a source index (or -1 = the constant), precomputed at prepare time, so
// Run is a row loop with a table lookup per element and no per-element arithmetic on coordinates.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "elem.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

template <class F>
bool VisitWidth(ElemType t, F &&f) {
  switch (ElemSize(t)) {
    case 1: f(uint8_t{}); return true;
    case 2: f(uint16_t{}); return true;
    case 4: f(uint32_t{}); return true;
    case 8: f(uint64_t{}); return true;
    default: return false;
  }
}

using CopyFn = void (*)(void *, const void *, size_t);

void CopyPlain(void *dst, const void *src, size_t n) { CopyBytes(dst, src, n); }

#if defined(__x86_64__)
// Runs of a few hundred bytes to a few KiB, one after another: glibc's memcpy pays its size dispatch and
// overlap checks on every call (up to ~3x this loop on Tile's 512-byte rows in a microbenchmark, though not at
// every size and alignment). The last 64 bytes are one overlapping store, so there is no scalar tail; short runs
// keep memcpy.
__attribute__((target("avx512f"))) void CopyAvx512(void *dst, const void *src, size_t n) {
  if (n < 64) {
    std::memcpy(dst, src, n);
    return;
  }
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    const __m512i a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + 64);
    const __m512i c = _mm512_loadu_si512(s + i + 128), e = _mm512_loadu_si512(s + i + 192);
    _mm512_storeu_si512(d + i, a);
    _mm512_storeu_si512(d + i + 64, b);
    _mm512_storeu_si512(d + i + 128, c);
    _mm512_storeu_si512(d + i + 192, e);
  }
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(d + i, _mm512_loadu_si512(s + i));
  if (i < n) _mm512_storeu_si512(d + n - 64, _mm512_loadu_si512(s + n - 64));
}
#endif

CopyFn PickCopy() {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return CopyAvx512;
#endif
  return CopyPlain;
}

// Trailing dims that copy whole input rows in order fold into the dim before them (up to kFoldMax output
// elements a row), so a Tile or Pad over outer dims copies long runs instead of one short run per row.
constexpr size_t kFoldMax = size_t{1} << 16;

void FoldIdentityTail(std::vector<int64_t> *in_dims, std::vector<std::vector<int64_t>> *maps) {
  while (maps->size() >= 2) {
    const std::vector<int64_t> &last = maps->back(), &prev = (*maps)[maps->size() - 2];
    const int64_t n = in_dims->back();
    bool identity = n > 0 && static_cast<int64_t>(last.size()) == n;
    for (int64_t j = 0; identity && j < n; ++j) identity = last[j] == j;
    if (!identity || prev.size() * static_cast<size_t>(n) > kFoldMax) return;
    std::vector<int64_t> merged;
    merged.reserve(prev.size() * static_cast<size_t>(n));
    for (int64_t src : prev)
      for (int64_t t = 0; t < n; ++t) merged.push_back(src < 0 ? -1 : src * n + t);
    maps->pop_back();
    maps->back() = std::move(merged);
    in_dims->pop_back();
    in_dims->back() *= n;
  }
}

// out[o] = in[src(o)] with src given per dim by maps (-1 anywhere = the fill value, read from in[fill_input]).
template <class U>
class GatherMapKernel : public Kernel {
 public:
  GatherMapKernel(std::vector<int64_t> in_dims, std::vector<std::vector<int64_t>> maps, int fill_input)
      : maps_(std::move(maps)), fill_input_(fill_input) {
    FoldIdentityTail(&in_dims, &maps_);
    in_strides_ = Strides(in_dims);
    ctr_.assign(maps_.size(), 0);
    total_ = 1;
    for (const auto &m : maps_) total_ *= static_cast<int64_t>(m.size());
    if (!maps_.empty()) SplitRuns(maps_.back());
    TabulateRows();
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const U *x = static_cast<const U *>(in[0]);
    U *y = static_cast<U *>(out[0]);
    U fill = U(0);
    if (fill_input_ >= 0 && in[fill_input_]) std::memcpy(&fill, in[fill_input_], sizeof(U));
    if (total_ == 0) return true;
    const size_t r = maps_.size();
    if (r == 0) {
      y[0] = x[0];
      return true;
    }
    const int64_t inner = static_cast<int64_t>(maps_[r - 1].size());
    if (!row_base_.empty()) {
      const int64_t *base = row_base_.data(), *end = base + row_base_.size();
      for (U *py = y; base != end; ++base, py += inner) EmitRow(py, x, *base, fill);
      return true;
    }
    std::fill(ctr_.begin(), ctr_.end(), 0);
    for (int64_t o = 0; o < total_; o += inner) {
      EmitRow(y + o, x, RowBase(), fill);
      for (size_t d = r - 1; d-- > 0;) {
        if (++ctr_[d] < static_cast<int64_t>(maps_[d].size())) break;
        ctr_[d] = 0;
      }
    }
    return true;
  }

 private:
  // Where the output row at ctr_ starts in the input, or -1 when any outer dim maps it to the fill value.
  int64_t RowBase() const {
    int64_t base = 0;
    for (size_t d = 0; d + 1 < maps_.size(); ++d) {
      const int64_t s = maps_[d][ctr_[d]];
      if (s < 0) return -1;
      base += s * in_strides_[d];
    }
    return base;
  }

  // Runs are read through locals: the copy is an indirect call, after which members would be reloaded.
  void EmitRow(U *__restrict py, const U *x, int64_t base, U fill) const {
    const int64_t *last = maps_.back().data();
    const int64_t inner = static_cast<int64_t>(maps_.back().size());
    if (base < 0) {
      std::fill(py, py + inner, fill);
      return;
    }
    const U *__restrict px = x + base;
    const Stretch *run = runs_.data(), *end = run + runs_.size();
    if (run == end) {
      for (int64_t j = 0; j < inner; ++j) py[j] = last[j] < 0 ? fill : px[last[j]];
      return;
    }
    const CopyFn copy = copy_;
    for (; run != end; ++run) {
      if (run->src < 0) std::fill(py + run->out, py + run->out + run->len, fill);
      else copy(py + run->out, px + run->src, static_cast<size_t>(run->len) * sizeof(U));
    }
  }

  // Each output row's source offset, computed once when there are few enough rows: Run then walks a table
  // instead of re-deriving the offset from every outer dim's map per row.
  void TabulateRows() {
    if (total_ == 0 || maps_.empty() || maps_.back().empty()) return;
    const int64_t rows = total_ / static_cast<int64_t>(maps_.back().size());
    if (rows > kRowTableMax) return;
    row_base_.resize(static_cast<size_t>(rows));
    std::fill(ctr_.begin(), ctr_.end(), 0);
    for (int64_t row = 0; row < rows; ++row) {
      row_base_[static_cast<size_t>(row)] = RowBase();
      for (size_t d = maps_.size() - 1; d-- > 0;) {
        if (++ctr_[d] < static_cast<int64_t>(maps_[d].size())) break;
        ctr_[d] = 0;
      }
    }
  }

  static constexpr int64_t kRowTableMax = int64_t{1} << 16;

  // A stretch of an output row that copies consecutive source elements (src >= 0) or is all fill (src = -1).
  struct Stretch {
    int64_t out, len, src;
  };
  // The last dim's map as runs, kept when they are long enough (4 elements on average) for memcpy / fill to beat
  // the per-element lookup: Pad constant and edge rows are 3 runs, Tile rows one per repeat; reflect is not.
  void SplitRuns(const std::vector<int64_t> &m) {
    const int64_t n = static_cast<int64_t>(m.size());
    for (int64_t j = 0; j < n; ++j) {
      const bool extends = !runs_.empty() && ((m[j] < 0 && runs_.back().src < 0) ||
                                              (m[j] >= 0 && runs_.back().src >= 0 &&
                                               m[j] == runs_.back().src + runs_.back().len));
      if (extends) ++runs_.back().len;
      else runs_.push_back({j, 1, m[j] < 0 ? -1 : m[j]});
    }
    if (static_cast<int64_t>(runs_.size()) * 4 > n) runs_.clear();
  }

  std::vector<int64_t> in_strides_;
  std::vector<Stretch> runs_;  // empty: per-element lookup
  std::vector<std::vector<int64_t>> maps_;
  int fill_input_;
  std::vector<int64_t> ctr_;
  std::vector<int64_t> row_base_;  // empty: derive each row's offset from ctr_
  int64_t total_ = 0;
  CopyFn copy_ = PickCopy();
};

std::unique_ptr<Kernel> MakeGatherMap(ElemType t, const Dims &in_dims,
                                      std::vector<std::vector<int64_t>> maps, int fill_input, std::string *reason) {
  std::unique_ptr<Kernel> k;
  VisitWidth(t, [&](auto u) { k = std::make_unique<GatherMapKernel<decltype(u)>>(in_dims, std::move(maps), fill_input); });
  if (!k) *reason = DtypeNotSupported(t);
  return k;
}

// ---- Pad ----

enum PadMode { kConstant, kReflect, kEdge, kWrap };

bool ReadMode(const Node &n, PadMode *m, std::string *reason) {
  int i = 0;
  if (!AttrChoice(n, "mode", {"constant", "reflect", "edge", "wrap"}, &i, reason)) return false;
  *m = static_cast<PadMode>(i);  // the enum lists the choices in this order
  return true;
}

bool CheckPad(const Node &n, int64_t, std::string *reason) {
  PadMode m;
  return ReadMode(n, &m, reason);
}

// Per-dim (begin, end) pads over all dims; *unknown when the pads / axes inputs are not known yet.
bool PadAmounts(InferCtx *c, std::vector<int64_t> *begin, std::vector<int64_t> *end, bool *unknown,
                std::string *reason) {
  const int64_t r = static_cast<int64_t>(c->in[0]->dims.size());
  std::vector<int64_t> pads, axes;
  *unknown = false;
  if (c->opset < 11) {
    bool present;
    if (!AttrInts(*c->node, c->opset < 2 ? "paddings" : "pads", &pads, &present, reason)) return false;
  } else {
    const ValueState st = ReadIntsInput(c, 1, &pads, reason);
    if (st == ValueState::kError) return false;
    if (st == ValueState::kUnknown) {
      *unknown = true;
      return true;
    }
  }
  if (c->has(3)) {
    const ValueState st = ReadIntsInput(c, 3, &axes, reason);
    if (st == ValueState::kError) return false;
    if (st == ValueState::kUnknown) {
      *unknown = true;
      return true;
    }
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  const size_t na = axes.size();
  if (pads.size() != 2 * na) {
    *reason = "pads must hold 2 x " + std::to_string(na) + " values, got " + std::to_string(pads.size());
    return false;
  }
  begin->assign(r, 0);
  end->assign(r, 0);
  for (size_t i = 0; i < na; ++i) {
    int64_t a;
    if (!NormalizeAxis(axes[i], r, false, &a, reason)) return false;
    (*begin)[a] = pads[i];
    (*end)[a] = pads[i + na];
  }
  return true;
}

bool InferPad(InferCtx *c, std::string *reason) {
  PadMode m;
  if (!ReadMode(*c->node, &m, reason)) return false;
  std::vector<int64_t> b, e;
  bool unknown;
  if (!PadAmounts(c, &b, &e, &unknown, reason)) return false;
  const auto &d = c->in[0]->dims;
  c->out[0].dtype = c->in[0]->dtype;
  c->out[0].dims.assign(d.size(), -1);
  if (unknown) return true;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] < 0) continue;
    if (b[i] > kMaxElements || e[i] > kMaxElements) {
      *reason = "pads make dim " + std::to_string(i) + " of " + DescStr(*c->in[0]) + " more than 2^40 long";
      return false;
    }
    // Crops beyond -2^42 crop any dim below zero whatever the other side adds: clamped there, the sum cannot wrap
    // (pads of -2^63 on both sides of a dim of 4 summed to 4).
    constexpr int64_t kDeepCrop = -(int64_t(1) << 42);
    const int64_t n = d[i] + std::max(b[i], kDeepCrop) + std::max(e[i], kDeepCrop);
    if (n < 0) {
      *reason = "pads crop dim " + std::to_string(i) + " of " + DescStr(*c->in[0]) + " below zero";
      return false;
    }
    if (m != kConstant && d[i] == 0 && n > 0) {
      *reason = "cannot pad an empty dim in reflect / edge / wrap mode";
      return false;
    }
    c->out[0].dims[i] = n;
  }
  return true;
}

int64_t PadSource(int64_t i, int64_t n, PadMode m) {
  if (i >= 0 && i < n) return i;
  switch (m) {
    case kConstant: return -1;
    case kEdge: return i < 0 ? 0 : n - 1;
    case kWrap: return ((i % n) + n) % n;
    case kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t k = ((i % period) + period) % period;
      return k < n ? k : period - k;
    }
  }
  return -1;
}

std::unique_ptr<Kernel> PreparePad(const KernelCtx &kc, std::string *reason) {
  InferCtx c = kc.AsInferCtx();
  PadMode m;
  std::vector<int64_t> b, e;
  bool unknown;
  if (!ReadMode(*kc.node, &m, reason) || !PadAmounts(&c, &b, &e, &unknown, reason)) return nullptr;
  const auto &d = kc.in[0]->dims;
  std::vector<std::vector<int64_t>> maps(d.size());
  for (size_t i = 0; i < d.size(); ++i)
    for (int64_t o = 0; o < kc.out[0].dims[i]; ++o) maps[i].push_back(PadSource(o - b[i], d[i], m));
  if (kc.opset < 11) {
    float value;
    if (!AttrFloat(*kc.node, "value", 0.f, &value, reason)) return nullptr;
    if (value != 0.f) {
      *reason = "Pad before opset 11 with a nonzero 'value' attribute is not supported by the twin";
      return nullptr;
    }
    return MakeGatherMap(kc.in[0]->dtype, d, std::move(maps), -1, reason);
  }
  const bool has_value = kc.has(2) && kc.in[2]->NumElements() > 0;
  if (has_value && kc.in[2]->dtype != kc.in[0]->dtype) {
    *reason = "constant_value must have the data's dtype";
    return nullptr;
  }
  return MakeGatherMap(kc.in[0]->dtype, d, std::move(maps), has_value ? 2 : -1, reason);
}

// ---- Tile ----

bool InferTile(InferCtx *c, std::string *reason) {
  std::vector<int64_t> reps;
  const ValueState st = ReadIntsInput(c, 1, &reps, reason);
  if (st == ValueState::kError) return false;
  const auto &d = c->in[0]->dims;
  c->out[0].dtype = c->in[0]->dtype;
  c->out[0].dims.assign(d.size(), -1);
  if (st == ValueState::kUnknown) return true;
  if (reps.size() != d.size()) {
    *reason = "repeats must hold one value per dim of " + DescStr(*c->in[0]);
    return false;
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (reps[i] < 0) {
      *reason = "repeats must be >= 0";
      return false;
    }
    if (d[i] < 0) continue;
    // Refused before the product is formed: it wrapped in int64 (repeats of 2^62 on a dim of 4 gave an empty output).
    if (reps[i] > 0 && d[i] > kMaxElements / reps[i]) {
      *reason = "repeats make dim " + std::to_string(i) + " of " + DescStr(*c->in[0]) + " more than 2^40 long";
      return false;
    }
    c->out[0].dims[i] = d[i] * reps[i];
  }
  return true;
}

std::unique_ptr<Kernel> PrepareTile(const KernelCtx &kc, std::string *reason) {
  const auto &d = kc.in[0]->dims;
  std::vector<std::vector<int64_t>> maps(d.size());
  for (size_t i = 0; i < d.size(); ++i)
    for (int64_t o = 0; o < kc.out[0].dims[i]; ++o) maps[i].push_back(o % d[i]);
  return MakeGatherMap(kc.in[0]->dtype, d, std::move(maps), -1, reason);
}

}  // namespace

void RegisterPadOps(std::vector<OpDef> *ops) {
  ops->push_back({"Pad", 1, 4, 1, 1, CheckPad, InferPad, PreparePad, true});
  ops->push_back({"Tile", 2, 2, 1, 1, nullptr, InferTile, PrepareTile, true});
}

}  // namespace onnx
}  // namespace twin
