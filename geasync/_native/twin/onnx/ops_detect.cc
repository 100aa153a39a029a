// Detection ops: NonMaxSuppression, RoiAlign and MaxRoiPool.
// NonMaxSuppression's output row count depends on the contents of every input, so its shape is known only when
// they are (constants, or graph inputs bound by a value-dependent plan); the selection is computed by one
// function shared by shape inference and the kernel. Boxes are ranked by score (ties: lower index first), as the
// ONNX reference does, and IoU is computed in float like it.
// RoiAlign follows the reference's bilinear sampling (avg or max, half_pixel or output_half_pixel).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

// ---- NonMaxSuppression ----

struct NmsArgs {
  const float *boxes = nullptr, *scores = nullptr;
  int64_t batches = 0, classes = 0, nboxes = 0;
  int64_t max_out = 0;
  float iou = 0.f, score_thr = 0.f;
  bool has_score_thr = false;
  bool center = false;
};

void Corners(const float *b, bool center, float *ymin, float *xmin, float *ymax, float *xmax) {
  if (center) {
    *xmin = b[0] - b[2] / 2, *xmax = b[0] + b[2] / 2;
    *ymin = b[1] - b[3] / 2, *ymax = b[1] + b[3] / 2;
  } else {
    *ymin = std::min(b[0], b[2]), *ymax = std::max(b[0], b[2]);
    *xmin = std::min(b[1], b[3]), *xmax = std::max(b[1], b[3]);
  }
}

bool Suppress(const float *b1, const float *b2, const NmsArgs &a) {
  float y1a, x1a, y1b, x1b, y2a, x2a, y2b, x2b;
  Corners(b1, a.center, &y1a, &x1a, &y1b, &x1b);
  Corners(b2, a.center, &y2a, &x2a, &y2b, &x2b);
  const float ix0 = std::max(x1a, x2a), ix1 = std::min(x1b, x2b);
  if (!(ix1 > ix0)) return false;
  const float iy0 = std::max(y1a, y2a), iy1 = std::min(y1b, y2b);
  if (!(iy1 > iy0)) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  if (!(inter > 0)) return false;
  const float area1 = (x1b - x1a) * (y1b - y1a), area2 = (x2b - x2a) * (y2b - y2a);
  const float uni = area1 + area2 - inter;
  if (!(area1 > 0) || !(area2 > 0) || !(uni > 0)) return false;
  return inter / uni > a.iou;
}

void RunNms(const NmsArgs &a, std::vector<std::array<int64_t, 3>> *sel) {
  sel->clear();
  std::vector<int64_t> cand, kept;
  for (int64_t b = 0; b < a.batches; ++b) {
    const float *boxes = a.boxes + b * a.nboxes * 4;
    for (int64_t c = 0; c < a.classes; ++c) {
      const float *sc = a.scores + (b * a.classes + c) * a.nboxes;
      cand.clear();
      for (int64_t i = 0; i < a.nboxes; ++i)
        if (!a.has_score_thr || sc[i] > a.score_thr) cand.push_back(i);
      std::stable_sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) { return sc[x] > sc[y]; });
      kept.clear();
      for (int64_t i : cand) {
        if (static_cast<int64_t>(kept.size()) >= a.max_out) break;
        bool ok = true;
        for (int64_t k : kept)
          if (Suppress(boxes + i * 4, boxes + k * 4, a)) {
            ok = false;
            break;
          }
        if (!ok) continue;
        kept.push_back(i);
        sel->push_back({b, c, i});
      }
    }
  }
}

