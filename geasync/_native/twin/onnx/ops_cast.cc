// Cast between all numeric dtypes the twin represents (float32/16, bfloat16, float64, [u]int8..64, bool).
// Float -> int truncates toward zero like numpy's astype; NaN/out-of-range give numpy's x86 results, never UB.
// -O3 and no FP-trap semantics so that the element loops (selects included) vectorise.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "elem.h"
#include "op_registry.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

struct HalfTag {};
struct Bf16Tag {};
struct BoolTag {};

enum Kind { kFloatLike, kSigned, kUnsigned, kBoolean };

template <class T>
struct Tr {
  using St = T;  // storage type
  static constexpr Kind kind =
      std::is_floating_point<T>::value ? kFloatLike : (std::is_signed<T>::value ? kSigned : kUnsigned);
};
template <>
struct Tr<HalfTag> {
  using St = uint16_t;
  static constexpr Kind kind = kFloatLike;
};
template <>
struct Tr<Bf16Tag> {
  using St = uint16_t;
  static constexpr Kind kind = kFloatLike;
};
template <>
struct Tr<BoolTag> {
  using St = uint8_t;
  static constexpr Kind kind = kBoolean;
};

template <class S>
double LoadFloat(typename Tr<S>::St x) {
  if constexpr (std::is_same<S, HalfTag>::value) return HalfToFloat(x);
  else if constexpr (std::is_same<S, Bf16Tag>::value) return Bf16ToFloat(x);
  else return static_cast<double>(x);
}

// double -> float without the UB of converting an out-of-range finite value: +-inf from FLT_MAX + half an ulp
// (2^128 - 2^103, a tie that rounds to even: inf) on, as IEEE rounding, numpy and onnx.reference do; below that,
// values past FLT_MAX round to it.
inline float NarrowToFloat(double v) {
  constexpr double kOverflow = 340282356779733661637539395458142568448.0;  // 2^128 - 2^103
  if (v >= kOverflow) return std::numeric_limits<float>::infinity();
  if (v <= -kOverflow) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

// double -> float rounded "to odd": truncated toward zero, the lowest bit set when inexact. Rounding that float to
// float16 / bfloat16 (at least two bits narrower) gives the correctly rounded value of v, where rounding to nearest
// twice can make a tie v is not (68.5624999 -> 68.5625f is fine, but 68.53125 + 1e-9 -> 68.53125f, a float16 tie
// that rounds to even: 68.5 instead of 68.5625). Overflow gives FLT_MAX with the bit set, which rounds on to inf.
inline float NarrowToFloatOdd(double v) {
  const float f = NarrowToFloat(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const double back = f;
  if (std::fabs(back) > std::fabs(v)) b -= 1;  // rounded away from zero (inf included): one step back
  if (back != v) b |= 1;                       // inexact (NaN too: it stays NaN)
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

template <class D>
typename Tr<D>::St StoreFloat(double v) {
  using St = typename Tr<D>::St;
  if constexpr (std::is_same<D, HalfTag>::value) return FloatToHalf(NarrowToFloatOdd(v));
  else if constexpr (std::is_same<D, Bf16Tag>::value) return FloatToBf16(NarrowToFloatOdd(v));
  else if constexpr (std::is_same<D, float>::value) return NarrowToFloat(v);
  else if constexpr (std::is_same<D, double>::value) return v;
  else if constexpr (Tr<D>::kind == kBoolean) return v != 0.0 ? 1 : 0;  // NaN -> true, like numpy
  else if constexpr (std::is_same<D, uint64_t>::value) {
    if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) return static_cast<uint64_t>(v);
    if (std::isnan(v) || v >= 9223372036854775808.0 || v < -9223372036854775808.0)
      return static_cast<uint64_t>(std::numeric_limits<int64_t>::min());
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else if constexpr (sizeof(St) == 8 || std::is_same<D, uint32_t>::value) {
    // numpy (x86) converts through a 64-bit truncation; invalid -> INT64_MIN.
    int64_t i = std::numeric_limits<int64_t>::min();
    if (!std::isnan(v) && v < 9223372036854775808.0 && v >= -9223372036854775808.0) i = static_cast<int64_t>(v);
    return static_cast<St>(i);
  } else {
    // Narrower ints go through a 32-bit truncation; invalid -> INT32_MIN, then wrap.
    int32_t i = std::numeric_limits<int32_t>::min();
    if (!std::isnan(v) && v < 2147483648.0 && v > -2147483649.0) i = static_cast<int32_t>(v);
    return static_cast<St>(i);
  }
}

template <class S, class D>
typename Tr<D>::St Convert(typename Tr<S>::St x) {
  using SD = typename Tr<D>::St;
  if constexpr (Tr<S>::kind == kFloatLike) {
    if constexpr (std::is_same<S, float>::value && std::is_same<D, HalfTag>::value) return FloatToHalf(x);
    else if constexpr (std::is_same<S, float>::value && std::is_same<D, Bf16Tag>::value) return FloatToBf16(x);
    else return StoreFloat<D>(LoadFloat<S>(x));
  } else {
    // Integer or bool source.
    if constexpr (Tr<S>::kind == kBoolean && std::is_floating_point<SD>::value) return x != 0 ? SD(1) : SD(0);
    if constexpr (Tr<S>::kind == kBoolean) x = x != 0 ? 1 : 0;
    if constexpr (Tr<D>::kind == kBoolean) return x != 0 ? 1 : 0;
    else if constexpr (std::is_same<D, HalfTag>::value) return FloatToHalf(static_cast<float>(x));
    else if constexpr (std::is_same<D, Bf16Tag>::value) return FloatToBf16(static_cast<float>(x));
    else return static_cast<SD>(x);  // int -> float rounds; int -> int wraps (never UB)
  }
}

using CastFn = void (*)(const void *, void *, int64_t);

template <class S, class D>
void CastLoop(const void *in, void *out, int64_t n) {
  const auto *x = static_cast<const typename Tr<S>::St *>(in);
  auto *y = static_cast<typename Tr<D>::St *>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = Convert<S, D>(x[i]);
}

#if defined(__x86_64__)
// float32 -> float16 with F16C's vcvtps2ph: round to nearest even like FloatToHalf, overflow to inf, denormal
// results rounded (MXCSR's DAZ/FTZ are never set by the twin), NaN stays NaN (quiet, payload truncated).
__attribute__((target("avx,f16c"))) void CastFloatToHalfF16c(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  uint16_t *y = static_cast<uint16_t *>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), h);
  }
  for (; i < n; ++i) y[i] = FloatToHalf(x[i]);
}

