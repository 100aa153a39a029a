// Spatial sampling operators: GridSample (opset 16 and 20+: nearest / linear / cubic, zeros / border / reflection
// padding, align_corners, any number of spatial dims), AffineGrid, Col2Im and DeformConv (2-D). GridSample and
// DeformConv compute each sampling point's taps once and apply them to every channel, so coordinate arithmetic and
// rounding run per point, not per element.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "elem.h"
#include "vmath.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

bool BoolAttr(const Node &n, const char *name, bool *v, std::string *reason) {
  int64_t i;
  if (!AttrInt(n, name, 0, &i, reason)) return false;
  if (i != 0 && i != 1) {
    *reason = std::string("attribute '") + name + "' must be 0 or 1, got " + std::to_string(i);
    return false;
  }
  *v = i != 0;
  return true;
}

// ---- GridSample ----

enum class Interp { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

struct GridAttrs {
  Interp mode = Interp::kLinear;
  Padding padding = Padding::kZeros;
  bool align = false;
};

bool ReadGridAttrs(const Node &n, int64_t opset, GridAttrs *a, std::string *reason) {
  std::string mode, pad;
  const bool old = opset < 20;  // opset 16 spells the modes bilinear / bicubic
  if (!AttrString(n, "mode", old ? "bilinear" : "linear", &mode, reason) ||
      !AttrString(n, "padding_mode", "zeros", &pad, reason) || !BoolAttr(n, "align_corners", &a->align, reason))
    return false;
  if (mode == "nearest") {
    a->mode = Interp::kNearest;
  } else if (mode == (old ? "bilinear" : "linear")) {
    a->mode = Interp::kLinear;
  } else if (mode == (old ? "bicubic" : "cubic")) {
    a->mode = Interp::kCubic;
  } else {
    *reason = "attribute 'mode' has unsupported value '" + mode + "' at opset " + std::to_string(opset) +
              (old ? " (nearest, bilinear, bicubic)" : " (nearest, linear, cubic)");
    return false;
  }
  if (pad == "zeros") {
    a->padding = Padding::kZeros;
  } else if (pad == "border") {
    a->padding = Padding::kBorder;
  } else if (pad == "reflection") {
    a->padding = Padding::kReflection;
  } else {
    *reason = "attribute 'padding_mode' has unsupported value '" + pad + "' (zeros, border, reflection)";
    return false;
  }
  return true;
}

bool CheckGridSample(const Node &n, int64_t opset, std::string *reason) {
  GridAttrs a;
  return ReadGridAttrs(n, opset, &a, reason);
}

bool InferGridSample(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &grid = *c->in[1];
  const size_t r = x.dims.size();
  if (!IsFloatType(x.dtype) || r < 3 || (c->opset < 20 && r != 4)) {
    *reason = "input 'X' must be a float tensor [N, C, spatial...]" + std::string(c->opset < 20 ? " of rank 4" : "") +
              ", got " + DescStr(x);
    return false;
  }
  const int64_t sd = static_cast<int64_t>(r) - 2;
  if (!IsFloatType(grid.dtype) || grid.dims.size() != r || (grid.dims.back() >= 0 && grid.dims.back() != sd) ||
      (grid.dims[0] >= 0 && x.dims[0] >= 0 && grid.dims[0] != x.dims[0])) {
    *reason = "input 'grid' must be a float tensor [N, out spatial..., " + std::to_string(sd) + "] for X " +
              DescStr(x) + ", got " + DescStr(grid);
    return false;
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims = {x.dims[0], x.dims[1]};
  for (size_t d = 1; d + 1 < grid.dims.size(); ++d) c->out[0].dims.push_back(grid.dims[d]);
  return true;
}

// Reflects x into [lo, hi] by its nearer border until inside (fmod: no integer overflow for far-out points).
template <class T>
T Reflect(T x, T lo, T hi) {
  const T range = hi - lo;
  if (!(range > 0)) return lo;
  if (x < lo) {
    const T m = std::fmod(lo - x, 2 * range);
    return m <= range ? lo + m : hi - (m - range);
  }
  if (x > hi) {
    const T m = std::fmod(x - hi, 2 * range);
    return m <= range ? hi - m : lo + (m - range);
  }
  return x;
}

template <class T>
void CubicCoeffs(T t, T *w) {
  const T a = T(-0.75);
  const T x0 = t + 1, x1 = t, x2 = 1 - t, x3 = 2 - t;
  w[0] = ((a * x0 - 5 * a) * x0 + 8 * a) * x0 - 4 * a;
  w[1] = ((a + 2) * x1 - (a + 3)) * x1 * x1 + 1;
  w[2] = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1;
  w[3] = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a;
}

#if defined(__x86_64__)
// Bilinear 2-D float32 sampling of one channel plane, eight points at a time: each of the four taps' pixels by a
// gather, summed in the scalar loop's order without FMA (0 + w0 x0 + w1 x1 + w2 x2 + w3 x3), so the bits are the
// same. o and w are tap-major ([4][stride]); a tap dropped at a zero-padded border has offset -1 and leaves the sum
// as it was (skipped, as the scalar loop skips it). Points [0, 8 * groups).
__attribute__((target("avx2"))) void Bilinear8Avx2(const float *plane, const int32_t *o, const float *w,
                                                   int64_t groups, int64_t stride, float *y) {
  const __m256i none = _mm256_set1_epi32(-1);
  for (int64_t i = 0; i < 8 * groups; i += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(o + k * stride + i));
      const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, none));
      const __m256 x = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), plane, idx, keep, 4);
      acc = _mm256_blendv_ps(acc, _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + k * stride + i), x)), keep);
    }
    _mm256_storeu_ps(y + i, acc);
  }
}

