// Softmax and LogSoftmax: opset >= 13 normalise along one axis (default -1); opset < 13 coerce the input to 2-D
// at `axis` (default 1) and normalise each row. float16/bfloat16 run through float32.
// Kernel loops: -O3 vectorisation (beyond -O2's very-cheap cost model) and no FP-trap semantics, so that
// selects and divisions in them can be if-converted. Before the includes, so inline helpers get it too.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "elem.h"
#include "intra_op.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

// Elements of (Log)Softmax worth a helper of the intra-op pool: ~25 us of one core (1M float32 measured ~0.35 ms).
// The pool gets whole outer slices (rows, or [n, inner] blocks), each computed by the same code whoever runs it.
constexpr int64_t kSoftmaxGrain = int64_t(1) << 16;

bool ReadAxis(const Node &n, int64_t opset, int64_t *axis, std::string *reason) {
  return AttrInt(n, "axis", opset >= 13 ? -1 : 1, axis, reason);
}

bool CheckSoftmax(const Node &n, int64_t opset, std::string *reason) {
  int64_t axis;
  return ReadAxis(n, opset, &axis, reason);
}

bool InferSoftmax(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsFloatType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t axis, norm;
  if (!ReadAxis(*c->node, c->opset, &axis, reason)) return false;
  // opset < 13 coerces to 2-D, where axis == rank is meaningful ([N, 1]).
  if (!NormalizeAxis(axis, static_cast<int64_t>(x.dims.size()), c->opset < 13, &norm, reason)) return false;
  c->out[0] = x;
  return true;
}

template <class T, bool kLog>
class SoftmaxKernel : public Kernel {
 public:
  SoftmaxKernel(int64_t outer, int64_t n, int64_t inner)
      : outer_(outer), n_(n), inner_(inner), mx_(inner), sum_(inner) {}
  // Softmax reads a row's x (its max) before writing it, then x[k] before y[k] (the exps) and only y after that:
  // in place is safe. LogSoftmax's last pass reads x again after the exps were stored in y.
  bool InPlaceOver(size_t i) const override { return i == 0 && !kLog; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if (n_ == 0) return true;
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    const int64_t slice = n_ * inner_;
    if constexpr (std::is_same<T, float>::value) {
      ParallelForAnyCut(outer_, std::max<int64_t>(1, kSoftmaxGrain / slice), [&](int64_t b, int64_t e) {
        if (inner_ == 1) {
          vmath::SoftmaxRows(x + b * slice, y + b * slice, e - b, n_, kLog);  // contiguous rows: the fused kernel
        } else {  // inner index in the vector lanes
          vmath::SoftmaxStridedRows(x + b * slice, y + b * slice, e - b, n_, inner_, kLog);
        }
      });
      return true;
    } else {
      if (inner_ == 1) {
        ParallelForAnyCut(outer_, std::max<int64_t>(1, kSoftmaxGrain / slice),
                          [&](int64_t b, int64_t e) { RowsDouble(x + b * slice, y + b * slice, e - b); });
        return true;
      }
      return RunDouble(x, y);
    }
  }

