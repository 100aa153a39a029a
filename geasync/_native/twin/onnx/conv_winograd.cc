// Winograd F(2x2, 3x3) (Lavin and Gray): each 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over a 4x4 input
// tile d. The elementwise product summed over input channels is 16 GEMMs U[k] [M x C] x V[k] [C x tiles]; the
// transforms are adds and subtracts over a row of tiles, 8 tiles per AVX2 vector, or scalar for the baseline set
// (the caller chooses from vmath's active set). (GCC did not vectorise the 16-plane loops by itself: 3x slower.)
// Tiles are taken a few tile rows at a time so that V and the GEMM results of one block stay in L2.
// Kernel loops: -O3 vectorisation and no FP-trap semantics (no fast-math: NaN and inf keep IEEE behaviour).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include "conv_winograd.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common.h"
#include "gemm.h"
#include "intra_op.h"

namespace twin {
namespace onnx {
namespace {

// Tiles per block: the block's V and GEMM results, 16 x (C + M) x tiles floats, about 1 MB (128 tiles at 64 + 64
// channels, 512 at 16 + 16: narrower GEMMs are too short for BLAS to run at full speed); measured against 64 and
// 2x as many on a 2-core EPYC, within the noise of a shared machine.
constexpr int64_t kBlockFloats = 16 * 16384, kMinTiles = 32;

struct Blocking {
  int64_t th, tw, rows, tiles;  // tile rows/cols per image, tile rows per block (across images), tiles per block
};

Blocking BlockingOf(const WinogradShape &s) {
  Blocking b;
  b.th = (s.OH + 1) / 2;
  b.tw = (s.OW + 1) / 2;
  const int64_t target = std::max<int64_t>(kMinTiles, kBlockFloats / 16 / (s.C + s.M));
  b.rows = std::min(s.N * b.th, std::max<int64_t>(1, target / b.tw));
  b.tiles = b.rows * b.tw;
  return b;
}

struct Buffers {
  float *v, *m, *pad, *e, *o, *out, *chk;  // V [16][C][tiles], GEMM results [16][M][tiles], row temporaries
};

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }  // floats -> a multiple of 64 bytes

Buffers Carve(const WinogradShape &s, const Blocking &b, void *scratch) {
  float *p = static_cast<float *>(scratch);
  Buffers f;
  f.v = p;
  p += Align16(static_cast<size_t>(16 * s.C * b.tiles));
  f.m = p;
  p += Align16(static_cast<size_t>(16 * s.M * b.tiles));
  f.pad = p;
  p += Align16(static_cast<size_t>(2 * b.tw + 2));
  f.e = p;  // 4 rows of tw + 1
  p += Align16(static_cast<size_t>(4 * (b.tw + 1)));
  f.o = p;
  p += Align16(static_cast<size_t>(4 * (b.tw + 1)));
  f.out = p;  // 4 rows of tw: even/odd columns of the tile's two output rows
  p += Align16(static_cast<size_t>(4 * b.tw));
  f.chk = p;
  return f;
}

size_t ScratchFloats(const WinogradShape &s, const Blocking &b) {
  return Align16(static_cast<size_t>(16 * s.C * b.tiles)) + Align16(static_cast<size_t>(16 * s.M * b.tiles)) +
         Align16(static_cast<size_t>(2 * b.tw + 2)) + 2 * Align16(static_cast<size_t>(4 * (b.tw + 1))) +
         Align16(static_cast<size_t>(4 * b.tw)) + Align16(static_cast<size_t>(b.tw));
}

#define TWIN_WG_INLINE __attribute__((always_inline)) inline

// Input row ir of channel plane xc split into even and odd padded columns: e[j] = x(ir, 2j - pl),
// o[j] = x(ir, 2j + 1 - pl), zero outside the image, j in [0, tw].
TWIN_WG_INLINE void SplitRow(const WinogradShape &s, const Blocking &b, const float *xc, int64_t ir, float *pad,
                             float *__restrict e, float *__restrict o) {
  const int64_t len = 2 * b.tw + 2;
  if (ir < 0 || ir >= s.H) {
    std::fill(e, e + b.tw + 1, 0.0f);
    std::fill(o, o + b.tw + 1, 0.0f);
    return;
  }
  const int64_t lo = std::min(s.pl, len), hi = std::min(len, s.pl + s.W);
  std::fill(pad, pad + lo, 0.0f);
  if (hi > lo) CopyBytes(pad + lo, xc + ir * s.W, static_cast<size_t>(hi - lo) * sizeof(float));
  std::fill(pad + std::max(lo, hi), pad + len, 0.0f);
  const float *__restrict p = pad;
  for (int64_t j = 0; j <= b.tw; ++j) {
    e[j] = p[2 * j];
    o[j] = p[2 * j + 1];
  }
}

// Transform planes of one row of tiles: 4 rows of even / odd input columns in, 16 planes kstride apart out (input
// side); 16 planes in, the tile rows' even / odd output columns out (output side).
struct InputCols {
  const float *e[4], *o[4];
  float *v;
  int64_t kstride;
};
struct OutputCols {
  const float *m;
  int64_t kstride;
  float bias;
  bool relu;
  float *ye0, *yo0, *ye1, *yo1, *chk;
};

// V[4a + c][t] = (B^T d B)[a][c] for tiles [t0, t1): rows first (B^T d: r0 - r2, r1 + r2, r2 - r1, r1 - r3) on the
// tile's four columns d0..d3 = e[t], o[t], e[t + 1], o[t + 1], then the same on the columns.
void InputColsScalar(const InputCols &a, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float r[4][4];
    for (int j = 0; j < 4; ++j) {
      const int64_t col = t + j / 2;
      const float *const *src = j % 2 ? a.o : a.e;
      const float d0 = src[0][col], d1 = src[1][col], d2 = src[2][col], d3 = src[3][col];
      r[0][j] = d0 - d2, r[1][j] = d1 + d2, r[2][j] = d2 - d1, r[3][j] = d1 - d3;
    }
    for (int i = 0; i < 4; ++i) {
      float *v = a.v + 4 * i * a.kstride + t;
      v[0] = r[i][0] - r[i][2];
      v[a.kstride] = r[i][1] + r[i][2];
      v[2 * a.kstride] = r[i][2] - r[i][1];
      v[3 * a.kstride] = r[i][1] - r[i][3];
    }
  }
}

// Y = A^T m A + bias for tiles [t0, t1) (A^T m: rows m0 + m1 + m2 and m1 - m2 - m3, then the same on the
// columns), relu after; chk[t] accumulates y * 0 (NaN once any y is inf or NaN).
void OutputColsScalar(const OutputCols &a, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float r0[4], r1[4];
    for (int c = 0; c < 4; ++c) {
      const float q0 = a.m[c * a.kstride + t], q1 = a.m[(4 + c) * a.kstride + t];
      const float q2 = a.m[(8 + c) * a.kstride + t], q3 = a.m[(12 + c) * a.kstride + t];
      r0[c] = q0 + q1 + q2;
      r1[c] = q1 - q2 - q3;
    }
    const float y[4] = {r0[0] + r0[1] + r0[2] + a.bias, r0[1] - r0[2] - r0[3] + a.bias,
                        r1[0] + r1[1] + r1[2] + a.bias, r1[1] - r1[2] - r1[3] + a.bias};
    float *dst[4] = {a.ye0, a.yo0, a.ye1, a.yo1};
    for (int i = 0; i < 4; ++i) {
      a.chk[t] += y[i] * 0.0f;
      dst[i][t] = a.relu && y[i] < 0.0f ? 0.0f : y[i];
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
// The same 8 tiles at a time.
__attribute__((target("avx2,fma"))) void InputColsAvx2(const InputCols &a, int64_t tw) {
  int64_t t = 0;
  for (; t + 8 <= tw; t += 8) {
    __m256 r[4][4];
    for (int j = 0; j < 4; ++j) {
      const int64_t col = t + j / 2;
      const float *const *src = j % 2 ? a.o : a.e;
      const __m256 d0 = _mm256_loadu_ps(src[0] + col), d1 = _mm256_loadu_ps(src[1] + col);
      const __m256 d2 = _mm256_loadu_ps(src[2] + col), d3 = _mm256_loadu_ps(src[3] + col);
      r[0][j] = _mm256_sub_ps(d0, d2), r[1][j] = _mm256_add_ps(d1, d2);
      r[2][j] = _mm256_sub_ps(d2, d1), r[3][j] = _mm256_sub_ps(d1, d3);
    }
    for (int i = 0; i < 4; ++i) {
      float *v = a.v + 4 * i * a.kstride + t;
      _mm256_storeu_ps(v, _mm256_sub_ps(r[i][0], r[i][2]));
      _mm256_storeu_ps(v + a.kstride, _mm256_add_ps(r[i][1], r[i][2]));
      _mm256_storeu_ps(v + 2 * a.kstride, _mm256_sub_ps(r[i][2], r[i][1]));
      _mm256_storeu_ps(v + 3 * a.kstride, _mm256_sub_ps(r[i][1], r[i][3]));
    }
  }
  InputColsScalar(a, t, tw);
}

__attribute__((target("avx2,fma"))) void OutputColsAvx2(const OutputCols &a, int64_t tw) {
  const __m256 bias = _mm256_set1_ps(a.bias), zero = _mm256_setzero_ps();
  float *dst[4] = {a.ye0, a.yo0, a.ye1, a.yo1};
  int64_t t = 0;
  for (; t + 8 <= tw; t += 8) {
    __m256 r0[4], r1[4];
    for (int c = 0; c < 4; ++c) {
      const __m256 q0 = _mm256_loadu_ps(a.m + c * a.kstride + t), q1 = _mm256_loadu_ps(a.m + (4 + c) * a.kstride + t);
      const __m256 q2 = _mm256_loadu_ps(a.m + (8 + c) * a.kstride + t);
      const __m256 q3 = _mm256_loadu_ps(a.m + (12 + c) * a.kstride + t);
      r0[c] = _mm256_add_ps(_mm256_add_ps(q0, q1), q2);
      r1[c] = _mm256_sub_ps(_mm256_sub_ps(q1, q2), q3);
    }
    const __m256 y[4] = {
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r0[0], r0[1]), r0[2]), bias),
        _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r0[1], r0[2]), r0[3]), bias),
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r1[0], r1[1]), r1[2]), bias),
        _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r1[1], r1[2]), r1[3]), bias)};
    __m256 chk = _mm256_loadu_ps(a.chk + t);
    for (int i = 0; i < 4; ++i) {
      chk = _mm256_add_ps(chk, _mm256_mul_ps(y[i], zero));
      // max(y, 0) with y second: NaN stays NaN, like the scalar select.
      _mm256_storeu_ps(dst[i] + t, a.relu ? _mm256_max_ps(zero, y[i]) : y[i]);
    }
    _mm256_storeu_ps(a.chk + t, chk);
  }
  OutputColsScalar(a, t, tw);
}
#endif

