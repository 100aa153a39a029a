// Index-driven and axis-wise ops: ArgMax/ArgMin, Hardmax, GatherElements, GatherND, ScatterElements (and the
// deprecated Scatter), ScatterND, OneHot, EyeLike, Trilu, CumSum/CumProd, Shrink, Dropout (inference).
// Tensors are viewed as [outer, axis, inner]; data movement dispatches on the element width only. An index out of
// range fails the run with a message (never an out-of-bounds access).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "elem.h"
#include "row_reduce.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisView ViewAt(const Dims &dims, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < axis; ++i) v.outer *= dims[i];
  v.n = dims.empty() ? 1 : dims[axis];
  for (size_t i = axis + 1; i < dims.size(); ++i) v.inner *= dims[i];
  return v;
}

bool IndexType(ElemType t) { return t == ElemType::kInt64 || t == ElemType::kInt32; }

// Calls f(U{}) with the unsigned integer type of the element width of t.
template <class F>
bool VisitWidth(ElemType t, F &&f) {
  switch (ElemSize(t)) {
    case 1: f(uint8_t{}); return true;
    case 2: f(uint16_t{}); return true;
    case 4: f(uint32_t{}); return true;
    case 8: f(uint64_t{}); return true;
    default: return false;
  }
}

template <class F>
bool VisitIndex(ElemType t, F &&f) {
  if (t == ElemType::kInt64) f(int64_t{});
  else if (t == ElemType::kInt32) f(int32_t{});
  else return false;
  return true;
}

bool NormIndex(int64_t i, int64_t n, int64_t *out, std::string *reason) {
  if (i < -n || i >= n) {
    *reason = "index " + std::to_string(i) + " is out of range [" + std::to_string(-n) + ", " + std::to_string(n) + ")";
    return false;
  }
  *out = i < 0 ? i + n : i;
  return true;
}

bool AxisAttr(const Node &n, int64_t def, int64_t rank, int64_t *axis, std::string *reason) {
  int64_t a;
  return AttrInt(n, "axis", def, &a, reason) && NormalizeAxis(a, rank, false, axis, reason);
}

// ---- ArgMax / ArgMin ----

bool InferArg(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsNumericType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t axis, keepdims;
  const int64_t r = static_cast<int64_t>(x.dims.size());
  if (!AxisAttr(*c->node, 0, std::max<int64_t>(r, 1), &axis, reason) || !AttrInt(*c->node, "keepdims", 1, &keepdims, reason))
    return false;
  c->out[0].dtype = ElemType::kInt64;
  c->out[0].dims.clear();
  for (int64_t i = 0; i < r; ++i) {
    if (i != axis) c->out[0].dims.push_back(x.dims[i]);
    else if (keepdims) c->out[0].dims.push_back(1);
  }
  return true;
}

#if defined(__x86_64__)
// ArgMax / ArgMin of float32 over a non-last axis: blocks of columns keep their best value and its int32 row index
// in registers while the rows stream past; a lane takes the new row where the ordered loop would (a NaN wins, the
// first one, or the last with select_last_index; then the strictly better value, or better-or-equal for the last).
template <bool kMax, bool kLast>
__attribute__((target("avx2"), always_inline)) inline __m256 ArgTake(__m256 bv, __m256 cv) {
  const __m256 bnan = _mm256_cmp_ps(bv, bv, _CMP_UNORD_Q);
  if (kLast) {  // a NaN, or not worse: then a NaN best is only replaced by a NaN
    const __m256 cnan = _mm256_cmp_ps(cv, cv, _CMP_UNORD_Q);
    return _mm256_or_ps(cnan, _mm256_cmp_ps(cv, bv, kMax ? _CMP_GE_OQ : _CMP_LE_OQ));
  }
  // "not (cv <= bv)" (max) is true for cv NaN or cv > bv, and for a NaN best, which keeps its place.
  return _mm256_andnot_ps(bnan, _mm256_cmp_ps(cv, bv, kMax ? _CMP_NLE_UQ : _CMP_NGE_UQ));
}
template <bool kMax, bool kLast, int kVecs>
__attribute__((target("avx2"), always_inline)) inline void ArgColumnsBlock(const float *p, int64_t n, int64_t stride,
                                                                           int64_t *y) {
  __m256 bv[kVecs];
  __m256 bi[kVecs];  // int32 row indices, blended as floats
  for (int v = 0; v < kVecs; ++v) {
    bv[v] = _mm256_loadu_ps(p + 8 * v);
    bi[v] = _mm256_setzero_ps();
  }
  __m256i k = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi32(1);
  for (int64_t t = 1; t < n; ++t) {
    p += stride;
    k = _mm256_add_epi32(k, one);
    for (int v = 0; v < kVecs; ++v) {
      const __m256 cv = _mm256_loadu_ps(p + 8 * v);
      const __m256 take = ArgTake<kMax, kLast>(bv[v], cv);
      bv[v] = _mm256_blendv_ps(bv[v], cv, take);
      bi[v] = _mm256_blendv_ps(bi[v], _mm256_castsi256_ps(k), take);
    }
  }
  for (int v = 0; v < kVecs; ++v) {
    const __m256i i32 = _mm256_castps_si256(bi[v]);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + 8 * v), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(i32)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + 8 * v + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(i32, 1)));
  }
}
// Rows of n < 8 along the last axis, 8 rows per step: lane l gathers element t of row l, so each step is the
// column fold above across the 8 rows (the ordered per-row loop, a mispredicted branch per element on random data,
// measured 2.3-3.5x onnxruntime on rows of 3). Returns the rows done (a multiple of 8).
template <bool kMax, bool kLast>
__attribute__((target("avx2"))) int64_t ArgShortRowsAvx2(const float *x, int64_t rows, int n, int64_t *y) {
  const __m256i lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(n));
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const float *p = x + r * n;
    __m256 bv = _mm256_i32gather_ps(p, lane, 4), bi = _mm256_setzero_ps();
    for (int t = 1; t < n; ++t) {
      const __m256 cv = _mm256_i32gather_ps(p + t, lane, 4);
      const __m256 take = ArgTake<kMax, kLast>(bv, cv);
      bv = _mm256_blendv_ps(bv, cv, take);
      bi = _mm256_blendv_ps(bi, _mm256_castsi256_ps(_mm256_set1_epi32(t)), take);
    }
    const __m256i i32 = _mm256_castps_si256(bi);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + r), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(i32)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + r + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(i32, 1)));
  }
  return r;
}
// Columns [0, inner) of one [n, inner] slab (inner >= 8, n < 2^31); a last partial block overlaps the previous one
// (recomputing a column gives the same index).
template <bool kMax, bool kLast>
__attribute__((target("avx2"))) void ArgColumnsAvx2(const float *x, int64_t n, int64_t inner, int64_t *y) {
  int64_t j = 0;
  for (; j + 32 <= inner; j += 32) ArgColumnsBlock<kMax, kLast, 4>(x + j, n, inner, y + j);
  for (; j + 16 <= inner; j += 16) ArgColumnsBlock<kMax, kLast, 2>(x + j, n, inner, y + j);
  for (; j + 8 <= inner; j += 8) ArgColumnsBlock<kMax, kLast, 1>(x + j, n, inner, y + j);
  if (j < inner) ArgColumnsBlock<kMax, kLast, 1>(x + inner - 8, n, inner, y + inner - 8);
}

