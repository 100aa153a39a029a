// GEMM core: OpenBLAS (scipy-openblas32) when available, else cache-blocked portable loops (i-k-j order with a
// 4-way k unroll when B rows are contiguous, blocked dot products when B is transposed). No allocation.
#include "gemm.h"

#include "intra_op.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>
#include <type_traits>

#ifdef GEASYNC_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace twin {
namespace onnx {
namespace {

constexpr int64_t kBlockN = 512;  // C row segment kept in L1
constexpr int64_t kBlockK = 128;  // B panel of kBlockK x kBlockN kept in L2

template <class T>
T Dot(const T *__restrict a, const T *__restrict b, int64_t n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
    s4 += a[k + 4] * b[k + 4];
    s5 += a[k + 5] * b[k + 5];
    s6 += a[k + 6] * b[k + 6];
    s7 += a[k + 7] * b[k + 7];
  }
  for (; k < n; ++k) s0 += a[k] * b[k];
  return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

// C += alpha * op(A) op(B) with row strides.
template <class T>
void PortableGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
                  const T *B, int64_t ldb, T *C, int64_t ldc) {
  auto a_at = [&](int64_t i, int64_t k) { return trans_a ? A[k * lda + i] : A[i * lda + k]; };
  if (!trans_b) {
    for (int64_t j0 = 0; j0 < N; j0 += kBlockN) {
      const int64_t jn = std::min(kBlockN, N - j0);
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kend = std::min(K, k0 + kBlockK);
        for (int64_t i = 0; i < M; ++i) {
          T *__restrict c = C + i * ldc + j0;
          int64_t k = k0;
          for (; k + 4 <= kend; k += 4) {
            const T a0 = alpha * a_at(i, k), a1 = alpha * a_at(i, k + 1);
            const T a2 = alpha * a_at(i, k + 2), a3 = alpha * a_at(i, k + 3);
            const T *__restrict b0 = B + k * ldb + j0;
            const T *__restrict b1 = b0 + ldb;
            const T *__restrict b2 = b1 + ldb;
            const T *__restrict b3 = b2 + ldb;
            for (int64_t j = 0; j < jn; ++j) c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
          }
          for (; k < kend; ++k) {
            const T a0 = alpha * a_at(i, k);
            const T *__restrict b0 = B + k * ldb + j0;
            for (int64_t j = 0; j < jn; ++j) c[j] += a0 * b0[j];
          }
        }
      }
    }
    return;
  }
  if (!trans_a) {
    const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(K, 1));
    for (int64_t j0 = 0; j0 < N; j0 += rows) {
      const int64_t jend = std::min(N, j0 + rows);
      for (int64_t i = 0; i < M; ++i) {
        const T *a = A + i * lda;
        T *c = C + i * ldc;
        for (int64_t j = j0; j < jend; ++j) c[j] += alpha * Dot(a, B + j * ldb, K);
      }
    }
    return;
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[k * lda + i] * B[j * ldb + k];
      C[i * ldc + j] += alpha * s;
    }
  }
}

int ComputeBlasThreads() {
  const int cores = UsableCores();
  int n = 1;
  if (const char *env = std::getenv("GEASYNC_BLAS_THREADS")) {
    char *end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1) n = static_cast<int>(std::min<long>(v, cores));
  }
  return n;
}

#ifdef GEASYNC_HAVE_OPENBLAS
std::once_flag g_blas_once;

void EnsureBlasConfigured() {
  std::call_once(g_blas_once, [] { scipy_openblas_set_num_threads(BlasThreads()); });
}

bool FitsBlas(int64_t v) { return v >= 0 && v <= std::numeric_limits<int32_t>::max(); }

inline void BlasGemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                    lda, B, ldb, beta, C, ldc);
}
inline void BlasGemm(bool ta, bool tb, int M, int N, int K, double alpha, const double *A, int lda, const double *B,
                     int ldb, double beta, double *C, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                    lda, B, ldb, beta, C, ldc);
}
#endif

// A GEMM big enough to share is cut into fixed blocks of op(A)'s rows (M) or of C's columns (N), each one
// single-threaded call, run on the intra-op pool. The cut depends only on M, N, K (never on the thread count), so
// results do not depend on how many threads ran the blocks. The longer dimension is cut: each block repacks the
// other operand, which is then the smaller one.
constexpr int64_t kMaxChunks = 8;

