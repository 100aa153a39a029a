// Resize (opset 10-19: nearest with every rounding mode, linear, cubic, all coordinate transformation modes,
// antialias, axes, keep_aspect_ratio_policy, exclude_outside, tf_crop_and_resize extrapolation) and Upsample
// (opset 7-9, asymmetric nearest/linear).
// Resizing is separable: each resized axis gets a table of (input index, weight) taps per output index, built once
// at prepare time exactly as the ONNX reference picks its neighbours; the kernel then runs one pass per axis.
// Nearest is a pure gather for every dtype; linear/cubic compute in double and round back like the reference
// (integers round half to even and saturate, floats clip to the finite range).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "elem.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Ctm { kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCrop };
enum class Round { kPreferFloor, kPreferCeil, kFloor, kCeil };
enum class Aspect { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Ctm ctm = Ctm::kHalfPixel;
  Round round = Round::kPreferFloor;
  Aspect aspect = Aspect::kStretch;
  double cubic_a = -0.75;
  bool exclude_outside = false, antialias = false;
  double extrapolation = 0.0;
  bool has_axes = false;
  std::vector<int64_t> axes;
  int roi_in = -1, scales_in = 1, sizes_in = -1;  // input positions (-1: none at this opset)
};

bool AttrStr(const Node &n, const char *name, const char *def, std::string *v, std::string *reason) {
  const Attribute *a = n.FindAttr(name);
  if (!a) {
    *v = def;
    return true;
  }
  if (a->type != kAttrString) {
    *reason = std::string("attribute '") + name + "' must be a string";
    return false;
  }
  *v = a->s;
  return true;
}

template <class E>
bool Pick(const std::string &v, const char *attr, std::initializer_list<std::pair<const char *, E>> opts, E *out,
          std::string *reason) {
  for (const auto &o : opts)
    if (v == o.first) {
      *out = o.second;
      return true;
    }
  *reason = std::string("attribute '") + attr + "' has unsupported value '" + v + "'";
  return false;
}

bool ReadAttrs(const Node &n, int64_t opset, ResizeAttrs *r, std::string *reason) {
  std::string mode, ctm, nm, kar;
  const bool upsample = n.op_type == "Upsample";
  const bool legacy = upsample || opset < 11;  // Upsample and Resize-10: asymmetric, floor, (X, scales)
  if (!AttrStr(n, "mode", "nearest", &mode, reason) ||
      !Pick<Mode>(mode, "mode",
                  {{"nearest", Mode::kNearest}, {"linear", Mode::kLinear}, {"bilinear", Mode::kLinear},
                   {"cubic", Mode::kCubic}},
                  &r->mode, reason))
    return false;
  if (legacy) {
    if (r->mode == Mode::kCubic && upsample) return Pick<Mode>(mode, "mode", {}, &r->mode, reason);
    r->ctm = Ctm::kAsymmetric;
    r->round = Round::kFloor;
    r->scales_in = upsample && opset < 9 ? -1 : 1;
    return true;
  }
  r->roi_in = 1;
  r->scales_in = 2;
  r->sizes_in = 3;
  if (!AttrStr(n, "coordinate_transformation_mode", "half_pixel", &ctm, reason) ||
      !Pick<Ctm>(ctm, "coordinate_transformation_mode",
                 {{"half_pixel", Ctm::kHalfPixel}, {"half_pixel_symmetric", Ctm::kHalfPixelSymmetric},
                  {"pytorch_half_pixel", Ctm::kPytorchHalfPixel}, {"align_corners", Ctm::kAlignCorners},
                  {"asymmetric", Ctm::kAsymmetric}, {"tf_crop_and_resize", Ctm::kTfCrop}},
                 &r->ctm, reason))
    return false;
  if (!AttrStr(n, "nearest_mode", "round_prefer_floor", &nm, reason) ||
      !Pick<Round>(nm, "nearest_mode",
                   {{"round_prefer_floor", Round::kPreferFloor}, {"round_prefer_ceil", Round::kPreferCeil},
                    {"floor", Round::kFloor}, {"ceil", Round::kCeil}},
                   &r->round, reason))
    return false;
  if (!AttrStr(n, "keep_aspect_ratio_policy", "stretch", &kar, reason) ||
      !Pick<Aspect>(kar, "keep_aspect_ratio_policy",
                    {{"stretch", Aspect::kStretch}, {"not_larger", Aspect::kNotLarger},
                     {"not_smaller", Aspect::kNotSmaller}},
                    &r->aspect, reason))
    return false;
  float a = -0.75f, ex = 0.f;
  int64_t excl = 0, anti = 0;
  if (!AttrFloat(n, "cubic_coeff_a", -0.75f, &a, reason) || !AttrFloat(n, "extrapolation_value", 0.f, &ex, reason) ||
      !AttrInt(n, "exclude_outside", 0, &excl, reason) || !AttrInt(n, "antialias", 0, &anti, reason) ||
      !AttrInts(n, "axes", &r->axes, &r->has_axes, reason))
    return false;
  r->cubic_a = a;
  r->extrapolation = ex;
  r->exclude_outside = excl != 0;
  r->antialias = anti != 0;
  if (r->antialias && r->mode == Mode::kNearest) {
    *reason = "antialias is not defined for mode 'nearest'";
    return false;
  }
  return true;
}

