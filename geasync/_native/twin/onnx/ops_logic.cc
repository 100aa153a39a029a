// Broadcasting logic, bitwise and integer-style ops: Xor,
// BitwiseAnd/Or/Xor/Not, BitShift, Mod; and the variadic broadcasting Sum and Mean.
// Mod with fmod=0 takes the sign of the divisor (Python / numpy.mod), fmod=1 that of the dividend (C fmod);
// an integer x mod 0 is 0 (numpy's result), never a trap.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <cfloat>
#include <cmath>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "binary_loop.h"
#include "elem.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

bool SameDtypes(const InferCtx &c, std::string *reason) {
  for (size_t i = 1; i < c.in.size(); ++i) {
    if (c.has(i) && c.in[i]->dtype != c.in[0]->dtype) {
      *reason = std::string("input dtypes ") + ElemTypeName(c.in[0]->dtype) + " and " +
                ElemTypeName(c.in[i]->dtype) + " differ";
      return false;
    }
  }
  return true;
}

using TypeCheck = bool (*)(ElemType);
bool NumericType(ElemType t) { return IsNumericType(t); }
bool BoolOnly(ElemType t) { return t == ElemType::kBool; }
bool IntOnly(ElemType t) { return IsIntType(t); }
bool FloatOnly(ElemType t) { return IsFloatType(t); }

// Broadcast shape of all inputs; output dtype = input dtype, or bool for comparisons.
template <TypeCheck kAllowed, bool kBoolOut>
bool InferNary(InferCtx *c, std::string *reason) {
  if (!SameDtypes(*c, reason)) return false;
  if (!kAllowed(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  std::vector<int64_t> dims = c->in[0]->dims;
  for (size_t i = 1; i < c->in.size(); ++i)
    if (!BroadcastShapes(dims, c->in[i]->dims, &dims, reason)) return false;
  c->out[0].dtype = kBoolOut ? ElemType::kBool : c->in[0]->dtype;
  c->out[0].dims = std::move(dims);
  return true;
}

// ---- binary ops: f works on compute values (Num<S>::C) ----

template <class S, class SO, class F>
class BinaryKernel : public Kernel {
 public:
  BinaryKernel(BroadcastN bc, F f) : bc_(std::move(bc)), ctr_(bc_.dims.size()), f_(f) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const F f = f_;
    BinaryBroadcastLoop(bc_, ctr_.data(), static_cast<const S *>(in[0]), static_cast<const S *>(in[1]),
                        static_cast<SO *>(out[0]), [f](S a, S b) { return f(a, b); });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
  F f_;
};

template <class S, class SO, class F>
std::unique_ptr<Kernel> MakeBinary(const KernelCtx &c, F f) {
  return std::make_unique<BinaryKernel<S, SO, F>>(MakeBroadcast2(c.in[0]->dims, c.in[1]->dims, c.out[0].dims), f);
}

std::unique_ptr<Kernel> PrepareXor(const KernelCtx &c, std::string *) {
  return MakeBinary<uint8_t, uint8_t>(c, [](uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) != (b != 0)); });
}

enum BitKind { kAnd, kOr, kXor };

template <class T, BitKind kKind>
T BitApply(T a, T b) {
  return static_cast<T>(kKind == kAnd ? (a & b) : kKind == kOr ? (a | b) : (a ^ b));
}

template <BitKind kKind>
std::unique_ptr<Kernel> PrepareBitwise(const KernelCtx &c, std::string *reason) {
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsInt<S>) k = MakeBinary<S, S>(c, [](S a, S b) { return BitApply<S, kKind>(a, b); });
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

bool CheckBitShift(const Node &n, int64_t, std::string *reason) {
  const Attribute *a = n.FindAttr("direction");
  if (!a || a->type != kAttrString || (a->s != "LEFT" && a->s != "RIGHT")) {
    *reason = "attribute 'direction' must be the string \"LEFT\" or \"RIGHT\"";
    return false;
  }
  return true;
}

// Shift amounts outside [0, bits) give the sign fill alone (0, or -1 for a right shift of a negative signed value);
// a signed left shift shifts the two's complement bits (no undefined behaviour).
template <class S>
S ShiftLeft(S a, S b) {
  using U = std::make_unsigned_t<S>;
  constexpr S kBits = static_cast<S>(sizeof(S) * 8);
  return (b < 0 || b >= kBits) ? S(0) : static_cast<S>(static_cast<U>(static_cast<U>(a) << static_cast<U>(b)));
}