// The same for float64, 4 lanes a vector: the row index kept as int64 in the lanes (blended as doubles), stored as
// it is. The scalar fold's NaN tests and branches measured 6-11x onnxruntime on random rows of 3 and columns of 4.
template <bool kMax, bool kLast>
__attribute__((target("avx2"), always_inline)) inline __m256d ArgTakePd(__m256d bv, __m256d cv) {
  const __m256d bnan = _mm256_cmp_pd(bv, bv, _CMP_UNORD_Q);
  if (kLast) {
    const __m256d cnan = _mm256_cmp_pd(cv, cv, _CMP_UNORD_Q);
    return _mm256_or_pd(cnan, _mm256_cmp_pd(cv, bv, kMax ? _CMP_GE_OQ : _CMP_LE_OQ));
  }
  return _mm256_andnot_pd(bnan, _mm256_cmp_pd(cv, bv, kMax ? _CMP_NLE_UQ : _CMP_NGE_UQ));
}
template <bool kMax, bool kLast, int kVecs>
__attribute__((target("avx2"), always_inline)) inline void ArgColumnsBlockPd(const double *p, int64_t n,
                                                                             int64_t stride, int64_t *y) {
  __m256d bv[kVecs];
  __m256d bi[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    bv[v] = _mm256_loadu_pd(p + 4 * v);
    bi[v] = _mm256_setzero_pd();
  }
  __m256i k = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi64x(1);
  for (int64_t t = 1; t < n; ++t) {
    p += stride;
    k = _mm256_add_epi64(k, one);
    for (int v = 0; v < kVecs; ++v) {
      const __m256d cv = _mm256_loadu_pd(p + 4 * v);
      const __m256d take = ArgTakePd<kMax, kLast>(bv[v], cv);
      bv[v] = _mm256_blendv_pd(bv[v], cv, take);
      bi[v] = _mm256_blendv_pd(bi[v], _mm256_castsi256_pd(k), take);
    }
  }
  for (int v = 0; v < kVecs; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + 4 * v), _mm256_castpd_si256(bi[v]));
}
template <bool kMax, bool kLast>
__attribute__((target("avx2"))) int64_t ArgShortRowsAvx2Pd(const double *x, int64_t rows, int n, int64_t *y) {
  const __m128i lane = _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(n));
  // the masked form with a zero source: GCC 12 warns that the unmasked gather reads an uninitialised operand
  const __m256d all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1)), zero = _mm256_setzero_pd();
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const double *p = x + r * n;
    __m256d bv = _mm256_mask_i32gather_pd(zero, p, lane, all, 8), bi = zero;
    for (int t = 1; t < n; ++t) {
      const __m256d cv = _mm256_mask_i32gather_pd(zero, p + t, lane, all, 8);
      const __m256d take = ArgTakePd<kMax, kLast>(bv, cv);
      bv = _mm256_blendv_pd(bv, cv, take);
      bi = _mm256_blendv_pd(bi, _mm256_castsi256_pd(_mm256_set1_epi64x(t)), take);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + r), _mm256_castpd_si256(bi));
  }
  return r;
}
template <bool kMax, bool kLast>
__attribute__((target("avx2"))) void ArgColumnsAvx2Pd(const double *x, int64_t n, int64_t inner, int64_t *y) {
  int64_t j = 0;
  for (; j + 16 <= inner; j += 16) ArgColumnsBlockPd<kMax, kLast, 4>(x + j, n, inner, y + j);
  for (; j + 8 <= inner; j += 8) ArgColumnsBlockPd<kMax, kLast, 2>(x + j, n, inner, y + j);
  for (; j + 4 <= inner; j += 4) ArgColumnsBlockPd<kMax, kLast, 1>(x + j, n, inner, y + j);
  if (j < inner) ArgColumnsBlockPd<kMax, kLast, 1>(x + inner - 4, n, inner, y + inner - 4);
}
#endif

template <class S, bool kMax>
class ArgKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  ArgKernel(AxisView v, bool last) : v_(v), last_(last) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    int64_t *y = static_cast<int64_t *>(out[0]);
    int64_t o = 0;
    if (v_.inner == 1) o = ShortRows(x, y);
    for (; o < v_.outer; ++o) {
      if (v_.inner == 1) {
        if (!FastRow(x + o * v_.n, &y[o])) y[o] = OrderedColumn(x + o * v_.n, 1);
        continue;
      }
      const S *slab = x + o * v_.n * v_.inner;
      int64_t *ys = y + o * v_.inner;
      if (FastColumns(slab, ys)) continue;
      // Blocks of columns folded row by row: contiguous reads, the same comparisons as the ordered loop.
      for (int64_t j = 0; j < v_.inner; j += kBlock) {
        const int64_t w = std::min<int64_t>(kBlock, v_.inner - j);
        if (last_) FoldColumns<true>(slab + j, w, ys + j);
        else FoldColumns<false>(slab + j, w, ys + j);
      }
    }
    return true;
  }

 private:
  static constexpr int64_t kBlock = 64;

  int64_t OrderedColumn(const S *p, int64_t stride) const {
    int64_t best = 0;
    C bv = Num<S>::Load(p[0]);
    for (int64_t k = 1; k < v_.n; ++k) {
      const C cv = Num<S>::Load(p[k * stride]);
      if (Better(cv, bv) || (last_ && Same(cv, bv))) {
        bv = cv;
        best = k;
      }
    }
    return best;
  }
  template <bool kLast>
  void FoldColumns(const S *p, int64_t w, int64_t *y) const {
    C bv[kBlock];
    for (int64_t j = 0; j < w; ++j) {
      bv[j] = Num<S>::Load(p[j]);
      y[j] = 0;
    }
    for (int64_t k = 1; k < v_.n; ++k) {
      const S *row = p + k * v_.inner;
      for (int64_t j = 0; j < w; ++j) {
        const C cv = Num<S>::Load(row[j]);
        const bool take = Better(cv, bv[j]) || (kLast && Same(cv, bv[j]));
        bv[j] = take ? cv : bv[j];
        y[j] = take ? k : y[j];
      }
    }
  }
  // float32 rows along the last axis: the vectorised extremum, then where it first (or last) occurs; rows with a
  // NaN or a zero extremum take the ordered loop.
  bool FastRow([[maybe_unused]] const S *row, [[maybe_unused]] int64_t *y) const {
    if constexpr (std::is_same<S, float>::value) {
      float v;
      // short rows: a few ordered steps cost less than the two calls (3-wide rows measured 6x onnxruntime)
      if (v_.n < 8 || !RowExtremum(row, v_.n, kMax, &v)) return false;
      *y = FindValue(row, v_.n, v, last_);
      return true;
    }
    return false;
  }
  // float32 rows shorter than a vector, 8 at a time (float64: 4); returns the rows done.
  int64_t ShortRows([[maybe_unused]] const S *x, [[maybe_unused]] int64_t *y) const {
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value) {
      if (v_.n >= 8 || vmath::ActiveIsa() == vmath::Isa::kBaseline) return 0;
      const int n = static_cast<int>(v_.n);
      return last_ ? ArgShortRowsAvx2<kMax, true>(x, v_.outer, n, y) : ArgShortRowsAvx2<kMax, false>(x, v_.outer, n, y);
    }
    if constexpr (std::is_same<S, double>::value) {
      if (v_.n >= 8 || vmath::ActiveIsa() == vmath::Isa::kBaseline) return 0;
      const int n = static_cast<int>(v_.n);
      return last_ ? ArgShortRowsAvx2Pd<kMax, true>(x, v_.outer, n, y)
                   : ArgShortRowsAvx2Pd<kMax, false>(x, v_.outer, n, y);
    }
#endif
    return 0;
  }
  // float32 / float64 columns (a leading or middle axis) in AVX2 registers.
  bool FastColumns([[maybe_unused]] const S *slab, [[maybe_unused]] int64_t *y) const {
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value) {
      if (v_.inner < 8 || v_.n > std::numeric_limits<int32_t>::max() || vmath::ActiveIsa() == vmath::Isa::kBaseline) return false;
      if (last_) ArgColumnsAvx2<kMax, true>(slab, v_.n, v_.inner, y);
      else ArgColumnsAvx2<kMax, false>(slab, v_.n, v_.inner, y);
      return true;
    }
    if constexpr (std::is_same<S, double>::value) {
      if (v_.inner < 4 || vmath::ActiveIsa() == vmath::Isa::kBaseline) return false;
      if (last_) ArgColumnsAvx2Pd<kMax, true>(slab, v_.n, v_.inner, y);
      else ArgColumnsAvx2Pd<kMax, false>(slab, v_.n, v_.inner, y);
      return true;
    }
