// Packing and microkernels of the exact int16 x int16 -> int32 GEMM behind the integer matrix products
// (int_gemm.h). AVX2: vpmaddwd multiplies a broadcast pair of A by 16 column pairs of B, 6 rows x 16 columns of
// int32 sums in registers (vpdpwssd where the CPU has AVX-512 VNNI); the baseline runs the same blocking in a loop.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#endif

#include "int_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "vmath.h"

namespace twin {
namespace onnx {
namespace intgemm {
namespace {

constexpr int kMr = 6;      // rows per tile
constexpr int kNr = 16;     // columns per panel
constexpr int64_t kKc = 256;  // K pairs per block: a panel's block (16 KB) stays in L1

inline int32_t Zp(const int32_t *zp, bool per, int64_t i) { return zp ? zp[per ? i : 0] : 0; }
constexpr size_t Round64(size_t n) { return (n + 63) / 64 * 64; }
inline int64_t Round16(int64_t n) { return (n + 15) / 16 * 16; }

template <class S>
void PackARows(const S *src, int64_t lda, int64_t M, int64_t K, const int32_t *zp, bool per, int16_t *dst) {
  const int64_t kp2 = 2 * KPairs(K);
  for (int64_t r = 0; r < M; ++r) {
    const S *__restrict s = src + r * lda;
    int16_t *__restrict d = dst + r * kp2;
    const int z = Zp(zp, per, r);
    for (int64_t k = 0; k < K; ++k) d[k] = static_cast<int16_t>(static_cast<int>(s[k]) - z);
    if (K < kp2) d[K] = 0;
  }
}

// One panel (columns j0 .. j0 + nr, zero past nr), element by element: the baseline and the partial panels.
template <class S>
void PackBPanelScalar(const S *src, int64_t ldb, int64_t K, int64_t j0, int64_t nr, const int32_t *zp, bool per,
                      int16_t *dst) {
  const int64_t kpairs = KPairs(K);
  for (int64_t p = 0; p < kpairs; ++p)
    for (int64_t j = 0; j < kNr; ++j)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t k = 2 * p + h;
        const bool in = j < nr && k < K;
        dst[p * 32 + j * 2 + h] =
            in ? static_cast<int16_t>(static_cast<int>(src[k * ldb + j0 + j]) - Zp(zp, per, j0 + j)) : int16_t(0);
      }
}

#if defined(__x86_64__)
template <class S>
__attribute__((target("avx2"))) inline __m256i Widen16(const S *p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  return std::is_signed<S>::value ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

// A full panel: rows k and k + 1 widened, shifted and interleaved into 16 (b[k], b[k + 1]) pairs.
template <class S>
__attribute__((target("avx2"))) void PackBPanelAvx2(const S *src, int64_t ldb, int64_t K, int64_t j0,
                                                    const int32_t *zp, bool per, int16_t *dst) {
  alignas(32) int16_t z[kNr];
  for (int j = 0; j < kNr; ++j) z[j] = static_cast<int16_t>(Zp(zp, per, j0 + j));
  const __m256i vz = _mm256_load_si256(reinterpret_cast<const __m256i *>(z));
  const int64_t kpairs = KPairs(K);
  for (int64_t p = 0; p < kpairs; ++p, dst += 32) {
    const int64_t k = 2 * p;
    const __m256i r0 = _mm256_sub_epi16(Widen16(src + k * ldb + j0), vz);
    const __m256i r1 = k + 1 < K ? _mm256_sub_epi16(Widen16(src + (k + 1) * ldb + j0), vz) : _mm256_setzero_si256();
    const __m256i lo = _mm256_unpacklo_epi16(r0, r1), hi = _mm256_unpackhi_epi16(r0, r1);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// One row's pair broadcast times the two halves of a panel step, added into that row's sums by DOT(sums, pair,
// panel half): vpmaddwd + vpaddd on AVX2, one vpdpwssd with AVX-512 VNNI (the same exact sums, wrapping alike).
#define TWIN_INTGEMM_ROW(r, DOT)                     \
  if (MR > r) {                                      \
    int32_t w;                                       \
    std::memcpy(&w, a + r * lda + 2 * p, sizeof w);  \
    const __m256i v = _mm256_set1_epi32(w);          \
    s##r##0 = DOT(s##r##0, v, b0);                   \
    if (NB > 1) s##r##1 = DOT(s##r##1, v, b1);       \
  }
#define TWIN_INTGEMM_MADD(s, v, b) _mm256_add_epi32(s, _mm256_madd_epi16(v, b))
#define TWIN_INTGEMM_DPWSSD(s, v, b) _mm256_dpwssd_epi32(s, v, b)
#define TWIN_INTGEMM_DPBUSD(s, v, b) _mm256_dpbusd_epi32(s, v, b)

// One gathered panel, element by element: the baseline, partial panels and panels spanning more than two runs.
template <class S>
void GatherPanelScalar(const S *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t nr, int32_t zp,
                       int16_t *dst) {
  const int64_t kpairs = KPairs(K);
  for (int64_t p = 0; p < kpairs; ++p)
    for (int64_t j = 0; j < kNr; ++j)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t k = 2 * p + h;
        const bool in = j < nr && k < K;
        dst[p * 32 + j * 2 + h] = in ? static_cast<int16_t>(static_cast<int>(src[tap[k] + pos[j]]) - zp) : int16_t(0);
      }
}

// 16 bytes p[0], p[STEP], ..., p[15 STEP] (reads p[0 .. 16 STEP)).
template <int STEP>
__attribute__((target("avx2"))) inline __m128i Load16(const void *p) {
  const __m128i lo = _mm_loadu_si128(static_cast<const __m128i *>(p));
  if (STEP == 1) return lo;
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const char *>(p) + 16));
  const __m128i even_lo = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i even_hi = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 0, 2, 4, 6, 8, 10, 12, 14);
  return _mm_or_si128(_mm_shuffle_epi8(lo, even_lo), _mm_shuffle_epi8(hi, even_hi));
}

// A full gathered panel whose 16 positions are one run (r == 16) or two runs (pos[0] + STEP j for j < r,
// pos[r] + STEP (j - r) after) of an output row (STEP: the stride along it): 16 bytes from each run's start,
// blended, then widened and interleaved as PackBPanelAvx2.
template <class S, int STEP>
__attribute__((target("avx2"))) void GatherPanelAvx2(const S *src, const int64_t *tap, int64_t K, const int64_t *pos,
                                                     int r, int32_t zp, int16_t *dst) {
  const __m256i vz = _mm256_set1_epi16(static_cast<int16_t>(zp));
  const __m128i take2 = _mm_cmpgt_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm_set1_epi8(static_cast<char>(r - 1)));
  const int64_t first = pos[0], second = r < kNr ? pos[r] - STEP * r : pos[0];
  const int64_t kpairs = KPairs(K);
  for (int64_t p = 0; p < kpairs; ++p, dst += 32) {
    __m256i w[2];
    for (int h = 0; h < 2; ++h) {
      const int64_t k = 2 * p + h;
      if (k >= K) {
        w[h] = _mm256_setzero_si256();
        continue;
      }
      const S *t = src + tap[k];
      const __m128i v = _mm_blendv_epi8(Load16<STEP>(t + first), Load16<STEP>(t + second), take2);
      w[h] = _mm256_sub_epi16(std::is_signed<S>::value ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v), vz);
    }
    const __m256i lo = _mm256_unpacklo_epi16(w[0], w[1]), hi = _mm256_unpackhi_epi16(w[0], w[1]);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// Stores (acc: adds to) a tile's sums, s[2 r] and s[2 r + 1] being row r's two halves; masked where nr < 16.
template <int MR, int NB>
__attribute__((always_inline, target("avx2"))) inline void StoreTile(const __m256i *sums, int32_t *c, int64_t ldc,
                                                                     int64_t nr, bool acc) {
  if (nr == kNr) {
    for (int r = 0; r < MR; ++r) {
      __m256i *c0 = reinterpret_cast<__m256i *>(c + r * ldc), *c1 = reinterpret_cast<__m256i *>(c + r * ldc + 8);
      __m256i v0 = sums[2 * r], v1 = sums[2 * r + 1];
      if (acc) {
        v0 = _mm256_add_epi32(v0, _mm256_loadu_si256(c0));
        v1 = _mm256_add_epi32(v1, _mm256_loadu_si256(c1));
      }
      _mm256_storeu_si256(c0, v0);
      _mm256_storeu_si256(c1, v1);
    }
    return;
  }
  // A partial panel: masked loads / stores touch only the nr columns that exist.
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), vn = _mm256_set1_epi32(static_cast<int>(nr));
  const __m256i m0 = _mm256_cmpgt_epi32(vn, lane);
  const __m256i m1 = _mm256_cmpgt_epi32(vn, _mm256_add_epi32(lane, _mm256_set1_epi32(8)));
  for (int r = 0; r < MR; ++r) {
    int *c0 = c + r * ldc, *c1 = c + r * ldc + 8;
    __m256i v0 = sums[2 * r], v1 = sums[2 * r + 1];
    if (acc) v0 = _mm256_add_epi32(v0, _mm256_maskload_epi32(c0, m0));
    _mm256_maskstore_epi32(c0, m0, v0);
    if (NB > 1) {
      if (acc) v1 = _mm256_add_epi32(v1, _mm256_maskload_epi32(c1, m1));
      _mm256_maskstore_epi32(c1, m1, v1);
    }
  }
}

// c[MR, nr] (+)= a[MR, 2 kc] b-panel[kc][16][2]. Each step broadcasts one (a[k], a[k + 1]) pair per row and
// forms a[k] b[k][j] + a[k + 1] b[k + 1][j] exactly (at most 2 * 255^2). The sums are named variables, not an array,
// so that gcc keeps all 12 in registers. NB == 1: only the panel's first 8 columns (a last panel of at most 8
// columns does half the work). One body, two instruction sets (the target attribute cannot be a template argument).
#define TWIN_INTGEMM_TILE(DOT)                                                                                  \
  __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,      \
          s31 = s00, s40 = s00, s41 = s00, s50 = s00, s51 = s00;                                                \
  for (int64_t p = 0; p < kc; ++p, b += 32) {                                                                   \
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b));                                \
    const __m256i b1 = NB > 1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16)) : b0;             \
    TWIN_INTGEMM_ROW(0, DOT)                                                                                    \
    TWIN_INTGEMM_ROW(1, DOT)                                                                                    \
    TWIN_INTGEMM_ROW(2, DOT)                                                                                    \
    TWIN_INTGEMM_ROW(3, DOT)                                                                                    \
    TWIN_INTGEMM_ROW(4, DOT)                                                                                    \
    TWIN_INTGEMM_ROW(5, DOT)                                                                                    \
  }                                                                                                             \
  const __m256i sums[2 * kMr] = {s00, s01, s10, s11, s20, s21, s30, s31, s40, s41, s50, s51};                   \
  StoreTile<MR, NB>(sums, c, ldc, nr, acc);

