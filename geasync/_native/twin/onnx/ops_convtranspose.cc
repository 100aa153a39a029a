// ConvTranspose (1-D/2-D/3-D; strides, pads, auto_pad, output_padding, output_shape, dilations, group) as one GEMM
// per image and group (columns = W^T * X) followed by a col2im scatter-add. Padding follows the reference evaluator:
// explicit or zero pads unless auto_pad is SAME_UPPER/SAME_LOWER, where they come from the total padding.
// float32/float64 natively; float16/bfloat16 through float32.
// Kernel loops: -O3 vectorisation (the interleaving stores of the non-overlapping scatter). Before the includes.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#endif
#include <algorithm>

#include "elem.h"
#include "gemm.h"

namespace twin {
namespace onnx {
namespace {

constexpr size_t kSp = 3;  // spatial dims padded to 3 with size-1 dims

struct TGeom {
  size_t nsp = 0;
  int64_t n = 0, c = 0, m = 0, group = 1;
  int64_t in[kSp] = {1, 1, 1}, out[kSp] = {1, 1, 1}, k[kSp] = {1, 1, 1};
  int64_t s[kSp] = {1, 1, 1}, d[kSp] = {1, 1, 1}, pb[kSp] = {0, 0, 0};
};

// Geometry from X/W descs and attributes; unknown spatial input dims give -1 output dims.
bool TransposeGeometry(const Node &node, const TensorDesc &x, const TensorDesc &w, TGeom *g, std::string *reason) {
  if (x.dims.size() < 3 || x.dims.size() > 5 || w.dims.size() != x.dims.size()) {
    *reason = "X " + DescStr(x) + " must be [N, C, d1(, d2(, d3))] and W " + DescStr(w) + " of the same rank";
    return false;
  }
  const size_t nsp = x.dims.size() - 2;
  g->nsp = nsp;
  if (!AttrInt(node, "group", 1, &g->group, reason)) return false;
  g->n = x.dims[0];
  g->c = x.dims[1];
  if (g->group <= 0 || (g->c >= 0 && g->c % g->group != 0) || (w.dims[0] >= 0 && g->c >= 0 && w.dims[0] != g->c)) {
    *reason = "W " + ShapeStr(w.dims) + " must be [C, M / group, k...] with C = " + std::to_string(g->c) +
              " divisible by group = " + std::to_string(g->group);
    return false;
  }
  g->m = w.dims[1] < 0 ? -1 : w.dims[1] * g->group;
  std::vector<int64_t> ks, st, dl, op, os, pads;
  bool has_ks, has_os, has_pads;
  std::string mode;
  if (!ReadIntsAttr(node, "kernel_shape", nsp, 1, &ks, &has_ks, reason) ||
      !ReadIntsAttr(node, "strides", nsp, 1, &st, nullptr, reason) ||
      !ReadIntsAttr(node, "dilations", nsp, 1, &dl, nullptr, reason) ||
      !ReadIntsAttr(node, "output_padding", nsp, 0, &op, nullptr, reason) ||
      !ReadIntsAttr(node, "output_shape", nsp, 0, &os, &has_os, reason) ||
      !ReadIntsAttr(node, "pads", 2 * nsp, 0, &pads, &has_pads, reason) || !ReadAutoPad(node, &mode, reason))
    return false;
  const size_t off = kSp - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t kw = w.dims[2 + i];
    if (has_ks && kw >= 0 && ks[i] != kw) {
      *reason = "attribute 'kernel_shape' " + ShapeStr(ks) + " does not match W " + ShapeStr(w.dims);
      return false;
    }
    if (st[i] <= 0 || dl[i] <= 0 || op[i] < 0 || pads[i] < 0 || pads[i + nsp] < 0 || (has_os && os[i] < 0)) {
      *reason = "strides and dilations must be positive; pads, output_padding and output_shape nonnegative";
      return false;
    }
    if (op[i] >= std::max(st[i], dl[i])) {
      *reason = "attribute 'output_padding' " + ShapeStr(op) + " must be smaller than the stride or the dilation";
      return false;
    }
    const int64_t in = x.dims[2 + i];
    // Bounded so that the size arithmetic below cannot overflow (strides of 2^62 wrapped to odd sizes or none).
    const int64_t lim = kMaxElements;
    if (st[i] > lim || dl[i] > lim || op[i] > lim || pads[i] > lim || pads[i + nsp] > lim || (has_os && os[i] > lim) ||
        (kw > 1 && kw - 1 > (lim - 1) / dl[i]) || (in > 1 && st[i] > lim / (in - 1)) || (in > 0 && st[i] > lim / in)) {
      *reason = "strides, dilations, pads, output_padding, output_shape, the dilated kernel and the output's spatial "
                "size must each be at most 2^40";
      return false;
    }
    const int64_t span = kw < 0 ? -1 : (kw - 1) * dl[i] + 1;
    g->in[off + i] = in;
    g->k[off + i] = kw;
    g->s[off + i] = st[i];
    g->d[off + i] = dl[i];
    const int64_t full = in < 0 || span < 0 ? -1 : st[i] * (in - 1) + op[i] + span;
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      const int64_t want = has_os ? os[i] : (in < 0 ? -1 : in * st[i]);
      const int64_t total = full < 0 || want < 0 ? 0 : full - want;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor division, as the reference
      g->pb[off + i] = mode == "SAME_UPPER" ? half : total - half;
      g->out[off + i] = want;
    } else {
      const int64_t pb = mode == "VALID" ? 0 : pads[i], pe = mode == "VALID" ? 0 : pads[i + nsp];
      g->pb[off + i] = pb;
      g->out[off + i] = has_os ? os[i] : (full < 0 ? -1 : full - pb - pe);
    }
    if (g->out[off + i] < -1 || (g->out[off + i] == -1 && full >= 0)) {
      *reason = "the output's spatial size would be negative (pads too large)";
      return false;
    }
  }
  return true;
}

bool CheckConvTranspose(const Node &n, int64_t, std::string *reason) {
  std::string mode;
  int64_t group;
  return ReadAutoPad(n, &mode, reason) && AttrInt(n, "group", 1, &group, reason);
}

bool InferConvTranspose(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &w = *c->in[1];
  if (!IsFloatType(x.dtype) || w.dtype != x.dtype || (c->has(2) && c->in[2]->dtype != x.dtype)) {
    *reason = "X, W and B must share one floating dtype, not " + std::string(ElemTypeName(x.dtype)) + " / " +
              ElemTypeName(w.dtype);
    return false;
  }
  if (x.IsUnknownRank() || w.IsUnknownRank()) {
    c->out[0] = TensorDesc{x.dtype, {kUnknownRankDim}};
    return true;
  }
  TGeom g;
  if (!TransposeGeometry(*c->node, x, w, &g, reason)) return false;
  if (c->has(2) && !c->in[2]->IsUnknownRank()) {
    const auto &b = c->in[2]->dims;
    if (b.size() != 1 || (b[0] >= 0 && g.m >= 0 && b[0] != g.m)) {
      *reason = "B " + DescStr(*c->in[2]) + " must be 1-D with M = " + std::to_string(g.m) + " values";
      return false;
    }
  }
  std::vector<int64_t> out = {g.n, g.m};
  for (size_t i = kSp - g.nsp; i < kSp; ++i) out.push_back(g.out[i]);
  c->out[0] = TensorDesc{x.dtype, out};
  return true;
}

template <class T>
class ConvTransposeKernel : public Kernel {
 public:
  explicit ConvTransposeKernel(const TGeom &g) : g_(g) {
    kin_ = g.in[0] * g.in[1] * g.in[2];
    kk_ = g.k[0] * g.k[1] * g.k[2];
    kout_ = g.out[0] * g.out[1] * g.out[2];
    cols_.resize(static_cast<size_t>(g.m / g.group * kk_ * kin_));
    tiled_ = true;
    for (size_t i = 0; i < kSp; ++i)
      tiled_ = tiled_ && g.s[i] == g.k[i] && g.d[i] == 1 && g.pb[i] == 0 && g.out[i] == g.in[i] * g.s[i];
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]), *w = static_cast<const T *>(in[1]);
    const T *b = has_bias_ ? static_cast<const T *>(in[2]) : nullptr;
    T *y = static_cast<T *>(out[0]);
    const int64_t cg = g_.c / g_.group, mg = g_.m / g_.group;
    for (int64_t n = 0; n < g_.n; ++n)
      for (int64_t gr = 0; gr < g_.group; ++gr) {
        const T *xg = x + (n * g_.c + gr * cg) * kin_;
        const T *wg = w + gr * cg * mg * kk_;
        // cols[(m, k), i] = sum_c W[c, m, k] * X[c, i]
        if (cg == 0 || kin_ == 0 || mg * kk_ == 0) std::fill(cols_.begin(), cols_.end(), T(0));
        else Gemm<T>(true, false, mg * kk_, kin_, cg, T(1), wg, mg * kk_, xg, kin_, T(0), cols_.data(), kin_);
        for (int64_t m = 0; m < mg; ++m) {
          const int64_t oc = gr * mg + m;
          T *yo = y + (n * g_.m + oc) * kout_;
          if (tiled_) {
            Tile(cols_.data() + m * kk_ * kin_, b ? b[oc] : T(0), yo);
            continue;
          }
          std::fill(yo, yo + kout_, b ? b[oc] : T(0));
          Col2Im(cols_.data() + m * kk_ * kin_, yo);
        }
      }
    return true;
  }
  bool has_bias_ = false;

 private:
  // Adds every column entry (kernel tap k, input position i) to output position i * s + k * d - pad.
  void Col2Im(const T *col, T *yo) const {
    for (int64_t k0 = 0; k0 < g_.k[0]; ++k0)
      for (int64_t k1 = 0; k1 < g_.k[1]; ++k1)
        for (int64_t k2 = 0; k2 < g_.k[2]; ++k2) {
          const T *row = col + ((k0 * g_.k[1] + k1) * g_.k[2] + k2) * kin_;
          for (int64_t i0 = 0; i0 < g_.in[0]; ++i0) {
            const int64_t o0 = i0 * g_.s[0] + k0 * g_.d[0] - g_.pb[0];
            if (o0 < 0 || o0 >= g_.out[0]) continue;
            for (int64_t i1 = 0; i1 < g_.in[1]; ++i1) {
              const int64_t o1 = i1 * g_.s[1] + k1 * g_.d[1] - g_.pb[1];
              if (o1 < 0 || o1 >= g_.out[1]) continue;
              const T *r = row + (i0 * g_.in[1] + i1) * g_.in[2];
              T *yr = yo + (o0 * g_.out[1] + o1) * g_.out[2];
              AddRow(r, yr, k2 * g_.d[2] - g_.pb[2]);
            }
          }
        }
  }

  // yr[i2 * s + off] += r[i2] over the i2 that land inside the output row, the bounds worked out once per row (the
  // per-element bounds test kept the loop scalar); same additions in the same order as the per-element form.
  void AddRow(const T *__restrict r, T *__restrict yr, int64_t off) const {
    const int64_t s = g_.s[2], in2 = g_.in[2], out2 = g_.out[2];
    const int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
    const int64_t hi = off >= out2 ? 0 : std::min(in2, (out2 - off + s - 1) / s);
    if (lo >= hi) return;
    T *__restrict yb = yr + off;
    if (s == 1) {
      for (int64_t i2 = lo; i2 < hi; ++i2) yb[i2] += r[i2];
    } else if (s == 2) {
      for (int64_t i2 = lo; i2 < hi; ++i2) yb[2 * i2] += r[i2];
    } else {
      for (int64_t i2 = lo; i2 < hi; ++i2) yb[i2 * s] += r[i2];
    }
  }

  // Stride equal to the kernel, no dilation, pads or output padding: the windows tile the output, each output takes
  // exactly one column entry: y = bias + entry (Col2Im's fill and single addition, so the same bits), written one
  // output row at a time (the kernel's last-axis taps interleaved).
  void Tile(const T *col, T b, T *yo) const {
    const int64_t K2 = g_.k[2], in2 = g_.in[2], out2 = g_.out[2];
    for (int64_t i0 = 0; i0 < g_.in[0]; ++i0)
      for (int64_t k0 = 0; k0 < g_.k[0]; ++k0)
        for (int64_t i1 = 0; i1 < g_.in[1]; ++i1)
          for (int64_t k1 = 0; k1 < g_.k[1]; ++k1) {
            T *__restrict yr = yo + ((i0 * g_.k[0] + k0) * g_.out[1] + i1 * g_.k[1] + k1) * out2;
            const T *r = col + ((k0 * g_.k[1] + k1) * K2 * g_.in[0] * g_.in[1] + i0 * g_.in[1] + i1) * in2;
            if (K2 == 2) {
              const T *__restrict r0 = r, *__restrict r1 = r + kin_;
              for (int64_t i2 = 0; i2 < in2; ++i2) {
                yr[2 * i2] = b + r0[i2];
                yr[2 * i2 + 1] = b + r1[i2];
              }
              continue;
            }
            for (int64_t k2 = 0; k2 < K2; ++k2)
              for (int64_t i2 = 0; i2 < in2; ++i2) yr[i2 * K2 + k2] = b + r[k2 * kin_ + i2];
          }
  }

  TGeom g_;
  int64_t kin_, kk_, kout_;
  bool tiled_ = false;
  std::vector<T> cols_;
};

