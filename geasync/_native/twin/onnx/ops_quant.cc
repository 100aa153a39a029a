// Quantisation: QuantizeLinear, DequantizeLinear (per-tensor, per-axis and blocked scales; 8/16-bit integer
// types), DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
// Rounding is half-to-even and results saturate to the target type, as in the ONNX reference. Integer matrix
// products accumulate exactly in int32 (int_gemm.h: int16 operands minus zero points; the Conv variants through
// their own 8-bit im2col). 4-bit and float8 types are refused (the twin has no such dtypes).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "broadcast.h"
#include "elem.h"
#include "int_gemm.h"
#include "shared_const.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

// A kernel's input pointers padded with nullptr up to kMaxIns: optional inputs the node omits at the end are not
// in the plan's pointer array at all.
constexpr size_t kMaxIns = 9;
struct Ins {
  const void *p[kMaxIns] = {};
  Ins(const void *const *in, size_t n) {
    for (size_t i = 0; i < n && i < kMaxIns; ++i) p[i] = in[i];
  }
  const void *operator[](size_t i) const { return p[i]; }
};

bool IsQuantType(ElemType t) {
  return t == ElemType::kUint8 || t == ElemType::kInt8 || t == ElemType::kUint16 || t == ElemType::kInt16;
}

// Where an element's scale / zero point lives: per tensor, per slice along axis, or per block along axis.
struct QuantLayout {
  int64_t outer = 1, len = 1, inner = 1;  // x viewed as [outer, len, inner] around axis
  enum { kTensor, kAxis, kBlock } kind = kTensor;
  int64_t block = 0, nblocks = 1;
};

bool MakeLayout(const Node &n, const TensorDesc &x, const TensorDesc &scale, QuantLayout *l, std::string *reason) {
  int64_t axis_attr, block;
  if (!AttrInt(n, "axis", 1, &axis_attr, reason) || !AttrInt(n, "block_size", 0, &block, reason)) return false;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (scale.NumElements() == 1 && scale.dims.size() <= 1) return true;  // per tensor
  int64_t axis;
  if (!NormalizeAxis(axis_attr, rank, false, &axis, reason)) return false;
  for (int64_t d = 0; d < axis; ++d) l->outer *= x.dims[d];
  l->len = x.dims[axis];
  for (int64_t d = axis + 1; d < rank; ++d) l->inner *= x.dims[d];
  if (block <= 0) {
    if (scale.dims.size() != 1 || scale.dims[0] != l->len) {
      *reason = "scale " + DescStr(scale) + " must be a scalar or hold one value per slice of axis " +
                std::to_string(axis) + " (" + std::to_string(l->len) + ")";
      return false;
    }
    l->kind = QuantLayout::kAxis;
    return true;
  }
  l->kind = QuantLayout::kBlock;
  l->block = block;
  l->nblocks = (l->len + block - 1) / block;
  bool ok = static_cast<int64_t>(scale.dims.size()) == rank;
  for (int64_t d = 0; ok && d < rank; ++d) ok = scale.dims[d] == (d == axis ? l->nblocks : x.dims[d]);
  if (!ok) {
    *reason = "blocked scale " + DescStr(scale) + " does not match input " + DescStr(x) + " with block_size " +
              std::to_string(block) + " on axis " + std::to_string(axis);
    return false;
  }
  return true;
}

// Calls f(element index, parameter index) for every element of x, in order.
template <class F>
inline void ForEachParam(const QuantLayout &l, F &&f) {
  if (l.kind == QuantLayout::kTensor) {
    const int64_t n = l.outer * l.len * l.inner;
    for (int64_t e = 0; e < n; ++e) f(e, int64_t(0));
    return;
  }
  int64_t e = 0;
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t a = 0; a < l.len; ++a) {
      const int64_t p = l.kind == QuantLayout::kAxis ? a : (o * l.nblocks + a / l.block) * l.inner;
      const int64_t step = l.kind == QuantLayout::kAxis ? 0 : 1;
      for (int64_t i = 0; i < l.inner; ++i, ++e) f(e, p + step * i);
    }
}

template <class T>
double LoadAsDouble(const void *p, int64_t i) {
  return static_cast<double>(Num<T>::Load(static_cast<const T *>(p)[i]));
}

double LoadAny(ElemType t, const void *p, int64_t i) {
  double v = 0;
  VisitType(t, [&](auto tag) {
    using S = decltype(tag);
    v = LoadAsDouble<S>(p, i);
  });
  return v;
}

// Round half to even (the default rounding mode) without a libm call, so that loops over it vectorise: adding
// 1.5 * 2^52 (2^23 for float) leaves no fraction bits, for |v| below 2^51 (2^22); larger values are integers.
inline double RoundEven(double v) {
  constexpr double kShift = 6755399441055744.0;
  return std::fabs(v) < 2251799813685248.0 ? (v + kShift) - kShift : v;
}
inline float RoundEven(float v) {
  constexpr float kShift = 12582912.0f;
  return std::fabs(v) < 4194304.0f ? (v + kShift) - kShift : v;
}

// Round half to even, then saturate into [lo, hi]; NaN maps to lo like the reference's int32 conversion.
// (Clamping first rounds the same: the bounds are integers and rounding is monotonic.)
inline int64_t RoundSat(double v, int64_t lo, int64_t hi) {
  if (!(v == v)) return lo;
  if (v <= static_cast<double>(lo)) return lo;
  if (v >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(RoundEven(v));
}

void TypeRange(ElemType t, int64_t *lo, int64_t *hi) {
  switch (t) {
    case ElemType::kUint8: *lo = 0, *hi = 255; break;
    case ElemType::kInt8: *lo = -128, *hi = 127; break;
    case ElemType::kUint16: *lo = 0, *hi = 65535; break;
    case ElemType::kInt16: *lo = -32768, *hi = 32767; break;
    default: *lo = std::numeric_limits<int32_t>::min(), *hi = std::numeric_limits<int32_t>::max(); break;
  }
}

void StoreInt(ElemType t, void *p, int64_t i, int64_t v) {
  switch (t) {
    case ElemType::kUint8: static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v); break;
    case ElemType::kInt8: static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v); break;
    case ElemType::kUint16: static_cast<uint16_t *>(p)[i] = static_cast<uint16_t>(v); break;
    case ElemType::kInt16: static_cast<int16_t *>(p)[i] = static_cast<int16_t>(v); break;
    default: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); break;
  }
}

bool ZeroPointMatches(const InferCtx *c, size_t zp, const TensorDesc &scale, std::string *reason) {
  if (!c->has(zp)) return true;
  if (c->in[zp]->dims != scale.dims && !(c->in[zp]->NumElements() == 1 && scale.NumElements() == 1)) {
    *reason = "zero point " + DescStr(*c->in[zp]) + " must have the scale's shape " + DescStr(scale);
    return false;
  }
  return true;
}

// Records how many inputs the node has, so that Run can tell omitted trailing inputs apart.
template <class K>
std::unique_ptr<Kernel> Sized(std::unique_ptr<K> k, const KernelCtx &kc) {
  k->n_in_ = kc.in.size();
  return k;
}

// ---- QuantizeLinear ----

bool InferQuantize(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &s = *c->in[1];
  if (!IsFloatType(x.dtype) && x.dtype != ElemType::kInt32) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t out_attr = 0;
  if (!AttrInt(*c->node, "output_dtype", 0, &out_attr, reason)) return false;
  ElemType out = ElemType::kUint8;
  if (out_attr && !OnnxTypeToElemType(out_attr, &out)) {
    *reason = std::string("output_dtype ") + OnnxTypeName(out_attr) + " is not supported by the twin";
    return false;
  }
  if (c->has(2)) out = c->in[2]->dtype;
  if (!IsQuantType(out)) {
    *reason = std::string("quantised type ") + ElemTypeName(out) +
              " is not supported by the twin (uint8, int8, uint16, int16 are)";
    return false;
  }
  if (!ZeroPointMatches(c, 2, s, reason)) return false;
  if (x.IsStatic() && s.IsStatic()) {
    QuantLayout l;
    if (!MakeLayout(*c->node, x, s, &l, reason)) return false;
  }
  c->out[0] = {out, x.dims};
  return true;
}

// y = saturate(round_even(x / s) + zp) into an 8- or 16-bit type; NaN maps to the type's lowest value. Built twice: for
// the baseline instruction set and for AVX2, taken at run time.
template <class Y>
__attribute__((always_inline)) inline void QuantizeBody(const float *__restrict x, float s, float zp, Y *__restrict y,
                                                        int64_t n) {
  const float lo = std::numeric_limits<Y>::min(), hi = std::numeric_limits<Y>::max();
  for (int64_t i = 0; i < n; ++i) {
    float q = RoundEven(x[i] / s);
    q = q != q ? lo : std::min(hi, std::max(lo, q + zp));
    y[i] = static_cast<Y>(static_cast<int32_t>(q));
  }
}
template <class Y>
void QuantizeBaseline(const float *x, float s, float zp, Y *y, int64_t n) { QuantizeBody(x, s, zp, y, n); }
#if defined(__x86_64__)
// 32 elements a step: x / s clamped in float to [lo - zp, hi - zp] (maxps returns its second operand for a NaN, so
// NaN lands on lo - zp), converted with the current rounding mode (nearest, half to even), plus zp, packed to 8 bits.
template <class Y>
__attribute__((target("avx2"))) void QuantizeAvx2(const float *x, float s, float zp, Y *y, int64_t n) {
  constexpr bool kSigned = std::is_signed<Y>::value;
  const float lo = std::numeric_limits<Y>::min(), hi = std::numeric_limits<Y>::max();
  const __m256 vs = _mm256_set1_ps(s), vlo = _mm256_set1_ps(lo - zp), vhi = _mm256_set1_ps(hi - zp);
  const __m256i vzp = _mm256_set1_epi32(static_cast<int32_t>(zp)), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), vs);
      q[k] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, vlo), vhi)), vzp);
    }
    if constexpr (sizeof(Y) == 2) {  // already clamped to Y's range: the saturating packs are exact
      for (int k = 0; k < 4; k += 2) {
        const __m256i w = kSigned ? _mm256_packs_epi32(q[k], q[k + 1]) : _mm256_packus_epi32(q[k], q[k + 1]);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i + 8 * k), _mm256_permute4x64_epi64(w, 0xD8));
      }
    } else {
      const __m256i ab = _mm256_packs_epi32(q[0], q[1]), cd = _mm256_packs_epi32(q[2], q[3]);
      const __m256i bytes = kSigned ? _mm256_packs_epi16(ab, cd) : _mm256_packus_epi16(ab, cd);
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
  }
  QuantizeBody(x + i, s, zp, y + i, n - i);
}

// The same with 16 lanes (1M values: 1.8x -> 1.0x of onnxruntime on an AVX-512 EPYC; multiplying by 1 / s with a
// division only near halves was slower there), clamped to [lo, hi] before narrowing, so vpmovdb's truncation is
// exact. The masked forms with a full mask: GCC 12 warns -Wmaybe-uninitialized on the unmasked ones.
template <class Y>
__attribute__((target("avx512f"))) void QuantizeAvx512(const float *x, float s, float zp, Y *y, int64_t n) {
  const float lo = std::numeric_limits<Y>::min(), hi = std::numeric_limits<Y>::max();
  const __m512 vs = _mm512_set1_ps(s), vlo = _mm512_set1_ps(lo - zp), vhi = _mm512_set1_ps(hi - zp);
  const __m512i vzp = _mm512_set1_epi32(static_cast<int32_t>(zp));
  const __mmask16 all = 0xFFFF;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), vs);
    const __m512 c = _mm512_mask_min_ps(v, all, _mm512_mask_max_ps(v, all, v, vlo), vhi);  // NaN -> lo - zp
    const __m512i q = _mm512_add_epi32(_mm512_mask_cvtps_epi32(vzp, all, c), vzp);
    if constexpr (sizeof(Y) == 2)
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm512_mask_cvtepi32_epi16(_mm256_setzero_si256(), all, q));
    else
      _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), _mm512_mask_cvtepi32_epi8(_mm_setzero_si128(), all, q));
  }
  QuantizeBody(x + i, s, zp, y + i, n - i);
}
#endif
template <class Y>
void QuantizeFloats(const float *x, float s, float zp, Y *y, int64_t n) {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return QuantizeAvx512(x, s, zp, y, n);
  if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return QuantizeAvx2(x, s, zp, y, n);
#endif
  QuantizeBaseline(x, s, zp, y, n);
}