#endif
    return false;
  }
  // Ties for select_last_index; NaNs tie with each other (the reference takes the last NaN then).
  static bool Same(C cv, C bv) {
    if constexpr (kIsFloat<S>) return cv == bv || (cv != cv && bv != bv);
    return cv == bv;
  }
  // NaN wins (the first one, like numpy; the last one with select_last_index), then the larger (ArgMax) or smaller (ArgMin) value.
  static bool Better(C cv, C bv) {
    if constexpr (kIsFloat<S>) {
      if (bv != bv) return false;
      if (cv != cv) return true;
    }
    return kMax ? cv > bv : cv < bv;
  }
  AxisView v_;
  bool last_;
};

template <bool kMax>
std::unique_ptr<Kernel> PrepareArg(const KernelCtx &c, std::string *reason) {
  int64_t axis, last;
  const auto &d = c.in[0]->dims;
  if (!AxisAttr(*c.node, 0, std::max<int64_t>(d.size(), 1), &axis, reason) ||
      !AttrInt(*c.node, "select_last_index", 0, &last, reason))
    return nullptr;
  if (ViewAt(d, axis).n == 0) {
    *reason = "cannot take ArgMax/ArgMin over an empty axis";
    return nullptr;
  }
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value) k = std::make_unique<ArgKernel<S, kMax>>(ViewAt(d, axis), last != 0);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- Hardmax: 1 at the first maximum (the first NaN, like the reference's argmax) along axis, else 0 ----
// (opset < 13: over the flattened [axis:] block)

#if defined(__x86_64__)
// Hardmax of float32 rows of n >= 8 along the last axis: one pass for the maximum (and whether a NaN is present),
// a second for its first position, the row zeroed with vector stores and its one stored. The position search
// compares four vectors at a time and joins their masks, so short rows take no data-dependent branch. A row's
// last partial vector is read overlapping the one before (a max, a NaN test and a first match are unaffected).
__attribute__((target("avx2"), always_inline)) inline int64_t FirstMatch4(const float *p, __m256 m) {
  const uint32_t k0 = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p), m, _CMP_EQ_OQ)));
  const uint32_t k1 = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + 8), m, _CMP_EQ_OQ)));
  const uint32_t k2 = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + 16), m, _CMP_EQ_OQ)));
  const uint32_t k3 = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + 24), m, _CMP_EQ_OQ)));
  const uint32_t k = k0 | (k1 << 8) | (k2 << 16) | (k3 << 24);
  return k ? __builtin_ctz(k) : -1;
}
__attribute__((target("avx2"))) void HardmaxRowsAvx2(const float *x, int64_t rows, int64_t n, float *y) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
  for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
    __m256 acc[4] = {ninf, ninf, ninf, ninf}, nan = zero;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32)
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_loadu_ps(x + j + 8 * k);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        acc[k] = _mm256_max_ps(acc[k], v);
      }
    for (; j + 8 <= n; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      acc[0] = _mm256_max_ps(acc[0], v);
    }
    if (j < n) {
      const __m256 v = _mm256_loadu_ps(x + n - 8);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      acc[1] = _mm256_max_ps(acc[1], v);
    }
    int64_t best = 0;
    if (_mm256_movemask_ps(nan)) {  // the first NaN wins, as in the reference's argmax
      while (x[best] == x[best]) ++best;
    } else {
      __m256 m = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
      m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
      m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4e));
      m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xb1));  // the maximum in every lane (== finds +0 and -0 alike)
      int64_t at = -1;
      for (j = 0; at < 0 && j + 32 <= n; j += 32) at = FirstMatch4(x + j, m), best = j + at;
      for (; at < 0 && j + 8 <= n; j += 8) {
        const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), m, _CMP_EQ_OQ));
        if (k) at = __builtin_ctz(static_cast<unsigned>(k)), best = j + at;
      }
      if (at < 0) {  // in the last partial vector: the overlapped part before j holds no match
        const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + n - 8), m, _CMP_EQ_OQ));
        best = n - 8 + __builtin_ctz(static_cast<unsigned>(k));
      }
    }
    for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, zero);
    if (j < n) _mm256_storeu_ps(y + n - 8, zero);
    y[best] = 1.0f;
  }
}
#endif

template <class S>
class HardmaxKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  explicit HardmaxKernel(AxisView v) : v_(v) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    if (v_.n == 0) return true;
#if defined(__x86_64__)
    if constexpr (std::is_same<S, float>::value)
      if (v_.inner == 1 && v_.n >= 8 && vmath::ActiveIsa() != vmath::Isa::kBaseline) {
        HardmaxRowsAvx2(x, v_.outer, v_.n, y);
        return true;
      }
#endif
    const S zero = Num<S>::Store(C(0)), one = Num<S>::Store(C(1));
    std::fill(y, y + v_.outer * v_.n * v_.inner, zero);
    for (int64_t o = 0; o < v_.outer; ++o) {
      if (v_.inner == 1) {
        int64_t best;
        if (!FastRow(x + o * v_.n, &best)) best = Ordered(x + o * v_.n, 1);
        y[o * v_.n + best] = one;
        continue;
      }
      for (int64_t i = 0; i < v_.inner; ++i) {
        const int64_t base = o * v_.n * v_.inner + i;
        y[base + Ordered(x + base, v_.inner) * v_.inner] = one;
      }
    }
    return true;
  }

 private:
  // Where the reference's argmax lands: the first NaN, else the first maximum.
  int64_t Ordered(const S *p, int64_t stride) const {
    int64_t best = 0;
    C bv = Num<S>::Load(p[0]);
    for (int64_t k = 1; k < v_.n && bv == bv; ++k) {
      const C cv = Num<S>::Load(p[k * stride]);
      if (cv != cv || cv > bv) {
        bv = cv;
        best = k;
      }
    }
    return best;
  }
  // float32 rows: the vectorised maximum, then its first position; rows with a NaN or a zero maximum (which
  // signed zero comes first matters not, but RowExtremum leaves them out) take the ordered loop.
  bool FastRow([[maybe_unused]] const S *row, [[maybe_unused]] int64_t *best) const {
    if constexpr (std::is_same<S, float>::value) {
      float v;
      if (!RowExtremum(row, v_.n, true, &v)) return false;
      *best = FindValue(row, v_.n, v, false);
      return true;
    }
    return false;
  }
  AxisView v_;
};

std::unique_ptr<Kernel> PrepareHardmax(const KernelCtx &c, std::string *reason) {
  const auto &d = c.in[0]->dims;
  const int64_t r = std::max<int64_t>(d.size(), 1);
  int64_t axis;
  if (!AxisAttr(*c.node, c.opset >= 13 ? -1 : 1, r, &axis, reason)) return nullptr;
  AxisView v = ViewAt(d, axis);
  if (c.opset < 13) {  // softmax-style 2-D coercion: [prod(dims[:axis]), prod(dims[axis:])]
    v.n *= v.inner;
    v.inner = 1;
  }
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<HardmaxKernel<S>>(v);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- GatherElements / ScatterElements ----

// The kernels read data (and updates) at every position the indices' shape walks, so the shapes must fit. Dims not
// known yet (< 0) pass here; the plan infers again with the run's shapes before any kernel runs.
bool Known(int64_t a, int64_t b) { return a >= 0 && b >= 0; }

bool ElementsShapesFit(const TensorDesc &x, const TensorDesc &idx, const TensorDesc *upd, int64_t axis,
                       std::string *reason) {
  for (size_t d = 0; d < idx.dims.size() && d < x.dims.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && Known(idx.dims[d], x.dims[d]) && idx.dims[d] > x.dims[d]) {
      *reason = "indices " + DescStr(idx) + " are larger than data " + DescStr(x) + " in dim " + std::to_string(d) +
                " (only the axis dim may differ)";
      return false;
    }
  }
  if (upd == nullptr) return true;
  bool same = upd->dims.size() == idx.dims.size();
  for (size_t d = 0; same && d < idx.dims.size(); ++d)
    same = !Known(upd->dims[d], idx.dims[d]) || upd->dims[d] == idx.dims[d];
  if (!same) *reason = "updates " + DescStr(*upd) + " must have the shape of indices " + DescStr(idx);
  return same;
}

