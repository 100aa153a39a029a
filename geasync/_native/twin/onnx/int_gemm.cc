// Packing and microkernels of the exact int16 x int16 -> int32 GEMM behind the integer matrix products
// (int_gemm.h). AVX2: vpmaddwd multiplies a broadcast pair of A by 16 column pairs of B, 6 rows x 16 columns of
// int32 sums in registers; the baseline build runs the same blocking with a plain loop.
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

// One row's pair broadcast times the two halves of a panel step, added into that row's sums.
#define TWIN_INTGEMM_ROW(r)                                             \
  if (MR > r) {                                                         \
    int32_t w;                                                          \
    std::memcpy(&w, a + r * lda + 2 * p, sizeof w);                     \
    const __m256i v = _mm256_set1_epi32(w);                             \
    s##r##0 = _mm256_add_epi32(s##r##0, _mm256_madd_epi16(v, b0));      \
    if (NB > 1) s##r##1 = _mm256_add_epi32(s##r##1, _mm256_madd_epi16(v, b1)); \
  }

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

// c[MR, nr] (+)= a[MR, 2 kc] b-panel[kc][16][2]. Each step broadcasts one (a[k], a[k + 1]) pair per row;
// vpmaddwd forms a[k] b[k][j] + a[k + 1] b[k + 1][j] exactly (at most 2 * 255^2), vpaddd wraps like int32. The
// sums are named variables, not an array, so that gcc keeps all 12 in registers. NB == 1: only the panel's first
// 8 columns (a last panel of at most 8 columns does half the work).
template <int MR, int NB>
__attribute__((target("avx2"))) void TileAvx2(int64_t kc, const int16_t *a, int64_t lda, const int16_t *b,
                                              int32_t *c, int64_t ldc, int64_t nr, bool acc) {
  __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,
          s31 = s00, s40 = s00, s41 = s00, s50 = s00, s51 = s00;
  for (int64_t p = 0; p < kc; ++p, b += 32) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b));
    const __m256i b1 = NB > 1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16)) : b0;
    TWIN_INTGEMM_ROW(0)
    TWIN_INTGEMM_ROW(1)
    TWIN_INTGEMM_ROW(2)
    TWIN_INTGEMM_ROW(3)
    TWIN_INTGEMM_ROW(4)
    TWIN_INTGEMM_ROW(5)
  }
  const __m256i sums[2 * kMr] = {s00, s01, s10, s11, s20, s21, s30, s31, s40, s41, s50, s51};
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
#endif

bool UseAvx2() {
#if defined(__x86_64__)
  return vmath::ActiveIsa() != vmath::Isa::kBaseline;
#else
  return false;
#endif
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
  if (UseAvx2()) tiles = kAvx2Tiles, half = kAvx2HalfTiles;
#endif
  for (int64_t k0 = 0; k0 < kpairs; k0 += kKc) {
    const int64_t kc = std::min(kKc, kpairs - k0);
    for (int64_t j0 = 0; j0 < N; j0 += kNr) {
      const int64_t nr = std::min<int64_t>(kNr, N - j0);
      const int16_t *bp = b + (j0 / kNr) * kpairs * 32 + k0 * 32;
      for (int64_t i0 = 0; i0 < M; i0 += kMr) {
        const int64_t mr = std::min<int64_t>(kMr, M - i0);
        (nr <= kNr / 2 ? half : tiles)[mr - 1](kc, a + i0 * lda + 2 * k0, lda, bp, c + i0 * ldc + j0, ldc, nr, k0 > 0);
      }
    }
  }
}

}  // namespace intgemm
}  // namespace onnx
}  // namespace twin