template <class S>
S ShiftRight(S a, S b) {
  constexpr S kBits = static_cast<S>(sizeof(S) * 8);
  if (b < 0 || b >= kBits) return (std::is_signed<S>::value && a < 0) ? static_cast<S>(-1) : S(0);
  return static_cast<S>(a >> b);
}

std::unique_ptr<Kernel> PrepareBitShift(const KernelCtx &c, std::string *reason) {
  const bool left = c.node->FindAttr("direction")->s == "LEFT";
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsInt<S>) {
      if (left) k = MakeBinary<S, S>(c, [](S a, S b) { return ShiftLeft(a, b); });
      else k = MakeBinary<S, S>(c, [](S a, S b) { return ShiftRight(a, b); });
    }
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

template <class T>
T IntMod(T a, T b, bool fmod) {
  if (b == 0) return T(0);
  if constexpr (std::is_signed<T>::value) {
    if (b == T(-1)) return T(0);  // avoids the INT_MIN % -1 trap; the result is 0 anyway
    T r = static_cast<T>(a % b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  } else {
    return static_cast<T>(a % b);
  }
}

// fmod of float32s through double, without libm's bit-by-bit loop: for finite a and b with |a / b| < 2^29, q =
// trunc(a / b) in double is the true quotient's integer part or, when a / b rounds up onto an integer, one more in
// magnitude; q * b (<= 53 bits) and a - q * b (the exact remainder, a float32) are then exact. The second case shows
// as a remainder of the wrong sign and goes to std::fmod, as do NaN, infinities, b = 0 and large quotients. A zero
// remainder takes a's sign, as fmod's does.
inline float FmodFloat(float a, float b) {
  const double ad = a, bd = b;
  const double abs_b = std::fabs(bd);
  if (abs_b <= DBL_MAX && std::fabs(ad) < 536870912.0 * abs_b) {  // 2^29; false for NaN, infinities and b = 0
    const double r = ad - std::trunc(ad / bd) * bd;
    if (r == 0.0 || std::signbit(r) == std::signbit(ad)) return std::copysign(static_cast<float>(r), a);
  }
  return std::fmod(a, b);
}

template <class C>
C FloatMod(C a, C b, bool fmod) {
  C r;
  if constexpr (std::is_same<C, float>::value) r = FmodFloat(a, b);
  else r = std::fmod(a, b);
  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
  if (!fmod && r == 0) r = std::copysign(C(0), b);  // numpy.mod's zero takes the divisor's sign
  return r;
}

bool CheckMod(const Node &n, int64_t, std::string *reason) {
  int64_t fmod;
  if (!AttrInt(n, "fmod", 0, &fmod, reason)) return false;
  if (fmod != 0 && fmod != 1) {
    *reason = "attribute 'fmod' must be 0 or 1";
    return false;
  }
  return true;
}

#if defined(__x86_64__)
// float64 Mod, four lanes at a time: for finite a and b != 0 with |a / b| < 2^51, q = trunc(a / b) is the true
// quotient's integer part or, when a / b rounds up onto an integer, one more in magnitude (the rounding cannot
// fall below an integer it passes); a - q * b by one FMA is then the exact remainder (fmod's result is always
// representable), and the second case shows as a remainder of the wrong sign. Lanes failing either test (NaN,
// infinities, b = 0, large quotients, the rounded-up quotient) take std::fmod. A zero remainder takes a's sign, as
// fmod's does; for fmod=0 the remainder then moves to the divisor's sign, as FloatMod does. libm's fmod measured
// 3.5-3.9x onnxruntime here.
template <bool kFmod>
__attribute__((target("avx2,fma"))) void ModRunF64Avx2(const double *a, const double *b, double *o, int64_t n,
                                                       int64_t ia, int64_t ib) {
  const __m256d sign = _mm256_set1_pd(-0.0), big = _mm256_set1_pd(2251799813685248.0);  // 2^51
  const __m256d dmax = _mm256_set1_pd(DBL_MAX), zero = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d av = ia ? _mm256_loadu_pd(a + i) : _mm256_set1_pd(*a);
    const __m256d bv = ib ? _mm256_loadu_pd(b + i) : _mm256_set1_pd(*b);
    const __m256d abs_a = _mm256_andnot_pd(sign, av), abs_b = _mm256_andnot_pd(sign, bv);
    const __m256d q = _mm256_round_pd(_mm256_div_pd(av, bv), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(q, bv, av);
    const __m256d in_range = _mm256_and_pd(_mm256_cmp_pd(abs_b, dmax, _CMP_LE_OQ),
                                           _mm256_cmp_pd(abs_a, _mm256_mul_pd(big, abs_b), _CMP_LT_OQ));
    // a wrong quotient shows as a nonzero r of the other sign than a (sign bits compared: blendv and movemask
    // read only the sign bit); r | sign(a) is then fmod's result, a signed zero included
    const int wrong = _mm256_movemask_pd(_mm256_xor_pd(r, av)) & ~_mm256_movemask_pd(_mm256_cmp_pd(r, zero, _CMP_EQ_OQ));
    r = _mm256_or_pd(r, _mm256_and_pd(av, sign));
    const int good = _mm256_movemask_pd(in_range) & ~wrong;
    if (!kFmod) {
      // python mod: a nonzero remainder of the other sign than b gets b added; a zero one takes b's sign
      const __m256d rz = _mm256_cmp_pd(r, zero, _CMP_EQ_OQ);
      r = _mm256_blendv_pd(r, _mm256_add_pd(r, bv), _mm256_andnot_pd(rz, _mm256_xor_pd(r, bv)));
      r = _mm256_blendv_pd(r, _mm256_and_pd(bv, sign), rz);
    }
    _mm256_storeu_pd(o + i, r);
    if (good != 15)
      for (int l = 0; l < 4; ++l)
        if (!(good >> l & 1)) o[i + l] = FloatMod(a[ia ? i + l : 0], b[ib ? i + l : 0], kFmod);
  }
  for (; i < n; ++i) o[i] = FloatMod(a[ia ? i : 0], b[ib ? i : 0], kFmod);
}

template <bool kFmod>
class ModF64Kernel : public Kernel {
 public:
  explicit ModF64Kernel(BroadcastN bc) : bc_(std::move(bc)), ctr_(bc_.dims.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const double *a = static_cast<const double *>(in[0]);
    const double *b = static_cast<const double *>(in[1]);
    double *o = static_cast<double *>(out[0]);
    const int64_t ia = bc_.strides[0].back(), ib = bc_.strides[1].back();
    ForEachRunN(bc_, ctr_.data(), [&](const int64_t *off, int64_t oo, int64_t n) {
      ModRunF64Avx2<kFmod>(a + off[0], b + off[1], o + oo, n, ia, ib);
    });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
};
#endif

std::unique_ptr<Kernel> PrepareMod(const KernelCtx &c, std::string *reason) {
  int64_t fmod_attr;
  if (!AttrInt(*c.node, "fmod", 0, &fmod_attr, reason)) return nullptr;
  const bool fmod = fmod_attr != 0;
#if defined(__x86_64__)
  if (c.in[0]->dtype == ElemType::kDouble && vmath::ActiveIsa() != vmath::Isa::kBaseline) {
    BroadcastN bc = MakeBroadcast2(c.in[0]->dims, c.in[1]->dims, c.out[0].dims);
    if (fmod) return std::make_unique<ModF64Kernel<true>>(std::move(bc));
    return std::make_unique<ModF64Kernel<false>>(std::move(bc));
  }
#endif
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsInt<S>) {
      k = MakeBinary<S, S>(c, [fmod](S a, S b) { return IntMod(a, b, fmod); });
    } else if constexpr (kIsFloat<S>) {
      k = MakeBinary<S, S>(c, [fmod](S a, S b) {
        return Num<S>::Store(FloatMod(Num<S>::Load(a), Num<S>::Load(b), fmod));
      });
    }
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- BitwiseNot ----

template <class S>
class BitNotKernel : public Kernel {
 public:
  explicit BitNotKernel(int64_t n) : n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *__restrict x = static_cast<const S *>(in[0]);
    S *__restrict y = static_cast<S *>(out[0]);
    for (int64_t i = 0; i < n_; ++i) y[i] = static_cast<S>(~x[i]);
    return true;
  }

 private:
  int64_t n_;
};

bool InferSameAsInput(InferCtx *c, std::string *reason) {
  if (!IsIntType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

std::unique_ptr<Kernel> PrepareBitNot(const KernelCtx &c, std::string *reason) {
  std::unique_ptr<Kernel> k;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsInt<S>) k = std::make_unique<BitNotKernel<S>>(c.out[0].NumElements());
  });
  if (!k) *reason = DtypeNotSupported(c.in[0]->dtype);
  return k;
}