bool InferGatherElements(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &idx = *c->in[1];
  if (!IndexType(idx.dtype)) {
    *reason = "indices must be int32 or int64, got " + DescStr(idx);
    return false;
  }
  if (idx.dims.size() != x.dims.size()) {
    *reason = "indices rank " + std::to_string(idx.dims.size()) + " differs from data rank " +
              std::to_string(x.dims.size());
    return false;
  }
  int64_t axis;
  if (!AxisAttr(*c->node, 0, std::max<int64_t>(x.dims.size(), 1), &axis, reason)) return false;
  if (!ElementsShapesFit(x, idx, nullptr, axis, reason)) return false;
  c->out[0].dtype = x.dtype;
  c->out[0].dims = idx.dims;
  return true;
}

// Element offsets in a tensor of dims `data` for each position of a tensor of dims `walk`, with the axis term
// left out (added per element from the index): off[p] = sum_{d != axis} coord_d(p) * stride_data[d].
std::vector<int64_t> WalkOffsets(const Dims &walk, const Dims &data, int64_t axis) {
  const std::vector<int64_t> ds = Strides(data);
  int64_t n = 1;
  for (int64_t d : walk) n *= d;
  std::vector<int64_t> off(static_cast<size_t>(n));
  std::vector<int64_t> coord(walk.size(), 0);
  int64_t cur = 0;
  for (int64_t p = 0; p < n; ++p) {
    off[p] = cur;
    for (size_t d = walk.size(); d-- > 0;) {
      const int64_t step = static_cast<int64_t>(d) == axis ? 0 : ds[d];
      cur += step;
      if (++coord[d] < walk[d]) break;
      cur -= step * walk[d];
      coord[d] = 0;
    }
  }
  return off;
}

template <class U, class I>
class GatherElementsKernel : public Kernel {
 public:
  GatherElementsKernel(std::vector<int64_t> off, int64_t axis_n, int64_t axis_stride, AxisView walk)
      : off_(std::move(off)), n_(axis_n), stride_(axis_stride), walk_(walk) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const U *x = static_cast<const U *>(in[0]);
    const I *idx = static_cast<const I *>(in[1]);
    U *y = static_cast<U *>(out[0]);
    if (off_.empty()) return RunSameShape(x, idx, y, reason);
    for (size_t p = 0; p < off_.size(); ++p) {
      int64_t k;
      if (!NormIndex(idx[p], n_, &k, reason)) return false;
      y[p] = x[off_[p] + k * stride_];
    }
    return true;
  }

 private:
  // Indices with data's shape outside the axis: the data offset follows from [outer, t, inner] directly.
  bool RunSameShape(const U *x, const I *idx, U *y, std::string *reason) const {
    const int64_t inner = walk_.inner, block = n_ * inner, run = walk_.n * inner;
    for (int64_t o = 0; o < walk_.outer; ++o) {
      const U *xo = x + o * block;
      const I *io = idx + o * run;
      U *yo = y + o * run;
      if (inner == 1) {  // along the last axis: one run of walk_.n indices into one data row
        for (int64_t t = 0; t < walk_.n; ++t) {
          const int64_t raw = static_cast<int64_t>(io[t]);
          const int64_t k = raw < 0 ? raw + n_ : raw;
          int64_t unused;
          if (k < 0 || k >= n_) return NormIndex(raw, n_, &unused, reason);  // fails, with the message
          yo[t] = xo[k];
        }
        continue;
      }
      for (int64_t t = 0; t < walk_.n; ++t) {  // one run of `inner` indices per (outer, t)
        const I *ir = io + t * inner;
        U *yr = yo + t * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t raw = static_cast<int64_t>(ir[i]);
          const int64_t k = raw < 0 ? raw + n_ : raw;
          int64_t unused;
          if (k < 0 || k >= n_) return NormIndex(raw, n_, &unused, reason);  // fails, with the message
          yr[i] = xo[k * inner + i];
        }
      }
    }
    return true;
  }

  std::vector<int64_t> off_;  // empty: RunSameShape
  int64_t n_, stride_;
  AxisView walk_;
};

