// TopK (opset 1: attribute k; 10+: input K; 11+: largest, sorted). Ties go to the lower index and NaN ranks
// above every number, like the ONNX reference (a stable sort with NaN last, flipped for largest); the output is
// always sorted (sorted = 0 leaves the order unspecified). The K best of each lane are selected with partial_sort
// over an index buffer (no per-element allocation); float32 lanes through 64-bit rank keys (below).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "elem.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

bool ReadK(InferCtx *c, int64_t *k, bool *unknown, std::string *reason) {
  *unknown = false;
  if (c->opset < 10) return AttrInt(*c->node, "k", -1, k, reason);
  if (!c->has(1)) {
    *reason = "input 'K' is required";
    return false;
  }
  std::vector<int64_t> v;
  const ValueState st = ReadIntsInput(c, 1, &v, reason);
  if (st == ValueState::kError) return false;
  if (st == ValueState::kUnknown) {
    *unknown = true;
    return true;
  }
  if (v.size() != 1) {
    *reason = "input 'K' must hold exactly one value";
    return false;
  }
  *k = v[0];
  return true;
}

bool InferTopK(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsNumericType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t axis_attr, axis, k = 0;
  if (!AttrInt(*c->node, "axis", -1, &axis_attr, reason)) return false;
  if (!NormalizeAxis(axis_attr, static_cast<int64_t>(x.dims.size()), false, &axis, reason)) return false;
  bool unknown;
  if (!ReadK(c, &k, &unknown, reason)) return false;
  if (!unknown && (k < 0 || (x.dims[axis] >= 0 && k > x.dims[axis]))) {
    *reason = "K = " + std::to_string(k) + " is outside [0, " + std::to_string(x.dims[axis]) + "]";
    return false;
  }
  std::vector<int64_t> dims = x.dims;
  dims[axis] = unknown ? -1 : k;
  c->out[0] = {x.dtype, dims};
  if (c->out.size() > 1) c->out[1] = {ElemType::kInt64, dims};
  return true;
}

template <class S>
class TopKKernel : public Kernel {
 public:
  TopKKernel(int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest)
      : outer_(outer), n_(n), inner_(inner), k_(k), largest_(largest) {}
  size_t scratch_bytes() const override { return static_cast<size_t>(n_) * (8 + sizeof(C)) + 64; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *vals = static_cast<S *>(out[0]);
    int64_t *idx_out = static_cast<int64_t *>(out[1]);
    int64_t *idx = static_cast<int64_t *>(scratch_);
    C *lane = reinterpret_cast<C *>(idx + n_);
    for (int64_t o = 0; o < outer_; ++o) {
      for (int64_t i = 0; i < inner_; ++i) {
        const S *src = x + o * n_ * inner_ + i;
        for (int64_t j = 0; j < n_; ++j) lane[j] = Num<S>::Load(src[j * inner_]);
        std::iota(idx, idx + n_, int64_t(0));
        auto before = [&](int64_t a, int64_t b) {
          const C va = lane[a], vb = lane[b];
          const bool na = IsNan(va), nb = IsNan(vb);
          if (na || nb) {
            if (na && nb) return a < b;
            return largest_ ? na : nb;  // NaN ranks highest
          }
          if (va != vb) return largest_ ? va > vb : va < vb;
          return a < b;
        };
        std::partial_sort(idx, idx + k_, idx + n_, before);
        const int64_t base = o * k_ * inner_ + i;
        for (int64_t j = 0; j < k_; ++j) {
          vals[base + j * inner_] = src[idx[j] * inner_];
          if (idx_out) idx_out[base + j * inner_] = idx[j];
        }
      }
    }
    return true;
  }

 private:
  using C = typename Num<S>::C;
  static bool IsNan(C v) { return v != v; }
  int64_t outer_, n_, inner_, k_;
  bool largest_;
};

// float32 lanes: every element gets a 64-bit key, (rank of its value) << 32 | index, whose ascending order is
// the output order: NaN first for largest (last for smallest), equal values (-0 == +0) by index. Small K: one scan
// keeping the K best keys in a heap, where only values not ordered after the heap's worst (checked 8 at a time
// with AVX2) are looked at; large K: nth_element and a sort of the keys.
class TopKFloatKernel : public Kernel {
 public:
  static constexpr int64_t kBlock = 8;  // lanes gathered at once when the axis is not the last one

  TopKFloatKernel(int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest)
      : outer_(outer), n_(n), inner_(inner), k_(k), largest_(largest) {}
  size_t scratch_bytes() const override {
    return static_cast<size_t>(n_) * (sizeof(uint64_t) + (inner_ > 1 ? kBlock * sizeof(float) : 0)) + 64;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const float *x = static_cast<const float *>(in[0]);
    float *vals = static_cast<float *>(out[0]);
    int64_t *idx_out = static_cast<int64_t *>(out[1]);
    uint64_t *keys = static_cast<uint64_t *>(scratch_);
    float *lanes = reinterpret_cast<float *>(keys + n_);
    if (k_ == 0) return true;
    for (int64_t o = 0; o < outer_; ++o) {
      const float *src = x + o * n_ * inner_;
      const int64_t base = o * k_ * inner_;
      if (inner_ == 1) {
        Select(src, keys);
        Emit(src, keys, vals + base, idx_out ? idx_out + base : nullptr, 1);
        continue;
      }
      for (int64_t i0 = 0; i0 < inner_; i0 += kBlock) {
        const int64_t nb = std::min(kBlock, inner_ - i0);
        for (int64_t j = 0; j < n_; ++j)
          for (int64_t b = 0; b < nb; ++b) lanes[b * n_ + j] = src[j * inner_ + i0 + b];
        for (int64_t b = 0; b < nb; ++b) {
          Select(lanes + b * n_, keys);
          Emit(lanes + b * n_, keys, vals + base + i0 + b, idx_out ? idx_out + base + i0 + b : nullptr, inner_);
        }
      }
    }
    return true;
  }

