// Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
// ReduceLogSum, ReduceLogSumExp with keepdims and noop_with_empty_axes; axes come from the
// attribute (ReduceMean/ReduceMax before opset 18, ReduceSum before 13) or the optional input.
// Floating sums accumulate in double; integer sums wrap; ReduceMax propagates NaN; empty reductions give
// 0 (Sum, L1, L2, SumSquare), NaN (Mean), 1 (Prod), -inf (LogSum, LogSumExp) and the lowest / highest value or
// -inf / +inf (Max / Min), like the ONNX reference. LogSumExp subtracts the maximum before exp, so it does not
// overflow where the mathematical result is finite.
// Kernel loops: -O3 vectorisation (beyond -O2's very-cheap cost model) and no FP-trap semantics, so that
// selects and divisions in them can be if-converted. Before the includes, so inline helpers get it too.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "broadcast.h"
#include "elem.h"
#include "intra_op.h"
#include "row_reduce.h"
#include "simd_double.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {

namespace {

#if defined(__x86_64__)
template <int kTerm>
double SumTermsWide(const float *x, int64_t n);  // below, with the sums
// Four independent 8-wide max (min) chains; NaNs are only noted (maxps would drop them), the caller redoes them.
template <bool kMax>
__attribute__((target("avx2"), always_inline)) inline __m256 Pick(__m256 a, __m256 b) {
  return kMax ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b);
}
template <bool kMax>
__attribute__((target("avx2"))) bool RowExtremumAvx2(const float *x, int64_t n, float *out) {
  const float init = kMax ? -INFINITY : INFINITY;
  __m256 acc[4] = {_mm256_set1_ps(init), _mm256_set1_ps(init), _mm256_set1_ps(init), _mm256_set1_ps(init)};
  __m256 nan = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + j + 8 * k);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      acc[k] = Pick<kMax>(acc[k], v);
    }
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    acc[0] = Pick<kMax>(acc[0], v);
  }
  if (_mm256_movemask_ps(nan)) return false;
  // The lanes folded by shuffles (no NaN there; a zero result, whose sign could depend on the order, is refused
  // below): rows of 32 spent most of their time in a scalar fold, measured.
  __m256 v = Pick<kMax>(Pick<kMax>(acc[0], acc[1]), Pick<kMax>(acc[2], acc[3]));
  __m128 h = kMax ? _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))
                  : _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h2 = _mm_movehl_ps(h, h);
  h = kMax ? _mm_max_ps(h, h2) : _mm_min_ps(h, h2);
  const __m128 h3 = _mm_shuffle_ps(h, h, 1);
  h = kMax ? _mm_max_ss(h, h3) : _mm_min_ss(h, h3);
  float m = _mm_cvtss_f32(h);
  for (; j < n; ++j) {
    if (x[j] != x[j]) return false;
    m = kMax ? (x[j] > m ? x[j] : m) : (x[j] < m ? x[j] : m);
  }
  *out = m;
  return m != 0.0f;
}
#endif

// Portable version: independent lanes that GCC's -O3 turns into vector max / min.
template <bool kMax>
bool RowExtremumLaned(const float *__restrict x, int64_t n, float *out) {
  constexpr int kLanes = 8;
  const float init = kMax ? -INFINITY : INFINITY;
  float lanes[kLanes];
  int bad[kLanes] = {};
  for (float &l : lanes) l = init;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[j + k];
      bad[k] |= v != v;
      lanes[k] = kMax ? (v > lanes[k] ? v : lanes[k]) : (v < lanes[k] ? v : lanes[k]);
    }
  float m = init;
  for (int k = 0; k < kLanes; ++k) {
    if (bad[k]) return false;
    m = kMax ? (lanes[k] > m ? lanes[k] : m) : (lanes[k] < m ? lanes[k] : m);
  }
  for (; j < n; ++j) {
    if (x[j] != x[j]) return false;
    m = kMax ? (x[j] > m ? x[j] : m) : (x[j] < m ? x[j] : m);
  }
  *out = m;
  return m != 0.0f;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) int64_t FindValueAvx2(const float *x, int64_t n, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), vv, _CMP_EQ_OQ));
    if (mask) return j + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; j < n; ++j)
    if (x[j] == v) return j;
  return n;
}
#endif

}  // namespace

bool RowExtremum(const float *x, int64_t n, bool max, float *out) {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() != vmath::Isa::kBaseline)
    return max ? RowExtremumAvx2<true>(x, n, out) : RowExtremumAvx2<false>(x, n, out);
#endif
  return max ? RowExtremumLaned<true>(x, n, out) : RowExtremumLaned<false>(x, n, out);
}

double SumFloats(const float *x, int64_t n) {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return SumTermsWide<0>(x, n);
#endif
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[j + k]);
  double sum = 0;
  for (; j < n; ++j) sum += static_cast<double>(x[j]);
  for (double l : lanes) sum += l;
  return sum;
}

int64_t FindValue(const float *x, int64_t n, float v, bool last) {
  if (last) {
    for (int64_t j = n; j-- > 0;)
      if (x[j] == v) return j;
    return n;
  }
#if defined(__x86_64__)
  if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return FindValueAvx2(x, n, v);
#endif
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == v) return j;
  return n;
}

namespace {

#if defined(__x86_64__)
// Sum of a contiguous float32 run's terms in double: four 4-wide double accumulators (AVX2, chosen at run time).
// The term is x (kTerm 0), |x| (1: the sign bit cleared, exact) or x * x in double (2), as Pre computes them.
template <int kTerm>
__attribute__((target("avx2"), always_inline)) inline __m256d Term4(const float *p) {
  __m128 v = _mm_loadu_ps(p);
  if (kTerm == 1) v = _mm_andnot_ps(_mm_set1_ps(-0.0f), v);
  const __m256d d = _mm256_cvtps_pd(v);
  return kTerm == 2 ? _mm256_mul_pd(d, d) : d;
}
template <int kTerm>
__attribute__((target("avx2"))) double SumTermsAvx2(const float *x, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_pd(acc[k], Term4<kTerm>(x + j + 4 * k));
  const __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, s4);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; j < n; ++j) {
    const double v = kTerm == 1 ? std::fabs(static_cast<double>(x[j])) : static_cast<double>(x[j]);
    sum += kTerm == 2 ? v * v : v;
  }
  return sum;
}
// The same sums with AVX-512: the float -> double conversion (one port on most cores) bounds these loops, and
// the 512-bit form converts 8 floats per instruction instead of 4. Four 8-wide accumulators, then 8-wide steps,
// then a scalar tail (only the order of the double additions differs from the AVX2 loop).
template <int kTerm>
__attribute__((target("avx512f"), always_inline)) inline __m512d Term8(const float *p) {
  __m256 v = _mm256_loadu_ps(p);
  if (kTerm == 1) v = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m512d d = _mm512_maskz_cvtps_pd(0xff, v);  // the unmasked form trips GCC 12's -Wmaybe-uninitialized
  return kTerm == 2 ? _mm512_mul_pd(d, d) : d;  // exact in double (24-bit mantissas), fused or not
}
template <int kTerm>
__attribute__((target("avx512f"))) double SumTermsAvx512(const float *x, int64_t n) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm512_add_pd(acc[k], Term8<kTerm>(x + j + 8 * k));
  for (; j + 8 <= n; j += 8) acc[0] = _mm512_add_pd(acc[0], Term8<kTerm>(x + j));
  double sum = SumLanes8(_mm512_add_pd(_mm512_add_pd(acc[0], acc[1]), _mm512_add_pd(acc[2], acc[3])));
  for (; j < n; ++j) {
    const double v = kTerm == 1 ? std::fabs(static_cast<double>(x[j])) : static_cast<double>(x[j]);
    sum += kTerm == 2 ? v * v : v;
  }
  return sum;
}
// The AVX-512 or AVX2 form of SumTerms, as the active instruction set allows (callers check for the baseline).
template <int kTerm>
double SumTermsWide(const float *x, int64_t n) {
  static const bool avx512 = vmath::ActiveIsa() == vmath::Isa::kAvx512;
  return avx512 ? SumTermsAvx512<kTerm>(x, n) : SumTermsAvx2<kTerm>(x, n);
}