// float16 -> float32 with F16C's vcvtph2ps (exact, like HalfToFloat).
__attribute__((target("avx,f16c"))) void CastHalfToFloatF16c(const void *in, void *out, int64_t n) {
  const uint16_t *x = static_cast<const uint16_t *>(in);
  float *y = static_cast<float *>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
  for (; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

// All 16 lanes: GCC 12 warns that the unmasked AVX-512 conversions read an uninitialised pass-through operand.
constexpr __mmask16 kAll = 0xFFFF;

// The same two with AVX-512F's 16-lane forms (same rounding and special values), two vectors an iteration; the
// tail by the F16C versions.
__attribute__((target("avx512f,avx,f16c"))) void CastFloatToHalfAvx512(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  uint16_t *y = static_cast<uint16_t *>(out);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm512_maskz_cvtps_ph(kAll, _mm512_loadu_ps(x + i), kRound);
    const __m256i b = _mm512_maskz_cvtps_ph(kAll, _mm512_loadu_ps(x + i + 16), kRound);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i + 16), b);
  }
  CastFloatToHalfF16c(x + i, y + i, n - i);
}

__attribute__((target("avx512f,avx,f16c"))) void CastHalfToFloatAvx512(const void *in, void *out, int64_t n) {
  const uint16_t *x = static_cast<const uint16_t *>(in);
  float *y = static_cast<float *>(out);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i)));
    const __m512 b = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i + 16)));
    _mm512_storeu_ps(y + i, a);
    _mm512_storeu_ps(y + i + 16, b);
  }
  CastHalfToFloatF16c(x + i, y + i, n - i);
}