 private:
  bool RunDouble(const T *x, T *y) {  // float64 along a strided axis (contiguous rows split above)
    for (int64_t o = 0; o < outer_; ++o) {
      const T *xo = x + o * n_ * inner_;
      T *yo = y + o * n_ * inner_;
      // All inner lanes advance together so memory is read row by row.
      std::copy(xo, xo + inner_, mx_.begin());
      for (int64_t k = 1; k < n_; ++k)
        for (int64_t j = 0; j < inner_; ++j) mx_[j] = std::max(mx_[j], xo[k * inner_ + j]);
      std::fill(sum_.begin(), sum_.end(), T(0));
      for (int64_t k = 0; k < n_; ++k) {
        const T *xr = xo + k * inner_;
        T *yr = yo + k * inner_;
        // exps by the vectorised array kernel over the row of inner lanes (xr is read before yr is written)
        for (int64_t j = 0; j < inner_; ++j) yr[j] = xr[j] - mx_[j];
        vmath::ExpDoubleArray(yr, yr, inner_);
        for (int64_t j = 0; j < inner_; ++j) sum_[j] += yr[j];
      }
      if constexpr (kLog) {
        // (x - max) - log(sum): x - max is exact near the max, where x - (max + log(sum)) would cancel
        for (int64_t j = 0; j < inner_; ++j) sum_[j] = std::log(sum_[j]);
        for (int64_t k = 0; k < n_; ++k)
          for (int64_t j = 0; j < inner_; ++j) yo[k * inner_ + j] = (xo[k * inner_ + j] - mx_[j]) - sum_[j];
      } else {
        for (int64_t j = 0; j < inner_; ++j) sum_[j] = T(1) / sum_[j];
        for (int64_t k = 0; k < n_; ++k)
          for (int64_t j = 0; j < inner_; ++j) yo[k * inner_ + j] *= sum_[j];
      }
    }
    return true;
  }
  // Contiguous float64 rows: max, x - max, the exps by the array kernel, a sum in 8 partial lanes (vectorised),
  // then the scaling (or the log-sum subtraction). Each pass reads x[k] before it writes y[k].
  void RowsDouble(const T *x, T *y, int64_t rows) const {
    for (int64_t o = 0; o < rows; ++o) {
      const double *xr = x + o * n_;
      double *yr = y + o * n_;
      double mx = xr[0];
      for (int64_t k = 1; k < n_; ++k) mx = std::max(mx, xr[k]);
      for (int64_t k = 0; k < n_; ++k) yr[k] = xr[k] - mx;
      vmath::ExpDoubleArray(yr, yr, n_);
      double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= n_; k += 8)
        for (int l = 0; l < 8; ++l) part[l] += yr[k + l];
      double sum = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
      for (; k < n_; ++k) sum += yr[k];
      if constexpr (kLog) {
        const double ls = std::log(sum);  // (subtracted after the max, as above)
        for (int64_t j = 0; j < n_; ++j) yr[j] = (xr[j] - mx) - ls;
      } else {
        const double inv = 1.0 / sum;
        for (int64_t j = 0; j < n_; ++j) yr[j] *= inv;
      }
    }
  }

  int64_t outer_, n_, inner_;
  std::vector<T> mx_, sum_;
};

template <bool kLog>
std::unique_ptr<Kernel> PrepareSoftmaxFloat(const KernelCtx &c, std::string *reason) {
  const auto &dims = c.in[0]->dims;
  int64_t axis, norm;
  if (!ReadAxis(*c.node, c.opset, &axis, reason)) return nullptr;
  if (!NormalizeAxis(axis, static_cast<int64_t>(dims.size()), c.opset < 13, &norm, reason)) return nullptr;
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < norm; ++i) outer *= dims[i];
  if (c.opset >= 13) {
    n = dims[norm];
    for (size_t i = norm + 1; i < dims.size(); ++i) inner *= dims[i];
  } else {
    for (size_t i = norm; i < dims.size(); ++i) n *= dims[i];
  }
  if (outer == 0 || n == 0 || inner == 0) outer = n = inner = 0;
  switch (c.out[0].dtype) {
    case ElemType::kFloat: return std::make_unique<SoftmaxKernel<float, kLog>>(outer, n, inner);
    case ElemType::kDouble: return std::make_unique<SoftmaxKernel<double, kLog>>(outer, n, inner);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

template <bool kLog>
std::unique_ptr<Kernel> PrepareSoftmax(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareSoftmaxFloat<kLog>, reason) : PrepareSoftmaxFloat<kLog>(c, reason);
}

}  // namespace

void RegisterSoftmaxOps(std::vector<OpDef> *ops) {
  ops->push_back({"Softmax", 1, 1, 1, 1, CheckSoftmax, InferSoftmax, PrepareSoftmax<false>, true});
  ops->push_back({"LogSoftmax", 1, 1, 1, 1, CheckSoftmax, InferSoftmax, PrepareSoftmax<true>, true});
}

}  // namespace onnx
}  // namespace twin
