// Winograd F(2x2, 3x3) convolution for float32 Conv with a 3x3 kernel, stride 1, dilation 1, one group: 2.25x
// fewer multiplications than the direct kernel, spent in 16 GEMMs [M x C] x [C x tiles] through gemm.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace twin {
namespace onnx {

// One image stack: X [N][C][H][W] -> Y [N][M][OH][OW], pads top/left pt/pl (bottom/right follow from OH/OW).
struct WinogradShape {
  int64_t N, C, M, H, W, OH, OW, pt, pl;
};

// Multiply-adds per chunk when ONE image's convolution is split over the intra-op pool (the direct kernel's channel
// blocks, Winograd's tile blocks; at batch > 1 images are split in chunks of kMinChunkMacs): ~100 us of one core.
// With ~1M, convs of 4-13M multiply-adds were split too and got slower (a CNN on 32x32 images 316 -> 376-391 us,
// MobileNet-like 64x56 2.2 -> 2.5-2.7 ms: chunks of tens of microseconds, close to what sharing them costs); with
// this size ResNet-like models at batch 1 went from 37 to 24.5-25 ms (64x56) and 39-40 to 27-30 ms (3x224) on two
// cores.
constexpr int64_t kOneImageChunkMacs = int64_t(4) << 20;

// Whether it beats the direct kernel at this shape (channels and tiles; measured on AVX2, see conv_winograd.cc).
bool WinogradConvPays(const WinogradShape &s);

// Floats of the transformed filter: [16][M][C].
size_t WinogradFilterFloats(int64_t C, int64_t M);

// u = G g G^T for every (m, c): w is the ONNX weight [M][C][3][3], u is [16][M][C].
void WinogradTransformFilter(const float *w, int64_t M, int64_t C, float *u);

// Scratch Run needs (64-byte aligned by the caller).
size_t WinogradScratchBytes(const WinogradShape &s);

// Y = conv(X) + bias (bias may be null), then max(., 0) when relu. False when any pre-activation output is not
// finite: Winograd's transforms turn inf into NaN (inf - inf) where a direct sum keeps inf, so the caller recomputes
// that run on its direct path (Y's contents are then unspecified).
bool WinogradConv(const WinogradShape &s, const float *x, const float *u, const float *bias, bool relu, float *y,
                  void *scratch, bool use_avx2);

}  // namespace onnx
}  // namespace twin
