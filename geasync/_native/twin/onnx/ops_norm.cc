// Normalisations and gates: RMSNormalization, InstanceNormalization, GroupNormalization, MeanVarianceNormalization,
// LRN, RotaryEmbedding, Swish and SwiGLU. Statistics accumulate in double. float32/float64 natively; float16/bfloat16
// through float32 (SwiGLU in float16 rounds its intermediates to float16 as the reference does).
#include <algorithm>
#include <cmath>

#include "elem.h"
#include "simd_double.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

bool DimsMismatch(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

bool FloatInput(const InferCtx &c, size_t i, std::string *reason) {
  if (IsFloatType(c.in[i]->dtype)) return true;
  *reason = DtypeNotSupported(c.in[i]->dtype, ("input '" + c.node->input_names[i] + "'").c_str());
  return false;
}

bool SameDtype(const InferCtx &c, size_t i, std::string *reason) {
  if (!c.has(i) || c.in[i]->dtype == c.in[0]->dtype) return true;
  *reason = "input '" + c.node->input_names[i] + "' is " + ElemTypeName(c.in[i]->dtype) + ", expected " +
            ElemTypeName(c.in[0]->dtype) + " like input 0";
  return false;
}

// Index into `small` (right-aligned unidirectional broadcast to `full`) for each element of `full`.
std::vector<int64_t> BroadcastIdx(const Dims &full, const Dims &small) {
  const int64_t n = DimsProduct(full, 0, full.size());
  std::vector<int64_t> idx(static_cast<size_t>(n));
  const size_t r = full.size(), off = r - small.size();
  const std::vector<int64_t> ss = Strides(small);
  std::vector<int64_t> ctr(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = 0;
    for (size_t d = off; d < r; ++d)
      if (small[d - off] != 1) k += ctr[d] * ss[d - off];
    idx[i] = k;
    for (size_t d = r; d-- > 0;) {
      if (++ctr[d] < full[d]) break;
      ctr[d] = 0;
    }
  }
  return idx;
}

bool Broadcasts(const Dims &full, const Dims &small) {
  if (small.size() > full.size()) return false;
  for (size_t i = 0; i < small.size(); ++i) {
    const int64_t f = full[full.size() - small.size() + i], s = small[i];
    if (s != 1 && s >= 0 && f >= 0 && s != f) return false;
  }
  return true;
}

template <template <class> class K, class... Args>
std::unique_ptr<Kernel> MakeFloatKernel(ElemType t, std::string *reason, Args &&...args) {
  if (t == ElemType::kFloat) return std::make_unique<K<float>>(std::forward<Args>(args)...);
  if (t == ElemType::kDouble) return std::make_unique<K<double>>(std::forward<Args>(args)...);
  *reason = DtypeNotSupported(t);
  return nullptr;
}

template <PrepareFn F>
std::unique_ptr<Kernel> ViaFloatIfHalf(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, F, reason) : F(c, reason);
}

// ---- RMSNormalization: y = x / sqrt(mean(x^2 over axes >= axis) + epsilon) * scale ----

bool InferRms(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!FloatInput(*c, 0, reason) || !SameDtype(*c, 1, reason)) return false;
  int64_t axis, norm, stash;
  float eps;
  if (!AttrInt(*c->node, "axis", -1, &axis, reason) || !AttrFloat(*c->node, "epsilon", 1e-5f, &eps, reason) ||
      !AttrInt(*c->node, "stash_type", 1, &stash, reason))
    return false;
  if (stash != 1) {
    *reason = "attribute 'stash_type' is " + std::to_string(stash) + "; only 1 (float32 statistics) is supported";
    return false;
  }
  c->out[0] = x;
  if (x.IsUnknownRank()) return true;
  if (!NormalizeAxis(axis, static_cast<int64_t>(x.dims.size()), false, &norm, reason)) return false;
  const std::vector<int64_t> tail(x.dims.begin() + norm, x.dims.end());
  if (!c->in[1]->IsUnknownRank() && !Broadcasts(tail, c->in[1]->dims)) {
    *reason = "scale " + DescStr(*c->in[1]) + " does not broadcast to the normalised shape " + ShapeStr(tail);
    return false;
  }
  return true;
}

#if defined(__x86_64__)
// float32 RMSNormalization rows with AVX-512: the squares summed in double (two 8-lane accumulators), and
// y = x * inv * scale in the scalar loop's order (same results).
__attribute__((target("avx512f"))) double SumSquaresAvx512(const float *x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512d u = WidenFloats8(x + j), v = WidenFloats8(x + j + 8);
    a0 = _mm512_add_pd(a0, _mm512_mul_pd(u, u));
    a1 = _mm512_add_pd(a1, _mm512_mul_pd(v, v));
  }
  double sq = SumLanes8(_mm512_add_pd(a0, a1));
  for (; j < n; ++j) sq += static_cast<double>(x[j]) * x[j];
  return sq;
}
__attribute__((target("avx512f"))) void ScaleRowAvx512(const float *x, const float *s, float inv, float *y,
                                                       int64_t n) {
  const __m512 vi = _mm512_set1_ps(inv);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + j), vi), _mm512_loadu_ps(s + j)));
  for (; j < n; ++j) y[j] = x[j] * inv * s[j];
}
#endif

template <class T>
class RmsKernel : public Kernel {
 public:
  RmsKernel(int64_t outer, int64_t inner, float eps, std::vector<int64_t> sidx)
      : outer_(outer), inner_(inner), eps_(eps), sidx_(std::move(sidx)) {
    contiguous_ = true;  // the scale has the normalised shape: read directly, not through sidx_
    for (size_t j = 0; j < sidx_.size(); ++j) contiguous_ = contiguous_ && sidx_[j] == static_cast<int64_t>(j);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]), *s = static_cast<const T *>(in[1]);
    T *y = static_cast<T *>(out[0]);
