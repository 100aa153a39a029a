// Elementwise ops: broadcasting binary arithmetic (Add, Sub, Mul, Div) and unary activations (Relu, Sigmoid,
// Tanh). Integer arithmetic wraps like numpy; integer Div truncates toward zero like the ONNX reference.
#include <cmath>
#include <type_traits>

#include "broadcast.h"
#include "op_registry.h"

namespace twin {
namespace onnx {
namespace {

// Wider unsigned type for wrapping arithmetic without signed-overflow UB or int promotion surprises.
template <class T>
using Wide = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

template <class T>
struct AddF {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    else return a + b;
  }
};
template <class T>
struct SubF {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
    else return a - b;
  }
};
template <class T>
struct MulF {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    else return a * b;
  }
};
template <class T>
struct DivF {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      if (b == 0) return 0;  // numpy gives 0 (with a warning)
      if constexpr (std::is_signed<T>::value) {
        if (b == -1) return static_cast<T>(Wide<T>(0) - static_cast<Wide<T>>(a));  // INT_MIN / -1 wraps
      }
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
};

template <class T, template <class> class Op>
class BinaryKernel : public Kernel {
 public:
  BinaryKernel(const Broadcast2 &bc) : bc_(bc), counters_(bc.dims.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    ForEachRun(bc_, static_cast<const T *>(in[0]), static_cast<const T *>(in[1]), static_cast<T *>(out[0]),
               counters_.data(), [](const T *a, const T *b, T *o, int64_t n, int64_t ia, int64_t ib) {
                 if (ia && ib) {
                   for (int64_t i = 0; i < n; ++i) o[i] = Op<T>::Apply(a[i], b[i]);
                 } else if (ia) {
                   const T bv = *b;
                   for (int64_t i = 0; i < n; ++i) o[i] = Op<T>::Apply(a[i], bv);
                 } else if (ib) {
                   const T av = *a;
                   for (int64_t i = 0; i < n; ++i) o[i] = Op<T>::Apply(av, b[i]);
                 } else {
                   const T v = Op<T>::Apply(*a, *b);
                   for (int64_t i = 0; i < n; ++i) o[i] = v;
                 }
               });
    return true;
  }

 private:
  Broadcast2 bc_;
  std::vector<int64_t> counters_;
};

bool ArithmeticType(ElemType t) {
  switch (t) {
    case ElemType::kFloat: case ElemType::kDouble: case ElemType::kInt8: case ElemType::kInt16:
    case ElemType::kInt32: case ElemType::kInt64: case ElemType::kUint8: case ElemType::kUint16:
    case ElemType::kUint32: case ElemType::kUint64:
      return true;
    default:
      return false;
  }
}

bool CheckBinary(const Node &n, int64_t opset, std::string *reason) {
  if (opset < 7 && (n.FindAttr("broadcast") || n.FindAttr("axis"))) {
    *reason = "legacy broadcasting attributes (opset < 7) are not supported by the twin";
    return false;
  }
  return true;
}

bool InferBinary(InferCtx *c, std::string *reason) {
  const TensorDesc &a = *c->in[0], &b = *c->in[1];
  if (a.dtype != b.dtype) {
    *reason = std::string("input dtypes ") + ElemTypeName(a.dtype) + " and " + ElemTypeName(b.dtype) + " differ";
    return false;
  }
  if (!ArithmeticType(a.dtype)) {
    *reason = DtypeNotSupported(a.dtype);
    return false;
  }
  c->out[0].dtype = a.dtype;
  return BroadcastShapes(a.dims, b.dims, &c->out[0].dims, reason);
}