// One axis of eight points for Bilinear8Avx2's setup: GridSampleKernel::AxisTaps's linear-mode arithmetic for float
// (zeros or border padding) lane by lane, the same operations in the same order, so the same bits. std::max(x, c)
// is (x < c ? c : x) and std::min(x, c) is (c < x ? c : x) by blends, as maxps / minps differ on the sign of zero.
struct Axis8 {
  __m256i i0, i1;  // the two taps' pixel indices, -1 for a zero-padded tap
  __m256 w0, w1;
};
__attribute__((target("avx2"))) inline __m256 Max8(__m256 x, __m256 c) {
  return _mm256_blendv_ps(x, c, _mm256_cmp_ps(x, c, _CMP_LT_OQ));
}
__attribute__((target("avx2"))) inline __m256 Min8(__m256 x, __m256 c) {
  return _mm256_blendv_ps(x, c, _mm256_cmp_ps(c, x, _CMP_LT_OQ));
}
__attribute__((target("avx2"))) Axis8 LinearAxis8(__m256 g, int64_t dim, bool align, bool border) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  const __m256 x_raw = align ? _mm256_mul_ps(_mm256_div_ps(_mm256_add_ps(g, one), two),
                                             _mm256_set1_ps(static_cast<float>(dim - 1)))
                             : _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(g, one),
                                                                         _mm256_set1_ps(static_cast<float>(dim))),
                                                           one),
                                             two);
  __m256 x = x_raw;
  if (border) {
    const float lo = align ? 0.0f : -0.5f, hi = align ? static_cast<float>(dim - 1) : static_cast<float>(dim) - 0.5f;
    const __m256 out = _mm256_or_ps(_mm256_cmp_ps(x, _mm256_set1_ps(lo), _CMP_LT_OQ),
                                    _mm256_cmp_ps(x, _mm256_set1_ps(hi), _CMP_GT_OQ));
    const __m256 clamped = Min8(Max8(x, _mm256_setzero_ps()), _mm256_set1_ps(static_cast<float>(dim - 1)));
    x = _mm256_blendv_ps(x, clamped, out);
  }
  x = _mm256_blendv_ps(x, _mm256_set1_ps(-2.0f - static_cast<float>(dim)), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  x = Min8(Max8(x, _mm256_set1_ps(-4.0f - static_cast<float>(dim))), _mm256_set1_ps(static_cast<float>(2 * dim + 4)));
  __m256i i0 = _mm256_cvttps_epi32(x);  // floor: truncate, then one less where that rounded up
  i0 = _mm256_add_epi32(i0, _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(i0), x, _CMP_GT_OQ)));
  const __m256 frac = _mm256_sub_ps(x, _mm256_cvtepi32_ps(i0));
  Axis8 a;
  a.w0 = _mm256_sub_ps(one, frac);
  a.w1 = frac;
  const __m256i i1 = _mm256_add_epi32(i0, _mm256_set1_epi32(1));
  const __m256i zero = _mm256_setzero_si256(), last = _mm256_set1_epi32(static_cast<int32_t>(dim - 1));
  if (border) {
    a.i0 = _mm256_min_epi32(_mm256_max_epi32(i0, zero), last);
    a.i1 = _mm256_min_epi32(_mm256_max_epi32(i1, zero), last);
  } else {  // outside [0, dim): -1
    const __m256i none = _mm256_set1_epi32(-1), dim8 = _mm256_set1_epi32(static_cast<int32_t>(dim));
    const __m256i in0 = _mm256_and_si256(_mm256_cmpgt_epi32(i0, none), _mm256_cmpgt_epi32(dim8, i0));
    const __m256i in1 = _mm256_and_si256(_mm256_cmpgt_epi32(i1, none), _mm256_cmpgt_epi32(dim8, i1));
    a.i0 = _mm256_blendv_epi8(none, i0, in0);
    a.i1 = _mm256_blendv_epi8(none, i1, in1);
  }
  return a;
}

// GatherSlots for points [i, i + 8) from their float grid pairs (x, y): taps rows outer, offsets y * width + x (-1
// when either tap is a zero pixel), weights wy * wx; tap-major with the given stride, as Bilinear8Avx2 reads them.
__attribute__((target("avx2"))) void BilinearSetup8Avx2(const float *grid, int64_t height, int64_t width, bool align,
                                                        bool border, int32_t *o, float *w, int64_t stride) {
  alignas(32) float gx[8], gy[8];
  for (int k = 0; k < 8; ++k) gx[k] = grid[2 * k], gy[k] = grid[2 * k + 1];
  const Axis8 ay = LinearAxis8(_mm256_load_ps(gy), height, align, border);
  const Axis8 ax = LinearAxis8(_mm256_load_ps(gx), width, align, border);
  const __m256i width8 = _mm256_set1_epi32(static_cast<int32_t>(width)), none = _mm256_set1_epi32(-1);
  const __m256i rows[2] = {ay.i0, ay.i1}, cols[2] = {ax.i0, ax.i1};
  const __m256 wys[2] = {ay.w0, ay.w1}, wxs[2] = {ax.w0, ax.w1};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const __m256i dropped = _mm256_or_si256(_mm256_cmpeq_epi32(rows[a], none), _mm256_cmpeq_epi32(cols[b], none));
      const __m256i off = _mm256_add_epi32(_mm256_mullo_epi32(rows[a], width8), cols[b]);
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(o + (2 * a + b) * stride), _mm256_or_si256(off, dropped));
      _mm256_storeu_ps(w + (2 * a + b) * stride, _mm256_mul_ps(wys[a], wxs[b]));
    }
}
#endif