#if defined(__x86_64__)
    if constexpr (std::is_same<T, float>::value) {
      if (contiguous_ && vmath::ActiveIsa() == vmath::Isa::kAvx512) {
        for (int64_t o = 0; o < outer_; ++o) {
          const float *xr = x + o * inner_;
          const double sq = SumSquaresAvx512(xr, inner_);
          const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(inner_) + eps_));
          ScaleRowAvx512(xr, s, inv, y + o * inner_, inner_);
        }
        return true;
      }
    }
#endif
    constexpr int kLanes = 8;  // independent double sums, so that the squares are not one dependent chain
    for (int64_t o = 0; o < outer_; ++o) {
      const T *xr = x + o * inner_;
      T *yr = y + o * inner_;
      double lanes[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= inner_; j += kLanes)
        for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(xr[j + l]) * xr[j + l];
      double sq = 0;
      for (int l = 0; l < kLanes; ++l) sq += lanes[l];
      for (; j < inner_; ++j) sq += static_cast<double>(xr[j]) * xr[j];
      const T inv = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(inner_) + eps_));
      if (contiguous_) {
        for (j = 0; j < inner_; ++j) yr[j] = xr[j] * inv * s[j];
      } else {
        for (j = 0; j < inner_; ++j) yr[j] = xr[j] * inv * s[sidx_[j]];
      }
    }
    return true;
  }

 private:
  int64_t outer_, inner_;
  double eps_;
  std::vector<int64_t> sidx_;
  bool contiguous_;
};

std::unique_ptr<Kernel> PrepareRmsFloat(const KernelCtx &c, std::string *reason) {
  int64_t axis, norm;
  float eps;
  if (!AttrInt(*c.node, "axis", -1, &axis, reason) || !AttrFloat(*c.node, "epsilon", 1e-5f, &eps, reason))
    return nullptr;
  const auto &xd = c.in[0]->dims;
  if (!NormalizeAxis(axis, static_cast<int64_t>(xd.size()), false, &norm, reason)) return nullptr;
  const std::vector<int64_t> tail(xd.begin() + norm, xd.end());
  const int64_t outer = DimsProduct(xd, 0, norm), inner = DimsProduct(xd, norm, xd.size());
  return MakeFloatKernel<RmsKernel>(c.in[0]->dtype, reason, outer, inner, eps, BroadcastIdx(tail, c.in[1]->dims));
}

// ---- InstanceNormalization / GroupNormalization: per (n, group) statistics over channels x spatial ----

// X [N, C, ...]; scale/bias inputs 1 and 2 hold `per` values each (C, or G for GroupNormalization before opset 21).
bool InferChannelNorm(InferCtx *c, int64_t groups, bool per_group, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!FloatInput(*c, 0, reason) || !SameDtype(*c, 1, reason) || !SameDtype(*c, 2, reason)) return false;
  c->out[0] = x;
  if (x.IsUnknownRank()) return true;
  if (x.dims.size() < 2) {
    *reason = "input " + DescStr(x) + " must be [N, C, ...]";
    return false;
  }
  const int64_t ch = x.dims[1];
  if (groups <= 0 || (ch >= 0 && ch % groups != 0)) {
    *reason = "attribute 'num_groups' is " + std::to_string(groups) + "; it must be positive and divide C = " +
              std::to_string(ch);
    return false;
  }
  const int64_t per = per_group ? groups : ch;
  for (size_t i = 1; i < 3; ++i) {
    const auto &d = c->in[i]->dims;
    if (c->in[i]->IsUnknownRank()) continue;
    if (d.size() != 1 || (d[0] >= 0 && per >= 0 && d[0] != per)) {
      *reason = "input '" + c->node->input_names[i] + "' " + DescStr(*c->in[i]) + " must be 1-D with " +
                std::to_string(per) + " values";
      return false;
    }
  }
  return true;
}

bool InferInstanceNorm(InferCtx *c, std::string *reason) {
  float eps;
  return AttrFloat(*c->node, "epsilon", 1e-5f, &eps, reason) &&
         InferChannelNorm(c, c->in[0]->dims.size() >= 2 && c->in[0]->dims[1] > 0 ? c->in[0]->dims[1] : 1, false,
                          reason);
}

bool InferGroupNorm(InferCtx *c, std::string *reason) {
  float eps;
  int64_t groups, stash;
  if (!AttrFloat(*c->node, "epsilon", 1e-5f, &eps, reason) || !AttrInt(*c->node, "num_groups", 0, &groups, reason) ||
      !AttrInt(*c->node, "stash_type", 1, &stash, reason))
    return false;
  if (!c->node->FindAttr("num_groups")) {
    *reason = "attribute 'num_groups' is required";
    return false;
  }
  return InferChannelNorm(c, groups, c->opset < 21, reason);
}

// float32 group statistics in double, one pass: sums of d = x - x[0] and of d^2. Shifting by one of the values
// bounds the cancellation in E[d^2] - E[d]^2: (x[0] - mean)^2 <= n var, so var keeps ~n double ulps of relative
// accuracy (large-magnitude inputs stay exact to float32 precision). 16 independent lanes: blocks of 32 elements
// add the pair (d[l] + d[16 + l]) (and d[l]^2 + d[16 + l]^2) into lane l, then one block of 16 adds d[l], then a
// scalar tail; the lanes are combined in a fixed order. The same operations in the same order without SIMD, with
// AVX2 (4 x 4 doubles) and AVX-512 (2 x 8; no fused multiply-adds), so results do not depend on the instruction
// set. (The pairs halve the dependent additions per element: the AVX-512 loop converts 8 floats at a time and
// would otherwise wait on the accumulators' latency.)
constexpr int kSumLanes = 16;

struct Moments {
  double mean, var;
};

double CombineLanes(const double *l) {
  double q[4];
  for (int k = 0; k < 4; ++k) q[k] = ((l[k] + l[4 + k]) + l[8 + k]) + l[12 + k];
  return (q[0] + q[1]) + (q[2] + q[3]);
}

