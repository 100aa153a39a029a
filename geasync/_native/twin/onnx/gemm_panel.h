// float32 GEMM against a constant op(B) packed once (LSTM's h R^T, Gemm / MatMul with a weight initializer) for few
// rows of A, on AVX-512 / AVX2: op(B) is cut into panels of PanelWidth() columns (K x width each, contiguous) so one
// panel stays in cache while every block of rows runs over it with its sums in registers. BLAS re-packs B on every
// call, which at a few dozen rows costs about as much as the product itself.
#pragma once

#include <cstdint>

namespace twin {
namespace onnx {

struct PanelGemm {
  const float *A;  // [rows, K], rows lda apart
  int64_t lda, rows, K;
  const float *pack;  // PackPanels' output for N columns
  int64_t N;          // columns of C
  float *C;
  int64_t ldc;
  float alpha = 1.0f;       // C = alpha * A op(B), plus C's previous contents when accumulate
  bool accumulate = false;  // (BLAS's beta == 1: a bias already stored in C)
};

// Columns per panel for the active instruction set; 0 where no panel kernel runs (baseline, non-x86).
int PanelWidth();

// Floats of the packed form of N columns of op(B) with K rows.
int64_t PackedSize(int64_t N, int64_t K, int width);

// pack[(p * K + k) * width + c] = op(B)[k, p * width + c] (0 past N), op(B) [K, N]: B is stored [N, K] when
// b_transposed (R of a recurrent layer, Gemm's transB), else [K, N].
void PackPanels(const float *B, bool b_transposed, int64_t N, int64_t K, int width, float *pack);

// The product for g.rows >= 0 rows with the kernel of the packing's width (PanelWidth() of the same process).
void RunPanels(const PanelGemm &g, int width);

}  // namespace onnx
}  // namespace twin