bool CheckResize(const Node &n, int64_t opset, std::string *reason) {
  ResizeAttrs r;
  if (!ReadAttrs(n, opset, &r, reason)) return false;
  if (n.op_type == "Upsample" && opset < 9) {
    const Attribute *s = n.FindAttr("scales");
    if (!s || s->type != kAttrFloats) {
      *reason = "attribute 'scales' (floats) is required at opset " + std::to_string(opset);
      return false;
    }
  }
  return true;
}

bool InputGiven(const InferCtx *c, int i) {
  return i >= 0 && c->has(static_cast<size_t>(i)) && c->in[i]->NumElements() != 0;
}

// Contents of a float32 (or float16 / double) 1-D input; kUnknown when not known now.
ValueState ReadFloats(InferCtx *c, int i, std::vector<double> *v, std::string *reason) {
  const TensorDesc &d = *c->in[i];
  const std::string who = "input '" + c->node->input_names[i] + "'";
  if (!IsFloatType(d.dtype) || d.dims.size() != 1) {
    *reason = who + " must be a 1-D float tensor, got " + DescStr(d);
    return ValueState::kError;
  }
  if (!c->in_data[i] || !d.IsStatic()) {
    if (!c->need_static) return ValueState::kUnknown;
    c->missing_input = i;
    *reason = who + " is not a compile-time constant (it depends on runtime data) and determines an output shape";
    return ValueState::kError;
  }
  v->clear();
  VisitType(d.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) {
      const S *p = static_cast<const S *>(c->in_data[i]);
      for (int64_t k = 0; k < d.dims[0]; ++k) v->push_back(static_cast<double>(Num<S>::Load(p[k])));
    }
  });
  return ValueState::kKnown;
}