struct Sums {
  double s1, s2;  // sums of d and d^2, d = x - shift
};

Sums FinishSums(double s1, double s2, const float *x, int64_t j, int64_t n, double shift) {
  for (; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - shift;
    s1 += d;
    s2 += d * d;
  }
  return {s1, s2};
}

Sums LanedSums(const float *x, int64_t n, double shift) {
  double l1[kSumLanes] = {}, l2[kSumLanes] = {};
  int64_t j = 0;
  for (; j + 2 * kSumLanes <= n; j += 2 * kSumLanes)
    for (int k = 0; k < kSumLanes; ++k) {
      const double d0 = static_cast<double>(x[j + k]) - shift;
      const double d1 = static_cast<double>(x[j + kSumLanes + k]) - shift;
      l1[k] += d0 + d1;
      const double q0 = d0 * d0, q1 = d1 * d1;
      l2[k] += q0 + q1;
    }
  if (j + kSumLanes <= n) {
    for (int k = 0; k < kSumLanes; ++k) {
      const double d = static_cast<double>(x[j + k]) - shift;
      l1[k] += d;
      l2[k] += d * d;
    }
    j += kSumLanes;
  }
  return FinishSums(CombineLanes(l1), CombineLanes(l2), x, j, n, shift);
}

// y = (x - mean) * sc + b in float32, the mean split into two floats (hi + lo): x - hi is exact for the x near the
// mean, where cancellation would otherwise lose the most, so the result stays within a few float32 ulp of the
// double computation.
struct AffineConsts {
  float hi, lo, sc, b;
};

AffineConsts MakeAffine(double mean, double sc, double b) {
  const float hi = static_cast<float>(mean);
  return {hi, static_cast<float>(mean - static_cast<double>(hi)), static_cast<float>(sc), static_cast<float>(b)};
}

void AffineRow(const float *x, float *y, int64_t n, const AffineConsts &a) {
  for (int64_t j = 0; j < n; ++j) y[j] = ((x[j] - a.hi) - a.lo) * a.sc + a.b;
}

#if defined(__x86_64__)
// The accumulators are named registers, not arrays: GCC kept a1[k] / a2[k] in memory across iterations (a store
// and a reload on every add's chain), which made the moment pass ~2x slower than the adds alone.
__attribute__((target("avx2"), always_inline)) inline __m256d Diff4(const float *p, __m256d m) {
  return _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(p)), m);
}
__attribute__((target("avx2"))) Sums LanedSumsAvx2(const float *x, int64_t n, double shift) {
  const __m256d m = _mm256_set1_pd(shift);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0, q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  int64_t j = 0;
  for (; j + 2 * kSumLanes <= n; j += 2 * kSumLanes) {
    const float *p = x + j;
    const __m256d d0 = Diff4(p, m), d1 = Diff4(p + 4, m), d2 = Diff4(p + 8, m), d3 = Diff4(p + 12, m);
    const __m256d e0 = Diff4(p + 16, m), e1 = Diff4(p + 20, m), e2 = Diff4(p + 24, m), e3 = Diff4(p + 28, m);
    s0 = _mm256_add_pd(s0, _mm256_add_pd(d0, e0));
    s1 = _mm256_add_pd(s1, _mm256_add_pd(d1, e1));
    s2 = _mm256_add_pd(s2, _mm256_add_pd(d2, e2));
    s3 = _mm256_add_pd(s3, _mm256_add_pd(d3, e3));
    q0 = _mm256_add_pd(q0, _mm256_add_pd(_mm256_mul_pd(d0, d0), _mm256_mul_pd(e0, e0)));
    q1 = _mm256_add_pd(q1, _mm256_add_pd(_mm256_mul_pd(d1, d1), _mm256_mul_pd(e1, e1)));
    q2 = _mm256_add_pd(q2, _mm256_add_pd(_mm256_mul_pd(d2, d2), _mm256_mul_pd(e2, e2)));
    q3 = _mm256_add_pd(q3, _mm256_add_pd(_mm256_mul_pd(d3, d3), _mm256_mul_pd(e3, e3)));
  }
  if (j + kSumLanes <= n) {
    const float *p = x + j;
    const __m256d d0 = Diff4(p, m), d1 = Diff4(p + 4, m), d2 = Diff4(p + 8, m), d3 = Diff4(p + 12, m);
    s0 = _mm256_add_pd(s0, d0);
    s1 = _mm256_add_pd(s1, d1);
    s2 = _mm256_add_pd(s2, d2);
    s3 = _mm256_add_pd(s3, d3);
    q0 = _mm256_add_pd(q0, _mm256_mul_pd(d0, d0));
    q1 = _mm256_add_pd(q1, _mm256_mul_pd(d1, d1));
    q2 = _mm256_add_pd(q2, _mm256_mul_pd(d2, d2));
    q3 = _mm256_add_pd(q3, _mm256_mul_pd(d3, d3));
    j += kSumLanes;
  }
  alignas(32) double l1[kSumLanes], l2[kSumLanes];
  _mm256_store_pd(l1, s0), _mm256_store_pd(l1 + 4, s1), _mm256_store_pd(l1 + 8, s2), _mm256_store_pd(l1 + 12, s3);
  _mm256_store_pd(l2, q0), _mm256_store_pd(l2 + 4, q1), _mm256_store_pd(l2 + 8, q2), _mm256_store_pd(l2 + 12, q3);
  return FinishSums(CombineLanes(l1), CombineLanes(l2), x, j, n, shift);
}

__attribute__((target("avx2"))) void AffineRowAvx2(const float *x, float *y, int64_t n, const AffineConsts &a) {
  const __m256 hi = _mm256_set1_ps(a.hi), lo = _mm256_set1_ps(a.lo), sc = _mm256_set1_ps(a.sc);
  const __m256 b = _mm256_set1_ps(a.b);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), hi), lo);
    _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_mul_ps(d, sc), b));
  }
  AffineRow(x + j, y + j, n - j, a);
}