class QuantizeKernel : public Kernel {
 public:
  size_t n_in_ = kMaxIns;  // inputs the node actually has (set by the prepare function)
  QuantizeKernel(QuantLayout l, ElemType xt, ElemType st, ElemType zt, ElemType yt)
      : l_(l), xt_(xt), st_(st), zt_(zt), yt_(yt) {
    TypeRange(yt, &lo_, &hi_);
  }
  bool Run(const void *const *in_raw, void *const *out, std::string *) override {
    const Ins in(in_raw, n_in_);
    const bool fast = l_.kind == QuantLayout::kTensor && xt_ == ElemType::kFloat && st_ == ElemType::kFloat;
    if (fast) {  // the common case: one float scale
      const float *x = static_cast<const float *>(in[0]);
      const float s = *static_cast<const float *>(in[1]);
      const float zp = in[2] ? static_cast<float>(LoadAny(zt_, in[2], 0)) : 0.f;
      const int64_t n = l_.outer * l_.len * l_.inner;
      if (yt_ == ElemType::kUint8) return QuantizeFloats(x, s, zp, static_cast<uint8_t *>(out[0]), n), true;
      if (yt_ == ElemType::kInt8) return QuantizeFloats(x, s, zp, static_cast<int8_t *>(out[0]), n), true;
      // 16-bit activations (quantize_static with QUInt16 / QInt16): the per-element loop measured 30x onnxruntime.
      if (yt_ == ElemType::kUint16) return QuantizeFloats(x, s, zp, static_cast<uint16_t *>(out[0]), n), true;
      if (yt_ == ElemType::kInt16) return QuantizeFloats(x, s, zp, static_cast<int16_t *>(out[0]), n), true;
    }
    ForEachParam(l_, [&](int64_t e, int64_t p) {
      const float x = static_cast<float>(LoadAny(xt_, in[0], e));
      const float s = static_cast<float>(LoadAny(st_, in[1], p));
      const int64_t zp = in[2] ? static_cast<int64_t>(LoadAny(zt_, in[2], p)) : 0;
      const float q = x / s;
      const int64_t qi = q == q ? RoundSat(q, -(int64_t(1) << 31), (int64_t(1) << 31) - 1) : -(int64_t(1) << 31);
      StoreInt(yt_, out[0], e, std::min(hi_, std::max(lo_, qi + zp)));
    });
    return true;
  }

 private:
  QuantLayout l_;
  ElemType xt_, st_, zt_, yt_;
  int64_t lo_, hi_;
};

std::unique_ptr<Kernel> PrepareQuantize(const KernelCtx &kc, std::string *reason) {
  QuantLayout l;
  if (!MakeLayout(*kc.node, *kc.in[0], *kc.in[1], &l, reason)) return nullptr;
  if (l.kind == QuantLayout::kTensor) l.outer = kc.in[0]->NumElements(), l.len = l.inner = 1;
  const ElemType zt = kc.in.size() > 2 && kc.in[2] ? kc.in[2]->dtype : ElemType::kUint8;
  return Sized(std::make_unique<QuantizeKernel>(l, kc.in[0]->dtype, kc.in[1]->dtype, zt, kc.out[0].dtype), kc);
}

// ---- DequantizeLinear ----

bool InferDequantize(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &s = *c->in[1];
  if (!IsQuantType(x.dtype) && x.dtype != ElemType::kInt32) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  if (!IsFloatType(s.dtype)) {
    *reason = DtypeNotSupported(s.dtype, "scale");
    return false;
  }
  if (c->has(2) && c->in[2]->dtype != x.dtype) {
    *reason = "zero point dtype " + std::string(ElemTypeName(c->in[2]->dtype)) + " differs from the input's";
    return false;
  }
  int64_t out_attr = 0;
  if (!AttrInt(*c->node, "output_dtype", 0, &out_attr, reason)) return false;
  ElemType out = s.dtype;
  if (out_attr && (!OnnxTypeToElemType(out_attr, &out) || !IsFloatType(out))) {
    *reason = std::string("output_dtype ") + OnnxTypeName(out_attr) + " is not supported";
    return false;
  }
  if (!ZeroPointMatches(c, 2, s, reason)) return false;
  if (x.IsStatic() && s.IsStatic()) {
    QuantLayout l;
    if (!MakeLayout(*c->node, x, s, &l, reason)) return false;
  }
  c->out[0] = {out, x.dims};
  return true;
}

template <class Y>
class DequantizeKernel : public Kernel {
 public:
  size_t n_in_ = kMaxIns;  // inputs the node actually has (set by the prepare function)
  DequantizeKernel(QuantLayout l, ElemType xt, ElemType st) : l_(l), xt_(xt), st_(st) {}
  bool Run(const void *const *in_raw, void *const *out, std::string *) override {
    const Ins in(in_raw, n_in_);
    Y *y = static_cast<Y *>(out[0]);
    // 8- and 16-bit inputs with a float32 scale in loops that vectorise (16-bit through the per-element loop
    // measured 50x onnxruntime per tensor, 3x per axis).
    if (st_ == ElemType::kFloat && (l_.kind == QuantLayout::kTensor || l_.kind == QuantLayout::kAxis)) {
      switch (xt_) {
        case ElemType::kUint8: return Fast(static_cast<const uint8_t *>(in[0]), in[1], in[2], y);
        case ElemType::kInt8: return Fast(static_cast<const int8_t *>(in[0]), in[1], in[2], y);
        case ElemType::kUint16: return Fast(static_cast<const uint16_t *>(in[0]), in[1], in[2], y);
        case ElemType::kInt16: return Fast(static_cast<const int16_t *>(in[0]), in[1], in[2], y);
        default: break;
      }
    }
    ForEachParam(l_, [&](int64_t e, int64_t p) {
      const float dx = static_cast<float>(LoadAny(xt_, in[0], e)) - (in[2] ? static_cast<float>(LoadAny(xt_, in[2], p)) : 0.f);
      y[e] = Num<Y>::Store(static_cast<typename Num<Y>::C>(dx * static_cast<float>(LoadAny(st_, in[1], p))));
    });
    return true;
  }

 private:
  template <class X>
  bool Fast(const X *x, const void *scale, const void *zero, Y *y) {
    const float *sc = static_cast<const float *>(scale);
    const X *zp = static_cast<const X *>(zero);
    if (l_.kind == QuantLayout::kAxis) return PerAxis(x, sc, zp, y);
    const float s = *sc, z = zp ? static_cast<float>(*zp) : 0.f;
    const int64_t n = l_.outer * l_.len * l_.inner;
    for (int64_t i = 0; i < n; ++i) y[i] = Num<Y>::Store((static_cast<float>(x[i]) - z) * s);
    return true;
  }

  // 8- or 16-bit input, float32 scale per slice of the axis: the general loop's arithmetic ((x - zero point) * scale in
  // float) in loops that vectorise; along the last axis over each row's slices (per element a LoadAny call per value
  // measured 3.5x onnxruntime).
  template <class X>
  bool PerAxis(const X *x, const float *scale, const X *zero, Y *y) {
    zp_.assign(static_cast<size_t>(l_.len), 0.f);
    if (zero)
      for (int64_t c = 0; c < l_.len; ++c) zp_[c] = static_cast<float>(zero[c]);
    const float *zp = zp_.data();
    for (int64_t o = 0; o < l_.outer; ++o) {
      const X *xo = x + o * l_.len * l_.inner;
      Y *yo = y + o * l_.len * l_.inner;
      if (l_.inner == 1) {
        for (int64_t c = 0; c < l_.len; ++c) yo[c] = Num<Y>::Store((static_cast<float>(xo[c]) - zp[c]) * scale[c]);
        continue;
      }
      for (int64_t c = 0; c < l_.len; ++c) {
        const float z = zp[c], sc = scale[c];
        const X *xr = xo + c * l_.inner;
        Y *yr = yo + c * l_.inner;
        for (int64_t i = 0; i < l_.inner; ++i) yr[i] = Num<Y>::Store((static_cast<float>(xr[i]) - z) * sc);
      }
    }
    return true;
  }

  QuantLayout l_;
  ElemType xt_, st_;
  std::vector<float> zp_;
};

std::unique_ptr<Kernel> PrepareDequantize(const KernelCtx &kc, std::string *reason) {
  QuantLayout l;
  if (!MakeLayout(*kc.node, *kc.in[0], *kc.in[1], &l, reason)) return nullptr;
  if (l.kind == QuantLayout::kTensor) l.outer = kc.in[0]->NumElements(), l.len = l.inner = 1;
  const ElemType xt = kc.in[0]->dtype, st = kc.in[1]->dtype;
  switch (kc.out[0].dtype) {
    case ElemType::kFloat: return Sized(std::make_unique<DequantizeKernel<float>>(l, xt, st), kc);
    case ElemType::kDouble: return Sized(std::make_unique<DequantizeKernel<double>>(l, xt, st), kc);
    case ElemType::kFloat16: return Sized(std::make_unique<DequantizeKernel<Half>>(l, xt, st), kc);
    case ElemType::kBf16: return Sized(std::make_unique<DequantizeKernel<BF16>>(l, xt, st), kc);
    default: *reason = DtypeNotSupported(kc.out[0].dtype, "output"); return nullptr;
  }
}

// ---- QuantizeLinear -> DequantizeLinear ("fake quantisation"), fused at plan level ----

// y = (round_even(clamp(x / s, lo - zq, hi - zq)) + (zq - zd)) * sd: the unfused pair's float arithmetic step by step
// (clamping before rounding rounds the same: the bounds are integers; the integers stay exact in float), with
// NaN -> lo - zq like QuantizeLinear's NaN -> lo. No 8-bit intermediate is written or read back.
struct FakeQuantParams {
  float s, lo, hi, shift, sd;  // lo / hi: the type's range minus zq; shift: zq - zd
};
__attribute__((always_inline)) inline void FakeQuantBody(const float *x, const FakeQuantParams &p, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / p.s;
    const float c = v != v ? p.lo : std::min(p.hi, std::max(p.lo, v));
    y[i] = (RoundEven(c) + p.shift) * p.sd;
  }
}
void FakeQuantBaseline(const float *x, const FakeQuantParams &p, float *y, int64_t n) { FakeQuantBody(x, p, y, n); }
#if defined(__x86_64__)
// maxps returns its second operand when either is NaN, so NaN lands on lo; roundps / roundscaleps with
// "nearest" round half to even.
__attribute__((target("avx2"))) void FakeQuantAvx2(const float *x, const FakeQuantParams &p, float *y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(p.s), vlo = _mm256_set1_ps(p.lo), vhi = _mm256_set1_ps(p.hi),
               vsh = _mm256_set1_ps(p.shift), vsd = _mm256_set1_ps(p.sd);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), vs);
    const __m256 r = _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(v, vlo), vhi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_add_ps(r, vsh), vsd));
  }
  FakeQuantBody(x + i, p, y + i, n - i);
}
__attribute__((target("avx512f"))) void FakeQuantAvx512(const float *x, const FakeQuantParams &p, float *y, int64_t n) {
  const __m512 vs = _mm512_set1_ps(p.s), vlo = _mm512_set1_ps(p.lo), vhi = _mm512_set1_ps(p.hi),
               vsh = _mm512_set1_ps(p.shift), vsd = _mm512_set1_ps(p.sd);
  const __mmask16 all = 0xFFFF;  // masked forms, as QuantizeAvx512
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), vs);
    const __m512 c = _mm512_mask_min_ps(v, all, _mm512_mask_max_ps(v, all, v, vlo), vhi);
    const __m512 r = _mm512_mask_roundscale_ps(c, all, c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_add_ps(r, vsh), vsd));
  }
  FakeQuantBody(x + i, p, y + i, n - i);
}
#endif