// Output dims and per-axis scales. *unknown: scales/sizes are not known at this point (dims become -1).
bool Geometry(InferCtx *c, const ResizeAttrs &r, std::vector<int64_t> *out, std::vector<double> *scales,
              bool *unknown, std::string *reason) {
  const Dims &in = c->in[0]->dims;
  const int64_t rank = static_cast<int64_t>(in.size());
  *unknown = false;
  std::vector<int64_t> axes;
  if (r.has_axes) {
    std::vector<char> seen(rank, 0);
    for (int64_t a : r.axes) {
      int64_t n;
      if (!NormalizeAxis(a, rank, false, &n, reason)) return false;
      if (seen[n]) {
        *reason = "attribute 'axes' repeats axis " + std::to_string(a);
        return false;
      }
      seen[n] = 1;
      axes.push_back(n);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  scales->assign(rank, 1.0);
  *out = in;
  std::vector<double> given;
  const bool use_sizes = InputGiven(c, r.sizes_in);
  if (use_sizes && InputGiven(c, r.scales_in)) {
    *reason = "only one of 'scales' and 'sizes' may be given";
    return false;
  }
  if (use_sizes) {
    std::vector<int64_t> sizes;
    const ValueState st = ReadIntsInput(c, r.sizes_in, &sizes, reason);
    if (st == ValueState::kError) return false;
    if (st == ValueState::kKnown) given.assign(sizes.begin(), sizes.end());
  } else if (r.scales_in < 0) {  // Upsample-7: attribute
    const Attribute *s = c->node->FindAttr("scales");
    given.assign(s->floats.begin(), s->floats.end());
  } else if (InputGiven(c, r.scales_in)) {
    const ValueState st = ReadFloats(c, r.scales_in, &given, reason);
    if (st == ValueState::kError) return false;
  } else {
    *reason = "one of 'scales' and 'sizes' must be given";
    return false;
  }
  if (given.empty()) {
    *unknown = true;
    for (int64_t a : axes) (*out)[a] = -1;
    return true;
  }
  if (given.size() != axes.size()) {
    *reason = std::string(use_sizes ? "'sizes'" : "'scales'") + " has " + std::to_string(given.size()) +
              " values for " + std::to_string(axes.size()) + " resized axes";
    return false;
  }
  if (!use_sizes) {
    for (size_t i = 0; i < axes.size(); ++i) {
      const double s = given[i];
      if (!(s > 0) || !std::isfinite(s)) {
        *reason = "scale " + std::to_string(s) + " must be positive and finite";
        return false;
      }
      (*scales)[axes[i]] = s;
      if (in[axes[i]] >= 0) {
        const double o = s * static_cast<double>(in[axes[i]]);
        if (o > static_cast<double>(kMaxElements)) {
          *reason = "scale " + std::to_string(s) + " makes the output absurdly large";
          return false;
        }
        (*out)[axes[i]] = static_cast<int64_t>(o);
      }
    }
    return true;
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    if (given[i] < 0) {
      *reason = "'sizes' holds a negative size";
      return false;
    }
    (*out)[axes[i]] = static_cast<int64_t>(given[i]);
    if (in[axes[i]] > 0) (*scales)[axes[i]] = given[i] / static_cast<double>(in[axes[i]]);
  }
  if (r.aspect != Aspect::kStretch) {
    double s = r.aspect == Aspect::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t a : axes) {
      if (in[a] < 0) return true;  // decided once the dims are known
      s = r.aspect == Aspect::kNotLarger ? std::min(s, (*scales)[a]) : std::max(s, (*scales)[a]);
    }
    for (int64_t a : axes) {
      (*scales)[a] = s;
      (*out)[a] = static_cast<int64_t>(s * static_cast<double>(in[a]) + 0.5);
    }
  }
  return true;
}

bool InferResize(InferCtx *c, std::string *reason) {
  ResizeAttrs r;
  if (!ReadAttrs(*c->node, c->opset, &r, reason)) return false;
  const TensorDesc &x = *c->in[0];
  if (x.dtype == ElemType::kUndefined || ElemSize(x.dtype) == 0 ||
      (r.mode != Mode::kNearest && !IsNumericType(x.dtype))) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  std::vector<int64_t> out;
  std::vector<double> scales;
  bool unknown;
  if (!Geometry(c, r, &out, &scales, &unknown, reason)) return false;
  if (r.ctm == Ctm::kTfCrop && c->need_static && InputGiven(c, r.roi_in)) {  // the kernel's taps need the roi
    std::vector<double> roi;
    if (ReadFloats(c, r.roi_in, &roi, reason) == ValueState::kError) return false;
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims = out;
  return true;
}

// One resized axis: for each output index, taps (input index, weight); extrapolated outputs flagged.
struct AxisTaps {
  int64_t axis = 0, in_len = 0, out_len = 0, n = 0;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> extrap;
  bool any_extrap = false;
};

void Coeffs(const ResizeAttrs &r, double ratio, double scale, std::vector<double> *c) {
  c->clear();
  if (r.mode == Mode::kNearest) {
    bool hi;
    if (ratio == 1.0) hi = true;
    else if (r.round == Round::kPreferFloor) hi = ratio > 0.5;
    else if (r.round == Round::kPreferCeil) hi = ratio >= 0.5;
    else hi = r.round == Round::kCeil;
    c->push_back(hi ? 0.0 : 1.0);
    c->push_back(hi ? 1.0 : 0.0);
    return;
  }
  const double A = r.cubic_a;
  if (r.mode == Mode::kLinear && !r.antialias) {
    c->push_back(1 - ratio);
    c->push_back(ratio);
    return;
  }
  if (r.mode == Mode::kCubic && !r.antialias) {
    const double q = 1 - ratio;
    c->push_back(((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A);
    c->push_back(((A + 2) * ratio - (A + 3)) * ratio * ratio + 1);
    c->push_back(((A + 2) * q - (A + 3)) * q * q + 1);
    c->push_back(((A * (q + 1) - 5 * A) * (q + 1) + 8 * A) * (q + 1) - 4 * A);
    return;
  }
  const double s = std::min(scale, 1.0);  // antialias widens the filter when downsampling
  double sum = 0;
  if (r.mode == Mode::kLinear) {
    const int64_t start = static_cast<int64_t>(std::floor(-1 / s) + 1);
    const int64_t footprint = 2 - 2 * start;
    for (int64_t j = 0; j < footprint; ++j) {
      const double a = (static_cast<double>(start + j) - ratio) * s;
      c->push_back(std::min(1.0, std::max(0.0, 1 - std::fabs(a))));
    }
  } else {
    const int64_t i_start = static_cast<int64_t>(std::floor(-2 / s) + 1);
    const int64_t i_end = 2 - i_start;
    for (int64_t i = i_start; i < i_end; ++i) {
      const double x = std::fabs(s * (static_cast<double>(i) - ratio));
      const double x2 = x * x, x3 = x2 * x;
      c->push_back(x <= 1 ? (A + 2) * x3 - (A + 3) * x2 + 1 : x < 2 ? A * x3 - 5 * A * x2 + 8 * A * x - 4 * A : 0.0);
    }
  }
  for (double v : *c) sum += v;
  for (double &v : *c) v /= sum;
}

double SourceCoord(const ResizeAttrs &r, double y, double scale, int64_t in_len, int64_t out_len, double roi0,
                   double roi1, bool *extrap) {
  const double in_w = static_cast<double>(in_len), out_w = scale * in_w;
  *extrap = false;
  switch (r.ctm) {
    case Ctm::kAlignCorners: return out_w == 1 ? 0.0 : y * (in_w - 1) / (out_w - 1);
    case Ctm::kAsymmetric: return y / scale;
    case Ctm::kTfCrop: {
      double x = out_w == 1 ? (roi1 - roi0) * (in_w - 1) / 2 : y * (roi1 - roi0) * (in_w - 1) / (out_w - 1);
      x += roi0 * (in_w - 1);
      *extrap = x < 0 || x > in_w - 1;
      return x;
    }
    case Ctm::kPytorchHalfPixel: return out_w == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    case Ctm::kHalfPixel: return (y + 0.5) / scale - 0.5;
    case Ctm::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(out_len) / out_w;
      const double offset = in_w / 2 * (1 - adjustment);
      return offset + (y + 0.5) / scale - 0.5;
    }
  }
  return 0.0;
}

AxisTaps BuildTaps(const ResizeAttrs &r, int64_t axis, int64_t in_len, int64_t out_len, double scale, double roi0,
                   double roi1) {
  AxisTaps t;
  t.axis = axis;
  t.in_len = in_len;
  t.out_len = out_len;
  std::vector<double> c;
  Coeffs(r, 1.0, scale, &c);
  t.n = static_cast<int64_t>(c.size());
  t.idx.resize(out_len * t.n);
  t.w.resize(out_len * t.n);
  t.extrap.assign(out_len, 0);
  const int64_t pad = (t.n + 1) / 2;
  for (int64_t o = 0; o < out_len; ++o) {
    bool ex;
    const double x = SourceCoord(r, static_cast<double>(o), scale, in_len, out_len, roi0, roi1, &ex);
    t.extrap[o] = ex;
    t.any_extrap = t.any_extrap || ex;
    const double xf = std::floor(x);
    const double ratio = x == xf ? 1.0 : x - xf;
    Coeffs(r, ratio, scale, &c);
    const double xp = x + static_cast<double>(pad);
    const double p = std::floor(xp), frac = xp - p;
    int64_t off;
    if (t.n % 2 == 0) off = frac == 0 ? -(t.n / 2) : -(t.n / 2) + 1;
    else off = frac <= 0.5 ? -((t.n - 1) / 2) : -((t.n - 1) / 2) + 1;
    // Coordinates far outside the input (huge roi) only ever select clamped edge taps.
    const double start_d = std::max(-1e15, std::min(1e15, p)) + static_cast<double>(off - pad);
    const int64_t start = std::isfinite(x) ? static_cast<int64_t>(start_d) : 0;
    double sum = 0;
    for (int64_t k = 0; k < t.n; ++k) {
      const int64_t i = start + k;
      double w = c[k];
      if (r.exclude_outside && (i < 0 || i >= in_len)) w = 0;
      t.idx[o * t.n + k] = std::min(std::max<int64_t>(i, 0), in_len - 1);
      t.w[o * t.n + k] = w;
      sum += w;
    }
    if (r.exclude_outside && sum != 0)
      for (int64_t k = 0; k < t.n; ++k) t.w[o * t.n + k] /= sum;
  }
  return t;
}

template <class S>
S SaturateFromDouble(double v) {
  if constexpr (std::is_same<S, Bool>::value) {
    return Bool{static_cast<uint8_t>(v != 0)};
  } else if constexpr (kIsFloat<S>) {
    using C = typename Num<S>::C;
    const double hi = static_cast<double>(std::numeric_limits<C>::max());
    if (std::is_same<S, Half>::value)  // NaN stays NaN (std::max would turn it into -65504)
      return Num<S>::Store(static_cast<float>(v != v ? v : std::min(65504.0, std::max(-65504.0, v))));
    if (std::is_same<C, float>::value && !std::is_same<S, float>::value)  // bfloat16
      return Num<S>::Store(static_cast<float>(v));
    return Num<S>::Store(static_cast<C>(v != v ? v : std::min(hi, std::max(-hi, v))));
  } else {
    const double lo = static_cast<double>(std::numeric_limits<S>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<S>::max());
    const double rv = std::nearbyint(v);  // round half to even (default rounding mode)
    if (!(rv == rv)) return S(0);
    if (rv <= lo) return std::numeric_limits<S>::lowest();
    if (rv >= hi) return std::numeric_limits<S>::max();
    return static_cast<S>(rv);
  }
}

// Nearest: every output element copies one input element (or the extrapolation value).
class NearestKernel : public Kernel {
 public:
  NearestKernel(std::vector<int64_t> in_dims, std::vector<int64_t> out_dims, std::vector<std::vector<int64_t>> src,
                size_t esize, std::vector<uint8_t> extrap)
      : in_dims_(std::move(in_dims)), out_dims_(std::move(out_dims)), src_(std::move(src)), esize_(esize),
        extrap_(std::move(extrap)), in_strides_(Strides(in_dims_)) {
    // repeat_ = f when the last axis reads source j / f at output j (integer upsampling with floor-like rounding).
    const int64_t last = src_.empty() ? 0 : static_cast<int64_t>(src_.back().size());
    const int64_t in_last = in_dims_.empty() ? 0 : in_dims_.back();
    if (in_last > 0 && last > in_last && last % in_last == 0) {
      const std::vector<int64_t> &lsrc = src_.back();
      const int64_t f = last / in_last;
      bool ok = true;
      for (int64_t j = 0; j < last && ok; ++j) ok = lsrc[j] == j / f;
      if (ok) repeat_ = f;
    }
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    int64_t total = 1;
    for (int64_t d : out_dims_) total *= d;
    if (total == 0) return true;
    const uint8_t *x = static_cast<const uint8_t *>(in[0]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    const size_t rank = out_dims_.size();
    if (rank == 0) {
      std::memcpy(y, x, esize_);
      return true;
    }
    const int64_t last = out_dims_[rank - 1];
    std::vector<int64_t> pos(rank, 0);
    const std::vector<int64_t> &lsrc = src_[rank - 1];
    const size_t row_bytes = static_cast<size_t>(last) * esize_;
    int64_t prev_base = -1;
    for (int64_t row = 0; row < total / last; ++row) {
      int64_t base = 0;
      bool ex = false;
      for (size_t d = 0; d + 1 < rank; ++d) {
        const int64_t s = src_[d][pos[d]];
        ex = ex || s < 0;
        base += s * in_strides_[d];
      }
      uint8_t *yr = y + static_cast<size_t>(row) * row_bytes;
      if (!ex && base == prev_base) {
        // Upsampling repeats whole rows: the previous output row already holds this one.
        std::memcpy(yr, yr - row_bytes, row_bytes);
      } else if (esize_ == 4 && !ex && repeat_ == 2) {
        // Each source element twice (2x upsampling, the common case): one 64-bit store per pair.
        const uint32_t *xs = reinterpret_cast<const uint32_t *>(x) + base;
        int64_t j = 0;
#if defined(__x86_64__)
        // Four sources to eight outputs per step (SSE2, every x86-64): the 64-bit form below stays scalar.
        for (; j + 4 <= last / 2; j += 4) {
          const __m128 v = _mm_loadu_ps(reinterpret_cast<const float *>(xs + j));
          _mm_storeu_ps(reinterpret_cast<float *>(yr + 8 * j), _mm_unpacklo_ps(v, v));
          _mm_storeu_ps(reinterpret_cast<float *>(yr + 8 * j + 16), _mm_unpackhi_ps(v, v));
        }
#endif
        for (; j < last / 2; ++j) {
          const uint64_t v = xs[j];
          const uint64_t pair = v | (v << 32);
          std::memcpy(yr + 8 * j, &pair, 8);
        }
      } else if (esize_ == 4 && !ex && repeat_ > 0) {
        const uint32_t *xs = reinterpret_cast<const uint32_t *>(x) + base;
        uint32_t *yd = reinterpret_cast<uint32_t *>(yr);
        for (int64_t j = 0; j < last / repeat_; ++j)
          for (int64_t k = 0; k < repeat_; ++k) yd[j * repeat_ + k] = xs[j];
      } else if (esize_ == 4 && !ex) {
        const uint32_t *xs = reinterpret_cast<const uint32_t *>(x) + base;
        uint32_t *yd = reinterpret_cast<uint32_t *>(yr);
        for (int64_t j = 0; j < last; ++j) yd[j] = lsrc[j] < 0 ? Extrap32() : xs[lsrc[j]];
      } else {
        for (int64_t j = 0; j < last; ++j) {
          const uint8_t *from = ex || lsrc[j] < 0 ? extrap_.data() : x + static_cast<size_t>(base + lsrc[j]) * esize_;
          std::memcpy(yr + j * esize_, from, esize_);
        }
      }
      prev_base = ex ? -1 : base;
      for (size_t d = rank - 1; d-- > 0;) {
        if (++pos[d] < out_dims_[d]) break;
        pos[d] = 0;
      }
    }
    return true;
  }

 private:
  uint32_t Extrap32() const {
    uint32_t v;
    std::memcpy(&v, extrap_.data(), 4);
    return v;
  }
  std::vector<int64_t> in_dims_, out_dims_;
  std::vector<std::vector<int64_t>> src_;  // per axis: source index per output index, -1 = extrapolated
  size_t esize_;
  std::vector<uint8_t> extrap_;
  std::vector<int64_t> in_strides_;
  int64_t repeat_ = 0;  // 0: no repeat pattern on the last axis
};

// Linear / cubic: widen to double, one weighted pass per resized axis, round back.
template <class S>
class InterpKernel : public Kernel {
 public:
  InterpKernel(std::vector<int64_t> in_dims, std::vector<AxisTaps> taps, double extrap, int64_t out_n)
      : in_dims_(std::move(in_dims)), taps_(std::move(taps)), extrap_(extrap), out_n_(out_n) {
    std::vector<int64_t> d = in_dims_;
    int64_t n = 1;
    for (int64_t v : d) n *= v;
    buf_elems_ = n;
    for (const AxisTaps &t : taps_) {
      d[t.axis] = t.out_len;
      int64_t m = 1;
      for (int64_t v : d) m *= v;
      buf_elems_ = std::max(buf_elems_, m);
    }
  }
  size_t scratch_bytes() const override { return 2 * (static_cast<size_t>(buf_elems_) * 8 + 64); }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if (out_n_ == 0) return true;
    double *a = static_cast<double *>(scratch_);
    double *b = a + (buf_elems_ + 8);
    const S *x = static_cast<const S *>(in[0]);
    int64_t n = 1;
    for (int64_t v : in_dims_) n *= v;
    for (int64_t i = 0; i < n; ++i) a[i] = static_cast<double>(Num<S>::Load(x[i]));
    std::vector<int64_t> d = in_dims_;
    for (const AxisTaps &t : taps_) {
      Pass(t, d, a, b);
      std::swap(a, b);
      d[t.axis] = t.out_len;
    }
    S *y = static_cast<S *>(out[0]);
    for (int64_t i = 0; i < out_n_; ++i) y[i] = SaturateFromDouble<S>(a[i]);
    return true;
  }

 private:
  void Pass(const AxisTaps &t, const std::vector<int64_t> &d, const double *src, double *dst) const {
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < t.axis; ++k) outer *= d[k];
    for (size_t k = t.axis + 1; k < d.size(); ++k) inner *= d[k];
    for (int64_t o0 = 0; o0 < outer; ++o0) {
      const double *s = src + o0 * t.in_len * inner;
      for (int64_t o = 0; o < t.out_len; ++o) {
        double *r = dst + (o0 * t.out_len + o) * inner;
        if (t.extrap[o]) {
          for (int64_t j = 0; j < inner; ++j) r[j] = extrap_;
          continue;
        }
        const int64_t *ix = &t.idx[o * t.n];
        const double *w = &t.w[o * t.n];
        for (int64_t j = 0; j < inner; ++j) r[j] = 0;
        for (int64_t k = 0; k < t.n; ++k) {  // zero-weight taps too: the reference's 0 * NaN (or inf) is NaN
          const double *sr = s + ix[k] * inner;
          const double wk = w[k];
          for (int64_t j = 0; j < inner; ++j) r[j] += wk * sr[j];
        }
      }
    }
  }

  std::vector<int64_t> in_dims_;
  std::vector<AxisTaps> taps_;
  double extrap_;
  int64_t out_n_;
  int64_t buf_elems_ = 0;
};

// float32 linear / cubic resizing of the last two axes only (the usual image case): per output row, the weighted
// input rows go into one double row (the first axis' pass), then each output value takes its taps from that row
// (the second axis' pass). The same double operations in the same order as InterpKernel, so the same results.
// The row sits in a buffer with its edge values repeated once on each side, so that clamped taps become
// neighbouring pairs.
// float16 (half_): each input plane is widened to float32 first (exact) and each output row narrowed at the end,
// clipped to +-65504 as SaturateFromDouble<Half> does (its clip in double then the float rounding equal the float
// rounding then a float clip: 65504 is a float and rounding is monotonic; NaN stays NaN in both).
// InterpKernel<Half> took 6.5x onnxruntime's time on a UNet's 2x bilinear upsampling (16x32x32, float16).
class PlaneInterpKernel : public Kernel {
 public:
  // rows / cols: the taps of axes rank-2 / rank-1, or null when that axis is not resized.
  PlaneInterpKernel(int64_t planes, int64_t in_h, int64_t in_w, const AxisTaps *rows, const AxisTaps *cols, bool half)
      : planes_(planes), in_h_(in_h), in_w_(in_w), out_h_(rows ? rows->out_len : in_h),
        out_w_(cols ? cols->out_len : in_w), copy_rows_(!rows), copy_cols_(!cols), half_(half) {
    row_n_ = rows ? rows->n : 1;
    row_idx_.resize(out_h_ * row_n_);
    row_w_.resize(out_h_ * row_n_);
    for (int64_t o = 0; o < out_h_ * row_n_; ++o) {
      row_idx_[o] = rows ? rows->idx[o] : o;
      row_w_[o] = rows ? rows->w[o] : 1.0;
    }
    if (cols) SetColumns(*cols);
  }
  size_t scratch_bytes() const override {
    size_t n = static_cast<size_t>(in_w_ + 2) * sizeof(double) + 64;
    if (half_) n += static_cast<size_t>(in_h_ * in_w_ + out_w_) * sizeof(float) + 64;  // widened plane, one row
    return n;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    double *row = static_cast<double *>(scratch_) + 1;  // row[-1], row[in_w] repeat the edges
    float *plane = reinterpret_cast<float *>(row + in_w_ + 1) + 8;
    float *frow = plane + in_h_ * in_w_;
    for (int64_t p = 0; p < planes_; ++p) {
      const float *xp;
      if (half_) {
        HalfToFloatArray(static_cast<const uint16_t *>(in[0]) + p * in_h_ * in_w_, plane, in_h_ * in_w_);
        xp = plane;
      } else {
        xp = static_cast<const float *>(in[0]) + p * in_h_ * in_w_;
      }
      for (int64_t o = 0; o < out_h_; ++o) {
        RowPass(xp, o, row);
        row[-1] = row[0];
        row[in_w_] = row[in_w_ - 1];
        const int64_t at = (p * out_h_ + o) * out_w_;
        if (!half_) {
          ColPass(row, static_cast<float *>(out[0]) + at);
          continue;
        }
        ColPass(row, frow);
        for (int64_t j = 0; j < out_w_; ++j) {
          const float v = frow[j];
          frow[j] = v != v ? v : std::min(65504.0f, std::max(-65504.0f, v));
        }
        FloatToHalfArray(frow, static_cast<uint16_t *>(out[0]) + at, out_w_);
      }
    }
    return true;
  }

 private:
  // Two-tap columns as (p, wa, wb): wa * row[p] + wb * row[p + 1], p in [-1, in_w - 1]; else the general taps.
  void SetColumns(const AxisTaps &t) {
    col_n_ = t.n;
    col_idx_ = t.idx;
    col_w_ = t.w;
    bool pairs = t.n == 2;
    for (int64_t o = 0; pairs && o < out_w_; ++o) pairs = PairOf(t.idx[2 * o], t.idx[2 * o + 1]) >= -1;
    if (!pairs || in_w_ >= (int64_t(1) << 30)) return;
    pair_p_.resize(out_w_);
    pair_w_[0].resize(out_w_);
    pair_w_[1].resize(out_w_);
    for (int64_t o = 0; o < out_w_; ++o) {
      pair_p_[o] = static_cast<int32_t>(PairOf(t.idx[2 * o], t.idx[2 * o + 1]));
      pair_w_[0][o] = t.w[2 * o];
      pair_w_[1][o] = t.w[2 * o + 1];
    }
  }
  // p with (row[p], row[p + 1]) == (row[i0], row[i1]) in the edge-padded row, or -2.
  int64_t PairOf(int64_t i0, int64_t i1) const {
    if (i1 == i0 + 1) return i0;
    if (i0 == i1 && i0 == 0) return -1;
    if (i0 == i1 && i0 == in_w_ - 1) return i0;
    return -2;
  }
  void RowPass(const float *xp, int64_t o, double *row) const {
    const int64_t *ix = &row_idx_[o * row_n_];
    const double *w = &row_w_[o * row_n_];
    if (copy_rows_) return WeightRows(xp + ix[0] * in_w_, 1.0, nullptr, 0.0, row, in_w_, true);
    if (row_n_ == 2) return WeightRows(xp + ix[0] * in_w_, w[0], xp + ix[1] * in_w_, w[1], row, in_w_, true);
    for (int64_t k = 0; k < row_n_; ++k) WeightRows(xp + ix[k] * in_w_, w[k], nullptr, 0.0, row, in_w_, k == 0);
  }
  void ColPass(const double *row, float *yr) const {
    if (copy_cols_) {
      for (int64_t j = 0; j < out_w_; ++j) yr[j] = Clip(row[j]);
      return;
    }
    if (!pair_p_.empty()) return PairCols(row, yr);
    for (int64_t j = 0; j < out_w_; ++j) {
      const int64_t *ix = &col_idx_[j * col_n_];
      const double *w = &col_w_[j * col_n_];
      double r = 0;
      for (int64_t k = 0; k < col_n_; ++k) r += w[k] * row[ix[k]];
      yr[j] = Clip(r);
    }
  }
  void PairCols(const double *row, float *yr) const;
  static float Clip(double v) {  // SaturateFromDouble<float>: clip to the finite range, NaN stays NaN
    const double hi = static_cast<double>(std::numeric_limits<float>::max());
    return static_cast<float>(v != v ? v : std::min(hi, std::max(-hi, v)));
  }
  // row = (first ? 0 : row) + wa * a (+ wb * b): InterpKernel's running sum, one or two taps at a time.
  static void WeightRows(const float *a, double wa, const float *b, double wb, double *row, int64_t n, bool first);

  int64_t planes_, in_h_, in_w_, out_h_, out_w_, row_n_ = 1, col_n_ = 1;
  bool copy_rows_, copy_cols_, half_;
  std::vector<int64_t> row_idx_, col_idx_;
  std::vector<double> row_w_, col_w_;
  std::vector<int32_t> pair_p_;
  std::vector<double> pair_w_[2];
};

void WeightRowsScalar(const float *a, double wa, const float *b, double wb, double *row, int64_t n, bool first) {
  for (int64_t j = 0; j < n; ++j) {
    double r = (first ? 0.0 : row[j]) + wa * a[j];
    if (b) r += wb * b[j];
    row[j] = r;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"), always_inline)) inline void WidenTimes(const float *x, __m256d w, __m256d *lo,
                                                                     __m256d *hi) {
  const __m256 v = _mm256_loadu_ps(x);
  *lo = _mm256_mul_pd(w, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *hi = _mm256_mul_pd(w, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

__attribute__((target("avx2"))) int64_t WeightRowsAvx2(const float *a, double wa, const float *b, double wb,
                                                       double *row, int64_t n, bool first) {
  const __m256d va = _mm256_set1_pd(wa), vb = _mm256_set1_pd(wb);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256d lo, hi;
    WidenTimes(a + j, va, &lo, &hi);
    lo = _mm256_add_pd(first ? _mm256_setzero_pd() : _mm256_loadu_pd(row + j), lo);
    hi = _mm256_add_pd(first ? _mm256_setzero_pd() : _mm256_loadu_pd(row + j + 4), hi);
    if (b) {
      __m256d lo2, hi2;
      WidenTimes(b + j, vb, &lo2, &hi2);
      lo = _mm256_add_pd(lo, lo2);
      hi = _mm256_add_pd(hi, hi2);
    }
    _mm256_storeu_pd(row + j, lo);
    _mm256_storeu_pd(row + j + 4, hi);
  }
  return j;
}

// Four columns at a time: the four (row[p], row[p + 1]) pairs transposed into a and b lanes.
__attribute__((target("avx2"))) int64_t PairColsAvx2(const double *row, const int32_t *p, const double *wa,
                                                     const double *wb, float *yr, int64_t n) {
  const __m256d hi = _mm256_set1_pd(static_cast<double>(std::numeric_limits<float>::max()));
  const __m256d lo = _mm256_sub_pd(_mm256_setzero_pd(), hi), zero = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m256d p02 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(row + p[j])),
                                             _mm_loadu_pd(row + p[j + 2]), 1);
    const __m256d p13 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(row + p[j + 1])),
                                             _mm_loadu_pd(row + p[j + 3]), 1);
    const __m256d a = _mm256_unpacklo_pd(p02, p13), b = _mm256_unpackhi_pd(p02, p13);
    const __m256d w0 = _mm256_loadu_pd(wa + j), w1 = _mm256_loadu_pd(wb + j);
    __m256d r = _mm256_add_pd(_mm256_add_pd(zero, _mm256_mul_pd(w0, a)), _mm256_mul_pd(w1, b));
    r = _mm256_min_pd(hi, _mm256_max_pd(lo, r));  // the second operand wins on NaN: NaN stays
    _mm_storeu_ps(yr + j, _mm256_cvtpd_ps(r));
  }
  return j;
}
#endif