// The AVX-512 forms. Products through the masked multiply, which the compiler never contracts into an FMA with the
// following add (a fused d0 * d0 + d1 * d1 would round differently from the other instruction sets).
__attribute__((target("avx512f"), always_inline)) inline __m512d Sq8(__m512d d) {
  return _mm512_maskz_mul_pd(0xff, d, d);
}
__attribute__((target("avx512f"))) Sums LanedSumsAvx512(const float *x, int64_t n, double shift) {
  const __m512d m = _mm512_set1_pd(shift);
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;  // named registers (see LanedSumsAvx2)
  int64_t j = 0;
  for (; j + 2 * kSumLanes <= n; j += 2 * kSumLanes) {
    const __m512d d0 = _mm512_sub_pd(WidenFloats8(x + j), m);
    const __m512d d1 = _mm512_sub_pd(WidenFloats8(x + j + 8), m);
    const __m512d e0 = _mm512_sub_pd(WidenFloats8(x + j + kSumLanes), m);
    const __m512d e1 = _mm512_sub_pd(WidenFloats8(x + j + kSumLanes + 8), m);
    s0 = _mm512_add_pd(s0, _mm512_add_pd(d0, e0));
    s1 = _mm512_add_pd(s1, _mm512_add_pd(d1, e1));
    q0 = _mm512_add_pd(q0, _mm512_add_pd(Sq8(d0), Sq8(e0)));
    q1 = _mm512_add_pd(q1, _mm512_add_pd(Sq8(d1), Sq8(e1)));
  }
  if (j + kSumLanes <= n) {
    const __m512d d0 = _mm512_sub_pd(WidenFloats8(x + j), m);
    const __m512d d1 = _mm512_sub_pd(WidenFloats8(x + j + 8), m);
    s0 = _mm512_add_pd(s0, d0);
    s1 = _mm512_add_pd(s1, d1);
    q0 = _mm512_add_pd(q0, Sq8(d0));
    q1 = _mm512_add_pd(q1, Sq8(d1));
    j += kSumLanes;
  }
  alignas(64) double l1[kSumLanes], l2[kSumLanes];
  _mm512_store_pd(l1, s0), _mm512_store_pd(l1 + 8, s1);
  _mm512_store_pd(l2, q0), _mm512_store_pd(l2 + 8, q1);
  return FinishSums(CombineLanes(l1), CombineLanes(l2), x, j, n, shift);
}

// AffineRow 16 floats at a time, the last n % 16 through a masked load and store; the product is not fused with
// the add (see above), so every element gets AffineRow's two roundings.
// (A function, not a lambda: a lambda does not take its enclosing function's target.)
__attribute__((target("avx512f"), always_inline)) inline __m512 Affine16(__m512 v, __m512 hi, __m512 lo, __m512 sc,
                                                                        __m512 b) {
  return _mm512_add_ps(_mm512_maskz_mul_ps(0xffff, _mm512_sub_ps(_mm512_sub_ps(v, hi), lo), sc), b);
}
__attribute__((target("avx512f"))) void AffineRowAvx512(const float *x, float *y, int64_t n, const AffineConsts &a) {
  const __m512 hi = _mm512_set1_ps(a.hi), lo = _mm512_set1_ps(a.lo), sc = _mm512_set1_ps(a.sc);
  const __m512 b = _mm512_set1_ps(a.b);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, Affine16(_mm512_loadu_ps(x + j), hi, lo, sc, b));
  if (j < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(y + j, k, Affine16(_mm512_maskz_loadu_ps(k, x + j), hi, lo, sc, b));
  }
}
#endif

bool UseAvx512() {
#if defined(__x86_64__)
  static const bool use = vmath::ActiveIsa() == vmath::Isa::kAvx512;
  return use;
#else
  return false;
#endif
}

bool UseAvx2() {
#if defined(__x86_64__)
  static const bool use = vmath::ActiveIsa() != vmath::Isa::kBaseline;
  return use;
#else
  return false;
#endif
}

Sums FloatSums(const float *x, int64_t n, double shift) {
  // Fewer values than lanes: every form adds them to zero lanes in FinishSums' order; skip the lanes (a channel of
  // a few values, as in small instance norms, spent more on them than on its values).
  if (n < kSumLanes) return FinishSums(0.0, 0.0, x, 0, n, shift);
#if defined(__x86_64__)
  if (UseAvx512()) return LanedSumsAvx512(x, n, shift);
  if (UseAvx2()) return LanedSumsAvx2(x, n, shift);
#endif
  return LanedSums(x, n, shift);
}

Moments FloatMoments(const float *x, int64_t n) {
  const double shift = x[0];
  const Sums s = FloatSums(x, n, shift);
  const double nn = static_cast<double>(n), m = s.s1 / nn;
  return {shift + m, std::max(0.0, s.s2 / nn - m * m)};
}

void Affine(const float *x, float *y, int64_t n, const AffineConsts &a) {
#if defined(__x86_64__)
  if (UseAvx512()) return AffineRowAvx512(x, y, n, a);
  if (UseAvx2()) return AffineRowAvx2(x, y, n, a);
#endif
  AffineRow(x, y, n, a);
}

// Mean and variance of x[0..n), n >= 1: float32 in one shifted pass, double in two.
template <class T>
Moments MomentsOf(const T *x, int64_t n) {
  if constexpr (std::is_same<T, float>::value) return FloatMoments(x, n);
  double sum = 0, sq = 0;
  for (int64_t j = 0; j < n; ++j) sum += x[j];
  const double mean = sum / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) sq += (x[j] - mean) * (x[j] - mean);
  return {mean, sq / static_cast<double>(n)};
}

template <class T>
void AffineOf(const T *x, T *y, int64_t n, double mean, double sc, double b) {
  if constexpr (std::is_same<T, float>::value) return Affine(x, y, n, MakeAffine(mean, sc, b));
  const double sh = b - mean * sc;
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<T>(x[j] * sc + sh);
}

