// Internal helpers shared by the ONNX engine's decoder, shape inference, planner and kernels:
// size limits, checked shape arithmetic, dtype mapping, half/bfloat16 conversion, message formatting.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine.h"

namespace twin {
namespace onnx {

// Anything larger is treated as corrupt rather than attempted (protects against huge allocations).
constexpr int64_t kMaxElements = int64_t(1) << 40;
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 40;
// Kernels keep per-dim state; ranks beyond this are surely corrupt.
constexpr size_t kMaxRank = 32;

// Product of dims with overflow/limit checks. Unknown (-1) dims are skipped in the check and make *n -1.
// Returns false (with reason) for negative dims other than -1 or a product above kMaxElements.
bool CheckedNumElements(const Dims &dims, int64_t *n, std::string *reason);

// Product of dims[lo, hi): 0 if any is 0, -1 if any is unknown (< 0), kMaxElements + 1 if it exceeds
// kMaxElements (never overflows: the caller's limit check rejects it), else the product.
int64_t DimsProduct(const Dims &dims, size_t lo, size_t hi);

std::string ShapeStr(const Dims &dims);
std::string DescStr(const TensorDesc &d);

// ONNX TensorProto.DataType <-> ElemType. Returns false for types the twin cannot represent.
bool OnnxTypeToElemType(int64_t onnx_type, ElemType *out);
const char *OnnxTypeName(int64_t onnx_type);

// memcpy for kernels: tolerates nullptr when n == 0 (memcpy itself does not), and steps around glibc bug 30994.
// glibc releases without that bug's fix (Debian 12's 2.36, for one) copy from ~2 KiB up to about the L2 size with
// `rep movsb`, which AMD Zen 3 and 4 run 6-40x slower when the destination lies less than 64 bytes past the source
// modulo 4 KiB. Two malloc'd blocks of a power-of-two size sit 16 bytes past each other that way, so numpy arrays
// hit it often (measured: a 16 KiB copy 1.06 -> 6.5 us, a 256 KiB one 8 -> 90 us). Such copies go in 2 KiB pieces,
// below the size where glibc switches to `rep movsb`: memcpy moves those with its vector loop at full speed.
// The pieces call memcpy through a volatile pointer: given the constant piece size, GCC expands the call inline as
// `rep movsq`, which has the same slow case (a 64 KiB copy 16 bytes past its source: 3.1 us against 1.3 us).
inline void *(*volatile copy_piece)(void *, const void *, size_t) = std::memcpy;
inline void CopyBytes(void *dst, const void *src, size_t n) {
  constexpr size_t kPiece = 2048;
  if (n > kPiece && ((reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095) < 64) {
    char *d = static_cast<char *>(dst);
    const char *s = static_cast<const char *>(src);
    void *(*const piece)(void *, const void *, size_t) = copy_piece;
    for (; n > kPiece; n -= kPiece, d += kPiece, s += kPiece) piece(d, s, kPiece);
    piece(d, s, n);
    return;
  }
  if (n) std::memcpy(dst, src, n);
}

// Bit-exact conversions; round-to-nearest-even like numpy / ml_dtypes.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

// Non-null address for zero-byte tensors so kernels never see nullptr.
const void *EmptyTensorData();

}  // namespace onnx
}  // namespace twin