// Compute type T (float for float/16-bit inputs, double for double), storage S of X / Y, G of the grid.
template <class T>
class GridSampleKernel : public Kernel {
 public:
  GridSampleKernel(GridAttrs a, const TensorDesc &x, const TensorDesc &grid, const TensorDesc &y)
      : a_(a), x_(x), grid_(grid), y_(y) {
    sd_ = x.dims.size() - 2;
    in_strides_ = Strides(std::vector<int64_t>(x.dims.begin() + 2, x.dims.end()));
    in_plane_ = DimsProduct(x.dims, 2, x.dims.size());
    out_plane_ = DimsProduct(y.dims, 2, y.dims.size());
#if defined(__x86_64__)
    gather_ = std::is_same<T, float>::value && x.dtype == ElemType::kFloat && sd_ == 2 &&
              a.mode == Interp::kLinear && in_plane_ <= INT32_MAX && vmath::ActiveIsa() != vmath::Isa::kBaseline;
    // and the taps of eight points at a time from a float grid (reflection keeps the per-point path); dims small
    // enough that the clamped coordinates (up to 2 dim + 4) fit int32
    setup8_ = gather_ && grid.dtype == ElemType::kFloat && a.padding != Padding::kReflection &&
              x.dims[2] < (int64_t{1} << 29) && x.dims[3] < (int64_t{1} << 29);
#endif
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    bool ok = true;
    VisitType(x_.dtype, [&](auto xtag) {
      VisitType(grid_.dtype, [&](auto gtag) {
        using S = decltype(xtag);
        using G = decltype(gtag);
        if constexpr (kIsFloat<S> && kIsFloat<G>)
          RunTyped(static_cast<const S *>(in[0]), static_cast<const G *>(in[1]), static_cast<S *>(out[0]));
        else
          ok = false;
      });
    });
    return ok;
  }

 private:
  // Per spatial dim: up to 4 taps of (index or -1 for a zero, weight).
  struct Taps {
    int n = 0;
    int64_t idx[4];
    T w[4];
  };

  int64_t PixelIndex(int64_t i, int64_t dim) const {
    if (i >= 0 && i < dim) return i;
    if (a_.padding == Padding::kZeros) return -1;
    if (a_.padding == Padding::kBorder) return std::min<int64_t>(std::max<int64_t>(i, 0), dim - 1);
    const T lo = a_.align ? T(0) : T(-0.5), hi = a_.align ? T(dim - 1) : T(dim) - T(0.5);
    const int64_t j = static_cast<int64_t>(Reflect<T>(static_cast<T>(i), lo, hi));
    return std::min<int64_t>(std::max<int64_t>(j, 0), dim - 1);
  }

  void AxisTaps(T g, int64_t dim, Taps *t) const {
    T x = a_.align ? (g + 1) / 2 * T(dim - 1) : ((g + 1) * T(dim) - 1) / 2;
    if (a_.mode == Interp::kNearest) x = std::nearbyint(x);  // half to even, like the reference
    const T lo = a_.align ? T(0) : T(-0.5), hi = a_.align ? T(dim - 1) : T(dim) - T(0.5);
    if (x < lo || x > hi) {
      if (a_.padding == Padding::kBorder) x = std::min(std::max(x, T(0)), T(dim - 1));
      if (a_.padding == Padding::kReflection) x = Reflect<T>(x, lo, hi);
    }
    if (!(x == x)) x = T(-2) - T(dim);  // NaN grid: a point outside on every side, a zero / border pixel
    // Far outside, every tap reads padding: clamping keeps the index arithmetic in range without changing that.
    x = std::min(std::max(x, T(-4) - T(dim)), T(2 * dim + 4));
    if (a_.mode == Interp::kNearest) {
      t->n = 1;
      t->idx[0] = PixelIndex(static_cast<int64_t>(x), dim);
      t->w[0] = 1;
      return;
    }
    // floor of a finite x in the clamped range above, without the libm call the baseline build makes for floor.
    int64_t i0 = static_cast<int64_t>(x);
    i0 -= static_cast<T>(i0) > x;
    const T f = static_cast<T>(i0);
    const T frac = x - f;
    if (a_.mode == Interp::kLinear) {
      t->n = 2;
      t->w[0] = 1 - frac, t->w[1] = frac;
      for (int k = 0; k < 2; ++k) t->idx[k] = PixelIndex(i0 + k, dim);
      return;
    }
    t->n = 4;
    CubicCoeffs<T>(frac, t->w);
    for (int k = 0; k < 4; ++k) t->idx[k] = PixelIndex(i0 - 1 + k, dim);
  }

  // Flattens the per-dim taps into (offset, weight) pairs; a tap reading a zero pixel is dropped.
  void Combine(const Taps *taps) {
    offs_.assign(1, 0);
    ws_.assign(1, T(1));
    for (size_t d = 0; d < sd_; ++d) {
      next_offs_.clear(), next_ws_.clear();  // keep their capacity: no allocation after the first points
      for (size_t k = 0; k < offs_.size(); ++k)
        for (int j = 0; j < taps[d].n; ++j) {
          if (taps[d].idx[j] < 0) continue;
          next_offs_.push_back(offs_[k] + taps[d].idx[j] * in_strides_[d]);
          next_ws_.push_back(ws_[k] * taps[d].w[j]);
        }
      offs_.swap(next_offs_), ws_.swap(next_ws_);
    }
  }

  // Combine for two spatial dims, straight into a point's slots: the same pairs in the same order (rows outer,
  // weights (1 * wy) * wx == wy * wx), without the general version's vector traffic.
  int Combine2(const Taps *taps, int64_t *o, T *w) const {
    const Taps &ty = taps[0], &tx = taps[1];
    int n = 0;
    for (int a = 0; a < ty.n; ++a) {
      if (ty.idx[a] < 0) continue;
      const int64_t row = ty.idx[a] * in_strides_[0];
      for (int b = 0; b < tx.n; ++b) {
        if (tx.idx[b] < 0) continue;
        o[n] = row + tx.idx[b] * in_strides_[1];
        w[n] = ty.w[a] * tx.w[b];
        ++n;
      }
    }
    return n;
  }

