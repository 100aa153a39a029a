// Neural-network ops: Conv (1-D/2-D/3-D, groups, pads, strides, dilations, auto_pad) as im2col + OpenBLAS
// GEMM, MaxPool (with optional Indices), AveragePool, GlobalAveragePool, BatchNormalization (inference) and
// LayerNormalization. float32 and float64 natively; float16/bfloat16 through float32 (PrepareViaFloat).
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
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TWIN_HAVE_X86 1
#endif

#include "broadcast.h"
#include "conv_winograd.h"
#include "elem.h"
#include "gemm.h"
#include "gemm_panel.h"
#include "intra_op.h"
#include "row_reduce.h"
#include "shared_const.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

constexpr size_t kMaxSpatial = 3;
constexpr int64_t kMaxPoolTaps = int64_t(1) << 24;  // taps of one pooling window

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// a / b rounded up, for a >= 0 and b >= 1 (no a + b - 1: strides may be as large as int64 allows).
int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// Window geometry shared by Conv and the pools; spatial dims padded to 3 with size-1 dims.
struct Window {
  size_t nsp = 0;                                   // real spatial rank
  int64_t in[kMaxSpatial] = {1, 1, 1}, out[kMaxSpatial] = {1, 1, 1};
  int64_t k[kMaxSpatial] = {1, 1, 1}, s[kMaxSpatial] = {1, 1, 1}, d[kMaxSpatial] = {1, 1, 1};
  int64_t pb[kMaxSpatial] = {0, 0, 0}, pe[kMaxSpatial] = {0, 0, 0};
};

// Computes output sizes and pads from attributes. in_dims: the spatial dims of X; kernel: kernel sizes
// (from W for Conv, from kernel_shape for pools). ceil_mode only for pools. Unknown input dims give -1 outputs.
bool MakeWindow(const Node &n, const std::vector<int64_t> &in_dims, const std::vector<int64_t> &kernel,
                bool pool, Window *w, std::string *reason) {
  const size_t nsp = in_dims.size();
  if (nsp < 1 || nsp > kMaxSpatial) {
    *reason = "only 1-D, 2-D and 3-D spatial inputs are supported, got " + std::to_string(nsp) + " spatial dims";
    return false;
  }
  w->nsp = nsp;
  std::vector<int64_t> strides, dil, pads;
  if (!ReadIntsAttr(n, "strides", nsp, 1, &strides, nullptr, reason) ||
      !ReadIntsAttr(n, "dilations", nsp, 1, &dil, nullptr, reason) ||
      !ReadIntsAttr(n, "pads", 2 * nsp, 0, &pads, nullptr, reason))
    return false;
  int64_t ceil_mode = 0;
  if (pool && !AttrInt(n, "ceil_mode", 0, &ceil_mode, reason)) return false;
  std::string auto_pad;
  if (!ReadAutoPad(n, &auto_pad, reason)) return false;
  if (pool) {  // a pool's work and tables grow with its window's taps, whatever part of them the input covers
    int64_t taps = 1;
    for (size_t j = 0; j < nsp && kernel[j] >= 1; ++j)  // (sizes < 1 are refused below)
      taps = kernel[j] > kMaxPoolTaps / taps ? kMaxPoolTaps + 1 : taps * kernel[j];
    if (taps > kMaxPoolTaps) {
      *reason = "kernel_shape " + ShapeStr(kernel) + " has more taps than the twin pools over (at most 2^24)";
      return false;
    }
  }
  for (size_t j = 0; j < nsp; ++j) {
    const size_t i = j + (kMaxSpatial - nsp);  // real dims are the innermost ones
    if (strides[j] < 1 || dil[j] < 1 || kernel[j] < 1 || pads[j] < 0 || pads[j + nsp] < 0) {
      *reason = "strides, dilations and kernel sizes must be >= 1 and pads >= 0";
      return false;
    }
    // Bounded so that the window arithmetic below cannot overflow (it wrapped: a kernel of 2^62 dilated by 4 gave
    // a pool of 8 outputs over an input of 4).
    if (pads[j] > kMaxElements || pads[j + nsp] > kMaxElements || kernel[j] - 1 > (kMaxElements - 1) / dil[j]) {
      *reason = "pads and the dilated kernel extent (kernel_shape - 1) * dilations + 1 must be at most 2^40";
      return false;
    }
    w->in[i] = in_dims[j];
    w->k[i] = kernel[j];
    w->s[i] = strides[j];
    w->d[i] = dil[j];
    const int64_t dk = (kernel[j] - 1) * dil[j] + 1;
    const int64_t x = in_dims[j];
    if (x < 0) {
      w->out[i] = -1;
      continue;
    }
    if (auto_pad == "NOTSET") {
      w->pb[i] = pads[j];
      w->pe[i] = pads[j + nsp];
      const int64_t span = x + w->pb[i] + w->pe[i] - dk;
      // ceil_mode: a window wider than the input plus pads, by less than a stride, still gives one output (ONNX's
      // formula; onnxruntime and PyTorch agree), covering what it overlaps.
      if (span < 0 && !(ceil_mode && span > -strides[j])) {
        *reason = "kernel of extent " + std::to_string(dk) + " does not fit input dimension " + std::to_string(x) +
                  " plus pads";
        return false;
      }
      int64_t o = span < 0 ? 1 : (ceil_mode ? CeilDiv(span, strides[j]) : span / strides[j]) + 1;
      if (ceil_mode && (o - 1) * strides[j] >= x + w->pb[i]) --o;  // last window must start inside the input
      w->out[i] = o;
    } else if (auto_pad == "VALID") {
      if (x < dk) {
        *reason = "kernel of extent " + std::to_string(dk) + " does not fit input dimension " + std::to_string(x);
        return false;
      }
      w->out[i] = (ceil_mode ? CeilDiv(x - dk, strides[j]) : (x - dk) / strides[j]) + 1;
    } else {
      const int64_t o = CeilDiv(x, strides[j]);
      const int64_t total = std::max<int64_t>(0, (o - 1) * strides[j] + dk - x);
      if (auto_pad == "SAME_UPPER") {
        w->pb[i] = total / 2;
        w->pe[i] = total - total / 2;
      } else {
        w->pe[i] = total / 2;
        w->pb[i] = total - total / 2;
      }
      w->out[i] = o;
    }
  }
  return true;
}

bool FloatOnly(ElemType t) { return IsFloatType(t); }

// ---- Direct convolution (stride 1, no dilation, 1-D/2-D), AVX-512 and AVX2 ----
// Output rows are cut into 16-wide chunks ("positions"); a register block of kConvMB output channels x
// kConvNV positions is accumulated over (c, kh, kw) with broadcast weights, reading a zero-padded copy of the
// input (rows of pw floats, so that full 16-wide loads never leave it). Weights are packed per channel block as
// [block][c][kh][kw][kConvMB] (zero rows for the channels past M).
constexpr int64_t kConvMB = 8, kConvNV = 2, kConvLanes = 16;

struct DirectConvArgs {
  const float *xp;     // padded input [cg][ph][pw]
  int64_t cg, ph, pw, kh, kw, oh, ow;
  const float *wpack;  // [ceil(mg / kConvMB)][cg * kh * kw][kConvMB]
  const float *bias;   // [ceil(mg / kConvMB) * kConvMB]
  int64_t mg;
  float *y;            // [mg][oh][ow]
  bool relu;
  // Stride 2 (AVX2 only): xp holds per channel two column phases [cg][2][ph][pw] (phase p, column c' = padded
  // column 2 c' + p), so that tap (i, j) of output (r, c) is phase j & 1, row 2 r + i, column c + j / 2.
  bool s2 = false;
  // Flat (AVX-512, stride 1, small maps): positions run over the padded plane read as one long row, so that a
  // chunk spans several output rows; keep[p] marks chunk p's lanes on outputs (column < ow), first[p] is where
  // the first of them goes in y (the kept lanes of a chunk are consecutive outputs).
  // With s2 as well: four phase planes per channel [cg][2][2][ph][pw] (row phase a, column phase b: padded row
  // 2 r' + a, column 2 c' + b), so that tap (i, j) of flat position q reads plane (i & 1, j & 1) at
  // q + (i / 2) pw + j / 2: a stride-1 flat conv with a ceil(k / 2) kernel on each plane.
  bool flat = false;
  const uint16_t *keep = nullptr;
  const int64_t *first = nullptr;
  float *yflat = nullptr;  // AVX2 flat: [mg][16 * chunks] outputs at their flat positions, rows copied out after
  // AVX-512 flat (not depthwise): nimg images' planes, img floats apart in xp, their outputs ynext floats apart
  // in y, their chunks blocked together (a 3x3 or 4x4 map has one or two chunks: alone they ran 8 or 16
  // accumulators and read every weight once per image).
  int64_t nimg = 1, img = 0, ynext = 0;
  // Dilations (AVX-512, stride 1, not depthwise): tap (i, j) reads the padded plane at i dh rows, j dw columns.
  int64_t dh = 1, dw = 1;
  // Depthwise at stride 1 (AVX-512): pw a multiple of 16 and xp 64-byte aligned (DepthwiseAlignedAvx512).
  bool aligned = false;
};

#ifdef TWIN_HAVE_X86
bool CpuHasAvx512() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

// MaxPool 2x2 stride 2 over `pairs` row pairs of width 2*ow (input rows 2q, 2q+1 -> output row q), no pads.
__attribute__((target("avx512f"))) void MaxPool2x2Avx512(const float *x, float *y, int64_t pairs, int64_t ow,
                                                          int64_t in_row, int64_t in_pair) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t q = 0; q < pairs; ++q) {
    const float *r0 = x + q * in_pair, *r1 = r0 + in_row;
    float *yr = y + q * ow;
    for (int64_t j0 = 0; j0 < ow; j0 += 16) {
      const int64_t n = std::min<int64_t>(16, ow - j0);  // outputs in this chunk; 2n inputs per row
      __m512 a0, a1, b0, b1;
      if (n == 16) {
        a0 = _mm512_loadu_ps(r0 + 2 * j0);
        a1 = _mm512_loadu_ps(r0 + 2 * j0 + 16);
        b0 = _mm512_loadu_ps(r1 + 2 * j0);
        b1 = _mm512_loadu_ps(r1 + 2 * j0 + 16);
      } else {
        const int64_t lo = std::min<int64_t>(16, 2 * n), hi = 2 * n - lo;
        const __mmask16 mlo = static_cast<__mmask16>((1u << lo) - 1u), mhi = static_cast<__mmask16>((1u << hi) - 1u);
        a0 = _mm512_maskz_loadu_ps(mlo, r0 + 2 * j0);
        a1 = _mm512_maskz_loadu_ps(mhi, r0 + 2 * j0 + 16);
        b0 = _mm512_maskz_loadu_ps(mlo, r1 + 2 * j0);
        b1 = _mm512_maskz_loadu_ps(mhi, r1 + 2 * j0 + 16);
      }
      // The taps in the general loop's order, each later one taken where it is larger (v > m ? v : m: max with m
      // second), so a NaN first tap is kept and later NaN taps skipped, as onnx.reference does at stride 2.
      // (mask_max with a full mask: GCC 12 warns on _mm512_max_ps.)
      const __mmask16 all = static_cast<__mmask16>(0xFFFF);
      __m512 r = _mm512_permutex2var_ps(a0, even, a1);
      for (const __m512 v : {_mm512_permutex2var_ps(a0, odd, a1), _mm512_permutex2var_ps(b0, even, b1),
                             _mm512_permutex2var_ps(b0, odd, b1)})
        r = _mm512_mask_max_ps(v, all, v, r);
      if (n == 16) _mm512_storeu_ps(yr + j0, r);
      else _mm512_mask_storeu_ps(yr + j0, static_cast<__mmask16>((1u << n) - 1u), r);
    }
  }
}

// The same MaxPool with AVX2, as the general loop computes it: the first tap, then y = x > y ? x : y over the later
// taps in row-major order (a NaN first tap is kept, later NaN taps skipped, as onnx.reference does at stride 2), so
// results match the scalar paths bit for bit. The even and odd columns of each input row are split with shuffles;
// a row's last OW % 8 outputs are scalar.
__attribute__((target("avx2"))) void MaxPool2x2Avx2(const float *x, float *y, int64_t pairs, int64_t ow,
                                                      int64_t in_row, int64_t in_pair) {
  for (int64_t q = 0; q < pairs; ++q) {
    const float *r0 = x + q * in_pair, *r1 = r0 + in_row;
    float *yr = y + q * ow;
    int64_t j = 0;
    for (; j + 8 <= ow; j += 8) {
      __m256 m = _mm256_setzero_ps();
      for (const float *r : {r0, r1}) {
        const __m256 a = _mm256_loadu_ps(r + 2 * j), b = _mm256_loadu_ps(r + 2 * j + 8);
        // per 128-bit lane [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit quarters reordered to a0..a6 b0..b6
        const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
        const __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
        m = r == r0 ? e : _mm256_max_ps(e, m);  // (e > m) ? e : m after the first tap
        m = _mm256_max_ps(o, m);
      }
      _mm256_storeu_ps(yr + j, m);
    }
    for (; j < ow; ++j) {
      float m = r0[2 * j];
      for (const float v : {r0[2 * j + 1], r1[2 * j], r1[2 * j + 1]}) m = v > m ? v : m;
      yr[j] = m;
    }
  }
}

// Output positions (16-wide chunks) per band of DirectConvAvx512: all of a band's channel blocks run before the
// next band, so that the band's padded input rows stay in L2 across them. Channel block after channel block over
// the whole map streamed the planes from L3 once per block (3x3 s2 64->128 on 128x128, 4.3 MB of phase planes read
// 16 times: 2.5x onnxruntime's time). Maps whose planes fit stay one band.
constexpr int64_t kConvBandBytes = 384 << 10;
int64_t ConvBandPositions(const DirectConvArgs &a, bool s2, int64_t nch) {
  const int64_t planes = s2 ? 2 : 1, step = s2 ? 2 : 1;
  const int64_t row_bytes = a.cg * planes * a.pw * static_cast<int64_t>(sizeof(float));
  int64_t rows = 1;  // output rows per band: their input rows, step (rows - 1) + (kh - 1) dh + 1, within the budget
  while (rows < a.oh && (step * rows + (a.kh - 1) * a.dh + 1) * row_bytes <= kConvBandBytes) ++rows;
  return (rows * nch + kConvNV - 1) / kConvNV * kConvNV;
}

// kS2: stride 2 over the two column phases of the padded input (DirectConvArgs::s2), as the AVX2 kernel.
template <bool kS2>
__attribute__((target("avx512f"))) void DirectConvAvx512(const DirectConvArgs &a) {
  const int64_t nch = (a.ow + kConvLanes - 1) / kConvLanes;
  const int64_t P = a.oh * nch, K = a.cg * a.kh * a.kw, plane = a.ph * a.pw, out_sp = a.oh * a.ow;
  const int64_t nmb = (a.mg + kConvMB - 1) / kConvMB;
  const __m512 zero = _mm512_setzero_ps();
  const int64_t band = ConvBandPositions(a, kS2, nch);
  for (int64_t b0 = 0; b0 < P; b0 += band) {
    const int64_t b1 = std::min(P, b0 + band);
    for (int64_t mb = 0; mb < nmb; ++mb) {
      const float *wb = a.wpack + mb * K * kConvMB;
      const int64_t mcount = std::min<int64_t>(kConvMB, a.mg - mb * kConvMB);
      for (int64_t p0 = b0; p0 < b1; p0 += kConvNV) {
        const float *base[kConvNV];
        int64_t yoff[kConvNV], valid[kConvNV];
        for (int v = 0; v < kConvNV; ++v) {
          const int64_t p = std::min(p0 + v, b1 - 1);
          const int64_t r = p / nch, c0 = (p % nch) * kConvLanes;
          base[v] = a.xp + (kS2 ? 2 * r : r) * a.pw + c0;
          yoff[v] = r * a.ow + c0;
          valid[v] = std::min<int64_t>(kConvLanes, a.ow - c0);
        }
        __m512 acc[kConvMB][kConvNV];
#pragma GCC unroll 8
        for (int m = 0; m < kConvMB; ++m) {
          const __m512 b = _mm512_set1_ps(a.bias[mb * kConvMB + m]);
#pragma GCC unroll 4
          for (int v = 0; v < kConvNV; ++v) acc[m][v] = b;
        }
        const float *w = wb;
        for (int64_t c = 0; c < a.cg; ++c) {
          for (int64_t i = 0; i < a.kh; ++i) {
            const int64_t roff = (kS2 ? 2 * c : c) * plane + i * a.dh * a.pw;
            for (int64_t j = 0; j < a.kw; ++j, w += kConvMB) {
              const int64_t toff = roff + (kS2 ? (j & 1) * plane + (j >> 1) : j * a.dw);
              __m512 x[kConvNV];
#pragma GCC unroll 4
              for (int v = 0; v < kConvNV; ++v) x[v] = _mm512_loadu_ps(base[v] + toff);
#pragma GCC unroll 8
              for (int m = 0; m < kConvMB; ++m) {
                const __m512 s = _mm512_set1_ps(w[m]);
#pragma GCC unroll 4
                for (int v = 0; v < kConvNV; ++v) acc[m][v] = _mm512_fmadd_ps(s, x[v], acc[m][v]);
              }
            }
          }
        }
        float *yb = a.y + mb * kConvMB * out_sp;
        for (int m = 0; m < mcount; ++m) {
#pragma GCC unroll 4
          for (int v = 0; v < kConvNV; ++v) {
            __m512 r = acc[m][v];
            // max(0, r): NaN (the second operand) stays NaN like Relu's. Not _mm512_max_ps: GCC 12
            // -Wmaybe-uninitialized
            if (a.relu) r = _mm512_mask_max_ps(r, static_cast<__mmask16>(0xFFFF), zero, r);
            float *dst = yb + m * out_sp + yoff[v];
            if (valid[v] == kConvLanes) _mm512_storeu_ps(dst, r);
            else _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << valid[v]) - 1u), r);
          }
        }
      }
    }
  }
}

// The same direct convolution with AVX2+FMA (register block below). Measured against im2col + OpenBLAS on a 2-core
// EPYC (AVX2): 1.4-2x faster at K = cg * kh * kw = 144 and 288 (16 and 32 channels, 3x3), ~1.05-1.15x faster at
// K = 432 and 576 (48 and 64 channels, 3x3, 56x56 to 128x128 images); it takes K <= 640, larger K stays with BLAS.
// At stride 2 (over column phases, AVX2), measured against im2col + OpenBLAS: ~1.4x faster at K = 144 and 288, slower
// at K = 576 (64 channels, 3x3, 128x128: 1.77x of onnxruntime's time where BLAS takes 1.21x, blocks of 6 channels,
// Zen 3).
constexpr int64_t kS2MaxK = 320;
// AVX-512 at stride 2: 64x64 16->32 (K = 144) 1.7x -> 1.0x of onnxruntime against im2col + OpenBLAS; K = 576 no worse.
bool S2Pays(vmath::Isa isa, int64_t k) {
  return isa == vmath::Isa::kAvx512 || (isa == vmath::Isa::kAvx2 && k <= kS2MaxK);
}
bool DirectConvPays(vmath::Isa isa, int64_t k) {
  return isa == vmath::Isa::kAvx512 || (isa == vmath::Isa::kAvx2 && k <= 640);
}

__attribute__((target("avx2,fma"), always_inline)) inline void StoreConvHalf(float *dst, __m256 v, int64_t valid,
                                                                              bool relu) {
  if (relu) v = _mm256_max_ps(_mm256_setzero_ps(), v);  // NaN (the second operand) stays NaN like Relu's
  if (valid >= 8) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  float tmp[8];
  _mm256_storeu_ps(tmp, v);
  std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(float));
}

// Register block: kMC (up to 6) consecutive output channels x one 16-wide chunk as two 8-wide halves (2 kMC
// accumulators, 2 input loads and kMC weight broadcasts per 2 kMC FMAs; 4 channels, 8 accumulators, left the FMA
// units idle a third of the time on a Zen 3). A block may straddle two of the pack's kConvMB-channel blocks: each
// channel's weights are read at its own offset from the first channel's, all advancing kConvMB floats per tap.
template <int kMC, int kKw, bool kS2>
__attribute__((target("avx2,fma"))) void ConvChannelsAvx2(const DirectConvArgs &a, int64_t r, int64_t m0) {
  const int64_t kw = kKw > 0 ? kKw : a.kw;
  const int64_t nch = (a.ow + 15) / 16;  // 16-wide chunks: rows are padded for them, so loads stay inside
  const int64_t K = a.cg * a.kh * kw, plane = a.ph * a.pw, out_sp = a.oh * a.ow;
  auto weights_of = [&](int64_t ch) { return (ch / kConvMB) * K * kConvMB + ch % kConvMB; };
  const float *w0 = a.wpack + weights_of(m0);
  int64_t off[kMC];
#pragma GCC unroll 8
  for (int m = 0; m < kMC; ++m) off[m] = weights_of(m0 + m) - weights_of(m0);
  for (int64_t q = 0; q < nch; ++q) {
    const int64_t c0 = q * 16;
    const float *base = a.xp + (kS2 ? 2 * r : r) * a.pw + c0;
    __m256 lo[kMC], hi[kMC];
#pragma GCC unroll 8
    for (int m = 0; m < kMC; ++m) lo[m] = hi[m] = _mm256_set1_ps(a.bias[m0 + m]);
    const float *w = w0;
    for (int64_t c = 0; c < a.cg; ++c) {
      for (int64_t i = 0; i < a.kh; ++i) {
        const float *row = base + (kS2 ? 2 * c : c) * plane + i * a.pw;
#pragma GCC unroll 4
        for (int64_t j = 0; j < kw; ++j, w += kConvMB) {
          const float *tap = kS2 ? row + (j & 1) * plane + (j >> 1) : row + j;
          const __m256 x0 = _mm256_loadu_ps(tap), x1 = _mm256_loadu_ps(tap + 8);
#pragma GCC unroll 8
          for (int m = 0; m < kMC; ++m) {
            const __m256 wm = _mm256_broadcast_ss(w + off[m]);
            lo[m] = _mm256_fmadd_ps(wm, x0, lo[m]);
            hi[m] = _mm256_fmadd_ps(wm, x1, hi[m]);
          }
        }
      }
    }
    float *yb = a.y + m0 * out_sp + r * a.ow + c0;
    const int64_t valid = a.ow - c0;
    // constant indices only: a run-time lo[m] would keep the accumulators in memory through the FMA loop
#pragma GCC unroll 8
    for (int m = 0; m < kMC; ++m) {
      StoreConvHalf(yb + m * out_sp, lo[m], valid, a.relu);
      if (valid > 8) StoreConvHalf(yb + m * out_sp + 8, hi[m], valid - 8, a.relu);
    }
  }
}

// kKw > 0: the kernel width as a constant (3x3 kernels: the innermost loop unrolled), else a.kw.
template <int kKw, bool kS2>
__attribute__((target("avx2,fma"))) void DirectConvAvx2Impl(const DirectConvArgs &a) {
  // One output row at a time through every channel block: the input rows it reads (cg x kh rows) stay in cache
  // while all the weights pass; channel blocks outermost re-read the whole input per block (3x slower at 64
  // channels on 128x128, where the input is past L2).
  for (int64_t r = 0; r < a.oh; ++r)
    for (int64_t m0 = 0; m0 < a.mg;) {
      // blocks of 6 channels; 7 or 8 left go as 4 + 3 / 4 + 4 rather than leave a block of 1 or 2
      const int64_t left = a.mg - m0, take = left >= 9 || left == 6 ? 6 : left > 6 ? 4 : left;
      switch (take) {
        case 6: ConvChannelsAvx2<6, kKw, kS2>(a, r, m0); break;
        case 5: ConvChannelsAvx2<5, kKw, kS2>(a, r, m0); break;
        case 4: ConvChannelsAvx2<4, kKw, kS2>(a, r, m0); break;
        case 3: ConvChannelsAvx2<3, kKw, kS2>(a, r, m0); break;
        case 2: ConvChannelsAvx2<2, kKw, kS2>(a, r, m0); break;
        default: ConvChannelsAvx2<1, kKw, kS2>(a, r, m0); break;
      }
      m0 += take;
    }
}

// One input and one output channel (depthwise): the channel blocks above would spend 3 of their 4 accumulators on
// the zero weights of absent channels. Instead kR output rows x one 16-wide chunk (2 kR accumulators), the same
// additions in the same order (bias, then one FMA per tap in (kh, kw) order), so the same bits.
template <int kR, int kKw>
__attribute__((target("avx2,fma"), always_inline)) inline void DepthwiseRowsAvx2(const DirectConvArgs &a, int64_t r,
                                                                                 int64_t c0) {
  const int64_t kw = kKw > 0 ? kKw : a.kw;
  __m256 lo[kR], hi[kR];
  for (int i = 0; i < kR; ++i) lo[i] = hi[i] = _mm256_set1_ps(a.bias[0]);
  const float *w = a.wpack;  // tap t's weight at w[t * kConvMB]
  for (int64_t i = 0; i < a.kh; ++i) {
#pragma GCC unroll 4
    for (int64_t j = 0; j < kw; ++j, w += kConvMB) {
      const __m256 wt = _mm256_broadcast_ss(w);
      const float *base = a.xp + (r + i) * a.pw + c0 + j;
#pragma GCC unroll 4
      for (int q = 0; q < kR; ++q) {
        lo[q] = _mm256_fmadd_ps(wt, _mm256_loadu_ps(base + q * a.pw), lo[q]);
        hi[q] = _mm256_fmadd_ps(wt, _mm256_loadu_ps(base + q * a.pw + 8), hi[q]);
      }
    }
  }
  const int64_t valid = a.ow - c0;
#pragma GCC unroll 4
  for (int q = 0; q < kR; ++q) {
    float *dst = a.y + (r + q) * a.ow + c0;
    StoreConvHalf(dst, lo[q], valid, a.relu);
    if (valid > 8) StoreConvHalf(dst + 8, hi[q], valid - 8, a.relu);
  }
}
template <int kKw>
__attribute__((target("avx2,fma"))) void DepthwiseConvAvx2Impl(const DirectConvArgs &a) {
  int64_t r = 0;
  for (; r + 4 <= a.oh; r += 4)
    for (int64_t c0 = 0; c0 < a.ow; c0 += 16) DepthwiseRowsAvx2<4, kKw>(a, r, c0);
  for (; r < a.oh; ++r)
    for (int64_t c0 = 0; c0 < a.ow; c0 += 16) DepthwiseRowsAvx2<1, kKw>(a, r, c0);
}

// Stores kR rows of one 16-wide output chunk (the last chunk of a row masked), with the fused Relu if any.
template <int kR>
__attribute__((target("avx512f"), always_inline)) inline void StoreDepthwiseRows(const DirectConvArgs &a, int64_t r,
                                                                                  int64_t c0, const __m512 *acc) {
  const int64_t valid = std::min<int64_t>(kConvLanes, a.ow - c0);
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int q = 0; q < kR; ++q) {
    __m512 v = acc[q];
    if (a.relu) v = _mm512_mask_max_ps(v, static_cast<__mmask16>(0xFFFF), zero, v);  // as DirectConvAvx512
    float *dst = a.y + (r + q) * a.ow + c0;
    if (valid == kConvLanes) _mm512_storeu_ps(dst, v);
    else _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << valid) - 1u), v);
  }
}

// The depthwise rows with AVX-512: kR output rows x one 16-wide chunk, one accumulator each (the general AVX-512
// block would spend 7 of its 8 channel accumulators on absent channels); the same additions in the same order.
template <int kR, int kKw>
__attribute__((target("avx512f"), always_inline)) inline void DepthwiseRowsAvx512(const DirectConvArgs &a, int64_t r,
                                                                                   int64_t c0) {
  const int64_t kw = kKw > 0 ? kKw : a.kw;
  __m512 acc[kR];
#pragma GCC unroll 8
  for (int q = 0; q < kR; ++q) acc[q] = _mm512_set1_ps(a.bias[0]);
  const float *w = a.wpack;  // tap t's weight at w[t * kConvMB]
  for (int64_t i = 0; i < a.kh; ++i) {
#pragma GCC unroll 4
    for (int64_t j = 0; j < kw; ++j, w += kConvMB) {
      const __m512 wt = _mm512_set1_ps(*w);
      const float *base = a.xp + (r + i) * a.pw + c0 + j;
#pragma GCC unroll 8
      for (int q = 0; q < kR; ++q) acc[q] = _mm512_fmadd_ps(wt, _mm512_loadu_ps(base + q * a.pw), acc[q]);
    }
  }
  StoreDepthwiseRows<kR>(a, r, c0, acc);
}
template <int kKw>
__attribute__((target("avx512f"))) void DepthwiseConvAvx512Impl(const DirectConvArgs &a) {
  int64_t r = 0;
  for (; r + 8 <= a.oh; r += 8)
    for (int64_t c0 = 0; c0 < a.ow; c0 += kConvLanes) DepthwiseRowsAvx512<8, kKw>(a, r, c0);
  for (; r + 4 <= a.oh; r += 4)
    for (int64_t c0 = 0; c0 < a.ow; c0 += kConvLanes) DepthwiseRowsAvx512<4, kKw>(a, r, c0);
  for (; r < a.oh; ++r)
    for (int64_t c0 = 0; c0 < a.ow; c0 += kConvLanes) DepthwiseRowsAvx512<1, kKw>(a, r, c0);
}
// Depthwise at stride 1 with AVX-512 and 3, 5 or 7 taps per row (EfficientNet's 5x5, ConvNeXt's 7x7): the rows
// kernel above loads every tap's 16 inputs unaligned, mostly across two cache lines, and each input row once per
// output row that reads it (1.7-2.0x onnxruntime on 7x7 and 5x5). Here kR output rows x one 16-wide chunk read
// each input row once, as two aligned vectors, and make the kw shifted windows from them in registers (valignd);
// each accumulator still gets the bias, then one FMA per tap in (kh, kw) order, so the same bits.
template <int J>
__attribute__((target("avx512f"), always_inline)) inline __m512 ShiftLanes(__m512 lo, __m512 hi) {
  // the all-ones mask: GCC 12's -Wmaybe-uninitialized on the unmasked form's undefined source
  return _mm512_castsi512_ps(
      _mm512_maskz_alignr_epi32(static_cast<__mmask16>(0xFFFF), _mm512_castps_si512(hi), _mm512_castps_si512(lo), J));
}
template <int kKw, int J = 0>
__attribute__((target("avx512f"), always_inline)) inline void ShiftsOf(__m512 lo, __m512 hi, __m512 *s) {
  s[J] = ShiftLanes<J>(lo, hi);
  if constexpr (J + 1 < kKw) ShiftsOf<kKw, J + 1>(lo, hi, s);
}
template <int kR, int kKw>
__attribute__((target("avx512f"), always_inline)) inline void DepthwiseAlignedRows(const DirectConvArgs &a, int64_t r,
                                                                                    int64_t c0) {
  __m512 acc[kR];
#pragma GCC unroll 8
  for (int q = 0; q < kR; ++q) acc[q] = _mm512_set1_ps(a.bias[0]);
  const int64_t rows = kR + a.kh - 1;
  for (int64_t R = 0; R < rows; ++R) {
    const float *x = a.xp + (r + R) * a.pw + c0;
    __m512 s[kKw];
    ShiftsOf<kKw>(_mm512_load_ps(x), _mm512_load_ps(x + kConvLanes), s);
#pragma GCC unroll 8
    for (int q = 0; q < kR; ++q) {
      const int64_t i = R - q;  // output row r + q reads input row r + R through kernel row i
      if (i < 0 || i >= a.kh) continue;
      const float *w = a.wpack + i * kKw * kConvMB;  // tap t's weight at w[t * kConvMB]
#pragma GCC unroll 8
      for (int j = 0; j < kKw; ++j) acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(w[j * kConvMB]), s[j], acc[q]);
    }
  }
  StoreDepthwiseRows<kR>(a, r, c0, acc);
}
template <int kKw>
__attribute__((target("avx512f"))) void DepthwiseAlignedAvx512(const DirectConvArgs &a) {
  int64_t r = 0;
  for (; r + 8 <= a.oh; r += 8)
    for (int64_t c0 = 0; c0 < a.ow; c0 += kConvLanes) DepthwiseAlignedRows<8, kKw>(a, r, c0);
  for (; r + 4 <= a.oh; r += 4)
    for (int64_t c0 = 0; c0 < a.ow; c0 += kConvLanes) DepthwiseAlignedRows<4, kKw>(a, r, c0);
  for (; r < a.oh; ++r)
    for (int64_t c0 = 0; c0 < a.ow; c0 += kConvLanes) DepthwiseAlignedRows<1, kKw>(a, r, c0);
}

// The direct convolution over flat positions (DirectConvArgs::flat). With 16-wide chunks of single rows a 6- or
// 8-wide map (ResNet's last stages at small inputs) used 6 or 8 of 16 lanes: 2.1-2.4x onnxruntime's time.
// kNV chunks from p0 for the channel block mb (an odd last chunk alone: such maps have few chunks, a repeated
// one was a third of the work at 6x6).
template <int kNV, bool kS2>
__attribute__((target("avx512f"), always_inline)) inline void FlatChunksAvx512(const DirectConvArgs &a, int64_t mb,
                                                                              int64_t t0, int64_t P) {
  const int64_t K = a.cg * a.kh * a.kw, plane = a.ph * a.pw, out_sp = a.oh * a.ow;
  const float *w = a.wpack + mb * K * kConvMB;
  const int64_t mcount = std::min<int64_t>(kConvMB, a.mg - mb * kConvMB);
  const float *base[kNV];
  int64_t pv[kNV], yv[kNV];  // chunk t = n P + p: chunk p of image n
  for (int v = 0; v < kNV; ++v) {
    const int64_t n = (t0 + v) / P;
    pv[v] = t0 + v - n * P;
    base[v] = a.xp + n * a.img + pv[v] * kConvLanes;
    yv[v] = n * a.ynext + a.first[pv[v]];
  }
  __m512 acc[kConvMB][kNV];
#pragma GCC unroll 8
  for (int m = 0; m < kConvMB; ++m) {
    const __m512 b = _mm512_set1_ps(a.bias[mb * kConvMB + m]);
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[m][v] = b;
  }
  for (int64_t c = 0; c < a.cg; ++c) {
    for (int64_t i = 0; i < a.kh; ++i) {
      const int64_t roff = kS2 ? (4 * c + 2 * (i & 1)) * plane + (i >> 1) * a.pw : c * plane + i * a.dh * a.pw;
      for (int64_t j = 0; j < a.kw; ++j, w += kConvMB) {
        const int64_t toff = roff + (kS2 ? (j & 1) * plane + (j >> 1) : j * a.dw);
        __m512 x[kNV];
#pragma GCC unroll 4
        for (int v = 0; v < kNV; ++v) x[v] = _mm512_loadu_ps(base[v] + toff);
#pragma GCC unroll 8
        for (int m = 0; m < kConvMB; ++m) {
          const __m512 sc = _mm512_set1_ps(w[m]);
#pragma GCC unroll 4
          for (int v = 0; v < kNV; ++v) acc[m][v] = _mm512_fmadd_ps(sc, x[v], acc[m][v]);
        }
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  float *yb = a.y + mb * kConvMB * out_sp;
  for (int m = 0; m < mcount; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      __m512 r = acc[m][v];
      if (a.relu) r = _mm512_mask_max_ps(r, static_cast<__mmask16>(0xFFFF), zero, r);  // as DirectConvAvx512
      const unsigned keep = a.keep[pv[v]];
      // compress in a register (a compressing store to memory is microcoded on some cores), then store
      const unsigned n = static_cast<unsigned>(__builtin_popcount(keep));
      _mm512_mask_storeu_ps(yb + m * out_sp + yv[v], static_cast<__mmask16>((1u << n) - 1u),
                            _mm512_maskz_compress_ps(static_cast<__mmask16>(keep), r));
    }
  }
}

template <bool kS2>
__attribute__((target("avx512f"))) void DirectConvFlatAvx512(const DirectConvArgs &a) {
  const int64_t P = ((a.oh - 1) * a.pw + a.ow + kConvLanes - 1) / kConvLanes;
  const int64_t nmb = (a.mg + kConvMB - 1) / kConvMB;
  const int64_t T = a.nimg * P;
  for (int64_t mb = 0; mb < nmb; ++mb) {
    int64_t t0 = 0;
    for (; t0 + kConvNV <= T; t0 += kConvNV) FlatChunksAvx512<kConvNV, kS2>(a, mb, t0, P);
    if (t0 < T) FlatChunksAvx512<1, kS2>(a, mb, t0, P);
  }
}

// One channel in and out (depthwise) over flat positions at stride 2: kNV chunks from p0, one accumulator each (the
// channel blocks above would spend 7 of their 8 accumulators on absent channels: 2.3x onnxruntime on 12x12).
template <int kNV>
__attribute__((target("avx512f"), always_inline)) inline void DepthwiseFlatS2Avx512(const DirectConvArgs &a,
                                                                                   int64_t p0) {
  const int64_t plane = a.ph * a.pw;
  const float *base = a.xp + p0 * kConvLanes;
  __m512 acc[kNV];
#pragma GCC unroll 4
  for (int v = 0; v < kNV; ++v) acc[v] = _mm512_set1_ps(a.bias[0]);
  const float *w = a.wpack;  // tap t's weight at w[t * kConvMB]
  for (int64_t i = 0; i < a.kh; ++i)
    for (int64_t j = 0; j < a.kw; ++j, w += kConvMB) {
      const float *tap = base + (2 * (i & 1) + (j & 1)) * plane + (i >> 1) * a.pw + (j >> 1);
      const __m512 wt = _mm512_set1_ps(*w);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[v] = _mm512_fmadd_ps(wt, _mm512_loadu_ps(tap + v * kConvLanes), acc[v]);
    }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int v = 0; v < kNV; ++v) {
    __m512 r = acc[v];
    if (a.relu) r = _mm512_mask_max_ps(r, static_cast<__mmask16>(0xFFFF), zero, r);  // as DirectConvAvx512
    const unsigned keep = a.keep[p0 + v], n = static_cast<unsigned>(__builtin_popcount(keep));
    _mm512_mask_storeu_ps(a.y + a.first[p0 + v], static_cast<__mmask16>((1u << n) - 1u),
                          _mm512_maskz_compress_ps(static_cast<__mmask16>(keep), r));
  }
}
__attribute__((target("avx512f"))) void DepthwiseConvFlatS2Avx512(const DirectConvArgs &a) {
  const int64_t P = ((a.oh - 1) * a.pw + a.ow + kConvLanes - 1) / kConvLanes;
  int64_t p0 = 0;
  for (; p0 + 4 <= P; p0 += 4) DepthwiseFlatS2Avx512<4>(a, p0);
  for (; p0 < P; ++p0) DepthwiseFlatS2Avx512<1>(a, p0);
}

// The four phase planes of DirectConvArgs::flat at stride 2 from a group's cg channels of X (H x Wd, pads pt, pl
// before): per padded row, 32 columns from two masked loads (zeros outside X), split into even and odd columns by
// permutes. Element by element with a call per row this took as long as the convolution on 11x11 maps.
__attribute__((target("avx512f"))) void PhasePlanes4Avx512(const float *x, float *xp, int64_t cg, int64_t H,
                                                           int64_t Wd, int64_t pt, int64_t pl, int64_t ph,
                                                           int64_t pw) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t r = 0; r < ph; ++r) {
        float *d0 = xp + ((c * 4 + 2 * a) * ph + r) * pw, *d1 = d0 + ph * pw;
        const int64_t ir = 2 * r + a - pt;
        for (int64_t c0 = 0; c0 < pw; c0 += kConvLanes) {
          const __mmask16 st = static_cast<__mmask16>((1u << std::min<int64_t>(kConvLanes, pw - c0)) - 1u);
          // lanes l of the 32 padded columns 2 c0 + l: input column base + l, inside X for l in [lo, hi)
          const int64_t base = 2 * c0 - pl;
          const int64_t lo = std::clamp<int64_t>(-base, 0, 32), hi = std::clamp<int64_t>(Wd - base, lo, 32);
          const uint64_t in = ir < 0 || ir >= H ? 0 : ((uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1);
          __m512 v0 = zero, v1 = zero;
          if (in) {
            const float *src = x + (c * H + ir) * Wd + base;
            v0 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(in & 0xFFFF), src);
            v1 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(in >> 16), src + kConvLanes);
          }
          _mm512_mask_storeu_ps(d0 + c0, st, _mm512_permutex2var_ps(v0, even, v1));
          _mm512_mask_storeu_ps(d1 + c0, st, _mm512_permutex2var_ps(v0, odd, v1));
        }
      }
}

