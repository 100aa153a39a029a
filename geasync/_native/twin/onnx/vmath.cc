// Array kernels of vmath.h, each compiled for AVX-512, AVX2+FMA and the baseline, chosen once at run time.
// The loops only call the branch-free inline functions, so GCC vectorises each variant for its target; the whole
// build keeps default flags and runs on any x86-64 (and elsewhere with the baseline loop alone).
// no-trapping-math lets the selects be if-converted; no-math-errno lets sqrt become one instruction;
// fp-contract=fast fuses multiply-adds in the FMA variants.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=fast")
#endif

#include "vmath.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace vmath {
namespace {


// One element-wise loop per instruction set (the compiler vectorises F for each), picked at run time; T is float or
// double, FnT the matching array-function type.
#if defined(__x86_64__)
#define TWIN_VMATH_VARIANTS_T(Name, F, T, FnT)                                                                  \
  __attribute__((target("avx512f,avx512dq"))) void Name##Avx512(const T *x, T *y, int64_t n) {                  \
    for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);                                                             \
  }                                                                                                             \
  __attribute__((target("avx2,fma"))) void Name##Avx2(const T *x, T *y, int64_t n) {                            \
    for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);                                                             \
  }                                                                                                             \
  void Name##Baseline(const T *x, T *y, int64_t n) {                                                            \
    for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);                                                             \
  }                                                                                                             \
  FnT Pick##Name() {                                                                                            \
    switch (ActiveIsa()) {                                                                                      \
      case Isa::kAvx512: return Name##Avx512;                                                                   \
      case Isa::kAvx2: return Name##Avx2;                                                                       \
      default: return Name##Baseline;                                                                           \
    }                                                                                                           \
  }
#else
#define TWIN_VMATH_VARIANTS_T(Name, F, T, FnT)                                             \
  void Name##Baseline(const T *x, T *y, int64_t n) {                                       \
    for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);                                        \
  }                                                                                        \
  FnT Pick##Name() { return Name##Baseline; }
#endif
#define TWIN_VMATH_VARIANTS(Name, F) TWIN_VMATH_VARIANTS_T(Name, F, float, ArrayFn)

// exp over the whole float range. The AVX-512 variant applies 2^n with vscalefps, which rounds once into the
// denormal range and overflows to inf by itself: the inline Exp's integer clamp, two-step scaling and two selects
// (10 of its ~25 instructions a vector) become a clamp of x and one instruction (Exp x8 of 64k floats: 1.4x of
// onnxruntime -> ~1.0x). Same reduction and polynomial; the clamp keeps NaN (vmaxps returns its second operand).
#if defined(__x86_64__)
__attribute__((target("avx512f"), always_inline)) inline __m512 ExpScalef16(__m512 v) {
  // (maskz forms throughout, as for sqrt below)
  v = _mm512_maskz_min_ps(0xffff, _mm512_set1_ps(88.8f), _mm512_maskz_max_ps(0xffff, _mm512_set1_ps(-104.0f), v));
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(v, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  const __m512 r =
      _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v));
  __m512 p = _mm512_set1_ps(1.3836828293278813e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.374814875423908e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.166822507977486e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666419804096222e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.9999991059303284e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(0xffff, p, n);
}
__attribute__((target("avx512f"))) void ExpAvx512(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, ExpScalef16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, ExpScalef16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
__attribute__((target("avx2,fma"))) void ExpAvx2(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Exp(x[i]);
}
void ExpBaseline(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Exp(x[i]);
}
ArrayFn PickExp() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return ExpAvx512;
    case Isa::kAvx2: return ExpAvx2;
    default: return ExpBaseline;
  }
}
#else
TWIN_VMATH_VARIANTS(Exp, Exp)
#endif
TWIN_VMATH_VARIANTS(Log, Log)
TWIN_VMATH_VARIANTS(Erf, Erf)

}  // namespace