TWIN_WG_INLINE void InputRow(const WinogradShape &s, const Blocking &b, const float *xc, int64_t ty,
                             const Buffers &f, float *v, int64_t kstride, bool avx2) {
  InputCols a;
  for (int i = 0; i < 4; ++i) {
    a.e[i] = f.e + i * (b.tw + 1);
    a.o[i] = f.o + i * (b.tw + 1);
    SplitRow(s, b, xc, 2 * ty + i - s.pt, f.pad, f.e + i * (b.tw + 1), f.o + i * (b.tw + 1));
  }
  a.v = v;
  a.kstride = kstride;
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) return InputColsAvx2(a, b.tw);
#endif
  InputColsScalar(a, 0, b.tw);
}

// Output rows 2ty, 2ty + 1 of one channel from its 16 GEMM planes (mp = &Mo[0][m][first tile of the row]).
TWIN_WG_INLINE void OutputRow(const WinogradShape &s, const Blocking &b, const float *mp, int64_t kstride, float bias,
                              bool relu, int64_t ty, const Buffers &f, float *yc, bool avx2) {
  const int64_t tw = b.tw;
  const OutputCols a{mp, kstride, bias, relu, f.out, f.out + tw, f.out + 2 * tw, f.out + 3 * tw, f.chk};
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) OutputColsAvx2(a, tw);
  else OutputColsScalar(a, 0, tw);