// Depthwise at stride 2 straight from the input plane (AVX-512, no padded copy): per input row, the 48 columns a
// 16-output chunk reads come in as three masked loads (zeros outside the row) and are split into even and odd
// columns by permutes; tap j of the row is the even (odd) columns shifted by j / 2. The phase planes cost as much as
// the convolution on such maps and the channels-last path transposes every map twice (MobileNet's 3x3 s2 on
// 2x96x32x32: 2.5x onnxruntime).
__attribute__((target("avx512f"))) void DepthwiseS2PlaneAvx512(const float *x, int64_t H, int64_t Wd, int64_t pt,
                                                               int64_t pl, const float *w, int64_t kh, int64_t kw,
                                                               float bias, bool relu, float *y, int64_t oh,
                                                               int64_t ow) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i step = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < oh; ++r)
    for (int64_t c0 = 0; c0 < ow; c0 += kConvLanes) {
      // lanes l of the 48 columns from base: input column base + l, inside the row for l in [lo, hi)
      const int64_t base = 2 * c0 - pl;
      const int64_t lo = std::clamp<int64_t>(-base, 0, 48), hi = std::clamp<int64_t>(Wd - base, lo, 48);
      const uint64_t in = ((uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1);
      const __mmask16 m0 = static_cast<__mmask16>(in), m1 = static_cast<__mmask16>(in >> 16),
                      m2 = static_cast<__mmask16>(in >> 32);
      __m512 acc = _mm512_set1_ps(bias);
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t ir = 2 * r + i - pt;
        if (ir < 0 || ir >= H) continue;
        const float *src = x + ir * Wd + base;
        const __m512 v0 = _mm512_maskz_loadu_ps(m0, src), v1 = _mm512_maskz_loadu_ps(m1, src + 16);
        const __m512 v2 = _mm512_maskz_loadu_ps(m2, src + 32);
        const __m512 e = _mm512_permutex2var_ps(v0, even, v1), o = _mm512_permutex2var_ps(v0, odd, v1);
        // columns 32 + 2 l (+ 1) in lanes 0-7: where taps j >= 2 run past e and o
        const __m512 e2 = _mm512_permutex2var_ps(v2, even, v2), o2 = _mm512_permutex2var_ps(v2, odd, v2);
        const float *wr = w + i * kw;
        for (int64_t j = 0; j < kw; ++j) {
          const __m512 lo_half = (j & 1) ? o : e, hi_half = (j & 1) ? o2 : e2;
          const __m512 tap = j < 2 ? lo_half
                                   : _mm512_permutex2var_ps(lo_half, _mm512_add_epi32(step, _mm512_set1_epi32(
                                                                         static_cast<int>(j >> 1))), hi_half);
          acc = _mm512_fmadd_ps(_mm512_set1_ps(wr[j]), tap, acc);
        }
      }
      if (relu) acc = _mm512_mask_max_ps(acc, static_cast<__mmask16>(0xFFFF), zero, acc);  // as DirectConvAvx512
      const __mmask16 st = static_cast<__mmask16>((1u << std::min<int64_t>(kConvLanes, ow - c0)) - 1u);
      _mm512_mask_storeu_ps(y + r * ow + c0, st, acc);
    }
}

// Depthwise at stride 2 on maps whose phase rows fit one register (ow + (kw - 1) / 2 <= 16: EfficientNet's 5x5 on
// 14x14 to 7x7): the four phase planes of DirectConvArgs::flat, their rows kept s apart so that a 16-lane chunk
// holds about two output rows, built per channel from two masked loads and two permutes per input row with masks
// fixed per conv (the generic builder worked them out per row and chunk: ~75 ns of ~190 ns per channel on 672x14x14),
// and two channels per kernel call, so that eight accumulators hide the FMA latency (four chains of 25 dependent
// FMAs waited on each other). Each output: its bias, then one FMA per tap in (kh, kw) order, a padded tap adding 0 * w.
struct DwFlatS2Geom {
  int64_t H, Wd, pt, pl, kh, kw;
  int64_t s;       // a phase row's floats: ow + (kw - 1) / 2
  int64_t rows;    // a phase plane's rows: oh + (kh - 1) / 2
  int64_t plane;   // a phase plane's floats (past every chunk's last tap)
  int64_t chunks;  // 16-lane chunks over (oh - 1) s + ow flat positions
  __mmask16 m0, m1, st;  // input columns -pl .. 31 - pl inside the row; the s floats of a phase row
  const uint16_t *keep;  // per chunk: its lanes on outputs
  const int64_t *first;  // per chunk: its first output's offset in the map
};
// One channel's phase planes (xp: 4 planes; padded rows outside X are left as they are: zeros from the caller).
__attribute__((target("avx512f"))) void DwFlatS2Planes(const DwFlatS2Geom &g, const float *x,
                                                                           float *xp) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const int64_t end = std::min(g.H, 2 * g.rows - g.pt);  // padded rows past 2 rows are read by no output
  for (int64_t ir = 0; ir < end; ++ir) {
    const int64_t R = ir + g.pt;
    const float *src = x + ir * g.Wd - g.pl;
    const __m512 v0 = _mm512_maskz_loadu_ps(g.m0, src), v1 = _mm512_maskz_loadu_ps(g.m1, src + 16);
    float *d = xp + 2 * (R & 1) * g.plane + (R >> 1) * g.s;
    _mm512_mask_storeu_ps(d, g.st, _mm512_permutex2var_ps(v0, even, v1));
    _mm512_mask_storeu_ps(d + g.plane, g.st, _mm512_permutex2var_ps(v0, odd, v1));
  }
}
// kNV chunks from p0 of kCh channels (xp[c]: its 4 planes, w[c]: its kh x kw weights, y[c]: its map).
template <int kNV, int kCh>
__attribute__((target("avx512f"), always_inline)) inline void DwFlatS2Chunks(const DwFlatS2Geom &g,
                                                                           const float *const *xp,
                                                                           const float *const *w, const float *bias,
                                                                           bool relu, float *const *y, int64_t p0) {
  __m512 acc[kCh][kNV];
#pragma GCC unroll 2
  for (int c = 0; c < kCh; ++c) {
    const __m512 b = _mm512_set1_ps(bias[c]);
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[c][v] = b;
  }
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t off = (2 * (i & 1) + (j & 1)) * g.plane + (i >> 1) * g.s + (j >> 1) + p0 * 16, t = i * g.kw + j;
#pragma GCC unroll 2
      for (int c = 0; c < kCh; ++c) {
        const __m512 wt = _mm512_set1_ps(w[c][t]);
#pragma GCC unroll 4
        for (int v = 0; v < kNV; ++v) acc[c][v] = _mm512_fmadd_ps(wt, _mm512_loadu_ps(xp[c] + off + v * 16), acc[c][v]);
      }
    }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int c = 0; c < kCh; ++c)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      __m512 r = acc[c][v];
      if (relu) r = _mm512_mask_max_ps(r, static_cast<__mmask16>(0xFFFF), zero, r);  // as DirectConvAvx512
      const unsigned keep = g.keep[p0 + v], n = static_cast<unsigned>(__builtin_popcount(keep));
      _mm512_mask_storeu_ps(y[c] + g.first[p0 + v], static_cast<__mmask16>((1u << n) - 1u),
                            _mm512_maskz_compress_ps(static_cast<__mmask16>(keep), r));
    }
}
template <int kCh>
__attribute__((target("avx512f"))) void DwFlatS2Channels(const DwFlatS2Geom &g, const float *const *xp,
                                                         const float *const *w, const float *bias, bool relu,
                                                         float *const *y) {
  int64_t p0 = 0;
  for (; p0 + 4 <= g.chunks; p0 += 4) DwFlatS2Chunks<4, kCh>(g, xp, w, bias, relu, y, p0);
  switch (g.chunks - p0) {
    case 3: DwFlatS2Chunks<3, kCh>(g, xp, w, bias, relu, y, p0); break;
    case 2: DwFlatS2Chunks<2, kCh>(g, xp, w, bias, relu, y, p0); break;
    case 1: DwFlatS2Chunks<1, kCh>(g, xp, w, bias, relu, y, p0); break;
    default: break;
  }
}
// Maps i in [lo, hi) of X (n C + c: channel c of image n) into Y, in pairs; buf: 4 channels' planes, zeroed here
// (two pairs: the next pair's planes are built before the current pair's taps read theirs, so that the loads do not
// wait on the stores just made).
__attribute__((target("avx512f"))) void DwFlatS2Avx512(const DwFlatS2Geom &g, const float *X, int64_t in_sp,
                                                       const float *W, const float *B, bool relu, int64_t C,
                                                       float *Y, int64_t out_sp, int64_t lo, int64_t hi,
                                                       float *buf) {
  const int64_t kk = g.kh * g.kw, ch_floats = 4 * g.plane;
  std::fill(buf, buf + 4 * ch_floats, 0.0f);
  auto build = [&](int64_t i, int64_t k) {
    for (int64_t c = 0; c < 2 && i + c < hi; ++c)
      DwFlatS2Planes(g, X + (i + c) * in_sp, buf + ((k & 1) * 2 + c) * ch_floats);
  };
  build(lo, 0);
  for (int64_t i = lo, k = 0; i < hi; i += 2, ++k) {
    if (i + 2 < hi) build(i + 2, k + 1);
    const float *xp[2] = {buf + (k & 1) * 2 * ch_floats, buf + ((k & 1) * 2 + 1) * ch_floats};
    const int64_t c0 = i % C, c1 = (i + 1) % C;
    const float *w[2] = {W + c0 * kk, W + c1 * kk};
    const float bias[2] = {B ? B[c0] : 0.0f, B ? B[c1] : 0.0f};
    float *y[2] = {Y + i * out_sp, Y + (i + 1) * out_sp};
    if (i + 1 < hi) DwFlatS2Channels<2>(g, xp, w, bias, relu, y);
    else DwFlatS2Channels<1>(g, xp, w, bias, relu, y);
  }
}

void DirectConvAvx512Any(const DirectConvArgs &a) {
  if (a.flat && a.s2 && a.cg == 1 && a.mg == 1) return DepthwiseConvFlatS2Avx512(a);
  if (a.flat) return a.s2 ? DirectConvFlatAvx512<true>(a) : DirectConvFlatAvx512<false>(a);
  if (a.s2) return DirectConvAvx512<true>(a);
  if (a.cg == 1 && a.mg == 1) {
    if (a.aligned && a.kw == 3) return DepthwiseAlignedAvx512<3>(a);
    if (a.aligned && a.kw == 5) return DepthwiseAlignedAvx512<5>(a);
    if (a.aligned && a.kw == 7) return DepthwiseAlignedAvx512<7>(a);
    if (a.kw == 3) DepthwiseConvAvx512Impl<3>(a);
    else DepthwiseConvAvx512Impl<0>(a);
    return;
  }
  DirectConvAvx512<false>(a);
}

// Flat positions with AVX2 (DirectConvArgs::flat): kMC channels x one 16-position chunk as ConvChannelsAvx2, stored
// whole at the chunk's flat positions in a.yflat (AVX2 has no compress to drop the padding lanes in a register).
template <int kMC, bool kS2>
__attribute__((target("avx2,fma"), always_inline)) inline void FlatChannelsAvx2(const DirectConvArgs &a, int64_t p,
                                                                               int64_t m0, int64_t ystride) {
  const int64_t K = a.cg * a.kh * a.kw, plane = a.ph * a.pw;
  auto weights_of = [&](int64_t ch) { return (ch / kConvMB) * K * kConvMB + ch % kConvMB; };
  const float *w = a.wpack + weights_of(m0);
  int64_t off[kMC];
#pragma GCC unroll 8
  for (int m = 0; m < kMC; ++m) off[m] = weights_of(m0 + m) - weights_of(m0);
  const float *base = a.xp + p * 16;
  __m256 lo[kMC], hi[kMC];
#pragma GCC unroll 8
  for (int m = 0; m < kMC; ++m) lo[m] = hi[m] = _mm256_set1_ps(a.bias[m0 + m]);
  for (int64_t c = 0; c < a.cg; ++c) {
    for (int64_t i = 0; i < a.kh; ++i) {
      const int64_t roff = kS2 ? (4 * c + 2 * (i & 1)) * plane + (i >> 1) * a.pw : c * plane + i * a.pw;
      for (int64_t j = 0; j < a.kw; ++j, w += kConvMB) {
        const float *tap = base + roff + (kS2 ? (j & 1) * plane + (j >> 1) : j);
        const __m256 x0 = _mm256_loadu_ps(tap), x1 = _mm256_loadu_ps(tap + 8);
#pragma GCC unroll 8
        for (int m = 0; m < kMC; ++m) {
          const __m256 wm = _mm256_broadcast_ss(w + off[m]);
          lo[m] = _mm256_fmadd_ps(wm, x0, lo[m]);
          hi[m] = _mm256_fmadd_ps(wm, x1, hi[m]);
        }
      }
    }
  }
  float *yb = a.yflat + m0 * ystride + p * 16;
#pragma GCC unroll 8
  for (int m = 0; m < kMC; ++m) {
    StoreConvHalf(yb + m * ystride, lo[m], 8, a.relu);
    StoreConvHalf(yb + m * ystride + 8, hi[m], 8, a.relu);
  }
}
template <bool kS2>
__attribute__((target("avx2,fma"))) void DirectConvFlatAvx2(const DirectConvArgs &a) {
  const int64_t P = ((a.oh - 1) * a.pw + a.ow + 15) / 16, ystride = P * 16;
  // one chunk through every channel block: the input it reads stays in cache while the weights pass
  for (int64_t p = 0; p < P; ++p)
    for (int64_t m0 = 0; m0 < a.mg;) {
      const int64_t left = a.mg - m0, take = left >= 9 || left == 6 ? 6 : left > 6 ? 4 : left;  // as above
      switch (take) {
        case 6: FlatChannelsAvx2<6, kS2>(a, p, m0, ystride); break;
        case 5: FlatChannelsAvx2<5, kS2>(a, p, m0, ystride); break;
        case 4: FlatChannelsAvx2<4, kS2>(a, p, m0, ystride); break;
        case 3: FlatChannelsAvx2<3, kS2>(a, p, m0, ystride); break;
        case 2: FlatChannelsAvx2<2, kS2>(a, p, m0, ystride); break;
        default: FlatChannelsAvx2<1, kS2>(a, p, m0, ystride); break;
      }
      m0 += take;
    }
  for (int64_t m = 0; m < a.mg; ++m)
    for (int64_t r = 0; r < a.oh; ++r)
      std::memcpy(a.y + (m * a.oh + r) * a.ow, a.yflat + m * ystride + r * a.pw,
                  static_cast<size_t>(a.ow) * sizeof(float));
}

__attribute__((target("avx2,fma"))) void DirectConvAvx2(const DirectConvArgs &a) {
  if (a.flat) return a.s2 ? DirectConvFlatAvx2<true>(a) : DirectConvFlatAvx2<false>(a);
  if (a.cg == 1 && a.mg == 1 && !a.s2) {
    if (a.kw == 3) DepthwiseConvAvx2Impl<3>(a);
    else DepthwiseConvAvx2Impl<0>(a);
    return;
  }
  if (a.s2) {
    if (a.kw == 3) DirectConvAvx2Impl<3, true>(a);
    else DirectConvAvx2Impl<0, true>(a);
    return;
  }
  if (a.kw == 3) DirectConvAvx2Impl<3, false>(a);
  else DirectConvAvx2Impl<0, false>(a);
}
#endif


// ---- Conv ----

// dst[o] = src[2 o] for o in [lo, hi) (im2col's rows at stride 2); src has `avail` readable floats.
template <class T>
void CopyEven(const T *src, int64_t, int64_t lo, int64_t hi, bool, T *dst) {
  for (int64_t o = lo; o < hi; ++o) dst[o] = src[2 * o];
}
#ifdef TWIN_HAVE_X86
// Eight outputs from two loads: the even lanes by a shuffle (order 0 1 4 5 2 3 6 7), then a 64-bit permute.
__attribute__((target("avx2"))) void CopyEvenAvx2(const float *src, int64_t avail, int64_t lo, int64_t hi,
                                                   float *dst) {
  int64_t o = lo;
  for (; o + 8 <= hi && 2 * o + 16 <= avail; o += 8) {
    const __m256 a = _mm256_loadu_ps(src + 2 * o), b = _mm256_loadu_ps(src + 2 * o + 8);
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    _mm256_storeu_ps(dst + o, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  if (o >= hi) return;
  // The row's tail: masked loads stop at avail (they never fault), the masked store at hi.
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i left = _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(avail - 2 * o, 64)));
  const __m256 a = _mm256_maskload_ps(src + 2 * o, _mm256_cmpgt_epi32(left, iota));
  const __m256 b = _mm256_maskload_ps(src + 2 * o + 8,
                                      _mm256_cmpgt_epi32(_mm256_sub_epi32(left, _mm256_set1_epi32(8)), iota));
  const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
  _mm256_maskstore_ps(dst + o, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi - o)), iota),
                      _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
}
template <>
void CopyEven<float>(const float *src, int64_t avail, int64_t lo, int64_t hi, bool avx2, float *dst) {
  if (avx2) return CopyEvenAvx2(src, avail, lo, hi, dst);
  for (int64_t o = lo; o < hi; ++o) dst[o] = src[2 * o];
}
#endif

bool InferConv(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &w = *c->in[1];
  if (!FloatOnly(x.dtype) || w.dtype != x.dtype || (c->has(2) && c->in[2]->dtype != x.dtype)) {
    *reason = "X, W and B must share a float dtype, got " + DescStr(x) + " and " + DescStr(w);
    return false;
  }
  if (x.dims.size() < 3 || w.dims.size() != x.dims.size()) {
    *reason = "X and W must have the same rank >= 3, got " + ShapeStr(x.dims) + " and " + ShapeStr(w.dims);
    return false;
  }
  int64_t group;
  if (!AttrInt(*c->node, "group", 1, &group, reason)) return false;
  const size_t nsp = x.dims.size() - 2;
  std::vector<int64_t> kernel(w.dims.begin() + 2, w.dims.end());
  bool present;
  std::vector<int64_t> ks;
  if (!AttrInts(*c->node, "kernel_shape", &ks, &present, reason)) return false;
  if (present) {
    if (ks.size() != nsp) {
      *reason = "kernel_shape has " + std::to_string(ks.size()) + " values for " + std::to_string(nsp) + " spatial dims";
      return false;
    }
    for (size_t i = 0; i < nsp; ++i) {
      if (kernel[i] >= 0 && ks[i] != kernel[i]) {
        *reason = "kernel_shape " + ShapeStr(ks) + " does not match W " + ShapeStr(w.dims);
        return false;
      }
      kernel[i] = ks[i];
    }
  }
  const int64_t C = x.dims[1], M = w.dims[0];
  if (group < 1 || (M >= 0 && M % group != 0) || (C >= 0 && w.dims[1] >= 0 && C != w.dims[1] * group)) {
    *reason = "channels do not match: X " + ShapeStr(x.dims) + ", W " + ShapeStr(w.dims) + ", group " +
              std::to_string(group);
    return false;
  }
  if (c->has(2) && (c->in[2]->dims.size() != 1 || (M >= 0 && c->in[2]->dims[0] >= 0 && c->in[2]->dims[0] != M))) {
    *reason = "B must be 1-D of size M, got " + ShapeStr(c->in[2]->dims);
    return false;
  }
  std::vector<int64_t> out = {x.dims[0], M};
  bool unknown_k = false;
  for (int64_t k : kernel) unknown_k = unknown_k || k < 0;
  if (unknown_k) {
    out.resize(x.dims.size(), -1);
  } else {
    Window win;
    if (!MakeWindow(*c->node, std::vector<int64_t>(x.dims.begin() + 2, x.dims.end()), kernel, false, &win, reason))
      return false;
    for (size_t i = kMaxSpatial - nsp; i < kMaxSpatial; ++i) out.push_back(win.out[i]);
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims = std::move(out);
  return true;
}

// One image of ConvKernel's small-map depthwise path: xt [in position][C], wt [tap][C] -> yt [out position][C].
template <class T>
__attribute__((always_inline)) inline void TinyDepthwiseBody(const Window &w, const T *xt, const T *wt, const T *B,
                                                             bool relu, int64_t C, T *yt) {
  int64_t q = 0;
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2, ++q) {
        T *__restrict acc = yt + q * C;
        for (int64_t c = 0; c < C; ++c) acc[c] = B ? B[c] : T(0);
        for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
          const int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
          if (i0 < 0 || i0 >= w.in[0]) continue;
          for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
            const int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
            if (i1 < 0 || i1 >= w.in[1]) continue;
            for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
              const int64_t i2 = o2 * w.s[2] - w.pb[2] + k2 * w.d[2];
              if (i2 < 0 || i2 >= w.in[2]) continue;
              const T *__restrict xr = xt + ((i0 * w.in[1] + i1) * w.in[2] + i2) * C;
              const T *__restrict wr = wt + ((k0 * w.k[1] + k1) * w.k[2] + k2) * C;
              for (int64_t c = 0; c < C; ++c) acc[c] += xr[c] * wr[c];
            }
          }
        }
        if (relu)
          for (int64_t c = 0; c < C; ++c) acc[c] = acc[c] < T(0) ? T(0) : acc[c];
      }
}

template <class T>
void TinyDepthwiseImage(const Window &w, const T *xt, const T *wt, const T *B, bool relu, int64_t C, T *yt) {
  TinyDepthwiseBody(w, xt, wt, B, relu, C, yt);
}

// The taps of each output position that fall inside the input, for the small-map depthwise path: position q's are
// [pos[q], pos[q + 1]) of in (the input position) and tap (the weight's tap). Listed once per kernel.
struct DwTapLists {
  std::vector<int32_t> pos, in, tap;
};
DwTapLists ListDwTaps(const Window &w) {
  DwTapLists l;
  l.pos.push_back(0);
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
        for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
          const int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
          if (i0 < 0 || i0 >= w.in[0]) continue;
          for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
            const int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
            if (i1 < 0 || i1 >= w.in[1]) continue;
            for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
              const int64_t i2 = o2 * w.s[2] - w.pb[2] + k2 * w.d[2];
              if (i2 < 0 || i2 >= w.in[2]) continue;
              l.in.push_back(static_cast<int32_t>((i0 * w.in[1] + i1) * w.in[2] + i2));
              l.tap.push_back(static_cast<int32_t>((k0 * w.k[1] + k1) * w.k[2] + k2));
            }
          }
        }
        l.pos.push_back(static_cast<int32_t>(l.in.size()));
      }
  return l;
}

#ifdef TWIN_HAVE_X86
// float32 with AVX2: a block of channels kept in registers across an output position's taps (the body above reads
// and writes its accumulator row once per tap: 2.0-3.0x onnxruntime on EfficientNet's 5x5 maps), and the blocks
// outermost, so that a block's slice of the image and of the weights stays in L1 across the positions.
__attribute__((target("avx2,fma"), always_inline)) inline __m256 DwTap8(__m256 acc, const float *x, const float *w) {
  return _mm256_fmadd_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(w), acc);
}
// 8 kNV channels (xt, wt, B and y point at the first) of one output position over its n taps.
template <int kNV>
__attribute__((target("avx2,fma"), always_inline)) inline void DwChannels(const float *xt, const float *wt,
                                                                         const float *B, bool relu, int64_t C,
                                                                         const int32_t *in, const int32_t *tap,
                                                                         int64_t n, float *y) {
  __m256 acc[kNV];
  for (int v = 0; v < kNV; ++v) acc[v] = B ? _mm256_loadu_ps(B + 8 * v) : _mm256_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const float *x = xt + in[t] * C, *wr = wt + tap[t] * C;
    for (int v = 0; v < kNV; ++v) acc[v] = DwTap8(acc[v], x + 8 * v, wr + 8 * v);
  }
  // max(0, acc) returns acc when it is NaN (the second operand), as the scalar `acc < 0 ? 0 : acc` does
  for (int v = 0; v < kNV; ++v) _mm256_storeu_ps(y + 8 * v, relu ? _mm256_max_ps(_mm256_setzero_ps(), acc[v]) : acc[v]);
}
template <int kNV>
__attribute__((target("avx2,fma"), always_inline)) inline void DwBlock(const DwTapLists &l, const float *xt,
                                                                      const float *wt, const float *B, bool relu,
                                                                      int64_t C, int64_t c, float *yt) {
  const int64_t P = static_cast<int64_t>(l.pos.size()) - 1;
  for (int64_t q = 0; q < P; ++q)
    DwChannels<kNV>(xt + c, wt + c, B ? B + c : nullptr, relu, C, l.in.data() + l.pos[q], l.tap.data() + l.pos[q],
                    l.pos[q + 1] - l.pos[q], yt + q * C + c);
}
__attribute__((target("avx2,fma"))) void TinyDepthwiseImageAvx2(const DwTapLists &l, const float *xt,
                                                                const float *wt, const float *B, bool relu,
                                                                int64_t C, float *yt) {
  int64_t c = 0;
  for (; c + 32 <= C; c += 32) DwBlock<4>(l, xt, wt, B, relu, C, c, yt);
  if (c + 16 <= C) DwBlock<2>(l, xt, wt, B, relu, C, c, yt), c += 16;
  if (c + 8 <= C) DwBlock<1>(l, xt, wt, B, relu, C, c, yt), c += 8;
  const int64_t P = static_cast<int64_t>(l.pos.size()) - 1;
  for (; c < C; ++c)
    for (int64_t q = 0; q < P; ++q) {
      float a = B ? B[c] : 0.0f;
      for (int32_t t = l.pos[q]; t < l.pos[q + 1]; ++t) a = std::fma(xt[l.in[t] * C + c], wt[l.tap[t] * C + c], a);
      yt[q * C + c] = relu && a < 0.0f ? 0.0f : a;
    }
}
// Depthwise channels last with AVX-512 at stride 1 or 2, no dilation, 3 / 5 / 7 taps per row (ConvNeXt's 7x7 on
// 768x7x7, EfficientNet's 5x5 stride 2 to 7x7): kJ outputs of one row x 16 channels in registers and the row's kKw
// weights in registers, each input column loaded once per kernel row and used by every output that reads it. The
// AVX2 kernel above loads an input and a weight per FMA (1.4-1.8x onnxruntime on these). The input comes with its
// columns zero-padded (xp: rows of pw positions), so the taps of a row need no bounds; rows outside the input are
// skipped. Each output: its bias, then one FMA per tap in (kh, kw) order (a padded column adds 0 * w).
struct DwClArgs {
  const float *xp;  // [H][pw][C], column 0 = input column -pl
  int64_t H, pw, C, kh, pt, OW;
  const float *wt;  // [tap][C]
  const float *B;
  bool relu;
  float *yt;  // [out position][C]
};
template <int kKw, int kS, int kJ>
__attribute__((target("avx512f"))) void DwClBlock(const DwClArgs &a, int64_t c0, __mmask16 m, int64_t oh,
                                                   int64_t ow0) {
  const int64_t C = a.C;
  __m512 acc[kJ];
  const __m512 b = a.B ? _mm512_maskz_loadu_ps(m, a.B + c0) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int j = 0; j < kJ; ++j) acc[j] = b;
  for (int64_t kh = 0; kh < a.kh; ++kh) {
    const int64_t ih = oh * kS - a.pt + kh;
    if (ih < 0 || ih >= a.H) continue;
    __m512 w[kKw];
#pragma GCC unroll 8
    for (int k = 0; k < kKw; ++k) w[k] = _mm512_maskz_loadu_ps(m, a.wt + (kh * kKw + k) * C + c0);
    const float *x = a.xp + (ih * a.pw + ow0 * kS) * C + c0;
#pragma GCC unroll 24
    for (int i = 0; i < (kJ - 1) * kS + kKw; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + i * C);
#pragma GCC unroll 8
      for (int j = 0; j < kJ; ++j) {
        const int k = i - j * kS;
        if (k >= 0 && k < kKw) acc[j] = _mm512_fmadd_ps(xv, w[k], acc[j]);
      }
    }
  }
  float *y = a.yt + (oh * a.OW + ow0) * C + c0;
#pragma GCC unroll 8
  for (int j = 0; j < kJ; ++j) {
    // max(0, acc) keeps a NaN acc (the second operand), as the scalar `acc < 0 ? 0 : acc` (full-mask form: see
    // StoreDepthwiseRows)
    const __m512 v = a.relu ? _mm512_mask_max_ps(acc[j], static_cast<__mmask16>(0xFFFF), _mm512_setzero_ps(), acc[j])
                            : acc[j];
    _mm512_mask_storeu_ps(y + j * C, m, v);
  }
}
template <int kKw, int kS>
__attribute__((target("avx512f"))) void DwClImage(const DwClArgs &a, int64_t OH) {
  for (int64_t c0 = 0; c0 < a.C; c0 += 16) {
    const int64_t n = std::min<int64_t>(16, a.C - c0);
    const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFFu : (1u << n) - 1u);
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t ow0 = 0;
      for (; ow0 + 8 <= a.OW; ow0 += 8) DwClBlock<kKw, kS, 8>(a, c0, m, oh, ow0);
      switch (a.OW - ow0) {
        case 7: DwClBlock<kKw, kS, 7>(a, c0, m, oh, ow0); break;
        case 6: DwClBlock<kKw, kS, 6>(a, c0, m, oh, ow0); break;
        case 5: DwClBlock<kKw, kS, 5>(a, c0, m, oh, ow0); break;
        case 4: DwClBlock<kKw, kS, 4>(a, c0, m, oh, ow0); break;
        case 3: DwClBlock<kKw, kS, 3>(a, c0, m, oh, ow0); break;
        case 2: DwClBlock<kKw, kS, 2>(a, c0, m, oh, ow0); break;
        case 1: DwClBlock<kKw, kS, 1>(a, c0, m, oh, ow0); break;
        default: break;
      }
    }
  }
}
void DwClImageAvx512(const DwClArgs &a, int64_t OH, int64_t kw, int64_t s) {
  if (s == 1) {
    if (kw == 3) DwClImage<3, 1>(a, OH);
    else if (kw == 5) DwClImage<5, 1>(a, OH);
    else DwClImage<7, 1>(a, OH);
  } else {
    if (kw == 3) DwClImage<3, 2>(a, OH);
    else if (kw == 5) DwClImage<5, 2>(a, OH);
    else DwClImage<7, 2>(a, OH);
  }
}
#endif