// Tanh's and Sigmoid's clamp bounds, read at run time by their array kernels. With constant bounds GCC folds
// f(bound) and moves the clamp's selects after the math (4 compares, 3 logic ops and 2 blends per vector instead
// of a min and a max): ~25% slower. External linkage and never written, so nothing can fold them.
float g_tanh_bound = 9.0f, g_sigmoid_lo = -104.0f, g_sigmoid_hi = 20.0f;

namespace {

TWIN_VMATH_INLINE float TanhRt(float x, float a, float) { return TanhClamped(x, a); }
TWIN_VMATH_INLINE float SigmoidRt(float x, float a, float b) { return SigmoidClamped(x, a, b); }
#define TWIN_VMATH_BOUNDED_LOOP(F, A, B)         \
  {                                              \
    const float a = A, b = B;                    \
    for (int64_t i = 0; i < n; ++i) y[i] = F(x[i], a, b); \
  }
#if defined(__x86_64__)
#define TWIN_VMATH_BOUNDED_VARIANTS(Name, F, A, B)                                                                \
  __attribute__((target("avx512f,avx512dq"))) void Name##Avx512(const float *x, float *y, int64_t n)              \
      TWIN_VMATH_BOUNDED_LOOP(F, A, B)                                                                            \
  __attribute__((target("avx2,fma"))) void Name##Avx2(const float *x, float *y, int64_t n)                        \
      TWIN_VMATH_BOUNDED_LOOP(F, A, B)                                                                            \
  void Name##Baseline(const float *x, float *y, int64_t n) TWIN_VMATH_BOUNDED_LOOP(F, A, B)                       \
  ArrayFn Pick##Name() {                                                                                          \
    switch (ActiveIsa()) {                                                                                        \
      case Isa::kAvx512: return Name##Avx512;                                                                     \
      case Isa::kAvx2: return Name##Avx2;                                                                         \
      default: return Name##Baseline;                                                                             \
    }                                                                                                             \
  }
#else
#define TWIN_VMATH_BOUNDED_VARIANTS(Name, F, A, B)                                                                  \
  void Name##Baseline(const float *x, float *y, int64_t n) TWIN_VMATH_BOUNDED_LOOP(F, A, B)                         \
  ArrayFn Pick##Name() { return Name##Baseline; }
#endif
TWIN_VMATH_BOUNDED_VARIANTS(Tanh, TanhRt, g_tanh_bound, 0.0f)
TWIN_VMATH_BOUNDED_VARIANTS(Sigmoid, SigmoidRt, g_sigmoid_lo, g_sigmoid_hi)

// (maskz forms: GCC 12 warns about the undefined passthrough of the plain one.)
// sqrt: GCC keeps a libm call per element for errno unless the whole build has -fno-math-errno, so the vector
// variants use the instructions directly (correctly rounded, NaN for negative inputs, like std::sqrt).
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void SqrtAvx512(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_maskz_sqrt_ps(0xffff, _mm512_loadu_ps(x + i)));
  const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
  _mm512_mask_storeu_ps(y + i, m, _mm512_maskz_sqrt_ps(m, _mm512_maskz_loadu_ps(m, x + i)));
}
__attribute__((target("avx2"))) void SqrtAvx2(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) _mm_store_ss(y + i, _mm_sqrt_ss(_mm_load_ss(x + i)));
}
void SqrtBaseline(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
  for (; i < n; ++i) _mm_store_ss(y + i, _mm_sqrt_ss(_mm_load_ss(x + i)));
}
ArrayFn PickSqrt() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return SqrtAvx512;
    case Isa::kAvx2: return SqrtAvx2;
    default: return SqrtBaseline;
  }
}
#else
void SqrtBaseline(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
}
ArrayFn PickSqrt() { return SqrtBaseline; }
#endif
TWIN_VMATH_VARIANTS(Gelu, Gelu)
TWIN_VMATH_VARIANTS(Sin, Sin)
TWIN_VMATH_VARIANTS(Cos, Cos)
TWIN_VMATH_VARIANTS(GeluTanh, GeluTanh)
TWIN_VMATH_VARIANTS(Atan, Atan)