class FakeQuantKernel : public Kernel {
 public:
  FakeQuantKernel(FakeQuantParams p, int64_t n) : p_(p), n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const float *x = static_cast<const float *>(in[0]);
    float *y = static_cast<float *>(out[0]);
#if defined(__x86_64__)
    if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return FakeQuantAvx512(x, p_, y, n_), true;
    if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return FakeQuantAvx2(x, p_, y, n_), true;
#endif
    FakeQuantBaseline(x, p_, y, n_);
    return true;
  }
  bool InPlaceOver(size_t i) const override { return i == 0; }

 private:
  FakeQuantParams p_;
  int64_t n_;
};

}  // namespace

std::unique_ptr<Kernel> PrepareQuantDequant(const KernelCtx &q, const KernelCtx &dq) {
  // Per tensor only, float32 in and out, constant float32 scales and zero points (what quantize_static writes for
  // activations); anything else keeps the two kernels.
  auto scalar = [](const KernelCtx &c, size_t i) {
    return c.has(i) && c.in_data[i] && c.in[i]->NumElements() == 1 && c.in[i]->dims.size() <= 1;
  };
  if (q.in[0]->dtype != ElemType::kFloat || q.in[1]->dtype != ElemType::kFloat || dq.in[1]->dtype != ElemType::kFloat ||
      dq.out[0].dtype != ElemType::kFloat || !IsQuantType(q.out[0].dtype) || !scalar(q, 1) || !scalar(dq, 1) ||
      (q.has(2) && !scalar(q, 2)) || (dq.has(2) && !scalar(dq, 2)))
    return nullptr;
  const ElemType zt = q.out[0].dtype;
  if ((q.has(2) && q.in[2]->dtype != zt) || (dq.has(2) && dq.in[2]->dtype != zt)) return nullptr;
  int64_t lo, hi;
  TypeRange(zt, &lo, &hi);
  const float zq = q.has(2) ? static_cast<float>(LoadAny(zt, q.in_data[2], 0)) : 0.f;
  const float zd = dq.has(2) ? static_cast<float>(LoadAny(zt, dq.in_data[2], 0)) : 0.f;
  FakeQuantParams p;
  p.s = *static_cast<const float *>(q.in_data[1]);
  p.sd = *static_cast<const float *>(dq.in_data[1]);
  p.lo = static_cast<float>(lo) - zq;
  p.hi = static_cast<float>(hi) - zq;
  p.shift = zq - zd;
  return std::make_unique<FakeQuantKernel>(p, q.in[0]->NumElements());
}

namespace {

// ---- DynamicQuantizeLinear ----

bool InferDynamicQuantize(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (x.dtype != ElemType::kFloat) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  c->out[0] = {ElemType::kUint8, x.dims};
  c->out[1] = {ElemType::kFloat, {}};
  c->out[2] = {ElemType::kUint8, {}};
  return true;
}

// min(0, x...) and max(0, x...); a NaN never wins (x > m ? x : m, which is also what maxps computes).
inline void DynamicRangeLoop(const float *x, int64_t n, float *mn, float *mx) {
  for (int64_t i = 0; i < n; ++i) {
    *mx = x[i] > *mx ? x[i] : *mx;
    *mn = x[i] < *mn ? x[i] : *mn;
  }
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void DynamicRangeAvx2(const float *x, int64_t n, float *mn, float *mx) {
  __m256 vmx = _mm256_setzero_ps(), vmn = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmx = _mm256_max_ps(v, vmx);
    vmn = _mm256_min_ps(v, vmn);
  }
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, vmn);
  _mm256_store_ps(lanes + 8, vmx);
  DynamicRangeLoop(lanes, 8, mn, mx);  // every lane only ever holds 0 or an element of x
  DynamicRangeLoop(lanes + 8, 8, mn, mx);
  DynamicRangeLoop(x + i, n - i, mn, mx);
}
// 32 values a step in two accumulator pairs (one pair waits on the max / min latency); NaN skipped as above.
__attribute__((target("avx512f"))) void DynamicRangeAvx512(const float *x, int64_t n, float *mn, float *mx) {
  const __mmask16 all = 0xFFFF;
  __m512 mx0 = _mm512_setzero_ps(), mx1 = mx0, mn0 = mx0, mn1 = mx0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    mx0 = _mm512_mask_max_ps(mx0, all, a, mx0);
    mn0 = _mm512_mask_min_ps(mn0, all, a, mn0);
    mx1 = _mm512_mask_max_ps(mx1, all, b, mx1);
    mn1 = _mm512_mask_min_ps(mn1, all, b, mn1);
  }
  alignas(64) float lanes[64];
  _mm512_store_ps(lanes, mn0);
  _mm512_store_ps(lanes + 16, mn1);
  _mm512_store_ps(lanes + 32, mx0);
  _mm512_store_ps(lanes + 48, mx1);
  DynamicRangeLoop(lanes, 64, mn, mx);  // every lane only ever holds 0 or an element of x
  DynamicRangeLoop(x + i, n - i, mn, mx);
}
#endif
void DynamicRange(const float *x, int64_t n, float *mn, float *mx) {
#if defined(__x86_64__)
  if (vmath::ActiveIsa() == vmath::Isa::kAvx512) return DynamicRangeAvx512(x, n, mn, mx);
  if (vmath::ActiveIsa() != vmath::Isa::kBaseline) return DynamicRangeAvx2(x, n, mn, mx);
#endif
  DynamicRangeLoop(x, n, mn, mx);
}

class DynamicQuantizeKernel : public Kernel {
 public:
  size_t n_in_ = kMaxIns;  // inputs the node actually has (set by the prepare function)
  explicit DynamicQuantizeKernel(int64_t n) : n_(n) {}
  bool Run(const void *const *in_raw, void *const *out, std::string *) override {
    const Ins in(in_raw, n_in_);
    const float *x = static_cast<const float *>(in[0]);
    float mx = 0.f, mn = 0.f;
    DynamicRange(x, n_, &mn, &mx);
    const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    const float zp = std::nearbyint(std::max(0.f, std::min(255.f, 0.f - mn / scale)));
    QuantizeFloats(x, scale, zp, static_cast<uint8_t *>(out[0]), n_);
    *static_cast<float *>(out[1]) = scale;
    *static_cast<uint8_t *>(out[2]) = static_cast<uint8_t>(zp);
    return true;
  }

 private:
  int64_t n_;
};

std::unique_ptr<Kernel> PrepareDynamicQuantize(const KernelCtx &kc, std::string *) {
  return Sized(std::make_unique<DynamicQuantizeKernel>(kc.in[0]->NumElements()), kc);
}

// ---- Requantisation of int32 sums to 8 bits, 8 at a time on AVX2 ----

bool RequantAvx2() {
#if defined(__x86_64__)
  return vmath::ActiveIsa() != vmath::Isa::kBaseline;
#else
  return false;
#endif
}

// QLinearMatMul's rule: y = saturate(round_even(double(acc) * double(f) + yzp)), in double as the reference
// (int32 times float32 is float64 there). Branch-free: NaN -> lo as RoundSat, clamped values fit the shift.
template <class Y>
void RequantRowDouble(const int32_t *__restrict a, const float *__restrict f, double yzp, double lo, double hi,
                      Y *__restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double d = static_cast<double>(a[i]) * static_cast<double>(f[i]);
    d += yzp;
    d = d != d ? lo : d;
    d = d < lo ? lo : d;
    d = d > hi ? hi : d;
    y[i] = static_cast<Y>(static_cast<int32_t>((d + 6755399441055744.0) - 6755399441055744.0));
  }
}

// QLinearConv's rule for finite scales: the exact sum acc + bias rounded once to float, times f, plus yzp, in
// float; clamped first (rounds the same: the bounds are integers), then rounded half to even.
template <class Y>
void RequantPlaneFloat(const int32_t *__restrict a, double bias, float f, float yzp, float lo, float hi,
                       Y *__restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = static_cast<float>(static_cast<double>(a[i]) + bias) * f;
    v += yzp;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    y[i] = static_cast<Y>(static_cast<int32_t>((v + 12582912.0f) - 12582912.0f));
  }
}

#if defined(__x86_64__)
// 8 int32 already inside Y's range, stored as 8 bytes.
template <class Y>
__attribute__((target("avx2"))) inline void Store8(__m256i v, Y *y) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i b = std::is_signed<Y>::value ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
  _mm_storel_epi64(reinterpret_cast<__m128i *>(y), b);
}

// RequantRowDouble, 8 a step: maxpd returns its second operand for a NaN (lo); cvtpd2dq rounds half to even.
template <class Y>
__attribute__((target("avx2"))) void RequantRowDoubleAvx2(const int32_t *a, const float *f, double yzp, double lo,
                                                          double hi, Y *y, int64_t n) {
  const __m256d vz = _mm256_set1_pd(yzp), vlo = _mm256_set1_pd(lo), vhi = _mm256_set1_pd(hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + i));
    const __m256 fv = _mm256_loadu_ps(f + i);
    __m256d d0 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(v)), _mm256_cvtps_pd(_mm256_castps256_ps128(fv)));
    __m256d d1 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(fv, 1)));
    d0 = _mm256_min_pd(_mm256_max_pd(_mm256_add_pd(d0, vz), vlo), vhi);
    d1 = _mm256_min_pd(_mm256_max_pd(_mm256_add_pd(d1, vz), vlo), vhi);
    Store8(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtpd_epi32(d0)), _mm256_cvtpd_epi32(d1), 1), y + i);
  }
  RequantRowDouble(a + i, f + i, yzp, lo, hi, y + i, n - i);
}

// RequantPlaneFloat, 8 a step: cvtpd2ps and cvtps2dq round to nearest even as the scalar casts and shift do.
template <class Y>
__attribute__((target("avx2"))) void RequantPlaneFloatAvx2(const int32_t *a, double bias, float f, float yzp,
                                                           float lo, float hi, Y *y, int64_t n) {
  const __m256d vb = _mm256_set1_pd(bias);
  const __m256 vf = _mm256_set1_ps(f), vz = _mm256_set1_ps(yzp), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + i));
    const __m128 s0 = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(v)), vb));
    const __m128 s1 = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1)), vb));
    __m256 x = _mm256_add_ps(_mm256_mul_ps(_mm256_insertf128_ps(_mm256_castps128_ps256(s0), s1, 1), vf), vz);
    x = _mm256_min_ps(_mm256_max_ps(x, vlo), vhi);
    Store8(_mm256_cvtps_epi32(x), y + i);
  }
  RequantPlaneFloat(a + i, bias, f, yzp, lo, hi, y + i, n - i);
}

