// Small operators: the window functions (HannWindow, HammingWindow, BlackmanWindow), NonZero, Compress,
// ReverseSequence, CenterCropPad and Det. The windows' length, NonZero's / Compress's output sizes and CenterCropPad's
// shape depend on input contents: known at compile time (constants, or inputs bound by a value-dependent plan).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

// ---- Windows ----

enum class Window { kHann, kHamming, kBlackman };

template <Window W>
double WindowValue(int64_t n, double denom) {
  const double pi = 3.14159265358979323846;
  const double x = static_cast<double>(n) / denom;
  if (W == Window::kHann) {
    const double s = std::sin(pi * x);
    return s * s;
  }
  if (W == Window::kHamming) return 25.0 / 46.0 - std::cos(2 * pi * x) * (1 - 25.0 / 46.0);
  return 0.42 - 0.5 * std::cos(2 * pi * x) + 0.08 * std::cos(4 * pi * x);
}

bool WindowDtype(const Node &n, ElemType *t, std::string *reason) {
  int64_t dt;
  if (!AttrInt(n, "output_datatype", 1, &dt, reason)) return false;
  if (!OnnxTypeToElemType(dt, t) || !IsNumericType(*t)) {
    *reason = "output_datatype " + std::string(OnnxTypeName(dt)) + " is not supported";
    return false;
  }
  return true;
}

bool InferWindow(InferCtx *c, std::string *reason) {
  ElemType t;
  if (!WindowDtype(*c->node, &t, reason)) return false;
  if (!IsIntType(c->in[0]->dtype)) {
    *reason = "input 'size' must be an integer scalar, got " + DescStr(*c->in[0]);
    return false;
  }
  double size = 0;
  const ValueState st = ReadScalarInput(c, 0, &size, reason);
  if (st == ValueState::kError) return false;
  if (st == ValueState::kUnknown) {
    c->out[0] = {t, {-1}};
    return true;
  }
  if (size < 0) {
    *reason = "input 'size' is negative (" + std::to_string(static_cast<int64_t>(size)) + ")";
    return false;
  }
  c->out[0] = {t, {static_cast<int64_t>(size)}};
  return true;
}

template <Window W>
class WindowKernel : public Kernel {
 public:
  WindowKernel(ElemType t, int64_t n, bool periodic) : t_(t), n_(n), periodic_(periodic) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    const double denom = static_cast<double>(periodic_ ? n_ : n_ - 1);
    VisitType(t_, [&](auto tag) {
      using S = decltype(tag);
      using C = typename Num<S>::C;
      S *y = static_cast<S *>(out[0]);
      for (int64_t i = 0; i < n_; ++i) y[i] = Num<S>::Store(static_cast<C>(WindowValue<W>(i, denom)));
    });
    return true;
  }

 private:
  ElemType t_;
  int64_t n_;
  bool periodic_;
};

template <Window W>
std::unique_ptr<Kernel> PrepareWindow(const KernelCtx &c, std::string *reason) {
  int64_t periodic;
  if (!AttrInt(*c.node, "periodic", 1, &periodic, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new WindowKernel<W>(c.out[0].dtype, c.out[0].dims[0], periodic != 0));
}

// ---- NonZero ----

// Flat positions of the non-zero elements (NaN counts as non-zero, as in numpy).
bool NonZeroPositions(const TensorDesc &d, const void *p, std::vector<int64_t> *pos) {
  pos->clear();
  const int64_t n = d.NumElements();
  return VisitType(d.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S *x = static_cast<const S *>(p);
    for (int64_t i = 0; i < n; ++i)
      if (Num<S>::Load(x[i]) != 0 || Num<S>::Load(x[i]) != Num<S>::Load(x[i])) pos->push_back(i);
  });
}

// The contents of input i are needed now: records the missing input when compiling.
bool NeedContents(InferCtx *c, size_t i, const char *what, bool *known, std::string *reason) {
  *known = c->in_data[i] && c->in[i]->IsStatic();
  if (*known || !c->need_static) return true;
  c->missing_input = static_cast<int>(i);
  *reason = "input '" + c->node->input_names[i] + "' is not a compile-time constant, and " + what + " depends on it";
  return false;
}

