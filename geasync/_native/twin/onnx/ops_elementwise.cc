// Elementwise ops. Broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow), variadic Max/Min, comparisons
// (Equal, Less, Greater -> bool), logic (And, Or, Not), Where, Clip and the unary math/activation family
// (Sqrt, Exp, Log, trigonometric and hyperbolic functions, rounding, Sign, IsNaN/IsInf, Relu and its relatives,
// Sigmoid, Tanh, Gelu, ...); float32 Exp/Log/Tanh/Erf/Sigmoid/Sqrt/Gelu/Sin/Cos run the vectorised kernels of vmath.h.
// float16/bfloat16 are computed in float and rounded once per op, like numpy. Integer arithmetic wraps like
// numpy; integer Div truncates toward zero like the ONNX reference (x / 0 gives 0).
// Kernel loops: -O3 vectorisation (beyond -O2's very-cheap cost model) and no FP-trap semantics, so that
// selects and divisions in them can be if-converted. Before the includes, so inline helpers get it too.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "broadcast.h"
#include "elem.h"
#include "intra_op.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

// Element-wise kernels over more than this many elements split them into blocks of this many for the intra-op
// pool (every block a whole number of vectors, so the cut does not change a result): 32K elements of unary math is
// tens of microseconds of work, well above a helper's hand-off; binary arithmetic is about memory bandwidth, and
// takes twice as many.
constexpr int64_t kElemGrain = int64_t(1) << 15;
constexpr int64_t kArithGrain = int64_t(1) << 16;

// Wider unsigned type for wrapping arithmetic without signed-overflow UB or int promotion surprises.
template <class T>
using Wide = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

template <class T>
T WrapAdd(T a, T b) { return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b)); }
template <class T>
T WrapSub(T a, T b) { return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b)); }
template <class T>
T WrapMul(T a, T b) { return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b)); }

// ---- binary functors on compute types ----

struct AddF {
  template <class C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral<C>::value) return WrapAdd(a, b);
    else return a + b;
  }
};
struct SubF {
  template <class C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral<C>::value) return WrapSub(a, b);
    else return a - b;
  }
};
struct MulF {
  template <class C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral<C>::value) return WrapMul(a, b);
    else return a * b;
  }
};
struct DivF {
  template <class C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      if (b == 0) return 0;  // numpy gives 0 (with a warning)
      if constexpr (std::is_signed<C>::value) {
        if (b == -1) return static_cast<C>(Wide<C>(0) - static_cast<Wide<C>>(a));  // INT_MIN / -1 wraps
      }
      // 32-bit and narrower: the double quotient truncated is exact (|a|, |b| < 2^32: a non-integer quotient lies
      // at least 1/|b| from an integer, far more than its rounding error), and divides in vector lanes where the
      // integer division does not
      if constexpr (sizeof(C) <= 4) return static_cast<C>(static_cast<double>(a) / static_cast<double>(b));
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};
// Max / Min: a NaN operand wins (a's first), else the larger / smaller, a on ties. Written as selects without
// early returns so that the loops vectorise: a NaN a already falls out of the comparison (it is false).
struct MaxF {
  template <class C>
  static C Apply(C a, C b) {
    const C r = a < b ? b : a;
    if constexpr (std::is_floating_point<C>::value) return (b != b && a == a) ? b : r;
    return r;
  }
};
struct MinF {
  template <class C>
  static C Apply(C a, C b) {
    const C r = b < a ? b : a;
    if constexpr (std::is_floating_point<C>::value) return (b != b && a == a) ? b : r;
    return r;
  }
};

// Loops over the broadcast of two operands: o = f(a, b) on storage values.
template <class SA, class SB, class SO, class F>
void BinaryLoop(const BroadcastN &bc, int64_t *ctr, const SA *a, const SB *b, SO *o, F f) {
  const int64_t ia = bc.strides[0].back(), ib = bc.strides[1].back();
  ForEachRunN(bc, ctr, [&](const int64_t *off, int64_t oo, int64_t n) {
    const SA *pa = a + off[0];  // (no __restrict: o may share a's or b's buffer, see ArithKernel)
    const SB *pb = b + off[1];
    SO *po = o + oo;
    if (ia && ib) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (ia) {
      const SB bv = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], bv);
    } else if (ib) {
      const SA av = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(av, pb[i]);
    } else {
      const SO v = f(*pa, *pb);
      for (int64_t i = 0; i < n; ++i) po[i] = v;
    }
  });
}

// Same as BinaryLoop but o may alias a exactly (a has o's shape): used by variadic Max/Min.
template <class S, class F>
void InPlaceLoop(const BroadcastN &bc, int64_t *ctr, S *o, const S *b, F f) {
  const int64_t ib = bc.strides[1].back();
  ForEachRunN(bc, ctr, [&](const int64_t *off, int64_t oo, int64_t n) {
    const S *pb = b + off[1];
    S *po = o + oo;
    if (ib) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(po[i], pb[i]);
    } else {
      const S bv = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(po[i], bv);
    }
  });
}

BroadcastN MakeBc(std::initializer_list<const Dims *> ins, const Dims &out) {
  BroadcastN bc;
  bc.Init(ins, out);
  return bc;
}

// One innermost run of o = Op(a, b) on a type computed as stored (ia / ib: 1, or 0 for a broadcast operand), compiled
// per instruction set like NativeLoop (int32 / int64 multiplies and 64-bit selects need SSE4.1 / AVX-512 to run in
// vector lanes). o may be a or b (no __restrict): element i is read just before o[i] is written.
template <class T, class Op>
void ArithRun(const T *a, const T *b, T *o, int64_t n, int64_t ia, int64_t ib) {
  if (ia && ib) {
    for (int64_t i = 0; i < n; ++i) o[i] = Op::Apply(a[i], b[i]);
  } else if (ia) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = Op::Apply(a[i], bv);
  } else if (ib) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = Op::Apply(av, b[i]);
  } else {
    const T v = Op::Apply(*a, *b);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}
#if defined(__x86_64__)
template <class T, class Op>
__attribute__((target("avx512f,avx512dq"))) void ArithRunAvx512(const T *a, const T *b, T *o, int64_t n, int64_t ia,
                                                                 int64_t ib) {
  ArithRun<T, Op>(a, b, o, n, ia, ib);
}
template <class T, class Op>
__attribute__((target("avx2,fma"))) void ArithRunAvx2(const T *a, const T *b, T *o, int64_t n, int64_t ia,
                                                      int64_t ib) {
  ArithRun<T, Op>(a, b, o, n, ia, ib);
}
#endif

// Arithmetic: out type == in type.
template <class S, class Op>
class ArithKernel : public Kernel {
  // types computed as stored (float32 too: 16 lanes, and its loops no longer sit in the baseline build's layout)
  static constexpr bool kPerIsa = std::is_same<S, typename Num<S>::C>::value;

 public:
  ArithKernel(BroadcastN bc, std::array<bool, 2> full) : bc_(std::move(bc)), ctr_(bc_.dims.size()), full_(full) {
    if constexpr (kPerIsa) {
#if defined(__x86_64__)
      if (vmath::ActiveIsa() == vmath::Isa::kAvx512) run_ = ArithRunAvx512<S, Op>;
      else if (vmath::ActiveIsa() == vmath::Isa::kAvx2) run_ = ArithRunAvx2<S, Op>;
#endif
    }
  }
  bool InPlaceOver(size_t i) const override { return i < 2 && full_[i]; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *a = static_cast<const S *>(in[0]);
    const S *b = static_cast<const S *>(in[1]);
    const S *bp = b;  // (the blocks' b is their begin)
    S *o = static_cast<S *>(out[0]);
    if (run_) {
      const int64_t ia = bc_.strides[0].back(), ib = bc_.strides[1].back();
      if (bc_.total > kArithGrain && bc_.dims.size() == 1) {  // one run (same shapes, or a scalar operand): blocks
        ParallelForAnyCut(bc_.total, kArithGrain,
                    [&](int64_t b, int64_t e) { run_(a + b * ia, bp + b * ib, o + b, e - b, ia, ib); });
        return true;
      }
      if (bc_.total > kArithGrain && bc_.dims.size() == 2) {  // rows (a bias over the last axis): blocks of rows
        const int64_t inner = bc_.dims[1], sa = bc_.strides[0][0], sb = bc_.strides[1][0];
        ParallelForAnyCut(bc_.dims[0], std::max<int64_t>(1, kArithGrain / std::max<int64_t>(inner, 1)),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) run_(a + r * sa, b + r * sb, o + r * inner, inner, ia, ib);
                    });
        return true;
      }
      ForEachRunN(bc_, ctr_.data(), [&](const int64_t *off, int64_t oo, int64_t n) {
        run_(a + off[0], b + off[1], o + oo, n, ia, ib);
      });
      return true;
    }
    BinaryLoop(bc_, ctr_.data(), a, b, o,
               [](S x, S y) { return Num<S>::Store(Op::Apply(Num<S>::Load(x), Num<S>::Load(y))); });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
  std::array<bool, 2> full_;  // per input, has the output's shape and type: BinaryLoop reads its element i just
                              // before writing o[i]
  void (*run_)(const S *, const S *, S *, int64_t, int64_t, int64_t) = nullptr;
};