// Asin / Acos: per block, the sqrt arguments, one vector sqrt pass (the Sqrt kernels above), then the polynomial.
constexpr int64_t kRootBlock = 256;
#define TWIN_VMATH_ROOT_LOOP(F, SqrtN)                                                       \
  {                                                                                          \
    float root[kRootBlock];                                                                  \
    for (int64_t i = 0; i < n; i += kRootBlock) {                                            \
      const int64_t m = n - i < kRootBlock ? n - i : kRootBlock;                             \
      for (int64_t j = 0; j < m; ++j) root[j] = AsinRootArg(AbsOf(x[i + j]));                \
      SqrtN(root, root, m);                                                                  \
      for (int64_t j = 0; j < m; ++j) y[i + j] = F(x[i + j], root[j]);                       \
    }                                                                                        \
  }
#if defined(__x86_64__)
#define TWIN_VMATH_ROOT_VARIANTS(Name, F)                                                                         \
  __attribute__((target("avx512f,avx512dq"))) void Name##Avx512(const float *x, float *y, int64_t n)              \
      TWIN_VMATH_ROOT_LOOP(F, SqrtAvx512)                                                                         \
  __attribute__((target("avx2,fma"))) void Name##Avx2(const float *x, float *y, int64_t n)                        \
      TWIN_VMATH_ROOT_LOOP(F, SqrtAvx2)                                                                           \
  void Name##Baseline(const float *x, float *y, int64_t n) TWIN_VMATH_ROOT_LOOP(F, SqrtBaseline)                  \
  ArrayFn Pick##Name() {                                                                                          \
    switch (ActiveIsa()) {                                                                                        \
      case Isa::kAvx512: return Name##Avx512;                                                                     \
      case Isa::kAvx2: return Name##Avx2;                                                                         \
      default: return Name##Baseline;                                                                             \
    }                                                                                                             \
  }
#else
#define TWIN_VMATH_ROOT_VARIANTS(Name, F)                                                                           \
  void Name##Baseline(const float *x, float *y, int64_t n) TWIN_VMATH_ROOT_LOOP(F, SqrtBaseline)                    \
  ArrayFn Pick##Name() { return Name##Baseline; }
#endif
TWIN_VMATH_ROOT_VARIANTS(Asin, AsinOfRoot)
TWIN_VMATH_ROOT_VARIANTS(Acos, AcosOfRoot)

TWIN_VMATH_INLINE float Floor(float x) { return __builtin_floorf(x); }
TWIN_VMATH_INLINE float Ceil(float x) { return __builtin_ceilf(x); }
TWIN_VMATH_INLINE float Round(float x) { return __builtin_nearbyintf(x); }
// float64 kernels: the same loops over doubles (the int64 <-> double bit tricks vectorise on AVX2 as well).
#define TWIN_VMATH_VARIANTS_D(Name, F) TWIN_VMATH_VARIANTS_T(Name, F, double, ArrayFnD)
TWIN_VMATH_VARIANTS_D(ExpDouble, ExpD)
TWIN_VMATH_VARIANTS_D(TanhDouble, TanhD)
TWIN_VMATH_VARIANTS_D(SigmoidDouble, SigmoidD)
TWIN_VMATH_VARIANTS_D(SinDouble, SinD)
TWIN_VMATH_VARIANTS_D(CosDouble, CosD)

TWIN_VMATH_VARIANTS(Floor, Floor)
TWIN_VMATH_VARIANTS(Ceil, Ceil)
TWIN_VMATH_VARIANTS(Round, Round)

// ---- fused row kernels: one always-inline body, compiled per instruction set like the element-wise loops ----

constexpr int64_t kLanes = 16;  // independent partial results: the reductions vectorise without reassociation