bool InferNonZero(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  bool known;
  if (!NeedContents(c, 0, "the number of non-zero elements", &known, reason)) return false;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (!known) {
    c->out[0] = {ElemType::kInt64, {rank, -1}};
    return true;
  }
  std::vector<int64_t> pos;
  if (!NonZeroPositions(x, c->in_data[0], &pos)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  c->out[0] = {ElemType::kInt64, {rank, static_cast<int64_t>(pos.size())}};
  return true;
}

class NonZeroKernel : public Kernel {
 public:
  explicit NonZeroKernel(TensorDesc x) : x_(std::move(x)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    NonZeroPositions(x_, in[0], &pos_);
    const std::vector<int64_t> strides = Strides(x_.dims);
    int64_t *y = static_cast<int64_t *>(out[0]);
    const size_t nnz = pos_.size();
    for (size_t k = 0; k < nnz; ++k) {
      int64_t rem = pos_[k];
      for (size_t d = 0; d < strides.size(); ++d) {
        y[d * nnz + k] = strides[d] ? rem / strides[d] : 0;
        rem -= y[d * nnz + k] * strides[d];
      }
    }
    return true;
  }

 private:
  TensorDesc x_;
  std::vector<int64_t> pos_;
};

std::unique_ptr<Kernel> PrepareNonZero(const KernelCtx &c, std::string *) {
  return std::unique_ptr<Kernel>(new NonZeroKernel(*c.in[0]));
}

// ---- Compress ----

struct CompressGeom {
  bool flat = true;
  size_t outer = 1, len = 0, inner = 1;  // x seen as [outer, len, inner] (flat: [1, numel, 1])
};

bool CompressShape(const InferCtx &c, CompressGeom *g, int64_t *axis_out, std::string *reason) {
  const TensorDesc &x = *c.in[0], &cond = *c.in[1];
  if (cond.dtype != ElemType::kBool || cond.dims.size() != 1) {
    *reason = "input 'condition' must be a 1-D bool tensor, got " + DescStr(cond);
    return false;
  }
  const Attribute *a = c.node->FindAttr("axis");
  g->flat = a == nullptr;
  *axis_out = -1;
  if (g->flat) {
    g->len = static_cast<size_t>(std::max<int64_t>(x.NumElements(), 0));
    return true;
  }
  int64_t axis;
  if (!NormalizeAxis(a->i, static_cast<int64_t>(x.dims.size()), false, &axis, reason)) return false;
  *axis_out = axis;
  for (int64_t d = 0; d < axis; ++d) g->outer *= static_cast<size_t>(std::max<int64_t>(x.dims[d], 0));
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.dims.size(); ++d)
    g->inner *= static_cast<size_t>(std::max<int64_t>(x.dims[d], 0));
  g->len = static_cast<size_t>(std::max<int64_t>(x.dims[axis], 0));
  return true;
}

bool InferCompress(InferCtx *c, std::string *reason) {
  if (!AnyDtype(c->in[0]->dtype, reason)) return false;
  CompressGeom g;
  int64_t axis;
  if (!CompressShape(*c, &g, &axis, reason)) return false;
  bool known;
  if (!NeedContents(c, 1, "the output size", &known, reason)) return false;
  int64_t kept = -1;
  if (known && c->in[0]->IsStatic()) {
    const uint8_t *m = static_cast<const uint8_t *>(c->in_data[1]);
    const size_t n = static_cast<size_t>(c->in[1]->NumElements());
    kept = 0;
    for (size_t i = 0; i < n && i < g.len; ++i) kept += m[i] != 0;
  }
  c->out[0].dtype = c->in[0]->dtype;
  if (g.flat) {
    c->out[0].dims = {kept};
  } else {
    c->out[0].dims = c->in[0]->dims;
    c->out[0].dims[axis] = kept;
  }
  return true;
}

class CompressKernel : public Kernel {
 public:
  CompressKernel(CompressGeom g, size_t esize, size_t cond_len) : g_(g), esize_(esize), cond_len_(cond_len) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const uint8_t *x = static_cast<const uint8_t *>(in[0]), *m = static_cast<const uint8_t *>(in[1]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    const size_t row = g_.inner * esize_, n = std::min(cond_len_, g_.len);
    for (size_t o = 0; o < g_.outer; ++o)
      for (size_t i = 0; i < n; ++i)
        if (m[i]) {
          CopyBytes(y, x + (o * g_.len + i) * row, row);
          y += row;
        }
    return true;
  }