template <class T>
class ConvKernel : public Kernel {
 public:
  ConvKernel(const Window &w, int64_t N, int64_t C, int64_t M, int64_t group, bool has_bias)
      : w_(w), N_(N), C_(C), M_(M), G_(group), has_bias_(has_bias) {
    Init();
  }
  // Fused form: weights and bias already scaled by a folded BatchNormalization, optional Relu epilogue.
  ConvKernel(const Window &w, int64_t N, int64_t C, int64_t M, int64_t group, std::vector<T> weights,
             std::vector<T> bias, bool relu)
      : w_(w), N_(N), C_(C), M_(M), G_(group), has_bias_(true), fused_(true), relu_(relu),
        fw_(std::move(weights)), fb_(std::move(bias)) {
    Init();
  }
  void Init() {
    cg_ = C_ / G_;
    mg_ = M_ / G_;
    kk_ = w_.k[0] * w_.k[1] * w_.k[2];
    in_sp_ = w_.in[0] * w_.in[1] * w_.in[2];
    out_sp_ = w_.out[0] * w_.out[1] * w_.out[2];
    direct_ = kk_ == 1 && w_.s[0] == 1 && w_.s[1] == 1 && w_.s[2] == 1;
    for (size_t i = 0; i < kMaxSpatial; ++i) direct_ = direct_ && w_.pb[i] == 0 && w_.pe[i] == 0;
    // A 1x1 conv on small maps of several images (late ResNet stages, a classifier head as a 1x1 conv on 1x1
    // maps): one GEMM per image has N = a map's positions, and OpenBLAS repacks the weights on every call (batch 8
    // of 1280->1000 on 1x1 maps: 13.6x onnxruntime, 512->2048 on 8x7x7: 1.56x). The images' maps side by side make
    // one GEMM. Not when each image already has 4+ columns and the stack fewer than 16: OpenBLAS took 1.75x as long
    // for one GEMM with 8 columns as for two with 4 (256->512 on 2x2x2).
    const int64_t stacked = N_ * out_sp_;
    stack1x1_ = direct_ && N_ > 1 && out_sp_ > 0 && out_sp_ <= 64 && (out_sp_ < 4 || stacked >= 16);
    if (!direct_ && w_.out[0] > 1 && out_sp_ > 0) {  // 3-D: column blocks of about 1 MB (see Run)
      const int64_t row_bytes = cg_ * kk_ * w_.out[2] * static_cast<int64_t>(sizeof(T));
      const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(row_bytes, 1));
      if (rows < w_.out[0] * w_.out[1]) col_rows_ = rows;
    }
#ifdef TWIN_HAVE_X86
    if constexpr (std::is_same<T, float>::value) {
      dconv_ = !direct_ && kk_ > 1 && out_sp_ > 0 && w_.in[0] == 1 && w_.k[0] == 1 && w_.pb[0] == 0 &&
               w_.pe[0] == 0 && DirectConvPays(vmath::ActiveIsa(), cg_ * kk_);
      // Stride 2: the same kernels over two column phases of the padded input (no im2col).
      s2_ = dconv_ && S2Pays(vmath::ActiveIsa(), cg_ * kk_) && w_.s[0] == 1 &&
            w_.s[1] == 2 && w_.s[2] == 2;
      // Dilation with AVX-512 at stride 1 (not depthwise): the taps read the padded planes d apart. The phases
      // (InitPhases) copied the input apart and the outputs back (dilated Conv1d, WaveNet / TCN: 1.6-2.1x
      // onnxruntime), and maps under 8 columns per phase went to im2col (3x3 dilation 2 on 7x7: 1.9-2.4x).
      bool dil_ok = vmath::ActiveIsa() == vmath::Isa::kAvx512 && !(cg_ == 1 && mg_ == 1) && w_.d[0] == 1;
      for (size_t i = 0; i < kMaxSpatial; ++i) dil_ok = dil_ok && w_.s[i] == 1;
      for (size_t i = 0; i < kMaxSpatial; ++i)
        dconv_ = dconv_ && (s2_ || w_.s[i] == 1) && (w_.d[i] == 1 || dil_ok);
      s2_ = s2_ && dconv_;
      // Flat positions where they fill more lanes than row chunks do (a flat row, ow + kw - 1 at stride 1,
      // ow + (kw - 1) / 2 on the phase planes at stride 2, under 16 * ceil(ow / 16)); not for the depthwise
      // kernel at stride 1, which has its own row blocking.
      const int64_t ow = w_.out[2], flat_pw = ow + (s2_ ? (w_.k[2] - 1) / 2 : (w_.k[2] - 1) * w_.d[2]);
      // AVX2 (stride 2 only): the same positions, the outputs through a flat scratch.
      const bool avx512 = vmath::ActiveIsa() == vmath::Isa::kAvx512;
      flat_ = dconv_ && (avx512 || s2_) && (s2_ || !(cg_ == 1 && mg_ == 1)) &&
              flat_pw < (ow + kConvLanes - 1) / kConvLanes * kConvLanes;
      // Dilated on a small map: when under half the lanes hold outputs (the padding rows d (k - 1) wide), im2col
      // stays ahead (3x3 dilation 4 on 7x7: 3.0x -> 3.7x onnxruntime this way; dilation 2, 61% of the lanes:
      // 2.3x -> 2.1x).
      const bool dilated = w_.d[1] > 1 || w_.d[2] > 1;
      const int64_t lanes = flat_ ? ((w_.out[1] - 1) * flat_pw + ow + kConvLanes - 1) / kConvLanes * kConvLanes
                                  : w_.out[1] * ((ow + kConvLanes - 1) / kConvLanes * kConvLanes);
      if (dconv_ && dilated && 2 * w_.out[1] * ow < lanes) dconv_ = s2_ = flat_ = false;
    }
#endif
    if constexpr (std::is_same<T, float>::value) InitWinograd();
#ifdef TWIN_HAVE_X86
    avx2_ = vmath::ActiveIsa() != vmath::Isa::kBaseline;
#endif
    // Depthwise (one channel in, one out per group) on a small map: the per-channel paths spend their time on each
    // channel's setup and padding (a 16-lane chunk for a 2x2 output), so the channels go last and each tap is one
    // contiguous multiply-add over all of them (MobileNetV3's 5x5 depthwise convs on 2x2 and 4x4 maps: 4-6x of
    // onnxruntime before).
    // At stride 2 also on maps up to 16x16 out of 32x32: the flat stride-2 kernel's per-channel phase planes cost
    // more than its convolution there (MobileNet's 3x3 s2 on 2x96x32x32: 3.1-4.2x onnxruntime, here 2.4x); at
    // stride 1 the per-channel kernels stay ahead on 14x14 (576 channels: 1.54x -> 1.63x this way).
    bool s2only = true;
    for (size_t i = 0; i < kMaxSpatial; ++i) s2only = s2only && (w_.k[i] == 1 || w_.s[i] == 2);
    const bool small = out_sp_ <= 64 && in_sp_ <= 256;
    tiny_dw_ = cg_ == 1 && mg_ == 1 && G_ >= 8 && out_sp_ > 0 && kk_ > 1 &&
               (small || (s2only && out_sp_ <= 256 && in_sp_ <= 1024));
#ifdef TWIN_HAVE_X86
    // Depthwise at stride 2 with AVX-512 from the input planes (DepthwiseS2PlaneAvx512), ahead of the channels-last
    // path and the phase planes from 12 output columns on (under that most of its 16 lanes idle: 5x5 to 7x7 went
    // 1.55x -> 2.3x onnxruntime, 5x5 to 10x10 1.56x -> 1.82x; 3x3 to 16x16 2.46x -> 0.76x, 5x5 to 14x14 1.94x ->
    // 1.46x).
    if constexpr (std::is_same<T, float>::value) {
      dw_s2_ = vmath::ActiveIsa() == vmath::Isa::kAvx512 && cg_ == 1 && mg_ == 1 && kk_ > 1 && out_sp_ > 0 &&
               w_.in[0] == 1 && w_.k[0] == 1 && w_.pb[0] == 0 && w_.pe[0] == 0 && w_.s[0] == 1 && w_.s[1] == 2 &&
               w_.s[2] == 2 && w_.k[2] <= 7 && w_.out[2] >= 12;
      for (size_t i = 0; i < kMaxSpatial; ++i) dw_s2_ = dw_s2_ && w_.d[i] == 1;
      if (dw_s2_) tiny_dw_ = dconv_ = s2_ = flat_ = wino_ = false;
    }
#endif
#ifdef TWIN_HAVE_X86
    // Depthwise 3 / 5 / 7 taps per row at stride 1 or 2 with AVX-512: the channels-last path with its row-blocked
    // kernel (DwClImageAvx512) also on maps up to 28x28 while the padded channels-last input stays within ~1 MB
    // (384x14x14 7x7: 1.46x -> 1.04x onnxruntime, 240x28x28 5x5 s2: 1.49x -> 1.34x; 480x28x28 5x5 s2, 1.7 MB,
    // went 1.49x -> 1.56x, so stays on the per-channel kernel).
    if constexpr (std::is_same<T, float>::value) {
      const int64_t pw = (w_.out[2] - 1) * w_.s[2] + w_.k[2];
      const bool fits = out_sp_ <= 784 && w_.in[1] * pw * C_ * static_cast<int64_t>(sizeof(float)) <= (1 << 20);
      dwcl_ = cg_ == 1 && mg_ == 1 && G_ >= 8 && out_sp_ > 0 && kk_ > 1 && (tiny_dw_ || fits) &&
              vmath::ActiveIsa() == vmath::Isa::kAvx512 && w_.in[0] == 1 && w_.k[0] == 1 && w_.pb[0] == 0 &&
              w_.pe[0] == 0 && w_.s[1] == w_.s[2] && (w_.s[2] == 1 || w_.s[2] == 2) && w_.d[1] == 1 &&
              w_.d[2] == 1 && (w_.k[2] == 3 || w_.k[2] == 5 || w_.k[2] == 7);
      // 3x3 and 5x5 at stride 2 stay on the input planes: the transposes cost more than their taps (3x3 on
      // 2x96x32x32: 2.56x -> 0.71x onnxruntime, 240x28x28: 1.54x -> 1.04x; 5x5 on 240x28x28: 1.56x -> 0.94x, on
      // 64x56x56: 1.91x -> 0.98x, on 96x32x32: 1.53x -> 1.21x). 7x7 is mixed (240x28x28 1.56x -> 1.34x, 32x56x56
      // 1.52x -> 1.71x) and stays here.
      if (dwcl_ && dw_s2_ && w_.k[2] <= 5) dwcl_ = false;
      // 3x3 at stride 1 stays on the per-channel rows kernel where its 16-lane row chunks are at least 3/4 outputs
      // (14, 26, 28 columns): the transposes there cost more than the taps (128x28x28: 179 -> 93 us, 576x14x14 210 ->
      // 150, 1024x14x14 475 -> 268, float16 128x28x28 2.0x -> 1.1x onnxruntime; 96x20x20 and 64x17x17, 62% and 53%
      // of the lanes, went 47 -> 55 and 31 -> 38 us that way, so stay here).
      const int64_t ow16 = (w_.out[2] + kConvLanes - 1) / kConvLanes * kConvLanes;
      if (dwcl_ && !tiny_dw_ && w_.s[2] == 1 && w_.k[2] == 3 && 4 * w_.out[2] >= 3 * ow16) dwcl_ = false;
      if (dwcl_) {
        dwcl_pw_ = pw;
        tiny_dw_ = true;
        dw_s2_ = false;
      }
    }
#endif
#ifdef TWIN_HAVE_X86
    if constexpr (std::is_same<T, float>::value) InitDwFlatS2();
#endif
    if (tiny_dw_) {
      dconv_ = s2_ = flat_ = wino_ = false;
      dw_taps_ = ListDwTaps(w_);
      if (fused_) wt_ = std::make_shared<const std::vector<T>>(PackTaps(fw_.data()));
    }
    if (dconv_) {
      ph_ = w_.out[1] + (w_.k[1] - 1) * w_.d[1];
      pw_ = (w_.out[2] + kConvLanes - 1) / kConvLanes * kConvLanes + (w_.k[2] - 1) * w_.d[2];
      if (s2_) {  // per phase: rows 2 (oh - 1) + kh, columns past every chunk's last tap
        ph_ = 2 * (w_.out[1] - 1) + w_.k[1];
        pw_ = (w_.out[2] + kConvLanes - 1) / kConvLanes * kConvLanes + (w_.k[2] - 1) / 2;
      }
      nmb_ = (mg_ + kConvMB - 1) / kConvMB;
      if (flat_) InitFlat();
      // Depthwise at stride 1 with AVX-512, 3 / 5 / 7 taps per row: rows of a multiple of 16 (aligned loads)
      const int64_t kw = w_.k[2];
      dw_aligned_ = vmath::ActiveIsa() == vmath::Isa::kAvx512 && !s2_ && !flat_ && cg_ == 1 && mg_ == 1 &&
                    w_.d[1] == 1 && w_.d[2] == 1 && (kw == 3 || kw == 5 || kw == 7);
      if (dw_aligned_) pw_ = (pw_ + kConvLanes - 1) / kConvLanes * kConvLanes;
      if (fused_) {
        std::vector<T> wp(PackFloats());
        bp_.resize(BiasFloats());
        Pack(fw_.data(), fb_.data(), wp.data(), bp_.data());
        wp_ = std::make_shared<const std::vector<T>>(std::move(wp));
      }
    }
    if constexpr (std::is_same<T, float>::value) InitPhases();
    if constexpr (std::is_same<T, float>::value) InitChannelsLast();
    if constexpr (std::is_same<T, float>::value) InitSlices();
    if constexpr (std::is_same<T, float>::value) InitGroupConvs();
  }
  // Grouped 2-D (not depthwise): each group as a dense conv of its own (cg -> mg) where that conv takes Winograd,
  // which grouped convs otherwise never do (the direct kernel instead: groups 2 256->256 on 2x256x14x14 took 1.6x
  // onnxruntime's CPU time, the same work as two dense 128->128 convs 1.3x). At batch > 1 a group's channels are
  // gathered from the images first, so that one Winograd run covers all of their tiles.
  void InitGroupConvs() {
    if (G_ <= 1 || (cg_ == 1 && mg_ == 1) || slices_ || direct_ || tiny_dw_ || dw_s2_ || cl_ ||
        !phase_groups_.empty() || out_sp_ <= 0 || w_.in[0] != 1 || w_.k[0] != 1)
      return;
    const int64_t K = cg_ * kk_;
    std::vector<std::unique_ptr<ConvKernel<T>>> ks;
    for (int64_t g = 0; g < G_; ++g) {
      std::unique_ptr<ConvKernel<T>> k;
      if (fused_) {
        std::vector<T> wg(fw_.begin() + g * mg_ * K, fw_.begin() + (g + 1) * mg_ * K);
        std::vector<T> bg(fb_.begin() + g * mg_, fb_.begin() + (g + 1) * mg_);
        k = std::make_unique<ConvKernel<T>>(w_, N_, cg_, mg_, 1, std::move(wg), std::move(bg), relu_);
      } else {
        k = std::make_unique<ConvKernel<T>>(w_, N_, cg_, mg_, 1, has_bias_);
      }
      if (!k->wino_) return;
      ks.push_back(std::move(k));
    }
    group_convs_ = std::move(ks);
  }
  struct GroupLayout {
    size_t ys = 0, sub = 0, total = 0;
  };
  GroupLayout GroupScratch() const {
    GroupLayout l;
    size_t sub = 0;
    for (const auto &k : group_convs_) sub = std::max(sub, k->scratch_bytes());
    if (N_ > 1) {
      l.ys = Align64(static_cast<size_t>(N_ * cg_ * in_sp_) * sizeof(T));
      l.sub = l.ys + Align64(static_cast<size_t>(N_ * mg_ * out_sp_) * sizeof(T));
    }
    l.total = l.sub + Align64(sub);
    return l;
  }
  bool RunGroupConvs(const void *const *in, T *Y) {
    const GroupLayout l = GroupScratch();
    char *base = static_cast<char *>(scratch_);
    const T *X = static_cast<const T *>(in[0]);
    const T *W = fused_ ? nullptr : static_cast<const T *>(in[1]);
    const T *B = has_bias_ && !fused_ ? static_cast<const T *>(in[2]) : nullptr;
    T *xs = reinterpret_cast<T *>(base), *ys = reinterpret_cast<T *>(base + l.ys);
    const int64_t K = cg_ * kk_, xg_n = cg_ * in_sp_, yg_n = mg_ * out_sp_;
    std::string reason;
    for (int64_t g = 0; g < G_; ++g) {
      ConvKernel<T> &k = *group_convs_[static_cast<size_t>(g)];
      const T *xg = X + g * xg_n;
      T *yg = Y + g * yg_n;
      if (N_ > 1) {
        for (int64_t n = 0; n < N_; ++n)
          CopyBytes(xs + n * xg_n, X + n * C_ * in_sp_ + g * xg_n, static_cast<size_t>(xg_n) * sizeof(T));
        xg = xs;
        yg = ys;
      }
      const void *sub_in[3] = {xg, W ? W + g * mg_ * K : nullptr, B ? B + g * mg_ : nullptr};
      void *sub_out[1] = {yg};
      k.set_scratch(base + l.sub);
      if (!k.Run(sub_in, sub_out, &reason)) return false;
      if (N_ > 1)
        for (int64_t n = 0; n < N_; ++n)
          CopyBytes(Y + n * M_ * out_sp_ + g * yg_n, ys + n * yg_n, static_cast<size_t>(yg_n) * sizeof(T));
    }
    return true;
  }
  // 3-D (depth taps or several output depths) as one 2-D conv: output depth od of image n is image (n, od) of a 2-D
  // conv whose input channels are the (channel, depth tap) pairs, planes X[n][c][od s - pb + kd d] (zeros outside);
  // the weights [M][cg][kd][kh][kw] are already [M][cg kd][kh][kw]. The 2-D conv then runs on Winograd / the direct
  // kernels instead of im2col + BLAS over ~1 MB column blocks (3x3x3 64->64 on 4x14x14: 3.7x onnxruntime's time).
  // The copies (the input kd / s times, the output once) are small next to the conv. Not depthwise (left to
  // im2col, unmeasured here), and only where the 2-D conv takes a fast path. The gathered input is bounded
  // (kSliceBytes): past it the 2-D conv runs per block of output depths (a divisor of their count).
  void InitSlices() {
    // (dilated 3-D on small maps stays on the channels-last path measured for it, InitChannelsLast)
    if (direct_ || cl_ || out_sp_ <= 0 || (w_.out[0] <= 1 && w_.k[0] <= 1) || (cg_ == 1 && mg_ == 1)) return;
    Window sw = w_;
    sw.nsp = 2;
    sw.in[0] = sw.out[0] = sw.k[0] = sw.s[0] = sw.d[0] = 1;
    sw.pb[0] = sw.pe[0] = 0;
    const int64_t c = C_ * w_.k[0], per = c * w_.in[1] * w_.in[2] * static_cast<int64_t>(sizeof(T));
    int64_t n = N_ * w_.out[0];
    if (n * per > kSliceBytes) {
      n = w_.out[0];
      while (n > 1 && (n * per > kSliceBytes || w_.out[0] % n != 0)) --n;
    }
    auto k = fused_ ? std::make_unique<ConvKernel<T>>(sw, n, c, M_, G_, fw_, fb_, relu_)
                    : std::make_unique<ConvKernel<T>>(sw, n, c, M_, G_, has_bias_);
    if (!k->Fast() && k->phase_groups_.empty()) return;
    slices_ = std::move(k);
  }
  struct SliceLayout {
    size_t ys = 0, sub = 0, total = 0;
  };
  SliceLayout SliceScratch() const {
    const ConvKernel<T> &k = *slices_;
    SliceLayout l;
    l.ys = Align64(static_cast<size_t>(k.N_ * k.C_ * k.in_sp_) * sizeof(T));
    l.sub = l.ys + (w_.out[0] > 1 ? Align64(static_cast<size_t>(k.N_ * M_ * k.out_sp_) * sizeof(T)) : 0);
    l.total = l.sub + Align64(k.scratch_bytes());
    return l;
  }
  // Items f = n * OD + od, k.N_ of them per run of the 2-D conv (all, or a block of one image's depths).
  bool RunSlices(const void *const *in, T *Y) {
    const SliceLayout l = SliceScratch();
    char *base = static_cast<char *>(scratch_);
    ConvKernel<T> &k = *slices_;
    const int64_t D = w_.in[0], OD = w_.out[0], KD = w_.k[0], plane = k.in_sp_, oplane = k.out_sp_;
    const T *X = static_cast<const T *>(in[0]);
    T *xs = reinterpret_cast<T *>(base);
    std::string reason;
    k.set_scratch(base + l.sub);
    for (int64_t f0 = 0; f0 < N_ * OD; f0 += k.N_) {
      for (int64_t f = f0; f < f0 + k.N_; ++f) {
        const int64_t n = f / OD, od = f % OD;
        for (int64_t c = 0; c < C_; ++c)
          for (int64_t kd = 0; kd < KD; ++kd) {
            T *dst = xs + (((f - f0) * C_ + c) * KD + kd) * plane;
            const int64_t id = od * w_.s[0] - w_.pb[0] + kd * w_.d[0];
            if (id < 0 || id >= D) std::fill(dst, dst + plane, T(0));
            else CopyBytes(dst, X + ((n * C_ + c) * D + id) * plane, static_cast<size_t>(plane) * sizeof(T));
          }
      }
      // one output depth: image n's [M][plane] is item f's, written in place
      T *ys = OD > 1 ? reinterpret_cast<T *>(base + l.ys) : Y + f0 * M_ * oplane;
      const void *sub_in[3] = {xs, in[1], has_bias_ && !fused_ ? in[2] : nullptr};
      void *sub_out[1] = {ys};
      if (!k.Run(sub_in, sub_out, &reason)) return false;
      if (OD > 1)
        for (int64_t f = f0; f < f0 + k.N_; ++f)
          for (int64_t m = 0; m < M_; ++m)
            CopyBytes(Y + ((f / OD * M_ + m) * OD + f % OD) * oplane, ys + ((f - f0) * M_ + m) * oplane,
                      static_cast<size_t>(oplane) * sizeof(T));
    }
    return true;
  }
#ifdef TWIN_HAVE_X86
  // Depthwise at stride 2 under 12 output columns with AVX-512 (DwFlatS2Avx512), from 5 output columns on (4x4
  // outputs fill half its lanes: 480x7x7 3x3 went 1.0x -> 1.4x the channels-last path's time): ahead of the flat
  // kernel's per-channel planes and of the AVX2 channels-last kernel; of the AVX-512 channels-last one (DwClImage)
  // at 3 taps per row from 7 output columns on, or once its padded input passes ~400 KB, as measured (672x14x14
  // 5x5, 640 KB: 145 -> 85 us, 480x20x20 5x5: ~600 -> ~300 us; 96x14x14 5x5, 91 KB, went 47 -> 52 us, 480x10x10
  // 5x5, 250 KB, 90 -> 130 us, 96x20x20 7x7 95 -> 115 us, so those stay).
  void InitDwFlatS2() {
    const int64_t ow = w_.out[2], oh = w_.out[1], kh = w_.k[1], kw = w_.k[2], s = ow + (kw - 1) / 2;
    bool ok = vmath::ActiveIsa() == vmath::Isa::kAvx512 && cg_ == 1 && mg_ == 1 && kk_ > 1 && out_sp_ > 0 &&
              !dw_s2_ && w_.in[0] == 1 && w_.k[0] == 1 && w_.pb[0] == 0 && w_.pe[0] == 0 && w_.s[0] == 1 &&
              w_.s[1] == 2 && w_.s[2] == 2 && w_.pb[1] >= 0 && w_.pb[2] >= 0 && s <= kConvLanes;
    for (size_t i = 0; i < kMaxSpatial; ++i) ok = ok && w_.d[i] == 1;
    const int64_t cl_bytes = dwcl_ ? w_.in[1] * dwcl_pw_ * C_ * static_cast<int64_t>(sizeof(float)) : 0;
    if (!ok || ow < 5 || (dwcl_ && !(kw <= 3 && ow >= 7) && cl_bytes < (int64_t(400) << 10))) return;
    dwf2_ = true;
    tiny_dw_ = dwcl_ = dconv_ = s2_ = flat_ = wino_ = false;
    DwFlatS2Geom &g = dwf2g_;
    g.H = w_.in[1], g.Wd = w_.in[2], g.pt = w_.pb[1], g.pl = w_.pb[2], g.kh = kh, g.kw = kw, g.s = s;
    g.rows = oh + (kh - 1) / 2;
    const int64_t q_end = (oh - 1) * s + ow;
    g.chunks = (q_end + kConvLanes - 1) / kConvLanes;
    const int64_t reach = g.chunks * kConvLanes + (kh - 1) / 2 * s + (kw - 1) / 2;
    g.plane = (std::max(g.rows * s, reach) + kConvLanes - 1) / kConvLanes * kConvLanes;
    uint32_t in = 0;  // lanes l of the 32 columns from -pl: input column l - pl
    for (int64_t l = 0; l < 32; ++l)
      if (l - g.pl >= 0 && l - g.pl < g.Wd) in |= uint32_t(1) << l;
    g.m0 = static_cast<__mmask16>(in & 0xFFFF), g.m1 = static_cast<__mmask16>(in >> 16);
    g.st = static_cast<__mmask16>((uint32_t(1) << s) - 1u);
    flat_keep_.assign(static_cast<size_t>(g.chunks), 0);
    flat_first_.assign(static_cast<size_t>(g.chunks), 0);
    for (int64_t p = 0; p < g.chunks; ++p) {
      bool any = false;
      for (int64_t l = 0; l < kConvLanes; ++l) {
        const int64_t q = p * kConvLanes + l, r = q / s, c = q % s;
        if (q >= q_end || c >= ow) continue;
        flat_keep_[p] = static_cast<uint16_t>(flat_keep_[p] | (1u << l));
        if (!any) flat_first_[p] = r * ow + c;
        any = true;
      }
    }
    g.keep = flat_keep_.data();
    g.first = flat_first_.data();
  }
  int64_t DwFlatS2Grain() const { return N_ > 1 ? GrainForMacs(kk_ * out_sp_) : N_ * C_; }
  size_t DwFlatS2SlotBytes() const { return Align64(static_cast<size_t>(16 * dwf2g_.plane) * sizeof(float)); }
  int DwFlatS2Slots() const { return ScratchSlots::SlotCount(ChunksOf(N_ * C_, DwFlatS2Grain())); }
