// Internal helpers shared by the ONNX engine's decoder, shape inference, planner and kernels:
// size limits, checked shape arithmetic, dtype mapping, half/bfloat16 conversion, message formatting.
#pragma once

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
bool CheckedNumElements(const std::vector<int64_t> &dims, int64_t *n, std::string *reason);

// Product of dims[lo, hi): 0 if any is 0, -1 if any is unknown (< 0), kMaxElements + 1 if it exceeds
// kMaxElements (never overflows: the caller's limit check rejects it), else the product.
int64_t DimsProduct(const std::vector<int64_t> &dims, size_t lo, size_t hi);

std::string ShapeStr(const std::vector<int64_t> &dims);
std::string DescStr(const TensorDesc &d);

// ONNX TensorProto.DataType <-> ElemType. Returns false for types the twin cannot represent.
bool OnnxTypeToElemType(int64_t onnx_type, ElemType *out);
const char *OnnxTypeName(int64_t onnx_type);

// memcpy that tolerates nullptr when n == 0 (memcpy itself does not).
inline void CopyBytes(void *dst, const void *src, size_t n) {
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
