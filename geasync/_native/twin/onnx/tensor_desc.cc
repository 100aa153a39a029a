// Element types and tensor descriptors: ElemSize/ElemTypeName/TensorDesc from engine.h plus the
// shared helpers of common.h (checked shape arithmetic, ONNX dtype mapping, fp16/bf16 conversion).
#include <cmath>
#include <limits>

#include "common.h"

namespace twin {
namespace onnx {

size_t ElemSize(ElemType t) {
  switch (t) {
    case ElemType::kFloat: return 4;
    case ElemType::kFloat16: return 2;
    case ElemType::kInt8: return 1;
    case ElemType::kInt32: return 4;
    case ElemType::kUint8: return 1;
    case ElemType::kInt16: return 2;
    case ElemType::kUint16: return 2;
    case ElemType::kUint32: return 4;
    case ElemType::kInt64: return 8;
    case ElemType::kUint64: return 8;
    case ElemType::kDouble: return 8;
    case ElemType::kBool: return 1;
    case ElemType::kBf16: return 2;
    case ElemType::kUndefined: return 0;
  }
  return 0;
}

const char *ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kFloat: return "float32";
    case ElemType::kFloat16: return "float16";
    case ElemType::kInt8: return "int8";
    case ElemType::kInt32: return "int32";
    case ElemType::kUint8: return "uint8";
    case ElemType::kInt16: return "int16";
    case ElemType::kUint16: return "uint16";
    case ElemType::kUint32: return "uint32";
    case ElemType::kInt64: return "int64";
    case ElemType::kUint64: return "uint64";
    case ElemType::kDouble: return "float64";
    case ElemType::kBool: return "bool";
    case ElemType::kBf16: return "bfloat16";
    case ElemType::kUndefined: return "undefined";
  }
  return "unknown";
}

bool TensorDesc::IsStatic() const {
  for (int64_t d : dims)
    if (d < 0) return false;
  return true;
}

// -1 also when the product would overflow: such descs are rejected before use anyway.
int64_t TensorDesc::NumElements() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d == 0) n = 0;
  }
  if (n == 0) return 0;
  for (int64_t d : dims) {
    if (n > kMaxElements / d) return -1;
    n *= d;
  }
  return n;
}

size_t TensorDesc::Bytes() const {
  int64_t n = NumElements();
  if (n < 0) return 0;
  return static_cast<size_t>(n) * ElemSize(dtype);
}

bool CheckedNumElements(const Dims &dims, int64_t *n, std::string *reason) {
  if (dims.size() > kMaxRank) {
    *reason = "rank " + std::to_string(dims.size()) + " exceeds the supported maximum of " + std::to_string(kMaxRank);
    return false;
  }
  int64_t prod = 1;
  bool unknown = false, zero = false;
  for (int64_t d : dims) {
    if (d < -1) {
      *reason = "invalid dimension " + std::to_string(d) + " in shape " + ShapeStr(dims);
      return false;
    }
    if (d == -1) unknown = true;
    if (d == 0) zero = true;
  }
  for (int64_t d : dims) {
    if (d <= 0) continue;
    if (prod > kMaxElements / d) {
      *reason = "shape " + ShapeStr(dims) + " has more than 2^40 elements";
      return false;
    }
    prod *= d;
  }
  *n = zero ? 0 : (unknown ? -1 : prod);
  return true;
}

int64_t DimsProduct(const Dims &dims, size_t lo, size_t hi) {
  int64_t p = 1;
  bool unknown = false;
  for (size_t i = lo; i < hi; ++i) {
    if (dims[i] == 0) return 0;
    if (dims[i] < 0) unknown = true;
    else if (!unknown) {
      if (p > kMaxElements / dims[i]) return kMaxElements + 1;
      p *= dims[i];
    }
  }
  return unknown ? -1 : p;
}

std::string ShapeStr(const Dims &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
  }
  return s + "]";
}

std::string DescStr(const TensorDesc &d) { return std::string(ElemTypeName(d.dtype)) + ShapeStr(d.dims); }

bool OnnxTypeToElemType(int64_t t, ElemType *out) {
  switch (t) {
    case 1: *out = ElemType::kFloat; return true;
    case 2: *out = ElemType::kUint8; return true;
    case 3: *out = ElemType::kInt8; return true;
    case 4: *out = ElemType::kUint16; return true;
    case 5: *out = ElemType::kInt16; return true;
    case 6: *out = ElemType::kInt32; return true;
    case 7: *out = ElemType::kInt64; return true;
    case 9: *out = ElemType::kBool; return true;
    case 10: *out = ElemType::kFloat16; return true;
    case 11: *out = ElemType::kDouble; return true;
    case 12: *out = ElemType::kUint32; return true;
    case 13: *out = ElemType::kUint64; return true;
    case 16: *out = ElemType::kBf16; return true;
    default: return false;
  }
}

const char *OnnxTypeName(int64_t t) {
  static const char *const kNames[] = {"UNDEFINED", "FLOAT",     "UINT8",      "INT8",          "UINT16",
                                       "INT16",     "INT32",     "INT64",      "STRING",        "BOOL",
                                       "FLOAT16",   "DOUBLE",    "UINT32",     "UINT64",        "COMPLEX64",
                                       "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                       "FLOAT8E5M2FNUZ", "UINT4", "INT4",      "FLOAT4E2M1",    "FLOAT8E8M0"};
  if (t >= 0 && t < static_cast<int64_t>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[t];
  return "unknown";
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  uint32_t exp = absx >> 23;
  if (exp < 113) {  // result is subnormal or zero
    if (exp < 102) return sign;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t bits = ((exp - 112) << 10) | ((absx >> 13) & 0x3ffu);
  uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (bits & 1u))) ++bits;
  return static_cast<uint16_t>(sign | bits);
}

float Bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

const void *EmptyTensorData() {
  alignas(64) static const unsigned char kEmpty[64] = {};
  return kEmpty;
}

}  // namespace onnx
}  // namespace twin