bool NmsShapes(const InferCtx *c, std::string *reason) {
  const TensorDesc &bx = *c->in[0], &sc = *c->in[1];
  if (bx.dtype != ElemType::kFloat || sc.dtype != ElemType::kFloat) {
    *reason = "boxes and scores must be float32, got " + DescStr(bx) + " and " + DescStr(sc);
    return false;
  }
  if (bx.dims.size() != 3 || sc.dims.size() != 3 || (bx.dims[2] >= 0 && bx.dims[2] != 4)) {
    *reason = "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes], got " + DescStr(bx) +
              " and " + DescStr(sc);
    return false;
  }
  if (bx.IsStatic() && sc.IsStatic() && (bx.dims[0] != sc.dims[0] || bx.dims[1] != sc.dims[2])) {
    *reason = "boxes " + DescStr(bx) + " and scores " + DescStr(sc) + " disagree on batches or boxes";
    return false;
  }
  return true;
}

// Reads every input; false + reason on error, *known=false when some contents are not known now.
bool NmsRead(InferCtx *c, NmsArgs *a, bool *known, std::string *reason) {
  *known = true;
  for (size_t i = 0; i < c->in.size(); ++i) {
    if (!c->has(i) || (c->in_data[i] && c->in[i]->IsStatic())) continue;
    *known = false;
    if (!c->need_static) return true;
    c->missing_input = static_cast<int>(i);
    *reason = "input '" + c->node->input_names[i] +
              "' is not a compile-time constant, and the number of selected boxes depends on it";
    return false;
  }
  int64_t center;
  if (!AttrInt(*c->node, "center_point_box", 0, &center, reason)) return false;
  a->center = center != 0;
  a->boxes = static_cast<const float *>(c->in_data[0]);
  a->scores = static_cast<const float *>(c->in_data[1]);
  a->batches = c->in[0]->dims[0];
  a->nboxes = c->in[0]->dims[1];
  a->classes = c->in[1]->dims[1];
  double v;
  a->max_out = 0;
  if (c->has(2) && c->in[2]->NumElements() > 0) {
    if (ReadScalarInput(c, 2, &v, reason) != ValueState::kKnown) return false;
    a->max_out = std::max<int64_t>(0, static_cast<int64_t>(v));
  }
  a->iou = 0.f;
  if (c->has(3) && c->in[3]->NumElements() > 0) {
    if (ReadScalarInput(c, 3, &v, reason) != ValueState::kKnown) return false;
    a->iou = static_cast<float>(v);
  }
  if (c->has(4) && c->in[4]->NumElements() > 0) {
    if (ReadScalarInput(c, 4, &v, reason) != ValueState::kKnown) return false;
    a->score_thr = static_cast<float>(v);
    a->has_score_thr = true;
  }
  return true;
}

bool InferNms(InferCtx *c, std::string *reason) {
  if (!NmsShapes(c, reason)) return false;
  NmsArgs a;
  bool known;
  if (!NmsRead(c, &a, &known, reason)) return false;
  c->out[0].dtype = ElemType::kInt64;
  if (!known) {
    c->out[0].dims = {-1, 3};
    return true;
  }
  std::vector<std::array<int64_t, 3>> sel;
  RunNms(a, &sel);
  c->out[0].dims = {static_cast<int64_t>(sel.size()), 3};
  return true;
}

class NmsKernel : public Kernel {
 public:
  explicit NmsKernel(std::vector<std::array<int64_t, 3>> sel) : sel_(std::move(sel)) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    int64_t *y = static_cast<int64_t *>(out[0]);
    for (size_t i = 0; i < sel_.size(); ++i)
      for (int j = 0; j < 3; ++j) y[i * 3 + j] = sel_[i][j];
    return true;
  }

 private:
  std::vector<std::array<int64_t, 3>> sel_;
};

// Inputs are all known when the kernel is prepared (its output shape needed them): the selection is made here.
std::unique_ptr<Kernel> PrepareNms(const KernelCtx &kc, std::string *reason) {
  InferCtx c = kc.AsInferCtx();
  NmsArgs a;
  bool known;
  if (!NmsRead(&c, &a, &known, reason)) return nullptr;
  std::vector<std::array<int64_t, 3>> sel;
  RunNms(a, &sel);
  if (static_cast<int64_t>(sel.size()) != kc.out[0].dims[0]) {
    *reason = "internal error: selection size changed after inference";
    return nullptr;
  }
  return std::make_unique<NmsKernel>(std::move(sel));
}

