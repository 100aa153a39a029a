// LpPool ((sum |x|^p over the window)^(1/p), padding contributing 0), GlobalLpPool (the same over all spatial
// dims) and MaxUnpool (scatter X to the flat indices MaxPool returned, inside a zero output of the inferred or
// given output_shape).
// float32/float64 natively; float16/bfloat16 through float32.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

constexpr size_t kSp = 3;

double LpPow(double v, double p) { return p == 2.0 ? v * v : p == 1.0 ? v : std::pow(v, p); }
double LpRoot(double sum, double p) { return p == 2.0 ? std::sqrt(sum) : p == 1.0 ? sum : std::pow(sum, 1.0 / p); }

struct PoolGeom {
  size_t nsp = 0;
  int64_t nc = 0;  // N * C
  int64_t in[kSp] = {1, 1, 1}, out[kSp] = {1, 1, 1}, k[kSp] = {1, 1, 1};
  int64_t s[kSp] = {1, 1, 1}, d[kSp] = {1, 1, 1}, pb[kSp] = {0, 0, 0};
};

bool KernelShape(const Node &n, size_t nsp, std::vector<int64_t> *ks, std::string *reason) {
  bool present;
  if (!AttrInts(n, "kernel_shape", ks, &present, reason)) return false;
  if (!present || ks->size() != nsp) {
    *reason = "attribute 'kernel_shape' must be given with one value per spatial dim (" + std::to_string(nsp) + ")";
    return false;
  }
  for (int64_t k : *ks)
    if (k <= 0) {
      *reason = "attribute 'kernel_shape' values must be positive";
      return false;
    }
  return true;
}

bool LpGeometry(const Node &node, const Dims &x, PoolGeom *g, std::string *reason) {
  if (x.size() < 3 || x.size() > 5) {
    *reason = "input " + ShapeStr(x) + " must be [N, C, d1(, d2(, d3))]";
    return false;
  }
  const size_t nsp = x.size() - 2, off = kSp - nsp;
  g->nsp = nsp;
  g->nc = x[0] < 0 || x[1] < 0 ? -1 : x[0] * x[1];
  std::vector<int64_t> ks, st, dl, pads;
  int64_t ceil_mode;
  std::string mode;
  if (!KernelShape(node, nsp, &ks, reason) || !ReadIntsAttr(node, "strides", nsp, 1, &st, nullptr, reason) ||
      !ReadIntsAttr(node, "dilations", nsp, 1, &dl, nullptr, reason) ||
      !ReadIntsAttr(node, "pads", 2 * nsp, 0, &pads, nullptr, reason) ||
      !AttrInt(node, "ceil_mode", 0, &ceil_mode, reason) || !ReadAutoPad(node, &mode, reason))
    return false;
  constexpr int64_t kMaxLpTaps = int64_t(1) << 24;
  int64_t taps = 1;
  for (size_t i = 0; i < nsp; ++i) {
    if (st[i] <= 0 || dl[i] <= 0 || pads[i] < 0 || pads[i + nsp] < 0) {
      *reason = "strides and dilations must be positive and pads nonnegative";
      return false;
    }
    // As MaxPool and AveragePool: bounded arithmetic (the window wrapped, and the kernel looped for ever), and
    // windows of at most 2^24 taps.
    if (pads[i] > kMaxElements || pads[i + nsp] > kMaxElements || ks[i] - 1 > (kMaxElements - 1) / dl[i]) {
      *reason = "pads and the dilated kernel extent (kernel_shape - 1) * dilations + 1 must be at most 2^40";
      return false;
    }
    taps = ks[i] > kMaxLpTaps / taps ? kMaxLpTaps + 1 : taps * ks[i];
    if (taps > kMaxLpTaps) {
      *reason = "kernel_shape " + ShapeStr(ks) + " has more taps than the twin pools over (at most 2^24)";
      return false;
    }
    const int64_t in = x[2 + i], span = (ks[i] - 1) * dl[i] + 1;
    g->in[off + i] = in;
    g->k[off + i] = ks[i];
    g->s[off + i] = st[i];
    g->d[off + i] = dl[i];
    if (in < 0) {
      g->out[off + i] = -1;
      continue;
    }
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      const int64_t out = in / st[i] + (in % st[i] != 0);
      const int64_t total = std::max<int64_t>(0, (out - 1) * st[i] + span - in);
      g->pb[off + i] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      g->out[off + i] = out;
      continue;
    }
    const int64_t pb = mode == "VALID" ? 0 : pads[i], pe = mode == "VALID" ? 0 : pads[i + nsp];
    const int64_t room = in + pb + pe - span;
    // ceil_mode: a window wider than the padded input by less than a stride still gives one output (as MaxPool)
    if (room < 0 && !(ceil_mode && room > -st[i])) {
      *reason = "the pooling window " + std::to_string(span) + " is larger than the padded input";
      return false;
    }
    int64_t out = room < 0 ? 1 : (ceil_mode ? room / st[i] + (room % st[i] != 0) : room / st[i]) + 1;
    if (ceil_mode && (out - 1) * st[i] >= in + pb) --out;  // the last window must start inside input or left pad
    g->pb[off + i] = pb;
    g->out[off + i] = out;
  }
  return true;
}