// Max / Min of rows x[0..rows) (stride `stride`) into acc[0..inner), folded like Combine (acc's NaN stays, else a
// new NaN wins, else the strict comparison keeps acc on ties, so signed zeros fold as in the ordered loop). The
// accumulators come from float values or +-inf, so they round-trip through float exactly; blocks of up to 32
// columns stay in registers across all the rows, the last inner % 8 through masked loads.
template <bool kMax>
__attribute__((target("avx2"), always_inline)) inline __m256 FoldPick(__m256 a, __m256 b) {
  // maxps(b, a) is b > a ? b : a, and a when either is NaN; then a NaN b replaces a non-NaN a.
  const __m256 r = kMax ? _mm256_max_ps(b, a) : _mm256_min_ps(b, a);
  const __m256 take_b = _mm256_andnot_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  return _mm256_blendv_ps(r, b, take_b);
}
// One fold step of ColumnExtremumBlock: FoldPick, or (kPlain) a bare max / min that adds the new value b into
// *sum: a NaN b leaves a NaN there (infinities of both signs do too, only costing the exact redo). One add, on
// other ports than max / min, instead of FoldPick's four extra operations.
template <bool kMax, bool kPlain>
__attribute__((target("avx2"), always_inline)) inline __m256 Fold(__m256 a, __m256 b, __m256 *sum) {
  if (!kPlain) return FoldPick<kMax>(a, b);
  __asm__("" : "+x"(b));  // b in a register: GCC would otherwise load it again for the add (loads bound this loop)
  *sum = _mm256_add_ps(*sum, b);
  return kMax ? _mm256_max_ps(b, a) : _mm256_min_ps(b, a);
}
// kVecs * 8 columns from acc (converted to float), folded over all rows in registers, back to acc; a masked block
// (kMasked, 1 vector) takes the last inner % 8 columns: full loads (the extra lanes read the next row's values,
// unused) while they stay inside the input (before end), masked loads (slow on some cores) only after. Narrow blocks split the rows
// into kSplit consecutive runs folded side by side (more independent chains), then fold the runs' results in
// order: the fold picks the first NaN, else the first of the extreme values, so runs give the ordered result.
// kPlain folds with a bare max / min (which on ties keeps the accumulator, like FoldPick) and only notes NaNs,
// in acc or in the rows (per vector, so the notes form no long chain): it then returns false with acc untouched,
// and the caller redoes the block with FoldPick.
template <bool kMax, int kVecs, int kSplit, bool kMasked, bool kPlain>
__attribute__((target("avx2"), always_inline)) inline bool ColumnExtremumBlock(const float *p, int64_t rows,
                                                                               int64_t stride, int64_t cols,
                                                                               double *acc, const float *end) {
  alignas(32) float buf[8 * kVecs];
  if (kMasked)  // (full blocks convert in registers: a vector load of scalar stores would stall on forwarding)
    for (int64_t k = 0; k < 8 * kVecs; ++k) buf[k] = k < cols ? static_cast<float>(acc[k]) : 0.0f;
  __m256i mask = _mm256_setzero_si256();
  if (kMasked) mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 a[kSplit][kVecs];
  __m256 nan[kVecs], init_nan = _mm256_setzero_ps();
  for (int v = 0; v < kVecs; ++v) {
    nan[v] = _mm256_setzero_ps();
    a[0][v] = kMasked ? _mm256_load_ps(buf + 8 * v)
                      : _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(acc + 8 * v + 4)),
                                        _mm256_cvtpd_ps(_mm256_loadu_pd(acc + 8 * v)));
    if (kPlain) init_nan = _mm256_or_ps(init_nan, _mm256_cmp_ps(a[0][v], a[0][v], _CMP_UNORD_Q));
    for (int s = 1; s < kSplit; ++s) a[s][v] = _mm256_set1_ps(kMax ? -INFINITY : INFINITY);
  }
  const int64_t run = rows / kSplit, run_stride = run * stride;
  for (int64_t row = 0; row < run; ++row, p += stride)
    for (int s = 0; s < kSplit; ++s)
      for (int v = 0; v < kVecs; ++v) {
        const float *q = p + s * run_stride + 8 * v;
        a[s][v] = Fold<kMax, kPlain>(a[s][v], kMasked && end - q < 8 ? _mm256_maskload_ps(q, mask) : _mm256_loadu_ps(q), &nan[v]);
      }
  p += (kSplit - 1) * run_stride;
  for (int64_t row = kSplit * run; row < rows; ++row, p += stride)  // the last run's remaining rows
    for (int v = 0; v < kVecs; ++v)
      a[kSplit - 1][v] =
          Fold<kMax, kPlain>(a[kSplit - 1][v], kMasked && end - p < 8 ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p + 8 * v), &nan[v]);
  for (int v = 0; v < kVecs; ++v)
    for (int s = 1; s < kSplit; ++s)  // (the runs' NaNs are noted already)
      a[0][v] = kPlain ? (kMax ? _mm256_max_ps(a[s][v], a[0][v]) : _mm256_min_ps(a[s][v], a[0][v]))
                       : FoldPick<kMax>(a[0][v], a[s][v]);
  if (kPlain) {
    // A masked block's lanes past cols read other columns (or zeros): a NaN there is not this block's.
    const int lanes = kMasked ? (1 << static_cast<int>(cols)) - 1 : 0xff;
    __m256 any = init_nan;
    for (int v = 0; v < kVecs; ++v) any = _mm256_or_ps(any, _mm256_cmp_ps(nan[v], nan[v], _CMP_UNORD_Q));
    if (_mm256_movemask_ps(any) & lanes) return false;
  }
  for (int v = 0; v < kVecs; ++v) {
    if (kMasked) {
      _mm256_store_ps(buf + 8 * v, a[0][v]);
    } else {
      _mm256_storeu_pd(acc + 8 * v, _mm256_cvtps_pd(_mm256_castps256_ps128(a[0][v])));
      _mm256_storeu_pd(acc + 8 * v + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(a[0][v], 1)));
    }
  }
  if (kMasked)
    for (int64_t k = 0; k < cols; ++k) acc[k] = buf[k];
  return true;
}
template <bool kMax, int kVecs, int kSplit, bool kMasked>
__attribute__((target("avx2"), always_inline)) inline void ColumnExtremumFold(const float *p, int64_t rows,
                                                                              int64_t stride, int64_t cols,
                                                                              double *acc, const float *end) {
  if (!ColumnExtremumBlock<kMax, kVecs, kSplit, kMasked, true>(p, rows, stride, cols, acc, end))
    ColumnExtremumBlock<kMax, kVecs, kSplit, kMasked, false>(p, rows, stride, cols, acc, end);
}
template <bool kMax>
__attribute__((target("avx2"))) void ColumnExtremumAvx2(const float *x, int64_t rows, int64_t stride, int64_t inner,
                                                        double *acc, const float *end) {
  int64_t j = 0;
  for (; j + 32 <= inner; j += 32) ColumnExtremumFold<kMax, 4, 1, false>(x + j, rows, stride, 32, acc + j, end);
  for (; j + 16 <= inner; j += 16) ColumnExtremumFold<kMax, 2, 2, false>(x + j, rows, stride, 16, acc + j, end);
  for (; j + 8 <= inner; j += 8) ColumnExtremumFold<kMax, 1, 4, false>(x + j, rows, stride, 8, acc + j, end);
  if (j < inner) ColumnExtremumFold<kMax, 1, 4, true>(x + j, rows, stride, inner - j, acc + j, end);
}
// float64 Max / Min folding rows into kept columns: ReduceKernel's Combine (the first NaN wins, else the strictly
// better value, so a signed zero keeps the earlier one) per lane, rows in order, 16 columns in registers at a time;
// the same bits as the ordered loop, which GCC left scalar (2.2-2.5x onnxruntime over a middle axis).
template <bool kMax>
__attribute__((target("avx2"), always_inline)) inline __m256d CombineF64(__m256d a, __m256d b) {
  __m256d r = _mm256_blendv_pd(a, b, kMax ? _mm256_cmp_pd(a, b, _CMP_LT_OQ) : _mm256_cmp_pd(b, a, _CMP_LT_OQ));
  r = _mm256_blendv_pd(r, b, _mm256_cmp_pd(b, b, _CMP_UNORD_Q));
  return _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}