// ---- variadic Sum / Mean: accumulate in the output (float32 for 16-bit types would round per step; the
// accumulator is the compute type of the storage) ----

template <class S, bool kMean>
class SumKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  SumKernel(std::vector<BroadcastN> bcs, int64_t n) : bcs_(std::move(bcs)), n_(n), acc_(n) {
    size_t r = 1;
    for (const auto &b : bcs_) r = std::max(r, b.dims.size());
    ctr_.resize(r);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    S *y = static_cast<S *>(out[0]);
    constexpr bool kInOutput = std::is_same<C, S>::value;  // float / double: accumulate in the output itself
    C *acc = kInOutput ? reinterpret_cast<C *>(y) : acc_.data();
    // Input 0 is assigned (x0 + x1 + ..., like the reference: a lone -0 stays -0), the others added; float32 /
    // float64 Mean scales in the last input's pass ((acc + x) * scale, the same operations as a pass of its own).
    const C scale = kMean ? C(1) / static_cast<C>(bcs_.size()) : C(1);
    const bool fused_scale = kMean && kInOutput && bcs_.size() > 1;
    for (size_t k = 0; k < bcs_.size(); ++k) {
      const S *x = static_cast<const S *>(in[k]);
      if (k == 0) AddInput<true, false>(x, bcs_[k], acc, scale);
      else if (fused_scale && k + 1 == bcs_.size()) AddInput<false, true>(x, bcs_[k], acc, scale);
      else AddInput<false, false>(x, bcs_[k], acc, scale);
    }
    if ((kMean && !fused_scale) || !kInOutput)
      for (int64_t i = 0; i < n_; ++i) y[i] = Num<S>::Store(kMean && !fused_scale ? acc[i] * scale : acc[i]);
    return true;
  }

 private:
  template <bool kAssign, bool kScale>
  void AddInput(const S *x, const BroadcastN &bc, C *acc, C scale) {
    const int64_t is = bc.strides[1].back();
    ForEachRunN(bc, ctr_.data(), [&](const int64_t *off, int64_t oo, int64_t n) {
      C *__restrict po = acc + oo;
      const S *__restrict px = x + off[1];
      if (is) {
        for (int64_t i = 0; i < n; ++i) {
          const C v = kAssign ? Num<S>::Load(px[i]) : po[i] + Num<S>::Load(px[i]);
          po[i] = kScale ? v * scale : v;
        }
      } else {
        const C xv = Num<S>::Load(*px);
        for (int64_t i = 0; i < n; ++i) {
          const C v = kAssign ? xv : po[i] + xv;
          po[i] = kScale ? v * scale : v;
        }
      }
    });
  }

  std::vector<BroadcastN> bcs_;
  int64_t n_;
  std::vector<C> acc_;
  std::vector<int64_t> ctr_;
};