bool InferLpPool(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  int64_t p;
  if (!IsFloatType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  if (!AttrInt(*c->node, "p", 2, &p, reason)) return false;
  if (p <= 0) {
    *reason = "attribute 'p' must be positive";
    return false;
  }
  if (x.IsUnknownRank()) {
    c->out[0] = x;
    return true;
  }
  PoolGeom g;
  if (!LpGeometry(*c->node, x.dims, &g, reason)) return false;
  c->out[0] = TensorDesc{x.dtype, {x.dims[0], x.dims[1]}};
  for (size_t i = kSp - g.nsp; i < kSp; ++i) c->out[0].dims.push_back(g.out[i]);
  return true;
}

template <class T>
class LpPoolKernel : public Kernel {
 public:
  LpPoolKernel(const PoolGeom &g, int64_t p) : g_(g), p_(static_cast<double>(p)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    const int64_t kin = g_.in[0] * g_.in[1] * g_.in[2], kout = g_.out[0] * g_.out[1] * g_.out[2];
    for (int64_t nc = 0; nc < g_.nc; ++nc)
      for (int64_t o0 = 0; o0 < g_.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g_.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g_.out[2]; ++o2) {
            double sum = 0;
            for (int64_t k0 = 0; k0 < g_.k[0]; ++k0) {
              const int64_t i0 = o0 * g_.s[0] + k0 * g_.d[0] - g_.pb[0];
              if (i0 < 0 || i0 >= g_.in[0]) continue;
              for (int64_t k1 = 0; k1 < g_.k[1]; ++k1) {
                const int64_t i1 = o1 * g_.s[1] + k1 * g_.d[1] - g_.pb[1];
                if (i1 < 0 || i1 >= g_.in[1]) continue;
                for (int64_t k2 = 0; k2 < g_.k[2]; ++k2) {
                  const int64_t i2 = o2 * g_.s[2] + k2 * g_.d[2] - g_.pb[2];
                  if (i2 < 0 || i2 >= g_.in[2]) continue;
                  sum += LpPow(std::fabs(static_cast<double>(x[nc * kin + (i0 * g_.in[1] + i1) * g_.in[2] + i2])), p_);
                }
              }
            }
            y[nc * kout + (o0 * g_.out[1] + o1) * g_.out[2] + o2] = static_cast<T>(LpRoot(sum, p_));
          }
    return true;
  }

 private:
  PoolGeom g_;
  double p_;
};

std::unique_ptr<Kernel> PrepareLpPoolFloat(const KernelCtx &c, std::string *reason) {
  PoolGeom g;
  int64_t p;
  if (!AttrInt(*c.node, "p", 2, &p, reason) || !LpGeometry(*c.node, c.in[0]->dims, &g, reason)) return nullptr;
  if (c.in[0]->dtype == ElemType::kFloat) return std::make_unique<LpPoolKernel<float>>(g, p);
  if (c.in[0]->dtype == ElemType::kDouble) return std::make_unique<LpPoolKernel<double>>(g, p);
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

std::unique_ptr<Kernel> PrepareLpPool(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareLpPoolFloat, reason) : PrepareLpPoolFloat(c, reason);
}

// ---- GlobalLpPool: LpPool over all spatial dims ----

// Its p: an int from opset 2, a float in opset 1.
bool GlobalLpP(const Node &n, int64_t opset, double *p, std::string *reason) {
  if (opset < 2) {
    float f;
    if (!AttrFloat(n, "p", 2.0f, &f, reason)) return false;
    *p = f;
  } else {
    int64_t i;
    if (!AttrInt(n, "p", 2, &i, reason)) return false;
    *p = static_cast<double>(i);
  }
  if (!(*p > 0)) {
    *reason = "attribute 'p' must be positive";
    return false;
  }
  return true;
}

bool InferGlobalLpPool(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  double p;
  if (!IsFloatType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  if (!GlobalLpP(*c->node, c->opset, &p, reason)) return false;
  c->out[0] = x;
  if (x.IsUnknownRank()) return true;
  if (x.dims.size() < 2) {
    *reason = "input must be (N, C, ...), got " + DescStr(x);
    return false;
  }
  for (size_t i = 2; i < x.dims.size(); ++i) c->out[0].dims[i] = 1;
  return true;
}

template <class T>
class GlobalLpKernel : public Kernel {
 public:
  GlobalLpKernel(int64_t rows, int64_t n, double p) : rows_(rows), n_(n), p_(p) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    for (int64_t r = 0; r < rows_; ++r) {
      double sum = 0;  // in double, as LpPool: a long row of float32 would lose its small terms
      const T *row = x + r * n_;
      if (p_ == 2.0) {
        for (int64_t i = 0; i < n_; ++i) sum += static_cast<double>(row[i]) * static_cast<double>(row[i]);
      } else {
        for (int64_t i = 0; i < n_; ++i) sum += LpPow(std::fabs(static_cast<double>(row[i])), p_);
      }
      y[r] = static_cast<T>(LpRoot(sum, p_));
    }
    return true;
  }

 private:
  int64_t rows_, n_;
  double p_;
};

std::unique_ptr<Kernel> PrepareGlobalLpPoolFloat(const KernelCtx &c, std::string *reason) {
  double p;
  if (!GlobalLpP(*c.node, c.opset, &p, reason)) return nullptr;
  const auto &d = c.in[0]->dims;
  const int64_t rows = d[0] * d[1];
  const int64_t n = rows ? c.in[0]->NumElements() / rows : 0;
  if (c.in[0]->dtype == ElemType::kFloat) return std::make_unique<GlobalLpKernel<float>>(rows, n, p);
  if (c.in[0]->dtype == ElemType::kDouble) return std::make_unique<GlobalLpKernel<double>>(rows, n, p);
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

std::unique_ptr<Kernel> PrepareGlobalLpPool(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareGlobalLpPoolFloat, reason)
                         : PrepareGlobalLpPoolFloat(c, reason);
}

// ---- MaxUnpool ----

// The unpooled shape (N, C, (in - 1) * stride - pads + kernel) that the indices address.
bool UnpoolShape(const Node &node, const Dims &x, std::vector<int64_t> *shape, std::string *reason) {
  if (x.size() < 3 || x.size() > 5) {
    *reason = "input " + ShapeStr(x) + " must be [N, C, d1(, d2(, d3))]";
    return false;
  }
  const size_t nsp = x.size() - 2;
  std::vector<int64_t> ks, st, pads;
  if (!KernelShape(node, nsp, &ks, reason) || !ReadIntsAttr(node, "strides", nsp, 1, &st, nullptr, reason) ||
      !ReadIntsAttr(node, "pads", 2 * nsp, 0, &pads, nullptr, reason))
    return false;
  *shape = {x[0], x[1]};
  for (size_t i = 0; i < nsp; ++i) {
    if (st[i] <= 0 || pads[i] < 0 || pads[i + nsp] < 0) {
      *reason = "strides must be positive and pads nonnegative";
      return false;
    }
    const int64_t v = x[2 + i] < 0 ? -1 : (x[2 + i] - 1) * st[i] - pads[i] - pads[i + nsp] + ks[i];
    if (x[2 + i] >= 0 && v < 0) {
      *reason = "pads are larger than the unpooled size";
      return false;
    }
    shape->push_back(v);
  }
  return true;
}

bool InferMaxUnpool(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &idx = *c->in[1];
  if (!IsFloatType(x.dtype) || idx.dtype != ElemType::kInt64) {
    *reason = "X must be a floating tensor and I int64, not " + std::string(ElemTypeName(x.dtype)) + " / " +
              ElemTypeName(idx.dtype);
    return false;
  }
  if (x.IsUnknownRank()) {
    c->out[0] = x;
    return true;
  }
  std::vector<int64_t> shape;
  if (!UnpoolShape(*c->node, x.dims, &shape, reason)) return false;
  if (!idx.IsUnknownRank() && idx.dims.size() != x.dims.size()) {
    *reason = "I " + DescStr(idx) + " must have X's shape " + ShapeStr(x.dims);
    return false;
  }
  c->out[0].dtype = x.dtype;
  if (!c->has(2)) {
    c->out[0].dims = shape;
    return true;
  }
  std::vector<int64_t> given;
  const ValueState st = ReadIntsInput(c, 2, &given, reason);
  if (st == ValueState::kError) return false;
  if (st == ValueState::kUnknown) {
    c->out[0].dims.assign(x.dims.size(), -1);
    return true;
  }
  if (given.size() != shape.size()) {
    *reason = "output_shape has " + std::to_string(given.size()) + " values, expected " + std::to_string(shape.size());
    return false;
  }
  for (size_t i = 0; i < given.size(); ++i)
    if (given[i] < 0 || (shape[i] >= 0 && given[i] < shape[i])) {
      *reason = "output_shape " + ShapeStr(given) + " is smaller than the unpooled shape " + ShapeStr(shape);
      return false;
    }
  c->out[0].dims = given;
  return true;
}

template <class T>
class MaxUnpoolKernel : public Kernel {
 public:
  MaxUnpoolKernel(int64_t n_in, std::vector<int64_t> inferred, std::vector<int64_t> out)
      : n_in_(n_in), inferred_(std::move(inferred)), out_(std::move(out)) {
    n_inf_ = DimsProduct(inferred_, 0, inferred_.size());
    n_out_ = DimsProduct(out_, 0, out_.size());
    ostr_ = Strides(out_);
  }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const T *x = static_cast<const T *>(in[0]);
    const int64_t *idx = static_cast<const int64_t *>(in[1]);
    T *y = static_cast<T *>(out[0]);
    std::fill(y, y + n_out_, T(0));
    for (int64_t i = 0; i < n_in_; ++i) {
      int64_t f = idx[i];
      if (f < 0 || f >= n_inf_) {
        *reason = "index " + std::to_string(f) + " is outside the unpooled tensor of " + std::to_string(n_inf_) +
                  " elements";
        return false;
      }
      int64_t o = 0;  // the same coordinates in the (larger or equal) output
      for (size_t d = inferred_.size(); d-- > 0;) {
        o += (f % inferred_[d]) * ostr_[d];
        f /= inferred_[d];
      }
      y[o] = x[i];
    }
    return true;
  }

 private:
  int64_t n_in_, n_inf_ = 0, n_out_ = 0;
  std::vector<int64_t> inferred_, out_, ostr_;
};