template <class T>
class GroupNormKernel : public Kernel {
 public:
  GroupNormKernel(int64_t n, int64_t ch, int64_t groups, int64_t spatial, bool per_group, double eps)
      : n_(n), c_(ch), g_(groups), sp_(spatial), per_group_(per_group), eps_(eps) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]), *s = static_cast<const T *>(in[1]);
    const T *b = static_cast<const T *>(in[2]);
    T *y = static_cast<T *>(out[0]);
    const int64_t cpg = c_ / g_, len = cpg * sp_;
    for (int64_t i = 0; i < n_ * g_; ++i) {
      const T *xg = x + i * len;
      T *yg = y + i * len;
      const Moments mv = len ? MomentsOf(xg, len) : Moments{0.0, 0.0};
      const double mean = mv.mean, inv = 1.0 / std::sqrt(mv.var + eps_);
      const int64_t g = i % g_;
      for (int64_t k = 0; k < cpg; ++k) {
        const int64_t p = per_group_ ? g : g * cpg + k;
        AffineOf(xg + k * sp_, yg + k * sp_, sp_, mean, static_cast<double>(s[p]) * inv, static_cast<double>(b[p]));
      }
    }
    return true;
  }

 private:
  int64_t n_, c_, g_, sp_;
  bool per_group_;
  double eps_;
};

template <bool kInstance>
std::unique_ptr<Kernel> PrepareGroupNormFloat(const KernelCtx &c, std::string *reason) {
  float eps;
  int64_t groups = 0;
  const auto &xd = c.in[0]->dims;
  if (!AttrFloat(*c.node, "epsilon", 1e-5f, &eps, reason)) return nullptr;
  if (kInstance) groups = xd[1];
  else if (!AttrInt(*c.node, "num_groups", 0, &groups, reason)) return nullptr;
  if (groups <= 0) {
    *reason = "zero channels";
    return nullptr;
  }
  return MakeFloatKernel<GroupNormKernel>(c.in[0]->dtype, reason, xd[0], xd[1], groups, DimsProduct(xd, 2, xd.size()),
                                          !kInstance && c.opset < 21, static_cast<double>(eps));
}

// ---- MeanVarianceNormalization: (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9) over `axes` ----

bool MvnAxes(const Node &n, size_t rank, std::vector<bool> *reduce, std::string *reason) {
  std::vector<int64_t> axes;
  bool present;
  if (!AttrInts(n, "axes", &axes, &present, reason)) return false;
  if (!present) axes = {0, 2, 3};
  reduce->assign(rank, false);
  for (int64_t a : axes) {
    int64_t k;
    if (!NormalizeAxis(a, static_cast<int64_t>(rank), false, &k, reason)) return false;
    (*reduce)[k] = true;
  }
  return true;
}

bool InferMvn(InferCtx *c, std::string *reason) {
  if (!FloatInput(*c, 0, reason)) return false;
  c->out[0] = *c->in[0];
  std::vector<bool> reduce;
  return c->in[0]->IsUnknownRank() || MvnAxes(*c->node, c->in[0]->dims.size(), &reduce, reason);
}

template <class T>
class MvnKernel : public Kernel {
 public:
  MvnKernel(std::vector<int64_t> dims, std::vector<bool> reduce) : dims_(std::move(dims)), reduce_(std::move(reduce)) {
    // Group id of every element: its index over the kept axes.
    const int64_t n = DimsProduct(dims_, 0, dims_.size());
    group_.resize(n);
    std::vector<int64_t> ctr(dims_.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t g = 0;
      for (size_t d = 0; d < dims_.size(); ++d)
        if (!reduce_[d]) g = g * dims_[d] + ctr[d];
      group_[i] = g;
      ngroups_ = std::max(ngroups_, g + 1);
      for (size_t d = dims_.size(); d-- > 0;) {
        if (++ctr[d] < dims_[d]) break;
        ctr[d] = 0;
      }
    }
    sum_.resize(ngroups_);
    sq_.resize(ngroups_);
    cnt_.resize(ngroups_);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    std::fill(sum_.begin(), sum_.end(), 0.0);
    std::fill(sq_.begin(), sq_.end(), 0.0);
    std::fill(cnt_.begin(), cnt_.end(), 0.0);
    for (size_t i = 0; i < group_.size(); ++i) {
      sum_[group_[i]] += x[i];
      sq_[group_[i]] += static_cast<double>(x[i]) * x[i];
      cnt_[group_[i]] += 1;
    }
    for (int64_t g = 0; g < ngroups_; ++g) {
      sum_[g] /= cnt_[g];
      sq_[g] = std::sqrt(std::max(0.0, sq_[g] / cnt_[g] - sum_[g] * sum_[g])) + 1e-9;
    }
    for (size_t i = 0; i < group_.size(); ++i) y[i] = static_cast<T>((x[i] - sum_[group_[i]]) / sq_[group_[i]]);
    return true;
  }

 private:
  std::vector<int64_t> dims_;
  std::vector<bool> reduce_;
  std::vector<int64_t> group_;
  int64_t ngroups_ = 0;
  std::vector<double> sum_, sq_, cnt_;
};