template <template <class> class Op>
std::unique_ptr<Kernel> PrepareBinary(const KernelCtx &c, std::string *reason) {
  Broadcast2 bc;
  bc.Init(c.in[0]->dims, c.in[1]->dims, c.out[0].dims);
  switch (c.out[0].dtype) {
    case ElemType::kFloat: return std::make_unique<BinaryKernel<float, Op>>(bc);
    case ElemType::kDouble: return std::make_unique<BinaryKernel<double, Op>>(bc);
    case ElemType::kInt8: return std::make_unique<BinaryKernel<int8_t, Op>>(bc);
    case ElemType::kInt16: return std::make_unique<BinaryKernel<int16_t, Op>>(bc);
    case ElemType::kInt32: return std::make_unique<BinaryKernel<int32_t, Op>>(bc);
    case ElemType::kInt64: return std::make_unique<BinaryKernel<int64_t, Op>>(bc);
    case ElemType::kUint8: return std::make_unique<BinaryKernel<uint8_t, Op>>(bc);
    case ElemType::kUint16: return std::make_unique<BinaryKernel<uint16_t, Op>>(bc);
    case ElemType::kUint32: return std::make_unique<BinaryKernel<uint32_t, Op>>(bc);
    case ElemType::kUint64: return std::make_unique<BinaryKernel<uint64_t, Op>>(bc);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

// ---- unary ----

template <class T>
struct ReluF {
  static T Apply(T x) {
    if constexpr (std::is_floating_point<T>::value) return x > T(0) ? x : (x != x ? x : T(0));  // keep NaN
    else return x > T(0) ? x : T(0);
  }
};
template <class T>
struct SigmoidF {
  static T Apply(T x) {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);  // avoids exp overflow for very negative x
    return e / (T(1) + e);
  }
};
template <class T>
struct TanhF {
  static T Apply(T x) { return std::tanh(x); }
};

template <class T, template <class> class Op>
class UnaryKernel : public Kernel {
 public:
  explicit UnaryKernel(int64_t n) : n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    for (int64_t i = 0; i < n_; ++i) y[i] = Op<T>::Apply(x[i]);
    return true;
  }

 private:
  int64_t n_;
};

bool FloatType(ElemType t) { return t == ElemType::kFloat || t == ElemType::kDouble; }
bool SignedOrFloat(ElemType t) {
  return FloatType(t) || t == ElemType::kInt8 || t == ElemType::kInt16 || t == ElemType::kInt32 ||
         t == ElemType::kInt64;
}

template <bool (*Allowed)(ElemType)>
bool InferUnary(InferCtx *c, std::string *reason) {
  if (!Allowed(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

template <template <class> class Op>
std::unique_ptr<Kernel> PrepareUnaryFloat(const KernelCtx &c, std::string *reason) {
  int64_t n = c.out[0].NumElements();
  switch (c.out[0].dtype) {
    case ElemType::kFloat: return std::make_unique<UnaryKernel<float, Op>>(n);
    case ElemType::kDouble: return std::make_unique<UnaryKernel<double, Op>>(n);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

std::unique_ptr<Kernel> PrepareRelu(const KernelCtx &c, std::string *reason) {
  int64_t n = c.out[0].NumElements();
  switch (c.out[0].dtype) {
    case ElemType::kInt8: return std::make_unique<UnaryKernel<int8_t, ReluF>>(n);
    case ElemType::kInt16: return std::make_unique<UnaryKernel<int16_t, ReluF>>(n);
    case ElemType::kInt32: return std::make_unique<UnaryKernel<int32_t, ReluF>>(n);
    case ElemType::kInt64: return std::make_unique<UnaryKernel<int64_t, ReluF>>(n);
    default: return PrepareUnaryFloat<ReluF>(c, reason);
  }
}

}  // namespace

void RegisterElementwiseOps(std::vector<OpDef> *ops) {
  ops->push_back({"Add", 2, 2, 1, 1, CheckBinary, InferBinary, PrepareBinary<AddF>, true});
  ops->push_back({"Sub", 2, 2, 1, 1, CheckBinary, InferBinary, PrepareBinary<SubF>, true});
  ops->push_back({"Mul", 2, 2, 1, 1, CheckBinary, InferBinary, PrepareBinary<MulF>, true});
  ops->push_back({"Div", 2, 2, 1, 1, CheckBinary, InferBinary, PrepareBinary<DivF>, true});
  ops->push_back({"Relu", 1, 1, 1, 1, nullptr, InferUnary<SignedOrFloat>, PrepareRelu, true});
  ops->push_back({"Sigmoid", 1, 1, 1, 1, nullptr, InferUnary<FloatType>, PrepareUnaryFloat<SigmoidF>, true});
  ops->push_back({"Tanh", 1, 1, 1, 1, nullptr, InferUnary<FloatType>, PrepareUnaryFloat<TanhF>, true});
}

}  // namespace onnx
}  // namespace twin