// Max of a row (NaN elements are skipped: the exp pass turns them into NaN rows anyway), in 4-float GCC vectors:
// GCC leaves a lane-array form of this loop scalar (its NaN-aware max does not vectorise), and wider vector types
// declared outside the per-ISA functions get split into scalars; 4 floats exist on every x86-64 target.
typedef float Float4 __attribute__((vector_size(16)));
TWIN_VMATH_INLINE Float4 MaxOf(Float4 a, Float4 b) { return a > b ? a : b; }
TWIN_VMATH_INLINE float RowMax(const float *__restrict xr, int64_t n) {
  const float ninf = -__builtin_inff();
  Float4 m0 = {ninf, ninf, ninf, ninf}, m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    Float4 v0, v1, v2, v3;
    std::memcpy(&v0, xr + i, 16);
    std::memcpy(&v1, xr + i + 4, 16);
    std::memcpy(&v2, xr + i + 8, 16);
    std::memcpy(&v3, xr + i + 12, 16);
    m0 = MaxOf(v0, m0);
    m1 = MaxOf(v1, m1);
    m2 = MaxOf(v2, m2);
    m3 = MaxOf(v3, m3);
  }
  const Float4 m = MaxOf(MaxOf(m0, m1), MaxOf(m2, m3));
  float mx = ninf;
  for (int j = 0; j < 4; ++j) mx = m[j] > mx ? m[j] : mx;
  for (; i < n; ++i) mx = xr[i] > mx ? xr[i] : mx;
  return mx;
}

// Rows are normalised in blocks: each row's max and sum of exps first, then the block's scale factors (its logs or
// reciprocals, vectorised across the rows), then each row's final pass. Row by row, every row's final pass waited
// for its own horizontal sum and scalar log (~100 cycles of latency): LogSoftmax of 256-float rows ran 1.45x
// slower than Softmax. A block stays within ~64 KiB so its rows are still cached for the final pass.
constexpr int64_t kSoftmaxBlockRows = 16, kSoftmaxBlockFloats = 16384;
// Softmax and LayerNormalization may run in place (y == x: their kernels' InPlaceOver). Their loops are compiled
// twice, as kSame = false for distinct buffers and kSame = true for y == x, where x is never dereferenced and the
// rows are read through y: __restrict stays true either way (without it GCC versions the loops with overlap checks,
// and they ran ~1.2x slower).
template <bool kSame>
TWIN_VMATH_INLINE void SoftmaxImpl(const float *__restrict x, float *__restrict y, int64_t rows, int64_t n,
                                   bool log_softmax) {
  const int64_t fit = n > 0 ? kSoftmaxBlockFloats / n : kSoftmaxBlockRows;
  const int64_t per_block = fit < 1 ? 1 : fit < kSoftmaxBlockRows ? fit : kSoftmaxBlockRows;
  float mxs[kSoftmaxBlockRows], sums[kSoftmaxBlockRows];
  for (int64_t r0 = 0; r0 < rows; r0 += per_block) {
    const int64_t nb = rows - r0 < per_block ? rows - r0 : per_block;
    for (int64_t b = 0; b < nb; ++b) {
      const float *xr = (kSame ? y : x) + (r0 + b) * n;
      float *yr = y + (r0 + b) * n;
      const float mx = RowMax(xr, n);
      float acc[kLanes] = {};
      float sum = 0.f;
      int64_t i = 0;
      // LogSoftmax stores the exps too (overwritten below): without the stores GCC's loop ran 1.7x slower
      for (; i + kLanes <= n; i += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) {
          const float e = ExpNonPositive(xr[i + j] - mx);
          yr[i + j] = e;
          acc[j] += e;
        }
      for (; i < n; ++i) {
        const float e = ExpNonPositive(xr[i] - mx);
        yr[i] = e;
        sum += e;
      }
      for (int64_t j = 0; j < kLanes; ++j) sum += acc[j];
      mxs[b] = mx;
      sums[b] = sum;
    }
    if (log_softmax) {
      for (int64_t b = 0; b < nb; ++b) sums[b] = Log(sums[b]) + mxs[b];
      for (int64_t b = 0; b < nb; ++b) {
        const float *xr = (kSame ? y : x) + (r0 + b) * n;
        float *yr = y + (r0 + b) * n;
        const float lse = sums[b];
        for (int64_t k = 0; k < n; ++k) yr[k] = xr[k] - lse;
      }
    } else {
      for (int64_t b = 0; b < nb; ++b) sums[b] = 1.0f / sums[b];
      for (int64_t b = 0; b < nb; ++b) {
        float *yr = y + (r0 + b) * n;
        const float inv = sums[b];
        for (int64_t k = 0; k < n; ++k) yr[k] *= inv;
      }
    }
  }
}

