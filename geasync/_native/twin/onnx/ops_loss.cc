// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (input [N, C, d1, ...], integer target
// [N, d1, ...], optional per-class weight [C], ignore_index, reduction none/sum/mean; SoftmaxCrossEntropyLoss's
// optional second output is the log-softmax over C). float32/float64 natively, float16/bfloat16 through float32.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <cmath>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

enum class Reduction { kNone, kSum, kMean };

bool ReadReduction(const Node &n, Reduction *r, std::string *reason) {
  const Attribute *a = n.FindAttr("reduction");
  *r = Reduction::kMean;
  if (!a) return true;
  if (a->type != kAttrString) {
    *reason = "attribute 'reduction' must be a string";
    return false;
  }
  if (a->s == "none") *r = Reduction::kNone;
  else if (a->s == "sum") *r = Reduction::kSum;
  else if (a->s != "mean") {
    *reason = "attribute 'reduction' is '" + a->s + "'; expected 'none', 'sum' or 'mean'";
    return false;
  }
  return true;
}

bool ReadIgnoreIndex(const Node &n, bool *has, int64_t *v, std::string *reason) {
  *has = n.FindAttr("ignore_index") != nullptr;
  return AttrInt(n, "ignore_index", 0, v, reason);
}

bool CheckLoss(const Node &n, int64_t, std::string *reason) {
  Reduction r;
  bool has;
  int64_t ii;
  return ReadReduction(n, &r, reason) && ReadIgnoreIndex(n, &has, &ii, reason);
}

bool InferLoss(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &t = *c->in[1];
  if (!IsFloatType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  if (t.dtype != ElemType::kInt32 && t.dtype != ElemType::kInt64) {
    *reason = DtypeNotSupported(t.dtype, "target");
    return false;
  }
  Reduction r;
  if (!ReadReduction(*c->node, &r, reason)) return false;
  if (x.IsUnknownRank() || t.IsUnknownRank()) {
    c->out[0] = TensorDesc{x.dtype, r == Reduction::kNone ? t.dims : Dims{}};
    for (size_t o = 1; o < c->out.size(); ++o) c->out[o] = x;
    return true;
  }
  if (x.dims.size() < 2 || t.dims.size() + 1 != x.dims.size()) {
    *reason = "input " + DescStr(x) + " must be [N, C, d1, ...] and target " + DescStr(t) + " [N, d1, ...]";
    return false;
  }
  for (size_t i = 0; i < t.dims.size(); ++i) {
    const int64_t xd = x.dims[i == 0 ? 0 : i + 1], td = t.dims[i];
    if (xd >= 0 && td >= 0 && xd != td) {
      *reason = "target " + DescStr(t) + " does not match input " + DescStr(x) + " (target is [N, d1, ...])";
      return false;
    }
  }
  if (c->has(2)) {
    const TensorDesc &w = *c->in[2];
    if (w.dtype != x.dtype || w.dims.size() != 1 || (w.dims[0] >= 0 && x.dims[1] >= 0 && w.dims[0] != x.dims[1])) {
      *reason = "weight " + DescStr(w) + " must be a 1-D tensor of C = " + std::to_string(x.dims[1]) +
                " values of the input's dtype";
      return false;
    }
  }
  std::vector<int64_t> od = t.dims;
  for (size_t i = 1; i < od.size(); ++i) od[i] = x.dims[i + 1];
  if (od[0] < 0) od[0] = x.dims[0];
  c->out[0] = TensorDesc{x.dtype, r == Reduction::kNone ? od : std::vector<int64_t>{}};
  for (size_t o = 1; o < c->out.size(); ++o) c->out[o] = x;
  return true;
}

// kSoftmax: the input is logits (log-softmax over C first, optionally written to output 1); else log-probs.
template <class T, class I, bool kSoftmax>
class LossKernel : public Kernel {
 public:
  LossKernel(int64_t n, int64_t classes, int64_t inner, Reduction r, bool has_ii, int64_t ii)
      : n_(n), c_(classes), inner_(inner), r_(r), has_ii_(has_ii), ii_(ii),
        logp_(kSoftmax ? static_cast<size_t>(n * classes * inner) : 0) {}

  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const T *x = static_cast<const T *>(in[0]);
    const I *t = static_cast<const I *>(in[1]);
    const T *w = has_w_ ? static_cast<const T *>(in[2]) : nullptr;
    if constexpr (kSoftmax) {
      T *lp = out_count_ > 1 && out[1] ? static_cast<T *>(out[1]) : logp_.data();
      LogSoftmax(x, lp);
      x = lp;
    }
    T *y = static_cast<T *>(out[0]);
    double total = 0, wsum = 0;
    for (int64_t b = 0; b < n_; ++b) {
      for (int64_t j = 0; j < inner_; ++j) {
        const int64_t k = b * inner_ + j;
        const int64_t cls = static_cast<int64_t>(t[k]);
        T loss = T(0), wt = T(0);
        if (!(has_ii_ && cls == ii_)) {
          if (cls < 0 || cls >= c_) {
            *reason = "target value " + std::to_string(cls) + " is outside [0, " + std::to_string(c_) +
                      ") and is not ignore_index";
            return false;
          }
          wt = w ? w[cls] : T(1);
          loss = -x[(b * c_ + cls) * inner_ + j] * wt;
        }
        if (r_ == Reduction::kNone) y[k] = loss;
        total += static_cast<double>(loss);
        wsum += static_cast<double>(wt);
      }
    }
    if (r_ == Reduction::kSum) y[0] = static_cast<T>(total);
    if (r_ == Reduction::kMean) y[0] = static_cast<T>(total / wsum);
    return true;
  }
  size_t out_count_ = 1;
  bool has_w_ = false;

 private:
  void LogSoftmax(const T *x, T *lp) const {
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t j = 0; j < inner_; ++j) {
        const T *xs = x + b * c_ * inner_ + j;
        T *ls = lp + b * c_ * inner_ + j;
        T mx = xs[0];
        for (int64_t k = 1; k < c_; ++k) mx = std::max(mx, xs[k * inner_]);
        double sum = 0;
        for (int64_t k = 0; k < c_; ++k) sum += std::exp(static_cast<double>(xs[k * inner_] - mx));
        const T lse = static_cast<T>(std::log(sum)) + mx;
        for (int64_t k = 0; k < c_; ++k) ls[k * inner_] = xs[k * inner_] - lse;
      }
  }

  int64_t n_, c_, inner_;
  Reduction r_;
  bool has_ii_;
  int64_t ii_;
  std::vector<T> logp_;
};