bool PlaneAvx2() {
#if defined(__x86_64__)
  static const bool avx2 = vmath::ActiveIsa() != vmath::Isa::kBaseline;
  return avx2;
#else
  return false;
#endif
}

void PlaneInterpKernel::WeightRows(const float *a, double wa, const float *b, double wb, double *row, int64_t n,
                                   bool first) {
  int64_t j = 0;
#if defined(__x86_64__)
  if (PlaneAvx2()) j = WeightRowsAvx2(a, wa, b, wb, row, n, first);
#endif
  WeightRowsScalar(a + j, wa, b ? b + j : nullptr, wb, row + j, n - j, first);
}

void PlaneInterpKernel::PairCols(const double *row, float *yr) const {
  const int32_t *p = pair_p_.data();
  const double *wa = pair_w_[0].data(), *wb = pair_w_[1].data();
  int64_t j = 0;
#if defined(__x86_64__)
  if (PlaneAvx2()) j = PairColsAvx2(row, p, wa, wb, yr, out_w_);
#endif
  for (; j < out_w_; ++j) yr[j] = Clip((0.0 + wa[j] * row[p[j]]) + wb[j] * row[p[j] + 1]);
}

// The plane kernel when only the last two axes are resized, without extrapolation; null otherwise.
std::unique_ptr<Kernel> MakePlaneInterp(const std::vector<int64_t> &in, const std::vector<AxisTaps> &taps, bool half) {
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank < 2 || taps.empty()) return nullptr;
  const AxisTaps *rows = nullptr, *cols = nullptr;
  for (const AxisTaps &t : taps) {
    if (t.any_extrap || t.axis < rank - 2) return nullptr;
    (t.axis == rank - 1 ? cols : rows) = &t;
  }
  int64_t planes = 1;
  for (int64_t d = 0; d < rank - 2; ++d) planes *= in[d];
  return std::make_unique<PlaneInterpKernel>(planes, in[rank - 2], in[rank - 1], rows, cols, half);
}