#endif
  // Dilated convs on small maps that the phases leave to im2col (phase maps under 8 columns: 3x3 dilation 2 / 4 on
  // 7x7, 8x8, 14x14, FCN's dilated layer4 on 512x8x8): im2col + GEMM there has N = the map's positions (49-64),
  // the direct kernel's dilated taps mostly idle lanes (2.0-3.0x onnxruntime on 64x7x7, 2.0-2.5x on 512x8x8 at
  // dilation 4). Channels last instead: the taps' input rows are contiguous runs of C floats, and the GEMM has the
  // positions as rows and the output channels as columns, against weights packed into panels once (PackPanels), so
  // its N is the channel count (64x7x7: 1.38x / 1.84x at dilation 2 / 4; 512x8x8: 1.0x / 1.2x; with the padding
  // taps skipped, InitClRuns: 1.02x / 1.05x and 0.8x / 0.6x).
  void InitChannelsLast() {
    const int width = PanelWidth();
    bool dilated = false;
    for (size_t i = 0; i < kMaxSpatial; ++i) dilated = dilated || w_.d[i] > 1;
    // Also ahead of the direct kernel's dilated taps on maps up to kClOverDirect positions.
    if (width == 0 || !dilated || G_ != 1 || direct_ || (dconv_ && out_sp_ > kClOverDirect) || wino_ || tiny_dw_ ||
        dw_s2_ || !phase_groups_.empty() || out_sp_ <= 0 || out_sp_ > kClMaxPositions || M_ < 16 || C_ < 8)
      return;
    dconv_ = s2_ = flat_ = false;
    cl_width_ = width;
    cl_ = true;
    const int64_t K = C_ * kk_;
    // Blocks of positions (a multiple of the panel kernel's 8 rows), and K in chunks such that a chunk of the
    // block's columns and one weight panel of it stay in L2 together (~384 KB): 3x3 512->512 on 8x8 (K = 4608)
    // otherwise streamed its 9.4 MB of weights or its columns from memory per panel.
    cl_rows_ = std::min<int64_t>(out_sp_, 256);
    cl_kc_ = std::min<int64_t>(K, std::max<int64_t>(64, (int64_t(384) << 10) / ((cl_rows_ + width) * 4)));
    if (fused_) {
      std::vector<float> pk(static_cast<size_t>(PackedSize(M_, K, cl_width_)));
      std::vector<float> perm(static_cast<size_t>(M_ * K));
      PackChannelsLast(reinterpret_cast<const float *>(fw_.data()), perm.data(), pk.data());
      wcl_ = std::make_shared<const std::vector<float>>(std::move(pk));
    }
    InitClRuns();
  }
  // Dilated taps on a small map mostly read padding (3x3 dilation 4 on 7x7: 13 of 21 taps per axis are inside, 169
  // of 441 per position), and the GEMM above multiplied their zeros all the same (1.84x onnxruntime). Per axis, the
  // outputs split into runs with the same in-input tap range; a region (one run per axis) multiplies only its taps'
  // slices of K. Runs shorter than worth a GEMM of their own join a neighbour (their extra taps read zeros).
  void InitClRuns() {
    bool skip = false;
    for (size_t a = 0; a < kMaxSpatial; ++a) {
      std::vector<ClRun> &runs = cl_runs_[a];
      runs.clear();
      const int64_t K = w_.k[a];
      for (int64_t o = 0; o < w_.out[a]; ++o) {
        const int64_t i0 = o * w_.s[a] - w_.pb[a], d = w_.d[a];
        // first k with i0 + k d >= 0, and one past the last with i0 + k d < in
        int64_t kb = i0 >= 0 ? 0 : (-i0 + d - 1) / d;
        int64_t ke = i0 >= w_.in[a] ? 0 : (w_.in[a] - i0 + d - 1) / d;
        kb = std::min(kb, K);
        ke = std::min(ke, K);
        if (ke < kb) ke = kb;
        if (!runs.empty() && runs.back().k_begin == kb && runs.back().k_end == ke) runs.back().o_end = o + 1;
        else runs.push_back({o, o + 1, kb, ke});
      }
      // Greedy: merge the adjacent pair that adds the fewest (position, tap) products while that adds at most one
      // (a lone output between two runs, as the centre of 3x3 dilation 4 on 7x7).
      for (;;) {
        size_t best = runs.size();
        int64_t best_cost = 2;
        for (size_t r = 0; r + 1 < runs.size(); ++r) {
          const ClRun &x = runs[r], &y = runs[r + 1];
          const int64_t kb = std::min(x.k_begin, y.k_begin), ke = std::max(x.k_end, y.k_end);
          const int64_t cost = (y.o_end - x.o_begin) * (ke - kb) - (x.o_end - x.o_begin) * (x.k_end - x.k_begin) -
                               (y.o_end - y.o_begin) * (y.k_end - y.k_begin);
          if (cost < best_cost) best_cost = cost, best = r;
        }
        if (best == runs.size()) break;
        ClRun &x = runs[best];
        const ClRun &y = runs[best + 1];
        x.o_end = y.o_end;
        x.k_begin = std::min(x.k_begin, y.k_begin);
        x.k_end = std::max(x.k_end, y.k_end);
        runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      }
      skip = skip || runs.size() != 1 || runs[0].k_begin != 0 || runs[0].k_end != K;
    }
    cl_skip_ = skip;
    // Weights past half an L2 (3x3 512->512: 9.4 MB) stream from L3 once per region, and regions of a few positions
    // wait on them (3x3 dilation 2 on 512x8x8: 9 regions of 4-16 positions read 49 taps' weights, 2.5-6.9 ms as the
    // machine's load varied; onnxruntime 2.2 ms). Then one region per tap instead (per axis: the outputs that read
    // the tap inside the input, adjacent taps with the same outputs as one run): every tap's weights once, over all
    // the positions that use it; the regions overlap, so their products are added to the outputs (bias first).
    cl_taps_ = skip && C_ * kk_ * M_ * static_cast<int64_t>(sizeof(float)) > (int64_t(1) << 20);
    if (!cl_taps_) return;
    for (size_t a = 0; a < kMaxSpatial; ++a) {
      std::vector<ClRun> &runs = cl_runs_[a];
      runs.clear();
      for (int64_t k = 0; k < w_.k[a]; ++k) {
        int64_t ob = w_.out[a], oe = 0;  // outputs o whose input o s - pb + k d is inside (contiguous in o)
        for (int64_t o = 0; o < w_.out[a]; ++o) {
          const int64_t i = o * w_.s[a] - w_.pb[a] + k * w_.d[a];
          if (i >= 0 && i < w_.in[a]) ob = std::min(ob, o), oe = o + 1;
        }
        if (oe <= ob) continue;
        if (!runs.empty() && runs.back().k_end == k && runs.back().o_begin == ob && runs.back().o_end == oe)
          runs.back().k_end = k + 1;
        else runs.push_back({ob, oe, k, k + 1});
      }
    }
  }
  // W [M][C][taps] -> [taps * C][M] (perm), then each chunk of cl_kc_ rows of it into panels, chunk after chunk.
  void PackChannelsLast(const float *W, float *perm, float *pack) const {
    const int64_t K = C_ * kk_;
    for (int64_t m = 0; m < M_; ++m)
      for (int64_t c = 0; c < C_; ++c)
        for (int64_t t = 0; t < kk_; ++t) perm[(t * C_ + c) * M_ + m] = W[(m * C_ + c) * kk_ + t];
    for (int64_t k0 = 0; k0 < K; k0 += cl_kc_)
      PackPanels(perm + k0 * M_, false, M_, std::min(cl_kc_, K - k0), cl_width_,
                 pack + PackedSize(M_, k0, cl_width_));
  }
  struct ClLayout {
    size_t col = 0, yt = 0, yr = 0, perm = 0, pack = 0, total = 0;
  };
  ClLayout ClScratch() const {
    const size_t f = sizeof(float);
    const int64_t K = C_ * kk_;
    ClLayout l;
    l.col = Align64(static_cast<size_t>(in_sp_ * C_) * f);
    l.yt = l.col + Align64(static_cast<size_t>(cl_rows_ * K) * f);
    l.yr = l.yt + Align64(static_cast<size_t>(out_sp_ * M_) * f);
    l.perm = l.yr + (cl_skip_ ? Align64(static_cast<size_t>(cl_rows_ * M_) * f) : 0);
    l.pack = l.perm + (wcl_ ? 0 : Align64(static_cast<size_t>(M_ * K) * f));
    l.total = l.pack + (wcl_ ? 0 : Align64(static_cast<size_t>(PackedSize(M_, K, cl_width_)) * f));
    return l;
  }
  void RunChannelsLast(const float *X, const float *W, const float *B, float *Y) {
    const ClLayout l = ClScratch();
    char *base = static_cast<char *>(scratch_);
    float *xt = reinterpret_cast<float *>(base), *col = reinterpret_cast<float *>(base + l.col);
    float *yt = reinterpret_cast<float *>(base + l.yt);
    const float *pack = wcl_ ? wcl_->data() : nullptr;
    if (!wcl_) {
      float *pk = reinterpret_cast<float *>(base + l.pack);
      PackChannelsLast(W, reinterpret_cast<float *>(base + l.perm), pk);
      pack = pk;
    }
    const int64_t C = C_, M = M_, K = C * kk_;
    const int64_t o1n = w_.out[1], o2n = w_.out[2];
    for (int64_t n = 0; n < N_; ++n) {
      TransposeFloats(X + n * C * in_sp_, xt, in_sp_, C, in_sp_);  // xt [position][C]
      if (cl_skip_) {
        if (cl_taps_)
          for (int64_t p = 0; p < out_sp_; ++p) {
            float *y = yt + p * M;
            if (B) std::copy_n(B, M, y);
            else std::fill(y, y + M, 0.0f);
          }
        RunClRegions(xt, pack, B, col, reinterpret_cast<float *>(base + l.yr), yt);
        float *yn = Y + n * M * out_sp_;
        TransposeFloats(yt, yn, M, out_sp_, M);
        if (relu_)
          for (int64_t i = 0; i < M * out_sp_; ++i) yn[i] = yn[i] < 0.0f ? 0.0f : yn[i];
        continue;
      }
      for (int64_t p = 0; p < out_sp_; ++p) {
        float *y = yt + p * M;
        if (B) std::copy_n(B, M, y);
        else std::fill(y, y + M, 0.0f);
      }
      for (int64_t p0 = 0; p0 < out_sp_; p0 += cl_rows_) {
        const int64_t p1 = std::min(out_sp_, p0 + cl_rows_);
        float *dst = col;
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t o0 = p / (o1n * o2n), o1 = p / o2n % o1n, o2 = p % o2n;
          for (int64_t k0 = 0; k0 < w_.k[0]; ++k0) {
            const int64_t i0 = o0 * w_.s[0] - w_.pb[0] + k0 * w_.d[0];
            const bool in0 = i0 >= 0 && i0 < w_.in[0];
            for (int64_t k1 = 0; k1 < w_.k[1]; ++k1) {
              const int64_t i1 = o1 * w_.s[1] - w_.pb[1] + k1 * w_.d[1];
              const bool in1 = in0 && i1 >= 0 && i1 < w_.in[1];
              for (int64_t k2 = 0; k2 < w_.k[2]; ++k2, dst += C) {
                const int64_t i2 = o2 * w_.s[2] - w_.pb[2] + k2 * w_.d[2];
                if (in1 && i2 >= 0 && i2 < w_.in[2]) {
                  const float *__restrict src = xt + ((i0 * w_.in[1] + i1) * w_.in[2] + i2) * C;
                  float *__restrict d = dst;
                  for (int64_t c = 0; c < C; ++c) d[c] = src[c];
                } else {
                  std::fill(dst, dst + C, 0.0f);
                }
              }
            }
          }
        }
        for (int64_t k0 = 0; k0 < K; k0 += cl_kc_) {
          PanelGemm g;
          g.A = col + k0;
          g.lda = K;
          g.rows = p1 - p0;
          g.K = std::min(cl_kc_, K - k0);
          g.pack = pack + PackedSize(M, k0, cl_width_);
          g.N = M;
          g.C = yt + p0 * M;
          g.ldc = M;
          g.accumulate = true;
          RunPanels(g, cl_width_);
        }
      }
      float *yn = Y + n * M * out_sp_;
      TransposeFloats(yt, yn, M, out_sp_, M);
      if (relu_)
        for (int64_t i = 0; i < M * out_sp_; ++i) yn[i] = yn[i] < 0.0f ? 0.0f : yn[i];
    }
  }
  // RunChannelsLast by regions (InitClRuns): per region, blocks of up to cl_rows_ positions gathered with the
  // region's taps only ([k0][k1][k2][C] over its tap ranges), multiplied against the matching slices of the packed
  // K (split at cl_kc_ chunks) into yr, then copied to their rows of yt.
  void RunClRegions(const float *xt, const float *pack, const float *B, float *col, float *yr, float *yt) const {
    const int64_t C = C_, M = M_, K = C * kk_, width = cl_width_;
    for (const ClRun &r0 : cl_runs_[0])
      for (const ClRun &r1 : cl_runs_[1])
        for (const ClRun &r2 : cl_runs_[2]) {
          const int64_t n0 = r0.k_end - r0.k_begin, n1 = r1.k_end - r1.k_begin, n2 = r2.k_end - r2.k_begin;
          const int64_t l1 = r1.o_end - r1.o_begin, l2 = r2.o_end - r2.o_begin;
          const int64_t rows_all = (r0.o_end - r0.o_begin) * l1 * l2, kr = n0 * n1 * n2 * C;
          for (int64_t q0 = 0; q0 < rows_all; q0 += cl_rows_) {
            const int64_t rows = std::min(cl_rows_, rows_all - q0);
            float *dst = col;
            for (int64_t q = q0; q < q0 + rows; ++q) {
              const int64_t o0 = r0.o_begin + q / (l1 * l2), o1 = r1.o_begin + q / l2 % l1, o2 = r2.o_begin + q % l2;
              for (int64_t k0 = r0.k_begin; k0 < r0.k_end; ++k0) {
                const int64_t i0 = o0 * w_.s[0] - w_.pb[0] + k0 * w_.d[0];
                const bool in0 = i0 >= 0 && i0 < w_.in[0];
                for (int64_t k1 = r1.k_begin; k1 < r1.k_end; ++k1) {
                  const int64_t i1 = o1 * w_.s[1] - w_.pb[1] + k1 * w_.d[1];
                  const bool in1 = in0 && i1 >= 0 && i1 < w_.in[1];
                  for (int64_t k2 = r2.k_begin; k2 < r2.k_end; ++k2, dst += C) {
                    const int64_t i2 = o2 * w_.s[2] - w_.pb[2] + k2 * w_.d[2];
                    if (in1 && i2 >= 0 && i2 < w_.in[2]) {
                      const float *__restrict src = xt + ((i0 * w_.in[1] + i1) * w_.in[2] + i2) * C;
                      float *__restrict d = dst;
                      for (int64_t c = 0; c < C; ++c) d[c] = src[c];
                    } else {
                      std::fill(dst, dst + C, 0.0f);
                    }
                  }
                }
              }
            }
            for (int64_t q = 0; q < rows; ++q) {
              float *y = yr + q * M;
              if (B && !cl_taps_) std::copy_n(B, M, y);
              else std::fill(y, y + M, 0.0f);
            }
            // The region's K slices: per (k0, k1), taps k2 in [r2.k_begin, r2.k_end) are n2 C contiguous rows of
            // both the packed K and col's rows; adjacent slices merge (whole tap ranges give one slice).
            int64_t s_k = -1, s_a = 0, s_len = 0;
            auto flush = [&]() {
              for (int64_t ks = s_k; ks < s_k + s_len;) {
                const int64_t c0 = ks / cl_kc_ * cl_kc_, kc = std::min(cl_kc_, K - c0);
                const int64_t ke = std::min(s_k + s_len, c0 + kc);
                PanelGemm g;
                g.A = col + s_a + (ks - s_k);
                g.lda = kr;
                g.rows = rows;
                g.K = ke - ks;
                g.ldc = M;
                g.accumulate = true;
                const float *chunk = pack + PackedSize(M, c0, cl_width_);
                if (ks == c0 && ke - ks == kc) {
                  g.pack = chunk;
                  g.N = M;
                  g.C = yr;
                  RunPanels(g, cl_width_);
                } else {
                  // A part of a chunk: one panel per call (the kernel steps panels by its K).
                  for (int64_t j0 = 0; j0 < M; j0 += width) {
                    g.pack = chunk + j0 * kc + (ks - c0) * width;
                    g.N = std::min(width, M - j0);
                    g.C = yr + j0;
                    RunPanels(g, cl_width_);
                  }
                }
                ks = ke;
              }
            };
            if (kr > 0) {
              for (int64_t k0 = r0.k_begin; k0 < r0.k_end; ++k0)
                for (int64_t k1 = r1.k_begin; k1 < r1.k_end; ++k1) {
                  const int64_t kk = ((k0 * w_.k[1] + k1) * w_.k[2] + r2.k_begin) * C;
                  const int64_t aa = ((k0 - r0.k_begin) * n1 + (k1 - r1.k_begin)) * n2 * C;
                  if (s_k >= 0 && s_k + s_len == kk && s_a + s_len == aa) {
                    s_len += n2 * C;
                    continue;
                  }
                  if (s_k >= 0) flush();
                  s_k = kk, s_a = aa, s_len = n2 * C;
                }
              if (s_k >= 0) flush();
            }
            for (int64_t q = q0; q < q0 + rows; ++q) {
              const int64_t o0 = r0.o_begin + q / (l1 * l2), o1 = r1.o_begin + q / l2 % l1, o2 = r2.o_begin + q % l2;
              float *__restrict dst = yt + ((o0 * w_.out[1] + o1) * w_.out[2] + o2) * M;
              const float *__restrict src = yr + (q - q0) * M;
              if (cl_taps_)
                for (int64_t m = 0; m < M; ++m) dst[m] += src[m];
              else std::copy_n(src, M, dst);
            }
          }
        }
  }
  // Dilation d at stride 1 by phases: the outputs (d a + p) of a phase p read only the input rows (columns) that are
  // congruent to p - pads_begin mod d, so each of the d1 x d2 phases is an undilated conv with the same weights on
  // a subsampled input, run by the fast kernels above and interleaved back. Phases of the same geometry run as the
  // images of one call (more work per call for the small maps they are). im2col + GEMM was 1.5-2.1x onnxruntime
  // (its column buffer about as costly as the GEMM).
  void InitPhases() {
    bool ok = !direct_ && !dconv_ && !tiny_dw_ && out_sp_ > 0 && w_.in[0] == 1 && w_.k[0] == 1 && w_.pb[0] == 0 && w_.pe[0] == 0 &&
              (w_.d[1] > 1 || w_.d[2] > 1);
    for (size_t i = 0; i < kMaxSpatial; ++i) ok = ok && w_.s[i] == 1;
    // Phase maps under 8 columns measured no faster than im2col (64->64 on 14x14, phases of 5x5 and 7x7).
    if (!ok || w_.out[2] / w_.d[2] < 8) return;
    std::vector<PhaseGroup> groups;
    std::vector<Window> windows;  // per group: its sub-conv's window
    for (int64_t p1 = 0; p1 < std::min(w_.d[1], w_.out[1]); ++p1)
      for (int64_t p2 = 0; p2 < std::min(w_.d[2], w_.out[2]); ++p2) {
        Phase ph;
        ph.p[0] = p1, ph.p[1] = p2;
        Window sw = w_;
        for (int i = 0; i < 2; ++i) {
          const int64_t d = w_.d[i + 1], p = ph.p[i], r0 = p - w_.pb[i + 1];
          const int64_t t = r0 >= 0 ? r0 / d : -((-r0 + d - 1) / d);  // floor(r0 / d)
          ph.e[i] = r0 - t * d;  // the phase's first input row (column), in [0, d)
          const int64_t out = (w_.out[i + 1] - p + d - 1) / d;
          const int64_t avail = ph.e[i] < w_.in[i + 1] ? (w_.in[i + 1] - ph.e[i] + d - 1) / d : 0;
          const int64_t in = std::min(avail, out + w_.k[i + 1] - 1 + t);  // the rows the phase reads, no more
          if (in < 1) return;  // a phase entirely on padding: left to im2col
          sw.in[i + 1] = in;
          sw.out[i + 1] = out;
          sw.d[i + 1] = 1;
          sw.pb[i + 1] = -t;
          sw.pe[i + 1] = out + w_.k[i + 1] - 1 + t - in;
        }
        size_t g = 0;
        auto same = [&sw](const Window &o) {
          return o.in[1] == sw.in[1] && o.in[2] == sw.in[2] && o.pb[1] == sw.pb[1] && o.pb[2] == sw.pb[2] &&
                 o.pe[1] == sw.pe[1] && o.pe[2] == sw.pe[2];
        };
        while (g < windows.size() && !same(windows[g])) ++g;
        if (g == windows.size()) {
          windows.push_back(sw);
          groups.emplace_back();
        }
        groups[g].ph.push_back(ph);
      }
    for (size_t g = 0; g < groups.size(); ++g) {
      const int64_t n = N_ * static_cast<int64_t>(groups[g].ph.size());
      auto k = fused_ ? std::make_unique<ConvKernel<T>>(windows[g], n, C_, M_, G_, fw_, fb_, relu_)
                      : std::make_unique<ConvKernel<T>>(windows[g], n, C_, M_, G_, has_bias_);
      if (!k->dconv_ && !k->wino_) return;  // im2col either way: one GEMM beats several smaller ones
      groups[g].k = std::move(k);
    }
    phase_groups_ = std::move(groups);
  }
  // The flat layout: rows of exactly the padded width, and each chunk's kept lanes and first output.
  void InitFlat() {
    pw_ = w_.out[2] + (w_.k[2] - 1) * w_.d[2];
    if (s2_) {  // per phase plane: rows r + i / 2, columns c + j / 2
      ph_ = w_.out[1] + (w_.k[1] - 1) / 2;
      pw_ = w_.out[2] + (w_.k[2] - 1) / 2;
    }
    const int64_t oh = w_.out[1], ow = w_.out[2], q_end = (oh - 1) * pw_ + ow;
    const int64_t chunks = (q_end + kConvLanes - 1) / kConvLanes;
    if (vmath::ActiveIsa() != vmath::Isa::kAvx512) flat_out_ = mg_ * chunks * kConvLanes;
    flat_keep_.assign(static_cast<size_t>(chunks), 0);
    flat_first_.assign(static_cast<size_t>(chunks), 0);
    for (int64_t p = 0; p < chunks; ++p) {
      bool any = false;
      for (int64_t l = 0; l < kConvLanes; ++l) {
        const int64_t q = p * kConvLanes + l, r = q / pw_, c = q % pw_;
        if (q >= q_end || c >= ow) continue;
        flat_keep_[p] = static_cast<uint16_t>(flat_keep_[p] | (1u << l));
        if (!any) flat_first_[p] = r * ow + c;
        any = true;
      }
    }
  }
  // Winograd F(2x2, 3x3): 2-D 3x3 kernels, stride 1, no dilation, one group, enough channels.
  void InitWinograd() {
    bool ok = G_ == 1 && out_sp_ > 0 && w_.in[0] == 1 && w_.k[0] == 1 && w_.k[1] == 3 && w_.k[2] == 3;
    for (size_t i = 0; i < kMaxSpatial; ++i) ok = ok && w_.s[i] == 1 && w_.d[i] == 1 && w_.pb[i] >= 0 && w_.pe[i] >= 0;
    const WinogradShape shape{N_, C_, M_, w_.in[1], w_.in[2], w_.out[1], w_.out[2], w_.pb[1], w_.pb[2]};
    if (!ok || !WinogradConvPays(shape)) return;
    // Maps of at most 8x8 whose flat chunks are mostly outputs: the flat direct kernel beats the transforms (64->64
    // on 8x8: 2.4x -> 1.4x of onnxruntime); at 4x4 (half the lanes on padding) and 12x12 Winograd stays ahead.
    const int64_t oh = w_.out[1], ow = w_.out[2], flat_lanes = ((oh - 1) * (ow + 2) + ow + 15) / 16 * 16;
    if (flat_ && oh <= 8 && ow <= 8 && 10 * oh * ow >= 7 * flat_lanes) return;
    wino_ = true;
    ws_ = shape;
    if (fused_) UseConstantWeights(fw_.data());
  }

 public:
  // Weights known when the plan is built: the Winograd filter transform and the direct kernel's weight packing
  // are done once, here (the packing, strided stores, was ~9% of a 64->64 3x3 stride-2 conv on 16x16).
  void UseConstantWeights(const T *W) {
    // Shared with the graph's other plans (one per input shape), which derive the same from the same weights
    const int64_t t_size = sizeof(T);
    if (tiny_dw_ && !fused_)
      wt_ = SharedDerived<T>(W, "conv taps", {t_size, kk_, C_}, [&](std::vector<T> *v) { *v = PackTaps(W); });
    for (auto &g : phase_groups_) g.k->UseConstantWeights(W);
    if (slices_) slices_->UseConstantWeights(W);
    for (size_t g = 0; g < group_convs_.size(); ++g)
      group_convs_[g]->UseConstantWeights(W + static_cast<int64_t>(g) * mg_ * cg_ * kk_);
    if (dconv_ && !fused_) {
      wp_ = SharedDerived<T>(W, "conv blocks", {t_size, G_, nmb_, mg_, cg_, kk_}, [&](std::vector<T> *v) {
        std::vector<T> no_bias(BiasFloats());
        v->resize(PackFloats());
        Pack(W, nullptr, v->data(), no_bias.data());
      });
      const_w_ = true;
    }
    if constexpr (std::is_same<T, float>::value) {
      if (cl_ && !fused_)
        wcl_ = SharedDerived<float>(W, "conv channels-last panels", {int64_t(cl_width_), M_, C_, kk_},
                                    [&](std::vector<float> *v) {
                                      std::vector<float> perm(static_cast<size_t>(M_ * C_ * kk_));
                                      v->resize(static_cast<size_t>(PackedSize(M_, C_ * kk_, cl_width_)));
                                      PackChannelsLast(W, perm.data(), v->data());
                                    });
      if (!wino_) return;
      wu_ = SharedDerived<float>(W, "winograd filter", {M_, C_}, [&](std::vector<float> *v) {
        v->resize(WinogradFilterFloats(C_, M_));
        WinogradTransformFilter(W, M_, C_, v->data());
      });
    }
  }
  // On the direct or Winograd kernel (not im2col + GEMM), for MakeFastConvFloat.
  bool Fast() const { return dconv_ || wino_; }
  size_t PackFloats() const { return static_cast<size_t>(G_ * nmb_ * kConvMB * cg_ * kk_); }
  size_t BiasFloats() const { return static_cast<size_t>(G_ * nmb_ * kConvMB); }
  // Weights [M][cg][kk] -> per group, per block of kConvMB channels: [cg * kk][kConvMB]; bias padded likewise.
  void Pack(const T *W, const T *B, T *wp, T *bp) const {
    const int64_t K = cg_ * kk_;
    for (int64_t g = 0; g < G_; ++g)
      for (int64_t mb = 0; mb < nmb_; ++mb) {
        T *dst = wp + (g * nmb_ + mb) * K * kConvMB;
        for (int64_t m = 0; m < kConvMB; ++m) {
          const int64_t mm = mb * kConvMB + m;
          const bool ok = mm < mg_;
          bp[g * nmb_ * kConvMB + mm] = ok && B ? B[g * mg_ + mm] : T(0);
          for (int64_t k = 0; k < K; ++k) dst[k * kConvMB + m] = ok ? W[(g * mg_ + mm) * K + k] : T(0);
        }
      }
  }
  size_t scratch_bytes() const override {
    if (slices_) return SliceScratch().total;
    if (!group_convs_.empty()) return GroupScratch().total;
    if (dw_s2_) return 0;
#ifdef TWIN_HAVE_X86
    if (dwf2_) return static_cast<size_t>(DwFlatS2Slots()) * DwFlatS2SlotBytes();
#endif
    if (tiny_dw_)
      return static_cast<size_t>(TinySlots()) * TinySlotBytes() +
             (!wt_ ? Align64(static_cast<size_t>(kk_ * C_) * sizeof(T)) : 0);
    if (!phase_groups_.empty()) return PhaseScratch().total;
    if (cl_) return ClScratch().total;
    if (stack1x1_) return Align64(static_cast<size_t>(N_ * out_sp_ * (cg_ + mg_)) * sizeof(T));
    if (!wino_) return DirectScratchBytes();
    const size_t filter = !wu_ ? Align64(WinogradFilterFloats(C_, M_) * sizeof(T)) : 0;
    return std::max(DirectScratchBytes(), filter + Align64(WinogradScratchBytes(ws_)));
  }
  // The padded input's planes per channel: column phases at stride 2, and row phases too for flat positions.
  int64_t Planes() const { return s2_ ? (flat_ ? 4 : 2) : 1; }
  // AVX-512 flat, not depthwise: the images' chunks blocked together (DirectConvArgs::nimg)
  // Only while the folded planes stay within about half an L2 (folding 8 images of 128x17x23 planes, 1.6 MB, made
  // Inception's 1x7 / 7x1 convs at batch 8 2.7x slower per image than at batch 1).
  bool FoldImages() const {
    return flat_ && vmath::ActiveIsa() == vmath::Isa::kAvx512 && !(cg_ == 1 && mg_ == 1) &&
           cg_ * Planes() * ph_ * pw_ * N_ * static_cast<int64_t>(sizeof(T)) <= (int64_t(512) << 10);
  }
  // The padded planes of one image (all of them when FoldImages), and a chunk's overrun past the last.
  int64_t PadFloats() const {
    return cg_ * Planes() * ph_ * pw_ * (FoldImages() ? N_ : 1) + (flat_ ? kConvLanes : 0);
  }
  // The direct kernel's or im2col's scratch (also the fallback of a Winograd run).
  // Per slot (ScratchSlots) the padded planes and the AVX2 flat outputs; the packed weights and bias shared.
  size_t DirectScratchBytes() const {
    if (dconv_) return DirectSharedBytes() + static_cast<size_t>(ItemSlots()) * DirectSlotBytes();
    if (direct_) return 0;
    const int64_t rows = col_rows_ > 0 ? col_rows_ : w_.out[0] * w_.out[1];
    return static_cast<size_t>(ItemSlots()) * Align64(static_cast<size_t>(cg_ * kk_ * rows * w_.out[2]) * sizeof(T));
  }
  size_t DirectSharedBytes() const {
    return fused_ ? 0 : Align64(PackFloats() * sizeof(T)) + Align64(BiasFloats() * sizeof(T));
  }
  size_t DirectSlotBytes() const {
    return Align64(static_cast<size_t>(PadFloats()) * sizeof(T)) + Align64(static_cast<size_t>(flat_out_) * sizeof(T));
  }
  // The intra-op pool's cut of the direct kernel and of im2col + GEMM: the (image, group) pairs in chunks of at
  // least kMinChunkMacs multiply-adds when that makes kMinChunks chunks (each chunk pads its planes or builds its
  // columns in its own slot); else (folded images, few pairs) the direct kernel's channel blocks (RunDirectBlocks).
  // Not for im2col with OpenBLAS threads (GEASYNC_BLAS_THREADS).
  int64_t ItemGrain() const { return GrainForMacs(mg_ * cg_ * kk_ * out_sp_); }
  // Batch 1 is not split here: its conv is split by the direct kernel's channel blocks (RunDirectBlocks) or by
  // Winograd's tile blocks, in larger chunks (kOneImageChunkMacs).
  bool SplitItems() const {
    if (N_ < 2 || (dconv_ ? FoldImages() : BlasThreads() > 1)) return false;
    return ChunksOf(N_ * G_, ItemGrain()) >= kMinChunks;
  }
  int ItemSlots() const { return SplitItems() ? ScratchSlots::SlotCount(ChunksOf(N_ * G_, ItemGrain())) : 1; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *X = static_cast<const T *>(in[0]);
    const T *W = fused_ ? fw_.data() : static_cast<const T *>(in[1]);
    const T *B = fused_ ? fb_.data() : has_bias_ ? static_cast<const T *>(in[2]) : nullptr;
    T *Y = static_cast<T *>(out[0]);
    if (tiny_dw_) {
      RunTinyDepthwise(X, W, B, Y);
      return true;
    }
#ifdef TWIN_HAVE_X86
    if constexpr (std::is_same<T, float>::value) {
      if (dwf2_) {
        ScratchSlots slots(DwFlatS2Slots());
        ParallelForAnyCut(N_ * C_, DwFlatS2Grain(), [&](int64_t lo, int64_t hi) {
          const ScratchSlots::Hold hold(slots);
          float *buf = reinterpret_cast<float *>(static_cast<char *>(scratch_) +
                                                 static_cast<size_t>(hold.index()) * DwFlatS2SlotBytes());
          DwFlatS2Avx512(dwf2g_, X, in_sp_, W, B, relu_, C_, Y, out_sp_, lo, hi, buf);
        });
        return true;
      }
      if (dw_s2_) {
        // planes are independent: the pool shares them out in chunks of at least kMinChunkMacs
        ParallelForAnyCut(N_ * C_, N_ > 1 ? GrainForMacs(kk_ * out_sp_) : C_, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const int64_t n = i / C_, c = i % C_;
            DepthwiseS2PlaneAvx512(X + (n * C_ + c) * in_sp_, w_.in[1], w_.in[2], w_.pb[1], w_.pb[2], W + c * kk_,
                                   w_.k[1], w_.k[2], B ? B[c] : 0.0f, relu_, Y + (n * M_ + c) * out_sp_, w_.out[1],
                                   w_.out[2]);
          }
        });
        return true;
      }
    }
#endif
    if (slices_) return RunSlices(in, Y);
    if (!group_convs_.empty()) return RunGroupConvs(in, Y);
    if (!phase_groups_.empty()) return RunPhases(in, Y);
    if constexpr (std::is_same<T, float>::value) {
      if (cl_) {
        RunChannelsLast(X, W, B, Y);
        return true;
      }
    }
    if (stack1x1_) {
      RunStacked1x1(X, W, B, Y);
      return true;
    }
    if constexpr (std::is_same<T, float>::value) {
      if (wino_ && RunWinograd(X, W, B, Y)) return true;
    }
#ifdef TWIN_HAVE_X86
    if constexpr (std::is_same<T, float>::value) {
      if (dconv_) {
        RunDirect(X, W, B, Y);
        return true;
      }
    }
#endif
    const int64_t K = cg_ * kk_;
    const size_t col_bytes = direct_ ? 0 : DirectScratchBytes() / static_cast<size_t>(ItemSlots());
    // One (image, group) pair, its columns in `col`.
    auto pair = [&](int64_t n, int64_t g, T *col) {
      const T *xg = X + (n * C_ + g * cg_) * in_sp_;
      T *yg = Y + (n * M_ + g * mg_) * out_sp_;
      const T *b_src = xg;
      T beta = T(0);
      if (B) {
        for (int64_t m = 0; m < mg_; ++m) std::fill(yg + m * out_sp_, yg + (m + 1) * out_sp_, B[g * mg_ + m]);
        beta = T(1);
      }
      if (!direct_ && col_rows_ > 0) {
        // Column blocks of col_rows_ output rows: a whole-image column matrix far past the caches was written
        // and read back from memory (Conv3d 16->32 3x3x3 on 8x56x56: 43 MB, 1.8x onnxruntime's time).
        const int64_t rows = w_.out[0] * w_.out[1], ow = w_.out[2];
        for (int64_t r0 = 0; r0 < rows; r0 += col_rows_) {
          const int64_t r1 = std::min(rows, r0 + col_rows_), np = (r1 - r0) * ow;
          Im2Col(xg, col, r0, r1);
          Gemm<T>(false, false, mg_, np, K, T(1), W + g * mg_ * K, K, col, np, beta, yg + r0 * ow, out_sp_);
        }
      } else {
        if (!direct_) {
          Im2Col(xg, col);
          b_src = col;
        }
        Gemm<T>(false, false, mg_, out_sp_, K, T(1), W + g * mg_ * K, K, b_src, out_sp_, beta, yg, out_sp_);
      }
      if (relu_) {
        T *__restrict p = yg;
        const int64_t cnt = mg_ * out_sp_;
        for (int64_t i = 0; i < cnt; ++i) p[i] = p[i] < T(0) ? T(0) : p[i];
      }
    };
    if (SplitItems()) {
      // Each pair's GEMMs are one chunk's, whoever runs it (their own cut, run inline here, does not change).
      ScratchSlots slots(ItemSlots());
      ParallelForAnyCut(N_ * G_, ItemGrain(), [&](int64_t lo, int64_t hi) {
        const ScratchSlots::Hold hold(slots);
        T *col = reinterpret_cast<T *>(static_cast<char *>(scratch_) + static_cast<size_t>(hold.index()) * col_bytes);
        for (int64_t i = lo; i < hi; ++i) pair(i / G_, i % G_, col);
      });
      return true;
    }
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t g = 0; g < G_; ++g) pair(n, g, static_cast<T *>(scratch_));
    return true;
  }

 private:
  struct Phase {
    int64_t p[2];  // its first output row / column (then every d-th)
    int64_t e[2];  // its first input row / column (then every d-th)
  };
  struct PhaseGroup {
    std::vector<Phase> ph;             // phases of one geometry, image j * N + n of k being phase j's image n
    std::unique_ptr<ConvKernel<T>> k;  // their undilated conv
  };
  // The phases' scratch: the subsampled input, the phases' outputs, then the sub-kernels' own scratch (one at a
  // time).
  struct PhaseLayout {
    size_t ys = 0, sub = 0, total = 0;
  };
  PhaseLayout PhaseScratch() const {
    size_t xs = 0, ys = 0, sub = 0;
    for (const PhaseGroup &g : phase_groups_) {
      const ConvKernel<T> &k = *g.k;
      xs = std::max(xs, static_cast<size_t>(k.N_ * C_ * k.in_sp_));
      ys = std::max(ys, static_cast<size_t>(k.N_ * M_ * k.out_sp_));
      sub = std::max(sub, k.scratch_bytes());
    }
    PhaseLayout l;
    l.ys = Align64(xs * sizeof(T));
    l.sub = l.ys + Align64(ys * sizeof(T));
    l.total = l.sub + Align64(sub);
    return l;
  }
  bool RunPhases(const void *const *in, T *Y) {
    const PhaseLayout l = PhaseScratch();
    char *base = static_cast<char *>(scratch_);
    T *xs = reinterpret_cast<T *>(base), *ys = reinterpret_cast<T *>(base + l.ys);
    const T *X = static_cast<const T *>(in[0]);
    const int64_t H = w_.in[1], Wd = w_.in[2], OH = w_.out[1], OW = w_.out[2];
    const int64_t d1 = w_.d[1], d2 = w_.d[2];
    const void *sub_in[3] = {xs, in[1], has_bias_ && !fused_ ? in[2] : nullptr};
    void *sub_out[1] = {ys};
    std::string reason;
    for (PhaseGroup &g : phase_groups_) {
      ConvKernel<T> &k = *g.k;
      const int64_t h = k.w_.in[1], w = k.w_.in[2], oh = k.w_.out[1], ow = k.w_.out[2];
      const int64_t nc = N_ * C_, nm = N_ * M_;
      for (size_t j = 0; j < g.ph.size(); ++j) {
        const Phase &ph = g.ph[j];
        for (int64_t i = 0; i < nc; ++i)
          for (int64_t r = 0; r < h; ++r) {
            const T *src = X + (i * H + ph.e[0] + r * d1) * Wd + ph.e[1];
            T *dst = xs + ((static_cast<int64_t>(j) * nc + i) * h + r) * w;
            if (d2 == 2) CopyEven(src, Wd - ph.e[1], 0, w, avx2_, dst);
            else
              for (int64_t c = 0; c < w; ++c) dst[c] = src[c * d2];
          }
      }
      k.set_scratch(base + l.sub);
      if (!k.Run(sub_in, sub_out, &reason)) return false;
      for (size_t j = 0; j < g.ph.size(); ++j) {
        const Phase &ph = g.ph[j];
        // Column phases 0 and 1 of dilation 2 side by side: one interleaving pass (vectorised) over whole rows.
        const bool pair = d2 == 2 && ow == OW / 2 && j + 1 < g.ph.size() && g.ph[j + 1].p[0] == ph.p[0] &&
                          ph.p[1] == 0 && g.ph[j + 1].p[1] == 1;
        for (int64_t i = 0; i < nm; ++i)
          for (int64_t r = 0; r < oh; ++r) {
            const T *__restrict src = ys + ((static_cast<int64_t>(j) * nm + i) * oh + r) * ow;
            T *__restrict dst = Y + (i * OH + ph.p[0] + r * d1) * OW + ph.p[1];
            if (pair) {
              const T *__restrict odd = src + nm * oh * ow;
              for (int64_t c = 0; c < ow; ++c) {
                dst[2 * c] = src[c];
                dst[2 * c + 1] = odd[c];
              }
            } else {
              for (int64_t c = 0; c < ow; ++c) dst[c * d2] = src[c];
            }
          }
        j += pair ? 1 : 0;
      }
    }
    return true;
  }

  // col[(c, kd, kh, kw), (od, oh, ow)] = x[c, od*s - pb + kd*d, ...] or 0 outside the input, for the output rows
  // (od, oh) numbered od * out[1] + oh in [r0, r1).
  void Im2Col(const T *x, T *col, int64_t r0 = 0, int64_t r1 = -1) const {
    if (r1 < 0) r1 = w_.out[0] * w_.out[1];
    T *dst = col;
    for (int64_t c = 0; c < cg_; ++c) {
      const T *xc = x + c * in_sp_;
      for (int64_t k0 = 0; k0 < w_.k[0]; ++k0)
        for (int64_t k1 = 0; k1 < w_.k[1]; ++k1)
          for (int64_t k2 = 0; k2 < w_.k[2]; ++k2) {
            for (int64_t o0 = r0 / w_.out[1]; o0 * w_.out[1] < r1; ++o0) {
              const int64_t i0 = o0 * w_.s[0] - w_.pb[0] + k0 * w_.d[0];
              const bool in0 = i0 >= 0 && i0 < w_.in[0];
              const int64_t o1_lo = std::max<int64_t>(r0 - o0 * w_.out[1], 0);
              const int64_t o1_hi = std::min(r1 - o0 * w_.out[1], w_.out[1]);
              for (int64_t o1 = o1_lo; o1 < o1_hi; ++o1) {
                const int64_t i1 = o1 * w_.s[1] - w_.pb[1] + k1 * w_.d[1];
                if (!in0 || i1 < 0 || i1 >= w_.in[1]) {
                  std::fill(dst, dst + w_.out[2], T(0));
                  dst += w_.out[2];
                  continue;
                }
                const T *row = xc + (i0 * w_.in[1] + i1) * w_.in[2];
                const int64_t off = k2 * w_.d[2] - w_.pb[2];
                const int64_t s2 = w_.s[2];
                // Valid ow range: 0 <= ow*s2 + off < in[2].
                int64_t lo = off >= 0 ? 0 : (-off + s2 - 1) / s2;
                int64_t hi = w_.in[2] - off <= 0 ? 0 : (w_.in[2] - off + s2 - 1) / s2;
                lo = std::min(lo, w_.out[2]);
                hi = std::min(std::max(hi, lo), w_.out[2]);
                std::fill(dst, dst + lo, T(0));
                if (s2 == 1) {  // short rows: an inline (vectorised) copy beats a memcpy call
                  const T *__restrict src = row + off;
                  T *__restrict d = dst;
                  for (int64_t o2 = lo; o2 < hi; ++o2) d[o2] = src[o2];
                } else if (s2 == 2) {
                  CopyEven(row + off, w_.in[2] - off, lo, hi, avx2_, dst);
                } else {
                  for (int64_t o2 = lo; o2 < hi; ++o2) dst[o2] = row[o2 * s2 + off];
                }
                std::fill(dst + hi, dst + w_.out[2], T(0));
                dst += w_.out[2];
              }
            }
          }
    }
  }

  // stack1x1_: per group, the images' maps side by side as one [cg][N * P] matrix, one GEMM into [mg][N * P], then
  // back to the images' layout.
  void RunStacked1x1(const T *X, const T *W, const T *B, T *Y) {
    const int64_t P = out_sp_, NP = N_ * P;
    T *xs = static_cast<T *>(scratch_), *ys = xs + cg_ * NP;
    for (int64_t g = 0; g < G_; ++g) {
      for (int64_t n = 0; n < N_; ++n)
        for (int64_t k = 0; k < cg_; ++k) std::copy_n(X + (n * C_ + g * cg_ + k) * P, P, xs + k * NP + n * P);
      T beta = T(0);
      if (B) {
        for (int64_t m = 0; m < mg_; ++m) std::fill(ys + m * NP, ys + (m + 1) * NP, B[g * mg_ + m]);
        beta = T(1);
      }
      Gemm<T>(false, false, mg_, NP, cg_, T(1), W + g * mg_ * cg_, cg_, xs, NP, beta, ys, NP);
      for (int64_t n = 0; n < N_; ++n)
        for (int64_t m = 0; m < mg_; ++m) {
          const T *__restrict src = ys + m * NP + n * P;
          T *__restrict dst = Y + (n * M_ + g * mg_ + m) * P;
          for (int64_t p = 0; p < P; ++p) dst[p] = relu_ && src[p] < T(0) ? T(0) : src[p];
        }
    }
  }

  // Depthwise weights [C][taps] -> [taps][C].
  std::vector<T> PackTaps(const T *W) const {
    std::vector<T> wt(static_cast<size_t>(kk_ * C_));
    for (int64_t c = 0; c < C_; ++c)
      for (int64_t k = 0; k < kk_; ++k) wt[static_cast<size_t>(k * C_ + c)] = W[c * kk_ + k];
    return wt;
  }
  // Per image: X to [position][channel], every output position the sum over its taps inside the input (padding
  // contributes nothing, so it is skipped, not stored), each tap a multiply-add over the contiguous channels; then
  // back to [channel][position]. Any stride, dilation and padding (1-D, 2-D and 3-D windows).
  // Floats of the channels-last input: padded rows for the AVX-512 kernel (dwcl_), else the plain map.
  // dwcl_ also keeps the plain transposed map after the outputs (DwOutFloats).
  int64_t DwInFloats() const { return (dwcl_ ? w_.in[1] * dwcl_pw_ : in_sp_) * C_; }
  int64_t DwOutFloats() const { return (out_sp_ + (dwcl_ ? in_sp_ : 0)) * C_; }
  // Images are independent: at batch > 1 the pool shares them out, each chunk with its own slot of transposed
  // input and output (the weights' transpose, when not known at plan time, first and shared).
  int64_t TinyGrain() const { return GrainForMacs(kk_ * C_ * out_sp_); }
  int TinySlots() const { return ScratchSlots::SlotCount(ChunksOf(N_, TinyGrain())); }
  size_t TinySlotBytes() const { return Align64(static_cast<size_t>(DwInFloats() + DwOutFloats()) * sizeof(T)); }
  void RunTinyDepthwise(const T *X, const T *W, const T *B, T *Y) {
    char *slot0 = static_cast<char *>(scratch_);
    const T *wt = wt_ ? wt_->data() : nullptr;
    if (!wt_) {
      T *t = static_cast<T *>(scratch_);
      for (int64_t c = 0; c < C_; ++c)
        for (int64_t k = 0; k < kk_; ++k) t[k * C_ + c] = W[c * kk_ + k];
      wt = t;
      slot0 += Align64(static_cast<size_t>(kk_ * C_) * sizeof(T));
    }
    ScratchSlots slots(TinySlots());
    ParallelForAnyCut(N_, TinyGrain(), [&](int64_t lo, int64_t hi) {
      const ScratchSlots::Hold hold(slots);
      T *xt = reinterpret_cast<T *>(slot0 + static_cast<size_t>(hold.index()) * TinySlotBytes());
      TinyDepthwiseImages(X, wt, B, Y, xt, xt + DwInFloats(), lo, hi);
    });
  }
  void TinyDepthwiseImages(const T *X, const T *wt, const T *B, T *Y, T *xt, T *yt, int64_t n0, int64_t n1) {
    const int64_t C = C_;
    for (int64_t n = n0; n < n1; ++n) {
      const T *xn = X + n * C * in_sp_;
      T *yn = Y + n * C * out_sp_;
      if constexpr (std::is_same<T, float>::value) {
#ifdef TWIN_HAVE_X86
        if (dwcl_) {
          // One transpose of the whole map (per row, 7-position transposes took longer than the convolution),
          // then its rows into the padded rows.
          const int64_t H = w_.in[1], Wd = w_.in[2], pw = dwcl_pw_, pl = w_.pb[2];
          const int64_t ncols = std::max<int64_t>(0, std::min(Wd, pw - pl));
          float *plain = yt + out_sp_ * C;
          TransposeFloats(xn, plain, in_sp_, C, in_sp_);
          for (int64_t ih = 0; ih < H; ++ih) {
            float *row = xt + ih * pw * C;
            const int64_t lead = std::min(pl, pw);
            std::fill(row, row + lead * C, 0.0f);
            if (ncols > 0) CopyBytes(row + pl * C, plain + ih * Wd * C, static_cast<size_t>(ncols * C) * sizeof(float));
            std::fill(row + (lead + ncols) * C, row + pw * C, 0.0f);
          }
          DwClArgs a{xt, H, pw, C, w_.k[1], w_.pb[1], w_.out[2], wt, B, relu_, yt};
          DwClImageAvx512(a, w_.out[1], w_.k[2], w_.s[2]);
          TransposeFloats(yt, yn, C, out_sp_, C);
          continue;
        }
#endif
        TransposeFloats(xn, xt, in_sp_, C, in_sp_);
#ifdef TWIN_HAVE_X86
        if (avx2_) TinyDepthwiseImageAvx2(dw_taps_, xt, wt, B, relu_, C, yt);
        else
#endif
          TinyDepthwiseImage(w_, xt, wt, B, relu_, C, yt);
        TransposeFloats(yt, yn, C, out_sp_, C);
      } else {
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = 0; p < in_sp_; ++p) xt[p * C + c] = xn[c * in_sp_ + p];
        TinyDepthwiseImage(w_, xt, wt, B, relu_, C, yt);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = 0; p < out_sp_; ++p) yn[c * out_sp_ + p] = yt[p * C + c];
      }
    }
  }

  // False when an output came out non-finite: the caller recomputes the run on the direct path.
  bool RunWinograd(const float *X, const float *W, const float *B, float *Y) {
    const float *u = wu_ ? wu_->data() : nullptr;
    char *scratch = static_cast<char *>(scratch_);
    if (!wu_) {
      float *t = reinterpret_cast<float *>(scratch);
      WinogradTransformFilter(W, M_, C_, t);
      u = t;
      scratch += Align64(WinogradFilterFloats(C_, M_) * sizeof(float));
    }
    return WinogradConv(ws_, X, u, B, relu_, Y, scratch, vmath::ActiveIsa() != vmath::Isa::kBaseline);
  }