template <int MR, int NB>
__attribute__((target("avx2"))) void TileAvx2(int64_t kc, const int16_t *a, int64_t lda, const int16_t *b,
                                              int32_t *c, int64_t ldc, int64_t nr, bool acc) {
  TWIN_INTGEMM_TILE(TWIN_INTGEMM_MADD)
}

// AVX-512 VNNI on 256-bit vectors: the same layout, half the instructions per step.
template <int MR, int NB>
__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) void TileVnni(int64_t kc, const int16_t *a, int64_t lda,
                                                                          const int16_t *b, int32_t *c, int64_t ldc,
                                                                          int64_t nr, bool acc) {
  TWIN_INTGEMM_TILE(TWIN_INTGEMM_DPWSSD)
}

// The byte layout (QuadGemm): a step is 4 K of A (one int32 broadcast, unsigned bytes) against 16 columns x 4 K of
// B (64 signed bytes), the same byte geometry as an int16 pair step, so the same body runs on the pointers as int16.
template <int MR, int NB>
__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) void TileQuad(int64_t kc, const int16_t *a, int64_t lda,
                                                                          const int16_t *b, int32_t *c, int64_t ldc,
                                                                          int64_t nr, bool acc) {
  TWIN_INTGEMM_TILE(TWIN_INTGEMM_DPBUSD)
}
#undef TWIN_INTGEMM_TILE
#undef TWIN_INTGEMM_DPBUSD
#undef TWIN_INTGEMM_DPWSSD
#undef TWIN_INTGEMM_MADD
#undef TWIN_INTGEMM_ROW
#endif