template <class T, bool kSoftmax>
std::unique_ptr<Kernel> MakeLoss(const KernelCtx &c, int64_t n, int64_t cls, int64_t inner, Reduction r,
                                 bool has_ii, int64_t ii) {
  std::unique_ptr<Kernel> k;
  if (c.in[1]->dtype == ElemType::kInt64) {
    auto p = std::make_unique<LossKernel<T, int64_t, kSoftmax>>(n, cls, inner, r, has_ii, ii);
    p->out_count_ = c.out.size();
    p->has_w_ = c.has(2);
    k = std::move(p);
  } else {
    auto p = std::make_unique<LossKernel<T, int32_t, kSoftmax>>(n, cls, inner, r, has_ii, ii);
    p->out_count_ = c.out.size();
    p->has_w_ = c.has(2);
    k = std::move(p);
  }
  return k;
}

template <bool kSoftmax>
std::unique_ptr<Kernel> PrepareLossFloat(const KernelCtx &c, std::string *reason) {
  Reduction r;
  bool has_ii;
  int64_t ii;
  if (!ReadReduction(*c.node, &r, reason) || !ReadIgnoreIndex(*c.node, &has_ii, &ii, reason)) return nullptr;
  const auto &xd = c.in[0]->dims;
  const int64_t n = xd[0], cls = xd[1], inner = DimsProduct(xd, 2, xd.size());
  switch (c.in[0]->dtype) {
    case ElemType::kFloat: return MakeLoss<float, kSoftmax>(c, n, cls, inner, r, has_ii, ii);
    case ElemType::kDouble: return MakeLoss<double, kSoftmax>(c, n, cls, inner, r, has_ii, ii);
    default: *reason = DtypeNotSupported(c.in[0]->dtype); return nullptr;
  }
}

template <bool kSoftmax>
std::unique_ptr<Kernel> PrepareLoss(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareLossFloat<kSoftmax>, reason) : PrepareLossFloat<kSoftmax>(c, reason);
}

}  // namespace

void RegisterLossOps(std::vector<OpDef> *ops) {
  ops->push_back({"NegativeLogLikelihoodLoss", 2, 3, 1, 1, CheckLoss, InferLoss, PrepareLoss<false>, true});
  ops->push_back({"SoftmaxCrossEntropyLoss", 2, 3, 1, 2, CheckLoss, InferLoss, PrepareLoss<true>, true});
}

}  // namespace onnx
}  // namespace twin