// ---- RoiAlign ----

struct RoiAttrs {
  bool avg = true, half_pixel = true;
  int64_t oh = 1, ow = 1, sampling = 0;
  float spatial = 1.f;
};

bool ReadRoiAttrs(const Node &n, int64_t opset, RoiAttrs *r, std::string *reason) {
  const Attribute *mode = n.FindAttr("mode");
  const Attribute *ctm = n.FindAttr("coordinate_transformation_mode");
  r->avg = !mode || mode->s == "avg";
  if (mode && mode->s != "avg" && mode->s != "max") {
    *reason = "attribute 'mode' must be 'avg' or 'max'";
    return false;
  }
  r->half_pixel = opset >= 16 ? (!ctm || ctm->s == "half_pixel") : false;
  if (ctm && ctm->s != "half_pixel" && ctm->s != "output_half_pixel") {
    *reason = "attribute 'coordinate_transformation_mode' must be 'half_pixel' or 'output_half_pixel'";
    return false;
  }
  if (!AttrInt(n, "output_height", 1, &r->oh, reason) || !AttrInt(n, "output_width", 1, &r->ow, reason) ||
      !AttrInt(n, "sampling_ratio", 0, &r->sampling, reason) ||
      !AttrFloat(n, "spatial_scale", 1.f, &r->spatial, reason))
    return false;
  if (r->oh <= 0 || r->ow <= 0 || r->sampling < 0) {
    *reason = "output_height/output_width must be positive and sampling_ratio non-negative";
    return false;
  }
  return true;
}

bool CheckRoiAlign(const Node &n, int64_t opset, std::string *reason) {
  RoiAttrs r;
  return ReadRoiAttrs(n, opset, &r, reason);
}

bool InferRoiAlign(InferCtx *c, std::string *reason) {
  RoiAttrs r;
  if (!ReadRoiAttrs(*c->node, c->opset, &r, reason)) return false;
  const TensorDesc &x = *c->in[0], &rois = *c->in[1], &bi = *c->in[2];
  if (!IsFloatType(x.dtype) || rois.dtype != x.dtype) {
    *reason = "X and rois must share a float dtype, got " + DescStr(x) + " and " + DescStr(rois);
    return false;
  }
  if (x.dims.size() != 4 || rois.dims.size() != 2 || bi.dims.size() != 1 || (rois.dims[1] >= 0 && rois.dims[1] != 4) ||
      (bi.dtype != ElemType::kInt64 && bi.dtype != ElemType::kInt32)) {
    *reason = "expects X [N, C, H, W], rois [R, 4] and int64 batch_indices [R], got " + DescStr(x) + ", " +
              DescStr(rois) + ", " + DescStr(bi);
    return false;
  }
  c->out[0] = {x.dtype, {bi.dims[0], x.dims[1], r.oh, r.ow}};
  return true;
}