// The baseline tile: the same sums in uint32 (wrap-around without signed overflow).
template <int MR>
void TileScalar(int64_t kc, const int16_t *a, int64_t lda, const int16_t *b, int32_t *c, int64_t ldc, int64_t nr,
                bool acc) {
  uint32_t s[MR][kNr] = {};
  for (int64_t p = 0; p < kc; ++p, b += 32)
    for (int r = 0; r < MR; ++r) {
      const int a0 = a[r * lda + 2 * p], a1 = a[r * lda + 2 * p + 1];
      for (int j = 0; j < kNr; ++j) s[r][j] += static_cast<uint32_t>(a0 * b[2 * j] + a1 * b[2 * j + 1]);
    }
  for (int r = 0; r < MR; ++r)
    for (int64_t j = 0; j < nr; ++j) {
      const uint32_t v = acc ? static_cast<uint32_t>(c[r * ldc + j]) + s[r][j] : s[r][j];
      c[r * ldc + j] = static_cast<int32_t>(v);
    }
}

using TileFn = void (*)(int64_t, const int16_t *, int64_t, const int16_t *, int32_t *, int64_t, int64_t, bool);
const TileFn kScalarTiles[kMr] = {TileScalar<1>, TileScalar<2>, TileScalar<3>,
                                  TileScalar<4>, TileScalar<5>, TileScalar<6>};
#if defined(__x86_64__)
const TileFn kAvx2Tiles[kMr] = {TileAvx2<1, 2>, TileAvx2<2, 2>, TileAvx2<3, 2>,
                                TileAvx2<4, 2>, TileAvx2<5, 2>, TileAvx2<6, 2>};
