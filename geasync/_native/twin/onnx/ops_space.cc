// DepthToSpace (DCR / CRD) as a precomputed permutation of element offsets, SpaceToDepth as row splits,
// LpNormalization (p = 1 or 2 along an axis) and GlobalMaxPool.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <cmath>
#include <type_traits>

#include "elem.h"
#include "row_reduce.h"

namespace twin {
namespace onnx {
namespace {

bool BlockSize(const Node &n, int64_t *b, std::string *reason) {
  if (!AttrInt(n, "blocksize", 0, b, reason)) return false;
  if (*b <= 0) {
    *reason = "attribute 'blocksize' must be positive";
    return false;
  }
  if (*b > (int64_t(1) << 20)) {  // blocksize^2 channels would pass 2^40 (and blocksize^2 wrapped at 2^32: C % 0)
    *reason = "attribute 'blocksize' is " + std::to_string(*b) + ", above 2^20";
    return false;
  }
  return true;
}

template <bool kToSpace>
bool InferSpace(InferCtx *c, std::string *reason) {
  const auto &d = c->in[0]->dims;
  int64_t b;
  if (!BlockSize(*c->node, &b, reason)) return false;
  if (d.size() != 4) {
    *reason = "input must be 4-D (N, C, H, W), got " + DescStr(*c->in[0]);
    return false;
  }
  c->out[0].dtype = c->in[0]->dtype;
  auto &o = c->out[0].dims;
  o = d;
  // A dim grown by the block stays within 2^40: a zero-size input may carry any dim, and the int64 product wrapped
  // (2^30 channels of an empty SpaceToDepth input times 2^40 came out as 0).
  const auto grown = [&](size_t i, int64_t factor) {
    if (d[i] < 0) return true;
    if (d[i] > kMaxElements / factor) {
      *reason = "blocksize " + std::to_string(b) + " makes dim " + std::to_string(i) + " of " + DescStr(*c->in[0]) +
                " more than 2^40 long";
      return false;
    }
    o[i] = d[i] * factor;
    return true;
  };
  if (kToSpace) {
    if (d[1] >= 0 && d[1] % (b * b) != 0) {
      *reason = "channels must be a multiple of blocksize^2";
      return false;
    }
    o[1] = d[1] < 0 ? -1 : d[1] / (b * b);
    if (!grown(2, b) || !grown(3, b)) return false;
  } else {
    if ((d[2] >= 0 && d[2] % b) || (d[3] >= 0 && d[3] % b)) {
      *reason = "height and width must be multiples of blocksize";
      return false;
    }
    if (!grown(1, b * b)) return false;
    o[2] = d[2] < 0 ? -1 : d[2] / b;
    o[3] = d[3] < 0 ? -1 : d[3] / b;
  }
  return true;
}

template <class U>
class PermuteKernel : public Kernel {
 public:
  explicit PermuteKernel(std::vector<int64_t> src) : src_(std::move(src)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const U *__restrict x = static_cast<const U *>(in[0]);
    U *__restrict y = static_cast<U *>(out[0]);
    for (size_t i = 0; i < src_.size(); ++i) y[i] = x[src_[i]];
    return true;
  }

 private:
  std::vector<int64_t> src_;  // source offset of each output element
};

// SpaceToDepth without the offset table: each input row splits into b output rows (column phases bw), element
// j of phase bw being x[j * b + bw]; blocksize 2 as one loop over column pairs (it vectorises to shuffles).
template <class U>
class SpaceToDepthKernel : public Kernel {
 public:
  SpaceToDepthKernel(int64_t n, int64_t cc, int64_t h, int64_t w, int64_t b, bool crd)
      : n_(n), cc_(cc), h_(h), w_(w), b_(b), crd_(crd) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const U *x = static_cast<const U *>(in[0]);
    U *y = static_cast<U *>(out[0]);
    const int64_t b = b_, oh_n = h_ / b, ow_n = w_ / b, plane = oh_n * ow_n;
    for (int64_t in_ = 0; in_ < n_; ++in_)
      for (int64_t ci = 0; ci < cc_; ++ci)
        for (int64_t ih = 0; ih < h_; ++ih) {
          const int64_t bh = ih % b, oh = ih / b;
          const U *__restrict r = x + ((in_ * cc_ + ci) * h_ + ih) * w_;
          const auto dst = [&](int64_t bw) {
            const int64_t dc = crd_ ? (ci * b + bh) * b + bw : (bh * b + bw) * cc_ + ci;
            return y + (in_ * cc_ * b * b + dc) * plane + oh * ow_n;
          };
          if (b == 2) {
            U *__restrict y0 = dst(0);
            U *__restrict y1 = dst(1);
            for (int64_t j = 0; j < ow_n; ++j) {
              y0[j] = r[2 * j];
              y1[j] = r[2 * j + 1];
            }
            continue;
          }
          for (int64_t bw = 0; bw < b; ++bw) {
            U *__restrict yb = dst(bw);
            for (int64_t j = 0; j < ow_n; ++j) yb[j] = r[j * b + bw];
          }
        }
    return true;
  }

