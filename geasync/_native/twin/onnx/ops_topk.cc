// TopK (opset 1: attribute k; 10+: input K; 11+: largest, sorted). Ties go to the lower index and NaN ranks
// above every number, like the ONNX reference (a stable sort with NaN last, flipped for largest). The K best of
// each lane are selected with partial_sort over an index buffer (no per-element allocation).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#endif

#include <algorithm>
#include <cmath>
#include <numeric>

#include "elem.h"

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