template <bool kMax, int kVecs>
__attribute__((target("avx2"), always_inline)) inline void ColumnExtremumF64Block(const double *p, int64_t rows,
                                                                                  int64_t stride, double *acc) {
  // First a bare max / min: maxpd(b, a) is b > a ? b : a, and a when either is NaN, which is Combine as long as no
  // b is NaN (a's NaN stays; a tie keeps a, so signed zeros too); the rows' NaNs are only noted, two loads per
  // unordered compare, and a block that has one is redone by CombineF64 (its three blends and compares per vector
  // measured 1.4x onnxruntime over a middle axis).
  __m256d a[kVecs], nan = _mm256_setzero_pd();
  for (int v = 0; v < kVecs; ++v) a[v] = _mm256_loadu_pd(acc + 4 * v);
  const double *q = p;
  for (int64_t row = 0; row < rows; ++row, q += stride) {
    __m256d b[kVecs];
    for (int v = 0; v < kVecs; ++v) b[v] = _mm256_loadu_pd(q + 4 * v);
    for (int v = 0; v < kVecs; v += 2)
      nan = _mm256_or_pd(nan, _mm256_cmp_pd(b[v], b[v + 1 < kVecs ? v + 1 : v], _CMP_UNORD_Q));
    for (int v = 0; v < kVecs; ++v) a[v] = kMax ? _mm256_max_pd(b[v], a[v]) : _mm256_min_pd(b[v], a[v]);
  }
  if (_mm256_movemask_pd(nan)) {
    for (int v = 0; v < kVecs; ++v) a[v] = _mm256_loadu_pd(acc + 4 * v);
    for (int64_t row = 0; row < rows; ++row, p += stride)
      for (int v = 0; v < kVecs; ++v) a[v] = CombineF64<kMax>(a[v], _mm256_loadu_pd(p + 4 * v));
  }
  for (int v = 0; v < kVecs; ++v) _mm256_storeu_pd(acc + 4 * v, a[v]);
}
// Returns the columns done (a multiple of 4); the caller folds the rest.
template <bool kMax>
__attribute__((target("avx2"))) int64_t ColumnExtremumF64Avx2(const double *x, int64_t rows, int64_t inner,
                                                              double *acc) {
  int64_t j = 0;
  for (; j + 16 <= inner; j += 16) ColumnExtremumF64Block<kMax, 4>(x + j, rows, inner, acc + j);
  for (; j + 4 <= inner; j += 4) ColumnExtremumF64Block<kMax, 1>(x + j, rows, inner, acc + j);
  return j;
}
// ColumnSums below for float Sum / Mean in 4-wide double vectors (the baseline build's loop gets 2-wide SSE2): the
// same additions in the same order, so the result does not depend on the instruction set.
__attribute__((target("avx2"), always_inline)) inline __m256d Wide(const float *p) {
  return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
__attribute__((target("avx2"))) void ColumnSumsFloatAvx2(const float *x, int64_t rows, int64_t inner, double *acc) {
  int64_t row = 0;
  for (; row + 4 <= rows; row += 4) {
    const float *x0 = x + row * inner, *x1 = x0 + inner, *x2 = x1 + inner, *x3 = x2 + inner;
    int64_t j = 0;
    for (; j + 4 <= inner; j += 4) {
      const __m256d s = _mm256_add_pd(_mm256_add_pd(Wide(x0 + j), Wide(x1 + j)), _mm256_add_pd(Wide(x2 + j), Wide(x3 + j)));
      _mm256_storeu_pd(acc + j, _mm256_add_pd(_mm256_loadu_pd(acc + j), s));
    }
    for (; j < inner; ++j)
      acc[j] += (static_cast<double>(x0[j]) + x1[j]) + (static_cast<double>(x2[j]) + x3[j]);
  }
  for (; row < rows; ++row)
    for (int64_t j = 0; j < inner; ++j) acc[j] += x[row * inner + j];
}
bool UseSumFloatsAvx2() {
  static const bool use = vmath::ActiveIsa() != vmath::Isa::kBaseline;
  return use;
}
#endif

// The largest (kMax) or smallest value of a float64 run x[0..n), n >= 1, by eight independent lanes of plain
// compares (they vectorise to maxpd / minpd); false when the run holds a NaN or the result is a zero, which the
// caller's ordered loop redoes (which NaN, which signed zero). Per instruction set like the float32 kernels.
template <bool kMax>
inline bool DoubleExtremum(const double *x, int64_t n, double *out) {
  constexpr int kLanes = 8;
  // probe[k] += v * 0 turns NaN on a NaN (or an infinity: those rows, rare, also take the ordered loop) without a
  // compare in the loop, which kept it from vectorising
  double lanes[kLanes], probe[kLanes] = {};
  for (double &l : lanes) l = kMax ? -INFINITY : INFINITY;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double v = x[j + k];
      probe[k] += v * 0.0;
      lanes[k] = kMax ? (lanes[k] < v ? v : lanes[k]) : (v < lanes[k] ? v : lanes[k]);
    }
  double m = kMax ? -INFINITY : INFINITY, p = 0.0;
  for (; j < n; ++j) {
    p += x[j] * 0.0;
    m = kMax ? (m < x[j] ? x[j] : m) : (x[j] < m ? x[j] : m);
  }
  for (int k = 0; k < kLanes; ++k) {
    p += probe[k];
    m = kMax ? (m < lanes[k] ? lanes[k] : m) : (lanes[k] < m ? lanes[k] : m);
  }
  if (p != 0.0 || m == 0.0) return false;
  *out = m;
  return true;
}
#if defined(__x86_64__)
// The same with AVX2 intrinsics (the compiler kept the loop above scalar): four 4-wide max (min) chains and probes,
// the rest of the run (fewer than 16) and the lanes folded by DoubleExtremum's loop order.
template <bool kMax>
__attribute__((target("avx2"))) bool DoubleExtremumAvx2(const double *x, int64_t n, double *out) {
  int64_t j = 0;
  double m = kMax ? -INFINITY : INFINITY, p = 0.0;
  if (n >= 16) {
    const __m256d zero = _mm256_setzero_pd();
    __m256d acc[4], probe[4];
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_set1_pd(m);
      probe[k] = zero;
    }
    for (; j + 16 <= n; j += 16)
      for (int k = 0; k < 4; ++k) {
        const __m256d v = _mm256_loadu_pd(x + j + 4 * k);
        probe[k] = _mm256_add_pd(probe[k], _mm256_mul_pd(v, zero));
        acc[k] = kMax ? _mm256_max_pd(acc[k], v) : _mm256_min_pd(acc[k], v);
      }
    // Lanes and probes folded by shuffles: a NaN or infinity anywhere leaves p non-zero (or NaN); without one the
    // extremum does not depend on the order but for the sign of a zero, refused below (rows of 32 spent most of
    // their time in a scalar fold of 16 lanes, measured).
    const __m256d a = kMax ? _mm256_max_pd(_mm256_max_pd(acc[0], acc[1]), _mm256_max_pd(acc[2], acc[3]))
                           : _mm256_min_pd(_mm256_min_pd(acc[0], acc[1]), _mm256_min_pd(acc[2], acc[3]));
    const __m256d q = _mm256_add_pd(_mm256_add_pd(probe[0], probe[1]), _mm256_add_pd(probe[2], probe[3]));
    __m128d h = kMax ? _mm_max_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1))
                     : _mm_min_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    h = kMax ? _mm_max_sd(h, _mm_unpackhi_pd(h, h)) : _mm_min_sd(h, _mm_unpackhi_pd(h, h));
    __m128d hq = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
    hq = _mm_add_sd(hq, _mm_unpackhi_pd(hq, hq));
    m = _mm_cvtsd_f64(h);
    p = _mm_cvtsd_f64(hq);
  }
  double rest;
  if (j < n) {
    if (!DoubleExtremum<kMax>(x + j, n - j, &rest)) return false;  // a NaN or zero there: the ordered loop decides
    m = kMax ? (m < rest ? rest : m) : (rest < m ? rest : m);
  }
  if (p != 0.0 || m == 0.0) return false;
  *out = m;
  return true;
}
#endif
template <bool kMax>
bool DoubleRowExtremum(const double *x, int64_t n, double *out) {
#if defined(__x86_64__)
  static const auto fn = vmath::ActiveIsa() != vmath::Isa::kBaseline ? DoubleExtremumAvx2<kMax> : DoubleExtremum<kMax>;
  return fn(x, n, out);
#else
  return DoubleExtremum<kMax>(x, n, out);
#endif
}