// float32 -> int32 and narrower ints with SSE2's cvttps2dq (every x86-64): it truncates, and NaN / out-of-range
// give INT32_MIN, which is exactly StoreFloat's 32-bit rule; narrower types then keep the low bits.
template <class D>
void CastFloatToNarrowIntSse2(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  D *y = static_cast<D *>(out);
  constexpr int64_t kBlock = 256;
  alignas(16) int32_t t[kBlock];
  if constexpr (std::is_same<D, int32_t>::value) {  // no narrowing: straight into the output
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), _mm_cvttps_epi32(_mm_loadu_ps(x + i)));
    for (; i < n; ++i) y[i] = _mm_cvtt_ss2si(_mm_set_ss(x[i]));
    return;
  }
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = n - i < kBlock ? n - i : kBlock;
    int64_t j = 0;
    for (; j + 4 <= m; j += 4)
      _mm_store_si128(reinterpret_cast<__m128i *>(t + j), _mm_cvttps_epi32(_mm_loadu_ps(x + i + j)));
    for (; j < m; ++j) t[j] = _mm_cvtt_ss2si(_mm_set_ss(x[i + j]));
    for (j = 0; j < m; ++j) y[i + j] = static_cast<D>(t[j]);
  }
}

// float32 -> int32 with AVX-512F's vcvttps2dq: the same truncation and INT32_MIN rule, 32 floats an iteration.
__attribute__((target("avx512f"))) void CastFloatToInt32Avx512(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  int32_t *y = static_cast<int32_t *>(out);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = _mm512_maskz_cvttps_epi32(kAll, _mm512_loadu_ps(x + i));
    const __m512i b = _mm512_maskz_cvttps_epi32(kAll, _mm512_loadu_ps(x + i + 16));
    _mm512_storeu_si512(y + i, a);
    _mm512_storeu_si512(y + i + 16, b);
  }
  CastFloatToNarrowIntSse2<int32_t>(x + i, y + i, n - i);
}

// The same with AVX2, 32 (8-bit) or 16 (16-bit) floats at a time: vcvttps2dq (the same INT32_MIN rule), the low
// bits kept by a mask so that the unsigned saturating packs are exact, the packs' lane interleave undone by one
// permute; the tail by the SSE2 version.
template <class D>
__attribute__((target("avx2"))) void CastFloatToNarrowIntAvx2(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  D *y = static_cast<D *>(out);
  int64_t i = 0;
  if constexpr (sizeof(D) == 1) {
    const __m256i low = _mm256_set1_epi32(0xFF), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; i + 32 <= n; i += 32) {
      __m256i v[4];
      for (int k = 0; k < 4; ++k) v[k] = _mm256_and_si256(_mm256_cvttps_epi32(_mm256_loadu_ps(x + i + 8 * k)), low);
      const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]), _mm256_packus_epi32(v[2], v[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm256_permutevar8x32_epi32(b, order));
    }
  } else {
    const __m256i low = _mm256_set1_epi32(0xFFFF);
    for (; i + 16 <= n; i += 16) {
      const __m256i a = _mm256_and_si256(_mm256_cvttps_epi32(_mm256_loadu_ps(x + i)), low);
      const __m256i b = _mm256_and_si256(_mm256_cvttps_epi32(_mm256_loadu_ps(x + i + 8)), low);
      const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), w);
    }
  }
  CastFloatToNarrowIntSse2<D>(x + i, y + i, n - i);
}

// float32 -> int64 / uint32 through cvttss2si's 64-bit form: NaN / out-of-range give INT64_MIN (StoreFloat's rule).
template <class D>
void CastFloatToWideInt(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  D *y = static_cast<D *>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<D>(_mm_cvttss_si64(_mm_set_ss(x[i])));
}