  // Points in blocks: every point's taps of a block first, then each channel plane over the block's points (one
  // plane at a time stays in cache and the outputs are written in order).
  template <class S, class G>
  void RunTyped(const S *x, const G *grid, S *y) {
    const int64_t batch = x_.dims[0], ch = x_.dims[1];
    int64_t width = 1;  // taps of a point, at most
    for (size_t d = 0; d < sd_; ++d) width *= a_.mode == Interp::kNearest ? 1 : a_.mode == Interp::kLinear ? 2 : 4;
    const int64_t block = std::max<int64_t>(1, std::min<int64_t>(out_plane_, kBlockTaps / width));
    block_offs_.resize(static_cast<size_t>(block * width));
    block_ws_.resize(static_cast<size_t>(block * width));
    block_n_.resize(static_cast<size_t>(block));
    Taps taps[kMaxRank];
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t p0 = 0; p0 < out_plane_; p0 += block) {
        const int64_t np = std::min(block, out_plane_ - p0);
        int64_t first = 0;  // points before it have their taps from BilinearSetup8
        if constexpr (std::is_same<G, float>::value)
          if (setup8_ && np >= 8) {
            gather_offs_.resize(static_cast<size_t>(4 * block));
            gather_ws_.resize(static_cast<size_t>(4 * block));
            first = np / 8 * 8;
#if defined(__x86_64__)
            for (int64_t i = 0; i < first; i += 8)
              BilinearSetup8Avx2(grid + (n * out_plane_ + p0 + i) * 2, x_.dims[2], x_.dims[3], a_.align,
                                 a_.padding == Padding::kBorder, gather_offs_.data() + i, gather_ws_.data() + i, block);
#endif
          }
        for (int64_t i = first; i < np; ++i) {
          const G *g = grid + (n * out_plane_ + p0 + i) * static_cast<int64_t>(sd_);
          for (size_t d = 0; d < sd_; ++d)  // grid's last dim lists coordinates innermost spatial dim first
            AxisTaps(static_cast<T>(Num<G>::Load(g[sd_ - 1 - d])), x_.dims[2 + d], &taps[d]);
          if (sd_ == 2) {
            block_n_[i] = Combine2(taps, block_offs_.data() + i * width, block_ws_.data() + i * width);
            if (gather_ && width == 4) GatherSlots(taps, i, block);
            continue;
          }
          Combine(taps);
          block_n_[i] = static_cast<int>(offs_.size());
          std::copy(offs_.begin(), offs_.end(), block_offs_.begin() + i * width);
          std::copy(ws_.begin(), ws_.end(), block_ws_.begin() + i * width);
        }
        if constexpr (std::is_same<S, float>::value && std::is_same<T, float>::value)
          if (gather_ && width == 4 && np >= 8) {
            for (int64_t c = 0; c < ch; ++c)
              GatherPlane(x + (n * ch + c) * in_plane_, np, block, y + (n * ch + c) * out_plane_ + p0);
            continue;
          }
        for (int64_t c = 0; c < ch; ++c) {
          const S *plane = x + (n * ch + c) * in_plane_;
          S *yr = y + (n * ch + c) * out_plane_ + p0;
          switch (width) {  // the common widths unrolled: the sums of consecutive points then overlap
            case 1: BlockPlane<1>(plane, np, yr); break;
            case 4: BlockPlane<4>(plane, np, yr); break;
            case 16: BlockPlane<16>(plane, np, yr); break;
            default: BlockPlane<0>(plane, np, yr, width); break;
          }
        }
      }
  }

  // One channel plane over a block's points: points with all kW taps (kW > 0) in a fixed-length loop, the rest
  // (taps dropped at a zero-padded border) over their own count. Same additions, in the same order, either way.
  template <int kW, class S>
  void BlockPlane(const S *plane, int64_t np, S *yr, int64_t width = kW) const {
    for (int64_t i = 0; i < np; ++i) {
      const int64_t *o = block_offs_.data() + i * width;
      const T *w = block_ws_.data() + i * width;
      T acc = 0;
      if (kW > 0 && block_n_[i] == kW) {
        for (int k = 0; k < kW; ++k) acc += w[k] * static_cast<T>(Num<S>::Load(plane[o[k]]));
      } else {
        for (int k = 0; k < block_n_[i]; ++k) acc += w[k] * static_cast<T>(Num<S>::Load(plane[o[k]]));
      }
      yr[i] = Num<S>::Store(static_cast<typename Num<S>::C>(acc));
    }
  }

  // Point i's four taps (rows outer, as Combine2) tap-major for Bilinear8Avx2: 32-bit offsets (the plane is under
  // 2^31 elements), -1 for a tap dropped at a zero-padded border, and the weights Combine2 computes.
  void GatherSlots(const Taps *taps, int64_t i, int64_t block) {
    gather_offs_.resize(static_cast<size_t>(4 * block));
    gather_ws_.resize(static_cast<size_t>(4 * block));
    const Taps &ty = taps[0], &tx = taps[1];
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        const int64_t slot = (2 * a + b) * block + i;
        const bool kept = ty.idx[a] >= 0 && tx.idx[b] >= 0;
        gather_offs_[slot] = kept ? static_cast<int32_t>(ty.idx[a] * in_strides_[0] + tx.idx[b] * in_strides_[1]) : -1;
        gather_ws_[slot] = static_cast<float>(ty.w[a] * tx.w[b]);
      }
  }
  // One plane over the block: groups of eight points by gathers, the last np % 8 points by BlockPlane's loop.
  void GatherPlane(const float *plane, int64_t np, int64_t block, float *yr) const {
#if defined(__x86_64__)
    Bilinear8Avx2(plane, gather_offs_.data(), gather_ws_.data(), np / 8, block, yr);
#endif
    for (int64_t i = np / 8 * 8; i < np; ++i) {
      const int64_t *o = block_offs_.data() + i * 4;
      const T *w = block_ws_.data() + i * 4;
      T acc = 0;
      for (int k = 0; k < block_n_[i]; ++k) acc += w[k] * plane[o[k]];
      yr[i] = acc;
    }
  }

  static constexpr int64_t kBlockTaps = 16384;  // (offset, weight) pairs held per block of points
  GridAttrs a_;
  TensorDesc x_, grid_, y_;
  size_t sd_ = 0;
  std::vector<int64_t> in_strides_;
  int64_t in_plane_ = 0, out_plane_ = 0;
  std::vector<int64_t> offs_, next_offs_;
  std::vector<T> ws_, next_ws_;
  std::vector<int64_t> block_offs_;  // RunTyped's taps of a block of points, width slots per point
  std::vector<T> block_ws_;
  std::vector<int> block_n_;  // taps used per point
  bool gather_ = false;       // float32 bilinear 2-D on AVX2 or better: GatherSlots / GatherPlane
  bool setup8_ = false;       // and the taps of a float grid eight points at a time (BilinearSetup8Avx2)
  std::vector<int32_t> gather_offs_;
  std::vector<float> gather_ws_;
};