#if defined(__x86_64__)
// 8 float32 rows of n >= 8 terms at p (row stride n) into out[0..8): each row's loads at 0, 8, ... and its last 8
// terms (overlapping the previous load: max / min are idempotent) picked into one vector, then the 8 vectors
// folded across lanes, two rows a step, into one vector of the 8 extrema. False, out untouched, when the rows hold a
// NaN or an extremum is a zero (which NaN, which signed zero: the ordered loop decides). One call per row, with a
// horizontal fold each, measured 1.8-2.35x onnxruntime over rows of 32.
template <bool kMax>
__attribute__((target("avx2"), always_inline)) inline bool EightRowsExtremum(const float *p, int64_t n, double *out) {
  __m256 m[8], nan = _mm256_setzero_ps();
  for (int k = 0; k < 8; ++k, p += n) {
    const __m256 last = _mm256_loadu_ps(p + n - 8);
    __m256 a = last;
    int64_t j = 0;
    for (; j + 16 < n; j += 16) {  // (unordered compares of two loads note a NaN in either)
      const __m256 u = _mm256_loadu_ps(p + j), v = _mm256_loadu_ps(p + j + 8);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(u, v, _CMP_UNORD_Q));
      a = Pick<kMax>(a, Pick<kMax>(u, v));
    }
    if (j + 8 < n) {
      const __m256 u = _mm256_loadu_ps(p + j);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(u, last, _CMP_UNORD_Q));
      a = Pick<kMax>(a, u);
    } else {
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(last, last, _CMP_UNORD_Q));
    }
    m[k] = a;
  }
  if (_mm256_movemask_ps(nan)) return false;
  // rows (0, 1): lanes [p(m0[0], m0[2]), p(m1[0], m1[2]), p(m0[1], m0[3]), p(m1[1], m1[3]) | the same for 4..7]
  const __m256 t01 = Pick<kMax>(_mm256_unpacklo_ps(m[0], m[1]), _mm256_unpackhi_ps(m[0], m[1]));
  const __m256 t23 = Pick<kMax>(_mm256_unpacklo_ps(m[2], m[3]), _mm256_unpackhi_ps(m[2], m[3]));
  const __m256 t45 = Pick<kMax>(_mm256_unpacklo_ps(m[4], m[5]), _mm256_unpackhi_ps(m[4], m[5]));
  const __m256 t67 = Pick<kMax>(_mm256_unpacklo_ps(m[6], m[7]), _mm256_unpackhi_ps(m[6], m[7]));
  // rows 0..3, each over lanes 0..3 (low half) and 4..7 (high half)
  const __m256 q0 = Pick<kMax>(_mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 q1 = Pick<kMax>(_mm256_shuffle_ps(t45, t67, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(t45, t67, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 r = Pick<kMax>(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
  if (_mm256_movemask_ps(_mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_EQ_OQ))) return false;
  _mm256_storeu_pd(out, _mm256_cvtps_pd(_mm256_castps256_ps128(r)));
  _mm256_storeu_pd(out + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(r, 1)));
  return true;
}
// The same for 4 float64 rows of n >= 4 terms (4-wide vectors).
template <bool kMax>
__attribute__((target("avx2"), always_inline)) inline __m256d PickD(__m256d a, __m256d b) {
  return kMax ? _mm256_max_pd(a, b) : _mm256_min_pd(a, b);
}
template <bool kMax>
__attribute__((target("avx2"), always_inline)) inline bool FourRowsExtremum(const double *p, int64_t n, double *out) {
  __m256d m[4], nan = _mm256_setzero_pd();
  for (int k = 0; k < 4; ++k, p += n) {
    const __m256d last = _mm256_loadu_pd(p + n - 4);
    __m256d a = last;
    int64_t j = 0;
    for (; j + 8 < n; j += 8) {
      const __m256d u = _mm256_loadu_pd(p + j), v = _mm256_loadu_pd(p + j + 4);
      nan = _mm256_or_pd(nan, _mm256_cmp_pd(u, v, _CMP_UNORD_Q));
      a = PickD<kMax>(a, PickD<kMax>(u, v));
    }
    if (j + 4 < n) {
      const __m256d u = _mm256_loadu_pd(p + j);
      nan = _mm256_or_pd(nan, _mm256_cmp_pd(u, last, _CMP_UNORD_Q));
      a = PickD<kMax>(a, u);
    } else {
      nan = _mm256_or_pd(nan, _mm256_cmp_pd(last, last, _CMP_UNORD_Q));
    }
    m[k] = a;
  }
  if (_mm256_movemask_pd(nan)) return false;
  // lanes [p(m0[0], m0[1]), p(m1[0], m1[1]) | p(m0[2], m0[3]), p(m1[2], m1[3])], then the halves picked
  const __m256d t01 = PickD<kMax>(_mm256_unpacklo_pd(m[0], m[1]), _mm256_unpackhi_pd(m[0], m[1]));
  const __m256d t23 = PickD<kMax>(_mm256_unpacklo_pd(m[2], m[3]), _mm256_unpackhi_pd(m[2], m[3]));
  const __m256d r = PickD<kMax>(_mm256_permute2f128_pd(t01, t23, 0x20), _mm256_permute2f128_pd(t01, t23, 0x31));
  if (_mm256_movemask_pd(_mm256_cmp_pd(r, _mm256_setzero_pd(), _CMP_EQ_OQ))) return false;
  _mm256_storeu_pd(out, r);
  return true;
}
// Rows [i, rows) of n terms each (n >= 8) into out[row], blocks of rows by EightRowsExtremum / FourRowsExtremum,
// the rows of a refused block and the last few by RowExtremumAvx2 / DoubleExtremumAvx2; returns the first row those
// refuse (a NaN or a zero extremum: the caller's ordered loop takes it), or rows.
template <bool kMax>
__attribute__((target("avx2"))) int64_t RowsExtremumAvx2(const float *x, int64_t i, int64_t rows, int64_t n,
                                                         double *out) {
  while (i < rows) {
    if (i + 8 <= rows && EightRowsExtremum<kMax>(x + i * n, n, out + i)) {
      i += 8;
      continue;
    }
    for (const int64_t e = std::min(i + 8, rows); i < e; ++i) {
      float m;
      if (!RowExtremumAvx2<kMax>(x + i * n, n, &m)) return i;
      out[i] = m;
    }
  }
  return i;
}
template <bool kMax>
__attribute__((target("avx2"))) int64_t RowsExtremumAvx2(const double *x, int64_t i, int64_t rows, int64_t n,
                                                         double *out) {
  while (i < rows) {
    if (i + 4 <= rows && FourRowsExtremum<kMax>(x + i * n, n, out + i)) {
      i += 4;
      continue;
    }
    for (const int64_t e = std::min(i + 4, rows); i < e; ++i) {
      double m;
      if (!DoubleExtremumAvx2<kMax>(x + i * n, n, &m)) return i;
      out[i] = m;
    }
  }
  return i;
}
#endif

enum ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

int64_t AxesInputOpset(const std::string &op) { return op == "ReduceSum" ? 13 : 18; }

bool ReadReduceAttrs(const Node &n, int64_t *keepdims, int64_t *noop, std::string *reason) {
  return AttrInt(n, "keepdims", 1, keepdims, reason) && AttrInt(n, "noop_with_empty_axes", 0, noop, reason);
}

bool CheckReduce(const Node &n, int64_t opset, std::string *reason) {
  int64_t k, e;
  if (!ReadReduceAttrs(n, &k, &e, reason)) return false;
  if (opset >= AxesInputOpset(n.op_type) && n.FindAttr("axes")) {
    *reason = "attribute 'axes' is not allowed at opset " + std::to_string(opset) + " (axes is an input)";
    return false;
  }
  if (opset < AxesInputOpset(n.op_type) && n.input_names.size() > 1) {
    *reason = "takes 1 input at opset " + std::to_string(opset);
    return false;
  }
  return true;
}

// Reduced-axis mask; *unknown when the axes input's contents are not known.
bool ReduceMask(InferCtx *c, std::vector<char> *mask, bool *unknown, std::string *reason) {
  const int64_t r = static_cast<int64_t>(c->in[0]->dims.size());
  int64_t keepdims, noop;
  if (!ReadReduceAttrs(*c->node, &keepdims, &noop, reason)) return false;
  std::vector<int64_t> axes;
  bool present = false;
  if (!ReadIntsInputOrAttr(c, AxesInputOpset(c->node->op_type), "axes", &axes, &present, unknown, reason))
    return false;
  if (*unknown) return true;
  mask->assign(r, 0);
  if (!present || axes.empty()) {
    if (!noop) mask->assign(r, 1);
    return true;
  }
  for (int64_t a : axes) {
    int64_t n;
    if (!NormalizeAxis(a, r, false, &n, reason)) return false;
    (*mask)[n] = 1;
  }
  return true;
}

bool ReduceType(ElemType t, const std::string &op) {
  if (IsFloatType(t) || t == ElemType::kInt32 || t == ElemType::kInt64 || t == ElemType::kUint32 ||
      t == ElemType::kUint64)
    return true;
  if (op == "ReduceMax" || op == "ReduceMin") return t == ElemType::kInt8 || t == ElemType::kUint8 || t == ElemType::kBool;
  return false;
}

bool InferReduce(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!ReduceType(x.dtype, c->node->op_type)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t keepdims, noop;
  if (!ReadReduceAttrs(*c->node, &keepdims, &noop, reason)) return false;
  std::vector<char> mask;
  bool unknown;
  if (!ReduceMask(c, &mask, &unknown, reason)) return false;
  c->out[0].dtype = x.dtype;
  if (unknown) {
    // Without keepdims the rank depends on how many axes the input lists.
    const int64_t na = c->in[1]->dims.empty() ? 1 : c->in[1]->dims[0];
    const int64_t r = static_cast<int64_t>(x.dims.size());
    c->out[0].dims.assign(keepdims ? r : (na >= 0 && na <= r ? r - na : 0), -1);
    return true;
  }
  c->out[0].dims.clear();
  for (size_t i = 0; i < x.dims.size(); ++i) {
    if (!mask[i]) c->out[0].dims.push_back(x.dims[i]);
    else if (keepdims) c->out[0].dims.push_back(1);
  }
  return true;
}

// Accumulator: double for floating inputs and for the ops whose result is a real function of the sum (L2, LogSum,
// LogSumExp); otherwise the integer type itself (sums and products wrap, like numpy).
#if defined(__x86_64__)
// float32 Max / Min over rows of n < 8 terms along the last axis, 8 rows a step: lane l gathers term t of row l and
// folds it as Combine does from Init (a NaN best stays, a NaN term wins, else only a strictly better one is taken,
// so a zero keeps its first sign); the ordered scalar loop over rows of 3 measured 1.8x onnxruntime. acc[0..rows)
// must hold Init; returns the rows done (a multiple of 8).
template <bool kMax>
__attribute__((target("avx2"))) int64_t ShortRowsExtremumAvx2(const float *x, int64_t rows, int n, double *acc) {
  const __m256i lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(n));
  // the masked gather with a zero source: GCC 12 warns that the unmasked one reads an uninitialised operand
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1)), zero = _mm256_setzero_ps();
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const float *p = x + r * n;
    // the first term replaces Init (-inf for Max, +inf for Min) unless equal to it, which leaves the same value
    __m256 best = _mm256_mask_i32gather_ps(zero, p, lane, all, 4);
    for (int t = 1; t < n; ++t) {
      const __m256 cv = _mm256_mask_i32gather_ps(zero, p + t, lane, all, 4);
      const __m256 bnan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
      const __m256 take = _mm256_andnot_ps(bnan, _mm256_cmp_ps(cv, best, kMax ? _CMP_NLE_UQ : _CMP_NGE_UQ));
      best = _mm256_blendv_ps(best, cv, take);
    }
    _mm256_storeu_pd(acc + r, _mm256_cvtps_pd(_mm256_castps256_ps128(best)));
    _mm256_storeu_pd(acc + r + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(best, 1)));
  }
  return r;
}
#endif