// Softmax along a strided axis: x is [outer, n, inner] and each (o, j) column of n values is normalised. The
// inner index runs in the vector lanes (blocks of kStrideBlock columns, the block's state on the stack), so every
// pass reads contiguous rows of one outer slice (n * inner floats, usually cache resident) instead of transposing.
// Per column the arithmetic is SoftmaxBody's: max skipping NaN, ExpNonPositive of x - max summed in order of k.
constexpr int64_t kStrideBlock = 64;
template <bool kSame>
TWIN_VMATH_INLINE void SoftmaxStridedImpl(const float *__restrict x, float *__restrict y, int64_t outer, int64_t n,
                                          int64_t inner, bool log_softmax) {
  for (int64_t o = 0; o < outer; ++o) {
    const float *xo = (kSame ? y : x) + o * n * inner;
    float *yo = y + o * n * inner;
    for (int64_t j0 = 0; j0 < inner; j0 += kStrideBlock) {
      const int64_t w = inner - j0 < kStrideBlock ? inner - j0 : kStrideBlock;
      const float *xb = xo + j0;
      float *yb = yo + j0;
      float mx[kStrideBlock], sum[kStrideBlock];
      for (int64_t j = 0; j < w; ++j) {
        mx[j] = -__builtin_inff();
        sum[j] = 0.0f;
      }
      for (int64_t k = 0; k < n; ++k) {
        const float *xr = xb + k * inner;
        for (int64_t j = 0; j < w; ++j) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
      }
      for (int64_t k = 0; k < n; ++k) {
        const float *xr = xb + k * inner;
        float *yr = yb + k * inner;
        for (int64_t j = 0; j < w; ++j) {
          const float e = ExpNonPositive(xr[j] - mx[j]);
          yr[j] = e;
          sum[j] += e;
        }
      }
      if (log_softmax) {
        for (int64_t j = 0; j < w; ++j) sum[j] = Log(sum[j]) + mx[j];
        for (int64_t k = 0; k < n; ++k) {
          const float *xr = xb + k * inner;
          float *yr = yb + k * inner;
          for (int64_t j = 0; j < w; ++j) yr[j] = xr[j] - sum[j];
        }
      } else {
        for (int64_t j = 0; j < w; ++j) sum[j] = 1.0f / sum[j];
        for (int64_t k = 0; k < n; ++k) {
          float *yr = yb + k * inner;
          for (int64_t j = 0; j < w; ++j) yr[j] *= sum[j];
        }
      }
    }
  }
}