 private:
  CompressGeom g_;
  size_t esize_, cond_len_;
};

std::unique_ptr<Kernel> PrepareCompress(const KernelCtx &c, std::string *reason) {
  InferCtx ic = c.AsInferCtx();
  CompressGeom g;
  int64_t axis;
  if (!CompressShape(ic, &g, &axis, reason)) return nullptr;
  return std::unique_ptr<Kernel>(
      new CompressKernel(g, ElemSize(c.in[0]->dtype), static_cast<size_t>(c.in[1]->NumElements())));
}

// ---- ReverseSequence ----

bool ReverseAxes(const Node &n, size_t rank, int64_t *batch, int64_t *time, std::string *reason) {
  int64_t b, t;
  if (!AttrInt(n, "batch_axis", 1, &b, reason) || !AttrInt(n, "time_axis", 0, &t, reason)) return false;
  if (rank < 2 || (b != 0 && b != 1) || (t != 0 && t != 1) || b == t) {
    *reason = "batch_axis and time_axis must be 0 and 1 (either way round) of an input of rank >= 2";
    return false;
  }
  *batch = b, *time = t;
  return true;
}

bool InferReverseSequence(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &lens = *c->in[1];
  int64_t b, t;
  if (!AnyDtype(x.dtype, reason) || !ReverseAxes(*c->node, x.dims.size(), &b, &t, reason)) return false;
  if ((lens.dtype != ElemType::kInt64 && lens.dtype != ElemType::kInt32) || lens.dims.size() != 1 ||
      (lens.dims[0] >= 0 && x.dims[b] >= 0 && lens.dims[0] != x.dims[b])) {
    *reason = "input 'sequence_lens' must be int32/int64 of shape [batch], got " + DescStr(lens) + " for input " +
              DescStr(x);
    return false;
  }
  c->out[0] = x;
  return true;
}

class ReverseSequenceKernel : public Kernel {
 public:
  ReverseSequenceKernel(const TensorDesc &x, ElemType lens_type, int64_t batch_axis)
      : lens_type_(lens_type), batch_first_(batch_axis == 0), esize_(ElemSize(x.dtype)) {
    d0_ = x.dims[0], d1_ = x.dims[1];
    inner_ = static_cast<size_t>(DimsProduct(x.dims, 2, x.dims.size())) * esize_;
  }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const uint8_t *x = static_cast<const uint8_t *>(in[0]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    const int64_t batches = batch_first_ ? d0_ : d1_, steps = batch_first_ ? d1_ : d0_;
    for (int64_t b = 0; b < batches; ++b) {
      int64_t len = lens_type_ == ElemType::kInt64 ? static_cast<const int64_t *>(in[1])[b]
                                                   : static_cast<const int32_t *>(in[1])[b];
      if (len < 0 || len > steps) {
        *reason = "sequence_lens[" + std::to_string(b) + "] = " + std::to_string(len) + " is outside [0, " +
                  std::to_string(steps) + "]";
        return false;
      }
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t src_t = t < len ? len - 1 - t : t;
        CopyBytes(y + Offset(b, t), x + Offset(b, src_t), inner_);
      }
    }
    return true;
  }

 private:
  size_t Offset(int64_t b, int64_t t) const {
    const int64_t i0 = batch_first_ ? b : t, i1 = batch_first_ ? t : b;
    return static_cast<size_t>(i0 * d1_ + i1) * inner_;
  }
  ElemType lens_type_;
  bool batch_first_;
  size_t esize_, inner_ = 0;
  int64_t d0_ = 0, d1_ = 0;
};

