// Vectorised float32 math for the kernels. Two layers:
//  * branch-free inline functions (vmath::Exp, Log, Tanh, Erf, Sigmoid, ...) written so that GCC vectorises a loop
//    calling them; kernels with their own fused loops (Softmax, LayerNorm, Gelu) inline them;
//  * array kernels (vmath::ExpArray, ...) compiled three times in vmath.cc (AVX-512, AVX2+FMA, baseline x86-64 or
//    the portable build elsewhere) and picked once at run time from the CPU's features.
// Accuracy: Cephes-style range reduction and polynomials, within a few ulp of the correctly rounded result over the
// whole float range; NaN propagates, infinities, zeros, denormal inputs and overflow/underflow behave like std::.
#pragma once

#include <cstdint>
#include <cstring>

namespace twin {
namespace onnx {
namespace vmath {

#define TWIN_VMATH_INLINE __attribute__((always_inline)) inline

TWIN_VMATH_INLINE float BitsToFloat(int32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
TWIN_VMATH_INLINE int32_t FloatToBits(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TWIN_VMATH_INLINE float AbsOf(float x) { return BitsToFloat(FloatToBits(x) & 0x7fffffff); }
TWIN_VMATH_INLINE float CopySign(float mag, float sign) {
  return BitsToFloat(FloatToBits(mag) | (FloatToBits(sign) & static_cast<int32_t>(0x80000000u)));
}

// Cody-Waite reduction v = n ln2 + r, |r| <= ln2 / 2 (two-part ln2: n * 0.693359375 is exact for |n| < 2^14):
// returns r and sets *t, whose low mantissa bits hold n (t's bits << 23 put n, mod 2^9, into an exponent field).
// v in [-150 ln2, 128 ln2); NaN gives NaN.
TWIN_VMATH_INLINE float ReduceLn2(float v, float *t_out) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  const float t = v * 1.44269504088896341f + magic;
  const float n = t - magic;
  *t_out = t;
  return (v - n * 0.693359375f) + n * 2.12194440e-4f;
}
// e^r on |r| <= ln2 / 2: degree-6 minimax fit of the relative error (< 2e-9).
TWIN_VMATH_INLINE float ExpOfReduced(float r) {
  float p = 1.3836828293278813e-3f;
  p = p * r + 8.374814875423908e-3f;
  p = p * r + 4.166822507977486e-2f;
  p = p * r + 1.6666419804096222e-1f;
  p = p * r + 4.9999991059303284e-1f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}
// e^r - 1 on |r| <= ln2 / 2, relative error < 1.4e-8 (r + r^2 P(r): exact leading term, so tiny r stay exact).
TWIN_VMATH_INLINE float Expm1OfReduced(float r) {
  float p = 1.3882509665563703e-3f;
  p = p * r + 8.366511203348637e-3f;
  p = p * r + 4.166720062494278e-2f;
  p = p * r + 1.666654348373413e-1f;
  p = p * r + 4.999999701976776e-1f;
  return p * (r * r) + r;
}
// exp(v) = 2^n y for callers that bound v themselves, split so that they scale 2^n as they need: returns y and
// sets *t as ReduceLn2 does.
TWIN_VMATH_INLINE float ExpReduced(float v, float *t_out) { return ExpOfReduced(ReduceLn2(v, t_out)); }
// 2^(n + bias) from ReduceLn2's t, for n + bias in [-126, 127].
TWIN_VMATH_INLINE float Pow2Of(float t, int32_t bias) {
  return BitsToFloat(static_cast<int32_t>((static_cast<uint32_t>(FloatToBits(t)) << 23) +
                                          (static_cast<uint32_t>(bias + 127) << 23)));
}
// exp(v) for v in [-104, 88]: n + 64 stays in range, and 2^n is applied in two steps (2^(n+64), then 2^-64) so
// that only the last multiply rounds, once, into the denormal range.
TWIN_VMATH_INLINE float ExpTwoStep(float v) {
  float t;
  const float y = ExpReduced(v, &t);
  return y * Pow2Of(t, 64) * 5.42101086e-20f;  // 2^-64
}
// exp(v) for v <= 0 (or slightly above; -inf and NaN included): down to the smallest denormal, 0 below -104
// (e^-104 < 2^-150 already rounds to 0 in ExpTwoStep's last multiply, so the clamp needs no select after it).
TWIN_VMATH_INLINE float ExpNonPositive(float v) {
  return ExpTwoStep(v < -104.0f ? -104.0f : v);  // NaN stays NaN
}

// exp(x) over the whole float range: ExpReduced, then 2^n applied in two halves so that results down to the
// smallest denormal and up to FLT_MAX come out right (inf beyond, 0 below -104).
TWIN_VMATH_INLINE float Exp(float x) {
  float t;
  const float y = ExpReduced(x, &t);  // NaN for NaN x, which then propagates
  // n as an integer, clamped in the integer domain (out-of-range x are replaced below): the bit difference is
  // monotonic in t, so even when t left magic's binade the clamp lands on the right end.
  const uint32_t magic_bits = static_cast<uint32_t>(FloatToBits(12582912.0f));  // ReduceLn2's 1.5 * 2^23
  int32_t ni = static_cast<int32_t>(static_cast<uint32_t>(FloatToBits(t)) - magic_bits);
  ni = ni < 128 ? ni : 128;
  ni = ni > -150 ? ni : -150;
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // each in [-75, 64]: 2^n1 and 2^n2 are normal floats
  const float out = y * BitsToFloat(static_cast<int32_t>(static_cast<uint32_t>(n1 + 127) << 23)) *
                    BitsToFloat(static_cast<int32_t>(static_cast<uint32_t>(n2 + 127) << 23));
  const float big = x > 88.8f ? BitsToFloat(0x7f800000) : out;
  return x < -104.0f ? 0.0f : big;
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' degree-9 polynomial in m - 1.
TWIN_VMATH_INLINE float Log(float x) {
  const bool tiny = x < 1.17549435e-38f;  // denormal (or <= 0): rescale by 2^23 first
  const float xs = tiny ? x * 8388608.0f : x;
  const int32_t bits = FloatToBits(xs);
  int32_t e = ((bits >> 23) & 0xff) - 126;
  float m = BitsToFloat((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1 : e;
  m = lo ? m + m - 1.0f : m - 1.0f;
  const float fe = static_cast<float>(e) - (tiny ? 23.0f : 0.0f);
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = p * m * z;
  y += fe * -2.12194440e-4f;
  y += -0.5f * z;
  float out = m + y + fe * 0.693359375f;
  const float inf = BitsToFloat(0x7f800000);
  out = x == inf ? inf : out;
  out = x == 0.0f ? -inf : out;
  out = x < 0.0f ? BitsToFloat(0x7fc00000) : out;
  return x != x ? x : out;
}

// tanh(x) = m / (m + 2) with m = e^(2x) - 1: no cancellation (m + 2 > 1), x clamped to [-9, 9] (tanh(9) rounds
// to 1). m = 2^n (q + 1) - 1 = 2^n q - (1 - 2^n) with q = e^r - 1, so small |x| (n = 0) keep q's relative accuracy
// and -0 stays -0. One division, no select: within 2.5 ulp.
// TanhClamped takes the clamp (9) as an argument so that the array kernel can pass it as a run-time value (vmath.cc).
TWIN_VMATH_INLINE float TanhClamped(float x, float bound) {
  const float hi = x > bound ? bound : x;  // NaN: both comparisons are false and NaN flows through
  const float c = hi < -bound ? -bound : hi;
  float t;
  const float q = Expm1OfReduced(ReduceLn2(c + c, &t));
  const float s = Pow2Of(t, 0);
  const float m = s * q - (1.0f - s);
  return m / (m + 2.0f);
}
TWIN_VMATH_INLINE float Tanh(float x) { return TanhClamped(x, 9.0f); }

// erfc(z) for z >= 0 given z and z^2 (Numerical Recipes' Chebyshev fit, fractional error < 1.2e-7); 0 beyond
// z = 10. Callers that can form z^2 with one rounding (Gelu: x^2 / 2) pass it: the tail's error grows with it.
TWIN_VMATH_INLINE float ErfcPos(float z, float zz) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float r = t * ExpNonPositive(p - zz);  // p - zz <= ~1e-5 (0 at z = 0, falling)
  return z > 10.0f ? 0.0f : r;
}

// erf(x): x P(x^2) below |x| = 0.8 (least-squares fit of erf(x)/x, relative error < 1e-7); above,
// 1 - exp(Q(|x|) - x^2) with Q a degree-6 minimax fit of log(erfc(a)) + a^2 on [0.8, 4] (absolute error of erfc
// < 1e-8); |x| is clamped to 4 (erf(4) rounds to 1), so the exp's argument stays in [-19, -0.2]: one 2^n scaling,
// no division, no special cases.
TWIN_VMATH_INLINE float Erf(float x) {
  const float ax = AbsOf(x);
  const float z = x * x;
  float p = -6.54670933727175e-4f;
  p = p * z + 5.086980294436216e-3f;
  p = p * z - 2.682185359299183e-2f;
  p = p * z + 1.1283136904239655e-1f;
  p = p * z - 3.761260211467743e-1f;
  p = p * z + 1.1283791065216064f;
  const float small = x * p;
  const float a = ax < 4.0f ? ax : 4.0f;
  float q = 2.0745494111906737e-4f;
  q = q * a - 3.1536186579614878e-3f;
  q = q * a + 2.2656206041574478e-2f;
  q = q * a - 1.0479874908924103e-1f;
  q = q * a + 3.6377808451652527e-1f;
  q = q * a - 1.1282289028167725f;
  q = q * a - 6.597095489269122e-5f;
  float t;
  const float e = ExpReduced(q - a * a, &t) * Pow2Of(t, 0);
  const float big = 1.0f - e;
  return ax >= 0.8f ? CopySign(big, x) : small;  // NaN: small is NaN
}

// sigmoid(x) = e^x / (e^x + 1), x clamped to [-104, 20] (e^-104 rounds to 0, sigmoid(20) to 1): no cancellation
// on either side, the negative tail keeps e^x's relative accuracy down to the denormals.
// (SigmoidClamped: the bounds as arguments, like TanhClamped.)
TWIN_VMATH_INLINE float SigmoidClamped(float x, float lo_bound, float hi_bound) {
  const float lo = x < lo_bound ? lo_bound : x;  // NaN passes both clamps
  const float e = ExpTwoStep(lo > hi_bound ? hi_bound : lo);
  return e / (e + 1.0f);
}
TWIN_VMATH_INLINE float Sigmoid(float x) { return SigmoidClamped(x, -104.0f, 20.0f); }

// Exact GELU 0.5 x (1 + erf(x / sqrt2)) = 0.5 x erfc(-x / sqrt2): accurate in both tails.
TWIN_VMATH_INLINE float Gelu(float x) {
  const float z = x * 0.70710678118654752f;
  const float az = z < 0.0f ? -z : z;
  const float e = ErfcPos(az, 0.5f * (x * x));
  return 0.5f * x * (z < 0.0f ? e : 2.0f - e);
}

// exp(x) - 1 without cancellation near 0: a degree-8 Taylor polynomial below |x| = 0.5, exp(x) - 1 above.
TWIN_VMATH_INLINE float Expm1(float x) {
  float p = 2.48015873e-5f;  // 1/8!
  p = p * x + 1.98412698e-4f;
  p = p * x + 1.38888889e-3f;
  p = p * x + 8.33333333e-3f;
  p = p * x + 4.16666667e-2f;
  p = p * x + 1.66666667e-1f;
  p = p * x + 0.5f;
  const float small = x + x * x * p;
  const float big = Exp(x) - 1.0f;
  const float ax = x < 0.0f ? -x : x;
  return ax < 0.5f ? small : big;  // NaN takes big, which is NaN
}

// log(1 + x) for x in [0, 1] (Softplus' tail): log(w) * x / (w - 1) with w = 1 + x corrects w's rounding.
TWIN_VMATH_INLINE float Log1pUnit(float x) {
  const float w = 1.0f + x;
  const float l = Log(w);
  return w == 1.0f ? x : l * (x / (w - 1.0f));
}

// GELU with approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
TWIN_VMATH_INLINE float GeluTanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + Tanh(u));
}

// sin(x) (octant_shift 0) or cos(x) (octant_shift 2, cos x = sin(x + pi/2)) for |x| <= kTrigMax: reduction by
// pi/4 in double, then Cephes' sine or cosine polynomial on [-pi/4, pi/4]. The array kernels send larger |x|,
// infinities and NaN to libm.
constexpr float kTrigMax = 8192.0f;
TWIN_VMATH_INLINE float SinOrCos(float x, int32_t octant_shift, bool odd) {
  const float ax = AbsOf(x);
  const float axc = ax < kTrigMax ? ax : kTrigMax;  // keeps the conversion defined for the lanes libm redoes
  int32_t j = static_cast<int32_t>(axc * 1.27323954473516f);
  j = (j + 1) & ~1;  // even octant: the reduced argument lies in [-pi/4, pi/4]
  const float fj = static_cast<float>(j);
  // x - j pi/4 in double, pi/4 in three parts of <= 39 bits so that j * part (j < 2^14) is exact with or without
  // FMA: float's own three-part form loses ~1e-7 absolute, i.e. relative accuracy near the zeros.
  const double jd = static_cast<double>(fj);
  const double rd = ((static_cast<double>(ax) - jd * 0.7853981633979856) - jd * -5.373173277489155e-13) -
                    jd * 3.184158581755475e-25;
  const float r = static_cast<float>(rd);
  const float z = r * r;
  float ps = -1.9515295891e-4f;
  ps = ps * z + 8.3321608736e-3f;
  ps = ps * z - 1.6666654611e-1f;
  const float sin_r = ps * z * r + r;
  float pc = 2.443315711809948e-5f;
  pc = pc * z - 1.388731625493765e-3f;
  pc = pc * z + 4.166664568298827e-2f;
  const float cos_r = pc * z * z - 0.5f * z + 1.0f;
  const int32_t oct = j + octant_shift;
  const float v = (oct & 2) ? cos_r : sin_r;
  const uint32_t sign_x = odd ? static_cast<uint32_t>(FloatToBits(x)) & 0x80000000u : 0u;
  const uint32_t neg = (static_cast<uint32_t>(oct & 4) << 29) ^ sign_x;
  return BitsToFloat(static_cast<int32_t>(static_cast<uint32_t>(FloatToBits(v)) ^ neg));
}
TWIN_VMATH_INLINE float Sin(float x) { return SinOrCos(x, 0, true); }
TWIN_VMATH_INLINE float Cos(float x) { return SinOrCos(x, 2, false); }

// atan(x): Cephes' reduction of |x| to [-tan(pi/8), tan(pi/8)] (by -1/|x| above tan(3pi/8), by (|x|-1)/(|x|+1)
// above tan(pi/8)), one division for all three ranges, then its degree-9 odd polynomial; the sign is x's (-0 stays
// -0, NaN stays NaN, +-inf gives +-pi/2). Within 2 ulp.
constexpr float kPiOver2Hi = 1.57079637050628662f, kPiOver2Lo = -4.37113883e-8f;  // hi + lo = pi/2 to ~1e-15
TWIN_VMATH_INLINE float Atan(float x) {
  const float a = AbsOf(x);
  const bool big = a > 2.414213562373095f, mid = a > 0.4142135623730950f;
  const float num = big ? -1.0f : (mid ? a - 1.0f : a);
  const float den = big ? a : (mid ? a + 1.0f : 1.0f);
  const float r = num / den;
  // pi/2 and pi/4 in two parts: the low part goes in before the cancellation against r's negative polynomial
  const float base = big ? kPiOver2Hi : (mid ? 0.5f * kPiOver2Hi : 0.0f);
  const float base_lo = big ? kPiOver2Lo : (mid ? 0.5f * kPiOver2Lo : 0.0f);
  const float z = r * r;
  float p = 8.05374449538e-2f;
  p = p * z - 1.38776856032e-1f;
  p = p * z + 1.99777106478e-1f;
  p = p * z - 3.33329491539e-1f;
  return CopySign(base + ((p * z * r + base_lo) + r), x);
}

// asin of a = |x| <= 1 before the sign: Cephes' polynomial in a^2 below 0.5, and above it asin(a) =
// pi/2 - 2 asin(s) with s = sqrt((1 - a) / 2) (1 - a is exact there). The caller passes root = sqrt(AsinRootArg(a))
// (array kernels take that sqrt with the instruction: an inline sqrt keeps a libm call for errno); *big_out says
// which form the result has. |x| > 1 gives NaN through the sqrt.
TWIN_VMATH_INLINE float AsinRootArg(float a) { return 0.5f * (1.0f - a); }
TWIN_VMATH_INLINE float AsinReduced(float a, float root, bool *big_out) {
  const bool big = a > 0.5f;
  const float z = big ? AsinRootArg(a) : a * a;
  const float s = big ? root : a;
  float p = 4.2163199048e-2f;
  p = p * z + 2.4181311049e-2f;
  p = p * z + 4.5470025998e-2f;
  p = p * z + 7.4953002686e-2f;
  p = p * z + 1.6666752422e-1f;
  *big_out = big;
  return p * z * s + s;
}
TWIN_VMATH_INLINE float AsinOfRoot(float x, float root) {
  bool big;
  const float q = AsinReduced(AbsOf(x), root, &big);
  return CopySign(big ? kPiOver2Hi + (kPiOver2Lo - (q + q)) : q, x);
}
// acos(x) = 2 asin(s) for x > 0.5, pi - 2 asin(s) for x < -0.5, pi/2 - asin(x) between: no cancellation near 1.
TWIN_VMATH_INLINE float AcosOfRoot(float x, float root) {
  bool big;
  const float q = AsinReduced(AbsOf(x), root, &big);
  const float outer = x > 0.0f ? q + q : 2.0f * kPiOver2Hi + (2.0f * kPiOver2Lo - (q + q));
  return big ? outer : kPiOver2Hi + (kPiOver2Lo - CopySign(q, x));
}

// ---- float64 ----
// The same construction in double for the float64 kernels (libm's exp/tanh are a call per element: 5x onnxruntime
// for float64 Tanh). e^r on |r| <= ln2 / 2 by its Taylor series to r^13 (the next term is < 2^-56 relative), ln2
// split so that n * kLn2HiD is exact for |n| < 2^32.
TWIN_VMATH_INLINE double BitsToDouble(int64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
TWIN_VMATH_INLINE int64_t DoubleToBits(double d) {
  int64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
TWIN_VMATH_INLINE double AbsOfD(double x) { return BitsToDouble(DoubleToBits(x) & INT64_MAX); }
TWIN_VMATH_INLINE double CopySignD(double mag, double sign) {
  return BitsToDouble(DoubleToBits(mag) | (DoubleToBits(sign) & INT64_MIN));
}
constexpr double kLn2HiD = 0x1.62e42p-1, kLn2LoD = 0x1.fdf473de6af28p-22;
constexpr double kMagicD = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer kept in the low bits
// v = n ln2 + r for |v| < 2^40; returns r and sets *n to n as an integer.
TWIN_VMATH_INLINE double ReduceLn2D(double v, int64_t *n) {
  const double t = v * 1.4426950408889634 + kMagicD;
  const double fn = t - kMagicD;
  *n = DoubleToBits(t) - DoubleToBits(kMagicD);
  return (v - fn * kLn2HiD) - fn * kLn2LoD;
}
// e^r - 1 on |r| <= ln2 / 2 (r + r^2 P(r): tiny r stay exact).
TWIN_VMATH_INLINE double Expm1OfReducedD(double r) {
  double p = 1.6059043836821613e-10;
  p = p * r + 2.08767569878681e-09;
  p = p * r + 2.505210838544172e-08;
  p = p * r + 2.755731922398589e-07;
  p = p * r + 2.7557319223985893e-06;
  p = p * r + 2.48015873015873e-05;
  p = p * r + 1.984126984126984e-04;
  p = p * r + 1.388888888888889e-03;
  p = p * r + 8.333333333333333e-03;
  p = p * r + 4.1666666666666664e-02;
  p = p * r + 1.6666666666666666e-01;
  p = p * r + 0.5;
  return p * (r * r) + r;
}
// 2^n for n in [-1022, 1023].
TWIN_VMATH_INLINE double Pow2D(int64_t n) {
  return BitsToDouble(static_cast<int64_t>(static_cast<uint64_t>(n + 1023) << 52));
}
// exp(x) over the whole double range: x clamped to [-746, 710] (beyond, 0 and inf), 2^n applied in two halves
// (each a normal number) so that only the last multiply rounds, into the denormals or to inf.
TWIN_VMATH_INLINE double ExpD(double x) {
  const double lo = x < -746.0 ? -746.0 : x;  // NaN passes both clamps
  const double c = lo > 710.0 ? 710.0 : lo;
  int64_t n;
  const double y = 1.0 + Expm1OfReducedD(ReduceLn2D(c, &n));
  const int64_t n1 = n >> 1;
  return y * Pow2D(n1) * Pow2D(n - n1);
}
// tanh(x) = sign(x) m / (m + 2) with m = e^(2|x|) - 1 = 2^n (q + 1) - 1 = 2^n q + (2^n - 1), n >= 0: no
// cancellation; |x| clamped to 20 (tanh(20) rounds to 1). -0 stays -0, NaN stays NaN.
TWIN_VMATH_INLINE double TanhD(double x) {
  const double ax = AbsOfD(x);
  const double a = ax > 20.0 ? 20.0 : ax;
  int64_t n;
  const double q = Expm1OfReducedD(ReduceLn2D(a + a, &n));
  const double s = Pow2D(n);
  const double m = s * q + (s - 1.0);
  return CopySignD(m / (m + 2.0), x);
}
// sigmoid(x) with e = e^-|x| (in (0, 1], no overflow): 1 / (1 + e) for x >= 0, e / (1 + e) below, which keeps
// e's relative accuracy down to the denormals.
TWIN_VMATH_INLINE double SigmoidD(double x) {
  const double e = ExpD(-AbsOfD(x));
  const double r = 1.0 / (1.0 + e);
  return x < 0.0 ? e * r : r;  // NaN: e and r are NaN
}

// sin(x) (quadrant_shift 0) or cos(x) (1: cos x = sin(x + pi/2)) for |x| <= kTrigMaxD: x - j pi/2 with pi/2 in
// three parts of 33 bits (j * part is exact for j < 2^20), then the Taylor series of sin or cos on [-pi/4, pi/4]
// (to r^17 and r^18: the next terms are < 2^-60 relative). The array kernels send larger |x|, infinities and NaN to
// libm.
constexpr double kTrigMaxD = 8192.0;
TWIN_VMATH_INLINE double SinOrCosD(double x, int64_t quadrant_shift, bool odd) {
  const double ax = AbsOfD(x);
  const double axc = ax < kTrigMaxD ? ax : kTrigMaxD;  // (the lanes libm redoes)
  const double t = axc * 0.6366197723675814 + kMagicD;
  const double fj = t - kMagicD;
  const int64_t q = DoubleToBits(t) - DoubleToBits(kMagicD) + quadrant_shift;
  const double r = ((axc - fj * 0x1.921fb544p+0) - fj * 0x1.0b4611a6p-34) - fj * 0x1.3198a2e037073p-69;
  const double z = r * r;
  double ps = 2.8114572543455206e-15;
  ps = ps * z - 7.647163731819816e-13;
  ps = ps * z + 1.6059043836821613e-10;
  ps = ps * z - 2.505210838544172e-08;
  ps = ps * z + 2.7557319223985893e-06;
  ps = ps * z - 1.984126984126984e-04;
  ps = ps * z + 8.333333333333333e-03;
  ps = ps * z - 1.6666666666666666e-01;
  const double sin_r = ps * (z * r) + r;
  double pc = -1.5619206968586225e-16;
  pc = pc * z + 4.779477332387385e-14;
  pc = pc * z - 1.1470745597729725e-11;
  pc = pc * z + 2.08767569878681e-09;
  pc = pc * z - 2.755731922398589e-07;
  pc = pc * z + 2.48015873015873e-05;
  pc = pc * z - 1.388888888888889e-03;
  pc = pc * z + 4.1666666666666664e-02;
  const double cos_r = 1.0 - (0.5 * z - pc * (z * z));
  const double v = (q & 1) ? cos_r : sin_r;
  const uint64_t sign_x = odd ? static_cast<uint64_t>(DoubleToBits(x)) & 0x8000000000000000ull : 0u;
  const uint64_t neg = (static_cast<uint64_t>(q & 2) << 62) ^ sign_x;
  return BitsToDouble(static_cast<int64_t>(static_cast<uint64_t>(DoubleToBits(v)) ^ neg));
}
TWIN_VMATH_INLINE double SinD(double x) { return SinOrCosD(x, 0, true); }
TWIN_VMATH_INLINE double CosD(double x) { return SinOrCosD(x, 1, false); }

// ---- array kernels, dispatched at run time (vmath.cc) ----
// y[i] = f(x[i]); y may be x (the plan runs element-wise steps in place), so none of them takes __restrict.

using ArrayFn = void (*)(const float *x, float *y, int64_t n);

void ExpArray(const float *x, float *y, int64_t n);
void LogArray(const float *x, float *y, int64_t n);
void TanhArray(const float *x, float *y, int64_t n);
void ErfArray(const float *x, float *y, int64_t n);
void SigmoidArray(const float *x, float *y, int64_t n);
void SqrtArray(const float *x, float *y, int64_t n);
void GeluArray(const float *x, float *y, int64_t n);
void GeluTanhArray(const float *x, float *y, int64_t n);
void SinArray(const float *x, float *y, int64_t n);
void CosArray(const float *x, float *y, int64_t n);
void AtanArray(const float *x, float *y, int64_t n);
void AsinArray(const float *x, float *y, int64_t n);
void AcosArray(const float *x, float *y, int64_t n);

// float64: y[i] = f(x[i]) (y may be x).
using ArrayFnD = void (*)(const double *x, double *y, int64_t n);
void ExpDoubleArray(const double *x, double *y, int64_t n);
void TanhDoubleArray(const double *x, double *y, int64_t n);
void SigmoidDoubleArray(const double *x, double *y, int64_t n);
void SinDoubleArray(const double *x, double *y, int64_t n);
void CosDoubleArray(const double *x, double *y, int64_t n);

void FloorArray(const float *x, float *y, int64_t n);
void CeilArray(const float *x, float *y, int64_t n);
void RoundArray(const float *x, float *y, int64_t n);  // half to even

// Fused row kernels over contiguous float32 rows of length n.
// Softmax (or LogSoftmax) of each row: max, exp and sum in one pass over lanes, then the scaling pass.
void SoftmaxRows(const float *x, float *y, int64_t rows, int64_t n, bool log_softmax);
// Softmax (or LogSoftmax) along the middle axis of a contiguous [outer, n, inner] array.
void SoftmaxStridedRows(const float *x, float *y, int64_t outer, int64_t n, int64_t inner, bool log_softmax);
// LayerNormalization of each row: mean and variance accumulated in double lanes, then
// y = (x - mean) * inv_std * scale + bias (bias may be null); mean/inv_std outputs may be null.
void LayerNormRows(const float *x, float *y, int64_t rows, int64_t n, const float *scale, const float *bias,
                   float epsilon, float *mean, float *inv_std);

// Whether any of x[0, n) is NaN.
bool AnyNan(const float *x, int64_t n);
// IsNaN (nan) or IsInf (pos_inf / neg_inf) of float32s as 0/1 bytes.
void FloatClassInto(const float *x, uint8_t *y, int64_t n, bool nan, bool pos_inf, bool neg_inf);

// Instruction set the array kernels run with: "avx512", "avx2" or "baseline". GEASYNC_TWIN_SIMD (read once) may
// cap it at "avx2" or "baseline" (to test the fallbacks); it never enables what the CPU lacks.
const char *IsaName();

enum class Isa { kBaseline, kAvx2, kAvx512 };
Isa ActiveIsa();

}  // namespace vmath
}  // namespace onnx
}  // namespace twin