// The same where every sum plus the bias is known to be within 2^24 in magnitude (the caller's bound from K and
// the bias): int32 -> float is then exact, as the double route's, in one conversion and no double lanes.
template <class Y>
__attribute__((target("avx2"))) void RequantPlaneSmallAvx2(const int32_t *a, int32_t bias, float f, float yzp,
                                                           float lo, float hi, Y *y, int64_t n) {
  const __m256i vb = _mm256_set1_epi32(bias);
  const __m256 vf = _mm256_set1_ps(f), vz = _mm256_set1_ps(yzp), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + i)), vb);
    __m256 x = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), vf), vz);
    x = _mm256_min_ps(_mm256_max_ps(x, vlo), vhi);
    Store8(_mm256_cvtps_epi32(x), y + i);
  }
  RequantPlaneFloat(a + i, static_cast<double>(bias), f, yzp, lo, hi, y + i, n - i);
}

// The fused QDQ Conv's requantisation (ConvViaGemm::RequantizeQdq), 8 a step with the scalar loop's operations in its
// order: double multiply, then add (no FMA: this target has none), one rounding to float, the float division,
// maxps / minps (a NaN lands on lo), cvtps2dq rounding half to even; the zero point is an integer, added exactly.
// Returns the values done (a multiple of 8).
template <class Y>
__attribute__((target("avx2"))) int64_t RequantQdqAvx2(const int32_t *a, double xw, double b, float ys, float lo,
                                                       float hi, int32_t zp, Y *y, int64_t n) {
  const __m256d vxw = _mm256_set1_pd(xw), vb = _mm256_set1_pd(b);
  const __m256 vys = _mm256_set1_ps(ys), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  const __m256i vzp = _mm256_set1_epi32(zp);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + i));
    const __m256d d0 = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(v)), vxw), vb);
    const __m256d d1 = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1)), vxw), vb);
    const __m256 f = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(d0)), _mm256_cvtpd_ps(d1), 1);
    const __m256 q = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(f, vys), vlo), vhi);
    Store8(_mm256_add_epi32(_mm256_cvtps_epi32(q), vzp), y + i);
  }
  return i;
}
#endif

// ---- MatMulInteger / QLinearMatMul ----

// Shapes of a numpy-style matmul: batch dims broadcast, 1-D operands promoted and their dim dropped.
bool MatMulShape(const TensorDesc &a, const TensorDesc &b, std::vector<int64_t> *out, std::string *reason) {
  if (a.dims.empty() || b.dims.empty()) {
    *reason = "matrix product operands must have rank >= 1";
    return false;
  }
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t k1 = ad.back(), k2 = bd[bd.size() - 2];
  if (k1 >= 0 && k2 >= 0 && k1 != k2) {
    *reason = "inner dimensions differ: " + ShapeStr(a.dims) + " x " + ShapeStr(b.dims);
    return false;
  }
  std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  const size_t r = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), r - ab.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  out->clear();
  for (size_t i = 0; i < r; ++i) {
    if (ab[i] != bb[i] && ab[i] != 1 && bb[i] != 1 && ab[i] >= 0 && bb[i] >= 0) {
      *reason = "batch dimensions do not broadcast: " + ShapeStr(a.dims) + " x " + ShapeStr(b.dims);
      return false;
    }
    out->push_back(ab[i] == 1 ? bb[i] : ab[i]);
  }
  if (a.dims.size() > 1) out->push_back(ad[ad.size() - 2]);
  if (b.dims.size() > 1) out->push_back(bd.back());
  return true;
}

bool IsInt8ish(ElemType t) { return t == ElemType::kUint8 || t == ElemType::kInt8; }

// Zero points as int32: one value (or none: 0) for all, else one per row / column.
void ZeroPoints(ElemType t, const void *zp, int64_t zp_n, std::vector<int32_t> *out) {
  out->assign(static_cast<size_t>(std::max<int64_t>(1, zp_n)), 0);
  for (size_t i = 0; zp && i < out->size(); ++i) (*out)[i] = static_cast<int32_t>(LoadAny(t, zp, i));
}

// Batched int32 products C[b] = (A[b] - a_zp[row]) (B[b] - b_zp[col]); zero points per row / per column. The
// shifted operands fit int16 (|v| <= 255) and are multiplied exactly by intgemm::Gemm; a constant B is packed once.
class IntMatMul {
 public:
  bool Init(const TensorDesc &a, const TensorDesc &b, std::string *reason) {
    at_ = a.dtype;
    bt_ = b.dtype;
    std::vector<int64_t> ad = a.dims, bd = b.dims;
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    M_ = ad[ad.size() - 2], K_ = ad.back(), N_ = bd.back();
    std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
    const size_t r = std::max(ab.size(), bb.size());
    ab.insert(ab.begin(), r - ab.size(), 1);
    bb.insert(bb.begin(), r - bb.size(), 1);
    batch_ = 1;
    b_count_ = 1;
    std::vector<int64_t> outb(r);
    for (size_t i = 0; i < r; ++i) outb[i] = ab[i] == 1 ? bb[i] : ab[i], batch_ *= outb[i], b_count_ *= bb[i];
    // Which A and B matrix each output batch multiplies (broadcast dims repeat).
    a_idx_.assign(batch_, 0);
    b_idx_.assign(batch_, 0);
    std::vector<int64_t> as = Strides(ab), bs = Strides(bb), pos(r, 0);
    for (int64_t q = 0; q < batch_; ++q) {
      int64_t ao = 0, bo = 0;
      for (size_t i = 0; i < r; ++i) {
        if (ab[i] != 1) ao += pos[i] * as[i];
        if (bb[i] != 1) bo += pos[i] * bs[i];
      }
      a_idx_[q] = ao;
      b_idx_[q] = bo;
      for (size_t i = r; i-- > 0;) {
        if (++pos[i] < outb[i]) break;
        pos[i] = 0;
      }
    }
    (void)reason;
    return true;
  }
  // Packs every B matrix with its zero points now (both constant), so that Run only packs A. Shared with the
  // graph's other plans (one per sequence length), which pack the same from the same constants.
  void PrepackB(const void *B, const void *bzp, int64_t bzp_n) {
    const int64_t zp_at = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bzp));
    b_packed_ = SharedDerived<uint8_t>(
        B, "integer matmul B", {static_cast<int64_t>(bt_), zp_at, bzp_n, K_, N_, b_count_, quad_},
        [&](std::vector<uint8_t> *v) {
          std::vector<int32_t> z;
          ZeroPoints(bt_, bzp, bzp_n, &z);
          const size_t per = BBytes();
          v->assign(per * static_cast<size_t>(b_count_), 0);
          for (int64_t i = 0; i < b_count_; ++i)
            PackB(static_cast<const int8_t *>(B) + i * K_ * N_, z.data(), bzp_n > 1, v->data() + i * per);
        });
    prepacked_ = true;
  }
  size_t scratch_bytes() const { return ABytes() + (prepacked_ ? 0 : BBytes()); }
  int64_t rows() const { return M_; }
  int64_t cols() const { return N_; }
  int64_t batches() const { return batch_; }
  // a_zp / b_zp: nullptr (0), one value, or per row / per column. c: int32 [batch, M, N].
  void Run(const void *A, const void *B, const void *azp, int64_t azp_n, const void *bzp, int64_t bzp_n,
           int32_t *c, void *scratch) const {
    if (M_ == 0 || N_ == 0) return;
    uint8_t *ap = static_cast<uint8_t *>(scratch);
    uint8_t *bp = ap + ABytes();
    const size_t bsize = BBytes();
    ZeroPoints(at_, azp, azp_n, &azp_);
    if (!prepacked_) ZeroPoints(bt_, bzp, bzp_n, &bzp_);
    int64_t last_a = -1, last_b = -1;
    for (int64_t q = 0; q < batch_; ++q) {
      if (a_idx_[q] != last_a) {  // a broadcast A is packed once
        last_a = a_idx_[q];
        const void *src = static_cast<const int8_t *>(A) + last_a * M_ * K_;
        if (quad_) intgemm::QuadPackA(at_ == ElemType::kInt8, src, K_, M_, K_, azp_.data(), azp_n > 1, ap);
        else intgemm::PackA(at_ == ElemType::kInt8, src, K_, M_, K_, azp_.data(), azp_n > 1, A16(ap));
      }
      const uint8_t *bq = prepacked_ ? b_packed_->data() + static_cast<size_t>(b_idx_[q]) * bsize : nullptr;
      if (!prepacked_) {
        if (b_idx_[q] != last_b) {
          last_b = b_idx_[q];
          PackB(static_cast<const int8_t *>(B) + last_b * K_ * N_, bzp_.data(), bzp_n > 1, bp);
        }
        bq = bp;
      }
      if (quad_) intgemm::QuadGemm(M_, N_, K_, ap, bq, c + q * M_ * N_, N_);
      else intgemm::Gemm(M_, N_, K_, A16(ap), reinterpret_cast<const int16_t *>(bq), c + q * M_ * N_, N_);
    }
  }

 private:
  // Packed operands in bytes: the byte path's layouts (intgemm::QuadPath) or the int16 path's, 64-byte multiples.
  size_t ABytes() const { return quad_ ? intgemm::QuadABytes(M_, K_) : Pad(intgemm::PackedAElems(M_, K_)) * 2; }
  size_t BBytes() const { return quad_ ? intgemm::QuadBBytes(K_, N_) : Pad(intgemm::PackedBElems(K_, N_)) * 2; }
  static int16_t *A16(uint8_t *p) { return reinterpret_cast<int16_t *>(p); }
  void PackB(const void *src, const int32_t *zp, bool per, uint8_t *dst) const {
    if (quad_) intgemm::QuadPackB(bt_ == ElemType::kInt8, src, N_, K_, N_, zp, per, dst);
    else intgemm::PackB(bt_ == ElemType::kInt8, src, N_, K_, N_, zp, per, reinterpret_cast<int16_t *>(dst));
  }
  static size_t Pad(size_t n) { return (n + 31) / 32 * 32; }  // int16 elements, 64-byte multiples
  mutable std::vector<int32_t> azp_, bzp_;  // zero points as int32 (Run is not re-entrant)
  ElemType at_ = ElemType::kUint8, bt_ = ElemType::kUint8;
  int64_t M_ = 0, K_ = 0, N_ = 0, batch_ = 0, b_count_ = 1;
  std::vector<int64_t> a_idx_, b_idx_;
  std::shared_ptr<const std::vector<uint8_t>> b_packed_;  // the int16 or the byte layout (BBytes per matrix)
  bool prepacked_ = false;
  bool quad_ = intgemm::QuadPath();
};

// A constant input (and its optional zero point constant or absent): its packing can happen at prepare time.
bool ConstWithZp(const KernelCtx &kc, size_t x, size_t zp) {
  const auto data = [&](size_t i) { return i < kc.in_data.size() ? kc.in_data[i] : nullptr; };
  return data(x) && (!kc.has(zp) || data(zp));
}

bool InferMatMulInteger(InferCtx *c, std::string *reason) {
  const TensorDesc &a = *c->in[0], &b = *c->in[1];
  if (!IsInt8ish(a.dtype) || !IsInt8ish(b.dtype)) {
    *reason = "inputs must be uint8 or int8, got " + DescStr(a) + " and " + DescStr(b);
    return false;
  }
  std::vector<int64_t> dims;
  if (!MatMulShape(a, b, &dims, reason)) return false;
  c->out[0] = {ElemType::kInt32, dims};
  return true;
}