template <bool kSame>
TWIN_VMATH_INLINE void LayerNormImpl(const float *__restrict x, float *__restrict y, int64_t rows, int64_t n,
                                     const float *__restrict scale, const float *__restrict bias, float epsilon,
                                     float *__restrict mean_out, float *__restrict inv_out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = (kSame ? y : x) + r * n;
    float *yr = y + r * n;
    double acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += xr[i + j];
    double sum = 0;
    for (; i < n; ++i) sum += xr[i];
    for (int64_t j = 0; j < kLanes; ++j) sum += acc[j];
    const double mean = n ? sum / static_cast<double>(n) : 0.0;
    double sq[kLanes] = {};
    double sqs = 0;
    for (i = 0; i + kLanes <= n; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) {
        const double d = static_cast<double>(xr[i + j]) - mean;
        sq[j] += d * d;
      }
    for (; i < n; ++i) {
      const double d = static_cast<double>(xr[i]) - mean;
      sqs += d * d;
    }
    for (int64_t j = 0; j < kLanes; ++j) sqs += sq[j];
    const double var = n ? sqs / static_cast<double>(n) : 0.0;
    const double inv = 1.0 / __builtin_sqrt(var + static_cast<double>(epsilon));
    const float m = static_cast<float>(mean), iv = static_cast<float>(inv);
    if (bias) {
      for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - m) * iv * scale[k] + bias[k];
    } else {
      for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - m) * iv * scale[k];
    }
    if (mean_out) mean_out[r] = m;
    if (inv_out) inv_out[r] = iv;
  }
}

TWIN_VMATH_INLINE void SoftmaxBody(const float *x, float *y, int64_t rows, int64_t n, bool log_softmax) {
  if (x == y) return SoftmaxImpl<true>(x, y, rows, n, log_softmax);
  SoftmaxImpl<false>(x, y, rows, n, log_softmax);
}
TWIN_VMATH_INLINE void SoftmaxStridedBody(const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                                          bool log_softmax) {
  if (x == y) return SoftmaxStridedImpl<true>(x, y, outer, n, inner, log_softmax);
  SoftmaxStridedImpl<false>(x, y, outer, n, inner, log_softmax);
}
TWIN_VMATH_INLINE void LayerNormBody(const float *x, float *y, int64_t rows, int64_t n, const float *scale,
                                     const float *bias, float epsilon, float *mean_out, float *inv_out) {
  if (x == y) return LayerNormImpl<true>(x, y, rows, n, scale, bias, epsilon, mean_out, inv_out);
  LayerNormImpl<false>(x, y, rows, n, scale, bias, epsilon, mean_out, inv_out);
}

#if defined(__x86_64__)
#define TWIN_VMATH_FUSED(Name, Params, Args)                                                   \
  __attribute__((target("avx512f,avx512dq"))) void Name##Avx512 Params { Name##Body Args; }    \
  __attribute__((target("avx2,fma"))) void Name##Avx2 Params { Name##Body Args; }              \
  void Name##Baseline Params { Name##Body Args; }
#else
#define TWIN_VMATH_FUSED(Name, Params, Args) \
  void Name##Baseline Params { Name##Body Args; }
#endif

#define TWIN_SOFTMAX_PARAMS (const float *x, float *y, int64_t rows, int64_t n, bool log_softmax)
TWIN_VMATH_FUSED(Softmax, TWIN_SOFTMAX_PARAMS, (x, y, rows, n, log_softmax))
#define TWIN_SOFTMAX_STRIDED_PARAMS \
  (const float *x, float *y, int64_t outer, int64_t n, int64_t inner, bool log_softmax)
TWIN_VMATH_FUSED(SoftmaxStrided, TWIN_SOFTMAX_STRIDED_PARAMS, (x, y, outer, n, inner, log_softmax))
#define TWIN_LAYERNORM_PARAMS                                                                                     \
  (const float *x, float *y, int64_t rows, int64_t n, const float *scale, const float *bias, float epsilon,       \
   float *mean, float *inv_std)
TWIN_VMATH_FUSED(LayerNorm, TWIN_LAYERNORM_PARAMS, (x, y, rows, n, scale, bias, epsilon, mean, inv_std))

// The largest magnitude bit pattern is a NaN's: an integer maximum vectorises (a bool or'ed with x != x did not).
TWIN_VMATH_INLINE void AnyNanBody(const float *__restrict x, int64_t n, bool *out) {
  int32_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    int32_t b;
    std::memcpy(&b, x + j, sizeof b);
    b &= 0x7fffffff;
    m = b > m ? b : m;
  }
  *out = m > 0x7f800000;
}
#define TWIN_ANY_NAN_PARAMS (const float *x, int64_t n, bool *out)
TWIN_VMATH_FUSED(AnyNan, TWIN_ANY_NAN_PARAMS, (x, n, out))