const TileFn kAvx2HalfTiles[kMr] = {TileAvx2<1, 1>, TileAvx2<2, 1>, TileAvx2<3, 1>,
                                    TileAvx2<4, 1>, TileAvx2<5, 1>, TileAvx2<6, 1>};
const TileFn kVnniTiles[kMr] = {TileVnni<1, 2>, TileVnni<2, 2>, TileVnni<3, 2>,
                                TileVnni<4, 2>, TileVnni<5, 2>, TileVnni<6, 2>};
const TileFn kVnniHalfTiles[kMr] = {TileVnni<1, 1>, TileVnni<2, 1>, TileVnni<3, 1>,
                                    TileVnni<4, 1>, TileVnni<5, 1>, TileVnni<6, 1>};
const TileFn kQuadTiles[kMr] = {TileQuad<1, 2>, TileQuad<2, 2>, TileQuad<3, 2>,
                                TileQuad<4, 2>, TileQuad<5, 2>, TileQuad<6, 2>};
const TileFn kQuadHalfTiles[kMr] = {TileQuad<1, 1>, TileQuad<2, 1>, TileQuad<3, 1>,
                                    TileQuad<4, 1>, TileQuad<5, 1>, TileQuad<6, 1>};
#endif

bool UseAvx2() {
#if defined(__x86_64__)
  return vmath::ActiveIsa() != vmath::Isa::kBaseline;
#else
  return false;
#endif
}

// VNNI only where the twin runs its AVX-512 bodies (GEASYNC_TWIN_SIMD=avx2 caps it off, as for every kernel).
bool UseVnni() {
#if defined(__x86_64__)
  static const bool vnni = vmath::ActiveIsa() == vmath::Isa::kAvx512 && __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512vnni");
  return vnni;
#else
  return false;
#endif
}

// The blocking both layouts share: blocks of kKc steps (an int16 pair or a byte quad: 64 bytes of a panel each),
// 16-column panels, 6-row tiles; a's rows lda int16 apart; panels of `steps` steps; the first block stores, the
// later ones add. `half`: the tiles for a last panel of at most 8 columns.
void RunTiles(int64_t M, int64_t N, int64_t steps, const int16_t *a, int64_t lda, const int16_t *b, int32_t *c,
              int64_t ldc, const TileFn *tiles, const TileFn *half) {
  for (int64_t k0 = 0; k0 < steps; k0 += kKc) {
    const int64_t kc = std::min(kKc, steps - k0);
    for (int64_t j0 = 0; j0 < N; j0 += kNr) {
      const int64_t nr = std::min<int64_t>(kNr, N - j0);
      const int16_t *bp = b + (j0 / kNr) * steps * 32 + k0 * 32;
      for (int64_t i0 = 0; i0 < M; i0 += kMr) {
        const int64_t mr = std::min<int64_t>(kMr, M - i0);
        (nr <= kNr / 2 ? half : tiles)[mr - 1](kc, a + i0 * lda + 2 * k0, lda, bp, c + i0 * ldc + j0, ldc, nr, k0 > 0);
      }
    }
  }
}

template <class S>
void PackBAs(const S *src, int64_t ldb, int64_t K, int64_t N, const int32_t *zp, bool per, int16_t *dst) {
  const bool avx2 = UseAvx2();
  const size_t panel = static_cast<size_t>(KPairs(K) * 32);
  for (int64_t j0 = 0; j0 < N; j0 += kNr, dst += panel) {
    const int64_t nr = std::min<int64_t>(kNr, N - j0);
#if defined(__x86_64__)
    if (avx2 && nr == kNr) {
      PackBPanelAvx2(src, ldb, K, j0, zp, per, dst);
      continue;
    }
#endif
    (void)avx2;
    PackBPanelScalar(src, ldb, K, j0, nr, zp, per, dst);
  }
}

template <class S>
void PackBGatherAs(const S *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t n, int32_t zp,
                   int16_t *dst) {
  const bool avx2 = UseAvx2();
  const size_t panel = static_cast<size_t>(KPairs(K) * 32);
  for (int64_t j0 = 0; j0 < n; j0 += kNr, dst += panel) {
    const int64_t nr = std::min<int64_t>(kNr, n - j0);
    const int64_t *ps = pos + j0;
#if defined(__x86_64__)
    const int64_t step = nr > 1 ? ps[1] - ps[0] : 0;
    if (avx2 && nr == kNr && (step == 1 || step == 2)) {
      int r = 1;  // the first run's length, then the second's end
      while (r < kNr && ps[r] == ps[0] + step * r) ++r;
      int e = r + 1;
      while (e < kNr && ps[e] == ps[r] + step * (e - r)) ++e;
      if (e >= kNr) {
        if (step == 1) GatherPanelAvx2<S, 1>(src, tap, K, ps, r, zp, dst);
        else GatherPanelAvx2<S, 2>(src, tap, K, ps, r, zp, dst);
        continue;
      }
    }
#endif
    (void)avx2;
    GatherPanelScalar(src, tap, K, ps, nr, zp, dst);
  }
}