std::unique_ptr<Kernel> PrepareReverseSequence(const KernelCtx &c, std::string *reason) {
  int64_t b, t;
  if (!ReverseAxes(*c.node, c.in[0]->dims.size(), &b, &t, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new ReverseSequenceKernel(*c.in[0], c.in[1]->dtype, b));
}

// ---- CenterCropPad ----

// Per axis: output dim, and the source / destination offsets and length of the centred region both share.
struct CropPadAxis {
  int64_t out = 0, src = 0, dst = 0, count = 0;
};

bool CropPadAxes(InferCtx *c, std::vector<CropPadAxis> *ax, bool *unknown, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  std::vector<int64_t> shape, axes;
  const ValueState st = ReadIntsInput(c, 1, &shape, reason);
  if (st == ValueState::kError) return false;
  *unknown = st == ValueState::kUnknown;
  bool present = false;
  if (!AttrInts(*c->node, "axes", &axes, &present, reason)) return false;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (!present)
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  ax->assign(x.dims.size(), CropPadAxis());
  for (size_t d = 0; d < x.dims.size(); ++d) (*ax)[d] = {x.dims[d], 0, 0, x.dims[d]};
  if (*unknown) {
    for (int64_t a : axes) {
      int64_t n;
      if (!NormalizeAxis(a, rank, false, &n, reason)) return false;
      (*ax)[n].out = -1;
    }
    return true;
  }
  if (shape.size() != axes.size()) {
    *reason = "input 'shape' has " + std::to_string(shape.size()) + " values for " + std::to_string(axes.size()) +
              " axes";
    return false;
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t n;
    if (!NormalizeAxis(axes[k], rank, false, &n, reason)) return false;
    const int64_t dim = x.dims[n], want = shape[k];
    if (want < 0) {
      *reason = "input 'shape' holds negative size " + std::to_string(want);
      return false;
    }
    CropPadAxis &p = (*ax)[n];
    p.out = want;
    if (dim < 0) continue;
    p.count = std::min(dim, want);
    p.src = dim > want ? (dim - want) / 2 : 0;
    p.dst = want > dim ? (want - dim) / 2 : 0;
  }
  return true;
}

bool InferCenterCropPad(InferCtx *c, std::string *reason) {
  if (!AnyDtype(c->in[0]->dtype, reason)) return false;
  std::vector<CropPadAxis> ax;
  bool unknown;
  if (!CropPadAxes(c, &ax, &unknown, reason)) return false;
  c->out[0].dtype = c->in[0]->dtype;
  c->out[0].dims.clear();
  for (const CropPadAxis &p : ax) c->out[0].dims.push_back(p.out);
  return true;
}

class CenterCropPadKernel : public Kernel {
 public:
  CenterCropPadKernel(std::vector<CropPadAxis> ax, const TensorDesc &x, size_t out_bytes)
      : ax_(std::move(ax)), esize_(ElemSize(x.dtype)), out_bytes_(out_bytes), in_strides_(Strides(x.dims)) {
    std::vector<int64_t> out_dims;
    for (const CropPadAxis &p : ax_) out_dims.push_back(p.out);
    out_strides_ = Strides(out_dims);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if (out_bytes_) std::memset(out[0], 0, out_bytes_);
    const size_t r = ax_.size();
    for (const CropPadAxis &p : ax_)
      if (p.count <= 0) return true;
    if (r == 0) {
      CopyBytes(out[0], in[0], esize_);
      return true;
    }
    const uint8_t *x = static_cast<const uint8_t *>(in[0]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    std::vector<int64_t> idx(r, 0);  // over the shared region, innermost axis copied as one run
    const size_t run = static_cast<size_t>(ax_[r - 1].count) * esize_;
    for (;;) {
      int64_t si = 0, di = 0;
      for (size_t d = 0; d < r; ++d) {
        si += (ax_[d].src + idx[d]) * in_strides_[d];
        di += (ax_[d].dst + idx[d]) * out_strides_[d];
      }
      CopyBytes(y + di * static_cast<int64_t>(esize_), x + si * static_cast<int64_t>(esize_), run);
      size_t d = r - 1;
      for (;;) {
        if (d == 0) return true;
        --d;
        if (++idx[d] < ax_[d].count) break;
        idx[d] = 0;
      }
    }
  }

 private:
  std::vector<CropPadAxis> ax_;
  size_t esize_, out_bytes_;
  std::vector<int64_t> in_strides_, out_strides_;
};

std::unique_ptr<Kernel> PrepareCenterCropPad(const KernelCtx &c, std::string *reason) {
  InferCtx ic = c.AsInferCtx();
  std::vector<CropPadAxis> ax;
  bool unknown;
  if (!CropPadAxes(&ic, &ax, &unknown, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new CenterCropPadKernel(std::move(ax), *c.in[0], c.out[0].Bytes()));
}

// ---- Det ----

bool InferDet(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  const size_t r = x.dims.size();
  if (!IsFloatType(x.dtype) || r < 2 || (x.dims[r - 1] >= 0 && x.dims[r - 2] >= 0 && x.dims[r - 1] != x.dims[r - 2])) {
    *reason = "input must be a float tensor of square matrices [..., M, M], got " + DescStr(x);
    return false;
  }
  c->out[0] = {x.dtype, std::vector<int64_t>(x.dims.begin(), x.dims.end() - 2)};
  return true;
}

// LU decomposition with partial pivoting in double (numpy's det is LAPACK getrf).
double Determinant(std::vector<double> *a, int64_t m) {
  double det = 1;
  double *p = a->data();
  for (int64_t k = 0; k < m; ++k) {
    int64_t piv = k;
    for (int64_t i = k + 1; i < m; ++i)
      if (std::fabs(p[i * m + k]) > std::fabs(p[piv * m + k])) piv = i;
    if (p[piv * m + k] == 0) return 0;
    if (piv != k) {
      for (int64_t j = 0; j < m; ++j) std::swap(p[k * m + j], p[piv * m + j]);
      det = -det;
    }
    det *= p[k * m + k];
    for (int64_t i = k + 1; i < m; ++i) {
      const double f = p[i * m + k] / p[k * m + k];
      for (int64_t j = k + 1; j < m; ++j) p[i * m + j] -= f * p[k * m + j];
    }
  }
  return det;
}

class DetKernel : public Kernel {
 public:
  DetKernel(ElemType t, int64_t batch, int64_t m) : t_(t), batch_(batch), m_(m), a_(static_cast<size_t>(m * m)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    VisitType(t_, [&](auto tag) {
      using S = decltype(tag);
      using C = typename Num<S>::C;
      const S *x = static_cast<const S *>(in[0]);
      S *y = static_cast<S *>(out[0]);
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t i = 0; i < m_ * m_; ++i) a_[i] = static_cast<double>(Num<S>::Load(x[b * m_ * m_ + i]));
        y[b] = Num<S>::Store(static_cast<C>(Determinant(&a_, m_)));
      }
    });
    return true;
  }

 private:
  ElemType t_;
  int64_t batch_, m_;
  std::vector<double> a_;
};

std::unique_ptr<Kernel> PrepareDet(const KernelCtx &c, std::string *) {
  const TensorDesc &x = *c.in[0];
  const int64_t m = x.dims.back();
  return std::unique_ptr<Kernel>(new DetKernel(x.dtype, DimsProduct(x.dims, 0, x.dims.size() - 2), m));
}

}  // namespace

void RegisterMisc2Ops(std::vector<OpDef> *ops) {
  ops->push_back({"HannWindow", 1, 1, 1, 1, nullptr, InferWindow, PrepareWindow<Window::kHann>, true});
  ops->push_back({"HammingWindow", 1, 1, 1, 1, nullptr, InferWindow, PrepareWindow<Window::kHamming>, true});
  ops->push_back({"BlackmanWindow", 1, 1, 1, 1, nullptr, InferWindow, PrepareWindow<Window::kBlackman>, true});
  ops->push_back({"NonZero", 1, 1, 1, 1, nullptr, InferNonZero, PrepareNonZero, true});
  ops->push_back({"Compress", 2, 2, 1, 1, nullptr, InferCompress, PrepareCompress, true});
  ops->push_back({"ReverseSequence", 2, 2, 1, 1, nullptr, InferReverseSequence, PrepareReverseSequence, true});
  ops->push_back({"CenterCropPad", 2, 2, 1, 1, nullptr, InferCenterCropPad, PrepareCenterCropPad, true});
  ops->push_back({"Det", 1, 1, 1, 1, nullptr, InferDet, PrepareDet, true});
}

}  // namespace onnx
}  // namespace twin