#if defined(__x86_64__)
// Rows of an odd number kN < 8 of float32 terms, 8 rows (kN vectors) at a time, deinterleaved without gathers:
// term t of row r, element kN r + t, sits in vector (kN r + t) / 8 at lane (kN r + t) % 8, and for odd kN those
// lanes are distinct over the 8 rows, so kN - 1 blends collect term t's 8 values and one permute puts row r's in
// lane r.
constexpr int DeinterleaveMask(int n, int t, int s) {
  int m = 0;
  for (int r = 0; r < 8; ++r)
    if ((n * r + t) / 8 == s) m |= 1 << ((n * r + t) % 8);
  return m;
}
template <int kN, int kT, int kS>
__attribute__((target("avx2"), always_inline)) inline __m256 BlendTerm(__m256 b, const __m256 *v) {
  if constexpr (kS == kN) {
    return b;
  } else {
    return BlendTerm<kN, kT, kS + 1>(_mm256_blend_ps(b, v[kS], DeinterleaveMask(kN, kT, kS)), v);
  }
}
template <int kN, int kT>
__attribute__((target("avx2"), always_inline)) inline __m256 TermOfRows(const __m256 *v) {
  const __m256i perm = _mm256_setr_epi32((kT) % 8, (kN + kT) % 8, (2 * kN + kT) % 8, (3 * kN + kT) % 8,
                                         (4 * kN + kT) % 8, (5 * kN + kT) % 8, (6 * kN + kT) % 8, (7 * kN + kT) % 8);
  return _mm256_permutevar8x32_ps(BlendTerm<kN, kT, 1>(v[0], v), perm);
}
template <int kN, int kT = 0>
__attribute__((target("avx2"), always_inline)) inline void TermsOfRows(const __m256 *v, __m256 *t) {
  if constexpr (kT < kN) {
    t[kT] = TermOfRows<kN, kT>(v);
    TermsOfRows<kN, kT + 1>(v, t);
  }
}
// What ShortRowsOddAvx2 computes per row, as ReduceKernel's Combine / Pre over a row from Init.
enum ShortRowOp { kRowMax, kRowMin, kRowSum, kRowAbsSum, kRowSquareSum };
template <int kOp>
__attribute__((target("avx2"), always_inline)) inline __m256d TermD(__m128 v) {
  if (kOp == kRowAbsSum) v = _mm_andnot_ps(_mm_set1_ps(-0.0f), v);
  const __m256d d = _mm256_cvtps_pd(v);
  return kOp == kRowSquareSum ? _mm256_mul_pd(d, d) : d;
}
// Rows x[0..rows) of kN terms (odd kN < 8) into acc[0..rows), 8 rows a step; returns the rows done (a multiple of
// 8). Max / Min fold as Combine from Init does (a NaN best stays, a NaN term wins, else only a strictly better one
// is taken, so a zero keeps its first sign); sums add the double terms in order from +0, as the scalar loop. That
// loop over rows of 3 measured 1.4-2.0x onnxruntime (ReduceSum, ReduceL2), the gathers 1.8x (ReduceMax).
template <int kN, int kOp>
__attribute__((target("avx2"))) int64_t ShortRowsOddAvx2(const float *x, int64_t rows, double *acc) {
  static_assert(kN % 2 == 1 && kN < 8, "odd rows shorter than a vector");
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    __m256 v[kN], t[kN];
    for (int s = 0; s < kN; ++s) v[s] = _mm256_loadu_ps(x + r * kN + 8 * s);
    TermsOfRows<kN>(v, t);
    if constexpr (kOp == kRowMax || kOp == kRowMin) {
      __m256 best = t[0];  // the first term replaces Init unless equal to it, which leaves the same value
      for (int k = 1; k < kN; ++k) {
        const __m256 bnan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
        const __m256 take = _mm256_andnot_ps(bnan, _mm256_cmp_ps(t[k], best, kOp == kRowMax ? _CMP_NLE_UQ : _CMP_NGE_UQ));
        best = _mm256_blendv_ps(best, t[k], take);
      }
      _mm256_storeu_pd(acc + r, _mm256_cvtps_pd(_mm256_castps256_ps128(best)));
      _mm256_storeu_pd(acc + r + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(best, 1)));
    } else {
      __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
      for (int k = 0; k < kN; ++k) {
        lo = _mm256_add_pd(lo, TermD<kOp>(_mm256_castps256_ps128(t[k])));
        hi = _mm256_add_pd(hi, TermD<kOp>(_mm256_extractf128_ps(t[k], 1)));
      }
      _mm256_storeu_pd(acc + r, lo);
      _mm256_storeu_pd(acc + r + 4, hi);
    }
  }
  return r;
}
#endif

template <class C, ReduceKind kKind>
using AccOf = std::conditional_t<
    std::is_floating_point<C>::value || kKind == kL2 || kKind == kLogSum || kKind == kLogSumExp, double,
    std::conditional_t<std::is_same<C, bool>::value, uint8_t, C>>;

template <class S, ReduceKind kKind>
class ReduceKernel : public Kernel {
  using C = typename Num<S>::C;
  using Acc = AccOf<C, kKind>;
  static constexpr bool kFloatAcc = std::is_floating_point<Acc>::value;