std::unique_ptr<Kernel> PrepareGridSample(const KernelCtx &c, std::string *reason) {
  GridAttrs a;
  if (!ReadGridAttrs(*c.node, c.opset, &a, reason)) return nullptr;
  if (c.in[0]->dtype == ElemType::kDouble)
    return std::unique_ptr<Kernel>(new GridSampleKernel<double>(a, *c.in[0], *c.in[1], c.out[0]));
  return std::unique_ptr<Kernel>(new GridSampleKernel<float>(a, *c.in[0], *c.in[1], c.out[0]));
}

// ---- AffineGrid ----

bool InferAffineGrid(InferCtx *c, std::string *reason) {
  const TensorDesc &theta = *c->in[0];
  bool align;
  if (!BoolAttr(*c->node, "align_corners", &align, reason)) return false;
  const bool rank_ok = theta.dims.size() == 3 && (theta.dims[1] < 0 || theta.dims[1] == 2 || theta.dims[1] == 3);
  if (!IsFloatType(theta.dtype) || !rank_ok) {
    *reason = "input 'theta' must be a float tensor [N, 2, 3] or [N, 3, 4], got " + DescStr(theta);
    return false;
  }
  std::vector<int64_t> size;
  const ValueState st = ReadIntsInput(c, 1, &size, reason);
  if (st == ValueState::kError) return false;
  if (st == ValueState::kUnknown) {
    const int64_t sd = c->in[1]->dims.size() == 1 && c->in[1]->dims[0] >= 0 ? c->in[1]->dims[0] - 2 : -1;
    if (sd != 2 && sd != 3) {
      *reason = "input 'size' must be a 1-D int64 tensor of 4 or 5 values, got " + DescStr(*c->in[1]);
      return false;
    }
    c->out[0] = {theta.dtype, std::vector<int64_t>(static_cast<size_t>(sd) + 2, -1)};
    c->out[0].dims.back() = sd;
    return true;
  }
  const int64_t sd = static_cast<int64_t>(size.size()) - 2;
  const bool dims_ok = (sd == 2 || sd == 3) && (theta.dims[1] < 0 || theta.dims[1] == sd) &&
                       (theta.dims[2] < 0 || theta.dims[2] == sd + 1) &&
                       (theta.dims[0] < 0 || theta.dims[0] == size[0]);
  bool nonneg = true;
  for (int64_t v : size) nonneg &= v >= 0;
  if (!dims_ok || !nonneg) {
    *reason = "input 'size' " + ShapeStr(size) + " must be [N, C, H, W] or [N, C, D, H, W] matching theta " +
              DescStr(theta);
    return false;
  }
  c->out[0].dtype = theta.dtype;
  c->out[0].dims = {size[0]};
  for (int64_t d = 2; d < sd + 2; ++d) c->out[0].dims.push_back(size[d]);
  c->out[0].dims.push_back(sd);
  return true;
}

class AffineGridKernel : public Kernel {
 public:
  AffineGridKernel(ElemType t, std::vector<int64_t> out_dims, bool align)
      : t_(t), dims_(std::move(out_dims)) {
    sd_ = dims_.size() - 2;
    for (size_t d = 0; d < sd_; ++d) {  // base coordinate of each index along each spatial dim
      const int64_t s = dims_[1 + d];
      std::vector<double> v(static_cast<size_t>(s));
      for (int64_t i = 0; i < s; ++i)
        v[i] = align ? (s > 1 ? -1 + 2.0 * static_cast<double>(i) / static_cast<double>(s - 1) : -1.0)
                     : -1 + (2.0 * static_cast<double>(i) + 1) / static_cast<double>(s);
      base_.push_back(std::move(v));
    }
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    VisitType(t_, [&](auto tag) {
      using S = decltype(tag);
      using C = typename Num<S>::C;
      const S *th = static_cast<const S *>(in[0]);
      S *y = static_cast<S *>(out[0]);
      const int64_t points = DimsProduct(dims_, 1, dims_.size() - 1), cols = static_cast<int64_t>(sd_) + 1;
      const std::vector<int64_t> strides = Strides(std::vector<int64_t>(dims_.begin() + 1, dims_.end() - 1));
      double h[4];
      for (int64_t n = 0; n < dims_[0]; ++n) {
        const S *m = th + n * static_cast<int64_t>(sd_) * cols;
        for (int64_t p = 0; p < points; ++p) {
          int64_t rem = p;
          for (size_t d = 0; d < sd_; ++d) {  // homogeneous point: innermost spatial coordinate first
            const int64_t i = rem / strides[d];
            rem -= i * strides[d];
            h[sd_ - 1 - d] = base_[d][i];
          }
          h[sd_] = 1;
          for (size_t r = 0; r < sd_; ++r) {
            double acc = 0;
            for (int64_t k = 0; k < cols; ++k) acc += static_cast<double>(Num<S>::Load(m[r * cols + k])) * h[k];
            y[(n * points + p) * static_cast<int64_t>(sd_) + static_cast<int64_t>(r)] =
                Num<S>::Store(static_cast<C>(acc));
          }
        }
      }
    });
    return true;
  }

 private:
  ElemType t_;
  std::vector<int64_t> dims_;
  size_t sd_ = 0;
  std::vector<std::vector<double>> base_;
};