// float32: the same statistics (sums of x and x^2 in double) over contiguous chunks. Adjacent axes that are both
// reduced or both kept are merged; each chunk of the innermost merged axis then belongs to one group (innermost
// axis reduced: lane sums, the float32 affine pass) or runs along consecutive groups (kept: element-wise).
class MvnFloatKernel : public Kernel {
 public:
  MvnFloatKernel(const std::vector<int64_t> &dims, const std::vector<bool> &reduce) {
    std::vector<std::pair<int64_t, bool>> runs;  // merged axes: (size, reduced)
    for (size_t d = 0; d < dims.size(); ++d) {
      if (!runs.empty() && runs.back().second == reduce[d]) runs.back().first *= dims[d];
      else runs.emplace_back(dims[d], reduce[d]);
    }
    len_ = runs.empty() ? 1 : runs.back().first;
    inner_reduced_ = !runs.empty() && runs.back().second;
    if (!runs.empty()) runs.pop_back();
    int64_t chunks = 1, kept = 1;
    for (const auto &r : runs) {
      chunks *= r.first;
      if (!r.second) kept *= r.first;
    }
    ngroups_ = inner_reduced_ ? kept : kept * len_;
    total_ = chunks * len_;
    chunk_group_.resize(chunks);
    std::vector<int64_t> ctr(runs.size(), 0);
    for (int64_t j = 0; j < chunks; ++j) {
      int64_t g = 0;
      for (size_t r = 0; r < runs.size(); ++r)
        if (!runs[r].second) g = g * runs[r].first + ctr[r];
      chunk_group_[j] = inner_reduced_ ? g : g * len_;
      for (size_t r = runs.size(); r-- > 0;) {
        if (++ctr[r] < runs[r].first) break;
        ctr[r] = 0;
      }
    }
    s1_.resize(ngroups_);
    s2_.resize(ngroups_);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const float *x = static_cast<const float *>(in[0]);
    float *y = static_cast<float *>(out[0]);
    if (total_ == 0) return true;
    std::fill(s1_.begin(), s1_.end(), 0.0);
    std::fill(s2_.begin(), s2_.end(), 0.0);
    const int64_t chunks = static_cast<int64_t>(chunk_group_.size());
    for (int64_t j = 0; j < chunks; ++j) Accumulate(x + j * len_, chunk_group_[j]);
    const double cnt = static_cast<double>(total_ / ngroups_);
    for (int64_t g = 0; g < ngroups_; ++g) {  // s1_ becomes the mean, s2_ the divisor
      s1_[g] /= cnt;
      s2_[g] = std::sqrt(std::max(0.0, s2_[g] / cnt - s1_[g] * s1_[g])) + 1e-9;
    }
    for (int64_t j = 0; j < chunks; ++j) {
      const float *xc = x + j * len_;
      float *yc = y + j * len_;
      const int64_t g = chunk_group_[j];
      if (inner_reduced_) {
        Affine(xc, yc, len_, MakeAffine(s1_[g], 1.0 / s2_[g], 0.0));
        continue;
      }
      for (int64_t t = 0; t < len_; ++t) yc[t] = static_cast<float>((xc[t] - s1_[g + t]) / s2_[g + t]);
    }
    return true;
  }

 private:
  void Accumulate(const float *xc, int64_t g) {
    if (inner_reduced_) {
      const Sums s = FloatSums(xc, len_, 0.0);
      s1_[g] += s.s1;
      s2_[g] += s.s2;
      return;
    }
    for (int64_t t = 0; t < len_; ++t) {
      const double v = xc[t];
      s1_[g + t] += v;
      s2_[g + t] += v * v;
    }
  }

  int64_t len_ = 1, ngroups_ = 1, total_ = 0;
  bool inner_reduced_ = false;
  std::vector<int64_t> chunk_group_;  // first group of each chunk
  std::vector<double> s1_, s2_;
};

std::unique_ptr<Kernel> PrepareMvnFloat(const KernelCtx &c, std::string *reason) {
  std::vector<bool> reduce;
  if (!MvnAxes(*c.node, c.in[0]->dims.size(), &reduce, reason)) return nullptr;
  if (c.in[0]->dtype == ElemType::kFloat) return std::make_unique<MvnFloatKernel>(c.in[0]->dims, reduce);
  return MakeFloatKernel<MvnKernel>(c.in[0]->dtype, reason, c.in[0]->dims, reduce);
}

// ---- LRN: x / (bias + alpha / size * sum of x^2 over neighbouring channels)^beta ----

bool ReadLrn(const Node &n, float *alpha, float *beta, float *bias, int64_t *size, std::string *reason) {
  if (!AttrFloat(n, "alpha", 1e-4f, alpha, reason) || !AttrFloat(n, "beta", 0.75f, beta, reason) ||
      !AttrFloat(n, "bias", 1.0f, bias, reason) || !AttrInt(n, "size", 0, size, reason))
    return false;
  if (*size <= 0) {
    *reason = "attribute 'size' must be given and positive";
    return false;
  }
  return true;
}

bool InferLrn(InferCtx *c, std::string *reason) {
  float a, b, bias;
  int64_t size;
  if (!FloatInput(*c, 0, reason) || !ReadLrn(*c->node, &a, &b, &bias, &size, reason)) return false;
  if (!c->in[0]->IsUnknownRank() && c->in[0]->dims.size() < 3) {
    *reason = "input " + DescStr(*c->in[0]) + " must be [N, C, d1, ...]";
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

template <class T>
class LrnKernel : public Kernel {
 public:
  LrnKernel(int64_t n, int64_t ch, int64_t sp, float alpha, float beta, float bias, int64_t size)
      : n_(n), c_(ch), sp_(sp), alpha_(alpha), beta_(beta), bias_(bias), size_(size) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    const int64_t lo = (size_ - 1) / 2, hi = size_ / 2;  // floor and ceil of (size - 1) / 2
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t ch = 0; ch < c_; ++ch)
        for (int64_t j = 0; j < sp_; ++j) {
          double sq = 0;
          for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(c_ - 1, ch + hi); ++k) {
            const double v = x[(b * c_ + k) * sp_ + j];
            sq += v * v;
          }
          const int64_t i = (b * c_ + ch) * sp_ + j;
          y[i] = static_cast<T>(x[i] / PowBeta(bias_ + alpha_ / static_cast<double>(size_) * sq));
        }
    return true;
  }

 private:
  // base^beta: the common betas by square roots (beta = 0.75 is the default; pow costs ~10x a sqrt per element).
  double PowBeta(double base) const {
    if (beta_ == 0.75) {
      const double r = std::sqrt(base);
      return r * std::sqrt(r);
    }
    if (beta_ == 0.5) return std::sqrt(base);
    if (beta_ == 1.0) return base;
    return std::pow(base, beta_);
  }
  int64_t n_, c_, sp_;
  double alpha_, beta_, bias_;
  int64_t size_;
};