// The same with AVX-512DQ's vcvttps2qq, 16 floats an iteration: its 64-bit truncation gives cvttss2si's values, NaN
// / out-of-range lanes the integer indefinite INT64_MIN; uint32 keeps the low 32 bits (vpmovqd). The scalar loop
// measured ~2x onnxruntime on float32 -> int64.
template <class D>
__attribute__((target("avx512f,avx512dq"))) void CastFloatToWideIntAvx512(const void *in, void *out, int64_t n) {
  const float *x = static_cast<const float *>(in);
  D *y = static_cast<D *>(out);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // masked forms with full masks: GCC 12 warns that the unmasked ones read an uninitialised operand
    const __m512i a = _mm512_maskz_cvttps_epi64(0xFF, _mm256_loadu_ps(x + i));
    const __m512i b = _mm512_maskz_cvttps_epi64(0xFF, _mm256_loadu_ps(x + i + 8));
    if constexpr (sizeof(D) == 8) {
      _mm512_storeu_si512(y + i, a);
      _mm512_storeu_si512(y + i + 8, b);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm512_maskz_cvtepi64_epi32(0xFF, a));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i + 8), _mm512_maskz_cvtepi64_epi32(0xFF, b));
    }
  }
  CastFloatToWideInt<D>(x + i, y + i, n - i);
}

// float64 -> float32 as NarrowToFloat: cvtpd2ps rounds each lane as IEEE does (nearest even, overflow to +-inf,
// NaN quieted, as the scalar cvtsd2ss).
__attribute__((target("avx"))) void CastDoubleToFloatAvx(const void *in, void *out, int64_t n) {
  const double *x = static_cast<const double *>(in);
  float *y = static_cast<float *>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm256_cvtpd_ps(_mm256_loadu_pd(x + i)), b = _mm256_cvtpd_ps(_mm256_loadu_pd(x + i + 4));
    _mm256_storeu_ps(y + i, _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1));
  }
  for (; i < n; ++i) y[i] = NarrowToFloat(x[i]);
}

// CPUID leaf 1 directly: clang's __builtin_cpu_supports has no "f16c". AVX's OS support is part of the ISA check.
bool CpuHasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

bool HasF16c() {
  static const bool has = vmath::ActiveIsa() != vmath::Isa::kBaseline && CpuHasF16c();
  return has;
}
#endif

template <class S>
CastFn PickHalfDst() {
#if defined(__x86_64__)
  if constexpr (std::is_same<S, float>::value) {
    if (HasF16c() && vmath::ActiveIsa() == vmath::Isa::kAvx512) return CastFloatToHalfAvx512;
    if (HasF16c()) return CastFloatToHalfF16c;
  }
#endif
  return CastLoop<S, HalfTag>;
}

// Fast paths from float32 and float16 where the CPU has them; nullptr: the element loop.
template <class S>
CastFn PickFastPath(ElemType d) {
#if defined(__x86_64__)
  if constexpr (std::is_same<S, float>::value) {
    if (vmath::ActiveIsa() == vmath::Isa::kAvx512 && d == ElemType::kInt32) return CastFloatToInt32Avx512;
    if (vmath::ActiveIsa() == vmath::Isa::kAvx512 && d == ElemType::kInt64) return CastFloatToWideIntAvx512<int64_t>;
    if (vmath::ActiveIsa() != vmath::Isa::kBaseline) {
      switch (d) {
        case ElemType::kInt16: return CastFloatToNarrowIntAvx2<int16_t>;
        case ElemType::kInt8: return CastFloatToNarrowIntAvx2<int8_t>;
        case ElemType::kUint16: return CastFloatToNarrowIntAvx2<uint16_t>;
        case ElemType::kUint8: return CastFloatToNarrowIntAvx2<uint8_t>;
        default: break;
      }
    }
    switch (d) {
      case ElemType::kInt32: return CastFloatToNarrowIntSse2<int32_t>;
      case ElemType::kInt16: return CastFloatToNarrowIntSse2<int16_t>;
      case ElemType::kInt8: return CastFloatToNarrowIntSse2<int8_t>;
      case ElemType::kUint16: return CastFloatToNarrowIntSse2<uint16_t>;
      case ElemType::kUint8: return CastFloatToNarrowIntSse2<uint8_t>;
      case ElemType::kInt64: return CastFloatToWideInt<int64_t>;
      case ElemType::kUint32: return CastFloatToWideInt<uint32_t>;
      default: return nullptr;
    }
  }
  if constexpr (std::is_same<S, HalfTag>::value)
    if (d == ElemType::kFloat && HasF16c())
      return vmath::ActiveIsa() == vmath::Isa::kAvx512 ? CastHalfToFloatAvx512 : CastHalfToFloatF16c;
  if constexpr (std::is_same<S, double>::value)
    if (d == ElemType::kFloat && vmath::ActiveIsa() != vmath::Isa::kBaseline) return CastDoubleToFloatAvx;
#endif
  (void)d;
  return nullptr;
}