bool SameTypes(const InferCtx &c, size_t from, size_t to, std::string *reason) {
  for (size_t i = from + 1; i < to; ++i) {
    if (!c.has(i) || !c.has(from)) continue;
    if (c.in[i]->dtype != c.in[from]->dtype) {
      *reason = std::string("input dtypes ") + ElemTypeName(c.in[from]->dtype) + " and " +
                ElemTypeName(c.in[i]->dtype) + " differ";
      return false;
    }
  }
  return true;
}

bool CheckBinary(const Node &n, int64_t opset, std::string *reason) {
  if (opset < 7 && (n.FindAttr("broadcast") || n.FindAttr("axis"))) {
    *reason = "legacy broadcasting attributes (opset < 7) are not supported by the twin";
    return false;
  }
  return true;
}

template <bool (*Allowed)(ElemType)>
bool InferBroadcast(InferCtx *c, std::string *reason) {
  if (!SameTypes(*c, 0, c->in.size(), reason)) return false;
  if (!Allowed(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  std::vector<int64_t> dims = c->in[0]->dims;
  for (size_t i = 1; i < c->in.size(); ++i)
    if (!BroadcastShapes(dims, c->in[i]->dims, &dims, reason)) return false;
  c->out[0].dtype = c->in[0]->dtype;
  c->out[0].dims = std::move(dims);
  return true;
}

template <class Op>
std::unique_ptr<Kernel> PrepareArith(const KernelCtx &c, std::string *reason) {
  // float16 / bfloat16: widened to float32 (vector conversions), the float32 kernel, rounded back once
  if (HasHalfTypes(c)) return PrepareViaFloat(c, PrepareArith<Op>, reason);
  BroadcastN bc = MakeBc({&c.in[0]->dims, &c.in[1]->dims}, c.out[0].dims);
  std::array<bool, 2> full{};
  for (size_t i = 0; i < 2; ++i) full[i] = c.in[i]->dtype == c.out[0].dtype && c.in[i]->dims == c.out[0].dims;
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value) k = std::make_unique<ArithKernel<S, Op>>(bc, full);
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

// ---- Pow: base T, exponent T1 (may differ), result T ----

template <class T>
T IntPow(T base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed<T>::value) {
      if (base == -1) return (e & 1) ? T(-1) : T(1);
    }
    return 0;  // integer 1 / base^|e| truncates to 0
  }
  T r = 1;
  while (e) {
    if (e & 1) r = WrapMul(r, base);
    base = WrapMul(base, base);
    e >>= 1;
  }
  return r;
}

template <class T>
T FromDouble(double v) {
  if constexpr (std::is_floating_point<T>::value) {
    return static_cast<T>(v);
  } else {  // numpy-like truncation, saturating instead of UB for NaN / out of range
    if (!(v == v)) return 0;
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    return static_cast<T>(v);
  }
}

template <class SA, class SB>
class PowKernel : public Kernel {
 public:
  explicit PowKernel(BroadcastN bc) : bc_(std::move(bc)), ctr_(bc_.dims.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    using CA = typename Num<SA>::C;
    using CB = typename Num<SB>::C;
    BinaryLoop(bc_, ctr_.data(), static_cast<const SA *>(in[0]), static_cast<const SB *>(in[1]),
               static_cast<SA *>(out[0]), [](SA sa, SB sb) {
                 const CA a = Num<SA>::Load(sa);
                 const CB b = Num<SB>::Load(sb);
                 if constexpr (std::is_integral<CA>::value && std::is_integral<CB>::value) {
                   int64_t e;
                   if constexpr (std::is_unsigned<CB>::value)
                     e = b > static_cast<CB>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                                 : static_cast<int64_t>(b);
                   else
                     e = static_cast<int64_t>(b);
                   return Num<SA>::Store(IntPow<CA>(a, e));
                 } else if constexpr (std::is_same<CA, float>::value && std::is_same<CB, float>::value) {
                   return Num<SA>::Store(std::pow(a, b));
                 } else {
                   return Num<SA>::Store(FromDouble<CA>(std::pow(static_cast<double>(a), static_cast<double>(b))));
                 }
               });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
};

// float64 sqrt of an array with the instructions (GCC keeps a libm call per element for errno, like vmath's float32
// SqrtArray explains): correctly rounded, NaN for negative inputs, -0 for -0, like std::sqrt.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void SqrtDoubleAvx512(const double *x, double *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm512_storeu_pd(y + i, _mm512_maskz_sqrt_pd(0xff, _mm512_loadu_pd(x + i)));
  for (; i < n; ++i) _mm_store_sd(y + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
__attribute__((target("avx2"))) void SqrtDoubleAvx2(const double *x, double *y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
  for (; i < n; ++i) _mm_store_sd(y + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
void SqrtDoubleArray(const double *x, double *y, int64_t n) {
  switch (vmath::ActiveIsa()) {
    case vmath::Isa::kAvx512: return SqrtDoubleAvx512(x, y, n);
    case vmath::Isa::kAvx2: return SqrtDoubleAvx2(x, y, n);
    default: break;
  }
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(y + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
  for (; i < n; ++i) _mm_store_sd(y + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
#else
void SqrtDoubleArray(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
}
#endif

// float32 / float64 base with a constant scalar exponent of 0, 1, 2, 3, 0.5 or -1 (any exponent dtype): one
// vectorised pass instead of a pow call per element (numpy's power and onnxruntime have the same special cases).
// x^2 and 1/x are rounded once like pow; x^3 twice (within an ulp of pow). x^0.5 is sqrt, as numpy's float32 /
// float64 power (the reference) and onnxruntime compute it: -0 for -0 and NaN for -inf (C's pow: +0 and +inf); for
// float16 ** float16 numpy computes pow, so that pair (computed in float32) keeps pow's values (kSqrtPow).
enum class PowMode { kOne, kIdentity, kSquare, kCube, kSqrt, kSqrtPow, kReciprocal };

template <class T>
void PowScalarLoop(const T *x, T *y, int64_t n, PowMode m) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  switch (m) {
    case PowMode::kOne: for (int64_t i = 0; i < n; ++i) y[i] = T(1); break;
    case PowMode::kIdentity: if (x != y) std::memmove(y, x, static_cast<size_t>(n) * sizeof(T)); break;
    case PowMode::kSquare: for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i]; break;
    case PowMode::kCube: for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i]; break;
    case PowMode::kSqrt:  // (the sqrt instructions: a loop of std::sqrt keeps a libm call per element for errno)
      if constexpr (std::is_same<T, float>::value) vmath::SqrtArray(x, y, n);
      else SqrtDoubleArray(x, y, n);
      break;
    case PowMode::kSqrtPow:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] == -kInf ? kInf : std::sqrt(x[i]) + T(0);
      break;
    case PowMode::kReciprocal: for (int64_t i = 0; i < n; ++i) y[i] = T(1) / x[i]; break;
  }
}
#if defined(__x86_64__)
template <class T>
__attribute__((target("avx512f,avx512dq"))) void PowScalarAvx512(const T *x, T *y, int64_t n, PowMode m) {
  PowScalarLoop(x, y, n, m);
}
template <class T>
__attribute__((target("avx2,fma"))) void PowScalarAvx2(const T *x, T *y, int64_t n, PowMode m) {
  PowScalarLoop(x, y, n, m);
}
#endif

template <class T>
class PowScalarKernel : public Kernel {
 public:
  PowScalarKernel(int64_t n, PowMode m) : n_(n), m_(m) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
#if defined(__x86_64__)
    switch (vmath::ActiveIsa()) {
      case vmath::Isa::kAvx512: PowScalarAvx512(x, y, n_, m_); return true;
      case vmath::Isa::kAvx2: PowScalarAvx2(x, y, n_, m_); return true;
      default: break;
    }
#endif
    PowScalarLoop(x, y, n_, m_);
    return true;
  }

 private:
  int64_t n_;
  PowMode m_;
};

std::unique_ptr<Kernel> PreparePowScalar(const KernelCtx &c, bool half_base) {
  const ElemType t = c.in[0]->dtype;
  if ((t != ElemType::kFloat && t != ElemType::kDouble) || !c.in_data[1] || c.in[1]->NumElements() != 1 ||
      c.out[0].dims != c.in[0]->dims)
    return nullptr;
  double e = 0;
  bool known = false;
  VisitType(c.in[1]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value) {
      e = static_cast<double>(Num<S>::Load(*static_cast<const S *>(c.in_data[1])));
      known = true;
    }
  });
  if (!known) return nullptr;
  PowMode m;
  if (e == 0) m = PowMode::kOne;
  else if (e == 1) m = PowMode::kIdentity;
  else if (e == 2) m = PowMode::kSquare;
  else if (e == 3) m = PowMode::kCube;
  else if (e == 0.5) m = half_base ? PowMode::kSqrtPow : PowMode::kSqrt;
  else if (e == -1) m = PowMode::kReciprocal;
  else return nullptr;
  const int64_t n = c.out[0].NumElements();
  if (t == ElemType::kFloat) return std::make_unique<PowScalarKernel<float>>(n, m);
  return std::make_unique<PowScalarKernel<double>>(n, m);
}