#else
  OutputColsScalar(a, 0, tw);
#endif
  const int64_t pairs = s.OW / 2;
  for (int r = 0; r < 2 && 2 * ty + r < s.OH; ++r) {
    float *__restrict y = yc + (2 * ty + r) * s.OW;
    const float *__restrict ev = r ? a.ye1 : a.ye0, *__restrict od = r ? a.yo1 : a.yo0;
    for (int64_t t = 0; t < pairs; ++t) {
      y[2 * t] = ev[t];
      y[2 * t + 1] = od[t];
    }
    if (s.OW & 1) y[s.OW - 1] = ev[tw - 1];
  }
}

// Blocks [blk0, blk1) of b.rows tile rows each: they run over the tile rows of all N images in turn (g = n * th +
// ty), so that small images still make GEMMs wide enough for BLAS. Each block computes its outputs whole (the sum
// over C is inside its GEMMs), so blocks are independent: the intra-op pool shares them out.
TWIN_WG_INLINE void RunBlocks(const WinogradShape &s, const Blocking &b, const Buffers &f, const float *x,
                              const float *u, const float *bias, bool relu, float *y, int64_t blk0, int64_t blk1,
                              bool avx2) {
  const int64_t total = s.N * b.th, in_plane = s.H * s.W, out_plane = s.OH * s.OW;
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t g0 = blk * b.rows;
    const int64_t rows = std::min(b.rows, total - g0), tiles = rows * b.tw;
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = (g0 + r) / b.th, ty = (g0 + r) % b.th;
        InputRow(s, b, x + (n * s.C + c) * in_plane, ty, f, f.v + c * tiles + r * b.tw, s.C * tiles, avx2);
      }
    for (int k = 0; k < 16; ++k)
      Gemm<float>(false, false, s.M, tiles, s.C, 1.0f, u + k * s.M * s.C, s.C, f.v + k * s.C * tiles, tiles, 0.0f,
                  f.m + k * s.M * tiles, tiles);
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = (g0 + r) / b.th, ty = (g0 + r) % b.th;
        OutputRow(s, b, f.m + m * tiles + r * b.tw, s.M * tiles, bias ? bias[m] : 0.0f, relu, ty, f,
                  y + (n * s.M + m) * out_plane, avx2);
      }
  }
}