std::unique_ptr<Kernel> PrepareGatherElements(const KernelCtx &c, std::string *reason) {
  const auto &d = c.in[0]->dims;
  int64_t axis;
  if (!AxisAttr(*c.node, 0, std::max<int64_t>(d.size(), 1), &axis, reason) ||
      !ElementsShapesFit(*c.in[0], *c.in[1], nullptr, axis, reason))
    return nullptr;
  const auto &w = c.in[1]->dims;
  bool same_shape = !d.empty() && w.size() == d.size();
  for (size_t j = 0; same_shape && j < d.size(); ++j) same_shape = static_cast<int64_t>(j) == axis || w[j] == d[j];
  std::vector<int64_t> off = same_shape ? std::vector<int64_t>() : WalkOffsets(w, d, axis);
  const int64_t n = d.empty() ? 1 : d[axis], stride = d.empty() ? 1 : Strides(d)[axis];
  const AxisView walk = d.empty() ? AxisView() : ViewAt(w, axis);
  std::unique_ptr<Kernel> k;
  VisitWidth(c.in[0]->dtype, [&](auto u) {
    VisitIndex(c.in[1]->dtype, [&](auto i) {
      k = std::make_unique<GatherElementsKernel<decltype(u), decltype(i)>>(off, n, stride, walk);
    });
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

enum Reduction { kNone, kAdd, kMul, kMaxR, kMinR };

bool ReadReduction(const Node &n, Reduction *r, std::string *reason) {
  int i = 0;
  if (!AttrChoice(n, "reduction", {"none", "add", "mul", "max", "min"}, &i, reason)) return false;
  *r = static_cast<Reduction>(i);  // the enum lists the choices in this order
  return true;
}

bool CheckScatter(const Node &n, int64_t, std::string *reason) {
  Reduction r;
  return ReadReduction(n, &r, reason);
}

template <class S>
inline void Reduce(S *dst, S v, Reduction r) {
  using C = typename Num<S>::C;
  if (r == kNone) {
    *dst = v;
    return;
  }
  const C a = Num<S>::Load(*dst), b = Num<S>::Load(v);
  C out;
  if constexpr (std::is_same<C, bool>::value) {
    out = r == kAdd || r == kMaxR ? (a || b) : (a && b);
  } else {
    out = r == kAdd ? C(a + b) : r == kMul ? C(a * b) : r == kMaxR ? std::max(a, b) : std::min(a, b);
  }
  *dst = Num<S>::Store(out);
}

bool InferScatterElements(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &idx = *c->in[1], &upd = *c->in[2];
  if (!IndexType(idx.dtype)) {
    *reason = "indices must be int32 or int64, got " + DescStr(idx);
    return false;
  }
  if (upd.dtype != x.dtype || idx.dims.size() != x.dims.size()) {
    *reason = "updates must have data's dtype and indices data's rank";
    return false;
  }
  int64_t axis;
  if (!AxisAttr(*c->node, 0, std::max<int64_t>(x.dims.size(), 1), &axis, reason)) return false;
  if (!ElementsShapesFit(x, idx, &upd, axis, reason)) return false;
  c->out[0] = x;
  return true;
}

template <class S, class I>
class ScatterElementsKernel : public Kernel {
 public:
  ScatterElementsKernel(std::vector<int64_t> off, int64_t n, int64_t stride, size_t bytes, Reduction r)
      : off_(std::move(off)), n_(n), stride_(stride), bytes_(bytes), r_(r) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const I *idx = static_cast<const I *>(in[1]);
    const S *upd = static_cast<const S *>(in[2]);
    S *y = static_cast<S *>(out[0]);
    if (y != in[0]) CopyBytes(y, in[0], bytes_);
    for (size_t p = 0; p < off_.size(); ++p) {
      int64_t k;
      if (!NormIndex(idx[p], n_, &k, reason)) return false;
      Reduce(y + off_[p] + k * stride_, upd[p], r_);
    }
    return true;
  }

 private:
  std::vector<int64_t> off_;
  int64_t n_, stride_;
  size_t bytes_;
  Reduction r_;
};

std::unique_ptr<Kernel> PrepareScatterElements(const KernelCtx &c, std::string *reason) {
  const auto &d = c.in[0]->dims;
  int64_t axis;
  Reduction r;
  if (!AxisAttr(*c.node, 0, std::max<int64_t>(d.size(), 1), &axis, reason) || !ReadReduction(*c.node, &r, reason) ||
      !ElementsShapesFit(*c.in[0], *c.in[1], c.in[2], axis, reason))
    return nullptr;
  std::vector<int64_t> off = WalkOffsets(c.in[1]->dims, d, axis);
  const int64_t n = d.empty() ? 1 : d[axis], stride = d.empty() ? 1 : Strides(d)[axis];
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    VisitIndex(c.in[1]->dtype, [&](auto i) {
      k = std::make_unique<ScatterElementsKernel<decltype(tag), decltype(i)>>(off, n, stride, c.out[0].Bytes(), r);
    });
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- GatherND / ScatterND ----

bool InferGatherND(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &idx = *c->in[1];
  int64_t b;
  if (!AttrInt(*c->node, "batch_dims", 0, &b, reason)) return false;
  if (idx.dtype != ElemType::kInt64 || idx.dims.empty()) {
    *reason = "indices must be an int64 tensor of rank >= 1, got " + DescStr(idx);
    return false;
  }
  const int64_t q = static_cast<int64_t>(idx.dims.size()), r = static_cast<int64_t>(x.dims.size());
  const int64_t k = idx.dims.back();
  if (k < 0) {
    *reason = "the last dim of indices must be known";
    return false;
  }
  bool fit = b >= 0 && b < std::min(q, r) && k <= r - b;
  for (int64_t i = 0; fit && i < b; ++i) fit = !Known(idx.dims[i], x.dims[i]) || idx.dims[i] == x.dims[i];
  if (!fit) {  // the batch dims of indices and data must agree: the kernel walks them together
    *reason = "batch_dims / indices shape do not fit the data: " + DescStr(x) + ", " + DescStr(idx);
    return false;
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims.assign(idx.dims.begin(), idx.dims.end() - 1);
  for (int64_t i = b + k; i < r; ++i) c->out[0].dims.push_back(x.dims[i]);
  return true;
}

// Shared geometry: `batch` leading dims, `tuples` index tuples of length k per batch, each selecting a slice of
// `slice` elements from the data block of `block` elements of that batch.
struct NDGeometry {
  int64_t batch = 1, tuples = 1, k = 0, slice = 1, block = 1;
  std::vector<int64_t> dims, strides;  // the k indexed data dims and their element strides within a block
};

NDGeometry MakeND(const Dims &data, const Dims &idx, int64_t b) {
  NDGeometry g;
  g.k = idx.back();
  for (int64_t i = 0; i < b; ++i) g.batch *= data[i];
  for (size_t i = b; i + 1 < idx.size(); ++i) g.tuples *= idx[i];
  for (size_t i = b + g.k; i < data.size(); ++i) g.slice *= data[i];
  for (size_t i = b; i < data.size(); ++i) g.block *= data[i];
  const std::vector<int64_t> st = Strides(data);
  for (int64_t j = 0; j < g.k; ++j) {
    g.dims.push_back(data[b + j]);
    g.strides.push_back(st[b + j]);
  }
  return g;
}

bool TupleOffset(const NDGeometry &g, const int64_t *t, int64_t *off, std::string *reason) {
  *off = 0;
  for (int64_t j = 0; j < g.k; ++j) {
    int64_t v;
    if (!NormIndex(t[j], g.dims[j], &v, reason)) return false;
    *off += v * g.strides[j];
  }
  return true;
}

template <class U>
class GatherNDKernel : public Kernel {
 public:
  explicit GatherNDKernel(NDGeometry g) : g_(std::move(g)) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const U *x = static_cast<const U *>(in[0]);
    const int64_t *idx = static_cast<const int64_t *>(in[1]);
    U *y = static_cast<U *>(out[0]);
    if (g_.slice == 1) {
      switch (g_.k) {
        case 1: return ScalarSlices<1>(x, idx, y, reason);
        case 2: return ScalarSlices<2>(x, idx, y, reason);
        case 3: return ScalarSlices<3>(x, idx, y, reason);
        default: return ScalarSlices<0>(x, idx, y, reason);
      }
    }
    for (int64_t b = 0; b < g_.batch; ++b) {
      for (int64_t t = 0; t < g_.tuples; ++t) {
        int64_t off;
        if (!TupleOffset(g_, idx + (b * g_.tuples + t) * g_.k, &off, reason)) return false;
        CopyBytes(y + (b * g_.tuples + t) * g_.slice, x + b * g_.block + off, g_.slice * sizeof(U));
      }
    }
    return true;
  }

 private:
  // Scalar slices: each element moved directly, its offset from a tuple of kK indices (0: g_.k's) without a call
  // per tuple (a CopyBytes of one element each measured 1.5x onnxruntime over 131072 tuples). Offsets in unsigned
  // arithmetic: a bad index may not overflow on the way to its error, which TupleOffset words as the general loop.
  template <int kK>
  bool ScalarSlices(const U *x, const int64_t *idx, U *y, std::string *reason) const {
    const int64_t K = kK ? kK : g_.k;
    for (int64_t b = 0; b < g_.batch; ++b) {
      const U *xb = x + b * g_.block;
      const int64_t *ib = idx + b * g_.tuples * K;
      U *yb = y + b * g_.tuples;
      for (int64_t t = 0; t < g_.tuples; ++t) {
        uint64_t off = 0;
        bool ok = true;
        for (int64_t j = 0; j < K; ++j) {
          const uint64_t n = static_cast<uint64_t>(g_.dims[j]), i = static_cast<uint64_t>(ib[t * K + j]);
          const uint64_t v = ib[t * K + j] < 0 ? i + n : i;  // in [0, n) exactly when the index is
          ok &= v < n;
          off += v * static_cast<uint64_t>(g_.strides[j]);
        }
        if (!ok) {
          int64_t unused;
          TupleOffset(g_, ib + t * K, &unused, reason);
          return false;
        }
        yb[t] = xb[off];
      }
    }
    return true;
  }

  NDGeometry g_;
};

std::unique_ptr<Kernel> PrepareGatherND(const KernelCtx &c, std::string *reason) {
  int64_t b;
  if (!AttrInt(*c.node, "batch_dims", 0, &b, reason)) return nullptr;
  NDGeometry g = MakeND(c.in[0]->dims, c.in[1]->dims, b);
  std::unique_ptr<Kernel> k;
  VisitWidth(c.in[0]->dtype, [&](auto u) { k = std::make_unique<GatherNDKernel<decltype(u)>>(g); });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

bool InferScatterND(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &idx = *c->in[1];
  if (idx.dtype != ElemType::kInt64 || idx.dims.empty() || idx.dims.back() < 0 ||
      idx.dims.back() > static_cast<int64_t>(x.dims.size()) || c->in[2]->dtype != x.dtype) {
    *reason = "indices must be int64 with a last dim <= data rank, updates of data's dtype";
    return false;
  }
  // updates hold one slice per index tuple: indices.shape[:-1] + data.shape[k:]
  const TensorDesc &upd = *c->in[2];
  std::vector<int64_t> want(idx.dims.begin(), idx.dims.end() - 1);
  want.insert(want.end(), x.dims.begin() + idx.dims.back(), x.dims.end());
  bool same = upd.dims.size() == want.size();
  for (size_t d = 0; same && d < want.size(); ++d) same = !Known(upd.dims[d], want[d]) || upd.dims[d] == want[d];
  if (!same) {
    *reason = "updates " + DescStr(upd) + " must have the shape indices.shape[:-1] + data.shape[k:] for data " +
              DescStr(x) + " and indices " + DescStr(idx);
    return false;
  }
  c->out[0] = x;
  return true;
}

template <class S>
class ScatterNDKernel : public Kernel {
 public:
  ScatterNDKernel(NDGeometry g, size_t bytes, Reduction r) : g_(std::move(g)), bytes_(bytes), r_(r) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const int64_t *idx = static_cast<const int64_t *>(in[1]);
    const S *upd = static_cast<const S *>(in[2]);
    S *y = static_cast<S *>(out[0]);
    if (y != in[0]) CopyBytes(y, in[0], bytes_);
    for (int64_t t = 0; t < g_.tuples; ++t) {
      int64_t off;
      if (!TupleOffset(g_, idx + t * g_.k, &off, reason)) return false;
      for (int64_t j = 0; j < g_.slice; ++j) Reduce(y + off + j, upd[t * g_.slice + j], r_);
    }
    return true;
  }

 private:
  NDGeometry g_;
  size_t bytes_;
  Reduction r_;
};

std::unique_ptr<Kernel> PrepareScatterND(const KernelCtx &c, std::string *reason) {
  Reduction r;
  if (!ReadReduction(*c.node, &r, reason)) return nullptr;
  NDGeometry g = MakeND(c.in[0]->dims, c.in[1]->dims, 0);
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    k = std::make_unique<ScatterNDKernel<decltype(tag)>>(g, c.out[0].Bytes(), r);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- OneHot(indices, depth, values[off, on]) ----

bool InferOneHot(InferCtx *c, std::string *reason) {
  const TensorDesc &idx = *c->in[0];
  if (!IsNumericType(idx.dtype) || !IsNumericType(c->in[2]->dtype)) {
    *reason = DtypeNotSupported(idx.dtype);
    return false;
  }
  double depth;
  const ValueState st = ReadScalarInput(c, 1, &depth, reason);
  if (st == ValueState::kError) return false;
  // Checked before the conversion to int64, which is undefined for NaN and out-of-range values.
  if (st == ValueState::kKnown && !(depth >= 0 && depth <= static_cast<double>(kMaxElements))) {
    *reason = "input 'depth' is " + std::to_string(depth) + ": it must be a number of classes from 0 to 2^40";
    return false;
  }
  const int64_t r = static_cast<int64_t>(idx.dims.size());
  int64_t axis;
  if (!AxisAttr(*c->node, -1, r + 1, &axis, reason)) return false;
  c->out[0].dtype = c->in[2]->dtype;
  c->out[0].dims = idx.dims;
  c->out[0].dims.insert(c->out[0].dims.begin() + axis, st == ValueState::kKnown ? static_cast<int64_t>(depth) : -1);
  return true;
}

template <class SI, class U>
class OneHotKernel : public Kernel {
 public:
  OneHotKernel(AxisView v) : v_(v) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const SI *idx = static_cast<const SI *>(in[0]);
    const U *vals = static_cast<const U *>(in[2]);
    U *y = static_cast<U *>(out[0]);
    const U off = vals[0], on = vals[1];
    std::fill(y, y + v_.outer * v_.n * v_.inner, off);
    for (int64_t o = 0; o < v_.outer; ++o) {
      for (int64_t i = 0; i < v_.inner; ++i) {
        const auto raw = Num<SI>::Load(idx[o * v_.inner + i]);
        if constexpr (std::is_floating_point<decltype(raw)>::value)  // NaN or past +-n: no class (and no UB cast)
          if (!(raw > -static_cast<double>(v_.n) - 1 && raw < static_cast<double>(v_.n))) continue;
        int64_t k = static_cast<int64_t>(raw);
        if (k < 0) k += v_.n;
        if (k >= 0 && k < v_.n) y[(o * v_.n + k) * v_.inner + i] = on;  // out of range: all "off", like ONNX
      }
    }
    return true;
  }

 private:
  AxisView v_;
};

std::unique_ptr<Kernel> PrepareOneHot(const KernelCtx &c, std::string *reason) {
  const auto &od = c.out[0].dims;
  int64_t axis;
  if (!AxisAttr(*c.node, -1, static_cast<int64_t>(od.size()), &axis, reason)) return nullptr;
  const AxisView v = ViewAt(od, axis);
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto si) {
    using SI = decltype(si);
    if constexpr (!std::is_same<SI, Bool>::value)
      VisitWidth(c.out[0].dtype, [&](auto u) { k = std::make_unique<OneHotKernel<SI, decltype(u)>>(v); });
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- EyeLike ----

bool InferEyeLike(InferCtx *c, std::string *reason) {
  if (c->in[0]->dims.size() != 2) {
    *reason = "input must be 2-D, got " + DescStr(*c->in[0]);
    return false;
  }
  int64_t dt;
  if (!AttrInt(*c->node, "dtype", -1, &dt, reason)) return false;
  ElemType t = c->in[0]->dtype;
  if (dt >= 0 && !OnnxTypeToElemType(dt, &t)) {
    *reason = std::string("dtype ") + OnnxTypeName(dt) + " is not supported by the twin";
    return false;
  }
  c->out[0].dtype = t;
  c->out[0].dims = c->in[0]->dims;
  return true;
}

template <class S>
class EyeKernel : public Kernel {
 public:
  EyeKernel(int64_t rows, int64_t cols, int64_t k) : rows_(rows), cols_(cols), k_(k) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    S *y = static_cast<S *>(out[0]);
    using C = typename Num<S>::C;
    std::fill(y, y + rows_ * cols_, Num<S>::Store(C(0)));
    for (int64_t i = 0; i < rows_; ++i) {
      const int64_t j = i + k_;
      if (j >= 0 && j < cols_) y[i * cols_ + j] = Num<S>::Store(C(1));
    }
    return true;
  }

 private:
  int64_t rows_, cols_, k_;
};

std::unique_ptr<Kernel> PrepareEyeLike(const KernelCtx &c, std::string *reason) {
  int64_t kk;
  if (!AttrInt(*c.node, "k", 0, &kk, reason)) return nullptr;
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    k = std::make_unique<EyeKernel<decltype(tag)>>(c.out[0].dims[0], c.out[0].dims[1], kk);
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

// ---- Trilu(input, k?) over the last two dims; k is read at run time ----

bool InferTrilu(InferCtx *c, std::string *reason) {
  if (c->in[0]->dims.size() < 2) {
    *reason = "input must have rank >= 2, got " + DescStr(*c->in[0]);
    return false;
  }
  if (c->has(1) && !IndexType(c->in[1]->dtype)) {
    *reason = "k must be int64, got " + DescStr(*c->in[1]);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

template <class U>
class TriluKernel : public Kernel {
 public:
  TriluKernel(int64_t mats, int64_t rows, int64_t cols, bool upper, bool has_k)
      : mats_(mats), rows_(rows), cols_(cols), upper_(upper), has_k_(has_k) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const U *x = static_cast<const U *>(in[0]);
    U *y = static_cast<U *>(out[0]);
    const int64_t k = has_k_ ? *static_cast<const int64_t *>(in[1]) : 0;
    for (int64_t m = 0; m < mats_; ++m) {
      for (int64_t i = 0; i < rows_; ++i) {
        const U *px = x + (m * rows_ + i) * cols_;
        U *py = y + (m * rows_ + i) * cols_;
        // upper keeps j >= i + k; lower keeps j <= i + k (k clamped first: i + k must not wrap for k near 2^63)
        const int64_t kc = std::clamp<int64_t>(k, -rows_ - 1, cols_ + 1);
        const int64_t edge = std::clamp<int64_t>(upper_ ? i + kc : i + kc + 1, 0, cols_);
        // two runs per row: a copy and zeros (U is an unsigned type of the element width: zero bits are 0)
        const int64_t copy_from = upper_ ? edge : 0, copy_to = upper_ ? cols_ : edge;
        std::memset(py, 0, static_cast<size_t>(cols_) * sizeof(U));
        CopyBytes(py + copy_from, px + copy_from, static_cast<size_t>(copy_to - copy_from) * sizeof(U));
      }
    }
    return true;
  }

 private:
  int64_t mats_, rows_, cols_;
  bool upper_, has_k_;
};

std::unique_ptr<Kernel> PrepareTrilu(const KernelCtx &c, std::string *reason) {
  int64_t upper;
  if (!AttrInt(*c.node, "upper", 1, &upper, reason)) return nullptr;
  if (c.has(1) && c.in[1]->dtype != ElemType::kInt64) {
    *reason = "k must be int64";
    return nullptr;
  }
  const auto &d = c.out[0].dims;
  const int64_t rows = d[d.size() - 2], cols = d.back();
  const int64_t mats = rows * cols != 0 ? c.out[0].NumElements() / (rows * cols) : 0;
  std::unique_ptr<Kernel> k;
  VisitWidth(c.out[0].dtype, [&](auto u) {
    k = std::make_unique<TriluKernel<decltype(u)>>(mats, rows, cols, upper != 0, c.has(1));
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

// ---- CumSum / CumProd(x, axis) with exclusive / reverse; axis is read at run time ----

bool InferCum(InferCtx *c, std::string *reason) {
  if (!IsNumericType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  if (!IndexType(c->in[1]->dtype)) {
    *reason = "axis must be int32 or int64, got " + DescStr(*c->in[1]);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

// float32 CumSum over a leading or middle axis as running row sums, out = prev + x element by element: each
// position sees the reference's sequential float32 additions, and the rows stream through contiguously.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void AddRowsAvx2(const float *prev, const float *x, float *out, int64_t m) {
  int64_t i = 0;
  for (; i + 32 <= m; i += 32)
    for (int v = 0; v < 4; ++v)
      _mm256_storeu_ps(out + i + 8 * v, _mm256_add_ps(_mm256_loadu_ps(prev + i + 8 * v), _mm256_loadu_ps(x + i + 8 * v)));
  for (; i + 8 <= m; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(prev + i), _mm256_loadu_ps(x + i)));
  for (; i < m; ++i) out[i] = prev[i] + x[i];
}
#endif
void AddRows(const float *prev, const float *x, float *__restrict out, int64_t m) {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return AddRowsAvx2(prev, x, out, m);
#endif
  for (int64_t i = 0; i < m; ++i) out[i] = prev[i] + x[i];
}
#if defined(__x86_64__)
// A slab of inner <= 64 columns (a multiple of 8): the running sums of up to 4 vectors of columns stay in registers
// down all the rows (acc is y[t-1] exactly, so the same additions), instead of a call per row that reloads the row
// just stored (rows of 32 measured 1.35x onnxruntime at 64K).
template <int kVecs>
__attribute__((target("avx2"), always_inline)) inline void CumSumColumnsAvx2(const float *px, float *py, int64_t n,
                                                                             int64_t step, bool exclusive) {
  __m256 acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_loadu_ps(px + 8 * v);
  if (exclusive) {
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(py + 8 * v, _mm256_setzero_ps());
    if (n == 1) return;
    py += step;
  }
  for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(py + 8 * v, acc[v]);
  for (int64_t t = exclusive ? 2 : 1; t < n; ++t) {
    px += step;
    py += step;
    for (int v = 0; v < kVecs; ++v) {
      acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(px + 8 * v));
      _mm256_storeu_ps(py + 8 * v, acc[v]);
    }
  }
}
__attribute__((target("avx2"))) void CumSumSlabAvx2(const float *px, float *py, int64_t n, int64_t inner,
                                                    int64_t step, bool exclusive) {
  int64_t j = 0;
  for (; j + 32 <= inner; j += 32) CumSumColumnsAvx2<4>(px + j, py + j, n, step, exclusive);
  for (; j + 8 <= inner; j += 8) CumSumColumnsAvx2<1>(px + j, py + j, n, step, exclusive);
}
#endif
// One [n, inner] slab: y[0] = x[0], y[t] = y[t-1] + x[t]; exclusive: y[0] = +0, y[1] = x[0], y[t] = y[t-1] + x[t-1]
// (the first term is copied, not added to 0: a lone -0.0 stays -0.0 as in numpy's cumsum). Reverse walks the rows
// from the end.
void CumSumRows(const float *x, float *y, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  if (n == 0) return;
  const int64_t step = reverse ? -inner : inner;
  const float *px = x + (reverse ? (n - 1) * inner : 0);
  float *py = y + (reverse ? (n - 1) * inner : 0);
#if defined(__x86_64__)
  if (inner <= 64 && inner % 8 == 0 && vmath::ActiveIsa() != vmath::Isa::kBaseline)
    return CumSumSlabAvx2(px, py, n, inner, step, exclusive);
#endif
  const size_t bytes = static_cast<size_t>(inner) * sizeof(float);
  if (exclusive) {
    std::memset(py, 0, bytes);
    if (n == 1) return;
    CopyBytes(py + step, px, bytes);
    for (int64_t t = 2; t < n; ++t) AddRows(py + (t - 1) * step, px + (t - 1) * step, py + t * step, inner);
  } else {
    CopyBytes(py, px, bytes);
    for (int64_t t = 1; t < n; ++t) AddRows(py + (t - 1) * step, px + t * step, py + t * step, inner);
  }
}

// Running sums accumulate in the element type for float32 (the reference's float32 cumsum), in double for the
// other floating types, in the integer type (wrapping) otherwise.
template <class S, class I, bool kProd>
class CumKernel : public Kernel {
  using C = typename Num<S>::C;
  using Acc = std::conditional_t<std::is_same<S, float>::value, float,
                                 std::conditional_t<std::is_floating_point<C>::value, double, C>>;
  // -0.0 + v is v for every v (0.0 + -0.0 would be +0.0), so a sum starting from it returns the first term as is.
  static constexpr Acc kInit = kProd ? Acc(1) : (std::is_floating_point<Acc>::value ? Acc(-0.0) : Acc(0));

 public:
  CumKernel(std::vector<int64_t> dims, bool exclusive, bool reverse)
      : dims_(std::move(dims)), exclusive_(exclusive), reverse_(reverse) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    int64_t axis;
    const int64_t r = std::max<int64_t>(dims_.size(), 1);
    if (!NormalizeAxis(static_cast<int64_t>(*static_cast<const I *>(in[1])), r, false, &axis, reason)) return false;
    const AxisView v = ViewAt(dims_, axis);
    if (v.inner == 1) return RunLastAxis(x, y, v), true;
    if constexpr (std::is_same<S, float>::value && !kProd) {
      for (int64_t o = 0; o < v.outer; ++o)
        CumSumRows(x + o * v.n * v.inner, y + o * v.n * v.inner, v.n, v.inner, exclusive_, reverse_);
      return true;
    }
    // One accumulator per inner position, walked a whole inner row at a time: contiguous (vectorisable) reads even
    // along a leading axis, and each element still sees the same sequence of operations.
    std::vector<Acc> acc(static_cast<size_t>(v.inner));
    for (int64_t o = 0; o < v.outer; ++o) {
      std::fill(acc.begin(), acc.end(), kInit);
      for (int64_t t = 0; t < v.n; ++t) {
        const int64_t kk = reverse_ ? v.n - 1 - t : t;
        const int64_t base = (o * v.n + kk) * v.inner;
        if (exclusive_) StepRow<true>(x + base, y + base, acc.data(), v.inner, t == 0);
        else StepRow<false>(x + base, y + base, acc.data(), v.inner, false);
      }
    }
    return true;
  }

 private:
  // The exclusive scan's first output: the empty sum (+0) or product (1).
  static S Empty() { return Num<S>::Store(static_cast<C>(kProd ? 1 : 0)); }
  void RunLastAxis(const S *x, S *y, const AxisView &v) const {
    for (int64_t o = 0; o < v.outer; ++o) {
      Acc acc = kInit;
      for (int64_t t = 0; t < v.n; ++t) {
        const int64_t p = o * v.n + (reverse_ ? v.n - 1 - t : t);
        const Acc xv = static_cast<Acc>(Num<S>::Load(x[p]));
        if (exclusive_) y[p] = t == 0 ? Empty() : Num<S>::Store(static_cast<C>(acc));
        acc = kProd ? static_cast<Acc>(acc * xv) : static_cast<Acc>(acc + xv);
        if (!exclusive_) y[p] = Num<S>::Store(static_cast<C>(acc));
      }
    }
  }
  template <bool kExclusive>
  static void StepRow(const S *x, S *y, Acc *__restrict acc, int64_t n, bool first) {
    for (int64_t i = 0; i < n; ++i) {
      const Acc xv = static_cast<Acc>(Num<S>::Load(x[i]));
      if (kExclusive) y[i] = first ? Empty() : Num<S>::Store(static_cast<C>(acc[i]));
      acc[i] = kProd ? static_cast<Acc>(acc[i] * xv) : static_cast<Acc>(acc[i] + xv);
      if (!kExclusive) y[i] = Num<S>::Store(static_cast<C>(acc[i]));
    }
  }

 private:
  std::vector<int64_t> dims_;
  bool exclusive_, reverse_;
};

template <bool kProd>
std::unique_ptr<Kernel> PrepareCum(const KernelCtx &c, std::string *reason) {
  int64_t exclusive, reverse;
  if (!AttrInt(*c.node, "exclusive", 0, &exclusive, reason) || !AttrInt(*c.node, "reverse", 0, &reverse, reason))
    return nullptr;
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      VisitIndex(c.in[1]->dtype, [&](auto i) {
        k = std::make_unique<CumKernel<S, decltype(i), kProd>>(c.in[0]->dims, exclusive != 0, reverse != 0);
      });
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- Shrink ----

bool InferShrink(InferCtx *c, std::string *reason) {
  if (!IsNumericType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

template <class S>
class ShrinkKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  ShrinkKernel(int64_t n, float lambd, float bias) : n_(n), lambd_(lambd), bias_(bias) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *__restrict x = static_cast<const S *>(in[0]);
    S *__restrict y = static_cast<S *>(out[0]);
    const double l = lambd_, b = bias_;
    for (int64_t i = 0; i < n_; ++i) {
      const double v = static_cast<double>(Num<S>::Load(x[i]));
      y[i] = Num<S>::Store(static_cast<C>(v < -l ? v + b : (v > l ? v - b : 0.0)));
    }
    return true;
  }

 private:
  int64_t n_;
  float lambd_, bias_;
};

std::unique_ptr<Kernel> PrepareShrink(const KernelCtx &c, std::string *reason) {
  float lambd, bias;
  if (!AttrFloat(*c.node, "lambd", 0.5f, &lambd, reason) || !AttrFloat(*c.node, "bias", 0.f, &bias, reason))
    return nullptr;
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      k = std::make_unique<ShrinkKernel<S>>(c.out[0].NumElements(), lambd, bias);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- Dropout (inference): the output is the input and the mask all true. training_mode=true with a ratio
// above 0 needs random numbers and fails the run with a reason. ----

bool InferDropout(InferCtx *c, std::string *reason) {
  if (!IsFloatType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0] = *c->in[0];
  if (c->out.size() > 1) {
    c->out[1].dtype = ElemType::kBool;
    c->out[1].dims = c->in[0]->dims;
  }
  return true;
}

class DropoutKernel : public Kernel {
 public:
  DropoutKernel(size_t bytes, int64_t n, bool mask, bool has_ratio, bool has_training, ElemType ratio_type)
      : bytes_(bytes), n_(n), mask_(mask), has_ratio_(has_ratio), has_training_(has_training), ratio_type_(ratio_type) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const bool training = has_training_ && *static_cast<const uint8_t *>(in[2]) != 0;
    // The default ratio is 0.5.
    if (training && (!has_ratio_ || RatioOf(in[1]) > 0)) {
      *reason = "Dropout with training_mode=true and ratio > 0 is random; the twin implements inference only";
      return false;
    }
    if (out[0] != in[0]) CopyBytes(out[0], in[0], bytes_);
    if (mask_ && out[1]) std::memset(out[1], 1, static_cast<size_t>(n_));
    return true;
  }

 private:
  double RatioOf(const void *p) const {
    double r = 0;
    VisitType(ratio_type_, [&](auto tag) {
      using S = decltype(tag);
      S s;
      std::memcpy(&s, p, sizeof(S));
      r = static_cast<double>(Num<S>::Load(s));
    });
    return r;
  }
  size_t bytes_;
  int64_t n_;
  bool mask_, has_ratio_, has_training_;
  ElemType ratio_type_;
};

std::unique_ptr<Kernel> PrepareDropout(const KernelCtx &c, std::string *reason) {
  if (c.opset < 7) {
    *reason = "Dropout before opset 7 (is_test attribute) is not supported by the twin";
    return nullptr;
  }
  const ElemType rt = c.has(1) ? c.in[1]->dtype : ElemType::kFloat;
  return std::make_unique<DropoutKernel>(c.out[0].Bytes(), c.out[0].NumElements(), c.out.size() > 1, c.has(1), c.has(2), rt);
}

}  // namespace

void RegisterIndexOps(std::vector<OpDef> *ops) {
  ops->push_back({"ArgMax", 1, 1, 1, 1, nullptr, InferArg, PrepareArg<true>, true});
  ops->push_back({"ArgMin", 1, 1, 1, 1, nullptr, InferArg, PrepareArg<false>, true});
  ops->push_back({"Hardmax", 1, 1, 1, 1, nullptr, InferSameFloat, PrepareHardmax, true});
  ops->push_back({"GatherElements", 2, 2, 1, 1, nullptr, InferGatherElements, PrepareGatherElements, true});
  ops->push_back({"ScatterElements", 3, 3, 1, 1, CheckScatter, InferScatterElements, PrepareScatterElements, true});
  ops->push_back({"Scatter", 3, 3, 1, 1, CheckScatter, InferScatterElements, PrepareScatterElements, true});
  ops->push_back({"GatherND", 2, 2, 1, 1, nullptr, InferGatherND, PrepareGatherND, true});
  ops->push_back({"ScatterND", 3, 3, 1, 1, CheckScatter, InferScatterND, PrepareScatterND, true});
  ops->push_back({"OneHot", 3, 3, 1, 1, nullptr, InferOneHot, PrepareOneHot, true});
  ops->push_back({"EyeLike", 1, 1, 1, 1, nullptr, InferEyeLike, PrepareEyeLike, true});
  ops->push_back({"Trilu", 1, 2, 1, 1, nullptr, InferTrilu, PrepareTrilu, true});
  ops->push_back({"CumSum", 2, 2, 1, 1, nullptr, InferCum, PrepareCum<false>, true});
  ops->push_back({"CumProd", 2, 2, 1, 1, nullptr, InferCum, PrepareCum<true>, true});
  ops->push_back({"Shrink", 1, 1, 1, 1, nullptr, InferShrink, PrepareShrink, true});
  ops->push_back({"Dropout", 1, 3, 1, 2, nullptr, InferDropout, PrepareDropout, true});
}

}  // namespace onnx
}  // namespace twin