 public:
  // half: float16 / bfloat16 input and output (S float, outermost dim kept, not LogSumExp), else kUndefined
  ReduceKernel(std::vector<int64_t> dims, std::vector<int64_t> out_strides, int64_t out_n, int64_t count,
               ElemType half = ElemType::kUndefined)
      : dims_(std::move(dims)), ostr_(std::move(out_strides)), out_n_(out_n), count_(count), acc_(out_n),
        shift_(kKind == kLogSumExp ? out_n : 0), idx_(dims_.size()), half_(half) {
    total_ = 1;
    for (int64_t d : dims_) total_ *= d;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if constexpr (std::is_same<S, float>::value && kKind != kLogSumExp) {
      if (half_ != ElemType::kUndefined) {
        // Blocks of whole slices widened into a cache-sized buffer and folded by the float32 code: each output
        // from the same terms in the same order as widening the whole input first (which measured 3.4x
        // onnxruntime: the 4-byte copy went out to memory and back).
        hx_ = static_cast<const uint16_t *>(in[0]);
        Pass<kKind>(nullptr, acc_.data());
        wide_out_.resize(static_cast<size_t>(out_n_));
        for (int64_t o = 0; o < out_n_; ++o) wide_out_[o] = static_cast<float>(Finish(acc_[o], o));
        uint16_t *y = static_cast<uint16_t *>(out[0]);
        if (half_ == ElemType::kFloat16) FloatToHalfArray(wide_out_.data(), y, out_n_);
        else for (int64_t o = 0; o < out_n_; ++o) y[o] = FloatToBf16(wide_out_[o]);
        return true;
      }
    }
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    if constexpr (kKind == kLogSumExp) {
      // exp(x - max) keeps the sum finite; the max is added back after the log.
      Pass<kMax>(x, shift_.data());
      for (double &m : shift_) m = std::isfinite(m) ? m : 0.0;
      if constexpr (std::is_same<S, float>::value) {
        // float32: the terms exp(x - max) by the vectorised float exp (within a few ulp, each term <= 1) into a
        // scratch copy, then summed in double like ReduceSum; a double std::exp per element measured 1.25-1.6x
        // onnxruntime over rows of 3 and 8.
        terms_.resize(static_cast<size_t>(total_));
        ExpTerms(x, terms_.data());
        Pass<kSum>(terms_.data(), acc_.data());
      } else {
        Pass<kKind>(x, acc_.data());
      }
    } else if (dims_.size() >= 2 && ostr_[0] != 0 && out_n_ > kAccBlock * 8) {
      PassBlocked(x, y);
      return true;
    } else {
      Pass<kKind>(x, acc_.data());
    }
    for (int64_t o = 0; o < out_n_; ++o) y[o] = Num<S>::Store(static_cast<C>(Finish(acc_[o], o)));
    return true;
  }

 private:
  // LogSumExp, float32: t = exp(x - shift) element by element (shift: the output's finite max, in float exactly).
  void ExpTerms(const float *x, float *t) {
    if (total_ == 0) return;
    const size_t r = dims_.size();
    const int64_t inner = dims_[r - 1], is = ostr_[r - 1];
    if (r == 2 && is == 0 && ostr_[0] == 1) {  // rows along the last axis, outputs contiguous
      for (int64_t i = 0; i < dims_[0]; ++i) {
        const float s = static_cast<float>(shift_[i]);
        for (int64_t j = 0; j < inner; ++j) t[i * inner + j] = x[i * inner + j] - s;
      }
    } else {
      std::fill(idx_.begin(), idx_.end(), 0);
      int64_t off = 0;
      for (int64_t i = 0; i < total_; i += inner) {
        if (is == 0) {
          const float s = static_cast<float>(shift_[off]);
          for (int64_t j = 0; j < inner; ++j) t[i + j] = x[i + j] - s;
        } else {  // the last axis kept: output stride 1
          for (int64_t j = 0; j < inner; ++j) t[i + j] = x[i + j] - static_cast<float>(shift_[off + j]);
        }
        for (size_t d = r - 1; d-- > 0;) {
          off += ostr_[d];
          if (++idx_[d] < dims_[d]) break;
          off -= ostr_[d] * dims_[d];
          idx_[d] = 0;
        }
      }
    }
    vmath::ExpArray(t, t, total_);
  }

  // Input elements worth a helper of the intra-op pool: ~25 us of one core for a vectorised sum or extremum (1M
  // float32 measured 85 us; at 64K a chunk the split made ReduceSum slower).
  static constexpr int64_t kReduceGrain = int64_t(1) << 18;

  // Where the outermost (coalesced) dim is kept, its slices fold into disjoint outputs: the pool gets runs of
  // whole slices, each output folded by the same code in the same order whoever runs it (a sum is never split).
  template <ReduceKind kPass, class A>
  void Pass(const S *x, A *acc) {
    std::fill(acc, acc + out_n_, Init<kPass, A>());
    if (total_ == 0) return;
    const int64_t d0 = dims_[0], slice = total_ / d0;
    if (dims_.size() < 2 || ostr_[0] == 0 || total_ < kReduceGrain * kMinChunks) {
      if (hx_) HalfRange<kPass>(acc, 0, d0, idx_.data(), &wide_);
      else PassRange<kPass>(x, x + total_, acc, 0, d0, idx_.data());
      return;
    }
    ParallelForAnyCut(d0, std::max<int64_t>(1, kReduceGrain / slice), [&](int64_t b, int64_t e) {
      std::vector<int64_t> idx(dims_.size());
      if (hx_) {
        std::vector<float> wide;
        HalfRange<kPass>(acc, b, e, idx.data(), &wide);
      } else {
        PassRange<kPass>(x + b * slice, x + total_, acc, b, e, idx.data());
      }
    });
  }

  // Outputs this many at a time from Init through Finish where the outermost dim is kept and there are many of
  // them: each block's accumulators stay in cache. Whole, the (double) accumulator array went out to memory and
  // back three times (Init, fold, Finish): ReduceMin over a middle axis of 4 of 1M float32 measured 2x
  // onnxruntime. Each output folds the same terms in the same order as in Pass.
  static constexpr int64_t kAccBlock = 4096;

  void PassBlocked(const S *x, S *y) {
    const int64_t d0 = dims_[0], slice = total_ / d0, per = ostr_[0];
    const int64_t step = std::max<int64_t>(1, kAccBlock / per);
    // slices [b, e), in blocks of `step` slices through acc (room for step * per accumulators)
    auto range = [&](int64_t b, int64_t e, int64_t *idx, Acc *acc) {
      for (int64_t i = b; i < e; i += step) {
        const int64_t j = std::min(e, i + step), n = (j - i) * per, o0 = i * per;
        std::fill(acc, acc + n, Init<kKind, Acc>());
        PassRange<kKind>(x + i * slice, x + total_, acc, i, j, idx, i);
        for (int64_t o = 0; o < n; ++o) y[o0 + o] = Num<S>::Store(static_cast<C>(Finish(acc[o], o0 + o)));
      }
    };
    if (total_ < kReduceGrain * kMinChunks) return range(0, d0, idx_.data(), acc_.data());
    ParallelForAnyCut(d0, std::max<int64_t>(1, kReduceGrain / slice), [&](int64_t b, int64_t e) {
      std::vector<int64_t> idx(dims_.size());
      std::vector<Acc> acc(static_cast<size_t>(std::min(step, e - b) * per));
      range(b, e, idx.data(), acc.data());
    });
  }

  // Half input (hx_): slices [b, e) of the outermost dim, a few at a time widened into *wide, then PassRange.
  template <ReduceKind kPass, class A>
  void HalfRange(A *acc, int64_t b, int64_t e, int64_t *idx, std::vector<float> *wide) {
    if constexpr (std::is_same<S, float>::value) {
      const int64_t slice = total_ / dims_[0], step = std::max<int64_t>(1, kHalfBlock / slice);
      wide->resize(static_cast<size_t>(std::min(step, e - b) * slice));
      for (int64_t i = b; i < e; i += step) {
        const int64_t j = std::min(e, i + step), n = (j - i) * slice;
        const uint16_t *h = hx_ + i * slice;
        float *w = wide->data();
        if (half_ == ElemType::kFloat16) HalfToFloatArray(h, w, n);
        else for (int64_t k = 0; k < n; ++k) w[k] = Bf16ToFloat(h[k]);
        PassRange<kPass>(w, w + n, acc, i, j, idx);
      }
    }
  }

  // Elements widened at a time from a half input: 16 KB of float32, within L1 next to the 8 KB of input.
  static constexpr int64_t kHalfBlock = 4096;