std::unique_ptr<Kernel> PrepareAffineGrid(const KernelCtx &c, std::string *reason) {
  bool align;
  if (!BoolAttr(*c.node, "align_corners", &align, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new AffineGridKernel(c.in[0]->dtype, c.out[0].dims, align));
}

bool CheckAffineGrid(const Node &n, int64_t, std::string *reason) {
  bool align;
  return BoolAttr(n, "align_corners", &align, reason);
}

// ---- Col2Im ----

struct Col2ImGeom {
  int64_t batch = 0, ch = 0, kernel = 1, blocks = 1;
  std::vector<int64_t> image, block, dil, pad_begin, stride, nblocks;
};

bool Col2ImShape(InferCtx *c, Col2ImGeom *g, bool *unknown, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsNumericType(x.dtype) || x.dims.size() != 3) {
    *reason = "input 'input' must be a numeric tensor [N, C * prod(block_shape), L], got " + DescStr(x);
    return false;
  }
  const ValueState si = ReadIntsInput(c, 1, &g->image, reason);
  if (si == ValueState::kError) return false;
  const ValueState sb = ReadIntsInput(c, 2, &g->block, reason);
  if (sb == ValueState::kError) return false;
  *unknown = si == ValueState::kUnknown || sb == ValueState::kUnknown;
  if (*unknown) return true;
  const size_t r = g->image.size();
  std::vector<int64_t> pads;
  bool has_dil, has_pads, has_strides;
  if (!AttrInts(*c->node, "dilations", &g->dil, &has_dil, reason) ||
      !AttrInts(*c->node, "pads", &pads, &has_pads, reason) ||
      !AttrInts(*c->node, "strides", &g->stride, &has_strides, reason))
    return false;
  if (!has_dil) g->dil.assign(r, 1);
  if (!has_pads) pads.assign(2 * r, 0);
  if (!has_strides) g->stride.assign(r, 1);
  if (r == 0 || g->block.size() != r || g->dil.size() != r || pads.size() != 2 * r || g->stride.size() != r) {
    *reason = "image_shape, block_shape, dilations and strides need one value per spatial dim and pads two, got " +
              ShapeStr(g->image) + ", " + ShapeStr(g->block) + ", " + ShapeStr(g->dil) + ", " + ShapeStr(pads) + ", " +
              ShapeStr(g->stride);
    return false;
  }
  g->batch = x.dims[0];
  g->pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(r));
  g->kernel = 1, g->blocks = 1;
  g->nblocks.clear();
  for (size_t d = 0; d < r; ++d) {
    if (g->image[d] < 0 || g->block[d] < 1 || g->dil[d] < 1 || g->stride[d] < 1 || pads[d] < 0 || pads[d + r] < 0) {
      *reason = "image_shape must be >= 0, block_shape, dilations and strides >= 1, pads >= 0";
      return false;
    }
    const int64_t span = g->image[d] + pads[d] + pads[d + r] - g->dil[d] * (g->block[d] - 1) - 1;
    const int64_t nb = span < 0 ? 0 : span / g->stride[d] + 1;
    g->nblocks.push_back(nb);
    g->kernel *= g->block[d], g->blocks *= nb;
  }
  if ((x.dims[1] >= 0 && x.dims[1] % g->kernel != 0) || (x.dims[2] >= 0 && x.dims[2] != g->blocks) || g->blocks == 0) {
    *reason = "input " + DescStr(x) + " does not fit: dim 1 must be a multiple of prod(block_shape) = " +
              std::to_string(g->kernel) + " and dim 2 the number of blocks " + std::to_string(g->blocks) + " (>= 1)";
    return false;
  }
  g->ch = x.dims[1] < 0 ? -1 : x.dims[1] / g->kernel;
  return true;
}

