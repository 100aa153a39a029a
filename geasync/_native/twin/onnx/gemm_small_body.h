// The register-blocked kernels of gemm_small.cc, written once and included once per instruction set (no include
// guard on purpose). The including namespace defines TWIN_GS_TARGET, the vector type V with kW lanes, the mask type
// Mask and the primitives Zero, Set1, Load, Store, MaskOf, LoadMasked, StoreMasked, Fma, SumLanes.
// Every function here carries TWIN_GS_TARGET so that the primitives inline into it.

#define TWIN_GS_INLINE TWIN_GS_TARGET __attribute__((always_inline)) inline

template <bool kMasked>
TWIN_GS_INLINE V LoadPart(const float *p, Mask m) { return kMasked ? LoadMasked(p, m) : Load(p); }
template <bool kMasked>
TWIN_GS_INLINE void StorePart(float *p, Mask m, V v) {
  if (kMasked) StoreMasked(p, m, v);
  else Store(p, v);
}

// One vector of columns of MR rows of C += KC rows of B (stored K x N) times the broadcasts a[r][kk].
template <int MR, int KC, bool kMasked>
TWIN_GS_INLINE void RowsUpdate(const float *b, int64_t ldb, const V (*a)[KC], float *const *c, Mask m) {
  V bv[KC];
  for (int kk = 0; kk < KC; ++kk) bv[kk] = LoadPart<kMasked>(b + kk * ldb, m);
  for (int r = 0; r < MR; ++r) {
    V s = LoadPart<kMasked>(c[r], m);
    for (int kk = 0; kk < KC; ++kk) s = Fma(a[r][kk], bv[kk], s);
    StorePart<kMasked>(c[r], m, s);
  }
}

// acc[r][0..width) += A[i0 + r, k..k+KC) B[k..k+KC, j0..j0+width) (b = &B[k, j0]): B rows stream front to back
// (reading B in column panels instead strides across all K rows for every panel, 2-4x slower once B is past L2).
template <int MR, int KC>
TWIN_GS_TARGET void RowsStep(const SmallGemmArgs &g, int64_t i0, int64_t k, const float *b, float *const *acc,
                             int64_t width) {
  V a[MR][KC];
  for (int r = 0; r < MR; ++r)
    for (int kk = 0; kk < KC; ++kk) a[r][kk] = Set1(g.A[(i0 + r) * g.a_row + (k + kk) * g.a_col]);
  float *c[MR];
  int64_t j = 0;
  for (; j + kW <= width; j += kW) {
    for (int r = 0; r < MR; ++r) c[r] = acc[r] + j;
    RowsUpdate<MR, KC, false>(b + j, g.ldb, a, c, MaskOf(kW));
  }
  if (j < width) {
    for (int r = 0; r < MR; ++r) c[r] = acc[r] + j;
    RowsUpdate<MR, KC, true>(b + j, g.ldb, a, c, MaskOf(static_cast<int>(width - j)));
  }
}

// Rows of B per step: MR x KC broadcasts, KC B vectors and a C vector fit in 16 (AVX2) registers.
constexpr int RowsDepth(int mr) { return mr == 1 ? 8 : mr == 2 ? 4 : mr == 3 ? 3 : 2; }
// Columns per pass. The sums go to a local buffer whose rows are not 4 KiB apart: C's rows often are (N = 1024),
// and a load from one row right after a store to the next then waits on a false dependency (2-5x slower).
constexpr int64_t kRowsChunk = 1024, kRowsPad = 16;

template <int MR>
TWIN_GS_TARGET void RowsAllColumns(const SmallGemmArgs &g, int64_t i0) {
  constexpr int KC = RowsDepth(MR);
  alignas(64) float sums[MR][kRowsChunk + kRowsPad];
  float *acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = sums[r];
  for (int64_t j0 = 0; j0 < g.N; j0 += kRowsChunk) {
    const int64_t width = g.N - j0 < kRowsChunk ? g.N - j0 : kRowsChunk;
    for (int r = 0; r < MR; ++r)
      for (int64_t j = 0; j < width; ++j) sums[r][j] = 0.0f;
    int64_t k = 0;
    for (; k + KC <= g.K; k += KC) RowsStep<MR, KC>(g, i0, k, g.B + k * g.ldb + j0, acc, width);
    for (; k < g.K; ++k) RowsStep<MR, 1>(g, i0, k, g.B + k * g.ldb + j0, acc, width);
    for (int r = 0; r < MR; ++r) {
      float *c = g.C + (i0 + r) * g.ldc + j0;
      if (g.beta == 0.0f) {  // C unread: it may hold anything, NaN included
        for (int64_t j = 0; j < width; ++j) c[j] = g.alpha * sums[r][j];
      } else {
        for (int64_t j = 0; j < width; ++j) c[j] = g.alpha * sums[r][j] + g.beta * c[j];
      }
    }
  }
}