  // Slices [b, e) of the outermost dim into acc (at its Init); x: slice b's first element, end: the end of the
  // readable input; idx: scratch of dims_.size(); acc_all holds the outputs from slice `origin` on.
  template <ReduceKind kPass, class A>
  void PassRange(const S *x, const S *end, A *acc_all, int64_t b, int64_t e, int64_t *idx, int64_t origin = 0) {
    const size_t r = dims_.size();
    const int64_t slice = total_ / dims_[0], span = (e - b) * slice;
    A *acc = acc_all + (b - origin) * ostr_[0];
    const double *shift = kPass == kLogSumExp ? shift_.data() + b * ostr_[0] : nullptr;
    const int64_t inner = dims_[r - 1], is = ostr_[r - 1];
    // A reduced axis just above a kept contiguous one (ReduceMean over axis 0 of a matrix): its rows all add into
    // the same outputs, so they are taken as one block of column sums.
    const bool columns = is != 0 && r >= 2 && ostr_[r - 2] == 0;
    const int64_t rows = columns ? dims_[r - 2] : 1;
    const size_t carry_from = columns ? r - 2 : r - 1;  // the dims walked between blocks
    // Short rows along the last axis, outputs contiguous: one loop over many rows (the per-row call and walk cost
    // more than the row's few terms; rows of 3 measured 1.6-2.6x onnxruntime).
    if (is == 0 && r == 2 && ostr_[0] == 1 && inner >= 2 && inner < kShortRow) {
      switch (inner) {
        case 2: return ShortRows<kPass, A, 2>(x, e - b, acc, shift);
        case 3: return ShortRows<kPass, A, 3>(x, e - b, acc, shift);
        case 4: return ShortRows<kPass, A, 4>(x, e - b, acc, shift);
        case 5: return ShortRows<kPass, A, 5>(x, e - b, acc, shift);
        case 6: return ShortRows<kPass, A, 6>(x, e - b, acc, shift);
        default: return ShortRows<kPass, A, 7>(x, e - b, acc, shift);
      }
    }
    if (is == 0 && r == 2 && ostr_[0] == 1 && inner >= kShortRow && inner <= 64 &&
        ManyRowsExtremum<kPass>(x, e - b, acc))
      return;
    std::fill(idx, idx + r, 0);
    int64_t off = 0;
    for (int64_t i = 0; i < span; i += inner * rows) {
      const S *px = x + i;
      A *pa = acc + off;
      if (is == 0) {
        A a = *pa;
        const double sh = kPass == kLogSumExp ? shift[off] : 0.0;
        if constexpr (kLanedSum<kPass, A>) {
          a += RunSum<kPass, A>(px, inner);
        } else if constexpr (kLanedProd<kPass, A>) {
          a *= LanedSum<kPass, A>(px, inner);
        } else if (!VectorExtremum<kPass, A>(px, inner, &a)) {
          for (int64_t j = 0; j < inner; ++j) a = Combine<kPass, A>(a, Pre<kPass, A>(px[j], sh));
        }
        *pa = a;
      } else if constexpr (kLanedSum<kPass, A>) {
        ColumnSums<kPass, A>(px, rows, inner, pa);
      } else if (ColumnExtremum<kPass, A>(px, rows, inner, pa, end)) {
      } else {
        for (int64_t row = 0; row < rows; ++row, px += inner)
          for (int64_t j = 0; j < inner; ++j)
            pa[j] = Combine<kPass, A>(pa[j], Pre<kPass, A>(px[j], kPass == kLogSumExp ? shift[off + j] : 0.0));
      }
      for (size_t d = carry_from; d-- > 0;) {
        off += ostr_[d];
        if (++idx[d] < dims_[d]) break;
        off -= ostr_[d] * dims_[d];
        idx[d] = 0;
      }
    }
  }

  static constexpr int64_t kShortRow = 8;

  // float32 / float64 Max / Min over rows of 8 to 64 along the last axis, outputs contiguous, acc at its Init: the
  // rows' extrema by RowsExtremumAvx2, the rows it refuses by the ordered loop (as Pass's per-row loop).
  template <ReduceKind kPass, class A>
  bool ManyRowsExtremum([[maybe_unused]] const S *x, [[maybe_unused]] int64_t rows, [[maybe_unused]] A *acc) const {
#if defined(__x86_64__)
    if constexpr ((std::is_same<S, float>::value || std::is_same<S, double>::value) && std::is_same<A, double>::value &&
                  (kPass == kMax || kPass == kMin)) {
      if (!UseSumFloatsAvx2()) return false;
      const int64_t n = dims_[1];
      for (int64_t i = 0; i < rows; ++i) {
        i = RowsExtremumAvx2<kPass == kMax>(x, i, rows, n, acc);
        if (i == rows) break;
        for (int64_t j = 0; j < n; ++j) acc[i] = Combine<kPass, A>(acc[i], Pre<kPass, A>(x[i * n + j], 0.0));
      }
      return true;
    }
#endif
    return false;
  }

#if defined(__x86_64__)
  // The ShortRowOp of a pass, -1 for those ShortRowsOddAvx2 does not do.
  template <ReduceKind kPass>
  static constexpr int kShortRowOp = kPass == kMax ? kRowMax : kPass == kMin ? kRowMin
                                   : kPass == kSum || kPass == kMean || kPass == kLogSum ? kRowSum
                                   : kPass == kL1 ? kRowAbsSum : kPass == kL2 || kPass == kSumSquare ? kRowSquareSum : -1;
#endif

  // Rows of kN terms each into acc[0..rows): each row's terms folded in order from its acc, as the per-row loops
  // (the same bits); kN a constant, so the loop over rows vectorises.
  template <ReduceKind kPass, class A, int kN>
  static void ShortRows(const S *__restrict x, int64_t rows, A *__restrict acc, const double *__restrict shift) {
    int64_t i = 0;
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value && std::is_same<A, double>::value && kN % 2 == 1 &&
                  kShortRowOp<kPass> >= 0) {
      if (UseSumFloatsAvx2()) i = ShortRowsOddAvx2<kN, kShortRowOp<kPass>>(x, rows, acc);  // acc is at Init (Pass)
    } else if constexpr (std::is_same<S, float>::value && std::is_same<A, double>::value &&
                         (kPass == kMax || kPass == kMin)) {
      if (UseSumFloatsAvx2()) i = ShortRowsExtremumAvx2<kPass == kMax>(x, rows, kN, acc);  // acc is at Init (Pass)
    }
#endif
    for (; i < rows; ++i) {
      A a = acc[i];
      const double sh = kPass == kLogSumExp ? shift[i] : 0.0;
      for (int j = 0; j < kN; ++j) a = Combine<kPass, A>(a, Pre<kPass, A>(x[i * kN + j], sh));
      acc[i] = a;
    }
  }

  // float32 Max / Min along a contiguous run by RowExtremum, which leaves NaN and signed-zero rows to the ordered
  // loop; folding the row's extremum into a gives what folding its elements one by one would.
  template <ReduceKind kPass, class A>
  static bool VectorExtremum([[maybe_unused]] const S *px, [[maybe_unused]] int64_t n, [[maybe_unused]] A *a) {
    if constexpr (std::is_same<S, float>::value && (kPass == kMax || kPass == kMin)) {
      float row;
      // short rows: the ordered loop's few selects cost less than the call (3-wide rows measured 3.9x onnxruntime)
      if (n < kShortRow || !RowExtremum(px, n, kPass == kMax, &row)) return false;
      *a = Combine<kPass, A>(*a, static_cast<A>(row));
      return true;
    } else if constexpr (std::is_same<S, double>::value && (kPass == kMax || kPass == kMin)) {
      // the ordered chain of NaN-propagating selects measured 18x onnxruntime on float64 rows of 1024
      double row;
      if (n < kShortRow || !DoubleRowExtremum<kPass == kMax>(px, n, &row)) return false;
      *a = Combine<kPass, A>(*a, row);
      return true;
    }
    return false;
  }

  // float32 Max / Min folding rows into kept columns (a middle axis), vectorised along the columns with AVX2.
  template <ReduceKind kPass, class A>
  static bool ColumnExtremum([[maybe_unused]] const S *px, [[maybe_unused]] int64_t rows,
                             [[maybe_unused]] int64_t inner, [[maybe_unused]] A *pa, [[maybe_unused]] const S *end) {
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value && std::is_same<A, double>::value && (kPass == kMax || kPass == kMin)) {
      if (!UseSumFloatsAvx2()) return false;
      if (kPass == kMax) ColumnExtremumAvx2<true>(px, rows, inner, inner, pa, end);
      else ColumnExtremumAvx2<false>(px, rows, inner, inner, pa, end);
      return true;
    }
    if constexpr (std::is_same<S, double>::value && std::is_same<A, double>::value && (kPass == kMax || kPass == kMin)) {
      if (!UseSumFloatsAvx2()) return false;
      const int64_t done = kPass == kMax ? ColumnExtremumF64Avx2<true>(px, rows, inner, pa)
                                         : ColumnExtremumF64Avx2<false>(px, rows, inner, pa);
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t j = done; j < inner; ++j) pa[j] = Combine<kPass, A>(pa[j], px[row * inner + j]);
      return true;
    }
#endif
    return false;
  }

  // acc[j] += the terms of rows x[0..rows) at column j, four rows per pass over acc (one load and store of acc per
  // four rows instead of per row; vectorised over j).
  template <ReduceKind kPass, class A>
  static void ColumnSums(const S *__restrict x, int64_t rows, int64_t inner, A *__restrict acc) {
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value && (kPass == kSum || kPass == kMean))
      if (UseSumFloatsAvx2()) return ColumnSumsFloatAvx2(x, rows, inner, acc);
