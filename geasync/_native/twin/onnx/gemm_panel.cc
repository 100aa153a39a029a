// Panel GEMM (see gemm_panel.h). Per instruction set: panels of 32 columns and blocks of 8 rows on AVX-512, 16 and 6
// on AVX2 (the sums of a block, 2 vectors per row, stay in registers over all of K).
// O3: the fixed-size accumulator arrays must be fully unrolled (at O2 GCC keeps them on the stack).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include "gemm_panel.h"

#include <algorithm>

#include "intra_op.h"

#include "vmath.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

#if defined(__x86_64__)
namespace avx512 {
#define TWIN_PANEL_TARGET __attribute__((target("avx512f")))
constexpr int kPanel = 32, kRows = 8;
template <int MR>
TWIN_PANEL_TARGET void PanelRows(const PanelGemm &g, int64_t i0, const float *panel, int64_t j0) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float *a = g.A + i0 * g.lda;
  for (int64_t k = 0; k < g.K; ++k) {
    const __m512 b0 = _mm512_loadu_ps(panel + k * kPanel), b1 = _mm512_loadu_ps(panel + k * kPanel + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * g.lda + k]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const int64_t n = g.N - j0 < kPanel ? g.N - j0 : kPanel;
  const __mmask16 m0 = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(n >= 32 ? 0xffffu : n <= 16 ? 0u : (1u << (n - 16)) - 1u);
  const __m512 alpha = _mm512_set1_ps(g.alpha);
  for (int r = 0; r < MR; ++r) {
    float *c = g.C + (i0 + r) * g.ldc + j0;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (g.accumulate) {
      v0 = _mm512_fmadd_ps(alpha, v0, _mm512_maskz_loadu_ps(m0, c));
      v1 = _mm512_fmadd_ps(alpha, v1, _mm512_maskz_loadu_ps(m1, c + 16));
    } else if (g.alpha != 1.0f) {
      v0 = _mm512_mul_ps(alpha, v0);
      v1 = _mm512_mul_ps(alpha, v1);
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}
TWIN_PANEL_TARGET void Run(const PanelGemm &g) {
  for (int64_t j0 = 0; j0 < g.N; j0 += kPanel) {
    const float *panel = g.pack + j0 * g.K;  // (j0 / kPanel) * K * kPanel
    int64_t i = 0;
    for (; i + kRows <= g.rows; i += kRows) PanelRows<kRows>(g, i, panel, j0);
    switch (g.rows - i) {
      case 7: PanelRows<7>(g, i, panel, j0); break;
      case 6: PanelRows<6>(g, i, panel, j0); break;
      case 5: PanelRows<5>(g, i, panel, j0); break;
      case 4: PanelRows<4>(g, i, panel, j0); break;
      case 3: PanelRows<3>(g, i, panel, j0); break;
      case 2: PanelRows<2>(g, i, panel, j0); break;
      case 1: PanelRows<1>(g, i, panel, j0); break;
      default: break;
    }
  }
}
#undef TWIN_PANEL_TARGET
}  // namespace avx512

namespace avx2 {
#define TWIN_PANEL_TARGET __attribute__((target("avx2,fma")))
constexpr int kPanel = 16, kRows = 6;
// One row of a block's sums into C (alpha, accumulate); a row ending before the panel does (n < kPanel) goes through
// a buffer. Kept out of PanelRows: with it inline GCC would not unroll the rows' loop there, and the sums would be
// written to the stack at every step of K (measured: the recurrent product of an LSTM at batch 16 ran ~2x slower).
TWIN_PANEL_TARGET __attribute__((noinline)) void StoreRowTail(const PanelGemm &g, float *c, int64_t n, __m256 v0,
                                                              __m256 v1) {
  alignas(32) float tmp[kPanel] = {};
  if (g.accumulate)
    for (int64_t q = 0; q < n; ++q) tmp[q] = c[q];
  const __m256 alpha = _mm256_set1_ps(g.alpha);
  if (g.accumulate) {
    v0 = _mm256_fmadd_ps(alpha, v0, _mm256_load_ps(tmp));
    v1 = _mm256_fmadd_ps(alpha, v1, _mm256_load_ps(tmp + 8));
  } else if (g.alpha != 1.0f) {
    v0 = _mm256_mul_ps(alpha, v0);
    v1 = _mm256_mul_ps(alpha, v1);
  }
  _mm256_store_ps(tmp, v0);
  _mm256_store_ps(tmp + 8, v1);
  for (int64_t q = 0; q < n; ++q) c[q] = tmp[q];
}
template <int MR>
TWIN_PANEL_TARGET void PanelRows(const PanelGemm &g, int64_t i0, const float *panel, int64_t j0) {
  __m256 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int64_t K = g.K, lda = g.lda;
  const float *a = g.A + i0 * lda;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(panel + k * kPanel), b1 = _mm256_loadu_ps(panel + k * kPanel + 8);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const int64_t n = g.N - j0 < kPanel ? g.N - j0 : kPanel;
  const __m256 alpha = _mm256_set1_ps(g.alpha);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float *c = g.C + (i0 + r) * g.ldc + j0;
    __m256 v0 = acc[r][0], v1 = acc[r][1];
    if (n < kPanel) {
      StoreRowTail(g, c, n, v0, v1);
      continue;
    }
    if (g.accumulate) {
      v0 = _mm256_fmadd_ps(alpha, v0, _mm256_loadu_ps(c));
      v1 = _mm256_fmadd_ps(alpha, v1, _mm256_loadu_ps(c + 8));
    } else if (g.alpha != 1.0f) {
      v0 = _mm256_mul_ps(alpha, v0);
      v1 = _mm256_mul_ps(alpha, v1);
    }
    _mm256_storeu_ps(c, v0);
    _mm256_storeu_ps(c + 8, v1);
  }
}
TWIN_PANEL_TARGET void Run(const PanelGemm &g) {
  for (int64_t j0 = 0; j0 < g.N; j0 += kPanel) {
    const float *panel = g.pack + j0 * g.K;
    int64_t i = 0;
    for (; i + kRows <= g.rows; i += kRows) PanelRows<kRows>(g, i, panel, j0);
    switch (g.rows - i) {
      case 5: PanelRows<5>(g, i, panel, j0); break;
      case 4: PanelRows<4>(g, i, panel, j0); break;
      case 3: PanelRows<3>(g, i, panel, j0); break;
      case 2: PanelRows<2>(g, i, panel, j0); break;
      case 1: PanelRows<1>(g, i, panel, j0); break;
      default: break;
    }
  }
}
#undef TWIN_PANEL_TARGET
}  // namespace avx2
#endif

}  // namespace