 private:
  int64_t n_, cc_, h_, w_, b_;  // the input's (N, C, H, W) and the blocksize
  bool crd_;
};

template <bool kToSpace>
std::unique_ptr<Kernel> PrepareSpace(const KernelCtx &c, std::string *reason) {
  int64_t b;
  if (!BlockSize(*c.node, &b, reason)) return nullptr;
  const Attribute *m = c.node->FindAttr("mode");
  const bool crd = m && m->type == kAttrString && m->s == "CRD";
  // The (N, C, H, W) of the depth side and the (N, C', H', W') of the space side, C = C' b b, H' = H b.
  const auto &deep = kToSpace ? c.in[0]->dims : c.out[0].dims;
  const int64_t n = deep[0], cc = deep[1] / (b * b), h = deep[2], w = deep[3];
  if (!kToSpace) {
    const auto &x = c.in[0]->dims;
    switch (ElemSize(c.in[0]->dtype)) {
      case 1: return std::make_unique<SpaceToDepthKernel<uint8_t>>(x[0], x[1], x[2], x[3], b, crd);
      case 2: return std::make_unique<SpaceToDepthKernel<uint16_t>>(x[0], x[1], x[2], x[3], b, crd);
      case 4: return std::make_unique<SpaceToDepthKernel<uint32_t>>(x[0], x[1], x[2], x[3], b, crd);
      case 8: return std::make_unique<SpaceToDepthKernel<uint64_t>>(x[0], x[1], x[2], x[3], b, crd);
      default: break;
    }
  }
  std::vector<int64_t> src(static_cast<size_t>(c.out[0].NumElements()));
  for (int64_t in_ = 0; in_ < n; ++in_)
    for (int64_t ci = 0; ci < cc; ++ci)
      for (int64_t hi = 0; hi < h * b; ++hi)
        for (int64_t wi = 0; wi < w * b; ++wi) {
          const int64_t bh = hi % b, bw = wi % b;
          const int64_t dc = crd ? (ci * b + bh) * b + bw : (bh * b + bw) * cc + ci;
          const int64_t deep_off = ((in_ * cc * b * b + dc) * h + hi / b) * w + wi / b;
          const int64_t space_off = ((in_ * cc + ci) * h * b + hi) * w * b + wi;
          if (kToSpace) src[space_off] = deep_off;
          else src[deep_off] = space_off;
        }
  std::unique_ptr<Kernel> k;
  switch (ElemSize(c.in[0]->dtype)) {
    case 1: k = std::make_unique<PermuteKernel<uint8_t>>(std::move(src)); break;
    case 2: k = std::make_unique<PermuteKernel<uint16_t>>(std::move(src)); break;
    case 4: k = std::make_unique<PermuteKernel<uint32_t>>(std::move(src)); break;
    case 8: k = std::make_unique<PermuteKernel<uint64_t>>(std::move(src)); break;
    default: *reason = DtypeNotSupported(c.in[0]->dtype);
  }
  return k;
}

// ---- LpNormalization: x / ||x||_p along axis (p = 1 or 2; a zero norm gives 0) ----

template <class S>
class LpNormKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  LpNormKernel(int64_t outer, int64_t n, int64_t inner, int64_t p) : outer_(outer), n_(n), inner_(inner), p_(p) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    if constexpr (std::is_same<S, C>::value) {
      if (inner_ == 1) return RunRows(x, y);
    }
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        const int64_t base = o * n_ * inner_ + i;
        double acc = 0;
        for (int64_t k = 0; k < n_; ++k) {
          const double v = static_cast<double>(Num<S>::Load(x[base + k * inner_]));
          acc += p_ == 1 ? std::fabs(v) : v * v;
        }
        const double norm = p_ == 1 ? acc : std::sqrt(acc);
        for (int64_t k = 0; k < n_; ++k) {
          const double v = static_cast<double>(Num<S>::Load(x[base + k * inner_]));
          y[base + k * inner_] = Num<S>::Store(static_cast<C>(norm == 0 ? 0.0 : v / norm));
        }
      }
    return true;
  }

 private:
  // Along the last axis (float32 / float64): the row's sum in 8 independent double lanes (a vectorisable loop, not
  // one dependent chain), then the same division per element as above.
  bool RunRows(const S *x, S *y) const {
    constexpr int kLanes = 8;
    for (int64_t o = 0; o < outer_; ++o) {
      const S *xr = x + o * n_;
      S *yr = y + o * n_;
      double lanes[kLanes] = {};
      int64_t k = 0;
      if (p_ == 1) {
        for (; k + kLanes <= n_; k += kLanes)
          for (int l = 0; l < kLanes; ++l) lanes[l] += std::fabs(static_cast<double>(xr[k + l]));
      } else {
        for (; k + kLanes <= n_; k += kLanes)
          for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(xr[k + l]) * static_cast<double>(xr[k + l]);
      }
      double acc = 0;
      for (int l = 0; l < kLanes; ++l) acc += lanes[l];
      for (; k < n_; ++k) {
        const double v = static_cast<double>(xr[k]);
        acc += p_ == 1 ? std::fabs(v) : v * v;
      }
      const double norm = p_ == 1 ? acc : std::sqrt(acc);
      if (norm == 0) {
        for (k = 0; k < n_; ++k) yr[k] = S(0);
      } else {
        for (k = 0; k < n_; ++k) yr[k] = static_cast<S>(static_cast<double>(xr[k]) / norm);
      }
    }
    return true;
  }

  int64_t outer_, n_, inner_, p_;
};