bool InferCol2Im(InferCtx *c, std::string *reason) {
  Col2ImGeom g;
  bool unknown;
  if (!Col2ImShape(c, &g, &unknown, reason)) return false;
  const TensorDesc &x = *c->in[0];
  if (unknown) {
    const TensorDesc &img = *c->in[1];
    if (img.dims.size() != 1 || img.dims[0] < 1) {
      *reason = "input 'image_shape' must be a 1-D integer tensor of known length, got " + DescStr(img);
      return false;
    }
    c->out[0] = {x.dtype, std::vector<int64_t>(static_cast<size_t>(img.dims[0]) + 2, -1)};
    c->out[0].dims[0] = x.dims[0];
    return true;
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims = {g.batch, g.ch};
  c->out[0].dims.insert(c->out[0].dims.end(), g.image.begin(), g.image.end());
  return true;
}

class Col2ImKernel : public Kernel {
 public:
  Col2ImKernel(ElemType t, Col2ImGeom g) : t_(t), g_(std::move(g)) {
    const size_t r = g_.image.size();
    // Per (kernel offset, block): the image offset written, or -1 when it falls in the padding.
    map_.assign(static_cast<size_t>(g_.kernel * g_.blocks), -1);
    const std::vector<int64_t> ks = Strides(g_.block), bs = Strides(g_.nblocks), is = Strides(g_.image);
    for (int64_t k = 0; k < g_.kernel; ++k)
      for (int64_t b = 0; b < g_.blocks; ++b) {
        int64_t off = 0, kr = k, br = b;
        bool inside = true;
        for (size_t d = 0; d < r; ++d) {
          const int64_t kd = kr / ks[d], bd = br / bs[d];
          kr -= kd * ks[d], br -= bd * bs[d];
          const int64_t pos = bd * g_.stride[d] - g_.pad_begin[d] + kd * g_.dil[d];
          inside &= pos >= 0 && pos < g_.image[d];
          off += pos * is[d];
        }
        if (inside) map_[k * g_.blocks + b] = off;
      }
    plane_ = DimsProduct(g_.image, 0, r);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    VisitType(t_, [&](auto tag) {
      using S = decltype(tag);
      using C = typename Num<S>::C;
      const S *x = static_cast<const S *>(in[0]);
      S *y = static_cast<S *>(out[0]);
      acc_.assign(static_cast<size_t>(plane_), 0.0);
      for (int64_t nc = 0; nc < g_.batch * g_.ch; ++nc) {
        std::fill(acc_.begin(), acc_.end(), 0.0);
        const S *src = x + nc * g_.kernel * g_.blocks;
        for (int64_t j = 0; j < g_.kernel * g_.blocks; ++j)
          if (map_[j] >= 0) acc_[map_[j]] += static_cast<double>(Num<S>::Load(src[j]));
        for (int64_t p = 0; p < plane_; ++p) y[nc * plane_ + p] = Num<S>::Store(static_cast<C>(acc_[p]));
      }
    });
    return true;
  }

 private:
  ElemType t_;
  Col2ImGeom g_;
  std::vector<int64_t> map_;
  std::vector<double> acc_;
  int64_t plane_ = 0;
};

bool CheckCol2Im(const Node &n, int64_t, std::string *reason) {
  for (const char *name : {"dilations", "pads", "strides"}) {
    std::vector<int64_t> v;
    bool present;
    if (!AttrInts(n, name, &v, &present, reason)) return false;
    for (int64_t x : v)
      if (x < (name[0] == 'p' ? 0 : 1)) {
        *reason = std::string("attribute '") + name + "' holds " + std::to_string(x) + "; it must be >= " +
                  (name[0] == 'p' ? "0" : "1");
        return false;
      }
  }
  return true;
}

std::unique_ptr<Kernel> PrepareCol2Im(const KernelCtx &c, std::string *reason) {
  InferCtx ic = c.AsInferCtx();
  Col2ImGeom g;
  bool unknown;
  if (!Col2ImShape(&ic, &g, &unknown, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new Col2ImKernel(c.in[0]->dtype, std::move(g)));
}

// ---- DeformConv (2-D) ----

struct DeformGeom {
  int64_t n = 0, ic = 0, h = 0, w = 0, oc = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int64_t group = 1, ogroup = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

bool DeformAttrs(const Node &n, std::vector<int64_t> *ks, std::vector<int64_t> *dil, std::vector<int64_t> *pads,
                 std::vector<int64_t> *strides, int64_t *group, int64_t *ogroup, std::string *reason) {
  bool has_ks, has_dil, has_pads, has_strides;
  if (!AttrInts(n, "kernel_shape", ks, &has_ks, reason) || !AttrInts(n, "dilations", dil, &has_dil, reason) ||
      !AttrInts(n, "pads", pads, &has_pads, reason) || !AttrInts(n, "strides", strides, &has_strides, reason) ||
      !AttrInt(n, "group", 1, group, reason) || !AttrInt(n, "offset_group", 1, ogroup, reason))
    return false;
  if (!has_dil) dil->assign(2, 1);
  if (!has_pads) pads->assign(4, 0);
  if (!has_strides) strides->assign(2, 1);
  bool ok = *group >= 1 && *ogroup >= 1 && dil->size() == 2 && pads->size() == 4 && strides->size() == 2 &&
            (!has_ks || ks->size() == 2);
  for (size_t i = 0; ok && i < 2; ++i) ok = (*dil)[i] >= 1 && (*strides)[i] >= 1 && (!has_ks || (*ks)[i] >= 1);
  for (size_t i = 0; ok && i < 4; ++i) ok = (*pads)[i] >= 0;
  if (!ok) {
    *reason = "DeformConv is implemented for 2-D inputs: kernel_shape, dilations and strides need 2 values >= 1, "
              "pads 4 values >= 0, group and offset_group >= 1";
    return false;
  }
  return true;
}

bool CheckDeformConv(const Node &n, int64_t, std::string *reason) {
  std::vector<int64_t> ks, dil, pads, strides;
  int64_t group, ogroup;
  return DeformAttrs(n, &ks, &dil, &pads, &strides, &group, &ogroup, reason);
}

bool DeformShape(const InferCtx &c, DeformGeom *g, std::string *reason) {
  std::vector<int64_t> ks, dil, pads, strides;
  if (!DeformAttrs(*c.node, &ks, &dil, &pads, &strides, &g->group, &g->ogroup, reason)) return false;
  const TensorDesc &x = *c.in[0], &w = *c.in[1], &off = *c.in[2];
  if (!IsFloatType(x.dtype) || x.dims.size() != 4 || w.dtype != x.dtype || w.dims.size() != 4 ||
      off.dtype != x.dtype || off.dims.size() != 4) {
    *reason = "X, W and offset must be 4-D float tensors of one dtype (2-D DeformConv), got " + DescStr(x) + ", " +
              DescStr(w) + ", " + DescStr(off);
    return false;
  }
  g->n = x.dims[0], g->ic = x.dims[1], g->h = x.dims[2], g->w = x.dims[3], g->oc = w.dims[0];
  g->kh = ks.empty() ? w.dims[2] : ks[0], g->kw = ks.empty() ? w.dims[3] : ks[1];
  g->dh = dil[0], g->dw = dil[1], g->sh = strides[0], g->sw = strides[1], g->ph = pads[0], g->pw = pads[1];
  g->oh = (g->h + pads[0] + pads[2] - ((g->kh - 1) * g->dh + 1)) / g->sh + 1;
  g->ow = (g->w + pads[1] + pads[3] - ((g->kw - 1) * g->dw + 1)) / g->sw + 1;
  const int64_t taps = g->ogroup * g->kh * g->kw;
  bool ok = g->ic == w.dims[1] * g->group && g->oc % g->group == 0 && g->ic % g->ogroup == 0 &&
            w.dims[2] == g->kh && w.dims[3] == g->kw && g->oh >= 1 && g->ow >= 1 &&
            off.dims == std::vector<int64_t>{g->n, 2 * taps, g->oh, g->ow};
  if (c.has(3)) ok &= c.in[3]->dtype == x.dtype && c.in[3]->dims == std::vector<int64_t>{g->oc};
  if (c.has(4)) ok &= c.in[4]->dtype == x.dtype && c.in[4]->dims == std::vector<int64_t>{g->n, taps, g->oh, g->ow};
  if (!ok) {
    *reason = "inconsistent shapes: X " + DescStr(x) + ", W " + DescStr(w) + ", offset " + DescStr(off) +
              " (expected [N, 2 * offset_group * kH * kW, " + std::to_string(g->oh) + ", " + std::to_string(g->ow) +
              "]), group " + std::to_string(g->group) + ", offset_group " + std::to_string(g->ogroup) +
              "; B must be [M] and mask [N, offset_group * kH * kW, oH, oW]";
    return false;
  }
  return true;
}

bool InferDeformConv(InferCtx *c, std::string *reason) {
  for (size_t i = 0; i < c->in.size(); ++i)
    if (c->has(i) && !c->in[i]->IsStatic()) {  // the output size follows from every input's dims
      c->out[0] = {c->in[0]->dtype, {c->in[0]->dims[0], c->in[1]->dims[0], -1, -1}};
      return true;
    }
  DeformGeom g;
  if (!DeformShape(*c, &g, reason)) return false;
  c->out[0] = {c->in[0]->dtype, {g.n, g.oc, g.oh, g.ow}};
  return true;
}

// Bilinear samples at offset positions (zero outside the image) gathered into columns [ic * kH * kW, oH * oW] per
// image, then a grouped matrix product with W.
template <class S>
class DeformConvKernel : public Kernel {
 public:
  using C = typename Num<S>::C;
  DeformConvKernel(DeformGeom g, bool has_b, bool has_mask)
      : g_(g), has_b_(has_b), has_mask_(has_mask),
        cols_(static_cast<size_t>(g.ic * g.kh * g.kw * g.oh * g.ow)), acc_(static_cast<size_t>(g.oh * g.ow)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]), *w = static_cast<const S *>(in[1]);
    const S *off = static_cast<const S *>(in[2]);
    const S *bias = has_b_ ? static_cast<const S *>(in[3]) : nullptr;
    const S *mask = has_mask_ ? static_cast<const S *>(in[4]) : nullptr;
    S *y = static_cast<S *>(out[0]);
    const int64_t k = g_.kh * g_.kw, p = g_.oh * g_.ow, icg = g_.ic / g_.group, ocg = g_.oc / g_.group;
    for (int64_t n = 0; n < g_.n; ++n) {
      Gather(x + n * g_.ic * g_.h * g_.w, off + n * 2 * g_.ogroup * k * p,
             mask ? mask + n * g_.ogroup * k * p : nullptr);
      for (int64_t o = 0; o < g_.oc; ++o) {
        const int64_t grp = o / ocg;
        const S *wo = w + o * icg * k;
        S *yo = y + (n * g_.oc + o) * p;
        for (int64_t q = 0; q < p; ++q) acc_[q] = bias ? Num<S>::Load(bias[o]) : C(0);
        for (int64_t r = 0; r < icg * k; ++r) {
          const C wv = Num<S>::Load(wo[r]);
          const C *col = &cols_[((grp * icg) * k + r) * p];
          for (int64_t q = 0; q < p; ++q) acc_[q] += wv * col[q];
        }
        for (int64_t q = 0; q < p; ++q) yo[q] = Num<S>::Store(acc_[q]);
      }
    }
    return true;
  }

 private:
  C Pixel(const S *plane, int64_t r, int64_t c) const {
    return r >= 0 && r < g_.h && c >= 0 && c < g_.w ? Num<S>::Load(plane[r * g_.w + c]) : C(0);
  }

  void Gather(const S *x, const S *off, const S *mask) {
    const int64_t k = g_.kh * g_.kw, p = g_.oh * g_.ow, per_og = g_.ic / g_.ogroup;
    for (int64_t og = 0; og < g_.ogroup; ++og)
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t ki = kk / g_.kw, kj = kk % g_.kw;
        const S *oh_ = off + ((og * k + kk) * 2) * p, *ow_ = oh_ + p;
        for (int64_t q = 0; q < p; ++q) {
          const int64_t i = q / g_.ow, j = q % g_.ow;
          const C py = static_cast<C>(i * g_.sh - g_.ph + ki * g_.dh) + Num<S>::Load(oh_[q]);
          const C px = static_cast<C>(j * g_.sw - g_.pw + kj * g_.dw) + Num<S>::Load(ow_[q]);
          const C m = mask ? Num<S>::Load(mask[(og * k + kk) * p + q]) : C(1);
          const bool finite = std::isfinite(py) && std::isfinite(px);
          // clamped so that far-out (all-zero) taps stay far out without integer overflow
          const C cy = finite ? std::min(std::max(py, C(-2)), C(g_.h + 2)) : C(-2);
          const C cx = finite ? std::min(std::max(px, C(-2)), C(g_.w + 2)) : C(-2);
          const C fy = std::floor(cy), fx = std::floor(cx);
          const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
          const C ly = cy - fy, lx = cx - fx;
          for (int64_t c = og * per_og; c < (og + 1) * per_og; ++c) {
            const S *plane = x + c * g_.h * g_.w;
            C v = 0;
            if (finite)
              v = (1 - ly) * ((1 - lx) * Pixel(plane, y0, x0) + lx * Pixel(plane, y0, x0 + 1)) +
                  ly * ((1 - lx) * Pixel(plane, y0 + 1, x0) + lx * Pixel(plane, y0 + 1, x0 + 1));
            cols_[(c * k + kk) * p + q] = m * v;
          }
        }
      }
  }

  DeformGeom g_;
  bool has_b_, has_mask_;
  std::vector<C> cols_, acc_;
};

std::unique_ptr<Kernel> PrepareDeformConv(const KernelCtx &c, std::string *reason) {
  DeformGeom g;
  if (!DeformShape(c.AsInferCtx(), &g, reason)) return nullptr;
  std::unique_ptr<Kernel> kernel;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) kernel.reset(new DeformConvKernel<S>(g, c.has(3), c.has(4)));
  });
  if (!kernel) *reason = DtypeNotSupported(c.in[0]->dtype);
  return kernel;
}

}  // namespace

void RegisterGridOps(std::vector<OpDef> *ops) {
  ops->push_back({"GridSample", 2, 2, 1, 1, CheckGridSample, InferGridSample, PrepareGridSample, true});
  ops->push_back({"AffineGrid", 2, 2, 1, 1, CheckAffineGrid, InferAffineGrid, PrepareAffineGrid, true});
  ops->push_back({"DeformConv", 3, 5, 1, 1, CheckDeformConv, InferDeformConv, PrepareDeformConv, true});
  ops->push_back({"Col2Im", 3, 3, 1, 1, CheckCol2Im, InferCol2Im, PrepareCol2Im, true});
}

}  // namespace onnx
}  // namespace twin