template <class T, class Call>
bool SplitGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T *A, int64_t lda, const T *B,
               int64_t ldb, T *C, int64_t ldc, const Call &call) {
  if (BlasThreads() > 1) return false;  // the user chose OpenBLAS's own threads (GEASYNC_BLAS_THREADS)
  const int64_t macs = M * N * K;
  if (macs < kMinChunks * kMinChunkMacs) return false;
  const bool split_n = N > M;
  const int64_t dim = split_n ? N : M;
  const int64_t per_unit = macs / dim;
  int64_t block = std::max<int64_t>(kMinChunkMacs / std::max<int64_t>(per_unit, 1),  // >= ~25 us each
                                    (dim + kMaxChunks - 1) / kMaxChunks);
  block = (block + 15) / 16 * 16;
  if (block >= dim) return false;
  ParallelFor(dim, block, [&](int64_t lo, int64_t hi) {
    if (split_n) {
      call(M, hi - lo, A, trans_b ? B + lo * ldb : B + lo, C + lo);
    } else {
      call(hi - lo, N, trans_a ? A + lo : A + lo * lda, B, C + lo * ldc);
    }
  });
  return true;
}

}  // namespace

int BlasThreads() {
  static const int n = ComputeBlasThreads();
  return n;
}

template <class T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda, const T *B,
          int64_t ldb, T beta, T *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    for (int64_t i = 0; i < M; ++i) {
      T *c = C + i * ldc;
      if (beta == T(0)) std::fill(c, c + N, T(0));
      else if (beta != T(1)) for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (SmallGemmApplies(trans_a, trans_b, M)) {
      if (!SplitGemm<T>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc,
                        [&](int64_t m, int64_t n, const T *a, const T *b, T *c) {
                          SmallGemm(trans_a, trans_b, m, n, K, alpha, a, lda, b, ldb, beta, c, ldc);
                        })) {
        SmallGemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      }
      return;
    }
  }
#ifdef GEASYNC_HAVE_OPENBLAS
  if (FitsBlas(M) && FitsBlas(N) && FitsBlas(K) && FitsBlas(lda) && FitsBlas(ldb) && FitsBlas(ldc) &&
      FitsBlas(M * N) && FitsBlas(M * K) && FitsBlas(K * N)) {
    EnsureBlasConfigured();
    const int ilda = static_cast<int>(std::max<int64_t>(lda, 1)), ildb = static_cast<int>(std::max<int64_t>(ldb, 1));
    const int ildc = static_cast<int>(std::max<int64_t>(ldc, 1));
    if (SplitGemm<T>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc,
                     [&](int64_t m, int64_t n, const T *a, const T *b, T *c) {
                       BlasGemm(trans_a, trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(K), alpha,
                                a, ilda, b, ildb, beta, c, ildc);
                     })) {
      return;
    }
    BlasGemm(trans_a, trans_b, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
             static_cast<int>(std::max<int64_t>(lda, 1)), B, static_cast<int>(std::max<int64_t>(ldb, 1)), beta, C,
             static_cast<int>(std::max<int64_t>(ldc, 1)));
    return;
  }
#endif
  for (int64_t i = 0; i < M; ++i) {
    T *c = C + i * ldc;
    if (beta == T(0)) std::fill(c, c + N, T(0));
    else if (beta != T(1)) for (int64_t j = 0; j < N; ++j) c[j] *= beta;
  }
  PortableGemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc);
}

template <class T>
void GemmAccumulate(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, const T *B,
                    T *C) {
  Gemm<T>(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, T(1), C, N);
}

template void GemmAccumulate<float>(bool, bool, int64_t, int64_t, int64_t, float, const float *, const float *,
                                    float *);
template void GemmAccumulate<double>(bool, bool, int64_t, int64_t, int64_t, double, const double *, const double *,
                                     double *);
template void Gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                          float, float *, int64_t);
template void Gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double *, int64_t, const double *,
                           int64_t, double, double *, int64_t);

}  // namespace onnx
}  // namespace twin