int PanelWidth() {
#if defined(__x86_64__)
  switch (vmath::ActiveIsa()) {
    case vmath::Isa::kAvx512: return avx512::kPanel;
    case vmath::Isa::kAvx2: return avx2::kPanel;
    default: break;
  }
#endif
  return 0;
}

int64_t PackedSize(int64_t N, int64_t K, int width) { return (N + width - 1) / width * width * K; }

void PackPanels(const float *B, bool b_transposed, int64_t N, int64_t K, int width, float *pack) {
  for (int64_t j0 = 0; j0 < N; j0 += width)
    for (int64_t k = 0; k < K; ++k) {
      float *dst = pack + j0 * K + k * width;
      for (int c = 0; c < width; ++c) {
        const int64_t j = j0 + c;
        dst[c] = j >= N ? 0.0f : b_transposed ? B[j * K + k] : B[k * N + j];
      }
    }
}

namespace {
void RunPanelsSerial(const PanelGemm &g, int width) {
#if defined(__x86_64__)
  if (width == avx512::kPanel) return avx512::Run(g);
  if (width == avx2::kPanel) return avx2::Run(g);
#endif
  (void)g, (void)width;
}
}  // namespace

void RunPanels(const PanelGemm &g, int width) {
  if (width <= 0 || g.rows <= 0 || g.N <= 0) return;
  // Split over fixed blocks of panels (by size only, so results do not depend on the thread count): each thread
  // streams its own part of the packed B, the cost at few rows. Blocks of at least kMinChunkMacs, at most 8.
  const int64_t panels = (g.N + width - 1) / width;
  const int64_t per_panel = std::max<int64_t>(1, g.rows * g.K * width);
  const int64_t grain = std::max<int64_t>(kMinChunkMacs / per_panel, (panels + 7) / 8);
  const auto part = [&](int64_t b, int64_t e) {
    PanelGemm s = g;
    s.pack = g.pack + b * g.K * width;
    s.C = g.C + b * width;
    s.N = std::min(g.N, e * width) - b * width;
    RunPanelsSerial(s, width);
  };
  // Smaller products (an MLP's layers at batch 1: tens of microseconds) only with a helper already spinning.
  if (ChunksOf(panels, std::max<int64_t>(grain, 1)) < kMinChunks) {
    return ParallelForWhenHelperSpins(panels, std::max<int64_t>({kHotChunkMacs / per_panel, (panels + 7) / 8, 1}),
                                      part);
  }
  ParallelForAnyCut(panels, std::max<int64_t>(grain, 1), part);
}

}  // namespace onnx
}  // namespace twin