class MatMulIntegerKernel : public Kernel {
 public:
  size_t n_in_ = kMaxIns;  // inputs the node actually has (set by the prepare function)
  MatMulIntegerKernel(IntMatMul mm, int64_t azp_n, int64_t bzp_n) : mm_(std::move(mm)), azp_n_(azp_n), bzp_n_(bzp_n) {}
  size_t scratch_bytes() const override { return mm_.scratch_bytes(); }
  bool Run(const void *const *in_raw, void *const *out, std::string *) override {
    const Ins in(in_raw, n_in_);
    mm_.Run(in[0], in[1], in[2], azp_n_, in[3], bzp_n_, static_cast<int32_t *>(out[0]), scratch_);
    return true;
  }

 private:
  IntMatMul mm_;
  int64_t azp_n_, bzp_n_;
};

int64_t OptCount(const KernelCtx &kc, size_t i) {
  return i < kc.in.size() && kc.in[i] ? kc.in[i]->NumElements() : 0;
}

bool CheckZpCount(int64_t n, int64_t want, const char *what, std::string *reason) {
  if (n == 0 || n == 1 || n == want) return true;
  *reason = std::string(what) + " zero point must hold 1 or " + std::to_string(want) + " values, got " +
            std::to_string(n);
  return false;
}

std::unique_ptr<Kernel> PrepareMatMulInteger(const KernelCtx &kc, std::string *reason) {
  IntMatMul mm;
  if (!mm.Init(*kc.in[0], *kc.in[1], reason)) return nullptr;
  const int64_t an = OptCount(kc, 2), bn = OptCount(kc, 3);
  if (!CheckZpCount(an, mm.rows(), "A's", reason) || !CheckZpCount(bn, mm.cols(), "B's", reason)) return nullptr;
  if (ConstWithZp(kc, 1, 3)) mm.PrepackB(kc.in_data[1], kc.has(3) ? kc.in_data[3] : nullptr, bn);
  return Sized(std::make_unique<MatMulIntegerKernel>(std::move(mm), an, bn), kc);
}

bool InferQLinearMatMul(InferCtx *c, std::string *reason) {
  const TensorDesc &a = *c->in[0], &b = *c->in[3];
  if (!IsInt8ish(a.dtype) || !IsInt8ish(b.dtype)) {
    *reason = "inputs must be uint8 or int8, got " + DescStr(a) + " and " + DescStr(b);
    return false;
  }
  for (size_t i : {1, 4, 6})
    if (!IsFloatType(c->in[i]->dtype)) {
      *reason = DtypeNotSupported(c->in[i]->dtype, "scale");
      return false;
    }
  std::vector<int64_t> dims;
  if (!MatMulShape(a, b, &dims, reason)) return false;
  const ElemType yt = c->has(7) ? c->in[7]->dtype : a.dtype;
  if (!IsInt8ish(yt)) {
    *reason = DtypeNotSupported(yt, "output");
    return false;
  }
  c->out[0] = {yt, dims};
  return true;
}

class QLinearMatMulKernel : public Kernel {
 public:
  size_t n_in_ = kMaxIns;  // inputs the node actually has (set by the prepare function)
  QLinearMatMulKernel(IntMatMul mm, std::vector<ElemType> types, std::vector<int64_t> counts, ElemType yt)
      : mm_(std::move(mm)), types_(std::move(types)), counts_(std::move(counts)), yt_(yt) {
    TypeRange(yt, &lo_, &hi_);
  }
  size_t scratch_bytes() const override {
    return mm_.scratch_bytes() + static_cast<size_t>(mm_.batches() * mm_.rows() * mm_.cols()) * 4 + 64;
  }
  bool Run(const void *const *in_raw, void *const *out, std::string *) override {
    const Ins in(in_raw, n_in_);
    const size_t mm_bytes = (mm_.scratch_bytes() + 63) / 64 * 64;
    int32_t *acc = reinterpret_cast<int32_t *>(static_cast<uint8_t *>(scratch_) + mm_bytes);
    mm_.Run(in[0], in[3], in[2], counts_[2], in[5], counts_[5], acc, scratch_);
    const int64_t M = mm_.rows(), N = mm_.cols();
    scales_.resize(static_cast<size_t>(M + N));
    for (int64_t m = 0; m < M; ++m) scales_[m] = static_cast<float>(LoadAny(types_[1], in[1], counts_[1] == 1 ? 0 : m));
    for (int64_t n = 0; n < N; ++n)
      scales_[M + n] = static_cast<float>(LoadAny(types_[4], in[4], counts_[4] == 1 ? 0 : n));
    const double yzp = in[7] ? LoadAny(types_[7], in[7], 0) : 0.0;
    const float ys = static_cast<float>(LoadAny(types_[6], in[6], 0));
    if (yt_ == ElemType::kUint8) Requantize(acc, ys, yzp, static_cast<uint8_t *>(out[0]));
    else Requantize(acc, ys, yzp, static_cast<int8_t *>(out[0]));
    return true;
  }

 private:
  // The reference scales in float32: a_scale * b_scale / y_scale, then the int32 sum times that in double.
  template <class Y>
  void Requantize(const int32_t *acc, float ys, double yzp, Y *y) const {
    const int64_t M = mm_.rows(), N = mm_.cols();
    const float *as = scales_.data(), *bs = as + M;
    factors_.resize(static_cast<size_t>(N));
    const double lo = static_cast<double>(lo_), hi = static_cast<double>(hi_);
    const bool avx2 = RequantAvx2();
    (void)avx2;
    for (int64_t m = 0; m < M; ++m) {
      float *__restrict f = factors_.data();
      for (int64_t n = 0; n < N; ++n) f[n] = as[m] * bs[n] / ys;
      for (int64_t q = 0; q < mm_.batches(); ++q) {
        const int64_t e = (q * M + m) * N;
#if defined(__x86_64__)
        if (avx2) {
          RequantRowDoubleAvx2(acc + e, f, yzp, lo, hi, y + e, N);
          continue;
        }
#endif
        RequantRowDouble(acc + e, f, yzp, lo, hi, y + e, N);
      }
    }
  }
  mutable std::vector<float> factors_;  // one row's a_scale * b_scale / y_scale (Run is not re-entrant)
  std::vector<float> scales_;  // a_scale per row, then b_scale per column (Run is not re-entrant)
  IntMatMul mm_;
  std::vector<ElemType> types_;
  std::vector<int64_t> counts_;
  ElemType yt_;
  int64_t lo_, hi_;
};

std::unique_ptr<Kernel> PrepareQLinearMatMul(const KernelCtx &kc, std::string *reason) {
  IntMatMul mm;
  if (!mm.Init(*kc.in[0], *kc.in[3], reason)) return nullptr;
  std::vector<ElemType> types(8, ElemType::kUint8);
  std::vector<int64_t> counts(8, 0);
  for (size_t i = 0; i < 8; ++i) {
    if (i < kc.in.size() && kc.in[i]) types[i] = kc.in[i]->dtype;
    counts[i] = OptCount(kc, i);
  }
  if (!CheckZpCount(counts[1], mm.rows(), "a_scale/", reason) || !CheckZpCount(counts[2], mm.rows(), "A's", reason) ||
      !CheckZpCount(counts[4], mm.cols(), "b_scale/", reason) || !CheckZpCount(counts[5], mm.cols(), "B's", reason))
    return nullptr;
  if (counts[1] == 0 || counts[4] == 0 || counts[6] != 1 || counts[7] > 1) {
    *reason = "scales must be given; y_scale and y_zero_point must hold one value";
    return nullptr;
  }
  if (ConstWithZp(kc, 3, 5)) mm.PrepackB(kc.in_data[3], kc.has(5) ? kc.in_data[5] : nullptr, counts[5]);
  return Sized(std::make_unique<QLinearMatMulKernel>(std::move(mm), types, counts, kc.out[0].dtype), kc);
}

// ---- ConvInteger / QLinearConv: exact int32 sums by im2col and float32 GEMMs over short K slices ----

const OpDef &ConvOp() { return *FindOp("Conv"); }

bool InferConvVia(InferCtx *c, size_t x, size_t w, ElemType out, std::string *reason) {
  const TensorDesc &xd = *c->in[x], &wd = *c->in[w];
  if (!IsInt8ish(xd.dtype) || !IsInt8ish(wd.dtype)) {
    *reason = "X and W must be uint8 or int8, got " + DescStr(xd) + " and " + DescStr(wd);
    return false;
  }
  TensorDesc fx{ElemType::kDouble, xd.dims}, fw{ElemType::kDouble, wd.dims};
  InferCtx cc;
  cc.node = c->node;
  cc.opset = c->opset;
  cc.need_static = c->need_static;
  cc.in = {&fx, &fw};
  cc.in_data = {nullptr, nullptr};
  cc.out.resize(1);
  if (!ConvOp().infer(&cc, reason)) return false;
  c->out[0] = {out, cc.out[0].dims};
  return true;
}

bool InferConvInteger(InferCtx *c, std::string *reason) {
  return InferConvVia(c, 0, 1, ElemType::kInt32, reason);
}

bool InferQLinearConv(InferCtx *c, std::string *reason) {
  const ElemType yt = c->has(7) ? c->in[7]->dtype : c->in[0]->dtype;
  if (!IsInt8ish(yt)) {
    *reason = DtypeNotSupported(yt, "output");
    return false;
  }
  if (c->has(8) && c->in[8]->dtype != ElemType::kInt32) {
    *reason = "bias must be int32, got " + DescStr(*c->in[8]);
    return false;
  }
  return InferConvVia(c, 0, 3, yt, reason);
}

// Depthwise convolutions (one input and one output channel per group) sum straight from the padded image: out[o]
// = sum_t x[o * stride + tap[t]] * w'[t] - x_zp * sum_t w'[t], with w' = w - w_zp as int16 (|w'| <= 255) and x the
// raw 8-bit value (the padding holds x_zp's byte, so the correction covers it too): every product and the int32 sum
// are exact, as the reference's. The GEMM paths pack one 9-tap row per group, which measured 3x onnxruntime there.
// w: the channel's taps padded to an even count (the pad tap's weight 0); tap: its offsets (the pad repeats the last).
template <bool kSigned>
void DwRowScalar(const uint8_t *row, int64_t n, int64_t stride, const int16_t *w, const int64_t *tap, int64_t taps,
                 int32_t corr, int32_t *y) {
  for (int64_t o = 0; o < n; ++o) {
    const uint8_t *x = row + o * stride;
    int32_t acc = 0;
    for (int64_t t = 0; t < taps; ++t)
      acc += (kSigned ? static_cast<int32_t>(static_cast<int8_t>(x[tap[t]])) : static_cast<int32_t>(x[tap[t]])) * w[t];
    y[o] = acc - corr;
  }
}