std::unique_ptr<Kernel> PrepareLrnFloat(const KernelCtx &c, std::string *reason) {
  float a, b, bias;
  int64_t size;
  if (!ReadLrn(*c.node, &a, &b, &bias, &size, reason)) return nullptr;
  const auto &xd = c.in[0]->dims;
  return MakeFloatKernel<LrnKernel>(c.in[0]->dtype, reason, xd[0], xd[1], DimsProduct(xd, 2, xd.size()), a, b, bias,
                                    size);
}

// ---- RotaryEmbedding: rotates the first rotary_embedding_dim values of every head by cos/sin ----

struct RotaryAttrs {
  int64_t interleaved = 0, rdim = 0, heads = 0;
};

bool ReadRotary(const Node &n, RotaryAttrs *a, std::string *reason) {
  if (!AttrInt(n, "interleaved", 0, &a->interleaved, reason) ||
      !AttrInt(n, "rotary_embedding_dim", 0, &a->rdim, reason) || !AttrInt(n, "num_heads", 0, &a->heads, reason))
    return false;
  if (a->rdim < 0 || a->heads < 0) {
    *reason = "attributes 'rotary_embedding_dim' and 'num_heads' must be nonnegative";
    return false;
  }
  return true;
}

// Geometry in the [B, S, H, D] view.
struct RotaryGeom {
  int64_t b = 0, s = 0, h = 0, d = 0, rdim = 0;
  bool rank3 = false;
};

bool RotaryGeometry(const std::vector<const TensorDesc *> &in, bool has_pos, const RotaryAttrs &a, RotaryGeom *g,
                    std::string *reason) {
  const auto &x = in[0]->dims;
  if (x.size() != 3 && x.size() != 4) {
    *reason = "input " + ShapeStr(x) + " must be [B, H, S, D] or [B, S, H*D]";
    return false;
  }
  g->rank3 = x.size() == 3;
  g->b = x[0];
  if (g->rank3) {
    if (a.heads <= 0 || (x[2] >= 0 && x[2] % a.heads != 0)) {
      *reason = "a 3-D input needs attribute 'num_heads' dividing its hidden size " + std::to_string(x[2]);
      return false;
    }
    g->s = x[1];
    g->h = a.heads;
    g->d = x[2] < 0 ? -1 : x[2] / a.heads;
  } else {
    g->h = x[1];
    g->s = x[2];
    g->d = x[3];
  }
  g->rdim = a.rdim ? a.rdim : g->d;
  if (g->d >= 0 && (g->rdim > g->d || g->rdim % 2 != 0)) {
    *reason = "rotary_embedding_dim " + std::to_string(g->rdim) + " must be even and at most the head size " +
              std::to_string(g->d);
    return false;
  }
  const auto &cs = in[1]->dims;
  const size_t want = has_pos ? 2 : 3;
  if (cs.size() != want || in[2]->dims != cs || (g->rdim >= 0 && cs.back() >= 0 && cs.back() != g->rdim / 2)) {
    *reason = "cos_cache " + ShapeStr(cs) + " and sin_cache " + ShapeStr(in[2]->dims) + " must both be " +
              (has_pos ? "[max_position, " : "[B, S, ") + std::to_string(g->rdim / 2) + "]";
    return false;
  }
  return true;
}

bool InferRotary(InferCtx *c, std::string *reason) {
  if (!FloatInput(*c, 0, reason) || !SameDtype(*c, 1, reason) || !SameDtype(*c, 2, reason)) return false;
  RotaryAttrs a;
  if (!ReadRotary(*c->node, &a, reason)) return false;
  c->out[0] = *c->in[0];
  for (size_t i = 0; i < 4; ++i)
    if (c->has(i) && c->in[i]->IsUnknownRank()) return true;
  if (c->has(3) && c->in[3]->dtype != ElemType::kInt64) {
    *reason = DtypeNotSupported(c->in[3]->dtype, "position_ids");
    return false;
  }
  RotaryGeom g;
  return RotaryGeometry(c->in, c->has(3), a, &g, reason);
}

template <class T>
class RotaryKernel : public Kernel {
 public:
  RotaryKernel(RotaryGeom g, bool interleaved, bool has_pos, int64_t max_pos)
      : g_(g), interleaved_(interleaved), has_pos_(has_pos), max_pos_(max_pos) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const T *x = static_cast<const T *>(in[0]), *cosc = static_cast<const T *>(in[1]);
    const T *sinc = static_cast<const T *>(in[2]);
    const int64_t *pos = has_pos_ ? static_cast<const int64_t *>(in[3]) : nullptr;
    T *y = static_cast<T *>(out[0]);
    const int64_t half = g_.rdim / 2;
    for (int64_t b = 0; b < g_.b; ++b)
      for (int64_t s = 0; s < g_.s; ++s) {
        int64_t row = b * g_.s + s;
        if (pos) {
          row = pos[b * g_.s + s];
          if (row < 0 || row >= max_pos_) {
            *reason = "position_ids value " + std::to_string(row) + " is outside the cache's [0, " +
                      std::to_string(max_pos_) + ")";
            return false;
          }
        }
        const T *cr = cosc + row * half, *sr = sinc + row * half;
        for (int64_t h = 0; h < g_.h; ++h) {
          const int64_t off = g_.rank3 ? ((b * g_.s + s) * g_.h + h) * g_.d : ((b * g_.h + h) * g_.s + s) * g_.d;
          const T *xv = x + off;
          T *yv = y + off;
          for (int64_t k = 0; k < half; ++k) {
            const int64_t i1 = interleaved_ ? 2 * k : k, i2 = interleaved_ ? 2 * k + 1 : k + half;
            const T x1 = xv[i1], x2 = xv[i2];
            yv[i1] = cr[k] * x1 - sr[k] * x2;
            yv[i2] = sr[k] * x1 + cr[k] * x2;
          }
          for (int64_t k = g_.rdim; k < g_.d; ++k) yv[k] = xv[k];
        }
      }
    return true;
  }

 private:
  RotaryGeom g_;
  bool interleaved_, has_pos_;
  int64_t max_pos_;
};