#if defined(__x86_64__)
// The element loop compiled for AVX-512 (F + DQ: 64-bit integer <-> float conversions and compares in vector lanes),
// for the pairs the baseline loop runs one element at a time: the same conversions, the same values.
template <class S, class D>
__attribute__((target("avx512f,avx512dq"))) void CastLoopAvx512(const void *in, void *out, int64_t n) {
  CastLoop<S, D>(in, out, n);
}

// float64 -> int8 / uint8 / int16 / uint16 / int32 in one pass: cvttpd2dq gives StoreFloat's 32-bit truncation (NaN
// and out-of-range lanes give its INT32_MIN, the integer indefinite), vpmovdb / vpmovdw the wrap. Through an int32
// buffer (two passes) the narrow pairs measured 1.5x onnxruntime, int32 by the compiled element loop 1.2-1.3x.
template <class D>
__attribute__((target("avx512f"))) void CastDoubleToNarrowIntAvx512(const void *in, void *out, int64_t n) {
  const double *x = static_cast<const double *>(in);
  D *y = static_cast<D *>(out);
  int64_t i = 0;
  // the low bytes of each 32-bit lane gathered by a byte shuffle per 128-bit half, then the halves joined (GCC 12's
  // 512-bit narrowing / insert intrinsics trip -Wmaybe-uninitialized)
  const __m256i pick = sizeof(D) == 1
                           ? _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                                              -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)
                           : _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9,
                                              12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i join = sizeof(D) == 1 ? _mm256_setr_epi32(0, 4, 1, 2, 3, 5, 6, 7)   // dwords 0 and 4
                                      : _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);  // dwords 0, 1 and 4, 5
  for (; i + 8 <= n; i += 8) {
    const __m256i t = _mm512_maskz_cvttpd_epi32(0xff, _mm512_loadu_pd(x + i));  // masked: GCC 12 warns on unmasked
    if constexpr (sizeof(D) == 4) {
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), t);
      continue;
    }
    const __m256i v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(t, pick), join);
    if constexpr (sizeof(D) == 1) _mm_storel_epi64(reinterpret_cast<__m128i *>(y + i), _mm256_castsi256_si128(v));
    else _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), _mm256_castsi256_si128(v));
  }
  for (; i < n; ++i) y[i] = StoreFloat<D>(x[i]);
}