#ifdef TWIN_HAVE_X86
  void RunDirect(const T *X, const T *W, const T *B, T *Y) {
    char *const base = static_cast<char *>(scratch_);
    const T *wp = wp_ ? wp_->data() : nullptr, *bp = bp_.data();
    if (!fused_) {
      T *w = reinterpret_cast<T *>(base);
      T *b = reinterpret_cast<T *>(base + Align64(PackFloats() * sizeof(T)));
      if (const_w_) {
        for (int64_t g = 0; g < G_; ++g)
          for (int64_t m = 0; m < nmb_ * kConvMB; ++m)
            b[g * nmb_ * kConvMB + m] = B && m < mg_ ? B[g * mg_ + m] : T(0);
        wp = wp_->data();
      } else {
        Pack(W, B, w, b);
        wp = w;
      }
      bp = b;
    }
    char *const slot0 = base + DirectSharedBytes();
    const size_t slot_bytes = DirectSlotBytes(), pad_bytes = Align64(static_cast<size_t>(PadFloats()) * sizeof(T));
    const bool fold = FoldImages();
    const int64_t img = cg_ * Planes() * ph_ * pw_;
    // The kernel's arguments for group g of image n (all images from n = 0 when folded).
    auto args = [&](int64_t g, int64_t n, const T *xp, T *yflat) {
      DirectConvArgs a;
      a.xp = xp;
      a.nimg = fold ? N_ : 1;
      a.img = img;
      a.ynext = M_ * out_sp_;
      a.cg = cg_;
      a.ph = ph_;
      a.pw = pw_;
      a.kh = w_.k[1];
      a.kw = w_.k[2];
      a.dh = w_.d[1];
      a.dw = w_.d[2];
      a.aligned = dw_aligned_;
      a.oh = w_.out[1];
      a.ow = w_.out[2];
      a.wpack = wp + g * nmb_ * kConvMB * cg_ * kk_;
      a.bias = bp + g * nmb_ * kConvMB;
      a.mg = mg_;
      a.y = Y + (n * M_ + g * mg_) * out_sp_;
      a.relu = relu_;
      a.s2 = s2_;
      a.flat = flat_;
      a.keep = flat_keep_.data();
      a.first = flat_first_.data();
      a.yflat = yflat;
      return a;
    };
    if (SplitItems()) {  // (image, group) pairs, each chunk in its own slot
      ScratchSlots slots(ItemSlots());
      ParallelForAnyCut(N_ * G_, ItemGrain(), [&](int64_t lo, int64_t hi) {
        const ScratchSlots::Hold hold(slots);
        char *slot = slot0 + static_cast<size_t>(hold.index()) * slot_bytes;
        T *xp = reinterpret_cast<T *>(slot), *yflat = reinterpret_cast<T *>(slot + pad_bytes);
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t n = i / G_, g = i % G_;
          PadPlanes(X + (n * C_ + g * cg_) * in_sp_, xp);
          RunDirectKernel(args(g, n, xp, yflat));
        }
      });
      return;
    }
    T *const xp0 = reinterpret_cast<T *>(slot0), *const yflat = reinterpret_cast<T *>(slot0 + pad_bytes);
    for (int64_t g = 0; g < G_; ++g) {
      for (int64_t n = 0; n < N_; ++n) {
        T *const xp = fold ? xp0 + n * img : xp0;
        PadPlanes(X + (n * C_ + g * cg_) * in_sp_, xp);
        if (fold && n + 1 < N_) continue;  // the last image's planes done: all of them in one call
        RunDirectBlocks(args(g, fold ? 0 : n, fold ? xp0 : xp, yflat));
      }
    }
  }
  // One group of one image's (or the folded images') padded planes, as the kernel reads them.
  void PadPlanes(const T *xg, T *xp) const {
    const int64_t H = w_.in[1], Wd = w_.in[2], pt = w_.pb[1], pl = w_.pb[2];
    if (s2_ && flat_ && vmath::ActiveIsa() == vmath::Isa::kAvx512)
      PhasePlanes4Avx512(xg, xp, cg_, w_.in[1], w_.in[2], w_.pb[1], w_.pb[2], ph_, pw_);
    else if (s2_) PhasePlanes(xg, xp);
    for (int64_t c = 0; c < (s2_ ? 0 : cg_); ++c) {
      for (int64_t r = 0; r < ph_; ++r) {
        T *dst = xp + (c * ph_ + r) * pw_;
        const int64_t ir = r - pt;
        if (ir < 0 || ir >= H) {
          std::fill(dst, dst + pw_, T(0));
          continue;
        }
        std::fill(dst, dst + pl, T(0));
        CopyBytes(dst + pl, xg + (c * H + ir) * Wd, static_cast<size_t>(Wd) * sizeof(T));
        std::fill(dst + pl + Wd, dst + pw_, T(0));
      }
    }
  }
  static void RunDirectKernel(const DirectConvArgs &a) {
    if (vmath::ActiveIsa() == vmath::Isa::kAvx512) DirectConvAvx512Any(a);
    else DirectConvAvx2(a);
  }
  // The kernel over its channel blocks, in chunks of at least kMinChunkMacs multiply-adds on the pool (at batch 1,
  // kOneImageChunkMacs): each output channel's sums are the same whichever block range computes them. Not with one
  // input channel per group (a range of one output channel would take the depthwise kernel).
  void RunDirectBlocks(const DirectConvArgs &a) const {
    if (cg_ == 1) return RunDirectKernel(a);
    const int64_t K = cg_ * kk_, ystride = ((a.oh - 1) * a.pw + a.ow + 15) / 16 * 16;
    const int64_t per_block = kConvMB * K * out_sp_ * a.nimg;
    const int64_t grain = N_ > 1 ? GrainForMacs(per_block) : ChunksOf(kOneImageChunkMacs, per_block);
    ParallelFor(nmb_, grain, [&](int64_t lo, int64_t hi) {
      DirectConvArgs b = a;
      b.wpack += lo * K * kConvMB;
      b.bias += lo * kConvMB;
      b.y += lo * kConvMB * out_sp_;
      b.mg = std::min(mg_, hi * kConvMB) - lo * kConvMB;
      if (flat_out_ > 0) b.yflat += lo * kConvMB * ystride;
      RunDirectKernel(b);
    });
  }
#endif

  // Stride 2: per channel, the padded input's even and odd columns as two planes of ph_ x pw_ (zeros outside X);
  // flat, its even and odd rows of each as well (four planes, DirectConvArgs::flat).
  void PhasePlanes(const T *xg, T *xp) const {
    const int64_t H = w_.in[1], Wd = w_.in[2], pt = w_.pb[1], pl = w_.pb[2];
    const int64_t np = Planes();
    for (int64_t c = 0; c < cg_; ++c)
      for (int64_t pp = 0; pp < np; ++pp)
        for (int64_t r = 0; r < ph_; ++r) {
          T *__restrict dst = xp + ((c * np + pp) * ph_ + r) * pw_;
          const int64_t p = pp & 1, ir = (np == 4 ? 2 * r + (pp >> 1) : r) - pt;
          if (ir < 0 || ir >= H) {
            std::fill(dst, dst + pw_, T(0));
            continue;
          }
          // column c' reads input column 2 c' + p - pl, inside [0, Wd) for c' in [lo, hi)
          const int64_t off = p - pl;
          const int64_t lo = std::min(pw_, off >= 0 ? 0 : (-off + 1) / 2);
          const int64_t hi = std::max(lo, std::min(pw_, Wd - off <= 0 ? 0 : (Wd - off + 1) / 2));
          std::fill(dst, dst + lo, T(0));
          CopyEven(xg + (c * H + ir) * Wd + off, Wd - off, lo, hi, avx2_, dst);
          std::fill(dst + hi, dst + pw_, T(0));
        }
  }

  Window w_;
  int64_t N_, C_, M_, G_;
  bool has_bias_;
  bool fused_ = false, relu_ = false;
  std::vector<T> fw_, fb_;
  int64_t cg_ = 0, mg_ = 0, kk_ = 0, in_sp_ = 0, out_sp_ = 0;
  bool direct_ = false;
  bool dconv_ = false;                 // AVX-512 / AVX2 direct convolution (float, stride 1, no dilation, 1-D/2-D)
  bool avx2_ = false;                  // Im2Col's stride-2 rows by CopyEvenAvx2
  bool s2_ = false;                    // the direct convolution at stride 2 (AVX2 / AVX-512), over column phases
  int64_t ph_ = 0, pw_ = 0, nmb_ = 0;  // its padded input rows/row length and channel blocks
  bool flat_ = false;                  // AVX-512 flat positions (DirectConvFlatAvx512)
  bool dw_aligned_ = false;            // AVX-512 depthwise rows of a multiple of 16 (DepthwiseAlignedAvx512)
  std::vector<uint16_t> flat_keep_;    // per flat chunk: the lanes on outputs
  std::vector<int64_t> flat_first_;    // per flat chunk: its first output's offset in a channel's map
  int64_t flat_out_ = 0;               // AVX2 flat: floats of the flat outputs' scratch
  std::shared_ptr<const std::vector<T>> wp_;  // its packed weights (fused form; from the weights alone if const_w_)
  std::vector<T> bp_;                  // its packed bias (fused form)
  bool const_w_ = false;               // wp_ packed from constant weights (not fused: the bias is packed per run)
  bool wino_ = false;                  // Winograd F(2x2, 3x3) (float), falling back to the paths above
#ifdef TWIN_HAVE_X86
  bool dwf2_ = false;                  // depthwise at stride 2 on small maps, AVX-512, flat phase planes (DwFlatS2Avx512)
  DwFlatS2Geom dwf2g_{};               // its geometry
#endif
  bool dw_s2_ = false;                 // depthwise at stride 2, AVX-512, from the input planes (DepthwiseS2PlaneAvx512)
  bool tiny_dw_ = false;               // depthwise on a small map, channels last (RunTinyDepthwise)
  bool dwcl_ = false;                  // its AVX-512 row-blocked kernel (DwClImageAvx512)
  int64_t dwcl_pw_ = 0;                // its padded row length (positions)
  int64_t col_rows_ = 0;               // im2col in blocks of this many output rows (0: the whole image at once)
  std::shared_ptr<const std::vector<T>> wt_;  // its weights as [tap][channel] when known at plan time
  DwTapLists dw_taps_;                 // its taps inside the input per output position
  WinogradShape ws_{};
  std::shared_ptr<const std::vector<float>> wu_;  // its transformed filter when the weights are constant
  std::vector<PhaseGroup> phase_groups_;  // dilation by phases (InitPhases)
  std::unique_ptr<ConvKernel<T>> slices_;  // 3-D as a 2-D conv over (image, output depth) (InitSlices)
  static constexpr int64_t kSliceBytes = int64_t(4) << 20;  // its gathered input per run, at most (but one depth)
  std::vector<std::unique_ptr<ConvKernel<T>>> group_convs_;  // grouped 2-D, a dense conv per group (InitGroupConvs)
  bool stack1x1_ = false;              // 1x1 on small maps of several images (RunStacked1x1)
  static constexpr int64_t kClMaxPositions = 1024;
  static constexpr int64_t kClOverDirect = 256;  // 14x14 measured even (1.24x / 1.46x either way), 8x8 ahead
  bool cl_ = false;                    // channels last, positions x panels GEMM (InitChannelsLast)
  // Per spatial axis, runs of outputs [o_begin, o_end) whose in-input taps lie in [k_begin, k_end) (InitClRuns).
  struct ClRun {
    int64_t o_begin, o_end, k_begin, k_end;
  };
  std::vector<ClRun> cl_runs_[kMaxSpatial];
  bool cl_taps_ = false;               // cl_skip_ with one region per tap, their products added (InitClRuns)
  bool cl_skip_ = false;               // some run leaves taps out: RunChannelsLast goes region by region
  int cl_width_ = 0;                   // its panel width (PanelWidth)
  int64_t cl_rows_ = 0;                // its positions per column block
  int64_t cl_kc_ = 0;                  // its K per GEMM call
  std::shared_ptr<const std::vector<float>> wcl_;  // its packed panels when the weights are known at plan time
};

// A Conv kernel's window (from X's and W's static spatial dims) and its group count.
bool ConvGeometry(const KernelCtx &c, Window *w, int64_t *group, std::string *reason) {
  const auto &xd = c.in[0]->dims, &wd = c.in[1]->dims;
  return AttrInt(*c.node, "group", 1, group, reason) &&
         MakeWindow(*c.node, std::vector<int64_t>(xd.begin() + 2, xd.end()),
                    std::vector<int64_t>(wd.begin() + 2, wd.end()), false, w, reason);
}

// Kernel taps that read padding only, for every output, contribute nothing: an ASPP branch (DeepLab's 3x3 convs at
// dilations 12 / 24 / 36 on a 4x4 map) reads the input through its centre tap alone, and ran ~14x slower than
// onnxruntime on all nine. Drops such leading and trailing taps per spatial dim (the pads shrink by the dropped
// extent, so the output grid stays), when both pads stay >= 0. Returns false when nothing is dropped; lo gets the
// first kept tap per dim.
bool TrimDeadTaps(const Window &w, Window *t, int64_t lo[kMaxSpatial]) {
  *t = w;
  bool trimmed = false;
  for (size_t i = 0; i < kMaxSpatial; ++i) {
    lo[i] = 0;
    if (w.k[i] == 1 || w.out[i] < 1) continue;
    auto live = [&](int64_t tap) {  // some output o reads input row o s - pb + tap d inside [0, in)
      const int64_t c = tap * w.d[i] - w.pb[i];
      const int64_t o = c >= 0 ? 0 : CeilDiv(-c, w.s[i]);
      return o < w.out[i] && o * w.s[i] + c < w.in[i];
    };
    int64_t a = 0, b = w.k[i] - 1;
    while (a <= b && !live(a)) ++a;
    while (b >= a && !live(b)) --b;
    if (a > b || (a == 0 && b == w.k[i] - 1)) continue;  // all dead (bias only) or all live: as written
    const int64_t pb = w.pb[i] - a * w.d[i], pe = w.pe[i] - (w.k[i] - 1 - b) * w.d[i];
    if (pb < 0 || pe < 0) continue;
    t->k[i] = b - a + 1, t->pb[i] = pb, t->pe[i] = pe, lo[i] = a;
    trimmed = true;
  }
  return trimmed;
}

// The kept taps of weights [M * cg][k0][k1][k2] (window w) for the trimmed window t, taps from lo.
std::vector<float> TrimmedWeights(const float *W, int64_t rows, const Window &w, const Window &t,
                                  const int64_t lo[kMaxSpatial]) {
  std::vector<float> out(static_cast<size_t>(rows * t.k[0] * t.k[1] * t.k[2]));
  float *o = out.data();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t a = 0; a < t.k[0]; ++a)
      for (int64_t b = 0; b < t.k[1]; ++b) {
        const float *src = W + ((r * w.k[0] + lo[0] + a) * w.k[1] + lo[1] + b) * w.k[2] + lo[2];
        o = std::copy(src, src + t.k[2], o);
      }
  return out;
}