std::unique_ptr<Kernel> PrepareMaxUnpoolFloat(const KernelCtx &c, std::string *reason) {
  std::vector<int64_t> shape;
  if (!UnpoolShape(*c.node, c.in[0]->dims, &shape, reason)) return nullptr;
  if (c.in[1]->dims != c.in[0]->dims) {
    *reason = "I " + DescStr(*c.in[1]) + " must have X's shape " + ShapeStr(c.in[0]->dims);
    return nullptr;
  }
  const int64_t n = c.in[0]->NumElements();
  if (c.in[0]->dtype == ElemType::kFloat) return std::make_unique<MaxUnpoolKernel<float>>(n, shape, c.out[0].dims);
  if (c.in[0]->dtype == ElemType::kDouble) return std::make_unique<MaxUnpoolKernel<double>>(n, shape, c.out[0].dims);
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

std::unique_ptr<Kernel> PrepareMaxUnpool(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareMaxUnpoolFloat, reason) : PrepareMaxUnpoolFloat(c, reason);
}

}  // namespace

void RegisterLpPoolOps(std::vector<OpDef> *ops) {
  ops->push_back({"LpPool", 1, 1, 1, 1, nullptr, InferLpPool, PrepareLpPool, true});
  ops->push_back({"GlobalLpPool", 1, 1, 1, 1, nullptr, InferGlobalLpPool, PrepareGlobalLpPool, true});
  ops->push_back({"MaxUnpool", 2, 3, 1, 1, nullptr, InferMaxUnpool, PrepareMaxUnpool, true});
}

}  // namespace onnx
}  // namespace twin