template <class S>
CastFn PickAvx512Loop(ElemType d) {
  if (vmath::ActiveIsa() != vmath::Isa::kAvx512) return nullptr;
  if constexpr (std::is_same<S, int64_t>::value) {
    switch (d) {
      case ElemType::kFloat: return CastLoopAvx512<int64_t, float>;
      case ElemType::kDouble: return CastLoopAvx512<int64_t, double>;
      case ElemType::kInt32: return CastLoopAvx512<int64_t, int32_t>;
      case ElemType::kBool: return CastLoopAvx512<int64_t, BoolTag>;
      default: return nullptr;
    }
  } else if constexpr (std::is_same<S, int32_t>::value) {
    switch (d) {
      case ElemType::kFloat: return CastLoopAvx512<int32_t, float>;
      case ElemType::kInt64: return CastLoopAvx512<int32_t, int64_t>;
      default: return nullptr;
    }
  } else if constexpr (std::is_same<S, double>::value) {
    switch (d) {  // the scalar loops measured 2.5-3x onnxruntime
      case ElemType::kInt8: return CastDoubleToNarrowIntAvx512<int8_t>;
      case ElemType::kUint8: return CastDoubleToNarrowIntAvx512<uint8_t>;
      case ElemType::kInt16: return CastDoubleToNarrowIntAvx512<int16_t>;
      case ElemType::kUint16: return CastDoubleToNarrowIntAvx512<uint16_t>;
      case ElemType::kInt64: return CastLoopAvx512<double, int64_t>;
      case ElemType::kInt32: return CastDoubleToNarrowIntAvx512<int32_t>;
      case ElemType::kBool: return CastLoopAvx512<double, BoolTag>;
      case ElemType::kUint32: return CastLoopAvx512<double, uint32_t>;  // 2.1-3.3x onnxruntime one at a time
      case ElemType::kUint64: return CastLoopAvx512<double, uint64_t>;
      default: return nullptr;
    }
  } else if constexpr (std::is_same<S, float>::value) {
    switch (d) {  // uint32 / uint64: a 64-bit truncation per element before (2.4-3.7x onnxruntime)
      case ElemType::kBool: return CastLoopAvx512<float, BoolTag>;
      case ElemType::kUint32: return CastLoopAvx512<float, uint32_t>;
      case ElemType::kUint64: return CastLoopAvx512<float, uint64_t>;
      default: return nullptr;
    }
  } else if constexpr (std::is_same<S, uint8_t>::value) {
    if (d == ElemType::kFloat) return CastLoopAvx512<uint8_t, float>;
  } else if constexpr (std::is_same<S, BoolTag>::value) {
    if (d == ElemType::kFloat) return CastLoopAvx512<BoolTag, float>;
  }
  // integer / bool -> integer / bool: widening, narrowing and the bool tests in vector lanes (uint8 -> uint64
  // measured 2.7x onnxruntime and bool -> int8 1.5-2.6x in the baseline loop)
  if constexpr (Tr<S>::kind != kFloatLike) {
    switch (d) {
      case ElemType::kInt8: return CastLoopAvx512<S, int8_t>;
      case ElemType::kInt16: return CastLoopAvx512<S, int16_t>;
      case ElemType::kInt32: return CastLoopAvx512<S, int32_t>;
      case ElemType::kInt64: return CastLoopAvx512<S, int64_t>;
      case ElemType::kUint8: return CastLoopAvx512<S, uint8_t>;
      case ElemType::kUint16: return CastLoopAvx512<S, uint16_t>;
      case ElemType::kUint32: return CastLoopAvx512<S, uint32_t>;
      case ElemType::kUint64: return CastLoopAvx512<S, uint64_t>;
      case ElemType::kBool: return CastLoopAvx512<S, BoolTag>;
      default: return nullptr;
    }
  }
  return nullptr;
}
#endif

template <class S>
CastFn PickDst(ElemType d) {
#if defined(__x86_64__)
  if constexpr (std::is_same<S, float>::value) {  // its AVX-512 loops beat the scalar CastFloatToWideInt
    if (d == ElemType::kUint32 && vmath::ActiveIsa() == vmath::Isa::kAvx512)
      return CastFloatToWideIntAvx512<uint32_t>;
    if (d == ElemType::kUint64)
      if (CastFn fast = PickAvx512Loop<S>(d)) return fast;
  }
#endif
  if (CastFn fast = PickFastPath<S>(d)) return fast;
#if defined(__x86_64__)
  if (CastFn fast = PickAvx512Loop<S>(d)) return fast;
#endif
  switch (d) {
    case ElemType::kFloat: return CastLoop<S, float>;
    case ElemType::kFloat16: return PickHalfDst<S>();
    case ElemType::kBf16: return CastLoop<S, Bf16Tag>;
    case ElemType::kDouble: return CastLoop<S, double>;
    case ElemType::kInt8: return CastLoop<S, int8_t>;
    case ElemType::kInt16: return CastLoop<S, int16_t>;
    case ElemType::kInt32: return CastLoop<S, int32_t>;
    case ElemType::kInt64: return CastLoop<S, int64_t>;
    case ElemType::kUint8: return CastLoop<S, uint8_t>;
    case ElemType::kUint16: return CastLoop<S, uint16_t>;
    case ElemType::kUint32: return CastLoop<S, uint32_t>;
    case ElemType::kUint64: return CastLoop<S, uint64_t>;
    case ElemType::kBool: return CastLoop<S, BoolTag>;
    default: return nullptr;
  }
}