#if defined(__x86_64__)
template <bool kSigned>
__attribute__((target("avx2"))) inline __m256i Widen16(__m128i v) {
  return kSigned ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

// Two taps a step: their bytes interleaved and widened to int16 pairs, vpmaddwd with the pair of weights (two exact
// products summed in int32). Stride 1: 16 outputs a step from two 16-byte loads; stride 2: 8 outputs, the even
// bytes of each 16-byte load. A row's last, partial step computes whole (into a local buffer, then copied): rows
// narrower than a step (14 or 7 wide in late MobileNet layers) stay vectorised. Its reads pass the row's last
// needed byte by at most 15: the padded image has 32 bytes of slack.
template <bool kSigned>
__attribute__((target("avx2"))) void DwRowAvx2(const uint8_t *row, int64_t n, int64_t stride, const int16_t *w,
                                               const int64_t *tap, int64_t taps2, int32_t corr, int32_t *y) {
  const __m256i vc = _mm256_set1_epi32(corr);
  alignas(32) int32_t tail[16];
  if (stride == 1) {
    for (int64_t o = 0; o < n; o += 16) {
      __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
      for (int64_t t = 0; t < taps2; t += 2) {
        int32_t pr;
        std::memcpy(&pr, w + t, 4);
        const __m256i wp = _mm256_set1_epi32(pr);
        const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + o + tap[t]));
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + o + tap[t + 1]));
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(Widen16<kSigned>(_mm_unpacklo_epi8(u, v)), wp));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(Widen16<kSigned>(_mm_unpackhi_epi8(u, v)), wp));
      }
      int32_t *dst = o + 16 <= n ? y + o : tail;
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), _mm256_sub_epi32(a0, vc));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 8), _mm256_sub_epi32(a1, vc));
      if (dst == tail) std::memcpy(y + o, tail, static_cast<size_t>(n - o) * 4);
    }
    return;
  }
  if (stride == 2) {
    const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int64_t o = 0; o < n; o += 8) {
      __m256i a0 = _mm256_setzero_si256();
      const uint8_t *x = row + 2 * o;
      for (int64_t t = 0; t < taps2; t += 2) {
        int32_t pr;
        std::memcpy(&pr, w + t, 4);
        const __m128i u = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + tap[t])), even);
        const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + tap[t + 1])), even);
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(Widen16<kSigned>(_mm_unpacklo_epi8(u, v)), _mm256_set1_epi32(pr)));
      }
      int32_t *dst = o + 8 <= n ? y + o : tail;
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), _mm256_sub_epi32(a0, vc));
      if (dst == tail) std::memcpy(y + o, tail, static_cast<size_t>(n - o) * 4);
    }
    return;
  }
  DwRowScalar<kSigned>(row, n, stride, w, tap, taps2, corr, y);
}
#endif

// Roles of the node's inputs, by position: X, W, their zero points and (QLinearConv) scales and bias.
struct ConvIO {
  int x, w, xzp, wzp, xs = -1, ws = -1, ys = -1, yzp = -1, bias = -1;
};

// ConvInteger / QLinearConv: the weights minus their zero points packed as int16 rows (once, when constant); each
// image and group copied once into a zero-point-padded 8-bit buffer, from which the columns are gathered straight
// into the packed int16 layout (b[tap][pixel] = xpad[tap offset + pixel offset] - zp; the reference convolves the
// shifted input padded with zeros) a chunk of pixels at a time, so that the chunk stays in cache for the GEMM
// (intgemm::Gemm: exact int32 sums as the reference's); QLinearConv then requantises each output channel.
class ConvViaGemm : public Kernel {
 public:
  size_t n_in_ = kMaxIns;  // inputs the node actually has (set by the prepare function)
  ConvViaGemm(const ConvShape &shape, ConvIO io, std::vector<ElemType> types, std::vector<int64_t> counts,
              ElemType yt)
      : s_(shape), io_(io), types_(std::move(types)), counts_(std::move(counts)), yt_(yt) {
    TypeRange(yt, &lo_, &hi_);
    cg_ = s_.C / s_.group;
    mg_ = s_.M / s_.group;
    K_ = cg_ * s_.k[0] * s_.k[1] * s_.k[2];
    P_ = s_.out[0] * s_.out[1] * s_.out[2];
    // The padded extent each output position's window reaches, per spatial dim.
    for (int i = 0; i < 3; ++i) e_[i] = std::max<int64_t>(1, (s_.out[i] - 1) * s_.s[i] + (s_.k[i] - 1) * s_.d[i] + 1);
    pplane_ = e_[0] * e_[1] * e_[2];
    tap_.reserve(static_cast<size_t>(K_));
    for (int64_t c = 0; c < cg_; ++c)
      for (int64_t a = 0; a < s_.k[0]; ++a)
        for (int64_t b = 0; b < s_.k[1]; ++b)
          for (int64_t e = 0; e < s_.k[2]; ++e)
            tap_.push_back(c * pplane_ + (a * s_.d[0] * e_[1] + b * s_.d[1]) * e_[2] + e * s_.d[2]);
    pos_.reserve(static_cast<size_t>(P_));
    for (int64_t o0 = 0; o0 < s_.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < s_.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < s_.out[2]; ++o2)
          pos_.push_back((o0 * s_.s[0] * e_[1] + o1 * s_.s[1]) * e_[2] + o2 * s_.s[2]);
    // The byte path for sums of 32 products or more: on depthwise 3x3 (9 taps, one row per group) its column sums
    // and corrections cost more than the bytes save (0.65-0.69 -> 0.77 ms on 128 channels of 56x56).
    quad_ = quad_ && K_ >= 32;
    dw_ = cg_ == 1 && mg_ == 1;
    if (dw_) {
      dw_k2_ = (K_ + 1) / 2 * 2;
      dw_tap_.assign(tap_.begin(), tap_.end());
      if (dw_k2_ > K_) dw_tap_.push_back(tap_.back());
      quad_ = false;
    }
    // Pixels per packed chunk: about 192 KB of packed columns, whole 16-column panels.
    const int64_t panel_bytes = std::max<int64_t>(1, quad_ ? intgemm::KQuads(K_) : intgemm::KPairs(K_)) * 64;
    chunk_ = std::min<int64_t>(std::max<int64_t>(1, 196608 / panel_bytes) * 16, (P_ + 15) / 16 * 16);
  }
  // Packs the weights with their zero points now (both constant).
  void PrepackW(const void *w, const void *wzp) {
    // shared with the graph's other plans (one per input size), which pack the same from the same constants
    const int64_t zp_at = static_cast<int64_t>(reinterpret_cast<uintptr_t>(wzp));
    const int64_t zn = io_.wzp >= 0 ? counts_[io_.wzp] : 0;
    const int64_t wt = static_cast<int64_t>(types_[io_.w]);
    const int64_t zt = static_cast<int64_t>(types_[io_.wzp >= 0 ? io_.wzp : io_.w]);
    if (dw_) {
      w_dw_ = SharedDerived<int16_t>(w, "integer depthwise conv W", {wt, zt, zp_at, zn, s_.M, K_},
                                     [&](std::vector<int16_t> *v) {
                                       v->assign(static_cast<size_t>(s_.M * dw_k2_), 0);
                                       PackDw(w, wzp, v->data());
                                     });
      return;
    }
    if (quad_) {
      wq_packed_ = SharedDerived<uint8_t>(w, "integer conv W bytes", {wt, zt, zp_at, zn, s_.M, K_, s_.group},
                                          [&](std::vector<uint8_t> *v) {
                                            v->assign(WqBytes(), 0);
                                            PackWq(w, wzp, v->data());
                                          });
      return;
    }
    w_packed_ = SharedDerived<int16_t>(w, "integer conv W", {wt, zt, zp_at, zn, s_.M, K_},
                                       [&](std::vector<int16_t> *v) {
                                         v->assign(intgemm::PackedAElems(s_.M, K_), 0);
                                         PackW(w, wzp, v->data());
                                       });
  }
  size_t scratch_bytes() const override { return Pad(WScratchBytes()) + Pad(PadBytes()) + Pad(BBytes()) + AccBytes(); }
  bool Run(const void *const *in_raw, void *const *out, std::string *) override {
    const Ins in(in_raw, n_in_);
    char *sp = static_cast<char *>(scratch_);
    char *w_scratch = sp;  // the weights packed per run when not constant
    const int16_t *wp = w_packed_ ? w_packed_->data() : reinterpret_cast<int16_t *>(w_scratch);
    const int16_t *wdw = w_dw_ ? w_dw_->data() : reinterpret_cast<int16_t *>(w_scratch);
    const uint8_t *wq = wq_packed_ ? wq_packed_->data() : reinterpret_cast<uint8_t *>(w_scratch);
    sp += Pad(WScratchBytes());
    uint8_t *xpad = reinterpret_cast<uint8_t *>(sp);
    sp += Pad(PadBytes());
    int16_t *bp = reinterpret_cast<int16_t *>(sp);
    uint8_t *bq = reinterpret_cast<uint8_t *>(sp);
    int32_t *acc = reinterpret_cast<int32_t *>(sp + Pad(BBytes()));  // QLinearConv's
    if (s_.N == 0 || s_.M == 0 || P_ == 0) return true;
    if (WScratchBytes() > 0) {
      const void *wzp = io_.wzp >= 0 ? in[io_.wzp] : nullptr;
      if (dw_) PackDw(in[io_.w], wzp, reinterpret_cast<int16_t *>(w_scratch));
      else if (quad_) PackWq(in[io_.w], wzp, reinterpret_cast<uint8_t *>(w_scratch));
      else PackW(in[io_.w], wzp, reinterpret_cast<int16_t *>(w_scratch));
    }
    const bool xs8 = types_[io_.x] == ElemType::kInt8;
    const int32_t xzp = io_.xzp >= 0 && in[io_.xzp] ? static_cast<int32_t>(LoadAny(types_[io_.xzp], in[io_.xzp], 0)) : 0;
    const uint8_t zbyte = static_cast<uint8_t>(xzp & 0xFF);  // the zero point's 8-bit pattern (int8 or uint8)
    std::memset(xpad, zbyte, static_cast<size_t>(PadBytes()));  // the slack the 16-byte reads may touch, too
    const int64_t plane = s_.in[0] * s_.in[1] * s_.in[2];
    const int64_t wrows = 2 * intgemm::KPairs(K_);
    for (int64_t n = 0; n < s_.N; ++n) {
      for (int64_t g = 0; g < s_.group; ++g) {
        const uint8_t *x = static_cast<const uint8_t *>(in[io_.x]) + (n * s_.C + g * cg_) * plane;
        FillPadded(x, zbyte, xpad + kSlack);
        const int64_t y_off = (n * s_.M + g * mg_) * P_;
        int32_t *c = io_.ys < 0 ? static_cast<int32_t *>(out[0]) + y_off : acc;
        if (dw_) {
          DwChannel(xpad + kSlack, wdw + g * dw_k2_, xs8, xzp, c);
          if (io_.ys >= 0) Requantize(in, acc, g * mg_, static_cast<char *>(out[0]) + y_off);
          continue;
        }
        for (int64_t p0 = 0; p0 < P_; p0 += chunk_) {
          const int64_t np = std::min(chunk_, P_ - p0);
          if (quad_) {
            intgemm::QuadPackBGather(xs8, xpad + kSlack, tap_.data(), K_, pos_.data(), p0, np, xzp, bq);
            intgemm::QuadGemm(mg_, np, K_, wq + g * intgemm::QuadABytes(mg_, K_), bq, c + p0, P_);
            continue;
          }
          intgemm::PackBGather(xs8, xpad + kSlack, tap_.data(), K_, pos_.data(), p0, np, xzp, bp);
          intgemm::Gemm(mg_, np, K_, wp + g * mg_ * wrows, bp, c + p0, P_);
        }
        if (io_.ys >= 0) Requantize(in, acc, g * mg_, static_cast<char *>(out[0]) + y_off);
      }
    }
    return true;
  }