 private:
  uint32_t Rank(float v) const {
    if (v != v) return largest_ ? 0u : 0xffffffffu;
    uint32_t b;
    std::memcpy(&b, &v, 4);
    if (v == 0) b = 0;  // -0 ties with +0
    const uint32_t mono = (b & 0x80000000u) ? ~b : b | 0x80000000u;  // unsigned order = float order
    return largest_ ? ~mono : mono;
  }
  uint64_t Key(const float *lane, int64_t j) const {
    return (static_cast<uint64_t>(Rank(lane[j])) << 32) | static_cast<uint64_t>(j);
  }
  // The k_ best keys of the lane into keys[0..k_), best first.
  void Select(const float *lane, uint64_t *keys) const {
    if (k_ * 8 > n_) {
      for (int64_t j = 0; j < n_; ++j) keys[j] = Key(lane, j);
      if (k_ < n_) std::nth_element(keys, keys + k_, keys + n_);
      std::sort(keys, keys + k_);
      return;
    }
    for (int64_t j = 0; j < k_; ++j) keys[j] = Key(lane, j);
    std::make_heap(keys, keys + k_);  // the worst of the best k on top
    int64_t j = k_;
#if defined(__x86_64__)
    if (UseAvx2()) j = ScanAvx2(lane, j, keys);
#endif
    for (; j < n_; ++j)
      if (!Behind(lane[j], lane[keys[0] & 0xffffffffu])) Offer(lane, j, keys);
  }
  // v certainly ranks after the heap's worst value w (when false, the keys decide).
  bool Behind(float v, float w) const { return largest_ ? v <= w : v >= w; }
  void Offer(const float *lane, int64_t j, uint64_t *keys) const {
    const uint64_t key = Key(lane, j);
    if (key >= keys[0]) return;
    std::pop_heap(keys, keys + k_);
    keys[k_ - 1] = key;
    std::push_heap(keys, keys + k_);
  }
#if defined(__x86_64__)
  __attribute__((target("avx2"))) int64_t ScanAvx2(const float *lane, int64_t j, uint64_t *keys) const {
    for (; j + 8 <= n_; j += 8) {
      const __m256 v = _mm256_loadu_ps(lane + j), w = _mm256_set1_ps(lane[keys[0] & 0xffffffffu]);
      // Not (v <= w) / not (v >= w): true for NaN on either side too.
      int m = _mm256_movemask_ps(largest_ ? _mm256_cmp_ps(v, w, _CMP_NLE_UQ) : _mm256_cmp_ps(v, w, _CMP_NGE_UQ));
      while (m) {
        const int b = __builtin_ctz(static_cast<unsigned>(m));
        m &= m - 1;
        Offer(lane, j + b, keys);
      }
    }
    return j;
  }
  static bool UseAvx2() {
    static const bool use = vmath::ActiveIsa() != vmath::Isa::kBaseline;
    return use;
  }
#endif
  void Emit(const float *lane, uint64_t *keys, float *vals, int64_t *idx, int64_t stride) const {
    if (k_ * 8 <= n_) std::sort_heap(keys, keys + k_);
    for (int64_t j = 0; j < k_; ++j) {
      const int64_t i = static_cast<int64_t>(keys[j] & 0xffffffffu);
      vals[j * stride] = lane[i];
      if (idx) idx[j * stride] = i;
    }
  }

  int64_t outer_, n_, inner_, k_;
  bool largest_;
};

std::unique_ptr<Kernel> PrepareTopK(const KernelCtx &kc, std::string *reason) {
  const TensorDesc &x = *kc.in[0];
  int64_t axis_attr, axis, largest;
  if (!AttrInt(*kc.node, "axis", -1, &axis_attr, reason) || !AttrInt(*kc.node, "largest", 1, &largest, reason))
    return nullptr;
  if (!NormalizeAxis(axis_attr, static_cast<int64_t>(x.dims.size()), false, &axis, reason)) return nullptr;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dims[d];
  for (size_t d = axis + 1; d < x.dims.size(); ++d) inner *= x.dims[d];
  const int64_t k = kc.out[0].dims[axis];
  if (kc.out[0].NumElements() == 0) outer = 0;
  if (x.dtype == ElemType::kFloat && x.dims[axis] < (int64_t(1) << 32))
    return std::make_unique<TopKFloatKernel>(outer, x.dims[axis], inner, k, largest != 0);
  std::unique_ptr<Kernel> kern;
  VisitType(x.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      kern = std::make_unique<TopKKernel<S>>(outer, x.dims[axis], inner, k, largest != 0);
  });
  if (!kern) *reason = DtypeNotSupported(x.dtype);
  return kern;
}

}  // namespace

void RegisterTopKOps(std::vector<OpDef> *ops) {
  ops->push_back({"TopK", 1, 2, 2, 2, nullptr, InferTopK, PrepareTopK, true});
}

}  // namespace onnx
}  // namespace twin