CastFn PickCast(ElemType s, ElemType d) {
  switch (s) {
    case ElemType::kFloat: return PickDst<float>(d);
    case ElemType::kFloat16: return PickDst<HalfTag>(d);
    case ElemType::kBf16: return PickDst<Bf16Tag>(d);
    case ElemType::kDouble: return PickDst<double>(d);
    case ElemType::kInt8: return PickDst<int8_t>(d);
    case ElemType::kInt16: return PickDst<int16_t>(d);
    case ElemType::kInt32: return PickDst<int32_t>(d);
    case ElemType::kInt64: return PickDst<int64_t>(d);
    case ElemType::kUint8: return PickDst<uint8_t>(d);
    case ElemType::kUint16: return PickDst<uint16_t>(d);
    case ElemType::kUint32: return PickDst<uint32_t>(d);
    case ElemType::kUint64: return PickDst<uint64_t>(d);
    case ElemType::kBool: return PickDst<BoolTag>(d);
    default: return nullptr;
  }
}

bool CheckCast(const Node &n, int64_t, std::string *reason) {
  const Attribute *a = n.FindAttr("to");
  if (!a) {
    *reason = "required attribute 'to' is missing";
    return false;
  }
  if (a->type != kAttrInt) {
    *reason = "attribute 'to' must be of type int";
    return false;
  }
  return true;
}

bool InferCast(InferCtx *c, std::string *reason) {
  const int64_t to = c->node->FindAttr("to")->i;
  ElemType dst;
  if (!OnnxTypeToElemType(to, &dst)) {
    *reason = std::string("cast to ") + OnnxTypeName(to) + " is not supported by the twin";
    return false;
  }
  if (!PickCast(c->in[0]->dtype, dst)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0].dtype = dst;
  c->out[0].dims = c->in[0]->dims;
  return true;
}

class CastKernel : public Kernel {
 public:
  CastKernel(CastFn fn, int64_t n) : fn_(fn), n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    fn_(in[0], out[0], n_);
    return true;
  }

 private:
  CastFn fn_;
  int64_t n_;
};

// CastLike: Cast to the dtype of input 1 (whose contents are unused).
bool InferCastLike(InferCtx *c, std::string *reason) {
  const ElemType dst = c->in[1]->dtype;
  if (!PickCast(c->in[0]->dtype, dst)) {
    *reason = "cast from " + std::string(ElemTypeName(c->in[0]->dtype)) + " to " + ElemTypeName(dst) +
              " is not supported by the twin";
    return false;
  }
  c->out[0].dtype = dst;
  c->out[0].dims = c->in[0]->dims;
  return true;
}

// A cast as two through a 4-byte type (float32 or int32), a block at a time in a stack buffer, for the pairs whose
// element loop converts float16 in software or narrows float64 one element at a time: each step then takes its
// vector path (F16C, AVX-512). Exact: float16 -> float32 is, and an integer or bool reaches float16 through float32
// with one rounding (past 2^24, where float32 rounds, float16 is already inf); float64 narrows to float32 rounded
// to odd (above); float64 -> 8/16-bit integers is StoreFloat's 32-bit truncation, then the low bits.
class ViaCastKernel : public Kernel {
 public:
  ViaCastKernel(CastFn to_float, CastFn from_float, size_t in_size, size_t out_size, int64_t n)
      : to_float_(to_float), from_float_(from_float), in_size_(in_size), out_size_(out_size), n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    constexpr int64_t kBlock = 1024;
    alignas(64) uint32_t buf[kBlock];
    const char *x = static_cast<const char *>(in[0]);
    char *y = static_cast<char *>(out[0]);
    for (int64_t i = 0; i < n_; i += kBlock) {
      const int64_t m = n_ - i < kBlock ? n_ - i : kBlock;
      to_float_(x + static_cast<size_t>(i) * in_size_, buf, m);
      from_float_(buf, y + static_cast<size_t>(i) * out_size_, m);
    }
    return true;
  }

 private:
  CastFn to_float_, from_float_;
  size_t in_size_, out_size_;
  int64_t n_;
};

void DoubleToFloatOdd(const void *in, void *out, int64_t n) {
  const double *x = static_cast<const double *>(in);
  float *y = static_cast<float *>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = NarrowToFloatOdd(x[i]);
}