 private:
  static constexpr int64_t kSlack = 32;  // readable bytes before and after the padded image (the gathers' reads)
  int64_t PadBytes() const { return cg_ * pplane_ + 2 * kSlack; }
  // One image's group of channels into the padded extent: x where the window sees the input, the zero point's
  // byte in the padding.
  void FillPadded(const uint8_t *x, uint8_t zbyte, uint8_t *dst) const {
    const int64_t lo2 = std::min(e_[2], s_.pb[2]), hi2 = std::max(lo2, std::min(e_[2], s_.pb[2] + s_.in[2]));
    for (int64_t c = 0; c < cg_; ++c)
      for (int64_t t0 = 0; t0 < e_[0]; ++t0)
        for (int64_t t1 = 0; t1 < e_[1]; ++t1) {
          uint8_t *row = dst + c * pplane_ + (t0 * e_[1] + t1) * e_[2];
          const int64_t i0 = t0 - s_.pb[0], i1 = t1 - s_.pb[1];
          if (i0 < 0 || i0 >= s_.in[0] || i1 < 0 || i1 >= s_.in[1] || hi2 == lo2) {
            std::memset(row, zbyte, static_cast<size_t>(e_[2]));
            continue;
          }
          std::memset(row, zbyte, static_cast<size_t>(lo2));
          CopyBytes(row + lo2, x + ((c * s_.in[0] + i0) * s_.in[1] + i1) * s_.in[2], static_cast<size_t>(hi2 - lo2));
          std::memset(row + hi2, zbyte, static_cast<size_t>(e_[2] - hi2));
        }
  }
  // One depthwise channel's int32 sums into c (P_ values), row by row of the output.
  void DwChannel(const uint8_t *xp, const int16_t *w, bool xs8, int32_t xzp, int32_t *c) const {
    int32_t wsum = 0;
    for (int64_t t = 0; t < K_; ++t) wsum += w[t];
    const int32_t corr = xzp * wsum;
    const int64_t n = s_.out[2], stride = s_.s[2], *tap = dw_tap_.data();
#if defined(__x86_64__)
    const bool avx2 = RequantAvx2();
#endif
    for (int64_t r = 0; r < s_.out[0] * s_.out[1]; ++r) {
      const uint8_t *row = xp + pos_[static_cast<size_t>(r * n)];
      int32_t *y = c + r * n;
#if defined(__x86_64__)
      if (avx2) {
        if (xs8) DwRowAvx2<true>(row, n, stride, w, tap, dw_k2_, corr, y);
        else DwRowAvx2<false>(row, n, stride, w, tap, dw_k2_, corr, y);
        continue;
      }
#endif
      if (xs8) DwRowScalar<true>(row, n, stride, w, tap, dw_k2_, corr, y);
      else DwRowScalar<false>(row, n, stride, w, tap, dw_k2_, corr, y);
    }
  }
  // Depthwise weights minus their zero points, one channel's taps padded to dw_k2_ (zeros).
  void PackDw(const void *w, const void *wzp, int16_t *dst) const {
    std::vector<int32_t> z;
    const int64_t zn = io_.wzp >= 0 ? counts_[io_.wzp] : 0;
    ZeroPoints(types_[io_.wzp >= 0 ? io_.wzp : io_.w], wzp, wzp ? zn : 0, &z);
    const bool per = wzp && zn > 1, ws8 = types_[io_.w] == ElemType::kInt8;
    for (int64_t m = 0; m < s_.M; ++m) {
      const int32_t zp = z.empty() ? 0 : z[static_cast<size_t>(per ? m : 0)];
      for (int64_t t = 0; t < dw_k2_; ++t) {
        int32_t v = 0;
        if (t < K_) {
          const int64_t i = m * K_ + t;
          v = (ws8 ? static_cast<int32_t>(static_cast<const int8_t *>(w)[i])
                   : static_cast<int32_t>(static_cast<const uint8_t *>(w)[i])) - zp;
        }
        dst[m * dw_k2_ + t] = static_cast<int16_t>(v);
      }
    }
  }
  // The byte path's scratch and layouts (intgemm::QuadPath): per group, the weight rows as one QuadPackA block.
  size_t WqBytes() const { return intgemm::QuadABytes(mg_, K_) * static_cast<size_t>(s_.group); }
  size_t WScratchBytes() const {
    if (dw_) return w_dw_ ? 0 : static_cast<size_t>(s_.M * dw_k2_ * 2);
    if (quad_) return wq_packed_ ? 0 : WqBytes();
    return w_packed_ ? 0 : intgemm::PackedAElems(s_.M, K_) * 2;
  }
  size_t BBytes() const { return dw_ ? 0 : quad_ ? intgemm::QuadBBytes(K_, chunk_) : intgemm::PackedBElems(K_, chunk_) * 2; }
  size_t AccBytes() const { return io_.ys >= 0 ? Pad(mg_ * P_ * 4) : 0; }
  void PackWq(const void *w, const void *wzp, uint8_t *dst) const {
    std::vector<int32_t> z;
    const int64_t zn = io_.wzp >= 0 ? counts_[io_.wzp] : 0;
    ZeroPoints(types_[io_.wzp >= 0 ? io_.wzp : io_.w], wzp, wzp ? zn : 0, &z);
    const bool per = wzp && zn > 1, ws8 = types_[io_.w] == ElemType::kInt8;
    for (int64_t g = 0; g < s_.group; ++g)
      intgemm::QuadPackA(ws8, static_cast<const int8_t *>(w) + g * mg_ * K_, K_, mg_, K_, z.data() + (per ? g * mg_ : 0),
                         per, dst + g * intgemm::QuadABytes(mg_, K_));
  }
  void PackW(const void *w, const void *wzp, int16_t *dst) const {
    std::vector<int32_t> z;
    const int64_t zn = io_.wzp >= 0 ? counts_[io_.wzp] : 0;
    ZeroPoints(types_[io_.wzp >= 0 ? io_.wzp : io_.w], wzp, wzp ? zn : 0, &z);
    intgemm::PackA(types_[io_.w] == ElemType::kInt8, w, K_, s_.M, K_, z.data(), wzp && zn > 1, dst);
  }
  // The reference's float32 requantisation of output channels m0 .. m0 + mg: (sum + bias) * (x_scale * w_scale /
  // y_scale) + y_zero_point, rounded half to even and saturated. y: the group's first output byte.
  void Requantize(const Ins &in, const int32_t *acc, int64_t m0, char *y) const {
    if (!qdq_.xw.empty()) {
      for (int64_t j = 0; j < mg_; ++j) {
        if (yt_ == ElemType::kUint8) RequantizeQdq(acc + j * P_, m0 + j, reinterpret_cast<uint8_t *>(y) + j * P_);
        else RequantizeQdq(acc + j * P_, m0 + j, reinterpret_cast<int8_t *>(y) + j * P_);
      }
      return;
    }
    const float xs = static_cast<float>(LoadAny(types_[io_.xs], in[io_.xs], 0));
    const float ys = static_cast<float>(LoadAny(types_[io_.ys], in[io_.ys], 0));
    const float yzp = io_.yzp >= 0 && in[io_.yzp] ? static_cast<float>(LoadAny(types_[io_.yzp], in[io_.yzp], 0)) : 0.f;
    for (int64_t j = 0; j < mg_; ++j) {
      const int64_t m = m0 + j;
      const float ws = static_cast<float>(LoadAny(types_[io_.ws], in[io_.ws], counts_[io_.ws] == 1 ? 0 : m));
      const int64_t b = io_.bias >= 0 && in[io_.bias] ? static_cast<const int32_t *>(in[io_.bias])[m] : 0;
      const float f = xs * ws / ys;
      if (yt_ == ElemType::kUint8) RequantizePlane(acc + j * P_, b, f, yzp, reinterpret_cast<uint8_t *>(y) + j * P_);
      else RequantizePlane(acc + j * P_, b, f, yzp, reinterpret_cast<int8_t *>(y) + j * P_);
    }
  }
  template <class Y>
  void RequantizePlane(const int32_t *__restrict acc, int64_t bias, float f, float yzp, Y *__restrict out) const {
    if (!std::isfinite(f) || !std::isfinite(yzp)) {  // NaN / inf scales: RoundSat's NaN rule, element by element
      for (int64_t i = 0; i < P_; ++i)
        out[i] = static_cast<Y>(RoundSat(static_cast<float>(acc[i] + bias) * f + yzp, lo_, hi_));
      return;
    }
    // Finite values: the exact integer sum (in double: |sum| < 2^33) rounded once to float, as the reference's
    // int -> float, then branch-free (RequantPlaneFloat).
    const float lo = static_cast<float>(lo_), hi = static_cast<float>(hi_);
#if defined(__x86_64__)
    if (RequantAvx2()) {
      // |sum| <= K * 255 * 255 (both operands minus their zero points are within 255 in magnitude)
      if (static_cast<double>(K_) * 65025.0 + std::fabs(static_cast<double>(bias)) < 16777216.0)
        return RequantPlaneSmallAvx2(acc, static_cast<int32_t>(bias), f, yzp, lo, hi, out, P_);
      return RequantPlaneFloatAvx2(acc, static_cast<double>(bias), f, yzp, lo, hi, out, P_);
    }
#endif
    RequantPlaneFloat(acc, static_cast<double>(bias), f, yzp, lo, hi, out, P_);
  }
  // DequantizeLinear -> Conv -> QuantizeLinear (PrepareQdqConv): the Conv's float value taken as the exact sum
  // times x_scale * w_scale[m] plus the float bias, rounded once to float, then QuantizeLinear's own float steps
  // (v / y_scale, clamped, rounded half to even, plus the zero point).
  template <class Y>
  void RequantizeQdq(const int32_t *__restrict acc, int64_t m, Y *__restrict out) const {
    const double xw = qdq_.xw[static_cast<size_t>(m)], b = qdq_.bias[static_cast<size_t>(m)];
    const float ys = qdq_.ys, zp = qdq_.yzp, lo = static_cast<float>(lo_) - zp, hi = static_cast<float>(hi_) - zp;
    int64_t i = 0;
#if defined(__x86_64__)
    if (RequantAvx2()) i = RequantQdqAvx2(acc, xw, b, ys, lo, hi, static_cast<int32_t>(zp), out, P_);
#endif
    for (; i < P_; ++i) {
      const float v = static_cast<float>(static_cast<double>(acc[i]) * xw + b);
      const float q = std::min(hi, std::max(lo, v / ys));  // maxps-style: a NaN quotient lands on lo
      out[i] = static_cast<Y>(static_cast<int32_t>(RoundEven(q) + zp));
    }
  }

 public:
  struct QdqRequant {
    std::vector<double> xw, bias;  // per output channel: x_scale * w_scale[m] (exact in double), the float bias
    float ys = 1.f, yzp = 0.f;
  } qdq_;

 private:
  static size_t Pad(int64_t bytes) { return static_cast<size_t>((bytes + 63) / 64 * 64); }
  ConvShape s_;
  ConvIO io_;
  std::vector<ElemType> types_;
  std::vector<int64_t> counts_;
  ElemType yt_;
  int64_t lo_, hi_;
  int64_t cg_ = 0, mg_ = 0, K_ = 0, P_ = 0;
  int64_t e_[3] = {1, 1, 1}, pplane_ = 1, chunk_ = 16;
  std::vector<int64_t> tap_, pos_;  // offsets into the padded image of each tap (c, kd, kh, kw) and output pixel
  std::shared_ptr<const std::vector<int16_t>> w_packed_;  // the constant weights, packed at prepare time
  std::shared_ptr<const std::vector<uint8_t>> wq_packed_;  // the same in the byte path's layout
  // Depthwise (one channel per group): direct sums (DwChannel), weights as int16 minus zero points.
  bool dw_ = false;
  int64_t dw_k2_ = 0;
  std::vector<int64_t> dw_tap_;
  std::shared_ptr<const std::vector<int16_t>> w_dw_;
  // AVX-512 VNNI: vpdpbusd's exact u8 x s8 quad sums (intgemm::QuadGemm), else the int16 GEMM; same int32 sums.
  bool quad_ = intgemm::QuadPath();  // and K_ >= 32 (the constructor)

 public:
  bool w_packed() const { return w_packed_ != nullptr || wq_packed_ != nullptr || w_dw_ != nullptr; }
};