#if defined(__x86_64__)
// ---- The byte path (QuadGemm, int_gemm.h): A + offA as uint8, B - offB as int8, zero points applied after ----

#define TWIN_QUAD_TARGET __attribute__((target("avx2,avx512f,avx512vl,avx512vnni")))

TWIN_QUAD_TARGET inline int32_t HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Rows biased to uint8 (int8 + 128: flipping the sign bit) and zero padded to 4 KQuads(K); sums[r]: the row's sum.
template <class S>
TWIN_QUAD_TARGET void QuadPackARows(const S *src, int64_t lda, int64_t M, int64_t K, uint8_t *dst, int32_t *sums) {
  const int64_t width = 4 * KQuads(K);
  const uint8_t flip = std::is_signed<S>::value ? 0x80 : 0;
  const __m256i vflip = _mm256_set1_epi8(static_cast<char>(flip)), ones = _mm256_set1_epi8(1);
  for (int64_t r = 0; r < M; ++r) {
    const uint8_t *s = reinterpret_cast<const uint8_t *>(src + r * lda);
    uint8_t *d = dst + r * width;
    __m256i acc = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + k)), vflip);
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(d + k), v);
      acc = _mm256_dpbusd_epi32(acc, v, ones);  // unsigned bytes times 1, four per lane
    }
    uint32_t sum = static_cast<uint32_t>(HorizontalSum(acc));
    for (; k < K; ++k) d[k] = static_cast<uint8_t>(s[k] ^ flip), sum += d[k];
    for (; k < width; ++k) d[k] = 0;
    sums[r] = static_cast<int32_t>(sum);
  }
}

// One panel of 16 columns, [KQuads][16][4] signed bytes (uint8 - 128: the sign bit flipped), columns past nr and
// K past K zero; colsum[0 .. 16): the columns' sums (zero on entry). Full panels interleave four 16-byte rows with two unpack levels.
template <class S>
TWIN_QUAD_TARGET void QuadPackBPanel(const S *src, int64_t ldb, int64_t K, int64_t j0, int64_t nr, int8_t *dst,
                                     int32_t *colsum) {
  const uint8_t flip = std::is_signed<S>::value ? 0 : 0x80;
  const int64_t quads = KQuads(K);
  if (nr < kNr) {
    for (int64_t p = 0; p < quads; ++p)
      for (int64_t j = 0; j < kNr; ++j)
        for (int64_t h = 0; h < 4; ++h) {
          const int64_t k = 4 * p + h;
          const bool in = j < nr && k < K;
          const int8_t v = in ? static_cast<int8_t>(static_cast<uint8_t>(src[k * ldb + j0 + j]) ^ flip) : 0;
          dst[p * 64 + j * 4 + h] = v;
          colsum[j] += v;
        }
    return;
  }
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(flip));
  const __m256i ones = _mm256_set1_epi8(1);
  __m256i lo_sum = _mm256_setzero_si256(), hi_sum = lo_sum;
  for (int64_t p = 0; p < quads; ++p) {
    __m128i r[4];
    for (int h = 0; h < 4; ++h) {
      const int64_t k = 4 * p + h;
      r[h] = k < K ? _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + k * ldb + j0)), vflip)
                   : _mm_setzero_si128();
    }
    const __m128i t01l = _mm_unpacklo_epi8(r[0], r[1]), t01h = _mm_unpackhi_epi8(r[0], r[1]);
    const __m128i t23l = _mm_unpacklo_epi8(r[2], r[3]), t23h = _mm_unpackhi_epi8(r[2], r[3]);
    const __m256i lo = _mm256_setr_m128i(_mm_unpacklo_epi16(t01l, t23l), _mm_unpackhi_epi16(t01l, t23l));
    const __m256i hi = _mm256_setr_m128i(_mm_unpacklo_epi16(t01h, t23h), _mm_unpackhi_epi16(t01h, t23h));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + p * 64), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + p * 64 + 32), hi);
    lo_sum = _mm256_dpbusd_epi32(lo_sum, ones, lo);  // 1 times four signed bytes: each column's quad sum
    hi_sum = _mm256_dpbusd_epi32(hi_sum, ones, hi);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(colsum), lo_sum);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(colsum + 8), hi_sum);
}