template <bool kMean>
std::unique_ptr<Kernel> PrepareSum(const KernelCtx &c, std::string *reason) {
  std::vector<BroadcastN> bcs;
  for (size_t k = 0; k < c.in.size(); ++k) bcs.push_back(MakeBroadcast2(c.out[0].dims, c.in[k]->dims, c.out[0].dims));
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<SumKernel<S, kMean>>(std::move(bcs), c.out[0].NumElements());
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

}  // namespace

void RegisterLogicOps(std::vector<OpDef> *ops) {
  ops->push_back({"Xor", 2, 2, 1, 1, nullptr, InferNary<BoolOnly, true>, PrepareXor, true});
  ops->push_back({"BitwiseAnd", 2, 2, 1, 1, nullptr, InferNary<IntOnly, false>, PrepareBitwise<kAnd>, true});
  ops->push_back({"BitwiseOr", 2, 2, 1, 1, nullptr, InferNary<IntOnly, false>, PrepareBitwise<kOr>, true});
  ops->push_back({"BitwiseXor", 2, 2, 1, 1, nullptr, InferNary<IntOnly, false>, PrepareBitwise<kXor>, true});
  ops->push_back({"BitwiseNot", 1, 1, 1, 1, nullptr, InferSameAsInput, PrepareBitNot, true});
  ops->push_back({"BitShift", 2, 2, 1, 1, CheckBitShift, InferNary<IntOnly, false>, PrepareBitShift, true});
  ops->push_back({"Mod", 2, 2, 1, 1, CheckMod, InferNary<NumericType, false>, PrepareMod, true});
  ops->push_back({"Sum", 1, 64, 1, 1, nullptr, InferNary<FloatOnly, false>, PrepareSum<false>, true, false, /*variadic=*/true});
  ops->push_back({"Mean", 1, 64, 1, 1, nullptr, InferNary<FloatOnly, false>, PrepareSum<true>, true, false, /*variadic=*/true});
}

}  // namespace onnx
}  // namespace twin