using BlocksFn = void (*)(const WinogradShape &, const Blocking &, const Buffers &, const float *, const float *,
                          const float *, bool, float *, int64_t, int64_t);

void RunBlocksBaseline(const WinogradShape &s, const Blocking &b, const Buffers &f, const float *x, const float *u,
                       const float *bias, bool relu, float *y, int64_t blk0, int64_t blk1) {
  RunBlocks(s, b, f, x, u, bias, relu, y, blk0, blk1, false);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) void RunBlocksAvx2(const WinogradShape &s, const Blocking &b, const Buffers &f,
                                                       const float *x, const float *u, const float *bias, bool relu,
                                                       float *y, int64_t blk0, int64_t blk1) {
  RunBlocks(s, b, f, x, u, bias, relu, y, blk0, blk1, true);
}
#endif

// The blocks, and chunks of them (each of at least kMinChunkMacs multiply-adds) for the intra-op pool; the cut
// depends only on the shape, so results do not depend on the thread count.
struct WgSplit {
  int64_t blocks, grain;
  int slots;
};

WgSplit SplitOf(const WinogradShape &s, const Blocking &b) {
  WgSplit p;
  p.blocks = ChunksOf(s.N * b.th, b.rows);
  const int64_t per_block = 16 * s.M * s.C * b.tiles;
  p.grain = s.N > 1 ? GrainForMacs(per_block) : ChunksOf(kOneImageChunkMacs, per_block);
  p.slots = ScratchSlots::SlotCount(ChunksOf(p.blocks, p.grain));
  return p;
}