// The four byte rows r[0 .. 4) (16 columns each) interleaved into a panel step [16][4], stored at dst; each
// column's quad sum added into lo_sum (columns 0 .. 8) and hi_sum (8 .. 16).
TWIN_QUAD_TARGET inline void QuadStoreStep(const __m128i *r, int8_t *dst, __m256i *lo_sum, __m256i *hi_sum) {
  const __m256i ones = _mm256_set1_epi8(1);
  const __m128i t01l = _mm_unpacklo_epi8(r[0], r[1]), t01h = _mm_unpackhi_epi8(r[0], r[1]);
  const __m128i t23l = _mm_unpacklo_epi8(r[2], r[3]), t23h = _mm_unpackhi_epi8(r[2], r[3]);
  const __m256i lo = _mm256_setr_m128i(_mm_unpacklo_epi16(t01l, t23l), _mm_unpackhi_epi16(t01l, t23l));
  const __m256i hi = _mm256_setr_m128i(_mm_unpacklo_epi16(t01h, t23h), _mm_unpackhi_epi16(t01h, t23h));
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 32), hi);
  *lo_sum = _mm256_dpbusd_epi32(*lo_sum, ones, lo);  // 1 times four signed bytes: each column's quad sum
  *hi_sum = _mm256_dpbusd_epi32(*hi_sum, ones, hi);
}

// One gathered panel in the byte layout, element by element (partial panels, irregular positions): b[k][j] =
// src[tap[k] + pos[j]] with the sign bit flipped for uint8; colsum[0 .. 16) set to the columns' sums.
template <class S>
void QuadGatherPanelScalar(const S *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t nr, int8_t *dst,
                           int32_t *colsum) {
  const uint8_t flip = std::is_signed<S>::value ? 0 : 0x80;
  for (int64_t j = 0; j < kNr; ++j) colsum[j] = 0;
  for (int64_t p = 0; p < KQuads(K); ++p)
    for (int64_t j = 0; j < kNr; ++j)
      for (int64_t h = 0; h < 4; ++h) {
        const int64_t k = 4 * p + h;
        const int8_t v =
            j < nr && k < K ? static_cast<int8_t>(static_cast<uint8_t>(src[tap[k] + pos[j]]) ^ flip) : int8_t(0);
        dst[p * 64 + j * 4 + h] = v;
        colsum[j] += v;
      }
}

// A full gathered panel of one or two runs (as GatherPanelAvx2): four taps' 16 bytes per step, interleaved.
template <class S, int STEP>
TWIN_QUAD_TARGET void QuadGatherPanel(const S *src, const int64_t *tap, int64_t K, const int64_t *pos, int r,
                                      int8_t *dst, int32_t *colsum) {
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(std::is_signed<S>::value ? 0 : 0x80));
  const __m128i take2 = _mm_cmpgt_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm_set1_epi8(static_cast<char>(r - 1)));
  const int64_t first = pos[0], second = r < kNr ? pos[r] - STEP * r : pos[0];
  const int64_t quads = KQuads(K), full = K / 4;
  __m256i lo_sum = _mm256_setzero_si256(), hi_sum = lo_sum;
  __m128i rows[4];
  for (int64_t p = 0; p < full; ++p, dst += 64) {
    for (int h = 0; h < 4; ++h) {
      const S *t = src + tap[4 * p + h];
      rows[h] = _mm_xor_si128(_mm_blendv_epi8(Load16<STEP>(t + first), Load16<STEP>(t + second), take2), vflip);
    }
    QuadStoreStep(rows, dst, &lo_sum, &hi_sum);
  }
  if (full < quads) {  // the last quad's taps past K are zero
    for (int h = 0; h < 4; ++h) {
      const int64_t k = 4 * full + h;
      const S *t = src + tap[k < K ? k : 0];
      rows[h] = k < K ? _mm_xor_si128(_mm_blendv_epi8(Load16<STEP>(t + first), Load16<STEP>(t + second), take2), vflip)
                      : _mm_setzero_si128();
    }
    QuadStoreStep(rows, dst, &lo_sum, &hi_sum);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(colsum), lo_sum);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(colsum + 8), hi_sum);
}

template <class S>
void QuadPackBGatherAs(const S *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t n, int32_t zp,
                       uint8_t *dst) {
  const int64_t panel = KQuads(K) * 64, n16 = Round16(n);
  int8_t *panels = reinterpret_cast<int8_t *>(dst);
  int32_t *beta = reinterpret_cast<int32_t *>(dst + (n + 15) / 16 * panel);
  int32_t *v = reinterpret_cast<int32_t *>(reinterpret_cast<uint8_t *>(beta) + Round64(static_cast<size_t>(n16) * 4));
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const int64_t nr = std::min<int64_t>(kNr, n - j0);
    const int64_t *ps = pos + j0;
    int8_t *d = panels + j0 / kNr * panel;
    const int64_t step = nr > 1 ? ps[1] - ps[0] : 0;
    if (nr == kNr && (step == 1 || step == 2)) {
      int r = 1;  // the first run's length, then the second's end
      while (r < kNr && ps[r] == ps[0] + step * r) ++r;
      int e = r + 1;
      while (e < kNr && ps[e] == ps[r] + step * (e - r)) ++e;
      if (e >= kNr) {
        if (step == 1) QuadGatherPanel<S, 1>(src, tap, K, ps, r, d, v + j0);
        else QuadGatherPanel<S, 2>(src, tap, K, ps, r, d, v + j0);
        continue;
      }
    }
    QuadGatherPanelScalar(src, tap, K, ps, nr, d, v + j0);
  }
  // beta = zp - offB (offB: 128 for uint8, whose sign bit was flipped); v = colsum - K beta, wrapping as the sums
  const int32_t b = zp - (std::is_signed<S>::value ? 0 : 128);
  const uint32_t kb = static_cast<uint32_t>(K) * static_cast<uint32_t>(b);
  for (int64_t j = 0; j < n16; ++j) {
    beta[j] = j < n ? b : 0;
    v[j] = j < n ? static_cast<int32_t>(static_cast<uint32_t>(v[j]) - kb) : 0;
  }
}