// One k step of the dot-product kernel: MR rows of A against NR rows of B (B stored N x K).
template <int MR, int NR, bool kMasked>
TWIN_GS_INLINE void DotsStep(const float *const *a, const float *const *b, int64_t k, Mask m, V (*acc)[NR]) {
  V bv[NR];
  for (int q = 0; q < NR; ++q) bv[q] = LoadPart<kMasked>(b[q] + k, m);
  for (int r = 0; r < MR; ++r) {
    const V av = LoadPart<kMasked>(a[r] + k, m);
    for (int q = 0; q < NR; ++q) acc[r][q] = Fma(av, bv[q], acc[r][q]);
  }
}

// B stored N x K: C[i0..i0+MR, j0..j0+NR] as dot products, MR rows of A sharing each load of NR rows of B.
template <int MR, int NR>
TWIN_GS_TARGET void DotsPanel(const SmallGemmArgs &g, int64_t i0, int64_t j0) {
  V acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < NR; ++q) acc[r][q] = Zero();
  const float *a[MR];
  const float *b[NR];
  for (int r = 0; r < MR; ++r) a[r] = g.A + (i0 + r) * g.a_row;
  for (int q = 0; q < NR; ++q) b[q] = g.B + (j0 + q) * g.ldb;
  int64_t k = 0;
  for (; k + kW <= g.K; k += kW) DotsStep<MR, NR, false>(a, b, k, MaskOf(kW), acc);  // (mask unused)
  if (k < g.K) DotsStep<MR, NR, true>(a, b, k, MaskOf(static_cast<int>(g.K - k)), acc);
  for (int r = 0; r < MR; ++r) {
    float *c = g.C + (i0 + r) * g.ldc + j0;
    for (int q = 0; q < NR; ++q) {
      const float s = g.alpha * SumLanes(acc[r][q]);
      c[q] = g.beta != 0.0f ? s + g.beta * c[q] : s;
    }
  }
}

// MR rows x NR B rows at a time: MR * NR accumulators, NR B vectors and one A vector in 16 registers.
constexpr int DotsBlock(int mr) { return mr == 1 ? 8 : mr == 2 ? 4 : 2; }

template <int MR>
TWIN_GS_TARGET void DotsAllColumns(const SmallGemmArgs &g, int64_t i0) {
  constexpr int NR = DotsBlock(MR);
  int64_t j = 0;
  for (; j + NR <= g.N; j += NR) DotsPanel<MR, NR>(g, i0, j);
  for (; j < g.N; ++j) DotsPanel<MR, 1>(g, i0, j);
}

// Rows of C in groups of up to 4, each group one pass over B.
TWIN_GS_TARGET void RunSmallGemm(const SmallGemmArgs &g) {
  for (int64_t i = 0; i < g.M; i += 4) {
    const int64_t rows = g.M - i < 4 ? g.M - i : 4;
    if (g.b_transposed) {
      switch (rows) {
        case 1: DotsAllColumns<1>(g, i); break;
        case 2: DotsAllColumns<2>(g, i); break;
        case 3: DotsAllColumns<3>(g, i); break;
        default: DotsAllColumns<4>(g, i); break;
      }
    } else {
      switch (rows) {
        case 1: RowsAllColumns<1>(g, i); break;
        case 2: RowsAllColumns<2>(g, i); break;
        case 3: RowsAllColumns<3>(g, i); break;
        default: RowsAllColumns<4>(g, i); break;
      }
    }
  }
}

#undef TWIN_GS_INLINE