std::unique_ptr<Kernel> PrepareConvFloat(const KernelCtx &c, std::string *reason) {
  const auto &xd = c.in[0]->dims, &wd = c.in[1]->dims;
  int64_t group;
  Window w;
  if (!ConvGeometry(c, &w, &group, reason)) return nullptr;
  const bool has_bias = c.in.size() > 2 && c.in[2];
  switch (c.out[0].dtype) {
    case ElemType::kFloat: {
      Window t;
      int64_t lo[kMaxSpatial];
      if (c.in_data[1] && (!has_bias || c.in_data[2]) && TrimDeadTaps(w, &t, lo)) {
        const int64_t M = wd[0];
        std::vector<float> fw = TrimmedWeights(static_cast<const float *>(c.in_data[1]), M * (xd[1] / group), w, t, lo);
        std::vector<float> fb(static_cast<size_t>(M), 0.0f);
        if (has_bias) std::copy_n(static_cast<const float *>(c.in_data[2]), M, fb.begin());
        return std::make_unique<ConvKernel<float>>(t, xd[0], xd[1], M, group, std::move(fw), std::move(fb), false);
      }
      auto k = std::make_unique<ConvKernel<float>>(w, xd[0], xd[1], wd[0], group, has_bias);
      if (c.in_data[1]) k->UseConstantWeights(static_cast<const float *>(c.in_data[1]));
      return k;
    }
    case ElemType::kDouble: return std::make_unique<ConvKernel<double>>(w, xd[0], xd[1], wd[0], group, has_bias);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

}  // namespace

std::unique_ptr<Kernel> PrepareFusedConv(const KernelCtx &c, const std::vector<double> *scale,
                                         const std::vector<double> *shift, bool relu, std::string *reason) {
  if (c.out[0].dtype != ElemType::kFloat || !c.in_data[1] || (c.in.size() > 2 && c.in[2] && !c.in_data[2])) {
    *reason = "fusion needs float32 and constant weights";
    return nullptr;
  }
  const auto &xd = c.in[0]->dims, &wd = c.in[1]->dims;
  int64_t group;
  Window w;
  if (!ConvGeometry(c, &w, &group, reason)) return nullptr;
  const int64_t M = wd[0];
  const int64_t per = c.in[1]->NumElements() / std::max<int64_t>(M, 1);
  const float *W = static_cast<const float *>(c.in_data[1]);
  const float *B = c.in.size() > 2 && c.in[2] ? static_cast<const float *>(c.in_data[2]) : nullptr;
  std::vector<float> fw(static_cast<size_t>(c.in[1]->NumElements())), fb(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) {
    const double a = scale ? (*scale)[m] : 1.0, b = shift ? (*shift)[m] : 0.0;
    for (int64_t i = 0; i < per; ++i) fw[m * per + i] = static_cast<float>(W[m * per + i] * a);
    fb[m] = static_cast<float>((B ? B[m] : 0.0) * a + b);
  }
  Window t;
  int64_t lo[kMaxSpatial];
  if (TrimDeadTaps(w, &t, lo)) {
    fw = TrimmedWeights(fw.data(), M * (xd[1] / group), w, t, lo);
    w = t;
  }
  return std::make_unique<ConvKernel<float>>(w, xd[0], xd[1], M, group, std::move(fw), std::move(fb), relu);
}

std::unique_ptr<Kernel> MakeFastConvFloat(int64_t N, int64_t C, int64_t M, int64_t group, int64_t H, int64_t W,
                                          int64_t kh, int64_t kw, const int64_t pads[4], bool has_bias,
                                          const float *w) {
  Window win;
  win.nsp = H == 1 && kh == 1 ? 1 : 2;
  win.in[1] = H, win.in[2] = W, win.k[1] = kh, win.k[2] = kw;
  win.pb[1] = pads[0], win.pb[2] = pads[1], win.pe[1] = pads[2], win.pe[2] = pads[3];
  win.out[1] = H + pads[0] + pads[2] - kh + 1;
  win.out[2] = W + pads[1] + pads[3] - kw + 1;
  if (win.out[1] < 1 || win.out[2] < 1) return nullptr;
  auto k = std::make_unique<ConvKernel<float>>(win, N, C, M, group, has_bias);
  if (!k->Fast()) return nullptr;
  if (w) k->UseConstantWeights(w);
  return k;
}

bool ConvShapeOf(const KernelCtx &c, ConvShape *shape, std::string *reason) {
  Window w;
  if (!ConvGeometry(c, &w, &shape->group, reason)) return false;
  shape->N = c.in[0]->dims[0];
  shape->C = c.in[0]->dims[1];
  shape->M = c.in[1]->dims[0];
  for (size_t i = 0; i < kMaxSpatial; ++i) {
    shape->in[i] = w.in[i], shape->out[i] = w.out[i], shape->k[i] = w.k[i];
    shape->s[i] = w.s[i], shape->d[i] = w.d[i], shape->pb[i] = w.pb[i];
  }
  return true;
}

namespace {

std::unique_ptr<Kernel> PrepareConv(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareConvFloat, reason) : PrepareConvFloat(c, reason);
}

// ---- MaxPool / AveragePool ----

bool PoolKernelShape(const Node &n, size_t nsp, std::vector<int64_t> *ks, std::string *reason) {
  bool present;
  if (!AttrInts(n, "kernel_shape", ks, &present, reason)) return false;
  if (!present || ks->size() != nsp) {
    *reason = "attribute 'kernel_shape' is required with one value per spatial dim (" + std::to_string(nsp) + ")";
    return false;
  }
  return true;
}

bool CheckPool(const Node &n, int64_t, std::string *reason) {
  int64_t v;
  if (!AttrInt(n, "storage_order", 0, &v, reason) || !AttrInt(n, "count_include_pad", 0, &v, reason)) return false;
  return true;
}

bool InferPool(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  const bool is_max = c->node->op_type == "MaxPool";
  const bool ok_type = IsFloatType(x.dtype) || (is_max && (x.dtype == ElemType::kInt8 || x.dtype == ElemType::kUint8));
  if (!ok_type) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  if (x.dims.size() < 3) {
    *reason = "input must have rank >= 3, got " + ShapeStr(x.dims);
    return false;
  }
  const size_t nsp = x.dims.size() - 2;
  std::vector<int64_t> ks;
  if (!PoolKernelShape(*c->node, nsp, &ks, reason)) return false;
  Window w;
  if (!MakeWindow(*c->node, std::vector<int64_t>(x.dims.begin() + 2, x.dims.end()), ks, true, &w, reason))
    return false;
  std::vector<int64_t> out = {x.dims[0], x.dims[1]};
  for (size_t i = kMaxSpatial - nsp; i < kMaxSpatial; ++i) out.push_back(w.out[i]);
  c->out[0].dtype = x.dtype;
  c->out[0].dims = out;
  if (c->out.size() > 1) {
    c->out[1].dtype = ElemType::kInt64;
    c->out[1].dims = out;
  }
  return true;
}

// Valid window taps along one dim for output position o: k in [lo, hi) lands inside [lo_bound, hi_bound).
inline void TapRange(int64_t start, int64_t k, int64_t d, int64_t lo_bound, int64_t hi_bound, int64_t *lo,
                     int64_t *hi) {
  int64_t a = start >= lo_bound ? 0 : (lo_bound - start + d - 1) / d;
  int64_t b = start >= hi_bound ? 0 : (hi_bound - 1 - start) / d + 1;
  *lo = std::min(a, k);
  *hi = std::max(*lo, std::min(b, k));
}

// Interior windows of one output row of a 2-D pool: rows input rows from x (row pitch w), kw taps per row, output
// j reading columns j * sw + [0, kw). Taps in the general loop's order (row, then column).
struct PoolRows {
  const float *x;
  int64_t w, rows, kw, sw, n;
  int64_t avail;  // columns of each row readable from x
};
// Max: the first tap, then a later tap only where it is larger (so NaN only as the first tap, like the general loop).
__attribute__((always_inline)) inline void MaxRowsBody(const PoolRows &r, float *__restrict y) {
  for (int64_t kh = 0; kh < r.rows; ++kh)
    for (int64_t kw = 0; kw < r.kw; ++kw) {
      const float *__restrict xc = r.x + kh * r.w + kw;
      if (kh == 0 && kw == 0) {
        for (int64_t j = 0; j < r.n; ++j) y[j] = xc[j * r.sw];
      } else if (r.sw == 1) {
        for (int64_t j = 0; j < r.n; ++j) y[j] = xc[j] > y[j] ? xc[j] : y[j];
      } else if (r.sw == 2) {
        for (int64_t j = 0; j < r.n; ++j) y[j] = xc[2 * j] > y[j] ? xc[2 * j] : y[j];
      } else {
        for (int64_t j = 0; j < r.n; ++j) y[j] = xc[j * r.sw] > y[j] ? xc[j * r.sw] : y[j];
      }
    }
}
// Sum in float32, from +0.0, in the general loop's order (AveragePool's one summation order: every float path
// adds the same taps in this order, so all paths give the same bits).
__attribute__((always_inline)) inline void SumRowsBody(const PoolRows &r, float *__restrict acc) {
  for (int64_t j = 0; j < r.n; ++j) acc[j] = 0.0f;
  for (int64_t kh = 0; kh < r.rows; ++kh)
    for (int64_t kw = 0; kw < r.kw; ++kw) {
      const float *__restrict xc = r.x + kh * r.w + kw;
      if (r.sw == 1) {
        for (int64_t j = 0; j < r.n; ++j) acc[j] += xc[j];
      } else if (r.sw == 2) {
        for (int64_t j = 0; j < r.n; ++j) acc[j] += xc[2 * j];
      } else {
        for (int64_t j = 0; j < r.n; ++j) acc[j] += xc[j * r.sw];
      }
    }
}
void MaxRowsBase(const PoolRows &r, float *y) { MaxRowsBody(r, y); }
void SumRowsBase(const PoolRows &r, float *acc) { SumRowsBody(r, acc); }
#ifdef TWIN_HAVE_X86
// Stride 2: tap kw of outputs j..j+7 is the even (kw even) or odd lane of the 16 floats from column 2j + (kw & ~1).
// The two shuffles leave the outputs in the order 0 1 4 5 2 3 6 7, the same for every tap: the maxima are taken
// in that order and put right once, at the store. The pair of loads at one column serves two taps. kB blocks of
// eight outputs: kB independent max chains. kMasked: one block whose loads stop at r.avail (masked loads never
// fault) and whose store stops at output n (the row's tail, so that no output of the row needs the scalar loop).
template <int kB, int kKw, bool kMasked>
__attribute__((target("avx2"), always_inline)) inline void MaxBlocksStride2Avx2(const PoolRows &r, int64_t j,
                                                                                float *y) {
  const int64_t kw_n = kKw > 0 ? kKw : r.kw;
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 m[kB];
  for (int b = 0; b < kB; ++b) m[b] = _mm256_setzero_ps();  // overwritten by the first tap (rows >= 1)
  for (int64_t kh = 0; kh < r.rows; ++kh) {
#pragma GCC unroll 4
    for (int64_t kw = 0; kw < kw_n; kw += 2) {
      const int64_t col = 2 * j + kw;  // of the pair's first load, from r.x's row start
      const float *xc = r.x + kh * r.w + col;
      for (int b = 0; b < kB; ++b) {
        __m256 a, c;
        if constexpr (kMasked) {
          const __m256i left = _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(r.avail - col, 64)));
          a = _mm256_maskload_ps(xc, _mm256_cmpgt_epi32(left, iota));
          c = _mm256_maskload_ps(xc + 8, _mm256_cmpgt_epi32(_mm256_sub_epi32(left, _mm256_set1_epi32(8)), iota));
        } else {
          a = _mm256_loadu_ps(xc + 16 * b);
          c = _mm256_loadu_ps(xc + 16 * b + 8);
        }
        const __m256 even = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0));
        m[b] = kh == 0 && kw == 0 ? even : _mm256_max_ps(even, m[b]);  // v > m ? v : m, the general loop's test
        if (kw + 1 < kw_n) m[b] = _mm256_max_ps(_mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1)), m[b]);
      }
    }
  }
  for (int b = 0; b < kB; ++b) {
    const __m256 v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m[b]), _MM_SHUFFLE(3, 1, 2, 0)));
    if constexpr (kMasked) {
      _mm256_maskstore_ps(y + j, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r.n - j)), iota), v);
    } else {
      _mm256_storeu_ps(y + j + 8 * b, v);
    }
  }
}
template <int kKw>
__attribute__((target("avx2"), always_inline)) inline void MaxRowStride2Avx2(const PoolRows &r, float *y) {
  const int64_t reach = (r.kw - 1) & ~int64_t{1};  // farthest load start past 2j
  int64_t j = 0;
  for (; 2 * j + 64 + reach <= r.avail && j + 32 <= r.n; j += 32) MaxBlocksStride2Avx2<4, kKw, false>(r, j, y);
  for (; 2 * j + 16 + reach <= r.avail && j + 8 <= r.n; j += 8) MaxBlocksStride2Avx2<1, kKw, false>(r, j, y);
  for (; j < r.n; j += 8) MaxBlocksStride2Avx2<1, kKw, true>(r, j, y);
}
// Stride 1: 32 outputs in four registers over all the taps (first tap, then max(v, m) = v > m ? v : m in the
// general loop's order), one store; the row's last n % 8 outputs by MaxRowsBody.
__attribute__((target("avx2"))) void MaxRowsStride1Avx2(const PoolRows &r, float *y) {
  int64_t j = 0;
  for (; j + 32 <= r.n; j += 32) {
    __m256 m0 = _mm256_loadu_ps(r.x + j), m1 = _mm256_loadu_ps(r.x + j + 8);
    __m256 m2 = _mm256_loadu_ps(r.x + j + 16), m3 = _mm256_loadu_ps(r.x + j + 24);
    for (int64_t kh = 0; kh < r.rows; ++kh)
      for (int64_t kw = kh == 0 ? 1 : 0; kw < r.kw; ++kw) {
        const float *v = r.x + kh * r.w + kw + j;
        m0 = _mm256_max_ps(_mm256_loadu_ps(v), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(v + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(v + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(v + 24), m3);
      }
    _mm256_storeu_ps(y + j, m0);
    _mm256_storeu_ps(y + j + 8, m1);
    _mm256_storeu_ps(y + j + 16, m2);
    _mm256_storeu_ps(y + j + 24, m3);
  }
  for (; j + 8 <= r.n; j += 8) {
    __m256 m0 = _mm256_loadu_ps(r.x + j);
    for (int64_t kh = 0; kh < r.rows; ++kh)
      for (int64_t kw = kh == 0 ? 1 : 0; kw < r.kw; ++kw)
        m0 = _mm256_max_ps(_mm256_loadu_ps(r.x + kh * r.w + kw + j), m0);
    _mm256_storeu_ps(y + j, m0);
  }
  if (j < r.n) MaxRowsBody(PoolRows{r.x + j, r.w, r.rows, r.kw, 1, r.n - j, r.avail - j}, y + j);
}
// Stride 2 in blocks (the row's tail with masked loads and stores); stride 1: MaxRowsStride1Avx2; other strides:
// MaxRowsBody.
__attribute__((target("avx2"))) void MaxRowsAvx2(const PoolRows &r, float *y) {
  if (r.sw == 1) return MaxRowsStride1Avx2(r, y);
  if (r.sw != 2) return MaxRowsBody(r, y);
  if (r.kw == 3) return MaxRowStride2Avx2<3>(r, y);
  MaxRowStride2Avx2<0>(r, y);
}
// SumRowsBody in its AVX2 build, then the general loop's one division (div 0, no tap counted: 0).
__attribute__((target("avx2"))) void AvgRowsAvx2(const PoolRows &r, float div, float *acc, float *y) {
  SumRowsBody(r, acc);
  for (int64_t j = 0; j < r.n; ++j) y[j] = div != 0.0f ? acc[j] / div : 0.0f;
}
// Column strides 3..8 with kernel == stride along the row (windows side by side, e.g. 3x3 stride 3, 4x3 stride
// (4, 3)): outputs j..j+7 read the columns j * kSw + [0, 8 * nr) as nr whole registers, and tap kw of the eight is
// picked out of them by a permute per register that holds some of its lanes and a blend (constants once the loops
// are unrolled, so the registers stay registers), instead of SumRowsBody's / MaxRowsBody's scalar strided loops
// (gathers measured slower still). Blocks at the row's end load masked up to r.avail (masked loads never fault)
// and store masked up to n.
// Average: the general loop's sums (float32, from +0.0, window order) and its one division, so its bits; div 0 (no
// tap counted): 0. Max: the first tap, then max(v, m) = v > m ? v : m, as MaxRowsBody.
using DeintRowsFn = void (*)(const PoolRows &, double, float *);
template <int kSw, bool kMax>
__attribute__((target("avx2"))) void DeintRowsAvx2(const PoolRows &r, double div, float *y) {
  constexpr int kNr = (7 * kSw + kSw - 1) / 8 + 1;
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 d = _mm256_set1_ps(static_cast<float>(div));
  for (int64_t j = 0; j < r.n; j += 8) {
    const int64_t c = j * kSw;
    __m256 m = _mm256_setzero_ps();  // Max: overwritten by the first tap; Average: the sums from +0.0
    for (int64_t kh = 0; kh < r.rows; ++kh) {
      const float *xr = r.x + kh * r.w + c;
      __m256 R[kNr];
      if (c + 8 * kNr <= r.avail) {
#pragma GCC unroll 16
        for (int q = 0; q < kNr; ++q) R[q] = _mm256_loadu_ps(xr + 8 * q);
      } else {
#pragma GCC unroll 16
        for (int q = 0; q < kNr; ++q) {
          const int64_t left = std::max<int64_t>(0, std::min<int64_t>(8, r.avail - c - 8 * q));
          R[q] = _mm256_maskload_ps(xr + 8 * q, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), iota));
        }
      }
#pragma GCC unroll 16
      for (int kw = 0; kw < kSw; ++kw) {
        // lane l: column l * kSw + kw, in register (l * kSw + kw) / 8 at lane (l * kSw + kw) % 8
        const __m256i col = _mm256_add_epi32(_mm256_mullo_epi32(iota, _mm256_set1_epi32(kSw)), _mm256_set1_epi32(kw));
        const __m256i lane = _mm256_and_si256(col, _mm256_set1_epi32(7));
        const __m256i reg = _mm256_srli_epi32(col, 3);
        __m256 v = _mm256_permutevar8x32_ps(R[kw / 8], lane);
        // a constant trip count (the bounds fold once kw is): GCC cannot honour the unroll over kw-dependent bounds
        // at -O1 (the sanitizer build)
#pragma GCC unroll 16
        for (int q = 1; q < kNr; ++q)
          if (q > kw / 8 && q <= (7 * kSw + kw) / 8)
            v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(R[q], lane),
                                 _mm256_castsi256_ps(_mm256_cmpeq_epi32(reg, _mm256_set1_epi32(q))));
        if constexpr (kMax) {
          m = kh == 0 && kw == 0 ? v : _mm256_max_ps(v, m);
        } else {
          m = _mm256_add_ps(m, v);
        }
      }
    }
    if constexpr (!kMax) m = div != 0.0 ? _mm256_div_ps(m, d) : _mm256_setzero_ps();
    if (j + 8 <= r.n) _mm256_storeu_ps(y + j, m);
    else _mm256_maskstore_ps(y + j, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r.n - j)), iota), m);
  }
}
template <bool kMax>
DeintRowsFn DeintRowsFor(int64_t sw, int64_t kw) {
  if (sw != kw) return nullptr;
  switch (sw) {
    case 3: return DeintRowsAvx2<3, kMax>;
    case 4: return DeintRowsAvx2<4, kMax>;
    case 5: return DeintRowsAvx2<5, kMax>;
    case 6: return DeintRowsAvx2<6, kMax>;
    case 7: return DeintRowsAvx2<7, kMax>;
    case 8: return DeintRowsAvx2<8, kMax>;
    default: return nullptr;
  }
}
// One 2-D plane vectorised as a whole rather than per output row (per-row work dominates short rows), at any
// stride (no dilation). The plane is copied once into a buffer xp that holds, per (row phase, column phase) of the
// stride, the padded plane's rows R = SH * r + rp and columns C = SW * c + cp as a plane of Hq rows of pitch Wq; the
// pads (and ceil-mode overhang) stay at a constant written once. Outputs sit on a grid of the same pitch (position
// p = oh * Wq + ow), so tap (kh, kw) of every output is one shifted load, xp at p + off[tap] (off in window order).
// Strides 1 and 2 copy with vector loads (stride 2 splits even and odd columns with one permute), others scalar.
// Small planes go B at a time, stacked in each phase (plane b's rows after plane b - 1's), so that one grid covers
// them all and the per-plane work is only the copies in and out.
struct FlatGrid {
  int64_t H, W, PH, PW, SH, SW;  // the plane, its leading pads, the strides
  int64_t Hq, Wq, PB, B, PS;     // one plane in a phase: rows, pitch, size; planes per batch; a phase's size
  int64_t n, OH, OW;             // grid positions of a full batch (a multiple of 8; columns >= OW are not outputs)
  const int64_t *off;            // tap offsets in window order
  int64_t taps;
  const float *div;  // AveragePool: the divisor per grid position of a batch
};
// Four floats to dst, the first cnt of them (cnt < 4: masked).
__attribute__((target("avx2"), always_inline)) inline void FlatStore4(float *dst, __m128 v, int64_t cnt = 4) {
  if (cnt >= 4)
    _mm_storeu_ps(dst, v);
  else if (cnt > 0)
    _mm_maskstore_ps(dst, _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(cnt)), _mm_setr_epi32(0, 1, 2, 3)), v);
}
// The plane into xp. Returns whether a copied value is NaN.
__attribute__((target("avx2"), always_inline)) inline bool FlatFillAvx2(const FlatGrid &g, const float *x,
                                                                        float *xp) {
  __m256 bad = _mm256_setzero_ps();
  const int64_t wn = std::min(g.W, g.Wq * g.SW - g.PW);  // input columns some window reads
  const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t rq = g.PH / g.SH, rp = g.PH % g.SH;  // R = h + PH as rq * SH + rp
  for (int64_t h = 0; h < g.H && rq < g.Hq; ++h) {
    const float *src = x + h * g.W;
    float *base = xp + rp * g.SW * g.PS + rq * g.Wq;
    if (++rp == g.SH) {
      rp = 0;
      ++rq;
    }
    if (g.SW > 2) {
      for (int64_t w = 0; w < wn; ++w) {
        const int64_t C = w + g.PW;
        base[(C % g.SW) * g.PS + C / g.SW] = src[w];
        bad = _mm256_or_ps(bad, _mm256_set1_ps(std::isnan(src[w]) ? -1.0f : 0.0f));
      }
      continue;
    }
    float *de = base + (g.SW == 1 ? g.PW : (g.PW & 1) * g.PS + g.PW / 2);
    float *dodd = base + ((g.PW + 1) & 1) * g.PS + (g.PW + 1) / 2;
    for (int64_t w = 0; w < wn; w += 8) {  // the row's last wn % 8 columns masked (masked loads never fault)
      const int64_t r = std::min<int64_t>(8, wn - w);
      __m256 v = r == 8 ? _mm256_loadu_ps(src + w)
                        : _mm256_maskload_ps(src + w, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), iota));
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      if (g.SW == 1) {
        FlatStore4(de + w, _mm256_castps256_ps128(v), r);
        FlatStore4(de + w + 4, _mm256_extractf128_ps(v, 1), r - 4);
      } else {
        v = _mm256_permutevar8x32_ps(v, split);  // even columns, then odd
        FlatStore4(de + w / 2, _mm256_castps256_ps128(v), (r + 1) / 2);
        FlatStore4(dodd + w / 2, _mm256_extractf128_ps(v, 1), r / 2);
      }
    }
  }
  return _mm256_movemask_ps(bad) != 0;
}
// One plane's outputs from the grid z (pitch Wq) into y (pitch OW). Whole vectors up to y_end: what they write past
// a row's end is the following outputs, which are written after it.
__attribute__((target("avx2"), always_inline)) inline void FlatCopyOut(const FlatGrid &g, const float *z, float *y,
                                                                       const float *y_end) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const float *zr = z + oh * g.Wq;
    float *yr = y + oh * g.OW;
    int64_t c = 0;
    for (; c < g.OW && yr + c + 8 <= y_end; c += 8) _mm256_storeu_ps(yr + c, _mm256_loadu_ps(zr + c));
    for (; c < g.OW; ++c) yr[c] = zr[c];
  }
}
// Grid positions of a batch of nb planes (a multiple of 8).
inline int64_t FlatBatchN(const FlatGrid &g, int64_t nb) { return ((nb - 1) * g.PB + g.OH * g.Wq + 7) / 8 * 8; }
// The window averages of grid positions o .. o + 8 kV - 1: the float32 sums (taps in window order, from +0.0)
// divided by the table's divisors.
template <int kV>
__attribute__((target("avx2"), always_inline)) inline void FlatAvgBlock(const FlatGrid &g, const float *xp,
                                                                        int64_t o, float *z) {
  __m256 a[kV];
  for (int k = 0; k < kV; ++k) a[k] = _mm256_setzero_ps();
  for (int64_t t = 0; t < g.taps; ++t) {
    const float *p = xp + o + g.off[t];
    for (int k = 0; k < kV; ++k) a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(p + 8 * k));
  }
  for (int k = 0; k < kV; ++k) _mm256_storeu_ps(z + o + 8 * k, _mm256_div_ps(a[k], _mm256_loadu_ps(g.div + o + 8 * k)));
}
// The window maxima of grid positions o .. o + 8 kV - 1: the first tap, then max(v, m) = v > m ? v : m.
template <int kV>
__attribute__((target("avx2"), always_inline)) inline void FlatMaxBlock(const FlatGrid &g, const float *xp,
                                                                        int64_t o, float *z) {
  __m256 m[kV];
  for (int k = 0; k < kV; ++k) m[k] = _mm256_loadu_ps(xp + o + g.off[0] + 8 * k);
  for (int64_t t = 1; t < g.taps; ++t) {
    const float *p = xp + o + g.off[t];
    for (int k = 0; k < kV; ++k) m[k] = _mm256_max_ps(_mm256_loadu_ps(p + 8 * k), m[k]);
  }
  for (int k = 0; k < kV; ++k) _mm256_storeu_ps(z + o + 8 * k, m[k]);
}
// AveragePool: per output the general loop's arithmetic, the taps added in float32 in window order (a pad adds +0.0,
// which leaves a sum that started at +0.0 unchanged), then one division by the table's divisor.
__attribute__((target("avx2"))) void FlatAvgAvx2(const FlatGrid &g, const float *x, int64_t in_sp, float *y,
                                                 int64_t out_sp, int64_t count, float *xp, float *z) {
  const float *y_end = y + count * out_sp;
  for (int64_t i0 = 0; i0 < count; i0 += g.B) {
    const int64_t nb = std::min(g.B, count - i0), n = FlatBatchN(g, nb);
    for (int64_t b = 0; b < nb; ++b) FlatFillAvx2(g, x + (i0 + b) * in_sp, xp + b * g.PB);
    int64_t o = 0;
    for (; o + 32 <= n; o += 32) FlatAvgBlock<4>(g, xp, o, z);  // four independent chains: the adds' latency hidden
    for (; o < n; o += 8) FlatAvgBlock<1>(g, xp, o, z);
    for (int64_t b = 0; b < nb; ++b) FlatCopyOut(g, z + b * g.PB, y + (i0 + b) * out_sp, y_end);
  }
}
// MaxPool with the pads at -inf: the first tap, then v > m ? v : m over the later ones in window order. Without NaN
// that is the general loop's result (the earliest of tied zeros; a pad never beats a valid tap, a window of pads
// only gives -inf as the general loop). A plane with a NaN is left to the caller (returned false for it in nan[i]),
// whose paths carry the NaN rules.
__attribute__((target("avx2"))) void FlatMaxAvx2(const FlatGrid &g, const float *x, int64_t in_sp, float *y,
                                                 int64_t out_sp, int64_t count, float *xp, float *z, char *nan) {
  const float *y_end = y + count * out_sp;
  for (int64_t i0 = 0; i0 < count; i0 += g.B) {
    const int64_t nb = std::min(g.B, count - i0), n = FlatBatchN(g, nb);
    for (int64_t b = 0; b < nb; ++b) nan[i0 + b] = FlatFillAvx2(g, x + (i0 + b) * in_sp, xp + b * g.PB);
    int64_t o = 0;
    for (; o + 32 <= n; o += 32) FlatMaxBlock<4>(g, xp, o, z);
    for (; o < n; o += 8) FlatMaxBlock<1>(g, xp, o, z);
    for (int64_t b = 0; b < nb; ++b) FlatCopyOut(g, z + b * g.PB, y + (i0 + b) * out_sp, y_end);
  }
}
// FlatAvgAvx2 with AVX-512 blocks: the same sums and divisions, 16 floats per register (64 outputs per block: four
// independent chains; the last grid positions by FlatAvgBlock, the same arithmetic).
template <int kV>
__attribute__((target("avx512f"), always_inline)) inline void FlatAvgBlock512(const FlatGrid &g, const float *xp,
                                                                            int64_t o, float *z) {
  __m512 a[kV];
  for (int k = 0; k < kV; ++k) a[k] = _mm512_setzero_ps();
  for (int64_t t = 0; t < g.taps; ++t) {
    const float *p = xp + o + g.off[t];
    for (int k = 0; k < kV; ++k) a[k] = _mm512_add_ps(a[k], _mm512_loadu_ps(p + 16 * k));
  }
  for (int k = 0; k < kV; ++k) _mm512_storeu_ps(z + o + 16 * k, _mm512_div_ps(a[k], _mm512_loadu_ps(g.div + o + 16 * k)));
}
__attribute__((target("avx512f"))) void FlatAvgAvx512(const FlatGrid &g, const float *x, int64_t in_sp, float *y,
                                                      int64_t out_sp, int64_t count, float *xp, float *z) {
  const float *y_end = y + count * out_sp;
  for (int64_t i0 = 0; i0 < count; i0 += g.B) {
    const int64_t nb = std::min(g.B, count - i0), n = FlatBatchN(g, nb);
    for (int64_t b = 0; b < nb; ++b) FlatFillAvx2(g, x + (i0 + b) * in_sp, xp + b * g.PB);
    int64_t o = 0;
    for (; o + 64 <= n; o += 64) FlatAvgBlock512<4>(g, xp, o, z);
    for (; o + 16 <= n; o += 16) FlatAvgBlock512<1>(g, xp, o, z);
    for (; o < n; o += 8) FlatAvgBlock<1>(g, xp, o, z);
    for (int64_t b = 0; b < nb; ++b) FlatCopyOut(g, z + b * g.PB, y + (i0 + b) * out_sp, y_end);
  }
}
// AveragePool at stride 2 on a 2-D plane read in place (AVX-512): no copy into FlatAvgAvx2's phase buffers, which
// took ~2/3 of its time on small planes. Per block of 8 outputs of a row, the taps in window order: a tap row outside
// the input reads a zero row, a tap column outside it is a masked-off (zero) lane, and +0.0 added to a sum that
// started at +0.0 leaves it unchanged, as the general loop's skipped taps; the sums in float32 from +0.0, then one
// division by the divisor table's entry, as the general loop. One 16-float load serves the pair of taps (kw, kw + 1):
// its even lanes are tap kw's columns, its odd lanes tap kw + 1's.
struct AvgInPlace {
  int64_t W, OH, OW, KH, KW, PW;
  int64_t OWp;             // OW rounded up to 8
  const uint16_t *mask;    // per block of 8 outputs and even kw: the lanes of the load at kw inside the row
  const int64_t *rowoff;   // per output row and tap row kh: the input row's offset (-1: outside, the zero row)
  const float *div;        // per output row, OWp divisors (1 where nothing is counted: the sum is +0.0 there)
  // Rows of at most 4 outputs (pairs): two output rows per register, lanes [0, OW) row 2q, [OW, 2 OW) row 2q + 1.
  bool pairs;
  uint16_t pmask;          // the lanes of a row's load at column -PW inside the row
  const int32_t *pidx;     // per pair of taps (kw, kw + 1): 16 lanes into the two rows' loads (rows 2q | 2q + 1)
  const int32_t *pdidx;    // a pair's divisors: lanes [0, OW) of row 2q's, [OW, 2 OW) of row 2q + 1's (16 + lane)
};
// (Zero-masked forms with full masks throughout: GCC 12 warns on the plain ones' undefined sources.)
__attribute__((target("avx512f"), always_inline)) inline __m256 Half512(__m512 v, int hi) {
  return _mm256_castpd_ps(hi ? _mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1)
                             : _mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0));
}
// Blocks j0 .. j0 + kB - 1 (block j: output row j / nblk, outputs 8 (j % nblk) + [0, 8)) at once: kB independent
// chains of additions (one chain is latency-bound). kK: a square window's size known at compile time (0: g's).
template <int kK, int kB>
__attribute__((target("avx512f"), always_inline)) inline void AvgInPlaceBlocks(const AvgInPlace &g, const float *x,
                                                                              const float *zero, int64_t j0,
                                                                              float *y) {
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const int64_t nblk = g.OWp / 8;
  const int64_t KH = kK ? kK : g.KH, KW = kK ? kK : g.KW;
  __m256 acc[kB];
  int64_t oh[kB], b[kB];
  for (int k = 0; k < kB; ++k) {
    oh[k] = (j0 + k) / nblk, b[k] = (j0 + k) % nblk;
    acc[k] = _mm256_setzero_ps();
  }
  for (int64_t kh = 0; kh < KH; ++kh) {
    const float *xr[kB];
    const uint16_t *mb[kB];
    for (int k = 0; k < kB; ++k) {
      // Column 16 b - PW (+ kw) of the row: masked-off lanes are never read, so the start may lie before it.
      const int64_t off = g.rowoff[oh[k] * KH + kh];
      xr[k] = (off >= 0 ? x + off : zero) + 16 * b[k] - g.PW;
      mb[k] = g.mask + b[k] * KW;
    }
    for (int64_t kw = 0; kw < KW; kw += 2)
      for (int k = 0; k < kB; ++k) {
        const __m512 v = _mm512_maskz_permutexvar_ps(0xFFFF, split, _mm512_maskz_loadu_ps(mb[k][kw], xr[k] + kw));
        acc[k] = _mm256_add_ps(acc[k], Half512(v, 0));
        if (kw + 1 < KW) acc[k] = _mm256_add_ps(acc[k], Half512(v, 1));
      }
  }
  for (int k = 0; k < kB; ++k) {
    const __m256 r = _mm256_div_ps(acc[k], _mm256_loadu_ps(g.div + oh[k] * g.OWp + 8 * b[k]));
    const int64_t n = std::min<int64_t>(8, g.OW - 8 * b[k]);
    float *yo = y + oh[k] * g.OW + 8 * b[k];
    if (n == 8) _mm256_storeu_ps(yo, r);
    else _mm512_mask_storeu_ps(yo, static_cast<__mmask16>((1u << n) - 1u), _mm512_castps256_ps512(r));
  }
}
// Pairs of output rows at once (AvgInPlace::pairs), the rows of all the planes taken as one sequence (a pair may
// span two planes: no half-empty register at a plane's odd last row). Row i: plane start xs[i], row oh[i] (OH: no
// row, the zero row read, not stored); rows 2k and 2k + 1 make pair k, stored at y + 2 k OW (the output rows of
// consecutive planes are contiguous). Per tap row one load of each row, per pair of taps one two-source permute
// (columns 2 ow + kw of either row).
template <int kK, int kB>
__attribute__((target("avx512f"), always_inline)) inline void AvgInPlacePairs(const AvgInPlace &g,
                                                                             const float *const *xs,
                                                                             const int64_t *oh, const float *zero,
                                                                             float *y) {
  const int64_t KH = kK ? kK : g.KH, KW = kK ? kK : g.KW;
  __m256 acc[kB];
  for (int k = 0; k < kB; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t kh = 0; kh < KH; ++kh) {
    __m512 a[kB], c[kB];
    for (int k = 0; k < kB; ++k) {
      const int64_t oa = g.rowoff[oh[2 * k] * KH + kh], oc = g.rowoff[oh[2 * k + 1] * KH + kh];
      a[k] = _mm512_maskz_loadu_ps(g.pmask, (oa >= 0 ? xs[2 * k] + oa : zero) - g.PW);
      c[k] = _mm512_maskz_loadu_ps(g.pmask, (oc >= 0 ? xs[2 * k + 1] + oc : zero) - g.PW);
    }
    for (int64_t kw = 0; kw < KW; kw += 2) {
      const __m512i idx = _mm512_loadu_si512(g.pidx + 8 * kw);  // (kw / 2) * 16
      for (int k = 0; k < kB; ++k) {
        const __m512 v = _mm512_maskz_permutex2var_ps(0xFFFF, a[k], idx, c[k]);
        acc[k] = _mm256_add_ps(acc[k], Half512(v, 0));
        if (kw + 1 < KW) acc[k] = _mm256_add_ps(acc[k], Half512(v, 1));
      }
    }
  }
  const __m512i didx = _mm512_loadu_si512(g.pdidx);
  for (int k = 0; k < kB; ++k) {
    const __m512 d = _mm512_maskz_permutex2var_ps(0xFFFF, _mm512_maskz_loadu_ps(0xFF, g.div + oh[2 * k] * g.OWp), didx,
                                                  _mm512_maskz_loadu_ps(0xFF, g.div + oh[2 * k + 1] * g.OWp));
    const __m256 v = _mm256_div_ps(acc[k], Half512(d, 0));
    const int64_t n = (oh[2 * k + 1] < g.OH ? 2 : 1) * g.OW;
    _mm512_mask_storeu_ps(y + 2 * k * g.OW, static_cast<__mmask16>((1u << n) - 1u), _mm512_castps256_ps512(v));
  }
}
template <int kK>
__attribute__((target("avx512f"))) void AvgInPlacePairsAll(const AvgInPlace &g, const float *X, int64_t in_sp,
                                                            int64_t count, const float *zero, float *Y) {
  const int64_t rows = count * g.OH;
  int64_t nc = 0, oh = 0;  // of row r
  for (int64_t r = 0; r < rows;) {
    const float *xs[8];
    int64_t ohs[8];
    const int64_t cnt = std::min<int64_t>(8, rows - r);
    for (int64_t i = 0; i < 8; ++i) {
      xs[i] = X, ohs[i] = g.OH;
      if (i >= cnt) continue;
      xs[i] = X + nc * in_sp, ohs[i] = oh;
      if (++oh == g.OH) oh = 0, ++nc;
    }
    float *y = Y + r * g.OW;
    if (cnt == 8) {
      AvgInPlacePairs<kK, 4>(g, xs, ohs, zero, y);
    } else {
      for (int64_t k = 0; 2 * k < cnt; ++k) AvgInPlacePairs<kK, 1>(g, xs + 2 * k, ohs + 2 * k, zero, y + 2 * k * g.OW);
    }
    r += cnt;
  }
}
template <int kK>
__attribute__((target("avx512f"))) void AvgInPlaceBlocksAll(const AvgInPlace &g, const float *x, const float *zero,
                                                             float *y) {
  const int64_t nj = g.OH * (g.OWp / 8);
  int64_t j = 0;
  for (; j + 4 <= nj; j += 4) AvgInPlaceBlocks<kK, 4>(g, x, zero, j, y);
  for (; j < nj; ++j) AvgInPlaceBlocks<kK, 1>(g, x, zero, j, y);
}
template <int kK>
__attribute__((target("avx512f"))) void AvgInPlaceAll(const AvgInPlace &g, const float *X, int64_t in_sp,
                                                       int64_t out_sp, int64_t count, const float *zero, float *Y) {
  if (g.pairs) return AvgInPlacePairsAll<kK>(g, X, in_sp, count, zero, Y);
  for (int64_t nc = 0; nc < count; ++nc) AvgInPlaceBlocksAll<kK>(g, X + nc * in_sp, zero, Y + nc * out_sp);
}
// All the planes: 2x2 and 3x3 windows with their tap loops unrolled (measured ~1.3x faster), others generic.
__attribute__((target("avx512f"))) void AvgInPlaceAvx512(const AvgInPlace &g, const float *X, int64_t in_sp,
                                                          int64_t out_sp, int64_t count, const float *zero, float *Y) {
  if (g.KH == 2 && g.KW == 2) return AvgInPlaceAll<2>(g, X, in_sp, out_sp, count, zero, Y);
  if (g.KH == 3 && g.KW == 3) return AvgInPlaceAll<3>(g, X, in_sp, out_sp, count, zero, Y);
  AvgInPlaceAll<0>(g, X, in_sp, out_sp, count, zero, Y);
}
// AveragePool at stride 1 on a 2-D plane read in place (AVX-512): per block of 16 outputs of a row, the taps in
// window order as one load each (FlatAvgAvx512 copied the plane into a padded grid and its outputs back out, most of
// its time on 64x64 planes). A tap row outside the input reads a zero row, a tap column outside it is a masked-off
// (zero) lane: +0.0 added to a float32 sum that started at +0.0 leaves it unchanged (such a sum is never -0.0), as
// the general loop's skipped taps. Then the general loop's one division; its divisor is the product of a row and a
// column factor (integers whose product is at most 2^24: exact in float32, so the same divisor).
struct AvgS1InPlace {
  int64_t W, OH, OW, KH, KW, PL, nblk;  // nblk: blocks of 16 outputs per row
  const uint16_t *mask;    // per block and tap column kw: the lanes of the load inside the row
  const int64_t *cols;     // the blocks of a row: first the nfull whose masks are all full (plain loads), then
  int64_t nfull;           // the others (at the row's ends: masked loads)
  const int64_t *rowoff;   // per output row and tap row kh: the input row's offset (-1: outside, the zero row)
  const float *rowf;       // per output row: the divisor's row factor (1 where nothing is counted: the sum is +0.0)
  const float *colf;       // per output column (nblk blocks' worth): the column factor (likewise)
};
// Blocks j0 .. j0 + kB - 1 (block j: output row j / nblk, outputs 16 (j % nblk) + [0, 16)): kB independent chains
// of additions (one chain is latency-bound). kK: a square window's size known at compile time (0: g's).
// kSame: every block of the group in the same column block (masked blocks: kK masks, loaded once).
template <int kK, int kB, bool kFull, bool kSame = false>
__attribute__((target("avx512f"), always_inline)) inline void AvgS1Blocks(const AvgS1InPlace &g, const float *x,
                                                                         const float *zero, const int64_t *oh,
                                                                         const int64_t *b, float *y) {
  const int64_t KH = kK ? kK : g.KH, KW = kK ? kK : g.KW;
  __mmask16 same[kSame ? kK : 1];
  if constexpr (kSame)
    for (int kw = 0; kw < kK; ++kw) same[kw] = g.mask[b[0] * KW + kw];
  __m512 acc[kB];
  for (int k = 0; k < kB; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t kh = 0; kh < KH; ++kh) {
    const float *xr[kB];
    const uint16_t *mb[kB];
    for (int k = 0; k < kB; ++k) {
      // Column 16 b - PL of the row: masked-off lanes are never read, so the start may lie before it.
      const int64_t off = g.rowoff[oh[k] * KH + kh];
      xr[k] = (off >= 0 ? x + off : zero) + 16 * b[k] - g.PL;
      mb[k] = g.mask + b[k] * KW;
    }
    for (int64_t kw = 0; kw < KW; ++kw)
      for (int k = 0; k < kB; ++k) {
        const __mmask16 mk = kSame ? same[kSame ? kw : 0] : mb[k][kw];
        const __m512 v = kFull ? _mm512_loadu_ps(xr[k] + kw) : _mm512_maskz_loadu_ps(mk, xr[k] + kw);
        acc[k] = _mm512_add_ps(acc[k], v);
      }
  }
  for (int k = 0; k < kB; ++k) {
    const __m512 d = _mm512_mul_ps(_mm512_set1_ps(g.rowf[oh[k]]), _mm512_loadu_ps(g.colf + 16 * b[k]));
    const __m512 r = _mm512_div_ps(acc[k], d);
    const int64_t n = std::min<int64_t>(16, g.OW - 16 * b[k]);
    float *yo = y + oh[k] * g.OW + 16 * b[k];
    if (n == 16) _mm512_storeu_ps(yo, r);
    else _mm512_mask_storeu_ps(yo, static_cast<__mmask16>((1u << n) - 1u), r);
  }
}
// Blocks of the columns cols[0 .. ncols) of every output row, four at a time (a group may span output rows). The
// full blocks and the masked ones apart: a masked load takes a mask register per load (1.2-1.6x slower on 64x64 to
// 128x128 maps when every group of four was masked, measured).
template <int kK, bool kFull>
__attribute__((target("avx512f"), always_inline)) inline void AvgS1Cols(const AvgS1InPlace &g, const float *x,
                                                                       const float *zero, const int64_t *cols,
                                                                       int64_t ncols, float *y) {
  int64_t oh[4], b[4], r = 0, i = 0;  // the next block's row and index in cols
  for (int64_t left = g.OH * ncols; left > 0;) {
    const int n = left >= 4 ? 4 : 1;
    for (int k = 0; k < n; ++k) {
      oh[k] = r, b[k] = cols[i];
      if (++i == ncols) i = 0, ++r;
    }
    if (n == 4) AvgS1Blocks<kK, 4, kFull>(g, x, zero, oh, b, y);
    else AvgS1Blocks<kK, 1, kFull>(g, x, zero, oh, b, y);
    left -= n;
  }
}
// The masked blocks of a square window known at compile time: per column block, four rows at a time (one set of
// kK masks for the four).
template <int kK>
__attribute__((target("avx512f"), always_inline)) inline void AvgS1MaskedCols(const AvgS1InPlace &g, const float *x,
                                                                             const float *zero, float *y) {
  for (int64_t i = g.nfull; i < g.nblk; ++i) {
    const int64_t b[4] = {g.cols[i], g.cols[i], g.cols[i], g.cols[i]};
    int64_t r = 0;
    for (; r + 4 <= g.OH; r += 4) {
      const int64_t oh[4] = {r, r + 1, r + 2, r + 3};
      AvgS1Blocks<kK, 4, false, true>(g, x, zero, oh, b, y);
    }
    for (; r < g.OH; ++r) AvgS1Blocks<kK, 1, false, true>(g, x, zero, &r, b, y);
  }
}
template <int kK>
__attribute__((target("avx512f"))) void AvgS1Plane(const AvgS1InPlace &g, const float *x, const float *zero,
                                                    float *y) {
  AvgS1Cols<kK, true>(g, x, zero, g.cols, g.nfull, y);
  if constexpr (kK > 0) AvgS1MaskedCols<kK>(g, x, zero, y);
  else AvgS1Cols<kK, false>(g, x, zero, g.cols + g.nfull, g.nblk - g.nfull, y);
}
template <int kK>
__attribute__((target("avx512f"))) void AvgS1All(const AvgS1InPlace &g, const float *X, int64_t in_sp,
                                                  int64_t out_sp, int64_t count, const float *zero, float *Y) {
  for (int64_t nc = 0; nc < count; ++nc) AvgS1Plane<kK>(g, X + nc * in_sp, zero, Y + nc * out_sp);
}
// All the planes: square 2x2 to 7x7 windows with their tap loops unrolled, others generic.
__attribute__((target("avx512f"))) void AvgS1Avx512(const AvgS1InPlace &g, const float *X, int64_t in_sp,
                                                     int64_t out_sp, int64_t count, const float *zero, float *Y) {
  if (g.KH == g.KW) {
    switch (g.KH) {
      case 2: return AvgS1All<2>(g, X, in_sp, out_sp, count, zero, Y);
      case 3: return AvgS1All<3>(g, X, in_sp, out_sp, count, zero, Y);
      case 4: return AvgS1All<4>(g, X, in_sp, out_sp, count, zero, Y);
      case 5: return AvgS1All<5>(g, X, in_sp, out_sp, count, zero, Y);
      case 6: return AvgS1All<6>(g, X, in_sp, out_sp, count, zero, Y);
      case 7: return AvgS1All<7>(g, X, in_sp, out_sp, count, zero, Y);
      default: break;
    }
  }
  AvgS1All<0>(g, X, in_sp, out_sp, count, zero, Y);
}
// MaxPool at stride 1 with a kK x kK window on one plane read in place (AVX-512), separable: per input row the
// maxima of kK adjacent columns for 16 outputs (two masked loads, lanes outside the row -inf as pads, the taps as
// shifts of those), kept in registers for the next kK - 1 output rows; then the maximum of the kK rows'. Each
// step is max(v, m) = v > m ? v : m over the taps in window order (row, then column), so without NaN these are the
// general loop's bits, ties between +-0 included: the earliest tap in the row, then the earliest such row. Planes
// with a NaN are left to the caller. (FlatMaxAvx2 copied the plane into a padded grid and took kK * kK loads per
// output vector: ~1.3x onnxruntime on 32 x 32 planes.)
struct SepMaxInPlace {
  int64_t H, W, OH, OW, PT, PL;
  const uint32_t *mask;  // per block of 16 outputs: the lanes of its two loads (low 16 bits: the first) in the row
};
// max(v, m) = v > m ? v : m (zero-masked with a full mask: see Half512).
__attribute__((target("avx512f"), always_inline)) inline __m512 SepMax512(__m512 v, __m512 m) {
  return _mm512_maskz_max_ps(0xFFFF, v, m);
}
// Lanes i .. i + 15 of the 32 floats a | b.
template <int kS>
__attribute__((target("avx512f"), always_inline)) inline __m512 SepShift32(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_maskz_alignr_epi32(0xFFFF, _mm512_castps_si512(b), _mm512_castps_si512(a), kS));
}
template <int kK>
__attribute__((target("avx512f"), always_inline)) inline __m512 SepMaxRow(__m512 a, __m512 b) {
  __m512 m = a;
  if constexpr (kK > 1) m = SepMax512(SepShift32<1>(a, b), m);
  if constexpr (kK > 2) m = SepMax512(SepShift32<2>(a, b), m);
  if constexpr (kK > 3) m = SepMax512(SepShift32<3>(a, b), m);
  if constexpr (kK > 4) m = SepMax512(SepShift32<4>(a, b), m);
  return m;
}
template <int kK, int kB>
__attribute__((target("avx512f"), always_inline)) inline void SepMaxInRow(const SepMaxInPlace &g, const float *x,
                                                                         int64_t ih, int64_t c0, __m512 *h) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  if (ih < 0 || ih >= g.H) {
    for (int j = 0; j < kB; ++j) h[j] = ninf;
    return;
  }
  // Column c0 + 16 j - PL of the row: masked-off lanes are never read, so the start may lie before it.
  const float *xr = x + ih * g.W + c0 - g.PL;
  for (int j = 0; j < kB; ++j) {
    const uint32_t m = g.mask[c0 / 16 + j];
    const __m512 a = _mm512_mask_loadu_ps(ninf, static_cast<__mmask16>(m), xr + 16 * j);
    const __m512 b = _mm512_mask_loadu_ps(ninf, static_cast<__mmask16>(m >> 16), xr + 16 * j + 16);
    h[j] = SepMaxRow<kK>(a, b);
  }
}
template <int kK, int kB>
__attribute__((target("avx512f"), always_inline)) inline void SepMaxInColumns(const SepMaxInPlace &g,
                                                                             const float *x, int64_t c0, float *y) {
  __m512 h[kK][kB];  // the row maxima of the window's rows, oldest first
  for (int k = 0; k + 1 < kK; ++k) SepMaxInRow<kK, kB>(g, x, k - g.PT, c0, h[k]);
  __mmask16 mask[kB];
  for (int j = 0; j < kB; ++j) {
    const int64_t left = g.OW - (c0 + 16 * j);
    mask[j] = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (left > 0 ? (1u << left) - 1 : 0));
  }
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    SepMaxInRow<kK, kB>(g, x, oh - g.PT + kK - 1, c0, h[kK - 1]);
    for (int j = 0; j < kB; ++j) {
      __m512 m = h[0][j];
      for (int k = 1; k < kK; ++k) m = SepMax512(h[k][j], m);
      _mm512_mask_storeu_ps(y + oh * g.OW + c0 + 16 * j, mask[j], m);
    }
    for (int k = 0; k + 1 < kK; ++k)
      for (int j = 0; j < kB; ++j) h[k][j] = h[k + 1][j];
  }
}
template <int kK>
__attribute__((target("avx512f"))) void SepMaxInPlaneAvx512(const SepMaxInPlace &g, const float *x, float *y) {
  int64_t c0 = 0;
  for (; c0 + 64 <= g.OW; c0 += 64) SepMaxInColumns<kK, 4>(g, x, c0, y);
  for (; c0 + 32 <= g.OW; c0 += 32) SepMaxInColumns<kK, 2>(g, x, c0, y);
  for (; c0 < g.OW; c0 += 16) SepMaxInColumns<kK, 1>(g, x, c0, y);
}
__attribute__((target("avx512f"))) void SepMaxInAvx512(const SepMaxInPlace &g, int64_t k, const float *x, float *y) {
  if (k == 2) SepMaxInPlaneAvx512<2>(g, x, y);
  else if (k == 3) SepMaxInPlaneAvx512<3>(g, x, y);
  else if (k == 4) SepMaxInPlaneAvx512<4>(g, x, y);
  else SepMaxInPlaneAvx512<5>(g, x, y);
}
#else
void MaxRowsAvx2(const PoolRows &r, float *y) { MaxRowsBody(r, y); }
void AvgRowsAvx2(const PoolRows &, float, float *, float *) {}
using DeintRowsFn = void (*)(const PoolRows &, double, float *);
template <bool kMax>
DeintRowsFn DeintRowsFor(int64_t, int64_t) {
  return nullptr;
}
#endif

// y = the elementwise max of `count` rows of n floats, in row order, from -inf: v > m ? v : m (a max instruction), so
// NaN entries are skipped and a +-0 tie keeps the earlier row's zero (strict >). No rows: -inf. Blocks of outputs
// stay in registers over all the rows (one load per row and block, one store).
__attribute__((always_inline)) inline void FoldMaxBlockBody(const float *const *rows, int64_t count, int64_t j,
                                                            int64_t len, float *__restrict y) {
  constexpr int kB = 16;
  float m[kB];
  for (int b = 0; b < kB; ++b) m[b] = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < count; ++i) {
    const float *__restrict v = rows[i] + j;
    if (len == kB) {
      for (int b = 0; b < kB; ++b) m[b] = v[b] > m[b] ? v[b] : m[b];
    } else {
      for (int b = 0; b < len; ++b) m[b] = v[b] > m[b] ? v[b] : m[b];
    }
  }
  for (int b = 0; b < len; ++b) y[j + b] = m[b];
}
void FoldMaxRowsBase(const float *const *rows, int64_t count, int64_t n, float *y) {
  for (int64_t j = 0; j < n; j += 16) FoldMaxBlockBody(rows, count, j, std::min<int64_t>(16, n - j), y);
}
#ifdef TWIN_HAVE_X86
// The same with 32 outputs in four registers (max(v, m) is v > m ? v : m); the row tail scalar.
__attribute__((target("avx2"))) void FoldMaxRowsAvx2(const float *const *rows, int64_t count, int64_t n, float *y) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    for (int64_t i = 0; i < count; ++i) {
      const float *v = rows[i] + j;
      m0 = _mm256_max_ps(_mm256_loadu_ps(v), m0);
      m1 = _mm256_max_ps(_mm256_loadu_ps(v + 8), m1);
      m2 = _mm256_max_ps(_mm256_loadu_ps(v + 16), m2);
      m3 = _mm256_max_ps(_mm256_loadu_ps(v + 24), m3);
    }
    _mm256_storeu_ps(y + j, m0);
    _mm256_storeu_ps(y + j + 8, m1);
    _mm256_storeu_ps(y + j + 16, m2);
    _mm256_storeu_ps(y + j + 24, m3);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 m0 = ninf;
    for (int64_t i = 0; i < count; ++i) m0 = _mm256_max_ps(_mm256_loadu_ps(rows[i] + j), m0);
    _mm256_storeu_ps(y + j, m0);
  }
  if (j < n) FoldMaxBlockBody(rows, count, j, n - j, y);
}
#else
void FoldMaxRowsAvx2(const float *const *rows, int64_t count, int64_t n, float *y) {
  FoldMaxRowsBase(rows, count, n, y);
}
#endif

// y[j] = x[j * s] > y[j] ? x[j * s] : y[j] (NaN in y stays, NaN in x is skipped), per instruction set.
inline __attribute__((always_inline)) void MaxRowBody(const float *x, float *__restrict y, int64_t n, int64_t s) {
  if (s == 1) {
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] > y[j] ? x[j] : y[j];
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const float v = x[j * s];
      y[j] = v > y[j] ? v : y[j];
    }
  }
}
void MaxRowInto(const float *x, float *y, int64_t n, int64_t s) { MaxRowBody(x, y, n, s); }
#ifdef TWIN_HAVE_X86
// One output row of a dilated MaxPool at column stride 1: all taps per block of 16 outputs in registers (a row
// kernel per tap measured ~3x slower: each reloads the row it just stored, masked). rows[i]: input row of tap row
// i; off[c]: column of output 0 for tap column c; masks[blk * kw + c]: the block's outputs tap column c is valid
// for. Taps in the general loop's order (row, then column); each output takes its first valid tap as it is (a NaN
// stays), then a later one where it is greater; none (a window in the pads): -inf.
template <bool kNan>
__attribute__((target("avx512f"))) void DilatedMaxRowAvx512(const float *const *rows, int64_t nrows,
                                                            const int64_t *off, const uint16_t *masks, int64_t kw,
                                                            float *y, int64_t n) {
  // Four blocks at a time: four independent dependency chains. vmaxps(v, m) is v > m ? v : m (m when either is NaN
  // or on a +-0 tie): the general loop's step; from -inf it takes a first tap too, except a NaN one, put back by the
  // mask of first taps that are NaN.
  const int64_t nblk = (n + 15) / 16;
  for (int64_t b0 = 0; b0 < nblk; b0 += 4) {
    __m512 m[4];
    __mmask16 unset[4];
    for (int q = 0; q < 4; ++q) m[q] = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), unset[q] = 0xffff;
    for (int64_t r = 0; r < nrows; ++r) {
      for (int64_t c = 0; c < kw; ++c) {
        for (int q = 0; q < 4; ++q) {
          const int64_t blk = b0 + q;
          if (blk >= nblk) break;
          const __mmask16 t = masks[blk * kw + c];
          const __m512 v = _mm512_maskz_loadu_ps(t, rows[r] + blk * 16 + off[c]);
          m[q] = _mm512_mask_max_ps(m[q], t, v, m[q]);
          if constexpr (kNan) {  // (a plane without NaN needs neither)
            m[q] = _mm512_mask_mov_ps(m[q], _mm512_mask_cmp_ps_mask(static_cast<__mmask16>(t & unset[q]), v, v,
                                                                    _CMP_UNORD_Q), v);
            unset[q] = static_cast<__mmask16>(unset[q] & ~t);
          }
        }
      }
    }
    for (int q = 0; q < 4; ++q) {
      const int64_t j = (b0 + q) * 16;
      if (j >= n) break;
      const __mmask16 all = static_cast<__mmask16>(n - j >= 16 ? 0xffffu : (1u << (n - j)) - 1u);
      _mm512_mask_storeu_ps(y + j, all, m[q]);
    }
  }
}
// (rows are short, ~OW: the tail masked rather than left to a scalar epilogue)
__attribute__((target("avx512f"))) void MaxRowIntoAvx512(const float *x, float *y, int64_t n, int64_t s) {
  if (s != 1) return MaxRowBody(x, y, n, s);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j), m = _mm512_loadu_ps(y + j);
    _mm512_storeu_ps(y + j, _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), v));
  }
  if (j < n) {
    const __mmask16 t = static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(t, x + j), m = _mm512_maskz_loadu_ps(t, y + j);
    _mm512_mask_storeu_ps(y + j, _mm512_mask_cmp_ps_mask(t, v, m, _CMP_GT_OQ), v);
  }
}
__attribute__((target("avx2"))) void MaxRowIntoAvx2(const float *x, float *y, int64_t n, int64_t s) {
  MaxRowBody(x, y, n, s);
}
#endif

#ifdef TWIN_HAVE_X86
// A window over the whole map (MaxPool with kernel_shape == the spatial dims): the plane's maximum, per lane from
// its first value (max_ps keeps the register's value on an equal or NaN tap, the general loop's v > m test). False
// when the plane holds a NaN (the NaN rules differ by path: the caller takes the plane's usual path then).
__attribute__((target("avx2"))) bool WholeMaxAvx2(const float *x, int64_t n, float *out) {
  __m256 m[4], bad = _mm256_setzero_ps();
  for (int b = 0; b < 4; ++b) m[b] = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int b = 0; b < 4; ++b) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * b);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m[b] = _mm256_max_ps(v, m[b]);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    m[0] = _mm256_max_ps(v, m[0]);
  }
  if (_mm256_movemask_ps(bad)) return false;
  const __m256 mm = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mm), _mm256_extractf128_ps(mm, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return false;
    r = x[i] > r ? x[i] : r;
  }
  *out = r;
  return true;
}