// c[i][j] = d[i][j] - beta[j] u[i] - alpha[i] v[j], in int32 lanes (wrapping, as the sums do).
TWIN_QUAD_TARGET void QuadCorrect(int64_t M, int64_t N, const int32_t *alpha, const int32_t *u, const int32_t *beta,
                                  const int32_t *v, int32_t *c, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    int32_t *row = c + i * ldc;
    const __m256i va = _mm256_set1_epi32(alpha[i]), vu = _mm256_set1_epi32(u[i]);
    int64_t j = 0;
    for (; j + 8 <= N; j += 8) {
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + j));
      x = _mm256_sub_epi32(x, _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(beta + j)), vu));
      x = _mm256_sub_epi32(x, _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(v + j)), va));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(row + j), x);
    }
    const uint32_t ua = static_cast<uint32_t>(alpha[i]), uu = static_cast<uint32_t>(u[i]);
    for (; j < N; ++j)
      row[j] = static_cast<int32_t>(static_cast<uint32_t>(row[j]) - static_cast<uint32_t>(beta[j]) * uu -
                                    ua * static_cast<uint32_t>(v[j]));
  }
}
#undef TWIN_QUAD_TARGET
#endif
}  // namespace

void PackBGather(bool is_signed, const void *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t p0,
                 int64_t n, int32_t zp, int16_t *dst) {
  if (is_signed) PackBGatherAs(static_cast<const int8_t *>(src), tap, K, pos + p0, n, zp, dst);
  else PackBGatherAs(static_cast<const uint8_t *>(src), tap, K, pos + p0, n, zp, dst);
}

void PackA(bool is_signed, const void *src, int64_t lda, int64_t M, int64_t K, const int32_t *zp, bool per,
           int16_t *dst) {
  if (is_signed) PackARows(static_cast<const int8_t *>(src), lda, M, K, zp, per, dst);
  else PackARows(static_cast<const uint8_t *>(src), lda, M, K, zp, per, dst);
}

void PackB(bool is_signed, const void *src, int64_t ldb, int64_t K, int64_t N, const int32_t *zp, bool per,
           int16_t *dst) {
  if (is_signed) PackBAs(static_cast<const int8_t *>(src), ldb, K, N, zp, per, dst);
  else PackBAs(static_cast<const uint8_t *>(src), ldb, K, N, zp, per, dst);
}

void Gemm(int64_t M, int64_t N, int64_t K, const int16_t *a, const int16_t *b, int32_t *c, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t kpairs = KPairs(K), lda = 2 * kpairs;
  if (kpairs == 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(c + i * ldc, c + i * ldc + N, 0);
    return;
  }
  const TileFn *tiles = kScalarTiles, *half = kScalarTiles;
#if defined(__x86_64__)
  if (UseVnni()) tiles = kVnniTiles, half = kVnniHalfTiles;
  else if (UseAvx2()) tiles = kAvx2Tiles, half = kAvx2HalfTiles;
#endif
  RunTiles(M, N, kpairs, a, lda, b, c, ldc, tiles, half);
}


// Byte layouts: A [M][4 KQuads] uint8 at 64-byte rounded size, then alpha[M] and u[M] (int32); B panels
// [ceil(N / 16)][KQuads][16][4] int8, then beta[Round16(N)] and v[Round16(N)] (int32).
bool QuadPath() {
#if defined(__x86_64__)
  return UseVnni();
#else
  return false;
#endif
}

size_t QuadABytes(int64_t M, int64_t K) {
  return Round64(static_cast<size_t>(M * 4 * KQuads(K))) + 2 * Round64(static_cast<size_t>(M) * 4);
}

size_t QuadBBytes(int64_t K, int64_t N) {
  return static_cast<size_t>((N + 15) / 16 * KQuads(K) * 64) + 2 * Round64(static_cast<size_t>(Round16(N)) * 4);
}