bool PowBaseType(ElemType t) {
  return IsFloatType(t) || t == ElemType::kInt32 || t == ElemType::kInt64;
}

bool InferPow(InferCtx *c, std::string *reason) {
  const TensorDesc &a = *c->in[0], &b = *c->in[1];
  if (!PowBaseType(a.dtype)) {
    *reason = DtypeNotSupported(a.dtype, "base");
    return false;
  }
  if (!IsNumericType(b.dtype)) {
    *reason = DtypeNotSupported(b.dtype, "exponent");
    return false;
  }
  c->out[0].dtype = a.dtype;
  return BroadcastShapes(a.dims, b.dims, &c->out[0].dims, reason);
}

template <bool kHalfBase = false>
std::unique_ptr<Kernel> PreparePow(const KernelCtx &c, std::string *reason) {
  if (HasHalfTypes(c)) {
    // (numpy computes float16 ** float16 in float16, by pow; a wider exponent promotes it to float32 / float64)
    const bool half_pow = (c.in[0]->dtype == ElemType::kFloat16 || c.in[0]->dtype == ElemType::kBf16) &&
                          c.in[1]->dtype == c.in[0]->dtype;
    return PrepareViaFloat(c, half_pow ? PreparePow<true> : PreparePow<false>, reason);
  }
  if (std::unique_ptr<Kernel> k = PreparePowScalar(c, kHalfBase)) return k;
  BroadcastN bc = MakeBc({&c.in[0]->dims, &c.in[1]->dims}, c.out[0].dims);
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto ta) {
    using SA = decltype(ta);
    if constexpr (!std::is_same<SA, Bool>::value) {
      VisitType(c.in[1]->dtype, [&](auto tb) {
        using SB = decltype(tb);
        if constexpr (!std::is_same<SB, Bool>::value) k = std::make_unique<PowKernel<SA, SB>>(bc);
      });
    }
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- variadic Max / Min ----

template <class S, class Op>
class VariadicKernel : public Kernel {
 public:
  VariadicKernel(std::vector<BroadcastN> bcs, size_t rank, size_t inputs)
      : bcs_(std::move(bcs)), ctr_(std::max<size_t>(rank, 1)), inputs_(inputs) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    S *o = static_cast<S *>(out[0]);
    const auto f = [](S a, S b) { return Num<S>::Store(Op::Apply(Num<S>::Load(a), Num<S>::Load(b))); };
    // One pass over inputs 0 and 1 (a broadcast copy of input 0 alone), then fold each further input in place.
    if (inputs_ == 1) {
      BinaryLoop(bcs_[0], ctr_.data(), static_cast<const S *>(in[0]), static_cast<const S *>(in[0]), o,
                 [](S a, S) { return a; });
      return true;
    }
    BinaryLoop(bcs_[0], ctr_.data(), static_cast<const S *>(in[0]), static_cast<const S *>(in[1]), o, f);
    for (size_t k = 2; k < inputs_; ++k) InPlaceLoop(bcs_[k - 1], ctr_.data(), o, static_cast<const S *>(in[k]), f);
    return true;
  }

 private:
  std::vector<BroadcastN> bcs_;
  std::vector<int64_t> ctr_;
  size_t inputs_;
};

template <class Op>
std::unique_ptr<Kernel> PrepareVariadic(const KernelCtx &c, std::string *reason) {
  if (HasHalfTypes(c)) return PrepareViaFloat(c, PrepareVariadic<Op>, reason);
  const auto &od = c.out[0].dims;
  std::vector<BroadcastN> bcs;  // inputs 0 and 1 together (0 alone for one input), then one per further input
  const Dims &second = c.in.size() > 1 ? c.in[1]->dims : c.in[0]->dims;
  bcs.push_back(MakeBc({&c.in[0]->dims, &second}, od));
  for (size_t k = 2; k < c.in.size(); ++k) bcs.push_back(MakeBc({&od, &c.in[k]->dims}, od));
  size_t rank = 1;
  for (const auto &b : bcs) rank = std::max(rank, b.dims.size());
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value) k = std::make_unique<VariadicKernel<S, Op>>(bcs, rank, c.in.size());
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

// ---- comparisons and logic (bool outputs) ----

struct EqualF {
  template <class C>
  static bool Apply(C a, C b) { return a == b; }
};
struct LessF {
  template <class C>
  static bool Apply(C a, C b) { return a < b; }
};
struct GreaterF {
  template <class C>
  static bool Apply(C a, C b) { return a > b; }
};
// GreaterOrEqual / LessOrEqual share the per-ISA runs of the other comparisons (the generic loop of ops_logic.cc
// measured 1.7x onnxruntime on float64)
struct GreaterEqualF {
  template <class C>
  static bool Apply(C a, C b) { return a >= b; }
};
struct LessEqualF {
  template <class C>
  static bool Apply(C a, C b) { return a <= b; }
};
struct AndF {
  template <class C>
  static bool Apply(C a, C b) { return a && b; }
};
struct OrF {
  template <class C>
  static bool Apply(C a, C b) { return a || b; }
};

// One innermost run of a comparison on a type computed as stored (ia / ib: 1 or 0 for a broadcast operand), compiled
// per instruction set like NativeLoop: int64 compares need SSE4.2 / AVX-512 to run in vector lanes.
template <class T, class Op>
void CompareRun(const T *a, const T *b, uint8_t *o, int64_t n, int64_t ia, int64_t ib) {
  if (ia && ib) {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(Op::Apply(a[i], b[i]) ? 1 : 0);
  } else if (ia) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(Op::Apply(a[i], bv) ? 1 : 0);
  } else if (ib) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(Op::Apply(av, b[i]) ? 1 : 0);
  } else {
    std::memset(o, Op::Apply(*a, *b) ? 1 : 0, static_cast<size_t>(n));
  }
}
#if defined(__x86_64__)
template <class T, class Op>
__attribute__((target("avx512f,avx512dq"))) void CompareRunAvx512(const T *a, const T *b, uint8_t *o, int64_t n,
                                                                   int64_t ia, int64_t ib) {
  CompareRun<T, Op>(a, b, o, n, ia, ib);
}
template <class T, class Op>
__attribute__((target("avx2,fma"))) void CompareRunAvx2(const T *a, const T *b, uint8_t *o, int64_t n, int64_t ia,
                                                        int64_t ib) {
  CompareRun<T, Op>(a, b, o, n, ia, ib);
}
#endif

template <class S, class Op>
class CompareKernel : public Kernel {
  using C = typename Num<S>::C;
  static constexpr bool kNative = std::is_same<S, C>::value;  // not float16 / bfloat16 / bool storage