#endif
    int64_t row = 0;
    for (; row + 4 <= rows; row += 4) {
      const S *x0 = x + row * inner, *x1 = x0 + inner, *x2 = x1 + inner, *x3 = x2 + inner;
      for (int64_t j = 0; j < inner; ++j)
        acc[j] += (Pre<kPass, A>(x0[j], 0.0) + Pre<kPass, A>(x1[j], 0.0)) +
                  (Pre<kPass, A>(x2[j], 0.0) + Pre<kPass, A>(x3[j], 0.0));
    }
    for (; row < rows; ++row)
      for (int64_t j = 0; j < inner; ++j) acc[j] += Pre<kPass, A>(x[row * inner + j], 0.0);
  }

  // Floating sums along a contiguous run go through independent lanes, so that they vectorise (only the order of
  // the double additions changes).
  template <ReduceKind kPass, class A>
  static constexpr bool kLanedSum = std::is_floating_point<A>::value &&
                                    (kPass == kSum || kPass == kMean || kPass == kL1 || kPass == kL2 ||
                                     kPass == kSumSquare || kPass == kLogSum);
  // Floating products along a contiguous run also go through lanes (in double: only the rounding order changes).
  template <ReduceKind kPass, class A>
  static constexpr bool kLanedProd = std::is_floating_point<A>::value && kPass == kProd;

  template <ReduceKind kPass, class A>
  static A LanedSum(const S *__restrict px, int64_t n) {
    constexpr int64_t kLanes = 8;
    A lanes[kLanes];
    for (A &l : lanes) l = Init<kPass, A>();
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) lanes[k] = Combine<kPass, A>(lanes[k], Pre<kPass, A>(px[j + k], 0.0));
    A tail = Init<kPass, A>();
    for (; j < n; ++j) tail = Combine<kPass, A>(tail, Pre<kPass, A>(px[j], 0.0));
    for (int64_t k = 0; k < kLanes; ++k) tail = Combine<kPass, A>(tail, lanes[k]);
    return tail;
  }

  template <ReduceKind kPass, class A>
  static A RunSum(const S *px, int64_t n) {
    // short rows: the call and the lanes' setup cost more than a few additions in order (3-wide float32 rows
    // measured 2.6x onnxruntime)
    if ((kPass == kSum || kPass == kMean) && n < kShortRow) {
      A a = Init<kPass, A>();
      for (int64_t j = 0; j < n; ++j) a = Combine<kPass, A>(a, Pre<kPass, A>(px[j], 0.0));
      return a;
    }
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value && (kPass == kSum || kPass == kMean))
      if (UseSumFloatsAvx2()) return SumTermsWide<0>(px, n);
    if constexpr (std::is_same<S, float>::value && kPass == kL1)
      if (UseSumFloatsAvx2()) return SumTermsWide<1>(px, n);
    if constexpr (std::is_same<S, float>::value && (kPass == kSumSquare || kPass == kL2))
      if (UseSumFloatsAvx2()) return SumTermsWide<2>(px, n);
#endif
    return LanedSum<kPass, A>(px, n);
  }

  template <ReduceKind kPass, class A>
  static A Init() {
    constexpr bool kFloat = std::is_floating_point<A>::value;
    if constexpr (kPass == kMax) return kFloat ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::lowest();
    if constexpr (kPass == kMin) return kFloat ? std::numeric_limits<A>::infinity() : std::numeric_limits<A>::max();
    if constexpr (kPass == kProd) return A(1);
    return A(0);
  }

  // The per-element term of the reduction.
  template <ReduceKind kPass, class A>
  static A Pre(S s, [[maybe_unused]] double shift) {
    const C v = Num<S>::Load(s);
    if constexpr (kPass == kL1) {
      // floats: fabs clears the sign bit (no compare; the select measured 6x onnxruntime over a leading axis)
      if constexpr (std::is_floating_point<C>::value) return static_cast<A>(std::fabs(v));
      else if constexpr (std::is_signed<C>::value) return static_cast<A>(v < 0 ? -v : v);
      else return static_cast<A>(v);
    } else if constexpr (kPass == kL2 || kPass == kSumSquare) {
      const A a = static_cast<A>(v);
      if constexpr (std::is_integral<A>::value) return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(a));
      else return a * a;
    } else if constexpr (kPass == kLogSumExp) {
      return std::exp(static_cast<double>(v) - shift);
    } else {
      return static_cast<A>(v);
    }
  }

  template <ReduceKind kPass, class A>
  static A Combine(A a, A b) {
    if constexpr (kPass == kMax || kPass == kMin) {
      const A r = kPass == kMax ? (a < b ? b : a) : (b < a ? b : a);
      if constexpr (std::is_floating_point<A>::value) {  // NaN wins, a's first: selects, so that loops vectorise
        const A rb = b != b ? b : r;
        return a != a ? a : rb;
      }
      return r;
    } else if constexpr (kPass == kProd) {
      if constexpr (std::is_integral<A>::value) return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      else return a * b;
    } else if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    } else {
      return a + b;
    }
  }

  Acc Finish(Acc v, [[maybe_unused]] int64_t o) const {
    if constexpr (kKind == kMean) {
      if constexpr (kFloatAcc) return count_ ? v / static_cast<double>(count_) : NAN;
      else return count_ ? static_cast<Acc>(v / static_cast<Acc>(count_)) : Acc(0);
    } else if constexpr (kKind == kL2) {
      return std::sqrt(v);
    } else if constexpr (kKind == kLogSum) {
      return std::log(v);
    } else if constexpr (kKind == kLogSumExp) {
      return std::log(v) + shift_[o];
    } else {
      return v;
    }
  }

  std::vector<int64_t> dims_, ostr_;  // input dims and matching output strides (0 on reduced axes)
  int64_t out_n_, count_, total_ = 0;
  std::vector<Acc> acc_;
  std::vector<double> shift_;  // LogSumExp: per-output max
  std::vector<float> terms_;   // LogSumExp, float32: exp(x - max) per element
  std::vector<int64_t> idx_;
  ElemType half_;
  const uint16_t *hx_ = nullptr;        // the half input of this Run
  std::vector<float> wide_, wide_out_;  // half: widened slices (serial pass), float32 outputs
};

template <ReduceKind kKind>
std::unique_ptr<Kernel> PrepareReduce(const KernelCtx &kc, std::string *reason) {
  InferCtx c = kc.AsInferCtx();
  std::vector<char> mask;
  bool unknown;
  if (!ReduceMask(&c, &mask, &unknown, reason)) return nullptr;
  const auto &xd = kc.in[0]->dims;
  // Output strides over the input's dims (reduced dims get 0), then merge adjacent dims.
  std::vector<int64_t> kept;
  for (size_t i = 0; i < xd.size(); ++i)
    if (!mask[i]) kept.push_back(xd[i]);
  std::vector<int64_t> ks = Strides(kept);
  std::vector<int64_t> full_str(xd.size(), 0);
  int64_t count = 1;
  for (size_t i = 0, k = 0; i < xd.size(); ++i) {
    if (mask[i]) count *= xd[i];
    else full_str[i] = ks[k++];
  }
  std::vector<int64_t> dims, str;
  CoalesceStrided(xd, full_str, &dims, &str);
  const int64_t out_n = kc.out[0].NumElements();
  if (HasHalfTypes(kc)) {
    // float16 / bfloat16 reduced by the float32 kernels: a block of slices widened at a time where the outermost
    // dim is kept (slices fold into disjoint outputs), else the whole input widened first (PrepareViaFloat)
    const ElemType t = kc.in[0]->dtype;
    if (kKind != kLogSumExp && kc.out[0].dtype == t && dims.size() >= 2 && str[0] != 0)
      return std::make_unique<ReduceKernel<float, kKind>>(dims, str, out_n, count, t);
    return PrepareViaFloat(kc, PrepareReduce<kKind>, reason);
  }
  std::unique_ptr<Kernel> k;
  VisitType(kc.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kKind == kMax || kKind == kMin || !std::is_same<S, Bool>::value)
      k = std::make_unique<ReduceKernel<S, kKind>>(dims, str, out_n, count);
  });
  if (!k) *reason = DtypeNotSupported(kc.out[0].dtype);
  return k;
}

}  // namespace

void RegisterReduceOps(std::vector<OpDef> *ops) {
  ops->push_back({"ReduceSum", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kSum>, true});
  ops->push_back({"ReduceMean", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kMean>, true});
  ops->push_back({"ReduceMax", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kMax>, true});
  ops->push_back({"ReduceMin", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kMin>, true});
  ops->push_back({"ReduceProd", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kProd>, true});
  ops->push_back({"ReduceL1", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kL1>, true});
  ops->push_back({"ReduceL2", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kL2>, true});
  ops->push_back({"ReduceSumSquare", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kSumSquare>, true});
  ops->push_back({"ReduceLogSum", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kLogSum>, true});
  ops->push_back({"ReduceLogSumExp", 1, 2, 1, 1, CheckReduce, InferReduce, PrepareReduce<kLogSumExp>, true});
}

}  // namespace onnx
}  // namespace twin