// IsNaN / IsInf on the bits: one loop per mode, integer compares and a narrowing store. Per instruction set, as the
// baseline's SSE2 has no single narrowing from 32 to 8 bits (2.6 instructions an element there).
TWIN_VMATH_INLINE void FloatClassBody(const float *__restrict x, uint8_t *__restrict y, int64_t n, bool nan,
                                      bool pos_inf, bool neg_inf) {
  const auto bits = [x](int64_t i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    return b;
  };
  if (nan) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>((bits(i) & 0x7fffffffu) > 0x7f800000u);
    return;
  }
  const uint8_t pos = pos_inf ? 1 : 0, neg = neg_inf ? 1 : 0;
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<uint8_t>(((bits(i) == 0x7f800000u) & pos) | ((bits(i) == 0xff800000u) & neg));
}
#define TWIN_FLOAT_CLASS_PARAMS (const float *x, uint8_t *y, int64_t n, bool nan, bool pos_inf, bool neg_inf)
TWIN_VMATH_FUSED(FloatClass, TWIN_FLOAT_CLASS_PARAMS, (x, y, n, nan, pos_inf, neg_inf))

Isa DetectIsa() {
  Isa best = Isa::kBaseline;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) best = Isa::kAvx512;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
#endif
  const char *cap = std::getenv("GEASYNC_TWIN_SIMD");
  if (cap && std::strcmp(cap, "baseline") == 0) return Isa::kBaseline;
  if (cap && std::strcmp(cap, "avx2") == 0 && best == Isa::kAvx512) return Isa::kAvx2;
  return best;
}

}  // namespace

Isa ActiveIsa() {
  static const Isa isa = DetectIsa();
  return isa;
}

const char *IsaName() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "baseline";
  }
}

// Each kernel resolves its variant on first use (thread-safe static init), then calls through a pointer.
#define TWIN_VMATH_ARRAY(Name)                                  \
  void Name##Array(const float *x, float *y, int64_t n) {       \
    static const ArrayFn fn = Pick##Name();                     \
    fn(x, y, n);                                                \
  }

TWIN_VMATH_ARRAY(Exp)
TWIN_VMATH_ARRAY(Log)
TWIN_VMATH_ARRAY(Tanh)
TWIN_VMATH_ARRAY(Erf)
TWIN_VMATH_ARRAY(Sigmoid)
TWIN_VMATH_ARRAY(Sqrt)
TWIN_VMATH_ARRAY(Gelu)

// Sin/Cos: the vector loop, then libm for the lanes outside its reduction's range (|x| > kTrigMax, inf, NaN). By
// blocks, a block with such lanes from a copy of its x: y may be x (element-wise steps run in place).
constexpr int64_t kTrigBlock = 256;
#define TWIN_VMATH_TRIG_ARRAY(Name, libm)                                        \
  void Name##Array(const float *x, float *y, int64_t n) {                        \
    static const ArrayFn fn = Pick##Name();                                      \
    for (int64_t i = 0; i < n; i += kTrigBlock) {                                \
      const int64_t m = n - i < kTrigBlock ? n - i : kTrigBlock;                 \
      bool wide = false;                                                         \
      for (int64_t j = 0; j < m; ++j) wide |= !(AbsOf(x[i + j]) <= kTrigMax);    \
      if (!wide) {                                                               \
        fn(x + i, y + i, m);                                                     \
        continue;                                                                \
      }                                                                          \
      float keep[kTrigBlock];                                                    \
      std::copy(x + i, x + i + m, keep);                                         \
      fn(keep, y + i, m);                                                        \
      for (int64_t j = 0; j < m; ++j)                                            \
        if (!(AbsOf(keep[j]) <= kTrigMax)) y[i + j] = libm(keep[j]);             \
    }                                                                            \
  }
