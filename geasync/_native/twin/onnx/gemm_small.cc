// float32 GEMM with few rows of op(A) (GEMV-like: an MLP at batch 1, MatMul of a [1, K] activation), where OpenBLAS
// runs 3-5x slower than one stream over B: register-blocked AVX-512 / AVX2+FMA kernels that read B once per group
// of 4 rows of C, picked with vmath's instruction-set choice. The baseline (and non-x86) build leaves these shapes to
// OpenBLAS / the portable loops.
// O3: the kernels' small fixed-size register arrays must be fully unrolled (at O2 GCC keeps them on the stack).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#endif

#include "gemm.h"
#include "vmath.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

struct SmallGemmArgs {
  int64_t M, N, K;
  float alpha, beta;
  const float *A;
  int64_t a_row, a_col;  // element (i, k) of op(A) is A[i * a_row + k * a_col]
  const float *B;
  int64_t ldb;
  bool b_transposed;  // B stored N x K (dot products), else K x N
  float *C;
  int64_t ldc;
};

#if defined(__x86_64__)
namespace avx2 {
#define TWIN_GS_TARGET __attribute__((target("avx2,fma")))
#define TWIN_GS_PRIM TWIN_GS_TARGET __attribute__((always_inline)) inline
using V = __m256;
using Mask = __m256i;
constexpr int kW = 8;
TWIN_GS_PRIM V Zero() { return _mm256_setzero_ps(); }
TWIN_GS_PRIM V Set1(float x) { return _mm256_set1_ps(x); }
TWIN_GS_PRIM V Load(const float *p) { return _mm256_loadu_ps(p); }
TWIN_GS_PRIM void Store(float *p, V v) { _mm256_storeu_ps(p, v); }
TWIN_GS_PRIM Mask MaskOf(int n) {  // the first n lanes
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
TWIN_GS_PRIM V LoadMasked(const float *p, Mask m) { return _mm256_maskload_ps(p, m); }  // other lanes 0, unread
TWIN_GS_PRIM void StoreMasked(float *p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
TWIN_GS_PRIM V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
TWIN_GS_PRIM float SumLanes(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
#include "gemm_small_body.h"
#undef TWIN_GS_PRIM
#undef TWIN_GS_TARGET
}  // namespace avx2

namespace avx512 {
#define TWIN_GS_TARGET __attribute__((target("avx512f,fma")))
#define TWIN_GS_PRIM TWIN_GS_TARGET __attribute__((always_inline)) inline
using V = __m512;
using Mask = __mmask16;
constexpr int kW = 16;
TWIN_GS_PRIM V Zero() { return _mm512_setzero_ps(); }
TWIN_GS_PRIM V Set1(float x) { return _mm512_set1_ps(x); }
TWIN_GS_PRIM V Load(const float *p) { return _mm512_loadu_ps(p); }
TWIN_GS_PRIM void Store(float *p, V v) { _mm512_storeu_ps(p, v); }
TWIN_GS_PRIM Mask MaskOf(int n) { return static_cast<Mask>(n >= 16 ? 0xffffu : (1u << n) - 1u); }
TWIN_GS_PRIM V LoadMasked(const float *p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
TWIN_GS_PRIM void StoreMasked(float *p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
TWIN_GS_PRIM V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
TWIN_GS_PRIM float SumLanes(V v) {  // (maskz extracts: GCC 12 warns about the plain ones' undefined passthrough)
  const __m512d d = _mm512_castps_pd(v);
  const __m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 0)),
                                 _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
#include "gemm_small_body.h"
#undef TWIN_GS_PRIM
#undef TWIN_GS_TARGET
}  // namespace avx512
#endif

}  // namespace

bool SmallGemmApplies(bool trans_a, bool trans_b, int64_t M) {
  if (M > kSmallGemmMaxRows || (trans_a && trans_b)) return false;
#if defined(__x86_64__)
  const vmath::Isa isa = vmath::ActiveIsa();
  return isa == vmath::Isa::kAvx512 || isa == vmath::Isa::kAvx2;
#else
  return false;
#endif
}

bool SmallGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  // Dot products load A rows as vectors: a transposed A (rare with few rows) stays with BLAS.
  if (M > kSmallGemmMaxRows || (trans_a && trans_b)) return false;
#if defined(__x86_64__)
  const SmallGemmArgs g{M, N, K, alpha, beta, A, trans_a ? 1 : lda, trans_a ? lda : 1, B, ldb, trans_b, C, ldc};
  switch (vmath::ActiveIsa()) {
    case vmath::Isa::kAvx512: avx512::RunSmallGemm(g); return true;
    case vmath::Isa::kAvx2: avx2::RunSmallGemm(g); return true;
    default: return false;
  }
#else
  (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)alpha, (void)beta, (void)N, (void)K;
  return false;
#endif
}

}  // namespace onnx
}  // namespace twin