 public:
  explicit CompareKernel(BroadcastN bc) : bc_(std::move(bc)), ctr_(bc_.dims.size()) {
    if constexpr (kNative) {
      run_ = CompareRun<S, Op>;
#if defined(__x86_64__)
      if (vmath::ActiveIsa() == vmath::Isa::kAvx512) run_ = CompareRunAvx512<S, Op>;
      else if (vmath::ActiveIsa() == vmath::Isa::kAvx2) run_ = CompareRunAvx2<S, Op>;
#endif
    }
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *a = static_cast<const S *>(in[0]);
    const S *b = static_cast<const S *>(in[1]);
    uint8_t *o = static_cast<uint8_t *>(out[0]);
    if constexpr (kNative) {
      const int64_t ia = bc_.strides[0].back(), ib = bc_.strides[1].back();
      ForEachRunN(bc_, ctr_.data(), [&](const int64_t *off, int64_t oo, int64_t n) {
        run_(a + off[0], b + off[1], o + oo, n, ia, ib);
      });
      return true;
    }
    BinaryLoop(bc_, ctr_.data(), a, b, o,
               [](S x, S y) { return static_cast<uint8_t>(Op::Apply(Num<S>::Load(x), Num<S>::Load(y)) ? 1 : 0); });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
  void (*run_)(const S *, const S *, uint8_t *, int64_t, int64_t, int64_t) = nullptr;
};

bool EqualType(ElemType t) { return IsNumericType(t) || t == ElemType::kBool; }
bool BoolType(ElemType t) { return t == ElemType::kBool; }

template <bool (*Allowed)(ElemType)>
bool InferCompare(InferCtx *c, std::string *reason) {
  if (!InferBroadcast<Allowed>(c, reason)) return false;
  c->out[0].dtype = ElemType::kBool;
  return true;
}

template <class Op>
std::unique_ptr<Kernel> PrepareCompare(const KernelCtx &c, std::string *reason) {
  // float16 / bfloat16: widened exactly by the vector conversions and compared as float (the per-element widening
  // of the generic loop measured 20-40x onnxruntime)
  if (HasHalfTypes(c)) return PrepareViaFloat(c, PrepareCompare<Op>, reason);
  BroadcastN bc = MakeBc({&c.in[0]->dims, &c.in[1]->dims}, c.out[0].dims);
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) { k = std::make_unique<CompareKernel<decltype(tag), Op>>(bc); });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- Where ----

template <class S>  // S only fixes the element width
class WhereKernel : public Kernel {
 public:
  explicit WhereKernel(BroadcastN bc) : bc_(std::move(bc)), ctr_(bc_.dims.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const uint8_t *cond = static_cast<const uint8_t *>(in[0]);
    const S *x = static_cast<const S *>(in[1]);
    const S *y = static_cast<const S *>(in[2]);
    S *o = static_cast<S *>(out[0]);
    const int64_t ic = bc_.strides[0].back(), ix = bc_.strides[1].back(), iy = bc_.strides[2].back();
    ForEachRunN(bc_, ctr_.data(), [&](const int64_t *off, int64_t oo, int64_t n) {
      const uint8_t *pc = cond + off[0];
      const S *px = x + off[1];
      const S *py = y + off[2];
      S *po = o + oo;
      // A condition constant along the run (a column broadcast): one copy (the strided loop measured 1.8x
      // onnxruntime there).
      if (ic == 0 && ix == 1 && iy == 1) {
        std::memcpy(po, pc[0] ? px : py, static_cast<size_t>(n) * sizeof(S));
        return;
      }
      if (ic == 1 && ix == 1 && iy == 1) {  // both values read unconditionally: a blend, not a branch per element
        for (int64_t i = 0; i < n; ++i) {
          const S a = px[i], b = py[i];
          po[i] = pc[i] != 0 ? a : b;
        }
        return;
      }
      if (ic == 1 && (ix | iy) == 1 && ix + iy == 1) {  // one side a scalar along the run
        const S *pv = ix ? px : py;
        const S k = ix ? py[0] : px[0];
        const uint8_t pick = ix ? 1 : 0;  // the condition value that selects pv
        for (int64_t i = 0; i < n; ++i) {
          const S v = pv[i];
          po[i] = (pc[i] != 0) == (pick != 0) ? v : k;
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i * ic] ? px[i * ix] : py[i * iy];
    });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
};

bool InferWhere(InferCtx *c, std::string *reason) {
  if (c->in[0]->dtype != ElemType::kBool) {
    *reason = "condition must be bool, got " + DescStr(*c->in[0]);
    return false;
  }
  if (!SameTypes(*c, 1, 3, reason)) return false;
  if (ElemSize(c->in[1]->dtype) == 0) {
    *reason = DtypeNotSupported(c->in[1]->dtype);
    return false;
  }
  std::vector<int64_t> dims;
  if (!BroadcastShapes(c->in[0]->dims, c->in[1]->dims, &dims, reason)) return false;
  if (!BroadcastShapes(dims, c->in[2]->dims, &dims, reason)) return false;
  c->out[0].dtype = c->in[1]->dtype;
  c->out[0].dims = std::move(dims);
  return true;
}

std::unique_ptr<Kernel> PrepareWhere(const KernelCtx &c, std::string *reason) {
  BroadcastN bc = MakeBc({&c.in[0]->dims, &c.in[1]->dims, &c.in[2]->dims}, c.out[0].dims);
  switch (ElemSize(c.out[0].dtype)) {
    case 1: return std::make_unique<WhereKernel<uint8_t>>(bc);
    case 2: return std::make_unique<WhereKernel<uint16_t>>(bc);
    case 4: return std::make_unique<WhereKernel<uint32_t>>(bc);
    case 8: return std::make_unique<WhereKernel<uint64_t>>(bc);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

// ---- unary ----

// Attribute values of a unary op (alpha, beta, gamma, IsInf's detect flags), read once at prepare time.
struct UnaryParams {
  float a = 0.f, b = 0.f;
};

// Functors: Apply on the compute type; kArray, when set, is the vectorised float32 array kernel of the same
// function (vmath.h), used instead of the element loop for float32 tensors.
struct NoArray {
  static constexpr vmath::ArrayFn kArray = nullptr;
};

struct NegF : NoArray {
  template <class C>
  static C Apply(C x, const UnaryParams &) {
    if constexpr (std::is_integral<C>::value) return WrapSub(C(0), x);
    else return -x;
  }
};
struct AbsF : NoArray {
  template <class C>
  static C Apply(C x, const UnaryParams &) {
    if constexpr (std::is_unsigned<C>::value) return x;
    else if constexpr (std::is_integral<C>::value) return x < 0 ? WrapSub(C(0), x) : x;
    else return std::fabs(x);
  }
};
struct SignF : NoArray {
  template <class C>
  static C Apply(C x, const UnaryParams &) {
    if (x > C(0)) return C(1);
    if constexpr (std::is_signed<C>::value)
      if (x < C(0)) return C(-1);
    return x == C(0) ? C(0) : x;  // NaN stays NaN
  }
};
struct BitwiseNotF : NoArray {
  template <class C>
  static C Apply(C x, const UnaryParams &) { return static_cast<C>(~x); }
};
struct NotF : NoArray {
  template <class C>
  static C Apply(C x, const UnaryParams &) { return !x; }
};

// Float functions: C is float or double (float16/bfloat16 compute in float).
#define TWIN_STD_UNARY(Name, expr, array)           \
  struct Name {                                     \
    static constexpr vmath::ArrayFn kArray = array; \
    template <class C>                              \
    static C Apply(C x, const UnaryParams &p) {     \
      (void)p;                                      \
      return expr;                                  \
    }                                               \
  };

TWIN_STD_UNARY(SqrtF, std::sqrt(x), vmath::SqrtArray)
TWIN_STD_UNARY(ExpF, std::exp(x), vmath::ExpArray)
TWIN_STD_UNARY(LogF, std::log(x), vmath::LogArray)
TWIN_STD_UNARY(ReciprocalF, C(1) / x, nullptr)
TWIN_STD_UNARY(ErfF, std::erf(x), vmath::ErfArray)
TWIN_STD_UNARY(TanhF, std::tanh(x), vmath::TanhArray)
TWIN_STD_UNARY(SinF, std::sin(x), vmath::SinArray)
TWIN_STD_UNARY(CosF, std::cos(x), vmath::CosArray)
TWIN_STD_UNARY(TanF, std::tan(x), nullptr)
TWIN_STD_UNARY(AsinF, std::asin(x), vmath::AsinArray)
TWIN_STD_UNARY(AcosF, std::acos(x), vmath::AcosArray)
TWIN_STD_UNARY(AtanF, std::atan(x), vmath::AtanArray)
TWIN_STD_UNARY(SinhF, std::sinh(x), nullptr)
TWIN_STD_UNARY(CoshF, std::cosh(x), nullptr)
TWIN_STD_UNARY(AsinhF, std::asinh(x), nullptr)
TWIN_STD_UNARY(AcoshF, std::acosh(x), nullptr)
TWIN_STD_UNARY(AtanhF, std::atanh(x), nullptr)
TWIN_STD_UNARY(RoundF, std::nearbyint(x), vmath::RoundArray)  // half to even, like numpy
TWIN_STD_UNARY(FloorF, std::floor(x), vmath::FloorArray)
TWIN_STD_UNARY(CeilF, std::ceil(x), vmath::CeilArray)
// Branch-free forms vectorise as they are; NaN propagates through each (comparisons with NaN are false).
TWIN_STD_UNARY(ReluF, x < C(0) ? C(0) : x, nullptr)
TWIN_STD_UNARY(LeakyReluF, x >= C(0) ? x : x * static_cast<C>(p.a), nullptr)
TWIN_STD_UNARY(ThresholdedReluF, x > static_cast<C>(p.a) ? x : C(0), nullptr)
// expm1 / softplus / tanh through vmath's inline forms for float32, so that the loops vectorise (always inlined:
// a call out of the per-ISA loop would run per element, in the baseline instruction set).
template <class C>
TWIN_VMATH_INLINE C Expm1Of(C x) {
  if constexpr (std::is_same<C, float>::value) return vmath::Expm1(x);
  else return std::expm1(x);
}
template <class C>
TWIN_VMATH_INLINE C SoftplusOf(C x) {  // log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))
  if constexpr (std::is_same<C, float>::value)
    return (x > 0.0f ? x : 0.0f) + vmath::Log1pUnit(vmath::Exp(x < 0.0f ? x : -x));
  else return (x > C(0) ? x : C(0)) + std::log1p(std::exp(-std::fabs(x)));
}
template <class C>
TWIN_VMATH_INLINE C TanhOf(C x) {
  if constexpr (std::is_same<C, float>::value) return vmath::Tanh(x);
  else return std::tanh(x);
}
TWIN_STD_UNARY(EluF, x > C(0) ? x : static_cast<C>(p.a) * Expm1Of(x), nullptr)
TWIN_STD_UNARY(SeluF, static_cast<C>(p.b) * (x > C(0) ? x : static_cast<C>(p.a) * Expm1Of(x)), nullptr)
TWIN_STD_UNARY(CeluF, x > C(0) ? x : static_cast<C>(p.a) * Expm1Of(x / static_cast<C>(p.a)), nullptr)
TWIN_STD_UNARY(SoftsignF, x / (C(1) + std::fabs(x)), nullptr)
TWIN_STD_UNARY(SoftplusF, SoftplusOf(x), nullptr)
TWIN_STD_UNARY(MishF, x * TanhOf(SoftplusOf(x)), nullptr)

template <class C>
TWIN_VMATH_INLINE C HardSigmoidOf(C x, C alpha, C beta) {
  const C v = alpha * x + beta;
  return v < C(0) ? C(0) : (v > C(1) ? C(1) : v);
}
TWIN_STD_UNARY(HardSigmoidF, HardSigmoidOf(x, static_cast<C>(p.a), static_cast<C>(p.b)), nullptr)
TWIN_STD_UNARY(HardSwishF, x * HardSigmoidOf(x, C(1) / C(6), C(0.5)), nullptr)
#undef TWIN_STD_UNARY

struct SigmoidF {
  static constexpr vmath::ArrayFn kArray = vmath::SigmoidArray;
  template <class C>
  static C Apply(C x, const UnaryParams &) {
    if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
    const C e = std::exp(x);  // avoids exp overflow for very negative x
    return e / (C(1) + e);
  }
};
struct GeluF {  // exact: 0.5 x (1 + erf(x / sqrt2)) = 0.5 x erfc(-x / sqrt2), accurate in both tails
  static constexpr vmath::ArrayFn kArray = vmath::GeluArray;
  template <class C>
  static C Apply(C x, const UnaryParams &) {
    return C(0.5) * x * std::erfc(-x * static_cast<C>(0.7071067811865476));
  }
};
struct GeluTanhF {  // approximate="tanh"
  static constexpr vmath::ArrayFn kArray = vmath::GeluTanhArray;
  template <class C>
  static C Apply(C x, const UnaryParams &) {
    const C k = static_cast<C>(0.7978845608028654);  // sqrt(2 / pi)
    return C(0.5) * x * (C(1) + std::tanh(k * (x + static_cast<C>(0.044715) * x * x * x)));
  }
};

template <class S, class Op>
class UnaryKernel : public Kernel {
 public:
  UnaryKernel(int64_t n, UnaryParams p) : n_(n), p_(p) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }  // (so the loops below take no __restrict)
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    const UnaryParams p = p_;
    for (int64_t i = 0; i < n_; ++i) y[i] = Num<S>::Store(Op::Apply(Num<S>::Load(x[i]), p));
    return true;
  }

 private:
  int64_t n_;
  UnaryParams p_;
};

// Element loop of an op without an array kernel on a type computed as stored (float32, float64, integers),
// compiled per instruction set like vmath's (the loops vectorise when Op::Apply is branch-free, e.g. int64 Abs with
// AVX-512's vpabsq; libm calls stay calls).
template <class T, class Op>
void NativeLoop(const T *x, T *y, int64_t n, UnaryParams p) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::Apply(x[i], p);
}
#if defined(__x86_64__)
template <class T, class Op>
__attribute__((target("avx512f,avx512dq"))) void NativeLoopAvx512(const T *x, T *y, int64_t n, UnaryParams p) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::Apply(x[i], p);
}
template <class T, class Op>
__attribute__((target("avx2,fma"))) void NativeLoopAvx2(const T *x, T *y, int64_t n, UnaryParams p) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::Apply(x[i], p);
}
#endif