size_t SlotFloats(const WinogradShape &s, const Blocking &b) { return Align16(ScratchFloats(s, b)); }

bool Run(const WinogradShape &s, const float *x, const float *u, const float *bias, bool relu, float *y,
         void *scratch, BlocksFn blocks_fn) {
  const Blocking b = BlockingOf(s);
  const WgSplit p = SplitOf(s, b);
  const size_t slot = SlotFloats(s, b);
  float *base = static_cast<float *>(scratch);
  for (int i = 0; i < p.slots; ++i) {
    const Buffers f = Carve(s, b, base + i * slot);
    std::fill(f.chk, f.chk + b.tw, 0.0f);
  }
  ScratchSlots slots(p.slots);
  ParallelFor(p.blocks, p.grain, [&](int64_t lo, int64_t hi) {
    const ScratchSlots::Hold hold(slots);
    blocks_fn(s, b, Carve(s, b, base + hold.index() * slot), x, u, bias, relu, y, lo, hi);
  });
  float bad = 0.0f;
  for (int i = 0; i < p.slots; ++i) {
    const Buffers f = Carve(s, b, base + i * slot);
    for (int64_t t = 0; t < b.tw; ++t) bad += f.chk[t];
  }
  return bad == 0.0f;
}

}  // namespace

// Measured against the AVX2 direct kernel, side by side in one process (1 thread, OpenBLAS sgemm for the 16 GEMMs):
// 16 input channels 1.0-1.25x slower (16x16 to 56x56 images, N = 1 and 32); 32->32 1.06-1.1x slower on one 8x8 or
// 32x32 image, 0.92x with N = 32 at 32x32, 0.74x at 56x56; 64->64 0.85-0.89x from 8x8, ~0.6x at 128x128.
bool WinogradConvPays(const WinogradShape &s) {
  const int64_t tiles = s.N * ((s.OH + 1) / 2) * ((s.OW + 1) / 2);
  return s.C >= 32 && s.M >= 32 && (s.C * s.M >= 4096 || tiles >= 512);
}

size_t WinogradFilterFloats(int64_t C, int64_t M) { return static_cast<size_t>(16 * M * C); }

void WinogradTransformFilter(const float *w, int64_t M, int64_t C, float *u) {
  // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
  static const float kG[4][3] = {{1.0f, 0.0f, 0.0f}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0.0f, 0.0f, 1.0f}};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) {
      const float *g = w + (m * C + c) * 9;
      float t[4][3];  // G g
      for (int a = 0; a < 4; ++a)
        for (int j = 0; j < 3; ++j) t[a][j] = kG[a][0] * g[j] + kG[a][1] * g[3 + j] + kG[a][2] * g[6 + j];
      for (int a = 0; a < 4; ++a)
        for (int bb = 0; bb < 4; ++bb)
          u[((4 * a + bb) * M + m) * C + c] = t[a][0] * kG[bb][0] + t[a][1] * kG[bb][1] + t[a][2] * kG[bb][2];
    }
}

size_t WinogradScratchBytes(const WinogradShape &s) {
  const Blocking b = BlockingOf(s);
  return static_cast<size_t>(SplitOf(s, b).slots) * SlotFloats(s, b) * sizeof(float);
}

bool WinogradConv(const WinogradShape &s, const float *x, const float *u, const float *bias, bool relu, float *y,
                  void *scratch, bool use_avx2) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_avx2) return Run(s, x, u, bias, relu, y, scratch, RunBlocksAvx2);
#else
  (void)use_avx2;
#endif
  return Run(s, x, u, bias, relu, y, scratch, RunBlocksBaseline);
}

}  // namespace onnx
}  // namespace twin