void QuadPackA(bool is_signed, const void *src, int64_t lda, int64_t M, int64_t K, const int32_t *zp, bool per,
               uint8_t *dst) {
#if defined(__x86_64__)
  const size_t rows = Round64(static_cast<size_t>(M * 4 * KQuads(K)));
  int32_t *alpha = reinterpret_cast<int32_t *>(dst + rows);
  int32_t *u = reinterpret_cast<int32_t *>(dst + rows + Round64(static_cast<size_t>(M) * 4));
  if (is_signed) QuadPackARows(static_cast<const int8_t *>(src), lda, M, K, dst, u);
  else QuadPackARows(static_cast<const uint8_t *>(src), lda, M, K, dst, u);
  for (int64_t i = 0; i < M; ++i) alpha[i] = (is_signed ? 128 : 0) + Zp(zp, per, i);
#else
  (void)is_signed, (void)src, (void)lda, (void)M, (void)K, (void)zp, (void)per, (void)dst;
#endif
}

void QuadPackB(bool is_signed, const void *src, int64_t ldb, int64_t K, int64_t N, const int32_t *zp, bool per,
               uint8_t *dst) {
#if defined(__x86_64__)
  const int64_t panel = KQuads(K) * 64, n16 = Round16(N);
  int8_t *panels = reinterpret_cast<int8_t *>(dst);
  int32_t *beta = reinterpret_cast<int32_t *>(dst + (N + 15) / 16 * panel);
  int32_t *v = reinterpret_cast<int32_t *>(reinterpret_cast<uint8_t *>(beta) + Round64(static_cast<size_t>(n16) * 4));
  std::fill(v, v + n16, 0);  // column sums first
  for (int64_t j0 = 0; j0 < N; j0 += kNr) {
    const int64_t nr = std::min<int64_t>(kNr, N - j0);
    int8_t *d = panels + j0 / kNr * panel;
    if (is_signed) QuadPackBPanel(static_cast<const int8_t *>(src), ldb, K, j0, nr, d, v + j0);
    else QuadPackBPanel(static_cast<const uint8_t *>(src), ldb, K, j0, nr, d, v + j0);
  }
  // beta = zb - offB; v = colsum - K beta (uint32: wrapping like the int32 sums)
  for (int64_t j = 0; j < n16; ++j) {
    beta[j] = j < N ? Zp(zp, per, j) - (is_signed ? 0 : 128) : 0;
    const uint32_t kb = static_cast<uint32_t>(K) * static_cast<uint32_t>(beta[j]);
    v[j] = static_cast<int32_t>(static_cast<uint32_t>(v[j]) - kb);
  }
#else
  (void)is_signed, (void)src, (void)ldb, (void)K, (void)N, (void)zp, (void)per, (void)dst;
#endif
}

void QuadPackBGather(bool is_signed, const void *src, const int64_t *tap, int64_t K, const int64_t *pos, int64_t p0,
                     int64_t n, int32_t zp, uint8_t *dst) {
#if defined(__x86_64__)
  if (is_signed) QuadPackBGatherAs(static_cast<const int8_t *>(src), tap, K, pos + p0, n, zp, dst);
  else QuadPackBGatherAs(static_cast<const uint8_t *>(src), tap, K, pos + p0, n, zp, dst);
#else
  (void)is_signed, (void)src, (void)tap, (void)K, (void)pos, (void)p0, (void)n, (void)zp, (void)dst;
#endif
}

void QuadGemm(int64_t M, int64_t N, int64_t K, const uint8_t *a, const uint8_t *b, int32_t *c, int64_t ldc) {
#if defined(__x86_64__)
  if (M <= 0 || N <= 0) return;
  const int64_t quads = KQuads(K), lda = 2 * quads;  // lda in int16 units: the tiles read A as int16 pairs
  const size_t rows = Round64(static_cast<size_t>(M * 4 * quads));
  const int32_t *alpha = reinterpret_cast<const int32_t *>(a + rows);
  const int32_t *u = reinterpret_cast<const int32_t *>(a + rows + Round64(static_cast<size_t>(M) * 4));
  const int32_t *beta = reinterpret_cast<const int32_t *>(b + (N + 15) / 16 * quads * 64);
  const int32_t *v = reinterpret_cast<const int32_t *>(reinterpret_cast<const uint8_t *>(beta) +
                                                       Round64(static_cast<size_t>(Round16(N)) * 4));
  if (quads == 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(c + i * ldc, c + i * ldc + N, 0);
  }
  RunTiles(M, N, quads, reinterpret_cast<const int16_t *>(a), lda, reinterpret_cast<const int16_t *>(b), c, ldc,
           kQuadTiles, kQuadHalfTiles);
  QuadCorrect(M, N, alpha, u, beta, v, c, ldc);
#else
  (void)M, (void)N, (void)K, (void)a, (void)b, (void)c, (void)ldc;
#endif
}

}  // namespace intgemm
}  // namespace onnx
}  // namespace twin