std::unique_ptr<Kernel> PrepareConvVia(const KernelCtx &kc, ConvIO io, std::string *reason) {
  TensorDesc fx{ElemType::kDouble, kc.in[io.x]->dims}, fw{ElemType::kDouble, kc.in[io.w]->dims};
  KernelCtx cc;
  cc.node = kc.node;
  cc.opset = kc.opset;
  cc.in = {&fx, &fw};
  cc.in_data = {nullptr, nullptr};
  cc.out = {TensorDesc{ElemType::kDouble, kc.out[0].dims}};
  ConvShape shape;
  if (!ConvShapeOf(cc, &shape, reason)) return nullptr;
  std::vector<ElemType> types(9, ElemType::kUint8);  // every role position, given or not
  std::vector<int64_t> counts(9, 0);
  for (size_t i = 0; i < kc.in.size(); ++i) {
    if (kc.in[i]) types[i] = kc.in[i]->dtype;
    counts[i] = OptCount(kc, i);
  }
  const int64_t M = kc.in[io.w]->dims[0];
  for (int i : {io.wzp, io.ws})
    if (i >= 0 && !CheckZpCount(counts[i], M, "W's", reason)) return nullptr;
  for (int i : {io.xzp, io.xs, io.ys, io.yzp})
    if (i >= 0 && counts[i] > 1) {
      *reason = "input '" + kc.node->input_names[i] + "' must hold one value";
      return nullptr;
    }
  if (io.bias >= 0 && counts[io.bias] != 0 && counts[io.bias] != M) {
    *reason = "bias must hold one value per output channel";
    return nullptr;
  }
  if (shape.group < 1 || shape.C % shape.group || shape.M % shape.group) {
    *reason = "group must divide the input and output channels";
    return nullptr;
  }
  auto k = std::make_unique<ConvViaGemm>(shape, io, types, counts, kc.out[0].dtype);
  if (ConstWithZp(kc, io.w, io.wzp)) k->PrepackW(kc.in_data[io.w], kc.has(io.wzp) ? kc.in_data[io.wzp] : nullptr);
  return Sized(std::move(k), kc);
}

std::unique_ptr<Kernel> PrepareConvInteger(const KernelCtx &kc, std::string *reason) {
  ConvIO io{0, 1, 2, 3};
  return PrepareConvVia(kc, io, reason);
}

std::unique_ptr<Kernel> PrepareQLinearConv(const KernelCtx &kc, std::string *reason) {
  ConvIO io{0, 3, 2, 5, 1, 4, 6, 7, 8};
  return PrepareConvVia(kc, io, reason);
}

// DequantizeLinear -> Conv -> QuantizeLinear as QDQ models write every quantised convolution: the Conv's float
// input is a DequantizeLinear output, (q - zx) * sx rounded to float with |q - zx| <= 255, so q comes back exactly as
// round_even(x / sx) + zx (the quotient is within a few float ulps of an integer of at most 255); the weights are
// the int8 / uint8 initializer the folded weight DequantizeLinear read. The exact int32 sums (ConvViaGemm) then
// replace the float Conv's rounded partial sums; see RequantizeQdq for the output.
class QdqConvKernel : public Kernel {
 public:
  QdqConvKernel(std::unique_ptr<ConvViaGemm> conv, std::vector<const void *> consts, int64_t x_elems, float xs,
                float xzp, bool xs8)
      : conv_(std::move(conv)), consts_(std::move(consts)), n_(x_elems), xs_(xs), xzp_(xzp), xs8_(xs8) {}
  size_t scratch_bytes() const override { return XBytes() + conv_->scratch_bytes(); }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    char *sp = static_cast<char *>(scratch_);
    const float *x = static_cast<const float *>(in[0]);
    if (xs8_) QuantizeFloats(x, xs_, xzp_, reinterpret_cast<int8_t *>(sp), n_);
    else QuantizeFloats(x, xs_, xzp_, reinterpret_cast<uint8_t *>(sp), n_);
    conv_->set_scratch(sp + XBytes());
    Ins ins(consts_.data(), consts_.size());  // on the stack: Run allocates nothing
    ins.p[0] = sp;
    return conv_->Run(ins.p, out, reason);
  }

 private:
  size_t XBytes() const { return static_cast<size_t>((n_ + 63) / 64 * 64); }
  std::unique_ptr<ConvViaGemm> conv_;
  std::vector<const void *> consts_;  // QLinearConv's inputs by position; [0] is the requantised input
  int64_t n_;
  float xs_, xzp_;
  bool xs8_;
};

}  // namespace

std::unique_ptr<Kernel> PrepareQdqConv(const KernelCtx &conv, const KernelCtx &dqx, const KernelCtx &dqw,
                                       const KernelCtx &q) {
  // Every scale and zero point constant; x and y per tensor; W per tensor or per output channel (axis 0).
  const auto is8 = [](const TensorDesc *d) { return d && IsInt8ish(d->dtype); };
  const auto const_at = [](const KernelCtx &c, size_t i) { return c.has(i) && c.in_data[i]; };
  const auto one_float = [&](const KernelCtx &c, size_t i) {
    return const_at(c, i) && c.in[i]->dtype == ElemType::kFloat && c.in[i]->NumElements() == 1;
  };
  if (conv.in.size() < 2 || conv.out.size() != 1 || conv.out[0].dtype != ElemType::kFloat) return nullptr;
  if (!is8(dqx.in[0]) || !one_float(dqx, 1) || dqx.out.size() != 1 || dqx.out[0].dtype != ElemType::kFloat)
    return nullptr;
  if (dqx.has(2) && (!const_at(dqx, 2) || dqx.in[2]->NumElements() != 1)) return nullptr;
  if (q.has(2) && !is8(q.in[2])) return nullptr;
  if (!one_float(q, 1) || q.out.size() != 1 || !IsInt8ish(q.out[0].dtype)) return nullptr;
  if (q.has(2) && (!const_at(q, 2) || q.in[2]->NumElements() != 1)) return nullptr;
  if (!is8(dqw.in[0]) || !const_at(dqw, 0) || !const_at(dqw, 1) || dqw.in[1]->dtype != ElemType::kFloat) return nullptr;
  const TensorDesc &wd = *dqw.in[0];
  if (wd.dims.size() < 3) return nullptr;
  const int64_t M = wd.dims[0], ns = dqw.in[1]->NumElements();
  // Short sums (depthwise 3x3: 9 taps) stay in float. The integer GEMMs' per-group packing measured 3x slower there,
  // and the direct depthwise kernel (DwRowAvx2), though 1.3-2.8x faster than they are on QLinearConv, still took
  // 1.5-3x the float path's time (AVX-512 depthwise Conv plus the fused QuantizeLinear) on MobileNet's layers.
  if (wd.NumElements() / std::max<int64_t>(1, M) < 32) return nullptr;
  int64_t axis = 1, block = 0;
  std::string r;
  if (!AttrInt(*dqw.node, "axis", 1, &axis, &r) || !AttrInt(*dqw.node, "block_size", 0, &block, &r) || block != 0)
    return nullptr;
  if (ns != 1 && !(ns == M && (axis == 0 || axis == -static_cast<int64_t>(wd.dims.size())))) return nullptr;
  if (dqw.has(2) && (!const_at(dqw, 2) || dqw.in[2]->NumElements() != ns)) return nullptr;
  // The float bias, if any: a constant (a folded DequantizeLinear of int32 values in QDQ models).
  const float *bias = nullptr;
  if (conv.has(2)) {
    if (!const_at(conv, 2) || conv.in[2]->dtype != ElemType::kFloat || conv.in[2]->NumElements() != M) return nullptr;
    bias = static_cast<const float *>(conv.in_data[2]);
  }
  const float xs = *static_cast<const float *>(dqx.in_data[1]), ys = *static_cast<const float *>(q.in_data[1]);
  // Normal, finite scales only: the input's integers come back exactly from x / xs, and the requantisation's
  // quotients are QuantizeLinear's (a zero, NaN or subnormal scale keeps the unfused nodes).
  const auto usable = [](float v) { return std::isfinite(v) && v > 0 && v >= 1e-30f && v <= 1e30f; };
  if (!usable(xs) || !usable(ys)) return nullptr;
  std::vector<double> xw(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) {
    const float ws = static_cast<const float *>(dqw.in_data[1])[ns == 1 ? 0 : m];
    if (!usable(ws)) return nullptr;
    xw[static_cast<size_t>(m)] = static_cast<double>(xs) * static_cast<double>(ws);
  }
  // QLinearConv's inputs by position: x (the requantised copy, bound at run time), x_scale, x_zero_point, w,
  // w_scale, w_zero_point, y_scale, y_zero_point (the bias is applied in float by RequantizeQdq).
  TensorDesc xq{dqx.in[0]->dtype, conv.in[0]->dims};
  KernelCtx kc;
  kc.node = conv.node;
  kc.opset = conv.opset;
  kc.in = {&xq, dqx.in[1], dqx.has(2) ? dqx.in[2] : nullptr, dqw.in[0], dqw.in[1], dqw.has(2) ? dqw.in[2] : nullptr,
           q.in[1], q.has(2) ? q.in[2] : nullptr};
  kc.in_data = {nullptr, dqx.in_data[1], dqx.has(2) ? dqx.in_data[2] : nullptr, dqw.in_data[0], dqw.in_data[1],
                dqw.has(2) ? dqw.in_data[2] : nullptr, q.in_data[1], q.has(2) ? q.in_data[2] : nullptr};
  kc.out = q.out;
  std::string reason;
  std::unique_ptr<Kernel> k = PrepareConvVia(kc, ConvIO{0, 3, 2, 5, 1, 4, 6, 7, -1}, &reason);
  if (!k) return nullptr;
  std::unique_ptr<ConvViaGemm> cv(static_cast<ConvViaGemm *>(k.release()));
  if (!cv->w_packed()) return nullptr;  // constant weights only (packed once)
  cv->qdq_.xw = std::move(xw);
  cv->qdq_.bias.assign(static_cast<size_t>(M), 0.0);
  if (bias)
    for (int64_t m = 0; m < M; ++m) cv->qdq_.bias[static_cast<size_t>(m)] = bias[m];
  cv->qdq_.ys = ys;
  cv->qdq_.yzp = q.has(2) ? static_cast<float>(LoadAny(q.in[2]->dtype, q.in_data[2], 0)) : 0.f;
  const float xzp = dqx.has(2) ? static_cast<float>(LoadAny(dqx.in[2]->dtype, dqx.in_data[2], 0)) : 0.f;
  std::vector<const void *> consts(kc.in_data.begin(), kc.in_data.end());
  consts.resize(kMaxIns, nullptr);
  return std::make_unique<QdqConvKernel>(std::move(cv), std::move(consts), conv.in[0]->NumElements(), xs, xzp,
                                         dqx.in[0]->dtype == ElemType::kInt8);
}

void RegisterQuantOps(std::vector<OpDef> *ops) {
  ops->push_back({"QuantizeLinear", 2, 3, 1, 1, nullptr, InferQuantize, PrepareQuantize, true});
  ops->push_back({"DequantizeLinear", 2, 3, 1, 1, nullptr, InferDequantize, PrepareDequantize, true});
  ops->push_back({"DynamicQuantizeLinear", 1, 1, 3, 3, nullptr, InferDynamicQuantize, PrepareDynamicQuantize, true});
  ops->push_back({"MatMulInteger", 2, 4, 1, 1, nullptr, InferMatMulInteger, PrepareMatMulInteger, true});
  ops->push_back({"QLinearMatMul", 8, 8, 1, 1, nullptr, InferQLinearMatMul, PrepareQLinearMatMul, true});
  ops->push_back({"ConvInteger", 2, 4, 1, 1, nullptr, InferConvInteger, PrepareConvInteger, true});
  ops->push_back({"QLinearConv", 8, 9, 1, 1, nullptr, InferQLinearConv, PrepareQLinearConv, true});
}

}  // namespace onnx
}  // namespace twin