template <class T, class Op>
class NativeUnaryKernel : public Kernel {
 public:
  NativeUnaryKernel(int64_t n, UnaryParams p) : n_(n), p_(p) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    void (*loop)(const T *, T *, int64_t, UnaryParams) = NativeLoop<T, Op>;
#if defined(__x86_64__)
    switch (vmath::ActiveIsa()) {
      case vmath::Isa::kAvx512: loop = NativeLoopAvx512<T, Op>; break;
      case vmath::Isa::kAvx2: loop = NativeLoopAvx2<T, Op>; break;
      default: break;
    }
#endif
    ParallelForAnyCut(n_, kElemGrain, [&](int64_t b, int64_t e) { loop(x + b, y + b, e - b, p_); });
    return true;
  }

 private:
  int64_t n_;
  UnaryParams p_;
};

// float32 y = Op(x) by its array kernel (vmath.h) or its element loop for the CPU's instruction set.
template <class Op>
void FloatUnaryInto(const float *x, float *y, int64_t n, UnaryParams p) {
  if (reinterpret_cast<uintptr_t>(Op::kArray) != 0) return Op::kArray(x, y, n);
#if defined(__x86_64__)
  switch (vmath::ActiveIsa()) {
    case vmath::Isa::kAvx512: return NativeLoopAvx512<float, Op>(x, y, n, p);
    case vmath::Isa::kAvx2: return NativeLoopAvx2<float, Op>(x, y, n, p);
    default: break;
  }
#endif
  NativeLoop<float, Op>(x, y, n, p);
}

// float16 / bfloat16: blocks widened into a float32 buffer on the stack (F16C conversions for float16), the float32
// kernel, rounded back once: the same values as computing each element in float, without a per-element conversion
// call. A block is read before it is written, so the step may run in place.
// Sign of float16 / bfloat16 on the bits (kInf: the infinity pattern, kOne: 1.0): a NaN stays itself, +-0 gives
// +0 (as SignF), anything else +-1 with the input's sign; in 16-bit lanes, without the float round trip (which
// measured 2.1x onnxruntime). Signed lanes: the magnitude is below 0x8000, and SSE2 / AVX2 have no unsigned 16-bit
// compare (the unsigned loop measured 1.7x).
template <uint16_t kInf, uint16_t kOne>
inline void HalfSignRun(const uint16_t *__restrict x, uint16_t *__restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int16_t h = static_cast<int16_t>(x[i]), a = static_cast<int16_t>(h & 0x7fff);
    const int16_t one = static_cast<int16_t>(kOne | (h & static_cast<int16_t>(0x8000)));
    y[i] = static_cast<uint16_t>(a > static_cast<int16_t>(kInf) ? h : a == 0 ? int16_t{0} : one);
  }
}
#if defined(__x86_64__)
template <uint16_t kInf, uint16_t kOne>
__attribute__((target("avx2"))) void HalfSignRunAvx2(const uint16_t *x, uint16_t *y, int64_t n) {
  HalfSignRun<kInf, kOne>(x, y, n);
}
#endif
template <uint16_t kInf, uint16_t kOne>
class HalfSignKernel : public Kernel {
 public:
  explicit HalfSignKernel(int64_t n) : n_(n) {}  // (not in place: the run's pointers are __restrict)
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const uint16_t *x = static_cast<const uint16_t *>(in[0]);
    uint16_t *y = static_cast<uint16_t *>(out[0]);
#if defined(__x86_64__)
    if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return HalfSignRunAvx2<kInf, kOne>(x, y, n_), true;
#endif
    HalfSignRun<kInf, kOne>(x, y, n_);
    return true;
  }

 private:
  int64_t n_;
};