template <class S>
class RoiAlignKernel : public Kernel {
 public:
  RoiAlignKernel(RoiAttrs r, int64_t n, int64_t ch, int64_t h, int64_t w, int64_t rois, ElemType bt)
      : r_(r), n_(n), c_(ch), h_(h), w_(w), rois_(rois), bt_(bt) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const S *x = static_cast<const S *>(in[0]);
    const S *roi = static_cast<const S *>(in[1]);
    S *y = static_cast<S *>(out[0]);
    const int64_t ph_n = r_.oh, pw_n = r_.ow;
    for (int64_t q = 0; q < rois_; ++q) {
      const int64_t b = bt_ == ElemType::kInt64 ? static_cast<const int64_t *>(in[2])[q]
                                                : static_cast<const int32_t *>(in[2])[q];
      if (b < 0 || b >= n_) {
        *reason = "batch index " + std::to_string(b) + " is outside [0, " + std::to_string(n_) + ")";
        return false;
      }
      const double off = r_.half_pixel ? 0.5 : 0.0;
      const double sw = Load(roi[q * 4 + 0]) * r_.spatial - off, sh = Load(roi[q * 4 + 1]) * r_.spatial - off;
      const double ew = Load(roi[q * 4 + 2]) * r_.spatial - off, eh = Load(roi[q * 4 + 3]) * r_.spatial - off;
      double rw = ew - sw, rh = eh - sh;
      if (!r_.half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
      const double bh = rh / static_cast<double>(ph_n), bw = rw / static_cast<double>(pw_n);
      const int64_t gh = r_.sampling > 0 ? r_.sampling : static_cast<int64_t>(std::ceil(rh / ph_n));
      const int64_t gw = r_.sampling > 0 ? r_.sampling : static_cast<int64_t>(std::ceil(rw / pw_n));
      if (gh < 0 || gw < 0 || gh * gw > (int64_t(1) << 24)) {
        *reason = "region of interest " + std::to_string(q) + " is degenerate or absurdly large";
        return false;
      }
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
      // Sampling points (4 taps each) shared by every channel.
      taps_.clear();
      for (int64_t ph = 0; ph < ph_n; ++ph)
        for (int64_t pw = 0; pw < pw_n; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix)
              taps_.push_back(MakeTap(sh + ph * bh + (iy + 0.5) * bh / gh, sw + pw * bw + (ix + 0.5) * bw / gw));
      for (int64_t ch = 0; ch < c_; ++ch) {
        const S *plane = x + (b * c_ + ch) * h_ * w_;
        S *yo = y + (q * c_ + ch) * ph_n * pw_n;
        size_t t = 0;
        for (int64_t p = 0; p < ph_n * pw_n; ++p) {
          double acc = 0.0;
          bool first = true;
          for (int64_t g = 0; g < gh * gw; ++g, ++t) {
            const Tap &tp = taps_[t];
            if (r_.avg) {
              acc += tp.w[0] * Load(plane[tp.p[0]]) + tp.w[1] * Load(plane[tp.p[1]]) +
                     tp.w[2] * Load(plane[tp.p[2]]) + tp.w[3] * Load(plane[tp.p[3]]);
            } else {
              double v = tp.w[0] * Load(plane[tp.p[0]]);
              for (int k = 1; k < 4; ++k) v = std::max(v, tp.w[k] * Load(plane[tp.p[k]]));
              acc = first ? v : std::max(acc, v);
              first = false;
            }
          }
          yo[p] = Num<S>::Store(static_cast<typename Num<S>::C>(r_.avg ? acc / count : acc));
        }
      }
    }
    return true;
  }

 private:
  struct Tap {
    int64_t p[4];
    double w[4];
  };
  static double Load(S v) { return static_cast<double>(Num<S>::Load(v)); }
  Tap MakeTap(double y, double x) const {
    Tap t{{0, 0, 0, 0}, {0, 0, 0, 0}};
    const double H = static_cast<double>(h_), W = static_cast<double>(w_);
    if (!(y >= -1.0 && y <= H && x >= -1.0 && x <= W)) return t;  // outside the feature map (or NaN)
    y = std::max(y, 0.0), x = std::max(x, 0.0);
    int64_t yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x), yh, xh;
    if (yl >= h_ - 1) yh = yl = h_ - 1, y = static_cast<double>(yl);
    else yh = yl + 1;
    if (xl >= w_ - 1) xh = xl = w_ - 1, x = static_cast<double>(xl);
    else xh = xl + 1;
    const double ly = y - yl, lx = x - xl, hy = 1 - ly, hx = 1 - lx;
    t.p[0] = yl * w_ + xl, t.p[1] = yl * w_ + xh, t.p[2] = yh * w_ + xl, t.p[3] = yh * w_ + xh;
    t.w[0] = hy * hx, t.w[1] = hy * lx, t.w[2] = ly * hx, t.w[3] = ly * lx;
    return t;
  }
  RoiAttrs r_;
  int64_t n_, c_, h_, w_, rois_;
  ElemType bt_;
  std::vector<Tap> taps_;  // grows to the largest ROI grid once, then reused
};

