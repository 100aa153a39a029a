// Cache-blocked GEMM loops: i-k-j order with a 4-way k unroll when B rows are contiguous, blocked dot products
// when B is transposed. No allocation, no global state.
#include "gemm.h"

#include <algorithm>

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

}  // namespace

template <class T>
void GemmAccumulate(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, const T *B,
                    T *C) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  auto a_at = [&](int64_t i, int64_t k) { return trans_a ? A[k * M + i] : A[i * K + k]; };
  if (!trans_b) {
    for (int64_t j0 = 0; j0 < N; j0 += kBlockN) {
      const int64_t jn = std::min(kBlockN, N - j0);
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kend = std::min(K, k0 + kBlockK);
        for (int64_t i = 0; i < M; ++i) {
          T *__restrict c = C + i * N + j0;
          int64_t k = k0;
          for (; k + 4 <= kend; k += 4) {
            const T a0 = alpha * a_at(i, k), a1 = alpha * a_at(i, k + 1);
            const T a2 = alpha * a_at(i, k + 2), a3 = alpha * a_at(i, k + 3);
            const T *__restrict b0 = B + k * N + j0;
            const T *__restrict b1 = b0 + N;
            const T *__restrict b2 = b1 + N;
            const T *__restrict b3 = b2 + N;
            for (int64_t j = 0; j < jn; ++j) c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
          }
          for (; k < kend; ++k) {
            const T a0 = alpha * a_at(i, k);
            const T *__restrict b0 = B + k * N + j0;
            for (int64_t j = 0; j < jn; ++j) c[j] += a0 * b0[j];
          }
        }
      }
    }
    return;
  }
  if (!trans_a) {
    // Rows of A and of B are both contiguous: blocked dot products, a block of B rows reused for every row of A.
    const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 16) / K);
    for (int64_t j0 = 0; j0 < N; j0 += rows) {
      const int64_t jend = std::min(N, j0 + rows);
      for (int64_t i = 0; i < M; ++i) {
        const T *a = A + i * K;
        T *c = C + i * N;
        for (int64_t j = j0; j < jend; ++j) c[j] += alpha * Dot(a, B + j * K, K);
      }
    }
    return;
  }
  // Both transposed (rare): straightforward loops.
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[k * M + i] * B[j * K + k];
      C[i * N + j] += alpha * s;
    }
  }
}

template void GemmAccumulate<float>(bool, bool, int64_t, int64_t, int64_t, float, const float *, const float *,
                                    float *);
template void GemmAccumulate<double>(bool, bool, int64_t, int64_t, int64_t, double, const double *, const double *,
                                     double *);

}  // namespace onnx
}  // namespace twin
