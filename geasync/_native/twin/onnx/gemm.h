// Portable cache-blocked GEMM core used by MatMul and Gemm (and later Conv via im2col). A BLAS can replace
// the body of GemmAccumulate without touching the ops.
#pragma once

#include <cstdint>

namespace twin {
namespace onnx {

// C[M,N] += alpha * op(A) * op(B), all row-major and dense. op(A) is [M,K]: A is stored [M,K], or [K,M] when
// trans_a. op(B) is [K,N]: B is stored [K,N], or [N,K] when trans_b. Defined for float and double.
template <class T>
void GemmAccumulate(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, const T *B,
                    T *C);

}  // namespace onnx
}  // namespace twin
