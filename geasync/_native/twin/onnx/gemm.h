// GEMM used by MatMul, Gemm and Conv (im2col). With GEASYNC_HAVE_OPENBLAS (the normal build) it calls OpenBLAS
// from the scipy-openblas32 wheel; the portable cache-blocked loops remain as the fallback for shapes beyond
// OpenBLAS's 32-bit ints.
#pragma once

#include <cstdint>

namespace twin {
namespace onnx {

// C[M,N] += alpha * op(A) * op(B), all row-major and dense. op(A) is [M,K]: A is stored [M,K], or [K,M] when
// trans_a. op(B) is [K,N]: B is stored [K,N], or [N,K] when trans_b. Defined for float and double.
template <class T>
void GemmAccumulate(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, const T *B,
                    T *C);

// C = alpha * op(A) * op(B) + beta * C with explicit row strides (lda, ldb, ldc in elements). beta == 0 ignores
// C's previous contents (NaN included). Defined for float and double.
template <class T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda, const T *B,
          int64_t ldb, T beta, T *C, int64_t ldc);

// Rows of op(A) up to which float32 GEMMs run on the twin's own vector kernels (gemm_small.cc) instead of BLAS.
constexpr int64_t kSmallGemmMaxRows = 4;

// C = alpha * op(A) * op(B) + beta * C for M <= kSmallGemmMaxRows on AVX2 / AVX-512 (M, N, K > 0; beta 0 ignores C);
// false (C untouched) where it does not apply: more rows, both operands transposed, or no vector unit.
bool SmallGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

// Whether SmallGemm runs (true) for these arguments; it depends on neither N, K nor the data.
bool SmallGemmApplies(bool trans_a, bool trans_b, int64_t M);

// Threads OpenBLAS may use per call: $GEASYNC_BLAS_THREADS (clamped to [1, cores]), default 1, fixed on first use.
// The twin runs one model thread per loaded graph, so 1 never oversubscribes the machine.
int BlasThreads();

}  // namespace onnx
}  // namespace twin