template <class S, class Op>
class HalfUnaryKernel : public Kernel {
 public:
  HalfUnaryKernel(int64_t n, UnaryParams p) : n_(n), p_(p) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    constexpr int64_t kBlock = 1024;
    alignas(64) float buf[kBlock];
    const uint16_t *x = static_cast<const uint16_t *>(in[0]);
    uint16_t *y = static_cast<uint16_t *>(out[0]);
    for (int64_t i = 0; i < n_; i += kBlock) {
      const int64_t m = std::min(kBlock, n_ - i);
      if constexpr (std::is_same<S, Half>::value) {
        HalfToFloatArray(x + i, buf, m);
      } else {
        for (int64_t j = 0; j < m; ++j) buf[j] = Bf16ToFloat(x[i + j]);
      }
      FloatUnaryInto<Op>(buf, buf, m, p_);
      if constexpr (std::is_same<S, Half>::value) {
        FloatToHalfArray(buf, y + i, m);
      } else {
        for (int64_t j = 0; j < m; ++j) y[i + j] = FloatToBf16(buf[j]);
      }
    }
    return true;
  }

 private:
  int64_t n_;
  UnaryParams p_;
};

// float32 through a vectorised array kernel (vmath.h), dispatched to the CPU's best instruction set.
class ArrayKernel : public Kernel {
 public:
  ArrayKernel(int64_t n, vmath::ArrayFn fn) : n_(n), fn_(fn) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }  // vmath's array kernels allow x == y
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const float *x = static_cast<const float *>(in[0]);
    float *y = static_cast<float *>(out[0]);
    ParallelForAnyCut(n_, kElemGrain, [&](int64_t b, int64_t e) { fn_(x + b, y + b, e - b); });
    return true;
  }

 private:
  int64_t n_;
  vmath::ArrayFn fn_;
};

// float64 through a vectorised array kernel (vmath.h) instead of a libm call per element.
class DoubleArrayKernel : public Kernel {
 public:
  DoubleArrayKernel(int64_t n, vmath::ArrayFnD fn) : n_(n), fn_(fn) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const double *x = static_cast<const double *>(in[0]);
    double *y = static_cast<double *>(out[0]);
    ParallelForAnyCut(n_, kElemGrain, [&](int64_t b, int64_t e) { fn_(x + b, y + b, e - b); });
    return true;
  }

 private:
  int64_t n_;
  vmath::ArrayFnD fn_;
};
template <class Op>
vmath::ArrayFnD DoubleArrayOf() {
  if constexpr (std::is_same<Op, ExpF>::value) return vmath::ExpDoubleArray;
  if constexpr (std::is_same<Op, TanhF>::value) return vmath::TanhDoubleArray;
  if constexpr (std::is_same<Op, SigmoidF>::value) return vmath::SigmoidDoubleArray;
  if constexpr (std::is_same<Op, SinF>::value) return vmath::SinDoubleArray;
  if constexpr (std::is_same<Op, CosF>::value) return vmath::CosDoubleArray;
  return nullptr;
}

// float64 Sqrt by SqrtDoubleArray.
class SqrtDoubleKernel : public Kernel {
 public:
  explicit SqrtDoubleKernel(int64_t n) : n_(n) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const double *x = static_cast<const double *>(in[0]);
    double *y = static_cast<double *>(out[0]);
    ParallelForAnyCut(n_, kElemGrain, [&](int64_t b, int64_t e) { SqrtDoubleArray(x + b, y + b, e - b); });
    return true;
  }

 private:
  int64_t n_;
};

enum UnaryTypes { kFloatOnly, kSignedOrFloat, kAnyNumeric, kIntOnly, kBoolOnly };

template <UnaryTypes kTypes>
bool UnaryAllowed(ElemType t) {
  switch (kTypes) {
    case kFloatOnly: return IsFloatType(t);
    case kSignedOrFloat:
      return IsFloatType(t) || t == ElemType::kInt8 || t == ElemType::kInt16 || t == ElemType::kInt32 ||
             t == ElemType::kInt64;
    case kAnyNumeric: return IsNumericType(t);
    case kIntOnly: return IsIntType(t);
    case kBoolOnly: return t == ElemType::kBool;
  }
  return false;
}

template <UnaryTypes kTypes, class S>
constexpr bool UnaryStorageAllowed() {
  using C = typename Num<S>::C;
  if constexpr (kTypes == kBoolOnly) return std::is_same<S, Bool>::value;
  if constexpr (std::is_same<S, Bool>::value) return false;
  if constexpr (kTypes == kFloatOnly) return std::is_floating_point<C>::value;
  if constexpr (kTypes == kSignedOrFloat) return std::is_signed<C>::value;
  if constexpr (kTypes == kIntOnly) return std::is_integral<C>::value;
  return true;
}