TWIN_VMATH_TRIG_ARRAY(Sin, std::sin)
TWIN_VMATH_TRIG_ARRAY(Cos, std::cos)
TWIN_VMATH_ARRAY(GeluTanh)
TWIN_VMATH_ARRAY(Atan)
TWIN_VMATH_ARRAY(Asin)
TWIN_VMATH_ARRAY(Acos)
TWIN_VMATH_ARRAY(Floor)
TWIN_VMATH_ARRAY(Ceil)
TWIN_VMATH_ARRAY(Round)

#define TWIN_VMATH_ARRAY_D(Name)                                \
  void Name##Array(const double *x, double *y, int64_t n) {     \
    static const ArrayFnD fn = Pick##Name();                    \
    fn(x, y, n);                                                \
  }
TWIN_VMATH_ARRAY_D(ExpDouble)
TWIN_VMATH_ARRAY_D(TanhDouble)
TWIN_VMATH_ARRAY_D(SigmoidDouble)
// (as the float32 Sin/Cos above)
#define TWIN_VMATH_TRIG_ARRAY_D(Name, libm)                                      \
  void Name##Array(const double *x, double *y, int64_t n) {                      \
    static const ArrayFnD fn = Pick##Name();                                     \
    for (int64_t i = 0; i < n; i += kTrigBlock) {                                \
      const int64_t m = n - i < kTrigBlock ? n - i : kTrigBlock;                 \
      bool wide = false;                                                         \
      for (int64_t j = 0; j < m; ++j) wide |= !(AbsOfD(x[i + j]) <= kTrigMaxD);  \
      if (!wide) {                                                               \
        fn(x + i, y + i, m);                                                     \
        continue;                                                                \
      }                                                                          \
      double keep[kTrigBlock];                                                   \
      std::copy(x + i, x + i + m, keep);                                         \
      fn(keep, y + i, m);                                                        \
      for (int64_t j = 0; j < m; ++j)                                            \
        if (!(AbsOfD(keep[j]) <= kTrigMaxD)) y[i + j] = libm(keep[j]);           \
    }                                                                            \
  }
TWIN_VMATH_TRIG_ARRAY_D(SinDouble, std::sin)
TWIN_VMATH_TRIG_ARRAY_D(CosDouble, std::cos)

// The fused kernels pick their variant per call (one predictable switch per call, not per element).
#if defined(__x86_64__)
#define TWIN_VMATH_CALL_FUSED(Name, Args)        \
  switch (ActiveIsa()) {                         \
    case Isa::kAvx512: return Name##Avx512 Args; \
    case Isa::kAvx2: return Name##Avx2 Args;     \
    default: return Name##Baseline Args;         \
  }
#else
#define TWIN_VMATH_CALL_FUSED(Name, Args) return Name##Baseline Args;
#endif

void SoftmaxRows TWIN_SOFTMAX_PARAMS { TWIN_VMATH_CALL_FUSED(Softmax, (x, y, rows, n, log_softmax)) }
void SoftmaxStridedRows TWIN_SOFTMAX_STRIDED_PARAMS {
  TWIN_VMATH_CALL_FUSED(SoftmaxStrided, (x, y, outer, n, inner, log_softmax))
}
void AnyNanInto TWIN_ANY_NAN_PARAMS { TWIN_VMATH_CALL_FUSED(AnyNan, (x, n, out)) }
void FloatClassInto TWIN_FLOAT_CLASS_PARAMS { TWIN_VMATH_CALL_FUSED(FloatClass, (x, y, n, nan, pos_inf, neg_inf)) }
bool AnyNan(const float *x, int64_t n) {
  bool out = false;
  AnyNanInto(x, n, &out);
  return out;
}
void LayerNormRows TWIN_LAYERNORM_PARAMS {
  TWIN_VMATH_CALL_FUSED(LayerNorm, (x, y, rows, n, scale, bias, epsilon, mean, inv_std))
}

}  // namespace vmath
}  // namespace onnx
}  // namespace twin
