// Element-type plumbing shared by the kernels: storage tags for float16 / bfloat16 / bool, their compute types,
// a dtype -> tag visitor for dispatching templated kernels, and helpers for ops whose shape depends on a
// (compile-time) input value.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "op_registry.h"

namespace twin {
namespace onnx {

// Storage tags: 16-bit floats and bool are stored as bytes and computed in float / as 0-1.
struct Half {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
struct Bool {
  uint8_t v;
};

// Num<S>: compute type C of storage type S with Load/Store conversions.
template <class S>
struct Num {
  using C = S;
  static C Load(S x) { return x; }
  static S Store(C v) { return v; }
};
template <>
struct Num<Half> {
  using C = float;
  static C Load(Half x) { return HalfToFloat(x.bits); }
  static Half Store(C v) { return Half{FloatToHalf(v)}; }
};
template <>
struct Num<BF16> {
  using C = float;
  static C Load(BF16 x) { return Bf16ToFloat(x.bits); }
  static BF16 Store(C v) { return BF16{FloatToBf16(v)}; }
};
template <>
struct Num<Bool> {
  using C = bool;
  static C Load(Bool x) { return x.v != 0; }
  static Bool Store(C v) { return Bool{static_cast<uint8_t>(v ? 1 : 0)}; }
};

template <class S>
constexpr bool kIsFloat = std::is_floating_point<typename Num<S>::C>::value;
template <class S>
constexpr bool kIsInt = std::is_integral<S>::value;  // excludes Bool
template <class S>
constexpr bool kIsSigned = kIsFloat<S> || (std::is_integral<S>::value && std::is_signed<S>::value);

// Calls f(S{}) with the storage tag of t; false for types the twin cannot compute on.
template <class F>
bool VisitType(ElemType t, F &&f) {
  switch (t) {
    case ElemType::kFloat: f(float{}); return true;
    case ElemType::kDouble: f(double{}); return true;
    case ElemType::kFloat16: f(Half{}); return true;
    case ElemType::kBf16: f(BF16{}); return true;
    case ElemType::kInt8: f(int8_t{}); return true;
    case ElemType::kInt16: f(int16_t{}); return true;
    case ElemType::kInt32: f(int32_t{}); return true;
    case ElemType::kInt64: f(int64_t{}); return true;
    case ElemType::kUint8: f(uint8_t{}); return true;
    case ElemType::kUint16: f(uint16_t{}); return true;
    case ElemType::kUint32: f(uint32_t{}); return true;
    case ElemType::kUint64: f(uint64_t{}); return true;
    case ElemType::kBool: f(Bool{}); return true;
    default: return false;
  }
}

inline bool IsFloatType(ElemType t) {
  return t == ElemType::kFloat || t == ElemType::kDouble || t == ElemType::kFloat16 || t == ElemType::kBf16;
}
inline bool IsIntType(ElemType t) {
  switch (t) {
    case ElemType::kInt8: case ElemType::kInt16: case ElemType::kInt32: case ElemType::kInt64:
    case ElemType::kUint8: case ElemType::kUint16: case ElemType::kUint32: case ElemType::kUint64:
      return true;
    default:
      return false;
  }
}
inline bool IsNumericType(ElemType t) { return IsFloatType(t) || IsIntType(t); }

// Result of reading an integer tensor input that determines a shape (Reshape's shape, Slice's starts, ...).
enum class ValueState { kKnown, kUnknown, kError };

// Reads input i (int32 or int64, rank 0 or 1) as int64 values. kUnknown when its contents are not known at
// compile time: in need_static mode that is an error naming the input, and the ctx records which input was
// missing so that CompilePlan can specialise the plan on that input's runtime value.
ValueState ReadIntsInput(InferCtx *c, size_t i, std::vector<int64_t> *vals, std::string *reason);
// Integers an op takes from its input 1 since `input_opset` and from attribute `attr` before (Squeeze's axes, Split's
// split, ReduceX's axes). *present: given at all; *unknown: the input's contents are not known at compile time.
bool ReadIntsInputOrAttr(InferCtx *c, int64_t input_opset, const char *attr, std::vector<int64_t> *vals,
                         bool *present, bool *unknown, std::string *reason);
// Reads a scalar (or 1-element) input of any numeric type as double.
ValueState ReadScalarInput(InferCtx *c, size_t i, double *val, std::string *reason);
// Same as ReadIntsInput for kernels (contents are always known when a kernel needs them at prepare time).
bool KernelInts(const KernelCtx &c, size_t i, std::vector<int64_t> *vals);

// float16 <-> float32 arrays (F16C / AVX-512 where the CPU has them, else HalfToFloat / FloatToHalf per element:
// the same values either way). Defined in ops_cast.cc.
void HalfToFloatArray(const uint16_t *x, float *y, int64_t n);
void FloatToHalfArray(const float *x, uint16_t *y, int64_t n);

// y[i][j] = x[i + j * is] for a rows x cols float32 output (8x8 AVX2 blocks where the CPU has them, as Transpose
// uses). Defined in ops_shape.cc.
void TransposeFloats(const float *x, float *y, int64_t rows, int64_t cols, int64_t is);

// Prepares a float16/bfloat16 node through its float32 kernel: 16-bit inputs are widened into scratch, the float
// kernel runs, 16-bit outputs are rounded back. Inputs/outputs of other dtypes pass through unchanged.
std::unique_ptr<Kernel> PrepareViaFloat(const KernelCtx &c, PrepareFn float_prepare, std::string *reason);
// True when any input or output of the node is float16 or bfloat16.
bool HasHalfTypes(const KernelCtx &c);

// Row-major strides of dims.
std::vector<int64_t> Strides(const Dims &dims);

}  // namespace onnx
}  // namespace twin