std::unique_ptr<Kernel> PrepareResize(const KernelCtx &kc, std::string *reason) {
  ResizeAttrs r;
  if (!ReadAttrs(*kc.node, kc.opset, &r, reason)) return nullptr;
  InferCtx c = kc.AsInferCtx();
  std::vector<int64_t> out;
  std::vector<double> scales;
  bool unknown;
  if (!Geometry(&c, r, &out, &scales, &unknown, reason)) return nullptr;
  if (unknown || out != kc.out[0].dims) {
    *reason = "internal error: Resize geometry changed between inference and prepare";
    return nullptr;
  }
  const Dims &in = kc.in[0]->dims;
  const size_t rank = in.size();
  std::vector<double> roi;
  if (r.ctm == Ctm::kTfCrop) {
    if (!InputGiven(&c, r.roi_in)) {
      *reason = "coordinate_transformation_mode 'tf_crop_and_resize' needs the 'roi' input";
      return nullptr;
    }
    if (ReadFloats(&c, r.roi_in, &roi, reason) != ValueState::kKnown) return nullptr;
    std::vector<int64_t> axes;
    if (r.has_axes) {
      for (int64_t a : r.axes) axes.push_back(a < 0 ? a + static_cast<int64_t>(rank) : a);
    } else {
      for (size_t a = 0; a < rank; ++a) axes.push_back(static_cast<int64_t>(a));
    }
    if (roi.size() != 2 * axes.size()) {
      *reason = "'roi' must hold 2 values per resized axis, got " + std::to_string(roi.size());
      return nullptr;
    }
    std::vector<double> full(2 * rank);
    for (size_t a = 0; a < rank; ++a) full[a] = 0.0, full[rank + a] = 1.0;
    for (size_t i = 0; i < axes.size(); ++i) full[axes[i]] = roi[i], full[rank + axes[i]] = roi[axes.size() + i];
    roi = full;
  }
  std::vector<AxisTaps> taps;
  for (size_t a = 0; a < rank; ++a) {
    const double r0 = roi.empty() ? 0.0 : roi[a], r1 = roi.empty() ? 1.0 : roi[rank + a];
    const bool identity = std::fabs(scales[a] - 1.0) <= 1e-9 && out[a] == in[a] &&
                          (roi.empty() || (std::fabs(r0) <= 1e-9 && std::fabs(r1 - 1.0) <= 1e-9));
    if (identity || out[a] == 0 || in[a] == 0) continue;
    taps.push_back(BuildTaps(r, static_cast<int64_t>(a), in[a], out[a], scales[a], r0, r1));
  }
  const ElemType t = kc.in[0]->dtype;
  int64_t out_n = 1;
  for (int64_t v : out) out_n *= v;
  int64_t in_n = 1;
  for (int64_t v : in) in_n *= v;
  if (in_n == 0 && out_n != 0) {
    *reason = "cannot resize an empty tensor to a non-empty one";
    return nullptr;
  }
  if (r.mode == Mode::kNearest) {
    std::vector<std::vector<int64_t>> src(rank);
    for (size_t a = 0; a < rank; ++a) {
      src[a].resize(out[a]);
      for (int64_t o = 0; o < out[a]; ++o) src[a][o] = o;
    }
    for (const AxisTaps &tp : taps)
      for (int64_t o = 0; o < tp.out_len; ++o)
        src[tp.axis][o] = tp.extrap[o] ? -1 : (tp.w[o * tp.n] != 0 ? tp.idx[o * tp.n] : tp.idx[o * tp.n + 1]);
    std::vector<uint8_t> ex(ElemSize(t), 0);
    VisitType(t, [&](auto tag) {
      using S = decltype(tag);
      const S v = SaturateFromDouble<S>(r.extrapolation);
      std::memcpy(ex.data(), &v, sizeof(S));
    });
    return std::make_unique<NearestKernel>(in, out, std::move(src), ElemSize(t), std::move(ex));
  }
  if ((t == ElemType::kFloat || t == ElemType::kFloat16) && out_n != 0)
    if (std::unique_ptr<Kernel> k = MakePlaneInterp(in, taps, t == ElemType::kFloat16)) return k;
  std::unique_ptr<Kernel> k;
  VisitType(t, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value) k = std::make_unique<InterpKernel<S>>(in, taps, r.extrapolation, out_n);
  });
  if (!k) *reason = DtypeNotSupported(t);
  return k;
}

}  // namespace

void RegisterResizeOps(std::vector<OpDef> *ops) {
  ops->push_back({"Resize", 1, 4, 1, 1, CheckResize, InferResize, PrepareResize, true});
  ops->push_back({"Upsample", 1, 2, 1, 1, CheckResize, InferResize, PrepareResize, true});
}

}  // namespace onnx
}  // namespace twin