// Strided 2-D pools without pads whose eight outputs' windows lie in 32 columns (7 * SW + KW <= 32: kernel ==
// stride 2x2 to 4x4, 3x3 stride 2 ...): per output row, the window rows' 32 columns in two registers and each tap's
// eight columns picked by one permute. Taps in the general loop's order per output; columns past the row are loaded
// as the fill (0: adding +0.0 to a sum from +0.0 changes nothing; -inf: max_ps keeps the register's value), as
// are rows past the map (ceil mode). 2-2.5x faster than RunPlane2d's deinterleaving rows at 3x3 stride 3, measured.
struct StridedPool {
  int64_t H, W, OH, OW, KH, KW, SH, SW;
  const int32_t *idx;  // per tap column kw: 16 lanes, lane j < 8 reading column j * SW + kw of the 32
  const float *div;    // per output row: OW8 divisors (AveragePool)
  int64_t OW8;
  // Per tap column kw, for two half blocks in one register (StridedPairsAvx512): lane j < 8 reads column
  // j * SW + kw of the first block's 16, lane 8 + j the same column of the second block's 16.
  const int32_t *idx2;
};
// One block: 8 outputs of one output row. x: the window's first input (row r0, column c0); rows: the window rows
// inside the map (ceil mode: fewer than KH); left: the columns inside the row from c0 (at most the 32 read); n: the
// outputs stored; div: AveragePool's 8 divisors.
struct StridedBlock {
  const float *x;
  float *y;
  int64_t rows, left, n;
  const float *div;
};
// kB blocks at once: kB independent chains (one chain is latency-bound: 3x3 s3 measured ~2x slower one block at a
// time). A tap row past the map, or a column past the row, loads the fill only: -inf for MaxPool (skipping it keeps
// the maximum), +0.0 for AveragePool (added to a float32 sum that started at +0.0 it changes nothing), so every
// output's taps are still the general loop's, in its order: MaxPool the first tap, then v > m ? v : m; AveragePool
// the float32 sum, then one division.
template <bool kMax, int kB>
__attribute__((target("avx512f"), always_inline)) inline void StridedBlocksAvx512(const StridedPool &p,
                                                                                 const StridedBlock *q) {
  const __m512 fill = _mm512_set1_ps(kMax ? -std::numeric_limits<float>::infinity() : 0.0f);
  __m512 m[kB];
  __mmask16 lo[kB], hi[kB];
  for (int k = 0; k < kB; ++k) {
    const int64_t left = q[k].left;
    lo[k] = static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
    hi[k] = static_cast<__mmask16>(left >= 32 ? 0xffffu : left <= 16 ? 0u : (1u << (left - 16)) - 1u);
    m[k] = _mm512_setzero_ps();  // Max: overwritten by the first tap (rows >= 1); lanes 8..15 unused
  }
  for (int64_t kh = 0; kh < p.KH; ++kh) {
    __m512 a[kB], b[kB];
    for (int k = 0; k < kB; ++k) {
      const bool in = kh < q[k].rows;
      const float *xr = in ? q[k].x + kh * p.W : q[k].x;
      a[k] = _mm512_mask_loadu_ps(fill, in ? lo[k] : 0, xr);
      b[k] = _mm512_mask_loadu_ps(fill, in ? hi[k] : 0, xr + 16);
    }
    for (int64_t kw = 0; kw < p.KW; ++kw) {
      const __m512i idx = _mm512_loadu_si512(p.idx + 16 * kw);
      for (int k = 0; k < kB; ++k) {
        const __m512 v = _mm512_permutex2var_ps(a[k], idx, b[k]);
        if constexpr (kMax) m[k] = kh == 0 && kw == 0 ? v : _mm512_maskz_max_ps(0xFFFF, v, m[k]);
        else m[k] = _mm512_maskz_add_ps(0xFF, m[k], v);
      }
    }
  }
  for (int k = 0; k < kB; ++k) {
    // Eight lanes stored through a 16-lane store (the 8-lane masked store is AVX-512VL).
    const __mmask16 out = static_cast<__mmask16>(q[k].n >= 8 ? 0xffu : (1u << q[k].n) - 1u);
    if constexpr (kMax) _mm512_mask_storeu_ps(q[k].y, out, m[k]);
    else _mm512_mask_storeu_ps(q[k].y, out, _mm512_maskz_div_ps(0xFF, m[k], _mm512_maskz_loadu_ps(0xFF, q[k].div)));
  }
}
// Half blocks (outputs whose windows lie in 16 columns: (n - 1) * SW + KW <= 16, as a row's last few outputs, or
// every block of 2x2 stride 2) two to a register: lanes 0..7 one block's outputs, lanes 8..15 the other's, each
// read from its own 16 columns (one load per block and tap row, one permute over both). The same taps in the same
// order per output as StridedBlocksAvx512, so the same results; half the permutes and maxima / adds. (A row of 9
// outputs at stride 3 spent a whole block on its ninth output: ~1.4x the work of its outputs.)
template <bool kMax, int kB>
__attribute__((target("avx512f"), always_inline)) inline void StridedPairsAvx512(const StridedPool &p,
                                                                                const StridedBlock *q) {
  const __m512 fill = _mm512_set1_ps(kMax ? -std::numeric_limits<float>::infinity() : 0.0f);
  __m512 m[kB];
  __mmask16 ld[2 * kB];
  for (int k = 0; k < 2 * kB; ++k) {
    const int64_t left = q[k].left;
    ld[k] = static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
  }
  for (int k = 0; k < kB; ++k) m[k] = _mm512_setzero_ps();  // Max: overwritten by the first tap (rows >= 1)
  for (int64_t kh = 0; kh < p.KH; ++kh) {
    __m512 a[kB], b[kB];
    for (int k = 0; k < kB; ++k) {
      const StridedBlock &u = q[2 * k], &v = q[2 * k + 1];
      const bool iu = kh < u.rows, iv = kh < v.rows;
      a[k] = _mm512_mask_loadu_ps(fill, iu ? ld[2 * k] : 0, iu ? u.x + kh * p.W : u.x);
      b[k] = _mm512_mask_loadu_ps(fill, iv ? ld[2 * k + 1] : 0, iv ? v.x + kh * p.W : v.x);
    }
    for (int64_t kw = 0; kw < p.KW; ++kw) {
      const __m512i idx = _mm512_loadu_si512(p.idx2 + 16 * kw);
      for (int k = 0; k < kB; ++k) {
        const __m512 t = _mm512_permutex2var_ps(a[k], idx, b[k]);
        if constexpr (kMax) m[k] = kh == 0 && kw == 0 ? t : _mm512_maskz_max_ps(0xFFFF, t, m[k]);
        else m[k] = _mm512_add_ps(m[k], t);
      }
    }
  }
  for (int k = 0; k < kB; ++k) {
    const StridedBlock &u = q[2 * k], &v = q[2 * k + 1];
    const __mmask16 mu = static_cast<__mmask16>((1u << u.n) - 1u), mv = static_cast<__mmask16>((1u << v.n) - 1u);
    __m512 r = m[k];
    if constexpr (!kMax) {  // u's eight divisors in lanes 0..7, v's in lanes 8..15
      const __m512 du = _mm512_maskz_loadu_ps(0xFF, u.div), dv = _mm512_maskz_loadu_ps(0xFF, v.div);
      const __m512 d = _mm512_maskz_shuffle_f32x4(0xFFFF, du, dv, _MM_SHUFFLE(1, 0, 1, 0));
      r = _mm512_maskz_div_ps(static_cast<__mmask16>(mu | (mv << 8)), r, d);
    }
    _mm512_mask_storeu_ps(u.y, mu, r);
    // v's lanes 8.. down to 0.. (the maskz form: the plain shuffle's undefined source trips GCC's warning)
    _mm512_mask_storeu_ps(v.y, mv, _mm512_maskz_shuffle_f32x4(0xFF, r, r, _MM_SHUFFLE(3, 2, 3, 2)));
  }
}
// All the planes' blocks as one sequence, four at a time (a group may span output rows and planes); half blocks
// paired (StridedPairsAvx512), eight at a time.
template <bool kMax>
__attribute__((target("avx512f"))) void StridedPoolAvx512(const StridedPool &p, const float *X, int64_t in_sp,
                                                         int64_t out_sp, int64_t count, float *Y) {
  StridedBlock q[4], h[8];
  int nq = 0, nh = 0;
  for (int64_t nc = 0; nc < count; ++nc) {
    const float *x = X + nc * in_sp;
    float *y = Y + nc * out_sp;
    for (int64_t oh = 0; oh < p.OH; ++oh) {
      const int64_t r0 = oh * p.SH, rows = std::min(p.KH, p.H - r0);
      for (int64_t j = 0; j < p.OW; j += 8) {
        const int64_t c0 = j * p.SW, n = std::min<int64_t>(p.OW - j, 8);
        const StridedBlock blk{x + r0 * p.W + c0, y + oh * p.OW + j, rows, std::min<int64_t>(p.W - c0, 32), n,
                               kMax ? nullptr : p.div + oh * p.OW8 + j};
        if ((n - 1) * p.SW + p.KW <= 16) {
          h[nh++] = blk;
          if (nh == 8) StridedPairsAvx512<kMax, 4>(p, h), nh = 0;
          continue;
        }
        q[nq++] = blk;
        if (nq == 4) StridedBlocksAvx512<kMax, 4>(p, q), nq = 0;
      }
    }
  }
  for (int i = 0; i < nq; ++i) StridedBlocksAvx512<kMax, 1>(p, q + i);
  int i = 0;
  for (; i + 1 < nh; i += 2) StridedPairsAvx512<kMax, 1>(p, h + i);
  if (i < nh) StridedBlocksAvx512<kMax, 1>(p, h + i);
}
#endif

constexpr int64_t kFlatMaxW = 64;          // 2-D pools on rows up to this long: FlatAvgAvx2 / FlatMaxAvx2
constexpr int64_t kFlatMaxGrid = 1 << 16;  // ... and planes up to this many grid positions
constexpr int64_t kFlatBatchGrid = 1024;   // ... smaller planes stacked up to this many (the buffer stays in L1)

template <class S, bool kMax>
class PoolKernel : public Kernel {
  using C = typename Num<S>::C;

 public:
  PoolKernel(const Window &w, int64_t NC, int64_t C, bool count_pad, bool col_major, bool indices)
      : w_(w), NC_(NC), C_(C), count_pad_(count_pad), col_major_(col_major), indices_(indices) {
    // Tap ranges per output position, per dim (valid input taps, and taps inside input + pads).
    for (size_t i = 0; i < kMaxSpatial; ++i) {
      for (int64_t o = 0; o < w_.out[i]; ++o) {
        const int64_t st = o * w_.s[i] - w_.pb[i];
        int64_t a, b, pa, pb;
        TapRange(st, w_.k[i], w_.d[i], 0, w_.in[i], &a, &b);
        TapRange(st, w_.k[i], w_.d[i], -w_.pb[i], w_.in[i] + w_.pe[i], &pa, &pb);
        taps_[i].push_back({st, a, b, pb - pa});
      }
    }
    // onnx.reference's NaN rule: with every stride and dilation 1 (its CommonPool) NaN taps are skipped (a window
    // of NaN only: -inf here, as a window wholly in the pads); otherwise (its _max_pool loop) a window's first valid
    // tap is kept, NaN too, and a later tap taken only where it is larger.
    skip_nan_ = true;
    for (size_t i = 0; i < kMaxSpatial; ++i) skip_nan_ = skip_nan_ && w_.s[i] == 1 && w_.d[i] == 1;
    simple_ = w_.in[0] == 1 && w_.k[0] == 1;
    for (size_t i = 0; i < kMaxSpatial; ++i) simple_ = simple_ && w_.pb[i] == 0 && w_.pe[i] == 0 && w_.d[i] == 1;
    for (size_t i = 1; i < kMaxSpatial; ++i)
      simple_ = simple_ && (w_.out[i] - 1) * w_.s[i] + w_.k[i] <= w_.in[i];  // no ceil-mode overhang
    // 2-D float windows without dilation: interior columns without per-tap bounds (RunPlane2d).
    plane2d_ = std::is_same<S, float>::value && w_.in[0] == 1 && w_.k[0] == 1 && w_.d[1] == 1 && w_.d[2] == 1;
#ifdef TWIN_HAVE_X86
    avx2_ = vmath::ActiveIsa() != vmath::Isa::kBaseline;
    if (avx2_ && plane2d_) deint_ = DeintRowsFor<kMax>(w_.s[2], w_.k[2]);
#endif
    inner_lo_ = inner_hi_ = 0;
    for (int64_t o = 0; o < w_.out[2]; ++o) {
      if (taps_[2][o].lo != 0 || taps_[2][o].hi != w_.k[2]) continue;
      if (inner_hi_ == inner_lo_) inner_lo_ = o;
      inner_hi_ = o + 1;
    }
#ifdef TWIN_HAVE_X86
    const bool two_by_two = simple_ && w_.k[1] == 2 && w_.k[2] == 2 && w_.s[1] == 2 && w_.s[2] == 2;
    pool2x2_ = two_by_two && CpuHasAvx512();
    pool2x2_avx2_ = two_by_two && !pool2x2_ && vmath::ActiveIsa() != vmath::Isa::kBaseline;
#endif
    sep_max_ = kMax && std::is_same<S, float>::value && !plane2d_;
    for (size_t i = 0; i < kMaxSpatial; ++i) sep_max_ = sep_max_ && w_.d[i] == 1;
    // 2-D at stride 1 with pads: RunSeparableMax too (about 2x RunPlane2d's tap-by-tap rows at 3x3; NaN taps
    // skipped, the stride-1 rule).
    sep_plane_ = kMax && plane2d_ && !simple_ && w_.s[1] == 1 && w_.s[2] == 1;
    if (sep_plane_) sep_max_ = true;
    // Dilated 2-D / 1-D float MaxPool: RunDilatedMax's row loops (the general loop measured 55x onnxruntime at 3x3
    // dilation 2 on 16x64x64). Per kernel column, the outputs whose window has that column inside the input.
    dil_max_ = kMax && std::is_same<S, float>::value && w_.in[0] == 1 && w_.k[0] == 1 && (w_.d[1] > 1 || w_.d[2] > 1);
    if (dil_max_) {
#ifdef TWIN_HAVE_X86
      if (vmath::ActiveIsa() == vmath::Isa::kAvx512) dil_row_ = MaxRowIntoAvx512;
      else if (vmath::ActiveIsa() == vmath::Isa::kAvx2) dil_row_ = MaxRowIntoAvx2;
#endif
      for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
        int64_t a = w_.out[2], b = 0;
        for (int64_t ow = 0; ow < w_.out[2]; ++ow)
          if (taps_[2][ow].lo <= kw && kw < taps_[2][ow].hi) a = std::min(a, ow), b = ow + 1;
        dil_cols_.push_back({a, std::max(a, b)});
        dil_off_.push_back(kw * w_.d[2] - w_.pb[2]);
      }
      for (int64_t j = 0; j < w_.out[2]; j += 16)
        for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
          uint16_t t = 0;
          for (int64_t l = 0; l < 16 && j + l < w_.out[2]; ++l)
            if (j + l >= dil_cols_[static_cast<size_t>(kw)].first && j + l < dil_cols_[static_cast<size_t>(kw)].second)
              t = static_cast<uint16_t>(t | (1u << l));
          dil_mask_.push_back(t);
        }
#ifdef TWIN_HAVE_X86
      dil512_ = vmath::ActiveIsa() == vmath::Isa::kAvx512 && w_.s[2] == 1 && w_.k[1] <= 16;
      if (dil512_ && w_.k[1] > 1) {  // RunDilatedMax's separable form: the input rows some window reads
        dil_used_.assign(static_cast<size_t>(w_.in[1]), 0);
        for (int64_t oh = 0; oh < w_.out[1]; ++oh)
          for (int64_t kh = taps_[1][oh].lo; kh < taps_[1][oh].hi; ++kh)
            dil_used_[static_cast<size_t>(taps_[1][oh].start + kh * w_.d[1])] = 1;
        dil_h_.resize(static_cast<size_t>(w_.in[1] * w_.out[2]));
        dil_rows_.resize(static_cast<size_t>(w_.k[1]));
      }
#endif
    }
#ifdef TWIN_HAVE_X86
    // A window over the whole map, without pads and dilation (the TorchScript exporter's spelling of a global
    // pool): one output per plane, at any stride. The grid and row kernels below do per-output work sized for
    // many outputs (4.7x onnxruntime on 3x64x16x16, measured).
    whole_ = std::is_same<S, float>::value && vmath::ActiveIsa() != vmath::Isa::kBaseline;
    for (size_t i = 0; i < kMaxSpatial; ++i)
      whole_ = whole_ && w_.k[i] == w_.in[i] && w_.pb[i] == 0 && w_.pe[i] == 0 && w_.d[i] == 1 && w_.out[i] == 1;
#endif
#ifdef TWIN_HAVE_X86
    // StridedPoolAvx512: at column strides 2..4 without pads or dilation (ceil-mode
    // overhang allowed), every window with its first tap inside. MaxPool from column stride 3 (its stride-2 row kernels are faster).
    if (plane2d_ && vmath::ActiveIsa() == vmath::Isa::kAvx512 && w_.s[2] >= (kMax ? 3 : 2) &&
        7 * w_.s[2] + w_.k[2] <= 32 && w_.pb[1] == 0 && w_.pb[2] == 0 && w_.out[1] > 0 && w_.out[2] > 0) {
      bool firsts = true;
      for (size_t i = 1; i < kMaxSpatial; ++i)
        for (const Tap &t : taps_[i]) firsts = firsts && t.lo == 0 && t.hi > 0;
      if (firsts) {
        const int64_t OW8 = (w_.out[2] + 7) / 8 * 8;
        str_idx_.assign(static_cast<size_t>(16 * w_.k[2]), 0);
        for (int64_t kw = 0; kw < w_.k[2]; ++kw)
          for (int64_t l = 0; l < 8; ++l) str_idx_[static_cast<size_t>(16 * kw + l)] = static_cast<int32_t>(l * w_.s[2] + kw);
        if constexpr (!kMax) {
          str_div_.assign(static_cast<size_t>(w_.out[1] * OW8), 1.0f);
          for (int64_t oh = 0; oh < w_.out[1]; ++oh)
            for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
              const Tap &t1 = taps_[1][oh], &t2 = taps_[2][ow];
              const int64_t d = count_pad_ ? t1.padded * t2.padded : (t1.hi - t1.lo) * (t2.hi - t2.lo);
              str_div_[static_cast<size_t>(oh * OW8 + ow)] = static_cast<float>(d);
            }
        }
        str_idx2_.assign(static_cast<size_t>(16 * w_.k[2]), 0);
        for (int64_t kw = 0; kw < w_.k[2]; ++kw)
          for (int64_t l = 0; l < 16; ++l)  // lanes past a half block's outputs read any column (not stored)
            str_idx2_[static_cast<size_t>(16 * kw + l)] =
                static_cast<int32_t>((l / 8 * 16 + l % 8 * w_.s[2] + kw) & 31);
        str_ = StridedPool{w_.in[1], w_.in[2], w_.out[1], w_.out[2], w_.k[1], w_.k[2], w_.s[1], w_.s[2],
                           str_idx_.data(), str_div_.data(), OW8, str_idx2_.data()};
        strided_ = true;
      }
    }
#endif
#ifdef TWIN_HAVE_X86
    // Short rows: the whole-plane kernels (RunPlane2d's per-row work dominates there: 2-4x slower on 7x7 to 64x64
    // at stride 1, 2-3x at stride 2 on 7x7 to 28x28). MaxPool at stride 2 keeps its row kernels (MaxRowsAvx2,
    // MaxPool2x2Avx2/512), faster there, measured.
    const int64_t W = w_.in[2], OH = w_.out[1], OW = w_.out[2], SH = w_.s[1], SW = w_.s[2];
    const int64_t KH = w_.k[1], KW = w_.k[2];
    const int64_t Hq = OH - 1 + (KH + SH - 1) / SH, Wq = OW - 1 + (KW + SW - 1) / SW;  // rows and columns read
    // Planes stacked only where the rows past OH (computed, not outputs) are few.
    const int64_t PB = Hq * Wq;
    const int64_t B = PB > 2 * OH * Wq ? 1 : std::max<int64_t>(1, std::min<int64_t>(NC_, kFlatBatchGrid / PB));
    const bool flat_max = SH == 1 && SW == 1;
    // AveragePool at column strides 3..8 keeps RunPlane2d's DeintRowsAvx2 rows: the grid's copy-in is scalar there
    // (one store per input value): 2.5-3.5x slower at 3x3 stride 3 on 14x14 to 57x55 planes, measured.
    const bool flat_avg = !kMax && !deint_;
    // AveragePool at stride 1 on longer rows too (the separable double sums that took them are gone: RunPlane2d's
    // row passes measured 2.7x onnxruntime at 3x3 on 64x128x128).
    const bool flat_w = W <= kFlatMaxW || (!kMax && SH == 1 && SW == 1);
    if (plane2d_ && avx2_ && OH > 0 && OW > 0 && flat_w && PB <= kFlatMaxGrid && (flat_avg || flat_max)) {
      flat_off_.clear();
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw)
          flat_off_.push_back(((kh % SH) * SW + kw % SW) * B * PB + (kh / SH) * Wq + kw / SW);
      flat_ = FlatGrid{w_.in[1], W, w_.pb[1], w_.pb[2], SH, SW, Hq, Wq, PB, B, B * PB, 0, OH, OW, flat_off_.data(),
                       KH * KW, nullptr};
      const int64_t n = flat_.n = FlatBatchN(flat_, B);
      // Reads run to the last grid vector's last tap; the pads keep the constant written here.
      const int64_t max_off = *std::max_element(flat_off_.begin(), flat_off_.end());  // not the last tap's
      const size_t size = static_cast<size_t>(std::max(SH * SW * B * PB, n + max_off));
      if constexpr (kMax) {
        flat_xpf_.assign(size, -std::numeric_limits<float>::infinity());
        flat_nan_.resize(static_cast<size_t>(NC_));
      } else {
        flat_div_.assign(static_cast<size_t>(n), 1.0f);
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const Tap &t1 = taps_[1][oh], &t2 = taps_[2][ow];
            const int64_t d = count_pad_ ? t1.padded * t2.padded : (t1.hi - t1.lo) * (t2.hi - t2.lo);
            // A window wholly in the pads (no valid tap, not counting them) averages to 0, as the general loop's.
            for (int64_t b = 0; b < B; ++b)  // every plane of a batch
              flat_div_[static_cast<size_t>(b * PB + oh * Wq + ow)] = d ? static_cast<float>(d) : 1.0f;
          }
        flat_.div = flat_div_.data();
        flat_xp_.assign(size, 0.0f);
      }
      // The copy out reads whole vectors: up to 7 past the last row.
      flat_z_.resize(static_cast<size_t>(n + 8));
      flat_on_ = true;
    }
    // AveragePool on AVX-512 where the whole-plane kernel is taken: at stride 2 the plane read in place
    // (AvgInPlaceAvx512, 1.2-2.0x faster than FlatAvgAvx2 on 7x7 to 28x28 planes, measured), otherwise the same
    // grid with 16-float blocks (FlatAvgAvx512). Same float32 sums in the same order and the same divisions, so the
    // same bits. (Separable sums, rows then columns, are not the window order in float32: no such path.)
    if (!kMax && flat_on_ && vmath::ActiveIsa() == vmath::Isa::kAvx512) flat512_ = true;
    // MaxPool, stride 1, square 2x2 to 5x5 windows on AVX-512: the plane read in place, separable (SepMaxInAvx512).
    if (kMax && plane2d_ && vmath::ActiveIsa() == vmath::Isa::kAvx512 && SH == 1 && SW == 1 && KH == KW &&
        KH >= 2 && KH <= 5 && OH > 0 && OW > 0) {
      const int64_t OW16 = (OW + 15) / 16 * 16;
      smax_mask_.assign(static_cast<size_t>(OW16 / 16), 0);
      for (int64_t b = 0; b < OW16 / 16; ++b)
        for (int64_t l = 0; l < 16 + KW - 1; ++l) {
          const int64_t col = 16 * b - w_.pb[2] + l;
          if (col >= 0 && col < W) smax_mask_[static_cast<size_t>(b)] |= 1u << l;
        }
      smax_ = SepMaxInPlace{w_.in[1], W, OH, OW, w_.pb[1], w_.pb[2], smax_mask_.data()};
      smax_k_ = KH;
    }
    // (Any row length: with float32 sums the in-place blocks beat RunPlane2d's strided row loops on long rows too.)
    if (!kMax && plane2d_ && vmath::ActiveIsa() == vmath::Isa::kAvx512 && SW == 2 && OH > 0 && OW > 0) {
      const int64_t OWp = (OW + 7) / 8 * 8;
      in_mask_.assign(static_cast<size_t>(OWp / 8 * KW), 0);
      for (int64_t b = 0; b < OWp / 8; ++b)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t start = 16 * b - w_.pb[2] + kw;  // the load's first column (16 lanes)
          uint32_t m = 0;
          for (int64_t j = 0; j < 16; ++j)
            if (start + j >= 0 && start + j < W) m |= 1u << j;
          in_mask_[static_cast<size_t>(b * KW + kw)] = static_cast<uint16_t>(m);
        }
      in_rowoff_.assign(static_cast<size_t>((OH + 1) * KH), -1);  // row OH: a pair's missing second row
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * SH - w_.pb[1] + kh;
          in_rowoff_[static_cast<size_t>(oh * KH + kh)] = ih >= 0 && ih < w_.in[1] ? ih * W : -1;
        }
      in_div_.assign(static_cast<size_t>((OH + 1) * OWp), 1.0f);  // row OH: a pair's missing second row
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Tap &t1 = taps_[1][oh], &t2 = taps_[2][ow];
          const int64_t d = count_pad_ ? t1.padded * t2.padded : (t1.hi - t1.lo) * (t2.hi - t2.lo);
          if (d) in_div_[static_cast<size_t>(oh * OWp + ow)] = static_cast<float>(d);
        }
      in_zero_.assign(static_cast<size_t>(W), 0.0f);
      in_ = AvgInPlace{W, OH, OW, KH, KW, w_.pb[2], OWp, in_mask_.data(), in_rowoff_.data(), in_div_.data(),
                       false, 0, nullptr, nullptr};
      // Rows of at most 4 outputs whose taps lie in the 16 lanes from column -PW: two output rows per register
      // (measured ~1.5x faster on 7x7 planes than a half-empty block per row).
      in_.pairs = OW <= 4 && 2 * (OW - 1) + KW <= 16;
      if (in_.pairs) {
        for (int64_t j = 0; j < 16; ++j)
          if (j - w_.pb[2] >= 0 && j - w_.pb[2] < W) in_.pmask = static_cast<uint16_t>(in_.pmask | (1u << j));
        in_pidx_.assign(static_cast<size_t>((KW + 1) / 2 * 16), 0);
        for (int64_t kw = 0; kw < KW; kw += 2)
          for (int64_t l = 0; l < 16; ++l) {
            const int64_t lane = l % 8, tap = kw + l / 8;  // high half: tap kw + 1
            if (lane >= 2 * OW) continue;
            in_pidx_[static_cast<size_t>(kw / 2 * 16 + l)] =
                static_cast<int32_t>((lane >= OW ? 16 : 0) + 2 * (lane % OW) + std::min(tap, KW - 1));
          }
        in_pdidx_.assign(16, 0);
        for (int64_t lane = 0; lane < 2 * OW; ++lane)
          in_pdidx_[static_cast<size_t>(lane)] = static_cast<int32_t>(lane < OW ? lane : 16 + lane - OW);
        in_.pidx = in_pidx_.data();
        in_.pdidx = in_pdidx_.data();
      }
      in_place_ = true;
      flat_on_ = false;
      std::vector<float>().swap(flat_xp_);
      std::vector<float>().swap(flat_div_);
      std::vector<float>().swap(flat_z_);
    }
    // AveragePool at stride 1 on AVX-512: the plane read in place (AvgS1Avx512), no copy into the grid and out of
    // it. Taken where at least half a row's blocks need no masks, the row is one block, or the window is square
    // (its masked blocks then go four rows at a time under one set of masks: AvgS1MaskedCols; 3x3 on 28x28 ~1.1x
    // faster than the grid, measured), and for windows over 3x3 only on rows over 64. Against FlatAvgAvx512, measured: on 64x128x128 3x3 1.6-1.9x, 2x2 2-2.9x, 5x5 1.5-10x,
    // 7x7 2.3-7x faster; on 16x64x64 3x3 1.0-1.2x, 2x2 1.3x faster, 5x5 / 7x7 1.0-1.2x slower (left to the grid);
    // 3x3 on 14x14 1.15x faster, on 57x55 1.03-1.08x slower; 3x3 on 28x28 (every block masked) ~1.05x slower (left
    // to the grid). (The same blocks with AVX2 measured 1.1-1.5x slower than FlatAvgAvx2: no such path.)
    if (!kMax && plane2d_ && vmath::ActiveIsa() == vmath::Isa::kAvx512 && SH == 1 && SW == 1 && OH > 0 && OW > 0 &&
        (KH * KW <= 9 || W > kFlatMaxW)) {
      constexpr int64_t V = 16;  // outputs per block
      const int64_t nblk = (OW + V - 1) / V;
      s1_mask_.assign(static_cast<size_t>(nblk * KW), 0);
      std::vector<char> full(static_cast<size_t>(nblk), 1);
      for (int64_t b = 0; b < nblk; ++b)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t start = V * b - w_.pb[2] + kw;  // the load's first column
          uint32_t m = 0;
          for (int64_t j = 0; j < V; ++j)
            if (start + j >= 0 && start + j < W) m |= 1u << j;
          s1_mask_[static_cast<size_t>(b * KW + kw)] = static_cast<uint16_t>(m);
          if (m != (1u << V) - 1u) full[static_cast<size_t>(b)] = 0;
        }
      s1_cols_.clear();
      for (int f = 1; f >= 0; --f)
        for (int64_t b = 0; b < nblk; ++b)
          if (full[static_cast<size_t>(b)] == f) s1_cols_.push_back(b);
      const int64_t nfull = std::count(full.begin(), full.end(), 1);
      if (nblk == 1 || 2 * nfull >= nblk || (KH == KW && KH <= 7)) {
        s1_rowoff_.assign(static_cast<size_t>(OH * KH), -1);
        s1_rowf_.assign(static_cast<size_t>(OH), 1.0f);
        for (int64_t oh = 0; oh < OH; ++oh) {
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh - w_.pb[1] + kh;
            s1_rowoff_[static_cast<size_t>(oh * KH + kh)] = ih >= 0 && ih < w_.in[1] ? ih * W : -1;
          }
          const Tap &t = taps_[1][oh];
          const int64_t f = count_pad_ ? t.padded : t.hi - t.lo;
          if (f) s1_rowf_[static_cast<size_t>(oh)] = static_cast<float>(f);
        }
        s1_colf_.assign(static_cast<size_t>(nblk * V), 1.0f);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Tap &t = taps_[2][ow];
          const int64_t f = count_pad_ ? t.padded : t.hi - t.lo;
          if (f) s1_colf_[static_cast<size_t>(ow)] = static_cast<float>(f);
        }
        in_zero_.assign(static_cast<size_t>(W), 0.0f);
        s1_ = AvgS1InPlace{W, OH, OW, KH, KW, w_.pb[2], nblk, s1_mask_.data(), s1_cols_.data(), nfull,
                           s1_rowoff_.data(), s1_rowf_.data(), s1_colf_.data()};
        s1_on_ = true;
        flat_on_ = false;
        std::vector<float>().swap(flat_xp_);
        std::vector<float>().swap(flat_div_);
        std::vector<float>().swap(flat_z_);
      }
    }
#endif
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *X = static_cast<const S *>(in[0]);
    S *Y = static_cast<S *>(out[0]);
    int64_t *I = kMax && indices_ ? static_cast<int64_t *>(out[1]) : nullptr;
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2];
    const int64_t out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    (void)C_;
    if constexpr (std::is_same<S, float>::value) {
#ifdef TWIN_HAVE_X86
      if (!I && whole_) {
        for (int64_t nc = 0; nc < NC_; ++nc) {
          const float *x = X + nc * in_sp;
          if constexpr (kMax) {
            // A NaN plane keeps its path's NaN rule; a zero maximum the sign of the first zero in window order.
            float m;
            if (WholeMaxAvx2(x, in_sp, &m) && m != 0.0f) Y[nc] = m;
            else MaxPlane(x, Y + nc);
          } else {
            // The window order's float32 sum (row by row: the plane in memory order), then the one division.
            float sum = 0.0f;
            for (int64_t i = 0; i < in_sp; ++i) sum += x[i];
            Y[nc] = sum / static_cast<float>(in_sp);
          }
        }
        return true;
      }
      // Before the whole-plane grids (which AveragePool takes at stride 2 on rows up to 64), after the whole map.
      if (!I && strided_) {
        StridedPoolAvx512<kMax>(str_, X, in_sp, out_sp, NC_, Y);
        return true;
      }
#endif
    }
    if constexpr (kMax && std::is_same<S, float>::value) {
#ifdef TWIN_HAVE_X86
      if (!I && smax_k_) {  // planes with a NaN: the paths below, which carry the NaN rules
        for (int64_t nc = 0; nc < NC_; ++nc) {
          const float *x = X + nc * in_sp;
          if (vmath::AnyNan(x, in_sp)) MaxPlane(x, Y + nc * out_sp);
          else SepMaxInAvx512(smax_, smax_k_, x, Y + nc * out_sp);
        }
        return true;
      }
      if (!I && flat_on_) {  // planes with a NaN: the paths below, which carry the NaN rules
        FlatMaxAvx2(flat_, X, in_sp, Y, out_sp, NC_, flat_xpf_.data(), flat_z_.data(), flat_nan_.data());
        for (int64_t nc = 0; nc < NC_; ++nc)
          if (flat_nan_[static_cast<size_t>(nc)]) MaxPlane(X + nc * in_sp, Y + nc * out_sp);
        return true;
      }
      if (!I && pool2x2_) {
        for (int64_t nc = 0; nc < NC_; ++nc)
          MaxPool2x2Avx512(X + nc * in_sp, Y + nc * out_sp, w_.out[1], w_.out[2], w_.in[2], 2 * w_.in[2]);
        return true;
      }
      if (!I && pool2x2_avx2_) {  // 1.8x (16x64x64) and 2.6x (64x128x128) faster than RunSimpleMax, measured
        for (int64_t nc = 0; nc < NC_; ++nc)
          MaxPool2x2Avx2(X + nc * in_sp, Y + nc * out_sp, w_.out[1], w_.out[2], w_.in[2], 2 * w_.in[2]);
        return true;
      }
#endif
      if (!I && dil_max_) {
        for (int64_t nc = 0; nc < NC_; ++nc) RunDilatedMax(X + nc * in_sp, Y + nc * out_sp);
        return true;
      }
      if (!I && sep_max_) {  // 3-D: 23x-46x faster than the general loop at 1M elements, measured
        for (int64_t nc = 0; nc < NC_; ++nc) RunSeparableMax(X + nc * in_sp, Y + nc * out_sp);
        return true;
      }
      // Strides > 1 take RunPlane2d: onnx.reference keeps a NaN first tap there, as the general loop does.
      if (!I && simple_ && w_.s[1] == 1 && w_.s[2] == 1) return RunSimpleMax(X, Y, in_sp, out_sp, NC_);
    }
    if constexpr (!kMax && std::is_same<S, float>::value) {
#ifdef TWIN_HAVE_X86
      if (in_place_) {
        AvgInPlaceAvx512(in_, X, in_sp, out_sp, NC_, in_zero_.data(), Y);
        return true;
      }
      if (s1_on_) {
        AvgS1Avx512(s1_, X, in_sp, out_sp, NC_, in_zero_.data(), Y);
        return true;
      }
      if (flat_on_ && flat512_) {
        FlatAvgAvx512(flat_, X, in_sp, Y, out_sp, NC_, flat_xp_.data(), flat_z_.data());
        return true;
      }
      if (flat_on_) {
        FlatAvgAvx2(flat_, X, in_sp, Y, out_sp, NC_, flat_xp_.data(), flat_z_.data());
        return true;
      }
#endif
    }
    if constexpr (std::is_same<S, float>::value) {
      if (!I && plane2d_) {
        for (int64_t nc = 0; nc < NC_; ++nc) RunPlane2d(X + nc * in_sp, Y + nc * out_sp);
        return true;
      }
    }
    for (int64_t nc = 0; nc < NC_; ++nc) {
      const S *x = X + nc * in_sp;
      S *y = Y + nc * out_sp;
      int64_t oi = 0;
      for (const Tap &t0 : taps_[0]) {
        for (const Tap &t1 : taps_[1]) {
          for (const Tap &t2 : taps_[2]) {
            const int64_t s0 = t0.start, s1 = t1.start, s2 = t2.start;
            if constexpr (kMax) {
              C best = std::numeric_limits<C>::lowest();
              if constexpr (std::is_floating_point<C>::value) best = -std::numeric_limits<C>::infinity();
              int64_t best_i = -1;
              for (int64_t k0 = t0.lo; k0 < t0.hi; ++k0)
                for (int64_t k1 = t1.lo; k1 < t1.hi; ++k1) {
                  const int64_t row = ((s0 + k0 * w_.d[0]) * w_.in[1] + s1 + k1 * w_.d[1]) * w_.in[2] + s2;
                  for (int64_t k2 = t2.lo; k2 < t2.hi; ++k2) {
                    const int64_t idx = row + k2 * w_.d[2];
                    const C v = Num<S>::Load(x[idx]);
                    // (skip_nan_: the first tap that is not NaN starts the window)
                    bool first = best_i < 0;
                    if constexpr (std::is_floating_point<C>::value) first = first && !(skip_nan_ && std::isnan(v));
                    if (first || (best_i >= 0 && v > best)) {
                      best = v;
                      best_i = idx;
                    }
                  }
                }
              y[oi] = Num<S>::Store(best);
              if (I) {
                int64_t flat = best_i < 0 ? 0 : best_i;
                if (col_major_ && best_i >= 0) {
                  const int64_t i2 = best_i % w_.in[2], r = best_i / w_.in[2];
                  const int64_t i1 = r % w_.in[1], i0 = r / w_.in[1];
                  flat = (i2 * w_.in[1] + i1) * w_.in[0] + i0;
                }
                I[nc * out_sp + oi] = nc * in_sp + flat;
              }
            } else {
              // float: the float32 sum in window order (every float path's arithmetic); double and the half types
              // (which have their own loop here) in double.
              using A = typename std::conditional<std::is_same<S, float>::value, float, double>::type;
              A acc = 0;
              for (int64_t k0 = t0.lo; k0 < t0.hi; ++k0)
                for (int64_t k1 = t1.lo; k1 < t1.hi; ++k1) {
                  const int64_t row = ((s0 + k0 * w_.d[0]) * w_.in[1] + s1 + k1 * w_.d[1]) * w_.in[2] + s2;
                  for (int64_t k2 = t2.lo; k2 < t2.hi; ++k2) acc += static_cast<A>(Num<S>::Load(x[row + k2 * w_.d[2]]));
                }
              const int64_t div = count_pad_ ? t0.padded * t1.padded * t2.padded
                                             : (t0.hi - t0.lo) * (t1.hi - t1.lo) * (t2.hi - t2.lo);
              y[oi] = Num<S>::Store(static_cast<C>(div ? acc / static_cast<A>(div) : A(0)));
            }
            ++oi;
          }
        }
      }
    }
    return true;
  }

 private:
  // Windows always inside the input (no pads, no dilation, single leading dim), stride 1: row-wise running max from
  // -inf, so a NaN tap is skipped (onnx.reference ignores NaN at stride 1).
  bool RunSimpleMax(const float *X, float *Y, int64_t in_sp, int64_t out_sp, int64_t count) {
    const int64_t H = w_.in[1], W = w_.in[2], OH = w_.out[1], OW = w_.out[2];
    const int64_t KH = w_.k[1], KW = w_.k[2], SH = w_.s[1], SW = w_.s[2];
    for (int64_t nc = 0; nc < count; ++nc) {
      const float *x = X + nc * in_sp;
      float *y = Y + nc * out_sp;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float *__restrict yr = y + oh * OW;
        for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = -std::numeric_limits<float>::infinity();
        for (int64_t kh = 0; kh < KH; ++kh) {
          const float *__restrict xr = x + (oh * SH + kh) * W;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float *__restrict xc = xr + kw;
            if (SW == 2) {
              for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = xc[2 * ow] > yr[ow] ? xc[2 * ow] : yr[ow];
            } else {
              for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = xc[ow * SW] > yr[ow] ? xc[ow * SW] : yr[ow];
            }
          }
        }
      }
    }
    (void)H;
    return true;
  }

  struct Tap {
    int64_t start, lo, hi, padded;
  };

  // The general loop's result, row by row: each output starts from its window's first valid tap, then takes every
  // valid tap in the same (row, column) order when it is greater; so a NaN first tap stays, later NaNs are skipped,
  // and of +-0 ties the first is kept, bit for bit as the general loop. A window wholly in the pads gives -inf.
  void RunDilatedMax(const float *x, float *y) {
    const int64_t W = w_.in[2], OH = w_.out[1], OW = w_.out[2], DH = w_.d[1], DW = w_.d[2];
    [[maybe_unused]] const bool nan = dil512_ && vmath::AnyNan(x, w_.in[1] * W);
#ifdef TWIN_HAVE_X86
    // Without NaN, separable: each input row's maxima over the tap columns once (DilatedMaxRowAvx512 over one
    // row), then per output row the maximum of its tap rows' in order. v > m ? v : m keeps the earliest of the
    // maximal taps, so the earliest in the row, then the earliest such row is the window order's earliest: the
    // same bits, +-0 ties included. KW + KH steps per output instead of KW * KH (3x3: ~1.3-1.5x faster).
    if (dil512_ && !nan && w_.k[1] > 1) {
      const float ninf = -std::numeric_limits<float>::infinity();
      for (int64_t h = 0; h < w_.in[1]; ++h) {
        if (!dil_used_[static_cast<size_t>(h)]) continue;
        const float *row = x + h * W;
        DilatedMaxRowAvx512<false>(&row, 1, dil_off_.data(), dil_mask_.data(), w_.k[2],
                                   dil_h_.data() + h * OW, OW);
      }
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Tap &t1 = taps_[1][oh];
        int64_t count = 0;
        for (int64_t kh = t1.lo; kh < t1.hi; ++kh) dil_rows_[static_cast<size_t>(count++)] =
            dil_h_.data() + (t1.start + kh * DH) * OW;
        if (count == 0) std::fill(y + oh * OW, y + (oh + 1) * OW, ninf);
        else FoldMaxRowsAvx2(dil_rows_.data(), count, OW, y + oh * OW);
      }
      return;
    }