// Stride 1 without dilation: y = Conv(x, W flipped and transposed per group, pads k - 1 - pads_begin at the start and
// whatever gives the output size at the end), on Conv's direct / Winograd kernels (the GEMM + scatter-add was
// 1.4-2.0x onnxruntime on 3x3). Input 1 is the transposed weights, transformed once when constant, else per run.
class ConvTransposeAsConv : public Kernel {
 public:
  ConvTransposeAsConv(const TGeom &g, bool has_bias) : g_(g), has_bias_(has_bias) {}
  // The Conv when it applies, else nullptr.
  static std::unique_ptr<Kernel> Make(const TGeom &g, bool has_bias, const float *w) {
    if (g.nsp > 2 || g.n < 1 || g.c < 1 || g.m < 1) return nullptr;
    int64_t pads[4];
    for (int i = 0; i < 2; ++i) {
      const size_t a = 1 + static_cast<size_t>(i);
      if (g.s[a] != 1 || g.d[a] != 1 || g.in[a] < 1) return nullptr;
      pads[i] = g.k[a] - 1 - g.pb[a];
      pads[i + 2] = g.out[a] + g.k[a] - 1 - g.in[a] - pads[i];
      if (pads[i] < 0 || pads[i + 2] < 0) return nullptr;
    }
    auto k = std::make_unique<ConvTransposeAsConv>(g, has_bias);
    if (w) {
      k->wt_.resize(static_cast<size_t>(k->WeightFloats()));
      k->Transform(w, k->wt_.data());
    }
    k->conv_ = MakeFastConvFloat(g.n, g.c, g.m, g.group, g.in[1], g.in[2], g.k[1], g.k[2], pads, has_bias,
                                 w ? k->wt_.data() : nullptr);
    if (!k->conv_) return nullptr;
    return k;
  }
  size_t scratch_bytes() const override { return WeightBytes() + conv_->scratch_bytes(); }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    float *wt = wt_.data();
    if (wt_.empty()) {
      wt = static_cast<float *>(scratch_);
      Transform(static_cast<const float *>(in[1]), wt);
    }
    conv_->set_scratch(static_cast<char *>(scratch_) + WeightBytes());
    const void *cin[3] = {in[0], wt, has_bias_ ? in[2] : nullptr};
    return conv_->Run(cin, out, reason);
  }

 private:
  int64_t WeightFloats() const { return g_.c * (g_.m / g_.group) * g_.k[1] * g_.k[2]; }
  size_t WeightBytes() const {
    return wt_.empty() ? (static_cast<size_t>(WeightFloats()) * sizeof(float) + 63) / 64 * 64 : 0;
  }
  // [C, M / group, kh, kw] -> [M, C / group, kh, kw], the taps reversed.
  void Transform(const float *w, float *wt) const {
    const int64_t cg = g_.c / g_.group, mg = g_.m / g_.group, kh = g_.k[1], kw = g_.k[2], kk = kh * kw;
    for (int64_t gr = 0; gr < g_.group; ++gr)
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t m = 0; m < mg; ++m) {
          const float *src = w + ((gr * cg + c) * mg + m) * kk;
          float *dst = wt + ((gr * mg + m) * cg + c) * kk;
          for (int64_t t = 0; t < kk; ++t) dst[kk - 1 - t] = src[t];
        }
  }
  TGeom g_;
  bool has_bias_;
  std::unique_ptr<Kernel> conv_;
  std::vector<float> wt_;  // the transformed weights when constant
};
std::unique_ptr<Kernel> PrepareConvTransposeFloat(const KernelCtx &c, std::string *reason) {
  TGeom g;
  if (!TransposeGeometry(*c.node, *c.in[0], *c.in[1], &g, reason)) return nullptr;
  if (c.in[0]->dtype == ElemType::kFloat) {
    if (auto k = ConvTransposeAsConv::Make(g, c.has(2), static_cast<const float *>(c.in_data[1]))) return k;
    auto k = std::make_unique<ConvTransposeKernel<float>>(g);
    k->has_bias_ = c.has(2);
    return k;
  }
  if (c.in[0]->dtype == ElemType::kDouble) {
    auto k = std::make_unique<ConvTransposeKernel<double>>(g);
    k->has_bias_ = c.has(2);
    return k;
  }
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

std::unique_ptr<Kernel> PrepareConvTranspose(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareConvTransposeFloat, reason)
                         : PrepareConvTransposeFloat(c, reason);
}

}  // namespace

void RegisterConvTransposeOps(std::vector<OpDef> *ops) {
  ops->push_back({"ConvTranspose", 2, 3, 1, 1, CheckConvTranspose, InferConvTranspose, PrepareConvTranspose, true});
}

}  // namespace onnx
}  // namespace twin