std::unique_ptr<Kernel> PrepareRotaryFloat(const KernelCtx &c, std::string *reason) {
  RotaryAttrs a;
  RotaryGeom g;
  if (!ReadRotary(*c.node, &a, reason) || !RotaryGeometry(c.in, c.has(3), a, &g, reason)) return nullptr;
  return MakeFloatKernel<RotaryKernel>(c.in[0]->dtype, reason, g, a.interleaved != 0, c.has(3), c.in[1]->dims[0]);
}

// ---- Swish (x * sigmoid(alpha x)) and SwiGLU (Swish(a) * b) ----

bool InferSwish(InferCtx *c, std::string *reason) {
  float alpha;
  if (!FloatInput(*c, 0, reason) || !AttrFloat(*c->node, "alpha", 1.0f, &alpha, reason)) return false;
  c->out[0] = *c->in[0];
  return true;
}

bool InferSwiGlu(InferCtx *c, std::string *reason) {
  if (!InferSwish(c, reason) || !SameDtype(*c, 1, reason)) return false;
  const TensorDesc &a = *c->in[0], &b = *c->in[1];
  if (!a.IsUnknownRank() && !b.IsUnknownRank()) {
    bool same = a.dims.size() == b.dims.size();
    for (size_t i = 0; same && i < a.dims.size(); ++i) same = !DimsMismatch(a.dims[i], b.dims[i]);
    if (!same) {
      *reason = "inputs A " + DescStr(a) + " and B " + DescStr(b) + " must have the same shape (no broadcasting)";
      return false;
    }
  }
  return true;
}

// kHalf: float16 storage computed in float, rounding after each step like the reference's float16 numpy ops.
template <class T, bool kGlu, bool kHalf>
class SwishKernel : public Kernel {
 public:
  SwishKernel(int64_t n, float alpha) : n_(n), alpha_(static_cast<T>(alpha)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *a = static_cast<const T *>(in[0]);
    const T *b = kGlu ? static_cast<const T *>(in[1]) : nullptr;
    T *y = static_cast<T *>(out[0]);
    if constexpr (std::is_same<T, float>::value && !kHalf) {  // the vectorised sigmoid
      for (int64_t i = 0; i < n_; ++i) {
        const float v = a[i] * vmath::Sigmoid(alpha_ * a[i]);
        y[i] = kGlu ? v * b[i] : v;
      }
      return true;
    }
    for (int64_t i = 0; i < n_; ++i) {
      const T e = R(std::exp(R(-R(alpha_ * a[i]))));
      const T v = R(a[i] * R(T(1) / R(T(1) + e)));
      y[i] = kGlu ? R(v * b[i]) : v;
    }
    return true;
  }

 private:
  static T R(T v) {
    if constexpr (kHalf) return HalfToFloat(FloatToHalf(v));
    else return v;
  }
  int64_t n_;
  T alpha_;
};

template <bool kGlu, bool kHalf>
std::unique_ptr<Kernel> PrepareSwishFloat(const KernelCtx &c, std::string *reason) {
  float alpha;
  if (!AttrFloat(*c.node, "alpha", 1.0f, &alpha, reason)) return nullptr;
  const int64_t n = c.in[0]->NumElements();
  if (c.in[0]->dtype == ElemType::kFloat) return std::make_unique<SwishKernel<float, kGlu, kHalf>>(n, alpha);
  if constexpr (!kHalf) {
    if (c.in[0]->dtype == ElemType::kDouble) return std::make_unique<SwishKernel<double, kGlu, false>>(n, alpha);
  }
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

template <bool kGlu>
std::unique_ptr<Kernel> PrepareSwish(const KernelCtx &c, std::string *reason) {
  if (!HasHalfTypes(c)) return PrepareSwishFloat<kGlu, false>(c, reason);
  return c.in[0]->dtype == ElemType::kFloat16 ? PrepareViaFloat(c, PrepareSwishFloat<kGlu, true>, reason)
                                              : PrepareViaFloat(c, PrepareSwishFloat<kGlu, false>, reason);
}

}  // namespace

void RegisterNormOps(std::vector<OpDef> *ops) {
  ops->push_back({"RMSNormalization", 2, 2, 1, 1, nullptr, InferRms, ViaFloatIfHalf<PrepareRmsFloat>, true});
  ops->push_back({"InstanceNormalization", 3, 3, 1, 1, nullptr, InferInstanceNorm,
                  ViaFloatIfHalf<PrepareGroupNormFloat<true>>, true});
  ops->push_back({"GroupNormalization", 3, 3, 1, 1, nullptr, InferGroupNorm,
                  ViaFloatIfHalf<PrepareGroupNormFloat<false>>, true});
  ops->push_back({"MeanVarianceNormalization", 1, 1, 1, 1, nullptr, InferMvn, ViaFloatIfHalf<PrepareMvnFloat>, true});
  ops->push_back({"LRN", 1, 1, 1, 1, nullptr, InferLrn, ViaFloatIfHalf<PrepareLrnFloat>, true});
  ops->push_back({"RotaryEmbedding", 3, 4, 1, 1, nullptr, InferRotary, ViaFloatIfHalf<PrepareRotaryFloat>, true});
  ops->push_back({"Swish", 1, 1, 1, 1, nullptr, InferSwish, PrepareSwish<false>, true});
  ops->push_back({"SwiGLU", 2, 2, 1, 1, nullptr, InferSwiGlu, PrepareSwish<true>, true});
}

}  // namespace onnx
}  // namespace twin