template <UnaryTypes kTypes>
bool InferUnary(InferCtx *c, std::string *reason) {
  if (!UnaryAllowed<kTypes>(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

bool ReadFlag(const Node &n, const char *name, float *v, std::string *reason) {
  int64_t i;
  if (!AttrInt(n, name, 1, &i, reason)) return false;
  *v = i != 0 ? 1.f : 0.f;
  return true;
}

bool UnaryParam(const Node &n, UnaryParams *p, std::string *reason) {
  *p = UnaryParams{};
  const std::string &t = n.op_type;
  if (t == "LeakyRelu") return AttrFloat(n, "alpha", 0.01f, &p->a, reason);
  if (t == "Elu" || t == "Celu" || t == "ThresholdedRelu") return AttrFloat(n, "alpha", 1.0f, &p->a, reason);
  if (t == "Selu")
    return AttrFloat(n, "alpha", 1.67326319217681884765625f, &p->a, reason) &&
           AttrFloat(n, "gamma", 1.05070102214813232421875f, &p->b, reason);
  if (t == "HardSigmoid")
    return AttrFloat(n, "alpha", 0.2f, &p->a, reason) && AttrFloat(n, "beta", 0.5f, &p->b, reason);
  if (t == "IsInf") return ReadFlag(n, "detect_positive", &p->a, reason) && ReadFlag(n, "detect_negative", &p->b, reason);
  if (t == "Gelu") {
    const Attribute *a = n.FindAttr("approximate");
    if (!a) return true;
    if (a->type != kAttrString || (a->s != "none" && a->s != "tanh")) {
      *reason = "attribute 'approximate' must be \"none\" or \"tanh\"";
      return false;
    }
    p->a = a->s == "tanh" ? 1.f : 0.f;
  }
  return true;
}

bool CheckUnary(const Node &n, int64_t, std::string *reason) {
  UnaryParams p;
  return UnaryParam(n, &p, reason);
}

template <class Op, UnaryTypes kTypes>
std::unique_ptr<Kernel> PrepareUnary(const KernelCtx &c, std::string *reason) {
  UnaryParams p;
  if (!UnaryParam(*c.node, &p, reason)) return nullptr;
  const int64_t n = c.out[0].NumElements();
  if constexpr (std::is_same<Op, SqrtF>::value)
    if (c.out[0].dtype == ElemType::kDouble) return std::make_unique<SqrtDoubleKernel>(n);
  if (c.out[0].dtype == ElemType::kDouble)
    if (const vmath::ArrayFnD fn = DoubleArrayOf<Op>()) return std::make_unique<DoubleArrayKernel>(n, fn);
  if constexpr (std::is_same<Op, SignF>::value) {
    if (c.out[0].dtype == ElemType::kFloat16) return std::make_unique<HalfSignKernel<0x7c00, 0x3c00>>(n);
    if (c.out[0].dtype == ElemType::kBf16) return std::make_unique<HalfSignKernel<0x7f80, 0x3f80>>(n);
  }
  if constexpr (UnaryStorageAllowed<kTypes, float>()) {
    if (c.out[0].dtype == ElemType::kFloat16) return std::make_unique<HalfUnaryKernel<Half, Op>>(n, p);
    if (c.out[0].dtype == ElemType::kBf16) return std::make_unique<HalfUnaryKernel<BF16, Op>>(n, p);
  }
  if (c.out[0].dtype == ElemType::kFloat && UnaryAllowed<kTypes>(ElemType::kFloat)) {
    // (compared as an integer: GCC warns that a function's address "will never be NULL" when it is not null)
    if (reinterpret_cast<uintptr_t>(Op::kArray) != 0) return std::make_unique<ArrayKernel>(n, Op::kArray);
    if constexpr (UnaryStorageAllowed<kTypes, float>()) return std::make_unique<NativeUnaryKernel<float, Op>>(n, p);
  }
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (UnaryStorageAllowed<kTypes, S>()) {
      if constexpr (std::is_same<S, typename Num<S>::C>::value) k = std::make_unique<NativeUnaryKernel<S, Op>>(n, p);
      else k = std::make_unique<UnaryKernel<S, Op>>(n, p);
    }
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

std::unique_ptr<Kernel> PrepareGelu(const KernelCtx &c, std::string *reason) {
  UnaryParams p;
  if (!UnaryParam(*c.node, &p, reason)) return nullptr;
  return p.a != 0.f ? PrepareUnary<GeluTanhF, kFloatOnly>(c, reason) : PrepareUnary<GeluF, kFloatOnly>(c, reason);
}

// ---- IsNaN / IsInf: float in, bool out ----

// float64 / float16 IsNaN / IsInf on the bits (integer compares the compiler vectorises, per instruction set like
// the compares above; the per-element float loops measured 3-4x onnxruntime, through float32 2.4-3.3x). U: the
// bits' type; the exponent-all-ones pattern of +inf and -inf.
template <class U>
struct ClassBits;
template <>
struct ClassBits<uint64_t> {
  static constexpr uint64_t kAbs = 0x7FFFFFFFFFFFFFFFull, kInf = 0x7FF0000000000000ull, kNegInf = ~kAbs | kInf;
};
template <>
struct ClassBits<uint16_t> {
  static constexpr uint16_t kAbs = 0x7FFF, kInf = 0x7C00, kNegInf = 0xFC00;
};

template <class U>
inline void BitsClass(const void *in, uint8_t *y, int64_t n, bool nan, bool pos, bool neg) {
  using B = ClassBits<U>;
  const U *b = static_cast<const U *>(in);
  if (nan) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>(static_cast<U>(b[i] & B::kAbs) > B::kInf);
  } else {
    const U p = B::kInf, m = B::kNegInf;
    const uint8_t pos_on = pos ? 1 : 0, neg_on = neg ? 1 : 0;
    for (int64_t i = 0; i < n; ++i)
      y[i] = static_cast<uint8_t>((static_cast<uint8_t>(b[i] == p) & pos_on) | (static_cast<uint8_t>(b[i] == m) & neg_on));
  }
}
#if defined(__x86_64__)
template <class U>
__attribute__((target("avx512f,avx512bw,avx512dq"))) void BitsClassAvx512(const void *x, uint8_t *y, int64_t n,
                                                                          bool nan, bool pos, bool neg) {
  BitsClass<U>(x, y, n, nan, pos, neg);
}
template <class U>
__attribute__((target("avx2"))) void BitsClassAvx2(const void *x, uint8_t *y, int64_t n, bool nan, bool pos,
                                                   bool neg) {
  BitsClass<U>(x, y, n, nan, pos, neg);
}
#endif

using BitsClassFn = void (*)(const void *, uint8_t *, int64_t, bool, bool, bool);
template <class U>
BitsClassFn PickBitsClass() {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return BitsClassAvx512<U>;
  if (vmath::ActiveIsa() == vmath::Isa::kAvx2) return BitsClassAvx2<U>;
#endif
  return BitsClass<U>;
}

template <class S>
class IsClassKernel : public Kernel {
 public:
  IsClassKernel(int64_t n, bool nan, bool pos_inf, bool neg_inf) : n_(n), nan_(nan), pos_(pos_inf), neg_(neg_inf) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    using C = typename Num<S>::C;
    const S *x = static_cast<const S *>(in[0]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    if constexpr (std::is_same<S, float>::value) {
      RunFloat32(x, y);
      return true;
    }
    if constexpr (std::is_same<S, double>::value || std::is_same<S, Half>::value) {
      run_bits_(x, y, n_, nan_, pos_, neg_);
      return true;
    }
    const C inf = std::numeric_limits<C>::infinity();
    for (int64_t i = 0; i < n_; ++i) {
      const C v = Num<S>::Load(x[i]);
      y[i] = static_cast<uint8_t>(nan_ ? v != v : ((pos_ && v == inf) || (neg_ && v == -inf)));
    }
    return true;
  }

 private:
  // float32: on the bits, per instruction set (vmath)
  void RunFloat32(const float *x, uint8_t *y) const { vmath::FloatClassInto(x, y, n_, nan_, pos_, neg_); }

  int64_t n_;
  bool nan_, pos_, neg_;
  BitsClassFn run_bits_ = PickBitsClass<std::conditional_t<sizeof(S) == 8, uint64_t, uint16_t>>();
};

bool InferIsClass(InferCtx *c, std::string *reason) {
  if (!IsFloatType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0].dtype = ElemType::kBool;
  c->out[0].dims = c->in[0]->dims;
  return true;
}

template <bool kNan>
std::unique_ptr<Kernel> PrepareIsClass(const KernelCtx &c, std::string *reason) {
  UnaryParams p;
  if (!UnaryParam(*c.node, &p, reason)) return nullptr;
  // bfloat16: widened exactly (NaN stays NaN, inf stays inf) by the vector conversions
  if (c.in[0]->dtype == ElemType::kBf16) return PrepareViaFloat(c, PrepareIsClass<kNan>, reason);
  const int64_t n = c.out[0].NumElements();
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<IsClassKernel<S>>(n, kNan, p.a != 0.f, p.b != 0.f);
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- PRelu: y = x < 0 ? slope * x : x, slope broadcast to x's shape ----

struct PReluF {
  template <class C>
  static C Apply(C x, C slope) {
    if constexpr (std::is_unsigned<C>::value) return x;
    else if constexpr (std::is_integral<C>::value) return x < 0 ? WrapMul(x, slope) : x;
    else return x < C(0) ? x * slope : x;
  }
};

bool PReluType(ElemType t) {
  return IsFloatType(t) || t == ElemType::kInt32 || t == ElemType::kInt64 || t == ElemType::kUint32 ||
         t == ElemType::kUint64;
}

bool InferPRelu(InferCtx *c, std::string *reason) {
  if (!InferBroadcast<PReluType>(c, reason)) return false;
  if (c->out[0].dims != c->in[0]->dims) {
    *reason = "slope " + DescStr(*c->in[1]) + " must broadcast to the input's shape " + DescStr(*c->in[0]);
    return false;
  }
  return true;
}

// ---- Clip: min/max are optional scalar inputs (opset >= 11) or float attributes (older) ----

bool InferClip(InferCtx *c, std::string *reason) {
  if (!IsNumericType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  for (size_t i = 1; i < c->in.size(); ++i) {
    if (!c->has(i)) continue;
    if (c->in[i]->dtype != c->in[0]->dtype) {
      *reason = "input '" + c->node->input_names[i] + "' must have the dtype of the input, got " + DescStr(*c->in[i]);
      return false;
    }
    if (c->in[i]->NumElements() > 1 || (c->in[i]->IsStatic() && c->in[i]->NumElements() != 1)) {
      *reason = "input '" + c->node->input_names[i] + "' must be a scalar, got " + DescStr(*c->in[i]);
      return false;
    }
  }
  c->out[0] = *c->in[0];
  return true;
}

// One min/max pass (NaN stays NaN: both compares are false for it); float32 per instruction set like FloatLoop.
template <class C>
void ClipLoop(const C *x, C *y, int64_t n, C lo, C hi) {
  for (int64_t i = 0; i < n; ++i) {
    const C v = x[i] < lo ? lo : x[i];
    y[i] = v > hi ? hi : v;
  }
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void ClipFloatAvx512(const float *x, float *y, int64_t n, float lo, float hi) {
  ClipLoop(x, y, n, lo, hi);
}
__attribute__((target("avx2"))) void ClipFloatAvx2(const float *x, float *y, int64_t n, float lo, float hi) {
  ClipLoop(x, y, n, lo, hi);
}
#endif

template <class S>
class ClipKernel : public Kernel {
 public:
  ClipKernel(int64_t n, bool has_lo, bool has_hi, float attr_lo, float attr_hi, bool attrs)
      : n_(n), has_lo_(has_lo), has_hi_(has_hi), attr_lo_(attr_lo), attr_hi_(attr_hi), attrs_(attrs) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    using C = typename Num<S>::C;
    C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if (std::is_floating_point<C>::value) {
      lo = -std::numeric_limits<C>::infinity();
      hi = std::numeric_limits<C>::infinity();
    }
    if (attrs_) {
      lo = static_cast<C>(attr_lo_);
      hi = static_cast<C>(attr_hi_);
    } else {
      if (has_lo_) lo = Num<S>::Load(*static_cast<const S *>(in[1]));
      if (has_hi_) hi = Num<S>::Load(*static_cast<const S *>(in[2]));
    }
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    if constexpr (std::is_same<S, C>::value) {
#if defined(__x86_64__)
      if constexpr (std::is_same<S, float>::value) {
        switch (vmath::ActiveIsa()) {
          case vmath::Isa::kAvx512: ClipFloatAvx512(x, y, n_, lo, hi); return true;
          case vmath::Isa::kAvx2: ClipFloatAvx2(x, y, n_, lo, hi); return true;
          default: break;
        }
      }
#endif
      ClipLoop(x, y, n_, lo, hi);
      return true;
    }
    for (int64_t i = 0; i < n_; ++i) {
      C v = Num<S>::Load(x[i]);
      v = v < lo ? lo : v;  // NaN stays NaN
      v = v > hi ? hi : v;
      y[i] = Num<S>::Store(v);
    }
    return true;
  }

 private:
  int64_t n_;
  bool has_lo_, has_hi_;
  float attr_lo_, attr_hi_;
  bool attrs_;
};

std::unique_ptr<Kernel> PrepareClip(const KernelCtx &c, std::string *reason) {
  if (HasHalfTypes(c)) return PrepareViaFloat(c, PrepareClip, reason);
  const bool has_lo = c.in.size() > 1 && c.in[1], has_hi = c.in.size() > 2 && c.in[2];
  float alo = -std::numeric_limits<float>::infinity(), ahi = std::numeric_limits<float>::infinity();
  const bool attrs = c.opset < 11;
  if (attrs && (!AttrFloat(*c.node, "min", alo, &alo, reason) || !AttrFloat(*c.node, "max", ahi, &ahi, reason)))
    return nullptr;
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      k = std::make_unique<ClipKernel<S>>(c.out[0].NumElements(), has_lo, has_hi, alo, ahi, attrs);
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

bool ArithAllowed(ElemType t) { return IsNumericType(t); }

}  // namespace

void RegisterElementwiseOps(std::vector<OpDef> *ops) {
  ops->push_back({"Add", 2, 2, 1, 1, CheckBinary, InferBroadcast<ArithAllowed>, PrepareArith<AddF>, true});
  ops->push_back({"Sub", 2, 2, 1, 1, CheckBinary, InferBroadcast<ArithAllowed>, PrepareArith<SubF>, true});
  ops->push_back({"Mul", 2, 2, 1, 1, CheckBinary, InferBroadcast<ArithAllowed>, PrepareArith<MulF>, true});
  ops->push_back({"Div", 2, 2, 1, 1, CheckBinary, InferBroadcast<ArithAllowed>, PrepareArith<DivF>, true});
  ops->push_back({"Pow", 2, 2, 1, 1, CheckBinary, InferPow, PreparePow<>, true});
  ops->push_back({"Max", 1, 64, 1, 1, nullptr, InferBroadcast<ArithAllowed>, PrepareVariadic<MaxF>, true, false, true});
  ops->push_back({"Min", 1, 64, 1, 1, nullptr, InferBroadcast<ArithAllowed>, PrepareVariadic<MinF>, true, false, true});
  ops->push_back({"Equal", 2, 2, 1, 1, CheckBinary, InferCompare<EqualType>, PrepareCompare<EqualF>, true});
  ops->push_back({"Less", 2, 2, 1, 1, CheckBinary, InferCompare<ArithAllowed>, PrepareCompare<LessF>, true});
  ops->push_back({"Greater", 2, 2, 1, 1, CheckBinary, InferCompare<ArithAllowed>, PrepareCompare<GreaterF>, true});
  ops->push_back({"GreaterOrEqual", 2, 2, 1, 1, CheckBinary, InferCompare<ArithAllowed>, PrepareCompare<GreaterEqualF>,
                  true});
  ops->push_back({"LessOrEqual", 2, 2, 1, 1, CheckBinary, InferCompare<ArithAllowed>, PrepareCompare<LessEqualF>,
                  true});
  ops->push_back({"And", 2, 2, 1, 1, CheckBinary, InferCompare<BoolType>, PrepareCompare<AndF>, true});
  ops->push_back({"Or", 2, 2, 1, 1, CheckBinary, InferCompare<BoolType>, PrepareCompare<OrF>, true});
  ops->push_back({"Where", 3, 3, 1, 1, nullptr, InferWhere, PrepareWhere, true});
  ops->push_back({"Not", 1, 1, 1, 1, nullptr, InferUnary<kBoolOnly>, PrepareUnary<NotF, kBoolOnly>, true});
  ops->push_back({"Neg", 1, 1, 1, 1, nullptr, InferUnary<kSignedOrFloat>, PrepareUnary<NegF, kSignedOrFloat>, true});
  ops->push_back({"Abs", 1, 1, 1, 1, nullptr, InferUnary<kAnyNumeric>, PrepareUnary<AbsF, kAnyNumeric>, true});
  ops->push_back({"Sign", 1, 1, 1, 1, nullptr, InferUnary<kAnyNumeric>, PrepareUnary<SignF, kAnyNumeric>, true});
  ops->push_back(
      {"BitwiseNot", 1, 1, 1, 1, nullptr, InferUnary<kIntOnly>, PrepareUnary<BitwiseNotF, kIntOnly>, true});
  ops->push_back({"Relu", 1, 1, 1, 1, nullptr, InferUnary<kSignedOrFloat>, PrepareUnary<ReluF, kSignedOrFloat>, true});
  ops->push_back({"PRelu", 2, 2, 1, 1, nullptr, InferPRelu, PrepareArith<PReluF>, true});
  ops->push_back({"IsNaN", 1, 1, 1, 1, nullptr, InferIsClass, PrepareIsClass<true>, true});
  ops->push_back({"IsInf", 1, 1, 1, 1, CheckUnary, InferIsClass, PrepareIsClass<false>, true});
  ops->push_back({"Gelu", 1, 1, 1, 1, CheckUnary, InferUnary<kFloatOnly>, PrepareGelu, true});
  struct FloatUnary {
    const char *name;
    PrepareFn prepare;
  };
  const FloatUnary float_unary[] = {
      {"Sqrt", PrepareUnary<SqrtF, kFloatOnly>},         {"Exp", PrepareUnary<ExpF, kFloatOnly>},
      {"Log", PrepareUnary<LogF, kFloatOnly>},           {"Reciprocal", PrepareUnary<ReciprocalF, kFloatOnly>},
      {"Erf", PrepareUnary<ErfF, kFloatOnly>},           {"Sigmoid", PrepareUnary<SigmoidF, kFloatOnly>},
      {"Tanh", PrepareUnary<TanhF, kFloatOnly>},         {"Sin", PrepareUnary<SinF, kFloatOnly>},
      {"Cos", PrepareUnary<CosF, kFloatOnly>},           {"Tan", PrepareUnary<TanF, kFloatOnly>},
      {"Asin", PrepareUnary<AsinF, kFloatOnly>},         {"Acos", PrepareUnary<AcosF, kFloatOnly>},
      {"Atan", PrepareUnary<AtanF, kFloatOnly>},         {"Sinh", PrepareUnary<SinhF, kFloatOnly>},
      {"Cosh", PrepareUnary<CoshF, kFloatOnly>},         {"Asinh", PrepareUnary<AsinhF, kFloatOnly>},
      {"Acosh", PrepareUnary<AcoshF, kFloatOnly>},       {"Atanh", PrepareUnary<AtanhF, kFloatOnly>},
      {"Round", PrepareUnary<RoundF, kFloatOnly>},       {"Floor", PrepareUnary<FloorF, kFloatOnly>},
      {"Ceil", PrepareUnary<CeilF, kFloatOnly>},         {"LeakyRelu", PrepareUnary<LeakyReluF, kFloatOnly>},
      {"Elu", PrepareUnary<EluF, kFloatOnly>},           {"Selu", PrepareUnary<SeluF, kFloatOnly>},
      {"Celu", PrepareUnary<CeluF, kFloatOnly>},         {"ThresholdedRelu", PrepareUnary<ThresholdedReluF, kFloatOnly>},
      {"HardSigmoid", PrepareUnary<HardSigmoidF, kFloatOnly>}, {"HardSwish", PrepareUnary<HardSwishF, kFloatOnly>},
      {"Softplus", PrepareUnary<SoftplusF, kFloatOnly>}, {"Softsign", PrepareUnary<SoftsignF, kFloatOnly>},
      {"Mish", PrepareUnary<MishF, kFloatOnly>},
  };
  for (const FloatUnary &u : float_unary)
    ops->push_back({u.name, 1, 1, 1, 1, CheckUnary, InferUnary<kFloatOnly>, u.prepare, true});
  ops->push_back({"Clip", 1, 3, 1, 1, nullptr, InferClip, PrepareClip, true});
}

}  // namespace onnx
}  // namespace twin