std::unique_ptr<Kernel> PrepareRoiAlign(const KernelCtx &kc, std::string *reason) {
  RoiAttrs r;
  if (!ReadRoiAttrs(*kc.node, kc.opset, &r, reason)) return nullptr;
  const auto &xd = kc.in[0]->dims;
  if ((xd[2] == 0 || xd[3] == 0) && kc.out[0].NumElements() > 0) {
    *reason = "X has an empty spatial dimension";
    return nullptr;
  }
  std::unique_ptr<Kernel> k;
  VisitType(kc.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>)
      k = std::make_unique<RoiAlignKernel<S>>(r, xd[0], xd[1], xd[2], xd[3], kc.in[2]->dims[0], kc.in[2]->dtype);
  });
  if (!k) *reason = DtypeNotSupported(kc.in[0]->dtype);
  return k;
}

// ---- MaxRoiPool: the max over each bin of a region of X (Fast R-CNN's RoI pooling, as onnxruntime computes it) ----

struct RoiPoolAttrs {
  int64_t ph = 0, pw = 0;
  float spatial = 1.f;
};

bool ReadRoiPoolAttrs(const Node &n, RoiPoolAttrs *r, std::string *reason) {
  std::vector<int64_t> shape;
  bool present;
  if (!AttrInts(n, "pooled_shape", &shape, &present, reason) ||
      !AttrFloat(n, "spatial_scale", 1.f, &r->spatial, reason))
    return false;
  if (!present || shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0 || shape[0] > (1 << 20) || shape[1] > (1 << 20)) {
    *reason = "attribute 'pooled_shape' must be given as two positive values [pooled_h, pooled_w]";
    return false;
  }
  r->ph = shape[0], r->pw = shape[1];
  return true;
}

bool CheckMaxRoiPool(const Node &n, int64_t, std::string *reason) {
  RoiPoolAttrs r;
  return ReadRoiPoolAttrs(n, &r, reason);
}

bool InferMaxRoiPool(InferCtx *c, std::string *reason) {
  RoiPoolAttrs r;
  if (!ReadRoiPoolAttrs(*c->node, &r, reason)) return false;
  const TensorDesc &x = *c->in[0], &rois = *c->in[1];
  if (!IsFloatType(x.dtype) || rois.dtype != x.dtype || x.dims.size() != 4 || rois.dims.size() != 2 ||
      (rois.dims[1] >= 0 && rois.dims[1] != 5)) {
    *reason = "expects X [N, C, H, W] and rois [R, 5] (batch index, x1, y1, x2, y2) of one float dtype, got " +
              DescStr(x) + " and " + DescStr(rois);
    return false;
  }
  c->out[0] = {x.dtype, {rois.dims[0], x.dims[1], r.ph, r.pw}};
  return true;
}

// A scaled ROI coordinate rounded to a pixel, bounded so that no cast overflows (NaN: pixel 0).
int64_t RoiPixel(double v) {
  if (!(v == v)) return 0;
  return static_cast<int64_t>(std::llround(std::min(std::max(v, -1e12), 1e12)));
}