#if defined(__x86_64__)
// The same loop in AVX-512 lanes (float64 -> float16 measured 4.6x onnxruntime with the scalar one).
__attribute__((target("avx512f,avx512dq"))) void DoubleToFloatOddAvx512(const void *in, void *out, int64_t n) {
  DoubleToFloatOdd(in, out, n);
}
#endif

CastFn PickDoubleToFloatOdd() {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return DoubleToFloatOddAvx512;
#endif
  return DoubleToFloatOdd;
}

std::unique_ptr<Kernel> PrepareViaCast(ElemType s, ElemType d, int64_t n) {
  if (s == ElemType::kDouble && (d == ElemType::kInt8 || d == ElemType::kInt16 || d == ElemType::kUint8 ||
                                 d == ElemType::kUint16)) {
#if defined(__x86_64__)
    if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return nullptr;  // CastDoubleToNarrowIntAvx512, one pass
#endif
    CastFn a = PickCast(s, ElemType::kInt32), b = PickCast(ElemType::kInt32, d);
    return std::make_unique<ViaCastKernel>(a, b, ElemSize(s), ElemSize(d), n);
  }
  const bool half_in = s == ElemType::kFloat16, half_out = d == ElemType::kFloat16;
  if (half_in == half_out || s == ElemType::kFloat || d == ElemType::kFloat) return nullptr;
  if (half_out && s == ElemType::kBf16) return nullptr;
  CastFn a = s == ElemType::kDouble && half_out ? PickDoubleToFloatOdd() : PickCast(s, ElemType::kFloat);
  CastFn b = PickCast(ElemType::kFloat, d);
  if (!a || !b) return nullptr;
  return std::make_unique<ViaCastKernel>(a, b, ElemSize(s), ElemSize(d), n);
}

bool SameWidthIntegers(ElemType a, ElemType b) {
  auto pair = [&](ElemType s, ElemType u) { return (a == s && b == u) || (a == u && b == s); };
  return pair(ElemType::kInt8, ElemType::kUint8) || pair(ElemType::kInt16, ElemType::kUint16) ||
         pair(ElemType::kInt32, ElemType::kUint32) || pair(ElemType::kInt64, ElemType::kUint64);
}

std::unique_ptr<Kernel> PrepareCast(const KernelCtx &c, std::string *reason) {
  if (c.in[0]->dtype == c.out[0].dtype) return MakeCopyKernel(c.out[0].Bytes());
  // Signed <-> unsigned of one width wraps modulo 2^bits: the same bytes (the element loop measured up to 1.6x
  // onnxruntime on int16 -> uint16).
  if (SameWidthIntegers(c.in[0]->dtype, c.out[0].dtype)) return MakeCopyKernel(c.out[0].Bytes());
  if (auto k = PrepareViaCast(c.in[0]->dtype, c.out[0].dtype, c.out[0].NumElements())) return k;
  CastFn fn = PickCast(c.in[0]->dtype, c.out[0].dtype);
  if (!fn) {
    *reason = DtypeNotSupported(c.in[0]->dtype);
    return nullptr;
  }
  return std::make_unique<CastKernel>(fn, c.out[0].NumElements());
}

}  // namespace

void HalfToFloatArray(const uint16_t *x, float *y, int64_t n) {
#if defined(__x86_64__)
  static const CastFn fn = HasF16c() ? (vmath::ActiveIsa() == vmath::Isa::kAvx512 ? CastHalfToFloatAvx512
                                                                                    : CastHalfToFloatF16c)
                                     : nullptr;
  if (fn) return fn(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

void FloatToHalfArray(const float *x, uint16_t *y, int64_t n) {
#if defined(__x86_64__)
  static const CastFn fn = HasF16c() ? (vmath::ActiveIsa() == vmath::Isa::kAvx512 ? CastFloatToHalfAvx512
                                                                                    : CastFloatToHalfF16c)
                                     : nullptr;
  if (fn) return fn(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToHalf(x[i]);
}

void RegisterCastOps(std::vector<OpDef> *ops) {
  ops->push_back({"Cast", 1, 1, 1, 1, CheckCast, InferCast, PrepareCast, true});
  ops->push_back({"CastLike", 2, 2, 1, 1, nullptr, InferCastLike, PrepareCast, true});
}

}  // namespace onnx
}  // namespace twin
