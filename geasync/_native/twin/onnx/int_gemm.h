// Exact int32 matrix products of 8-bit operands minus their zero points (MatMulInteger, QLinearMatMul, ConvInteger,
// QLinearConv): both operands widened to int16 while packing (|v - zp| <= 255), multiplied in int32 lanes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace twin {
namespace onnx {
namespace intgemm {

// Pairs of K: the packed layouts hold K rounded up to even, the pad being zero.
inline int64_t KPairs(int64_t K) { return (K + 1) / 2; }

// A operand: int16 rows [M][2 * KPairs(K)].
inline size_t PackedAElems(int64_t M, int64_t K) { return static_cast<size_t>(M * 2 * KPairs(K)); }
// B operand: panels of 16 columns, [ceil(N / 16)][KPairs(K)][16][2]; columns past N are zero.
inline size_t PackedBElems(int64_t K, int64_t N) { return static_cast<size_t>((N + 15) / 16 * KPairs(K) * 32); }

// Zero points as int32: nullptr for none, else zp[0] for all (per == false) or zp[row] / zp[column].
// is_signed: the source holds int8, else uint8. lda / ldb: source row strides in elements.
void PackA(bool is_signed, const void *src, int64_t lda, int64_t M, int64_t K, const int32_t *zp, bool per,
           int16_t *dst);
void PackB(bool is_signed, const void *src, int64_t ldb, int64_t K, int64_t N, const int32_t *zp, bool per,
           int16_t *dst);

// B gathered from an 8-bit image (a convolution's columns without an im2col pass): b[k][j] = src[tap[k] + pos[p0 +
// j]] - zp for j < n, packed like PackB. src must stay readable 32 bytes before its first and after its last
// gathered element (full panels are read 16 or 32 bytes at a time where pos runs in steps of 1 or 2).
void PackBGather(bool is_signed, const void *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t p0,
                 int64_t n, int32_t zp, int16_t *dst);

// c[M, N] (row stride ldc) = a b for packed operands, summed in int32 with wrap-around.
void Gemm(int64_t M, int64_t N, int64_t K, const int16_t *a, const int16_t *b, int32_t *c, int64_t ldc);

// The byte path, where QuadPath() (AVX-512 VNNI, the twin running its AVX-512 bodies): vpdpbusd multiplies four
// unsigned by four signed bytes per int32 lane, twice the int16 path's products per instruction. A is packed as
// uint8 (int8 + 128), B as int8 (uint8 - 128), each with its row / column sums; QuadGemm applies both operands'
// offsets and zero points afterwards from those sums, exactly (int32 arithmetic wraps alike). Same results as Gemm.
bool QuadPath();
inline int64_t KQuads(int64_t K) { return (K + 3) / 4; }
size_t QuadABytes(int64_t M, int64_t K);  // bytes, multiples of 64
size_t QuadBBytes(int64_t K, int64_t N);
void QuadPackA(bool is_signed, const void *src, int64_t lda, int64_t M, int64_t K, const int32_t *zp, bool per,
               uint8_t *dst);
void QuadPackB(bool is_signed, const void *src, int64_t ldb, int64_t K, int64_t N, const int32_t *zp, bool per,
               uint8_t *dst);
// B gathered from an 8-bit image in the byte layout (QuadBBytes(K, n)), as PackBGather; zp: the image's zero point.
void QuadPackBGather(bool is_signed, const void *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t p0,
                     int64_t n, int32_t zp, uint8_t *dst);
void QuadGemm(int64_t M, int64_t N, int64_t K, const uint8_t *a, const uint8_t *b, int32_t *c, int64_t ldc);

}  // namespace intgemm
}  // namespace onnx
}  // namespace twin