template <class S>
class MaxRoiPoolKernel : public Kernel {
 public:
  MaxRoiPoolKernel(RoiPoolAttrs r, int64_t n, int64_t ch, int64_t h, int64_t w, int64_t rois)
      : r_(r), n_(n), c_(ch), h_(h), w_(w), rois_(rois) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    using C = typename Num<S>::C;
    const S *x = static_cast<const S *>(in[0]);
    const S *roi = static_cast<const S *>(in[1]);
    S *y = static_cast<S *>(out[0]);
    for (int64_t q = 0; q < rois_; ++q) {
      const S *rq = roi + q * 5;
      const double bd = std::trunc(static_cast<double>(Num<S>::Load(rq[0])));
      if (!(bd >= 0 && bd < static_cast<double>(n_))) {
        *reason = "region of interest " + std::to_string(q) + ": batch index " +
                  std::to_string(static_cast<double>(Num<S>::Load(rq[0]))) + " is outside [0, " +
                  std::to_string(n_) + ")";
        return false;
      }
      const int64_t b = static_cast<int64_t>(bd);
      // scaled in the compute type, as onnxruntime (a float product rounds before the pixel is taken)
      const C scale = static_cast<C>(r_.spatial);
      const auto at = [&](int k) { return RoiPixel(static_cast<double>(Num<S>::Load(rq[k]) * scale)); };
      const int64_t sw = at(1), sh = at(2), ew = at(3), eh = at(4);
      const int64_t rh = std::max<int64_t>(eh - sh + 1, 1), rw = std::max<int64_t>(ew - sw + 1, 1);  // malformed: 1x1
      const float bh = static_cast<float>(rh) / static_cast<float>(r_.ph);
      const float bw = static_cast<float>(rw) / static_cast<float>(r_.pw);
      for (int64_t ch = 0; ch < c_; ++ch) {
        const S *plane = x + (b * c_ + ch) * h_ * w_;
        S *yo = y + (q * c_ + ch) * r_.ph * r_.pw;
        for (int64_t ph = 0; ph < r_.ph; ++ph) {
          const int64_t hs = Clamp(static_cast<int64_t>(std::floor(static_cast<float>(ph) * bh)) + sh, h_);
          const int64_t he = Clamp(static_cast<int64_t>(std::ceil(static_cast<float>(ph + 1) * bh)) + sh, h_);
          for (int64_t pw = 0; pw < r_.pw; ++pw) {
            const int64_t ws = Clamp(static_cast<int64_t>(std::floor(static_cast<float>(pw) * bw)) + sw, w_);
            const int64_t we = Clamp(static_cast<int64_t>(std::ceil(static_cast<float>(pw + 1) * bw)) + sw, w_);
            C m = 0;  // an empty bin is 0
            if (he > hs && we > ws) {
              m = -std::numeric_limits<C>::max();  // as onnxruntime: a NaN is never the max
              for (int64_t i = hs; i < he; ++i)
                for (int64_t j = ws; j < we; ++j) {
                  const C v = Num<S>::Load(plane[i * w_ + j]);
                  if (v > m) m = v;
                }
            }
            yo[ph * r_.pw + pw] = Num<S>::Store(m);
          }
        }
      }
    }
    return true;
  }

 private:
  static int64_t Clamp(int64_t v, int64_t hi) { return std::min(std::max<int64_t>(v, 0), hi); }
  RoiPoolAttrs r_;
  int64_t n_, c_, h_, w_, rois_;
};

std::unique_ptr<Kernel> PrepareMaxRoiPool(const KernelCtx &kc, std::string *reason) {
  RoiPoolAttrs r;
  if (!ReadRoiPoolAttrs(*kc.node, &r, reason)) return nullptr;
  const auto &xd = kc.in[0]->dims;
  std::unique_ptr<Kernel> k;
  VisitType(kc.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>)
      k = std::make_unique<MaxRoiPoolKernel<S>>(r, xd[0], xd[1], xd[2], xd[3], kc.in[1]->dims[0]);
  });
  if (!k) *reason = DtypeNotSupported(kc.in[0]->dtype);
  return k;
}

}  // namespace

void RegisterDetectOps(std::vector<OpDef> *ops) {
  ops->push_back({"NonMaxSuppression", 2, 5, 1, 1, nullptr, InferNms, PrepareNms, true});
  ops->push_back({"RoiAlign", 3, 3, 1, 1, CheckRoiAlign, InferRoiAlign, PrepareRoiAlign, true});
  ops->push_back({"MaxRoiPool", 2, 2, 1, 1, CheckMaxRoiPool, InferMaxRoiPool, PrepareMaxRoiPool, true});
}

}  // namespace onnx
}  // namespace twin