#endif
    for (int64_t oh = 0; oh < OH; ++oh) {
      const Tap &t1 = taps_[1][oh];
      float *yr = y + oh * OW;
#ifdef TWIN_HAVE_X86
      if (dil512_) {
        const float *rows[16];  // (dil512_ only for up to 16 kernel rows)
        for (int64_t kh = t1.lo; kh < t1.hi; ++kh) rows[kh - t1.lo] = x + (t1.start + kh * DH) * W;
        if (nan) DilatedMaxRowAvx512<true>(rows, t1.hi - t1.lo, dil_off_.data(), dil_mask_.data(), w_.k[2], yr, OW);
        else DilatedMaxRowAvx512<false>(rows, t1.hi - t1.lo, dil_off_.data(), dil_mask_.data(), w_.k[2], yr, OW);
        continue;
      }
#endif
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Tap &t2 = taps_[2][ow];
        yr[ow] = t1.lo < t1.hi && t2.lo < t2.hi ? x[(t1.start + t1.lo * DH) * W + t2.start + t2.lo * DW]
                                                : -std::numeric_limits<float>::infinity();
      }
      for (int64_t kh = t1.lo; kh < t1.hi; ++kh) {
        const float *xr = x + (t1.start + kh * DH) * W;
        for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
          const std::pair<int64_t, int64_t> &r = dil_cols_[static_cast<size_t>(kw)];
          // (column of output ow: ow * SW + kw * DW - pb, valid for ow in [r.first, r.second))
          if (r.first < r.second) dil_row_(xr + r.first * w_.s[2] + kw * DW - w_.pb[2], yr + r.first,
                                           r.second - r.first, w_.s[2]);
        }
      }
    }
  }

  // MaxPool without dilation outside RunPlane2d's 2-D planes (3-D windows): the max along the innermost axis first
  // (one row of the input at a time, by RunPlane2d's row kernels), then per output row the elementwise max of the
  // rows its window covers in the two outer axes, in the general loop's tap order (so a +-0 tie keeps the same
  // zero). NaN taps are skipped, as onnx.reference does at stride 1 (all strides 1, pads or not); at other strides
  // it keeps a NaN first tap, as the general loop does: the row kernels return NaN exactly where a window's first tap in that
  // row is NaN, which marks the rows that need that check at the end.
  void RunSeparableMax(const float *x, float *y) {
    const int64_t D = w_.in[0], H = w_.in[1], W = w_.in[2], OD = w_.out[0], OH = w_.out[1], OW = w_.out[2];
    const int64_t SW = w_.s[2], KW = w_.k[2];
    const float ninf = -std::numeric_limits<float>::infinity();
    rowmax_.resize(static_cast<size_t>(D * H * OW));
    row_nan_.assign(static_cast<size_t>(D * H), 0);
    bool any_nan = false;
    const int64_t n = inner_hi_ - inner_lo_;
    const int64_t c0 = inner_lo_ * SW - w_.pb[2];  // input column of the first interior window
    // Rows back to back at the output stride (W == OW * SW): the interior windows of every row as one long row
    // (what it computes at the border columns, whose windows would cross rows, the row loop then replaces).
    const bool flat = n > 0 && W == OW * SW;
    bool flat_nan = false;
    if (flat) {  // in pieces of 2048 outputs, so that the row kernels' passes over the taps stay in L1
      const int64_t nf = (D * H - 1) * OW + n;
      for (int64_t f0 = 0; f0 < nf; f0 += 2048) {
        const int64_t len = std::min<int64_t>(2048, nf - f0);
        float *a = rowmax_.data() + inner_lo_ + f0;
        const PoolRows pr{x + c0 + f0 * SW, W, 1, KW, SW, len, D * H * W - c0 - f0 * SW};
        avx2_ ? MaxRowsAvx2(pr, a) : MaxRowsBase(pr, a);
        flat_nan = flat_nan || vmath::AnyNan(a, len);
      }
    }
    const bool row_loop = !flat || flat_nan || inner_lo_ > 0 || inner_hi_ < OW;
    for (int64_t r = 0; r < D * H && row_loop; ++r) {
      const float *xr = x + r * W;
      float *ar = rowmax_.data() + r * OW;
      const auto border = [&](int64_t ow) {
        const Tap &t = taps_[2][ow];
        float m = ninf;
        for (int64_t k = t.lo; k < t.hi; ++k) m = xr[t.start + k] > m ? xr[t.start + k] : m;
        ar[ow] = m;
        if (t.hi > t.lo && std::isnan(xr[t.start + t.lo])) row_nan_[r] = 1;
      };
      for (int64_t ow = 0; ow < inner_lo_; ++ow) border(ow);
      for (int64_t ow = inner_hi_; ow < OW; ++ow) border(ow);
      if (n <= 0) continue;
      float *ai = ar + inner_lo_;
      if (!flat) {
        const PoolRows pr{xr + c0, W, 1, KW, SW, n, W - c0};
        avx2_ ? MaxRowsAvx2(pr, ai) : MaxRowsBase(pr, ai);
      } else if (!flat_nan) {
        continue;
      }
      if (!vmath::AnyNan(ai, n)) continue;
      row_nan_[r] = 1;
      for (int64_t j = 0; j < n; ++j) {  // a NaN first tap: the max of the other taps
        if (!std::isnan(ai[j])) continue;
        const float *xc = xr + c0 + j * SW;
        float m = ninf;
        for (int64_t k = 1; k < KW; ++k) m = xc[k] > m ? xc[k] : m;
        ai[j] = m;
      }
    }
    for (const char f : row_nan_) any_nan = any_nan || f;
    const bool keep_first_nan = any_nan && !skip_nan_;
    rows_.resize(static_cast<size_t>(w_.k[0] * w_.k[1]));
    for (int64_t od = 0; od < OD; ++od) {
      const Tap &t0 = taps_[0][od];
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Tap &t1 = taps_[1][oh];
        int64_t count = 0;
        for (int64_t k0 = t0.lo; k0 < t0.hi; ++k0)
          for (int64_t k1 = t1.lo; k1 < t1.hi; ++k1)
            rows_[count++] = rowmax_.data() + ((t0.start + k0) * H + t1.start + k1) * OW;
        float *yr = y + (od * OH + oh) * OW;
        avx2_ ? FoldMaxRowsAvx2(rows_.data(), count, OW, yr) : FoldMaxRowsBase(rows_.data(), count, OW, yr);
        if (!keep_first_nan || count == 0) continue;
        const int64_t r = (t0.start + t0.lo) * H + t1.start + t1.lo;  // the row of every window's first tap
        if (!row_nan_[r]) continue;
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Tap &t2 = taps_[2][ow];
          if (t2.hi > t2.lo && std::isnan(x[r * W + t2.start + t2.lo])) yr[ow] = x[r * W + t2.start + t2.lo];
        }
      }
    }
  }

  // One 2-D plane. Output columns [inner_lo_, inner_hi_) have every tap inside the input's width, so a whole output
  // row of them is taken tap by tap with contiguous (or strided) loads; the other columns take OnePosition. Taps
  // are visited in the general loop's order (row, then column), so the results are the same bits: MaxPool keeps
  // the first tap and takes a later one only when it is larger (NaN only as the first tap), AveragePool adds in
  // float32 in the same order.
  void RunPlane2d(const float *x, float *y) {
    const int64_t W = w_.in[2], OW = w_.out[2], SW = w_.s[2], KW = w_.k[2];
    acc_.resize(static_cast<size_t>(std::max(OW + KW, W)));
    const int64_t n = inner_hi_ - inner_lo_;
    const int64_t c0 = inner_lo_ * SW - w_.pb[2];  // input column of the first interior window
    for (int64_t oh = 0; oh < w_.out[1]; ++oh) {
      const Tap &t1 = taps_[1][oh];
      float *yr = y + oh * OW;
      for (int64_t ow = 0; ow < inner_lo_; ++ow) yr[ow] = OnePosition(x, t1, taps_[2][ow]);
      for (int64_t ow = inner_hi_; ow < OW; ++ow) yr[ow] = OnePosition(x, t1, taps_[2][ow]);
      if (n <= 0) continue;
      float *__restrict yo = yr + inner_lo_;
      if constexpr (kMax) {
        if (t1.lo == t1.hi) {
          std::fill(yo, yo + n, -std::numeric_limits<float>::infinity());
          continue;
        }
        const PoolRows r{x + (t1.start + t1.lo) * W + c0, W, t1.hi - t1.lo, KW, SW, n, W - c0};
        if (deint_) deint_(r, 0.0, yo);
        else avx2_ ? MaxRowsAvx2(r, yo) : MaxRowsBase(r, yo);
      } else {
        float *acc = acc_.data();
        const PoolRows r{x + (t1.start + t1.lo) * W + c0, W, t1.hi - t1.lo, KW, SW, n, W - c0};
        const int64_t div = count_pad_ ? t1.padded * taps_[2][inner_lo_].padded : (t1.hi - t1.lo) * KW;
        if (deint_) {
          deint_(r, static_cast<double>(div), yo);
          continue;
        }
        if (avx2_) {
          AvgRowsAvx2(r, static_cast<float>(div), acc, yo);
          continue;
        }
        SumRowsBase(r, acc);
        const float d = static_cast<float>(div);
        for (int64_t j = 0; j < n; ++j) yo[j] = div ? acc[j] / d : 0.0f;
      }
    }
  }

#ifdef TWIN_HAVE_X86
#ifdef TWIN_HAVE_X86
  // One float 2-D plane of MaxPool without Indices by the path Run takes when the whole-plane kernel is not on.
  void MaxPlane(const float *x, float *y) {
    if (pool2x2_) return MaxPool2x2Avx512(x, y, w_.out[1], w_.out[2], w_.in[2], 2 * w_.in[2]);
    if (pool2x2_avx2_) return MaxPool2x2Avx2(x, y, w_.out[1], w_.out[2], w_.in[2], 2 * w_.in[2]);
    if (sep_max_) return RunSeparableMax(x, y);
    if (simple_ && w_.s[1] == 1 && w_.s[2] == 1) {
      RunSimpleMax(x, y, 0, 0, 1);
      return;
    }
    RunPlane2d(x, y);
  }
#endif
#endif

  // One output of a 2-D plane (the general loop's arithmetic for a single position).
  float OnePosition(const float *x, const Tap &t1, const Tap &t2) const {
    const int64_t W = w_.in[2];
    if constexpr (kMax) {
      if (t1.lo == t1.hi || t2.lo == t2.hi) return -std::numeric_limits<float>::infinity();
      // The first tap, then a select per later tap (a max instruction, no branch to mispredict on random data).
      float best = x[(t1.start + t1.lo) * W + t2.start + t2.lo];
      for (int64_t kh = t1.lo; kh < t1.hi; ++kh) {
        const float *row = x + (t1.start + kh) * W + t2.start;
        for (int64_t kw = kh == t1.lo ? t2.lo + 1 : t2.lo; kw < t2.hi; ++kw) best = row[kw] > best ? row[kw] : best;
      }
      return best;
    } else {
      float acc = 0.0f;
      for (int64_t kh = t1.lo; kh < t1.hi; ++kh)
        for (int64_t kw = t2.lo; kw < t2.hi; ++kw) acc += x[(t1.start + kh) * W + t2.start + kw];
      const int64_t div = count_pad_ ? t1.padded * t2.padded : (t1.hi - t1.lo) * (t2.hi - t2.lo);
      return div ? acc / static_cast<float>(div) : 0.0f;
    }
  }
  Window w_;
  int64_t NC_, C_;
  bool count_pad_, col_major_, indices_;
  std::vector<Tap> taps_[kMaxSpatial];
  bool simple_ = false;
  bool whole_ = false;  // a window over the whole map, no pads (x86 with AVX2)
  bool strided_ = false;  // StridedPoolAvx512
  std::vector<int32_t> str_idx_, str_idx2_;
  std::vector<float> str_div_;
#ifdef TWIN_HAVE_X86
  StridedPool str_{};
#endif
  bool plane2d_ = false;
  int64_t inner_lo_ = 0, inner_hi_ = 0;  // output columns whose windows lie inside the input's width
  std::vector<float> acc_;               // RunPlane2d's AveragePool sums of one output row
#ifdef TWIN_HAVE_X86
  FlatGrid flat_{};                // the whole-plane kernels' grid (FlatAvgAvx2 / FlatMaxAvx2)
#endif
  bool flat_on_ = false;           // ... taken
  std::vector<int64_t> flat_off_;  // ... tap offsets
  std::vector<float> flat_div_;    // ... AveragePool's divisor per grid position
  std::vector<float> flat_xp_;     // ... AveragePool's plane inside its zero pads
  std::vector<float> flat_xpf_;    // ... MaxPool's plane inside its -inf pads
  std::vector<float> flat_z_;      // ... the grid's outputs
  std::vector<char> flat_nan_;     // ... MaxPool: planes with a NaN, left to MaxPlane
#ifdef TWIN_HAVE_X86
  AvgInPlace in_{};                // AvgInPlaceAvx512's geometry
  SepMaxInPlace smax_{};           // SepMaxInAvx512's geometry
  AvgS1InPlace s1_{};              // AvgS1Avx512's geometry
#endif
  bool s1_on_ = false;             // AveragePool at stride 1 on AVX-512: AvgS1Avx512 (in_zero_ its zero row)
  std::vector<uint16_t> s1_mask_;  // ... its load masks
  std::vector<int64_t> s1_cols_;   // ... the blocks of a row, the full ones first
  std::vector<int64_t> s1_rowoff_; // ... its tap rows
  std::vector<float> s1_rowf_, s1_colf_;  // ... its divisors' factors
  int64_t smax_k_ = 0;             // SepMaxInAvx512's window size (0: not taken)
  std::vector<uint32_t> smax_mask_;  // ... its load masks
  bool flat512_ = false;           // AveragePool's whole-plane kernel in its AVX-512 build (FlatAvgAvx512) ...
  bool in_place_ = false;          // ... or at stride 2 AvgInPlaceAvx512
  std::vector<uint16_t> in_mask_;  // ... its load masks
  std::vector<float> in_div_;      // ... its divisors
  std::vector<int64_t> in_rowoff_; // ... its tap rows
  std::vector<float> in_zero_;     // ... the row read for a tap row outside the input
  std::vector<int32_t> in_pidx_;   // ... pairs of rows: permute indices
  std::vector<int32_t> in_pdidx_;  // ... pairs of rows: divisor lanes
  bool avx2_ = false;                    // RunPlane2d's row loops in their AVX2 build
  DeintRowsFn deint_ = nullptr;          // ... at column strides 3..8 == the window's width: DeintRowsAvx2
  bool pool2x2_ = false;       // simple_ with a 2x2 window and stride 2: MaxPool2x2Avx512
  bool pool2x2_avx2_ = false;  // the same on a CPU (or GEASYNC_TWIN_SIMD cap) without AVX-512: MaxPool2x2Avx2
  bool sep_max_ = false;        // float MaxPool without dilation that RunPlane2d does not take: RunSeparableMax
  bool dil_max_ = false;        // float 2-D / 1-D MaxPool with dilation: RunDilatedMax
  std::vector<std::pair<int64_t, int64_t>> dil_cols_;  // per kernel column: the outputs it is valid for
  void (*dil_row_)(const float *, float *, int64_t, int64_t) = MaxRowInto;
  std::vector<char> dil_used_;           // RunDilatedMax separable: input rows read
  std::vector<float> dil_h_;             // ... per input row, its maxima over the tap columns (OW each)
  std::vector<const float *> dil_rows_;  // ... an output row's tap rows in dil_h_
  bool dil512_ = false;  // ... at column stride 1 on AVX-512: DilatedMaxRowAvx512
  std::vector<int64_t> dil_off_;
  std::vector<uint16_t> dil_mask_;  // per block of 16 outputs, per kernel column: the outputs it is valid for
  bool sep_plane_ = false;      // ... or a 2-D plane at stride 1 with pads
  bool skip_nan_ = false;       // every stride and dilation 1: NaN taps skipped (else a NaN first tap kept)
  std::vector<float> rowmax_;  // RunSeparableMax's innermost-axis maxima, one row of OW per input row
  std::vector<char> row_nan_;  // per input row: some window's first tap in it is NaN
  std::vector<const float *> rows_;
};

template <bool kMax>
std::unique_ptr<Kernel> PreparePool(const KernelCtx &c, std::string *reason) {
  const auto &xd = c.in[0]->dims;
  const size_t nsp = xd.size() - 2;
  std::vector<int64_t> ks;
  if (!PoolKernelShape(*c.node, nsp, &ks, reason)) return nullptr;
  Window w;
  if (!MakeWindow(*c.node, std::vector<int64_t>(xd.begin() + 2, xd.end()), ks, true, &w, reason)) return nullptr;
  int64_t count_pad = 0, storage = 0;
  if (!AttrInt(*c.node, "count_include_pad", 0, &count_pad, reason) ||
      !AttrInt(*c.node, "storage_order", 0, &storage, reason))
    return nullptr;
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      k = std::make_unique<PoolKernel<S, kMax>>(w, xd[0] * xd[1], xd[1], count_pad != 0, storage != 0,
                                                 c.out.size() > 1);
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

// float16 / bfloat16 MaxPool through float32: the maximum of values a half type holds is one of them, so the
// result is the same, and the float kernels' row paths apply (the generic per-element loop took 20x onnxruntime on
// a float16-converted ResNet's 3x3 stride-2 stem pool). AveragePool keeps its own loop (a double sum): through the
// float path (a float32 sum, rounded to float32 first) a half result could move by an ulp.
std::unique_ptr<Kernel> PrepareMaxPool(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PreparePool<true>, reason) : PreparePool<true>(c, reason);
}

// ---- GlobalAveragePool ----

bool InferGlobalPool(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsFloatType(x.dtype) || x.dims.size() < 3) {
    *reason = "input must be float with rank >= 3, got " + DescStr(x);
    return false;
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims = x.dims;
  for (size_t i = 2; i < x.dims.size(); ++i) c->out[0].dims[i] = 1;
  return true;
}

template <class S>
class GlobalPoolKernel : public Kernel {
 public:
  GlobalPoolKernel(int64_t nc, int64_t sp) : nc_(nc), sp_(sp) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    if constexpr (std::is_same<S, float>::value) {
      if (sp_ > 0 && sp_ < 8) {  // tiny maps (1x1, 2x2 late in a CNN): a call per row cost more than its sum;
        for (int64_t i = 0; i < nc_; ++i) {  // SumFloats adds a run this short in this order too
          double acc = 0;
          for (int64_t j = 0; j < sp_; ++j) acc += static_cast<double>(x[i * sp_ + j]);
          y[i] = static_cast<float>(acc / static_cast<double>(sp_));
        }
        return true;
      }
    }
    for (int64_t i = 0; i < nc_; ++i) {
      double acc = 0;
      if constexpr (std::is_same<S, float>::value) acc = SumFloats(x + i * sp_, sp_);
      else
        for (int64_t j = 0; j < sp_; ++j) acc += static_cast<double>(Num<S>::Load(x[i * sp_ + j]));
      y[i] = Num<S>::Store(static_cast<typename Num<S>::C>(sp_ ? acc / static_cast<double>(sp_) : NAN));
    }
    return true;
  }

 private:
  int64_t nc_, sp_;
};

std::unique_ptr<Kernel> PrepareGlobalPool(const KernelCtx &c, std::string *reason) {
  // float16 / bfloat16 widen once into scratch (vector conversions) and take the float kernel's vector sums: the
  // same double sums of the same values (exact either way), ~10x faster than a scalar widening per element.
  if (HasHalfTypes(c)) return PrepareViaFloat(c, PrepareGlobalPool, reason);
  const auto &xd = c.in[0]->dims;
  int64_t sp = 1;
  for (size_t i = 2; i < xd.size(); ++i) sp *= xd[i];
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<GlobalPoolKernel<S>>(xd[0] * xd[1], sp);
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}

// ---- BatchNormalization (inference) ----

bool CheckBatchNorm(const Node &n, int64_t, std::string *reason) {
  int64_t training;
  float f;
  if (!AttrInt(n, "training_mode", 0, &training, reason) || !AttrFloat(n, "epsilon", 1e-5f, &f, reason) ||
      !AttrFloat(n, "momentum", 0.9f, &f, reason))
    return false;
  if (training != 0) {
    *reason = "training_mode=1 is not supported by the twin (inference only)";
    return false;
  }
  if (n.output_names.size() > 1) {
    *reason = "running mean/var outputs (training) are not supported by the twin (inference only)";
    return false;
  }
  return true;
}

bool InferBatchNorm(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsFloatType(x.dtype) || x.dims.size() < 2) {
    *reason = "X must be float with rank >= 2, got " + DescStr(x);
    return false;
  }
  for (size_t i = 1; i < 5; ++i) {
    const TensorDesc &p = *c->in[i];
    if (!IsFloatType(p.dtype) || p.dims.size() != 1 || (p.dims[0] >= 0 && x.dims[1] >= 0 && p.dims[0] != x.dims[1])) {
      *reason = "input '" + c->node->input_names[i] + "' must be 1-D of size C, got " + DescStr(p);
      return false;
    }
  }
  c->out[0] = x;
  return true;
}

// y = x a + b over one channel's plane. The AVX2 copy (no FMA: the same roundings as the portable loop) moves twice
// the portable build's 16 bytes per instruction: at 1M elements, where the pass is bound by the L3 stream, it measured
// ~1.5x faster on a Zen 3.
// (y may be x: the step may run in place.)
void AffinePlane(const float *x, float a, float b, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}
#ifdef TWIN_HAVE_X86
__attribute__((target("avx2"))) void AffinePlaneAvx2(const float *x, float a, float b, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}
#endif
// The same per element with a and b per element (small planes: a call per plane measured 9.6x onnxruntime for a
// 256 x 256 input, one element per plane). Without FMA, as AffinePlaneAvx2: the same bits as the plane loop.
void AffineRow(const float *x, const float *a, const float *b, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a[i] + b[i];
}
#ifdef TWIN_HAVE_X86
__attribute__((target("avx2"))) void AffineRowAvx2(const float *x, const float *a, const float *b, int64_t n,
                                                   float *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a[i] + b[i];
}
#endif

class BatchNormKernel : public Kernel {
 public:
  BatchNormKernel(int64_t N, int64_t C, int64_t sp, float eps) : N_(N), C_(C), sp_(sp), eps_(eps), a_(C), b_(C) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const float *x = static_cast<const float *>(in[0]);
    const float *scale = static_cast<const float *>(in[1]), *bias = static_cast<const float *>(in[2]);
    const float *mean = static_cast<const float *>(in[3]), *var = static_cast<const float *>(in[4]);
    float *y = static_cast<float *>(out[0]);
    for (int64_t c = 0; c < C_; ++c) {
      const double a = static_cast<double>(scale[c]) / std::sqrt(static_cast<double>(var[c]) + eps_);
      a_[c] = static_cast<float>(a);
      b_[c] = static_cast<float>(static_cast<double>(bias[c]) - static_cast<double>(mean[c]) * a);
    }
    if (sp_ < 16) {  // planes of a few elements: whole rows of C * sp elements
      const int64_t m = C_ * sp_;
      ra_.resize(static_cast<size_t>(m));
      rb_.resize(static_cast<size_t>(m));
      for (int64_t c = 0; c < C_; ++c)
        for (int64_t i = 0; i < sp_; ++i) ra_[c * sp_ + i] = a_[c], rb_[c * sp_ + i] = b_[c];
      auto row = AffineRow;
#ifdef TWIN_HAVE_X86
      if (vmath::ActiveIsa() != vmath::Isa::kBaseline) row = AffineRowAvx2;
#endif
      for (int64_t n = 0; n < N_; ++n) row(x + n * m, ra_.data(), rb_.data(), m, y + n * m);
      return true;
    }
    auto plane = AffinePlane;
#ifdef TWIN_HAVE_X86
    if (vmath::ActiveIsa() != vmath::Isa::kBaseline) plane = AffinePlaneAvx2;
#endif
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t c = 0; c < C_; ++c) plane(x + (n * C_ + c) * sp_, a_[c], b_[c], sp_, y + (n * C_ + c) * sp_);
    return true;
  }

 private:
  int64_t N_, C_, sp_;
  double eps_;
  std::vector<float> a_, b_;
  std::vector<float> ra_, rb_;  // a_ and b_ per element of a row (small planes)
};

template <class T>
class BatchNormKernelD : public Kernel {  // float64
 public:
  BatchNormKernelD(int64_t N, int64_t C, int64_t sp, float eps) : N_(N), C_(C), sp_(sp), eps_(eps) {}
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    const T *scale = static_cast<const T *>(in[1]), *bias = static_cast<const T *>(in[2]);
    const T *mean = static_cast<const T *>(in[3]), *var = static_cast<const T *>(in[4]);
    T *y = static_cast<T *>(out[0]);
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t c = 0; c < C_; ++c) {
        const T a = scale[c] / std::sqrt(var[c] + static_cast<T>(eps_));
        const T b = bias[c] - mean[c] * a;
        for (int64_t i = 0; i < sp_; ++i) y[(n * C_ + c) * sp_ + i] = x[(n * C_ + c) * sp_ + i] * a + b;
      }
    return true;
  }

 private:
  int64_t N_, C_, sp_;
  float eps_;
};

std::unique_ptr<Kernel> PrepareBatchNormFloat(const KernelCtx &c, std::string *reason) {
  for (size_t i = 1; i < 5; ++i) {
    if (c.in[i]->dtype != c.in[0]->dtype) {
      *reason = "scale, B, mean and var must have X's dtype";
      return nullptr;
    }
  }
  float eps;
  if (!AttrFloat(*c.node, "epsilon", 1e-5f, &eps, reason)) return nullptr;
  const auto &xd = c.in[0]->dims;
  int64_t sp = 1;
  for (size_t i = 2; i < xd.size(); ++i) sp *= xd[i];
  switch (c.out[0].dtype) {
    case ElemType::kFloat: return std::make_unique<BatchNormKernel>(xd[0], xd[1], sp, eps);
    case ElemType::kDouble: return std::make_unique<BatchNormKernelD<double>>(xd[0], xd[1], sp, eps);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

std::unique_ptr<Kernel> PrepareBatchNorm(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareBatchNormFloat, reason) : PrepareBatchNormFloat(c, reason);
}

// ---- LayerNormalization ----

bool InferLayerNorm(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsFloatType(x.dtype)) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t axis, norm, stash;
  float eps;
  if (!AttrInt(*c->node, "axis", -1, &axis, reason) || !AttrFloat(*c->node, "epsilon", 1e-5f, &eps, reason) ||
      !AttrInt(*c->node, "stash_type", 1, &stash, reason))
    return false;
  if (!NormalizeAxis(axis, static_cast<int64_t>(x.dims.size()), false, &norm, reason)) return false;
  std::vector<int64_t> tail(x.dims.begin() + norm, x.dims.end());
  for (size_t i = 1; i < c->in.size(); ++i) {
    if (!c->has(i)) continue;
    std::vector<int64_t> b;
    if (!IsFloatType(c->in[i]->dtype) || !BroadcastShapes(tail, c->in[i]->dims, &b, reason) || b.size() != tail.size()) {
      *reason = "input '" + c->node->input_names[i] + "' " + DescStr(*c->in[i]) + " does not broadcast to " +
                ShapeStr(tail);
      return false;
    }
  }
  c->out[0] = x;
  for (size_t o = 1; o < c->out.size(); ++o) {
    c->out[o].dtype = stash == 1 ? ElemType::kFloat : x.dtype;
    c->out[o].dims = x.dims;
    for (size_t i = norm; i < x.dims.size(); ++i) c->out[o].dims[i] = 1;
  }
  return true;
}

template <class T>
class LayerNormKernel : public Kernel {
 public:
  LayerNormKernel(int64_t outer, int64_t inner, float eps, std::vector<int64_t> sidx, std::vector<int64_t> bidx)
      : outer_(outer), inner_(inner), eps_(eps), sidx_(std::move(sidx)), bidx_(std::move(bidx)),
        scale_(inner), bias_(inner) {}
  // Each row's x is read (mean, variance) before its y is written, then x[j] before y[j]; scale and bias are
  // copied before any write: Y may be written over X.
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    const T *s = static_cast<const T *>(in[1]);
    const T *b = bidx_.empty() ? nullptr : static_cast<const T *>(in[2]);
    T *y = static_cast<T *>(out[0]);
    float *mean_out = out_count_ > 1 && out[1] ? static_cast<float *>(out[1]) : nullptr;
    float *inv_out = out_count_ > 2 && out[2] ? static_cast<float *>(out[2]) : nullptr;
    for (int64_t j = 0; j < inner_; ++j) {
      scale_[j] = s[sidx_[j]];
      bias_[j] = b ? b[bidx_[j]] : T(0);
    }
    // Whole rows for the intra-op pool, each computed by the same code whoever runs it.
    ParallelForAnyCut(outer_, std::max<int64_t>(1, kLayerNormGrain / std::max<int64_t>(inner_, 1)),
                      [&](int64_t lo, int64_t hi) { Rows(x, y, b != nullptr, mean_out, inv_out, lo, hi); });
    return true;
  }
  size_t out_count_ = 1;

 private:
  // Elements worth a helper: >= ~25 us of one core (1M float32 rows measured ~0.29 ms).
  static constexpr int64_t kLayerNormGrain = int64_t(1) << 17;

  void Rows(const T *x, T *y, bool has_bias, float *mean_out, float *inv_out, int64_t lo, int64_t hi) const {
    if constexpr (std::is_same<T, float>::value) {  // the vectorised fused kernel
      vmath::LayerNormRows(x + lo * inner_, y + lo * inner_, hi - lo, inner_, scale_.data(),
                           has_bias ? bias_.data() : nullptr, eps_, mean_out ? mean_out + lo : nullptr,
                           inv_out ? inv_out + lo : nullptr);
      return;
    }
    for (int64_t o = lo; o < hi; ++o) {
      const T *xr = x + o * inner_;
      T *yr = y + o * inner_;
      double sum = 0;
      for (int64_t j = 0; j < inner_; ++j) sum += xr[j];
      const double mean = inner_ ? sum / static_cast<double>(inner_) : 0.0;
      double sq = 0;
      for (int64_t j = 0; j < inner_; ++j) {
        const double d = static_cast<double>(xr[j]) - mean;
        sq += d * d;
      }
      const double var = inner_ ? sq / static_cast<double>(inner_) : 0.0;
      const double inv = 1.0 / std::sqrt(var + static_cast<double>(eps_));
      const T m = static_cast<T>(mean), iv = static_cast<T>(inv);
      for (int64_t j = 0; j < inner_; ++j) yr[j] = (xr[j] - m) * iv * scale_[j] + bias_[j];
      if (mean_out) mean_out[o] = static_cast<float>(mean);
      if (inv_out) inv_out[o] = static_cast<float>(inv);
    }
  }

  int64_t outer_, inner_;
  float eps_;
  std::vector<int64_t> sidx_, bidx_;
  std::vector<T> scale_, bias_;
};

// Index into a tensor of shape `small` (unidirectionally broadcast to `full`) for each element of `full`.
std::vector<int64_t> BroadcastIndex(const Dims &full, const Dims &small) {
  int64_t n = 1;
  for (int64_t d : full) n *= d;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  const size_t r = full.size(), off = r - small.size();
  std::vector<int64_t> ss = Strides(small), ctr(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = 0;
    for (size_t d = off; d < r; ++d)
      if (small[d - off] != 1) k += ctr[d] * ss[d - off];
    idx[i] = k;
    for (size_t d = r; d-- > 0;) {
      if (++ctr[d] < full[d]) break;
      ctr[d] = 0;
    }
  }
  return idx;
}

std::unique_ptr<Kernel> PrepareLayerNormFloat(const KernelCtx &c, std::string *reason) {
  int64_t axis, norm;
  float eps;
  if (!AttrInt(*c.node, "axis", -1, &axis, reason) || !AttrFloat(*c.node, "epsilon", 1e-5f, &eps, reason))
    return nullptr;
  const auto &xd = c.in[0]->dims;
  if (!NormalizeAxis(axis, static_cast<int64_t>(xd.size()), false, &norm, reason)) return nullptr;
  std::vector<int64_t> tail(xd.begin() + norm, xd.end());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < norm; ++i) outer *= xd[i];
  for (int64_t d : tail) inner *= d;
  std::vector<int64_t> sidx = BroadcastIndex(tail, c.in[1]->dims), bidx;
  const bool has_b = c.in.size() > 2 && c.in[2];
  if (has_b) bidx = BroadcastIndex(tail, c.in[2]->dims);
  for (size_t o = 1; o < c.out.size(); ++o) {
    if (c.out[o].dtype != ElemType::kFloat) {
      *reason = "Mean/InvStdDev outputs must be float32 (stash_type=1)";
      return nullptr;
    }
  }
  if (c.in[0]->dtype == ElemType::kFloat && c.in[1]->dtype == ElemType::kFloat) {
    auto k = std::make_unique<LayerNormKernel<float>>(outer, inner, eps, sidx, bidx);
    k->out_count_ = c.out.size();
    return k;
  }
  if (c.in[0]->dtype == ElemType::kDouble && c.in[1]->dtype == ElemType::kDouble) {
    auto k = std::make_unique<LayerNormKernel<double>>(outer, inner, eps, sidx, bidx);
    k->out_count_ = c.out.size();
    return k;
  }
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

std::unique_ptr<Kernel> PrepareLayerNorm(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareLayerNormFloat, reason) : PrepareLayerNormFloat(c, reason);
}

}  // namespace

void RegisterNNOps(std::vector<OpDef> *ops) {
  ops->push_back({"Conv", 2, 3, 1, 1, nullptr, InferConv, PrepareConv, true});
  ops->push_back({"MaxPool", 1, 1, 1, 2, CheckPool, InferPool, PrepareMaxPool, true});
  ops->push_back({"AveragePool", 1, 1, 1, 1, CheckPool, InferPool, PreparePool<false>, true});
  ops->push_back({"GlobalAveragePool", 1, 1, 1, 1, nullptr, InferGlobalPool, PrepareGlobalPool, true});
  ops->push_back({"BatchNormalization", 5, 5, 1, 3, CheckBatchNorm, InferBatchNorm, PrepareBatchNorm, true});
  ops->push_back({"LayerNormalization", 2, 3, 1, 3, nullptr, InferLayerNorm, PrepareLayerNorm, true});
}

}  // namespace onnx
}  // namespace twin