std::unique_ptr<Kernel> PrepareLpNorm(const KernelCtx &c, std::string *reason) {
  const auto &d = c.in[0]->dims;
  int64_t a, axis, p;
  if (!AttrInt(*c.node, "axis", -1, &a, reason) || !AttrInt(*c.node, "p", 2, &p, reason) ||
      !NormalizeAxis(a, static_cast<int64_t>(d.size()), false, &axis, reason))
    return nullptr;
  if (p != 1 && p != 2) {
    *reason = "attribute 'p' must be 1 or 2";
    return nullptr;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= d[i];
  for (size_t i = axis + 1; i < d.size(); ++i) inner *= d[i];
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<LpNormKernel<S>>(outer, d[axis], inner, p);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- GlobalMaxPool: max over all spatial dims (NaN propagates) ----

bool InferGlobalPool(InferCtx *c, std::string *reason) {
  if (!InferSameFloat(c, reason)) return false;
  if (c->in[0]->dims.size() < 2) {
    *reason = "input must be (N, C, ...), got " + DescStr(*c->in[0]);
    return false;
  }
  for (size_t i = 2; i < c->out[0].dims.size(); ++i) c->out[0].dims[i] = 1;
  return true;
}

template <class S>
class GlobalMaxKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  GlobalMaxKernel(int64_t rows, int64_t n) : rows_(rows), n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    for (int64_t r = 0; r < rows_; ++r) {
      if constexpr (std::is_same<S, float>::value) {  // vectorised; rows with a NaN or a zero max: the loop below
        if (n_ > 0 && RowExtremum(x + r * n_, n_, true, &y[r])) continue;
      }
      C m = -INFINITY;
      for (int64_t i = 0; i < n_; ++i) {
        const C v = Num<S>::Load(x[r * n_ + i]);
        m = (v != v || v > m) ? v : m;
        if (m != m) break;
      }
      y[r] = Num<S>::Store(m);
    }
    return true;
  }

 private:
  int64_t rows_, n_;
};

std::unique_ptr<Kernel> PrepareGlobalMax(const KernelCtx &c, std::string *reason) {
  const auto &d = c.in[0]->dims;
  const int64_t rows = d[0] * d[1];
  const int64_t n = rows ? c.in[0]->NumElements() / rows : 0;
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<GlobalMaxKernel<S>>(rows, n);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

}  // namespace

void RegisterSpaceOps(std::vector<OpDef> *ops) {
  ops->push_back({"DepthToSpace", 1, 1, 1, 1, nullptr, InferSpace<true>, PrepareSpace<true>, true});
  ops->push_back({"SpaceToDepth", 1, 1, 1, 1, nullptr, InferSpace<false>, PrepareSpace<false>, true});
  ops->push_back({"LpNormalization", 1, 1, 1, 1, nullptr, InferSameFloat, PrepareLpNorm, true});
  ops->push_back({"GlobalMaxPool", 1, 1, 1, 1, nullptr, InferGlobalPool, PrepareGlobalMax, true});
}

}  // namespace onnx
}  // namespace twin
