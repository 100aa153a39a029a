// Einsum: any number of operands, explicit or implicit output, ellipsis broadcasting, repeated labels (diagonals).
// The equation is compiled at prepare time into per-operand strides for every label; the kernel walks the output
// labels and, for each output element, the contracted labels, with incremental offsets (no per-element division).
// Floating types accumulate in double, integers in 64 bits (wrapping like the reference's fixed-width sums).
// Two float32 / float64 operands that form a batched matrix product (attention's "bhqd,bhkd->bhqk", "ij,jk",
// "bij,bjk->bik", ...) run as GEMMs instead (EinsumGemmKernel); three or more are contracted a pair at a time
// (EinsumChainKernel).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#pragma GCC diagnostic ignored "-Wpsabi"  // the vector types below live only inside inlined loops
#endif

#include <algorithm>
#include <cstring>
#include <map>

#include "elem.h"
#include "gemm.h"
#include "intra_op.h"
#include "simd_double.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

constexpr int kEllipsisBase = 1000;  // label ids of ellipsis dims: kEllipsisBase + position from the left

struct Einsum {
  std::vector<std::vector<int>> terms;  // per operand: label per dim (ellipsis expanded)
  std::vector<int> out;                 // output labels
  std::map<int, int64_t> size;          // label -> extent
};

int LabelId(char ch) { return ch >= 'a' && ch <= 'z' ? ch - 'a' : (ch >= 'A' && ch <= 'Z' ? 26 + ch - 'A' : -1); }

// Splits a term into letters with "..." marked as -2; false on bad characters.
bool ParseTerm(const std::string &t, std::vector<int> *labels, std::string *reason) {
  labels->clear();
  bool ell = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "...") == 0) {
      if (ell) {
        *reason = "equation term '" + t + "' has two ellipses";
        return false;
      }
      ell = true;
      labels->push_back(-2);
      i += 2;
      continue;
    }
    const int id = LabelId(t[i]);
    if (id < 0) {
      *reason = "equation term '" + t + "' has the invalid character '" + std::string(1, t[i]) + "'";
      return false;
    }
    labels->push_back(id);
  }
  return true;
}

bool Compile(const Node &n, const std::vector<const TensorDesc *> &in, Einsum *e, std::string *reason) {
  const Attribute *a = n.FindAttr("equation");
  if (!a || a->type != kAttrString) {
    *reason = "attribute 'equation' (string) is required";
    return false;
  }
  std::string eq;
  for (char ch : a->s)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  for (size_t i = 0; i <= lhs.size(); ++i)
    if (i == lhs.size() || lhs[i] == ',') terms.push_back(lhs.substr(start, i - start)), start = i + 1;
  if (terms.size() != in.size()) {
    *reason = "equation '" + a->s + "' has " + std::to_string(terms.size()) + " operands, the node " +
              std::to_string(in.size()) + " inputs";
    return false;
  }
  int64_t ell_rank = 0;
  std::vector<std::vector<int>> raw(terms.size());
  for (size_t k = 0; k < terms.size(); ++k) {
    if (!ParseTerm(terms[k], &raw[k], reason)) return false;
    const bool ell = std::count(raw[k].begin(), raw[k].end(), -2) > 0;
    const int64_t letters = static_cast<int64_t>(raw[k].size()) - (ell ? 1 : 0);
    const int64_t rank = static_cast<int64_t>(in[k]->dims.size());
    if (ell ? rank < letters : rank != letters) {
      *reason = "operand " + std::to_string(k) + " has rank " + std::to_string(rank) + " but term '" + terms[k] +
                "' needs " + std::to_string(letters) + (ell ? " or more" : "");
      return false;
    }
    if (ell) ell_rank = std::max(ell_rank, rank - letters);
  }
  e->terms.assign(terms.size(), {});
  e->size.clear();
  std::map<int, int> count;
  for (size_t k = 0; k < terms.size(); ++k) {
    const auto &dims = in[k]->dims;
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t letters = static_cast<int64_t>(raw[k].size()) - (std::count(raw[k].begin(), raw[k].end(), -2) ? 1 : 0);
    size_t d = 0;
    for (int lab : raw[k]) {
      if (lab == -2) {
        const int64_t m = rank - letters;
        for (int64_t j = 0; j < m; ++j) e->terms[k].push_back(kEllipsisBase + static_cast<int>(ell_rank - m + j)), ++d;
      } else {
        e->terms[k].push_back(lab), ++d;
      }
    }
    for (size_t j = 0; j < e->terms[k].size(); ++j) {
      const int lab = e->terms[k][j];
      const int64_t ext = dims[j];
      auto it = e->size.find(lab);
      if (it == e->size.end() || it->second == 1) {
        e->size[lab] = ext;
      } else if (ext != 1 && ext != it->second && ext >= 0 && it->second >= 0) {
        *reason = "label dims disagree: " + std::to_string(it->second) + " vs " + std::to_string(ext);
        return false;
      }
    }
    std::vector<int> uniq = e->terms[k];
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (int lab : uniq) ++count[lab];
  }
  e->out.clear();
  if (arrow == std::string::npos) {
    for (int64_t j = 0; j < ell_rank; ++j) e->out.push_back(kEllipsisBase + static_cast<int>(j));
    for (const auto &kv : count)  // letters seen once, alphabetically (uppercase sorts before lowercase in ASCII)
      if (kv.first < kEllipsisBase && kv.second == 1) e->out.push_back(kv.first);
    std::stable_sort(e->out.begin() + ell_rank, e->out.end(), [](int x, int y) {
      auto ascii = [](int v) { return v < 26 ? 'a' + v : 'A' + (v - 26); };
      return ascii(x) < ascii(y);
    });
    // Repeated letters within one operand only still count once per operand; a letter repeated in a single term
    // (a diagonal, "ii") is summed in implicit mode, as numpy does.
    std::vector<int> keep;
    for (int lab : e->out) {
      int occurrences = 0;
      for (const auto &t : e->terms) occurrences += static_cast<int>(std::count(t.begin(), t.end(), lab));
      if (lab >= kEllipsisBase || occurrences == 1) keep.push_back(lab);
    }
    e->out = keep;
  } else {
    std::vector<int> o;
    if (!ParseTerm(eq.substr(arrow + 2), &o, reason)) return false;
    for (int lab : o) {
      if (lab == -2) {
        for (int64_t j = 0; j < ell_rank; ++j) e->out.push_back(kEllipsisBase + static_cast<int>(j));
        continue;
      }
      if (!e->size.count(lab) || std::count(e->out.begin(), e->out.end(), lab)) {
        *reason = "output label in '" + a->s + "' is unknown or repeated";
        return false;
      }
      e->out.push_back(lab);
    }
  }
  return true;
}

bool InferEinsum(InferCtx *c, std::string *reason) {
  const ElemType t = c->in[0]->dtype;
  for (const TensorDesc *d : c->in)
    if (d->dtype != t || !IsNumericType(t)) {
      *reason = "operands must share one numeric dtype, got " + DescStr(*d);
      return false;
    }
  Einsum e;
  if (!Compile(*c->node, c->in, &e, reason)) return false;
  c->out[0].dtype = t;
  c->out[0].dims.clear();
  for (int lab : e.out) c->out[0].dims.push_back(e.size[lab]);
  return true;
}

// The non-GEMM Einsum as one loop nest over every label (kept and summed), each loop with a stride per operand and
// for the output (0 for summed labels and broadcast dims). Loops are ordered by total stride, largest outermost,
// so the innermost loop is the one that walks memory most contiguously; adjacent loops that are contiguous for
// every operand are merged so the inner loop is long. The inner loop is then a vectorisable sum of products
// (summed label innermost, "ij->i", "ij,ij->i") or an accumulate into the output row (kept label innermost,
// "ij->j", "i,j->ij").
struct LoopNest {
  std::vector<int64_t> ext;               // outermost first
  std::vector<std::vector<int64_t>> str;  // [operand][loop]; the last row is the output's
};

LoopNest PlanLoops(std::vector<int64_t> ext, std::vector<std::vector<int64_t>> str) {
  std::vector<size_t> order;
  for (size_t l = 0; l < ext.size(); ++l)
    if (ext[l] != 1) order.push_back(l);  // size-1 loops do nothing (and an empty loop empties the nest)
  auto weight = [&](size_t l) {
    int64_t w = 0;
    for (const auto &s : str) w += s[l] < 0 ? -s[l] : s[l];
    return w;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weight(a) > weight(b); });
  LoopNest n;
  n.str.assign(str.size(), {});
  for (size_t l : order) {
    bool merge = !n.ext.empty();
    for (size_t k = 0; merge && k < str.size(); ++k) merge = n.str[k].back() == str[k][l] * ext[l];
    if (merge) {  // the previous (outer) loop steps exactly over this one: one longer loop
      n.ext.back() *= ext[l];
      for (size_t k = 0; k < str.size(); ++k) n.str[k].back() = str[k][l];
      continue;
    }
    n.ext.push_back(ext[l]);
    for (size_t k = 0; k < str.size(); ++k) n.str[k].push_back(str[k][l]);
  }
  if (n.ext.empty()) {
    n.ext.push_back(1);
    for (auto &s : n.str) s.push_back(0);
  }
  return n;
}

#define EINSUM_INLINE inline __attribute__((always_inline))

// Integers accumulate unsigned, 32 bits for types of up to 32 bits (so products and sums vectorise) and 64 bits
// otherwise: the same wrapping sums as the reference's fixed-width ones, modulo the output's width, without signed
// overflow.
template <class S>
using AccOf = typename std::conditional<kIsFloat<S>, double,
                                        typename std::conditional<(sizeof(S) <= 4), uint32_t, uint64_t>::type>::type;

template <class S>
EINSUM_INLINE AccOf<S> Ld(const S *p, int64_t i) {
  return static_cast<AccOf<S>>(Num<S>::Load(p[i]));
}
template <class S>
EINSUM_INLINE S St(AccOf<S> v) {
  if constexpr (kIsFloat<S>) return Num<S>::Store(static_cast<typename Num<S>::C>(v));
  else return static_cast<S>(v);
}

// Index of element j in a loop with stride s, the stride known at compile time when U >= 0.
template <int U>
EINSUM_INLINE int64_t At(int64_t j, int64_t s) {
  return U < 0 ? j * s : j * U;
}

// float32 / float64 sums of unit-stride runs in GCC vector types: four double lanes per vector (one AVX2 register,
// two SSE2 ones on the baseline) and four independent vectors so the adds do not wait on each other.
typedef double V4d __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));
template <class S>
EINSUM_INLINE void Load4(const S *p, V4d *v) {
  if constexpr (std::is_same<S, float>::value) {
    V4f f;
    std::memcpy(&f, p, sizeof f);
    *v = __builtin_convertvector(f, V4d);
  } else {
    std::memcpy(v, p, sizeof *v);
  }
}

#if defined(__x86_64__)
// The same sums with AVX2 intrinsics (GCC splits the generic vectors' float->double conversion into 128-bit
// halves); picked at run time inside SumRunVec / SumRows, in the same order of additions.
bool EinsumAvx2() {
  static const bool use = vmath::ActiveIsa() != vmath::Isa::kBaseline;
  return use;
}
template <class S>
__attribute__((target("avx2"), always_inline)) inline __m256d Wide4(const S *p) {
  if constexpr (std::is_same<S, float>::value) return _mm256_cvtps_pd(_mm_loadu_ps(p));
  else return _mm256_loadu_pd(p);
}
__attribute__((target("avx2"), always_inline)) inline double Lanes4(__m256d q) {
  alignas(32) double l[4];
  _mm256_store_pd(l, q);
  return (l[0] + l[2]) + (l[1] + l[3]);
}
// Four terms of a run from j: a's values (or the constant ca), times b's (or cb) for two operands.
// (A function, not a lambda: clang does not compile a lambda with its enclosing function's target.)
template <class S, int NOps, int UA, int UB>
__attribute__((target("avx2"), always_inline)) inline __m256d RunTerm4(const S *a, const S *b, double ca, double cb,
                                                                       int64_t j) {
  const __m256d va = UA == 1 ? Wide4(a + j) : _mm256_set1_pd(ca);
  if constexpr (NOps == 1) return va;
  else return _mm256_mul_pd(va, UB == 1 ? Wide4(b + j) : _mm256_set1_pd(cb));
}
template <class S, int NOps, int UA, int UB>
__attribute__((target("avx2"))) double SumRunAvx2(const S *a, const S *b, int64_t n) {
  const double ca = UA == 0 ? static_cast<double>(a[0]) : 0, cb = NOps == 2 && UB == 0 ? static_cast<double>(b[0]) : 0;
  __m256d p[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 4; ++k) p[k] = _mm256_add_pd(p[k], RunTerm4<S, NOps, UA, UB>(a, b, ca, cb, j + 4 * k));
  for (; j + 4 <= n; j += 4) p[0] = _mm256_add_pd(p[0], RunTerm4<S, NOps, UA, UB>(a, b, ca, cb, j));
  double t = Lanes4(_mm256_add_pd(_mm256_add_pd(p[0], p[1]), _mm256_add_pd(p[2], p[3])));
  for (; j < n; ++j) {
    const double x = UA == 0 ? ca : static_cast<double>(a[j]);
    if constexpr (NOps == 1) t += x;
    else t += x * (UB == 0 ? cb : static_cast<double>(b[j]));
  }
  return t;
}
template <class S, int NOps, bool kSharedB = false>
__attribute__((target("avx2"))) void SumRowsAvx2(const S *a, int64_t ra, const S *b, int64_t rb, int64_t m,
                                                 int64_t n, double *acc, int64_t so) {
  if constexpr (NOps == 2 && !kSharedB)
    if (rb == 0) return SumRowsAvx2<S, 2, true>(a, ra, b, 0, m, n, acc, so);  // "ij,j->i": convert b once
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    __m256d p[4][2];
    for (int r = 0; r < 4; ++r) p[r][0] = p[r][1] = _mm256_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      __m256d vb[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
      if constexpr (kSharedB) vb[0] = Wide4(b + j), vb[1] = Wide4(b + j + 4);
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h) {
          __m256d va = Wide4(a + (i + r) * ra + j + 4 * h);
          if constexpr (kSharedB) va = _mm256_mul_pd(va, vb[h]);
          else if constexpr (NOps == 2) va = _mm256_mul_pd(va, Wide4(b + (i + r) * rb + j + 4 * h));
          p[r][h] = _mm256_add_pd(p[r][h], va);
        }
    }
    for (int r = 0; r < 4; ++r) {
      double t = Lanes4(_mm256_add_pd(p[r][0], p[r][1]));
      for (int64_t k = j; k < n; ++k) {
        const double x = static_cast<double>(a[(i + r) * ra + k]);
        if constexpr (NOps == 1) t += x;
        else t += x * static_cast<double>(b[(i + r) * rb + k]);
      }
      acc[(i + r) * so] += t;
    }
  }
  for (; i < m; ++i)
    acc[i * so] += SumRunAvx2<S, NOps, 1, 1>(a + i * ra, NOps == 2 ? b + i * rb : nullptr, n);
}
// SumRowsAvx2 with 8-double vectors, for float32 rows when the CPU has AVX-512: the float -> double conversion
// bounds the AVX2 loop (one port), and the 512-bit form converts twice as many floats per instruction. Four rows
// at once, two accumulators per row, then 8-wide steps and a scalar tail (only the order of the double additions
// differs from the AVX2 loop; the products of two floats are exact in double, so fusing them changes nothing).
bool EinsumAvx512() {
  static const bool use = vmath::ActiveIsa() == vmath::Isa::kAvx512;
  return use;
}
// Eight terms of row a (times row b, or the shared b's converted vb) from j. (A function, not a lambda: a lambda
// does not take its enclosing function's target.)
template <int NOps, bool kSharedB>
__attribute__((target("avx512f"), always_inline)) inline __m512d RowTerm8(const float *a, const float *b, int64_t j,
                                                                          __m512d vb) {
  const __m512d va = WidenFloats8(a + j);
  if constexpr (kSharedB) return _mm512_mul_pd(va, vb);
  else if constexpr (NOps == 2) return _mm512_mul_pd(va, WidenFloats8(b + j));
  else return va;
}
// The lane sums of four 8-double vectors as one 4-double vector, reduced together (halves, then hadd) rather than
// each through scalar loads: short rows ("ij->i" with 128 columns) otherwise spend a good part of their time
// there. (The halves go through memory: GCC 12's 512-bit extract / shuffle intrinsics trip -Wmaybe-uninitialized.)
__attribute__((target("avx512f"), always_inline)) inline __m256d SumLanes4x8(__m512d q0, __m512d q1, __m512d q2,
                                                                            __m512d q3) {
  alignas(64) double l[32];
  _mm512_store_pd(l, q0);
  _mm512_store_pd(l + 8, q1);
  _mm512_store_pd(l + 16, q2);
  _mm512_store_pd(l + 24, q3);
  __m256d h[4];
  for (int r = 0; r < 4; ++r) h[r] = _mm256_add_pd(_mm256_load_pd(l + 8 * r), _mm256_load_pd(l + 8 * r + 4));
  const __m256d s01 = _mm256_hadd_pd(h[0], h[1]), s23 = _mm256_hadd_pd(h[2], h[3]);  // [0a 1a 0b 1b], [2a 3a 2b 3b]
  return _mm256_add_pd(_mm256_permute2f128_pd(s01, s23, 0x20), _mm256_permute2f128_pd(s01, s23, 0x31));
}
// Row i of b for a two-operand sum with a row stride (b is null for one operand).
inline const float *RowB(const float *b, int64_t i, int64_t rb) { return b ? b + i * rb : b; }
template <int NOps, bool kSharedB = false>
__attribute__((target("avx512f"))) void SumRowsAvx512(const float *a, int64_t ra, const float *b, int64_t rb,
                                                      int64_t m, int64_t n, double *acc, int64_t so) {
  if constexpr (NOps == 2 && !kSharedB)
    if (rb == 0) return SumRowsAvx512<2, true>(a, ra, b, 0, m, n, acc, so);  // "ij,j->i": convert b once
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    __m512d p[4][2];
    for (int r = 0; r < 4; ++r) p[r][0] = p[r][1] = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      __m512d vb[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
      if constexpr (kSharedB) vb[0] = WidenFloats8(b + j), vb[1] = WidenFloats8(b + j + 8);
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h)
          p[r][h] = _mm512_add_pd(p[r][h], RowTerm8<NOps, kSharedB>(a + (i + r) * ra, RowB(b, i + r, rb), j + 8 * h, vb[h]));
    }
    if (j + 8 <= n) {
      const __m512d vb = kSharedB ? WidenFloats8(b + j) : _mm512_setzero_pd();
      for (int r = 0; r < 4; ++r)
        p[r][0] = _mm512_add_pd(p[r][0], RowTerm8<NOps, kSharedB>(a + (i + r) * ra, RowB(b, i + r, rb), j, vb));
      j += 8;
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, SumLanes4x8(_mm512_add_pd(p[0][0], p[0][1]), _mm512_add_pd(p[1][0], p[1][1]),
                                   _mm512_add_pd(p[2][0], p[2][1]), _mm512_add_pd(p[3][0], p[3][1])));
    for (int r = 0; r < 4; ++r) {
      for (int64_t k = j; k < n; ++k) {
        const double x = static_cast<double>(a[(i + r) * ra + k]);
        if constexpr (NOps == 1) t[r] += x;
        else t[r] += x * static_cast<double>(b[(i + r) * rb + k]);
      }
      acc[(i + r) * so] += t[r];
    }
  }
  for (; i < m; ++i)
    acc[i * so] += SumRunAvx2<float, NOps, 1, 1>(a + i * ra, NOps == 2 ? b + i * rb : nullptr, n);
}
// Short float32 rows ("ij->i" with 32 columns, below SumRowsAvx512's 64) eight at a time, one 8-double accumulator
// per row: the 512-bit conversion widens twice the floats per instruction of the AVX2 loop (which bounded it at
// 1.25-1.3x onnxruntime), and the eight accumulators are reduced together, one result lane per row, by three rounds
// of pairwise adds (the per-row horizontal sums were why 8-wide steps lost on short rows). The ragged end of a row
// by a masked load. Still exact double sums of the float32 values, in another order of additions.
__attribute__((target("avx512f"))) void SumRowsShortAvx512(const float *a, int64_t ra, int64_t m, int64_t n,
                                                           double *acc, int64_t so) {
  const int64_t n8 = n & ~int64_t{7}, tail = n - n8;
  alignas(32) int32_t lanes[8];
  for (int k = 0; k < 8; ++k) lanes[k] = k < tail ? -1 : 0;
  const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i *>(lanes));
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const float *r0 = a + i * ra;
    __m512d v[8];
    for (int r = 0; r < 8; ++r) v[r] = _mm512_setzero_pd();
    for (int64_t j = 0; j < n8; j += 8)
      for (int r = 0; r < 8; ++r) v[r] = _mm512_add_pd(v[r], WidenFloats8(r0 + r * ra + j));
    if (tail)
      for (int r = 0; r < 8; ++r)
        v[r] = _mm512_add_pd(v[r], _mm512_maskz_cvtps_pd(0xff, _mm256_maskload_ps(r0 + r * ra + n8, mask)));
    // (masked forms with full masks: GCC 12 warns that the unmasked 512-bit shuffles read uninitialised operands)
    __m512d p[4];  // pairs of rows: lane 2k + (0|1) holds a partial sum of row 2q or 2q + 1
    for (int q = 0; q < 4; ++q)
      p[q] = _mm512_add_pd(_mm512_maskz_unpacklo_pd(0xff, v[2 * q], v[2 * q + 1]),
                           _mm512_maskz_unpackhi_pd(0xff, v[2 * q], v[2 * q + 1]));
    __m512d h[2];  // 128-bit chunks: [pair 2w, first half], [pair 2w, second], [pair 2w + 1, first], [.., second]
    for (int w = 0; w < 2; ++w)
      h[w] = _mm512_add_pd(_mm512_maskz_shuffle_f64x2(0xff, p[2 * w], p[2 * w + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_maskz_shuffle_f64x2(0xff, p[2 * w], p[2 * w + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512d s = _mm512_add_pd(_mm512_maskz_shuffle_f64x2(0xff, h[0], h[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_maskz_shuffle_f64x2(0xff, h[0], h[1], _MM_SHUFFLE(3, 1, 3, 1)));
    alignas(64) double t[8];  // lane r: row i + r
    _mm512_store_pd(t, s);
    for (int r = 0; r < 8; ++r) acc[(i + r) * so] += t[r];
  }
  for (; i < m; ++i) acc[i * so] += SumRunAvx2<float, 1, 1, 1>(a + i * ra, nullptr, n);
}
// ColumnSumAvx2 below for float32 rows with AVX-512 (the float -> double conversion bounds the loop, and the
// 512-bit form converts twice as many per instruction): the same additions in the same order, 8 columns a step.
__attribute__((target("avx512f"))) void ColumnSumAvx512(const float *a, int64_t sr, int64_t m, double *acc, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const float *r0 = a + i * sr, *r1 = r0 + sr, *r2 = r1 + sr, *r3 = r2 + sr;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m512d lo = _mm512_add_pd(WidenFloats8(r0 + j), WidenFloats8(r1 + j));
      const __m512d hi = _mm512_add_pd(WidenFloats8(r2 + j), WidenFloats8(r3 + j));
      _mm512_storeu_pd(acc + j, _mm512_add_pd(_mm512_loadu_pd(acc + j), _mm512_add_pd(lo, hi)));
    }
    for (; j < n; ++j)
      acc[j] += (static_cast<double>(r0[j]) + static_cast<double>(r1[j])) +
                (static_cast<double>(r2[j]) + static_cast<double>(r3[j]));
  }
  for (; i < m; ++i) {
    const float *r0 = a + i * sr;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm512_storeu_pd(acc + j, _mm512_add_pd(_mm512_loadu_pd(acc + j), WidenFloats8(r0 + j)));
    for (; j < n; ++j) acc[j] += static_cast<double>(r0[j]);
  }
}
// ColumnSum below for float32 / float64 rows, in the same order of additions (GCC leaves its loop scalar at -O2).
template <class S>
__attribute__((target("avx2"))) void ColumnSumAvx2(const S *a, int64_t sr, int64_t m, double *acc, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const S *r0 = a + i * sr, *r1 = r0 + sr, *r2 = r1 + sr, *r3 = r2 + sr;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      for (int h = 0; h < 8; h += 4) {
        const __m256d lo = _mm256_add_pd(Wide4(r0 + j + h), Wide4(r1 + j + h));
        const __m256d hi = _mm256_add_pd(Wide4(r2 + j + h), Wide4(r3 + j + h));
        _mm256_storeu_pd(acc + j + h, _mm256_add_pd(_mm256_loadu_pd(acc + j + h), _mm256_add_pd(lo, hi)));
      }
    for (; j < n; ++j)
      acc[j] += (static_cast<double>(r0[j]) + static_cast<double>(r1[j])) +
                (static_cast<double>(r2[j]) + static_cast<double>(r3[j]));
  }
  for (; i < m; ++i) {
    const S *r0 = a + i * sr;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) _mm256_storeu_pd(acc + j, _mm256_add_pd(_mm256_loadu_pd(acc + j), Wide4(r0 + j)));
    for (; j < n; ++j) acc[j] += static_cast<double>(r0[j]);
  }
}
#endif

// Sum over j < n of a[j] (NOps 1) or a[j*UA] * b[j*UB] with UA, UB in {0, 1} (not both 0).
template <class S, int NOps, int UA, int UB>
EINSUM_INLINE double SumRunVec(const S *a, const S *b, int64_t n) {
#if defined(__x86_64__)
  if (EinsumAvx2()) return SumRunAvx2<S, NOps, UA, UB>(a, b, n);
#endif
  V4d p0 = {0, 0, 0, 0}, p1 = p0, p2 = p0, p3 = p0, va = p0, vb = p0;
  const double ca = UA == 0 ? static_cast<double>(a[0]) : 0, cb = NOps == 2 && UB == 0 ? static_cast<double>(b[0]) : 0;
  auto term = [&](int64_t j, V4d *acc) {
    if constexpr (UA == 1) Load4(a + j, &va);
    else va = V4d{ca, ca, ca, ca};
    if constexpr (NOps == 1) {
      *acc += va;
    } else {
      if constexpr (UB == 1) Load4(b + j, &vb);
      else vb = V4d{cb, cb, cb, cb};
      *acc += va * vb;
    }
  };
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) term(j, &p0), term(j + 4, &p1), term(j + 8, &p2), term(j + 12, &p3);
  for (; j + 4 <= n; j += 4) term(j, &p0);
  p0 = (p0 + p1) + (p2 + p3);
  double t = (p0[0] + p0[2]) + (p0[1] + p0[3]);
  for (; j < n; ++j) {
    const double x = UA == 0 ? ca : static_cast<double>(a[j]);
    if constexpr (NOps == 1) t += x;
    else t += x * (UB == 0 ? cb : static_cast<double>(b[j]));
  }
  return t;
}

// Sum over j < n of a[j*sa] (* b[j*sb]); sixteen partial sums so the compiler can vectorise without
// reassociating, and enough independent chains to hide the add latency.
template <class S, int NOps, int UA, int UB>
EINSUM_INLINE AccOf<S> SumRun(const S *a, int64_t sa, const S *b, int64_t sb, int64_t n) {
  using A = AccOf<S>;
  if constexpr ((std::is_same<S, float>::value || std::is_same<S, double>::value) && UA >= 0 && UB >= 0)
    return SumRunVec<S, NOps, UA, UB>(a, b, n);
  constexpr int kP = 16;
  A part[kP] = {};
  int64_t j = 0;
  for (; j + kP <= n; j += kP)
    for (int u = 0; u < kP; ++u) {
      if constexpr (NOps == 1) part[u] += Ld(a, At<UA>(j + u, sa));
      else part[u] += Ld(a, At<UA>(j + u, sa)) * Ld(b, At<UB>(j + u, sb));
    }
  A tail = 0;
  for (; j < n; ++j) {
    if constexpr (NOps == 1) tail += Ld(a, At<UA>(j, sa));
    else tail += Ld(a, At<UA>(j, sa)) * Ld(b, At<UB>(j, sb));
  }
  for (int w = kP / 2; w > 0; w /= 2)
    for (int u = 0; u < w; ++u) part[u] += part[u + w];
  return part[0] + tail;
}

// Four rows at once of the unit-stride sums above (summed label innermost, a kept label just outside it: "ij->i",
// "ij,ij->i", "ij,j->i"): short rows otherwise spend most of their time in one row's add latency and final
// horizontal sum. acc[i*so] += sum over j < n of a[i*ra + j] (* b[i*rb + j]) for i < m.
template <class S, int NOps>
EINSUM_INLINE void SumRows(const S *a, int64_t ra, const S *b, int64_t rb, int64_t m, int64_t n, double *acc,
                           int64_t so) {
#if defined(__x86_64__)
  if constexpr (std::is_same<S, float>::value)  // short rows: the 8-wide horizontal sums cost more than they save
    if (n >= 64 && EinsumAvx512()) return SumRowsAvx512<NOps>(a, ra, b, rb, m, n, acc, so);
  if constexpr (std::is_same<S, float>::value && NOps == 1)
    if (EinsumAvx512()) return SumRowsShortAvx512(a, ra, m, n, acc, so);
  if (EinsumAvx2()) return SumRowsAvx2<S, NOps>(a, ra, b, rb, m, n, acc, so);
#endif
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    V4d p[4][2];
    for (int r = 0; r < 4; ++r) p[r][0] = p[r][1] = V4d{0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h) {
          V4d va;
          Load4(a + (i + r) * ra + j + 4 * h, &va);
          if constexpr (NOps == 2) {
            V4d vb;
            Load4(b + (i + r) * rb + j + 4 * h, &vb);
            va *= vb;
          }
          p[r][h] += va;
        }
    for (int r = 0; r < 4; ++r) {
      const V4d q = p[r][0] + p[r][1];
      double t = (q[0] + q[2]) + (q[1] + q[3]);
      for (int64_t k = j; k < n; ++k) {
        const double x = static_cast<double>(a[(i + r) * ra + k]);
        if constexpr (NOps == 1) t += x;
        else t += x * static_cast<double>(b[(i + r) * rb + k]);
      }
      acc[(i + r) * so] += t;
    }
  }
  for (; i < m; ++i) acc[i * so] += SumRunVec<S, NOps, 1, 1>(a + i * ra, NOps == 2 ? b + i * rb : nullptr, n);
}

// acc[j] += sum over i < m of a[i*sr + j]: a block of rows summed into one output row ("ij->j", "bij->bj"), four
// rows per pass so the accumulator row is loaded and stored a quarter as often.
template <class S>
EINSUM_INLINE void ColumnSum(const S *a, int64_t sr, int64_t m, AccOf<S> *acc, int64_t n) {
#if defined(__x86_64__)
  if constexpr (std::is_same<S, float>::value)
    if (EinsumAvx512()) return ColumnSumAvx512(a, sr, m, acc, n);
  if constexpr (std::is_same<S, float>::value || std::is_same<S, double>::value)
    if (EinsumAvx2()) return ColumnSumAvx2<S>(a, sr, m, acc, n);
#endif
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const S *r0 = a + i * sr, *r1 = r0 + sr, *r2 = r1 + sr, *r3 = r2 + sr;
    for (int64_t j = 0; j < n; ++j) acc[j] += (Ld(r0, j) + Ld(r1, j)) + (Ld(r2, j) + Ld(r3, j));
  }
  for (; i < m; ++i) {
    const S *r0 = a + i * sr;
    for (int64_t j = 0; j < n; ++j) acc[j] += Ld(r0, j);
  }
}

// acc[j*so] += a[j*sa] (* b[j*sb]) (Accumulate) or y[j*so] = a[j*sa] * b[j*sb] (no summed labels).
template <class S, bool Accumulate, int NOps, int UA, int UB, int UO, class D>
EINSUM_INLINE void RowRun(const S *a, int64_t sa, const S *b, int64_t sb, D *y, int64_t so, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    AccOf<S> v;
    if constexpr (NOps == 1) v = Ld(a, At<UA>(j, sa));
    else v = Ld(a, At<UA>(j, sa)) * Ld(b, At<UB>(j, sb));
    if constexpr (Accumulate) y[At<UO>(j, so)] += v;
    else y[At<UO>(j, so)] = St<S>(v);
  }
}

// The inner loop of n steps for one or two operands at p[0], p[1] with strides s[0], s[1] (output stride s[nops]):
// picks the compile-time unit / zero stride variant so the common shapes vectorise.
template <class S, int NOps>
EINSUM_INLINE void Inner(const S *const *p, const int64_t *s, AccOf<S> *acc, S *y, int64_t n) {
  const S *a = p[0], *b = NOps == 2 ? p[1] : nullptr;
  const int64_t sa = s[0], sb = NOps == 2 ? s[1] : 0, so = s[NOps];
  if (acc && so == 0) {
    AccOf<S> v;
    if (sa == 1 && (NOps == 1 || sb == 1)) v = SumRun<S, NOps, 1, 1>(a, 1, b, 1, n);
    else if (NOps == 2 && sa == 1 && sb == 0) v = SumRun<S, NOps, 1, 0>(a, 1, b, 0, n);
    else if (NOps == 2 && sa == 0 && sb == 1) v = SumRun<S, NOps, 0, 1>(a, 0, b, 1, n);
    else v = SumRun<S, NOps, -1, -1>(a, sa, b, sb, n);
    *acc += v;
    return;
  }
  auto run = [&](auto *dst, auto accumulate) {  // accumulate: into acc (sums) or a plain store into y
    constexpr bool kAcc = decltype(accumulate)::value;
    if (so == 1 && sa == 1 && (NOps == 1 || sb == 1)) RowRun<S, kAcc, NOps, 1, 1, 1>(a, 1, b, 1, dst, 1, n);
    else if (NOps == 2 && so == 1 && sa == 0 && sb == 1) RowRun<S, kAcc, NOps, 0, 1, 1>(a, 0, b, 1, dst, 1, n);
    else if (NOps == 2 && so == 1 && sa == 1 && sb == 0) RowRun<S, kAcc, NOps, 1, 0, 1>(a, 1, b, 0, dst, 1, n);
    else RowRun<S, kAcc, NOps, -1, -1, -1>(a, sa, b, sb, dst, so, n);
  };
  if (acc) run(acc, std::true_type{});
  else run(y, std::false_type{});
}

// Three or more operands: a plain strided product loop.
template <class S>
EINSUM_INLINE void InnerMany(const S *const *p, const int64_t *s, size_t nops, AccOf<S> *acc, S *y, int64_t n) {
  const int64_t so = s[nops];
  for (int64_t j = 0; j < n; ++j) {
    AccOf<S> v = 1;
    for (size_t k = 0; k < nops; ++k) v *= Ld(p[k], j * s[k]);
    if (acc) acc[j * so] += v;
    else y[j * so] = St<S>(v);
  }
}

// Walks the outer loops with an odometer, running the inner loop at each position. acc (summed labels) is the
// output in the accumulator type, or null when every output element is written once.
template <class S>
EINSUM_INLINE void RunNest(const LoopNest &nest, const void *const *in, AccOf<S> *acc, S *y, int64_t *pos,
                           const S **p, int64_t *s) {
  const size_t nops = nest.str.size() - 1;
  size_t r = nest.ext.size();
  for (size_t k = 0; k <= nops; ++k) s[k] = nest.str[k][r - 1];
  for (size_t k = 0; k < nops; ++k) p[k] = static_cast<const S *>(in[k]);
  // One operand read row after row into one accumulator row: the last two loops run as a column sum.
  const bool columns = nops == 1 && acc && r >= 2 && s[0] == 1 && s[1] == 1 && nest.str[1][r - 2] == 0;
  // Unit-stride sums into a kept label just outside: the last two loops run as blocks of rows.
  constexpr bool kVecType = std::is_same<S, float>::value || std::is_same<S, double>::value;
  const bool row_sums = kVecType && !columns && nops <= 2 && acc && r >= 2 && s[0] == 1 && (nops == 1 || s[1] == 1) &&
                        s[nops] == 0 && nest.str[nops][r - 2] != 0;
  const int64_t rows = columns || row_sums ? nest.ext[r - 2] : 1, row_stride = columns || row_sums ? nest.str[0][r - 2] : 0;
  const int64_t b_row_stride = row_sums && nops == 2 ? nest.str[1][r - 2] : 0;
  const int64_t o_row_stride = row_sums ? nest.str[nops][r - 2] : 0;
  if (columns || row_sums) --r;
  int64_t o = 0;
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < r; ++d) outer *= nest.ext[d], pos[d] = 0;
  const int64_t n = nest.ext[nest.ext.size() - 1];
  for (int64_t i = 0; i < outer; ++i) {
    if (columns) {
      ColumnSum<S>(p[0], row_stride, rows, acc + o, n);
    } else if (row_sums) {
      if constexpr (kVecType) {
        if (nops == 1) SumRows<S, 1>(p[0], row_stride, nullptr, 0, rows, n, acc + o, o_row_stride);
        else SumRows<S, 2>(p[0], row_stride, p[1], b_row_stride, rows, n, acc + o, o_row_stride);
      }
    }
    else if (nops == 1) Inner<S, 1>(p, s, acc ? acc + o : nullptr, y + o, n);
    else if (nops == 2) Inner<S, 2>(p, s, acc ? acc + o : nullptr, y + o, n);
    else InnerMany<S>(p, s, nops, acc ? acc + o : nullptr, y + o, n);
    for (size_t d = r - 1; d-- > 0;) {  // advance the outer odometer
      for (size_t k = 0; k < nops; ++k) p[k] += nest.str[k][d];
      o += nest.str[nops][d];
      if (++pos[d] < nest.ext[d]) break;
      for (size_t k = 0; k < nops; ++k) p[k] -= nest.str[k][d] * nest.ext[d];
      o -= nest.str[nops][d] * nest.ext[d];
      pos[d] = 0;
    }
  }
}

template <class S>
void RunNestBase(const LoopNest &nest, const void *const *in, AccOf<S> *acc, S *y, int64_t *pos, const S **p,
                 int64_t *s) {
  RunNest<S>(nest, in, acc, y, pos, p, s);
}
#if defined(__x86_64__)
template <class S>
__attribute__((target("avx2"))) void RunNestAvx2(const LoopNest &nest, const void *const *in, AccOf<S> *acc, S *y,
                                                 int64_t *pos, const S **p, int64_t *s) {
  RunNest<S>(nest, in, acc, y, pos, p, s);
}
#endif

template <class S>
class EinsumKernel : public Kernel {
 public:
  EinsumKernel(LoopNest nest, int64_t out_total, bool summed)
      : nest_(std::move(nest)), total_(out_total), summed_(summed), pos_(nest_.ext.size()),
        p_(nest_.str.size()), s_(nest_.str.size()) {}
  size_t scratch_bytes() const override {
    return summed_ ? sizeof(AccOf<S>) * static_cast<size_t>(total_) : 0;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    S *y = static_cast<S *>(out[0]);
    AccOf<S> *acc = summed_ ? static_cast<AccOf<S> *>(scratch_) : nullptr;
    bool empty = false;
    for (int64_t v : nest_.ext) empty = empty || v == 0;
    if (acc) std::fill(acc, acc + total_, AccOf<S>(0));
    if (empty) {  // nothing to multiply: sums over an empty label are zero
      if (!acc) return true;
    } else {
#if defined(__x86_64__)
      if (vmath::ActiveIsa() != vmath::Isa::kBaseline)
        RunNestAvx2<S>(nest_, in, acc, y, pos_.data(), p_.data(), s_.data());
      else
#endif
        RunNestBase<S>(nest_, in, acc, y, pos_.data(), p_.data(), s_.data());
    }
    if (acc)
      for (int64_t i = 0; i < total_; ++i) y[i] = St<S>(acc[i]);
    return true;
  }

 private:
  LoopNest nest_;
  int64_t total_;
  bool summed_;
  std::vector<int64_t> pos_;
  std::vector<const S *> p_;
  std::vector<int64_t> s_;
};

// One operand, nothing summed: a permutation / diagonal / broadcast, copied as raw elements of B bytes (exact,
// -0.0 and NaN payloads included). When the output's innermost loop is strided in the input but another loop is
// contiguous there, the two are copied in square tiles so both sides stay in cache lines.
template <class B>
EINSUM_INLINE void CopyNest(const LoopNest &nest, const B *x, B *y, int64_t *pos) {
  const size_t r = nest.ext.size();
  const std::vector<int64_t> &xs = nest.str[0], &ys = nest.str[1];
  const size_t a = r - 1;  // output-innermost loop (smallest weight)
  size_t b = r;            // the loop contiguous in the input, when it is not `a`
  for (size_t d = 0; d + 1 < r; ++d)
    if (xs[d] == 1) b = d;
  const int64_t na = nest.ext[a], xa = xs[a], ya = ys[a];
  const int64_t nb = b < r ? nest.ext[b] : 1, yb = b < r ? ys[b] : 0;
  int64_t outer = 1;
  for (size_t d = 0; d < a; ++d)
    if (d != b) outer *= nest.ext[d];
  for (size_t d = 0; d < r; ++d) pos[d] = 0;
  int64_t xo = 0, yo = 0;
  constexpr int64_t kT = 16;
  for (int64_t i = 0; i < outer; ++i) {
    if (b == r) {
      const B *xp = x + xo;
      B *yp = y + yo;
      if (xa == 1 && ya == 1) std::copy(xp, xp + na, yp);
      else
        for (int64_t j = 0; j < na; ++j) yp[j * ya] = xp[j * xa];
    } else {
      for (int64_t b0 = 0; b0 < nb; b0 += kT)
        for (int64_t a0 = 0; a0 < na; a0 += kT) {
          const int64_t bn = std::min(kT, nb - b0), an = std::min(kT, na - a0);
          const B *xp = x + xo + a0 * xa + b0;
          B *yp = y + yo + a0 * ya + b0 * yb;
          if (bn == kT && an == kT && ya == 1) {
            for (int64_t u = 0; u < kT; ++u)
              for (int64_t v = 0; v < kT; ++v) yp[u * yb + v] = xp[v * xa + u];
          } else {
            for (int64_t u = 0; u < bn; ++u)
              for (int64_t v = 0; v < an; ++v) yp[u * yb + v * ya] = xp[v * xa + u];
          }
        }
    }
    for (size_t d = a; d-- > 0;) {  // advance the odometer over the loops other than a and b
      if (d == b) continue;
      xo += xs[d], yo += ys[d];
      if (++pos[d] < nest.ext[d]) break;
      xo -= xs[d] * nest.ext[d], yo -= ys[d] * nest.ext[d];
      pos[d] = 0;
    }
  }
}

template <class B>
void CopyNestBase(const LoopNest &nest, const B *x, B *y, int64_t *pos) {
  CopyNest<B>(nest, x, y, pos);
}
#if defined(__x86_64__)
template <class B>
__attribute__((target("avx2"))) void CopyNestAvx2(const LoopNest &nest, const B *x, B *y, int64_t *pos) {
  CopyNest<B>(nest, x, y, pos);
}
#endif

template <class B>
class EinsumCopyKernel : public Kernel {
 public:
  explicit EinsumCopyKernel(LoopNest nest) : nest_(std::move(nest)), pos_(nest_.ext.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    for (int64_t v : nest_.ext)
      if (v == 0) return true;
    const B *x = static_cast<const B *>(in[0]);
    B *y = static_cast<B *>(out[0]);
#if defined(__x86_64__)
    if (vmath::ActiveIsa() != vmath::Isa::kBaseline) {
      CopyNestAvx2<B>(nest_, x, y, pos_.data());
      return true;
    }
#endif
    CopyNestBase<B>(nest_, x, y, pos_.data());
    return true;
  }

 private:
  LoopNest nest_;
  std::vector<int64_t> pos_;
};

// dst[i] = src[i] over a dims-long index space, each side with its own element strides (the last dim innermost).
template <class T>
void StridedCopy(const T *src, const std::vector<int64_t> &src_str, T *dst, const std::vector<int64_t> &dst_str,
                 const std::vector<int64_t> &ext) {
  const size_t r = ext.size();
  if (r == 0) {
    *dst = *src;
    return;
  }
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < r; ++d) outer *= ext[d];
  const int64_t n = ext[r - 1], ss = src_str[r - 1], ds = dst_str[r - 1];
  std::vector<int64_t> pos(r, 0);
  int64_t so = 0, doff = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) dst[doff + j * ds] = src[so + j * ss];
    for (size_t d = r - 1; d-- > 0;) {  // advance the outer odometer
      so += src_str[d], doff += dst_str[d];
      if (++pos[d] < ext[d]) break;
      so -= src_str[d] * ext[d], doff -= dst_str[d] * ext[d];
      pos[d] = 0;
    }
  }
}

// A two-operand Einsum as C[batch, M, N] = A[batch, M, K] B[batch, K, N]: labels in A, B and the output are batch
// dims, in one operand and the output M or N dims, in both operands only K dims.
struct EinsumGemmPlan {
  struct View {  // how an operand (or the output) relates to its [batch, rows, cols] matrix
    bool in_place = true, trans = false;
    std::vector<int64_t> ext, str;  // when copied: canonical extents and the tensor's strides for them
  };
  int64_t batch = 1, M = 1, N = 1, K = 1;
  View a, b, c;
};

// The plan, or false when the equation is not a plain matrix product: not two operands, a repeated label
// (diagonal), a broadcast (size-1) dim, a label summed within one operand, or an empty dim.
bool PlanEinsumGemm(const Einsum &e, const std::vector<const TensorDesc *> &in, EinsumGemmPlan *p) {
  if (e.terms.size() != 2) return false;
  const auto &ta = e.terms[0], &tb = e.terms[1];
  auto has = [](const std::vector<int> &t, int lab) { return std::count(t.begin(), t.end(), lab) > 0; };
  for (size_t k = 0; k < 2; ++k)
    for (size_t j = 0; j < e.terms[k].size(); ++j) {
      const int lab = e.terms[k][j];
      if (std::count(e.terms[k].begin(), e.terms[k].end(), lab) != 1) return false;
      if (in[k]->dims[j] != e.size.at(lab) || in[k]->dims[j] <= 0) return false;
    }
  std::vector<int> bat, m, n, kk;
  for (int lab : e.out) {
    if (has(ta, lab) && has(tb, lab)) bat.push_back(lab);
    else if (has(ta, lab)) m.push_back(lab);
    else n.push_back(lab);
  }
  for (int lab : ta)
    if (!has(e.out, lab)) {
      if (!has(tb, lab)) return false;
      kk.push_back(lab);
    }
  for (int lab : tb)
    if (!has(e.out, lab) && !has(ta, lab)) return false;
  auto extent = [&](const std::vector<int> &labs) {
    int64_t v = 1;
    for (int lab : labs) v *= e.size.at(lab);
    return v;
  };
  p->batch = extent(bat), p->M = extent(m), p->N = extent(n), p->K = extent(kk);
  auto cat = [](std::vector<int> x, const std::vector<int> &y, const std::vector<int> &z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  // An operand is read in place when its labels are already [batch, rows, cols] (or, allow_trans, [batch, cols,
  // rows]); otherwise it is copied into that order, with the tensor's strides for each canonical dim.
  auto view = [&](const std::vector<int> &term, const std::vector<int> &rows, const std::vector<int> &cols,
                  bool allow_trans, EinsumGemmPlan::View *v) {
    const std::vector<int> canon = cat(bat, rows, cols);
    if (term == canon) return;
    if (allow_trans && term == cat(bat, cols, rows)) {
      v->trans = true;
      return;
    }
    v->in_place = false;
    std::vector<int64_t> full;
    for (int lab : term) full.push_back(e.size.at(lab));
    const std::vector<int64_t> st = Strides(full);
    for (int lab : canon) {
      v->ext.push_back(e.size.at(lab));
      v->str.push_back(st[std::find(term.begin(), term.end(), lab) - term.begin()]);
    }
  };
  view(ta, m, kk, true, &p->a);
  view(tb, kk, n, true, &p->b);
  view(e.out, m, n, false, &p->c);  // C is written [batch, M, N]
  return true;
}

#if defined(__x86_64__)
// y[i] = sum over k < K of a[i*K + k] * b[k] for i < M ("ij,j->i"): float32 FMAs, accumulated in float like the
// GEMM this replaces. Eight rows at a time share each loaded vector of b; their eight sums are reduced together
// (hadd tree) and stored as one vector. The last K % 8 columns go through masked loads (zeros past the row).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 RowsTail(const float *p, __m256i mask) {
  return _mm256_maskload_ps(p, mask);
}
__attribute__((target("avx2,fma"))) void GemvRowsAvx2(const float *a, const float *b, int64_t M, int64_t K, float *y) {
  const int64_t kfull = K / 8 * 8;
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(K - kfull)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 btail = RowsTail(b + kfull, mask);
  int64_t i = 0;
  for (; i + 8 <= M; i += 8) {
    const float *r = a + i * K;
    __m256 acc[8];
    for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
    for (int64_t j = 0; j < kfull; j += 8) {
      const __m256 vb = _mm256_loadu_ps(b + j);
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(r + u * K + j), vb, acc[u]);
    }
    if (kfull < K)
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(RowsTail(r + u * K + kfull, mask), btail, acc[u]);
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  }
  for (; i < M; ++i) {
    const float *r = a + i * K;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = 0; j < kfull; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(r + j), _mm256_loadu_ps(b + j), acc);
    if (kfull < K) acc = _mm256_fmadd_ps(RowsTail(r + kfull, mask), btail, acc);
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    y[i] = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
  }
}
#endif

template <class T>
class EinsumGemmKernel : public Kernel {
 public:
  explicit EinsumGemmKernel(EinsumGemmPlan p) : p_(std::move(p)) {}
  size_t scratch_bytes() const override {
    return sizeof(T) * static_cast<size_t>(Copied(p_.a) + Copied(p_.b) + Copied(p_.c)) + 3 * 64;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    T *scratch = static_cast<T *>(scratch_);
    const T *A = Operand(static_cast<const T *>(in[0]), p_.a, &scratch);
    const T *B = Operand(static_cast<const T *>(in[1]), p_.b, &scratch);
    T *y = static_cast<T *>(out[0]);
    T *C = p_.c.in_place ? y : scratch;
    const int64_t M = p_.M, N = p_.N, K = p_.K;
    // The batch's products are independent calls: shared over the intra-op pool in runs of >= kMinChunkMacs
    // multiply-adds, each computed the same whoever runs it.
    ParallelForAnyCut(p_.batch, GrainForMacs(M * N * K), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) Product(A + i * M * K, B + i * K * N, C + i * M * N);
    });
    if (!p_.c.in_place) StridedCopy(C, Strides(p_.c.ext), y, p_.c.str, p_.c.ext);
    return true;
  }

 private:
  // One batch item: c = a b.
  void Product(const T *a, const T *b, T *c) const {
    const int64_t M = p_.M, N = p_.N, K = p_.K, lda = p_.a.trans ? M : K, ldb = p_.b.trans ? K : N;
    if (K == 1) {
      // An outer product: one rounding per element, as in the GEMM, without its packing and beta pass.
      for (int64_t r = 0; r < M; ++r) {
        const T ar = a[r];
        T *cr = c + r * N;
        for (int64_t j = 0; j < N; ++j) cr[j] = ar * b[j];
      }
    } else if (N == 1) {
      if (Gemv(a, b, M, K, c)) return;
      // A matrix-vector product as the row vector b^T a^T: BLAS is much faster with one row than one column.
      Gemm<T>(false, !p_.a.trans, 1, M, K, T(1), b, K, a, lda, T(0), c, M);
    } else {
      Gemm<T>(p_.a.trans, p_.b.trans, M, N, K, T(1), a, lda, b, ldb, T(0), c, N);
    }
  }
  // float32 "ij,j->i" with A's rows contiguous: the twin's own loop (BLAS's one-row GEMM costs more per call at
  // these sizes); false where it does not apply.
  bool Gemv([[maybe_unused]] const T *a, [[maybe_unused]] const T *b, [[maybe_unused]] int64_t M,
            [[maybe_unused]] int64_t K, [[maybe_unused]] T *c) const {
#if defined(__x86_64__)
    if constexpr (std::is_same<T, float>::value)
      if (!p_.a.trans && EinsumAvx2()) {
        GemvRowsAvx2(a, b, M, K, c);
        return true;
      }
#endif
    return false;
  }
  // Elements of scratch a copied operand takes (a multiple of 64 bytes).
  static int64_t Copied(const EinsumGemmPlan::View &v) {
    if (v.in_place) return 0;
    int64_t n = 1;
    for (int64_t x : v.ext) n *= x;
    return (n * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64 / static_cast<int64_t>(sizeof(T));
  }
  // The operand itself, or its copy in [batch, rows, cols] order at *scratch (advanced past it).
  static const T *Operand(const T *x, const EinsumGemmPlan::View &v, T **scratch) {
    if (v.in_place) return x;
    T *dst = *scratch;
    StridedCopy(x, v.str, dst, Strides(v.ext), v.ext);
    *scratch += Copied(v);
    return dst;
  }
  EinsumGemmPlan p_;
};

// One compiled equation over operands of these shapes: a GEMM, a copy or the loop nest.
std::unique_ptr<Kernel> PrepareCompiled(const Einsum &e, const std::vector<const TensorDesc *> &in, ElemType dtype,
                                        std::string *reason) {
  std::vector<int> sum_labels;
  for (const auto &kv : e.size)
    if (!std::count(e.out.begin(), e.out.end(), kv.first)) sum_labels.push_back(kv.first);
  const size_t nops = in.size();
  // Stride of each label in each operand: summed over the dims it labels (diagonals), 0 where broadcast/absent.
  auto label_strides = [&](const std::vector<int> &labels) {
    std::vector<std::vector<int64_t>> st(nops, std::vector<int64_t>(labels.size(), 0));
    for (size_t k = 0; k < nops; ++k) {
      const std::vector<int64_t> s = Strides(in[k]->dims);
      for (size_t j = 0; j < e.terms[k].size(); ++j) {
        if (in[k]->dims[j] == 1) continue;
        for (size_t l = 0; l < labels.size(); ++l)
          if (labels[l] == e.terms[k][j]) st[k][l] += s[j];
      }
    }
    return st;
  };
  EinsumGemmPlan plan;
  // A product with a single row or column per batch ("ij,ij->i", "bi,bi->b", "ij,j->i") is a batch of dots: the
  // loop nest's row sums beat one tiny GEMM call per batch.
  if (PlanEinsumGemm(e, in, &plan) && (plan.M > 1 || plan.N > 1)) {
    if (dtype == ElemType::kFloat) return std::make_unique<EinsumGemmKernel<float>>(plan);
    if (dtype == ElemType::kDouble) return std::make_unique<EinsumGemmKernel<double>>(plan);
  }
  // Every label as a loop: its extent, its stride in each operand and in the output (0 when summed).
  std::vector<int> labels = e.out;
  labels.insert(labels.end(), sum_labels.begin(), sum_labels.end());
  std::vector<int64_t> ext, out_ext;
  for (int lab : labels) ext.push_back(e.size.at(lab));
  for (int lab : e.out) out_ext.push_back(e.size.at(lab));
  // The nest visits every combination of labels, once per operand: past 2^40 steps a run would not end (40
  // operands of [2] summed to a scalar), so such an equation is refused rather than started.
  int64_t steps = static_cast<int64_t>(nops);
  for (int64_t v : ext) {
    if (v == 0) steps = 0;
    else steps = steps > kMaxElements / v ? kMaxElements + 1 : steps * v;
  }
  if (steps > kMaxElements) {
    *reason = "the equation's loop over its labels would take more than 2^40 steps (" + std::to_string(labels.size()) +
              " labels, " + std::to_string(nops) + " operands)";
    return nullptr;
  }
  std::vector<std::vector<int64_t>> str = label_strides(labels);
  std::vector<int64_t> ostr = Strides(out_ext);
  ostr.resize(labels.size(), 0);
  str.push_back(ostr);
  int64_t out_total = 1;
  for (int64_t v : out_ext) out_total *= v;
  LoopNest nest = PlanLoops(ext, str);
  const size_t bytes = ElemSize(dtype);
  std::unique_ptr<Kernel> k;
  if (nops == 1 && sum_labels.empty() && bytes > 0) {
    if (bytes == 1) return std::make_unique<EinsumCopyKernel<uint8_t>>(nest);
    if (bytes == 2) return std::make_unique<EinsumCopyKernel<uint16_t>>(nest);
    if (bytes == 4) return std::make_unique<EinsumCopyKernel<uint32_t>>(nest);
    if (bytes == 8) return std::make_unique<EinsumCopyKernel<uint64_t>>(nest);
  }
  VisitType(dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      k = std::make_unique<EinsumKernel<S>>(nest, out_total, !sum_labels.empty());
  });
  if (!k) *reason = DtypeNotSupported(dtype);
  return k;
}

// Three or more operands, contracted a pair at a time (the pair whose result is smallest first), as numpy's
// einsum_path and onnxruntime do: "ij,jk,kl->il" is two GEMMs, not one loop over i, j, k and l. A label only one
// operand has and the output lacks is summed out of that operand first ("ij,jk->i": k, then a matrix-vector
// product, not a loop over i, j and k). Each step is an equation of one or two operands prepared as above;
// intermediates live in this kernel's scratch.
class EinsumChainKernel : public Kernel {
 public:
  struct Step {
    std::unique_ptr<Kernel> kernel;
    size_t a = 0, b = 0;  // value slots read (b = a for a step of one operand): inputs first, then results
    size_t offset = 0;    // of the result in scratch (the last step writes the output)
  };
  EinsumChainKernel(std::vector<Step> steps, size_t nops, size_t results, size_t bytes)
      : steps_(std::move(steps)), nops_(nops), results_(results), bytes_(bytes), values_(nops + steps_.size()) {}
  size_t scratch_bytes() const override { return bytes_; }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    char *base = static_cast<char *>(scratch_);
    for (size_t k = 0; k < nops_; ++k) values_[k] = in[k];
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step &st = steps_[i];
      void *result = i + 1 == steps_.size() ? out[0] : base + st.offset;
      const void *operands[2] = {values_[st.a], values_[st.b]};
      st.kernel->set_scratch(base + results_);  // one step runs at a time: their scratch shares one place
      if (!st.kernel->Run(operands, &result, reason)) return false;
      values_[nops_ + i] = result;
    }
    return true;
  }

 private:
  std::vector<Step> steps_;
  size_t nops_, results_, bytes_;
  std::vector<const void *> values_;
};

// Of the two orders of a pair, the one whose GEMM copies least (the output's copy counts double): 0 or 1.
int GemmOrder(const Einsum &sub, const std::vector<const TensorDesc *> &in) {
  int cost[2] = {0, 0};
  for (int swap = 0; swap < 2; ++swap) {
    Einsum e = sub;
    std::vector<const TensorDesc *> d = in;
    if (swap) std::swap(e.terms[0], e.terms[1]), std::swap(d[0], d[1]);
    EinsumGemmPlan p;
    cost[swap] = PlanEinsumGemm(e, d, &p) ? !p.a.in_place + !p.b.in_place + 2 * !p.c.in_place : 4;
  }
  return cost[1] < cost[0] ? 1 : 0;
}

// The chain for e, or nullptr where it does not apply (then the kernels above run e whole): two operands with
// nothing to sum out of one alone, a repeated label or a broadcast dim in a term, an empty dim, a type whose
// intermediates would round (float16: the loop nest sums in double once), or intermediates past the memory limit.
std::unique_ptr<Kernel> PrepareChain(const Einsum &e, const std::vector<const TensorDesc *> &in, ElemType dtype,
                                     uint64_t memory_limit) {
  const size_t nops = in.size();
  if (nops < 2 || !(dtype == ElemType::kFloat || dtype == ElemType::kDouble || dtype == ElemType::kInt32 ||
                    dtype == ElemType::kInt64))
    return nullptr;
  for (size_t k = 0; k < nops; ++k)
    for (size_t j = 0; j < e.terms[k].size(); ++j) {
      const int lab = e.terms[k][j];
      if (std::count(e.terms[k].begin(), e.terms[k].end(), lab) != 1 || in[k]->dims[j] != e.size.at(lab) ||
          in[k]->dims[j] <= 0)
        return nullptr;
    }
  struct Operand {
    std::vector<int> term;
    size_t slot;
  };
  std::vector<Operand> ops;
  for (size_t k = 0; k < nops; ++k) ops.push_back({e.terms[k], k});
  auto has = [](const std::vector<int> &t, int lab) { return std::count(t.begin(), t.end(), lab) > 0; };
  // Whether a label of ops[x] (and ops[y]) is still needed after them: by the output or another operand.
  auto needed = [&](int lab, size_t x, size_t y) {
    if (has(e.out, lab)) return true;
    for (size_t z = 0; z < ops.size(); ++z)
      if (z != x && z != y && has(ops[z].term, lab)) return true;
    return false;
  };
  // The labels a contraction of ops[x] and ops[y] keeps, [both, then x's own, then y's own]: the order
  // PlanEinsumGemm writes in place.
  auto kept = [&](size_t x, size_t y) {
    std::vector<int> labs;
    for (int lab : ops[x].term)
      if (has(ops[y].term, lab) && needed(lab, x, y)) labs.push_back(lab);
    for (int lab : ops[x].term)
      if (!has(ops[y].term, lab) && needed(lab, x, y)) labs.push_back(lab);
    for (int lab : ops[y].term)
      if (!has(ops[x].term, lab) && needed(lab, x, y)) labs.push_back(lab);
    return labs;
  };
  auto elements = [&](const std::vector<int> &labs) {
    int64_t n = 1;
    for (int lab : labs) n = n > kMaxElements / e.size.at(lab) ? kMaxElements + 1 : n * e.size.at(lab);
    return n;
  };
  const size_t esize = ElemSize(dtype);
  std::vector<EinsumChainKernel::Step> steps;
  std::vector<TensorDesc> descs;  // of the intermediates, alive while the steps are prepared
  descs.reserve(2 * nops);
  size_t results = 0, scratch = 0;
  auto desc = [&](const Operand &o) { return o.slot < nops ? in[o.slot] : &descs[o.slot - nops]; };
  auto sized = [&](Einsum *sub) {  // the extents of its labels, from e
    for (const auto &t : sub->terms)
      for (int lab : t) sub->size[lab] = e.size.at(lab);
  };
  // Adds the step computing sub.out from the given operands; false if it cannot be prepared.
  auto add_step = [&](const Einsum &sub, std::vector<const TensorDesc *> d, const std::vector<size_t> &slots,
                      bool last) {
    if (elements(sub.out) > kMaxElements) return false;
    std::string ignored;
    std::unique_ptr<Kernel> k = PrepareCompiled(sub, d, dtype, &ignored);
    if (!k) return false;
    EinsumChainKernel::Step st;
    st.a = slots[0], st.b = slots.back();
    scratch = std::max(scratch, (k->scratch_bytes() + 63) / 64 * 64);
    st.kernel = std::move(k);
    st.offset = results;  // each intermediate keeps its own place: they are few, and small next to the operands
    if (!last) results += (static_cast<size_t>(elements(sub.out)) * esize + 63) / 64 * 64;
    TensorDesc r{dtype, {}};
    for (int lab : sub.out) r.dims.push_back(e.size.at(lab));
    descs.push_back(std::move(r));
    steps.push_back(std::move(st));
    return true;
  };
  // Labels one operand alone has and nothing else needs: summed out of it first.
  bool changed = false;
  for (size_t x = 0; x < ops.size(); ++x) {
    std::vector<int> keep;
    for (int lab : ops[x].term)
      if (needed(lab, x, x)) keep.push_back(lab);
    if (keep.size() == ops[x].term.size()) continue;
    changed = true;
    Einsum sub;
    sub.terms = {ops[x].term};
    sub.out = keep;
    sized(&sub);
    if (!add_step(sub, {desc(ops[x])}, {ops[x].slot}, false)) return nullptr;
    ops[x] = {keep, nops + steps.size() - 1};
  }
  if (nops == 2 && !changed) return nullptr;  // a pair as it is: the kernels above
  while (ops.size() > 1) {
    size_t bx = 0, by = 1;
    int64_t best = -1;
    for (size_t x = 0; x < ops.size(); ++x)
      for (size_t y = x + 1; y < ops.size(); ++y) {
        const int64_t n = elements(kept(x, y));
        if (best < 0 || n < best) best = n, bx = x, by = y;
      }
    const bool last = ops.size() == 2;
    Einsum sub;
    sub.terms = {ops[bx].term, ops[by].term};
    sub.out = last ? e.out : kept(bx, by);
    std::vector<const TensorDesc *> d = {desc(ops[bx]), desc(ops[by])};
    std::vector<size_t> slots = {ops[bx].slot, ops[by].slot};
    sized(&sub);
    if (last && GemmOrder(sub, d)) {  // e.g. "ij,k->ijk" written in place, not as k, i, j then copied
      std::swap(sub.terms[0], sub.terms[1]), std::swap(d[0], d[1]), std::swap(slots[0], slots[1]);
    }
    if (!add_step(sub, d, slots, last)) return nullptr;
    const std::vector<int> term = sub.out;
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(by));
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(bx));
    ops.push_back({term, nops + steps.size() - 1});
  }
  if (memory_limit && results + scratch > memory_limit) return nullptr;
  return std::make_unique<EinsumChainKernel>(std::move(steps), nops, results, results + scratch);
}

std::unique_ptr<Kernel> PrepareEinsum(const KernelCtx &kc, std::string *reason) {
  Einsum e;
  if (!Compile(*kc.node, kc.in, &e, reason)) return nullptr;
  if (std::unique_ptr<Kernel> chain = PrepareChain(e, kc.in, kc.out[0].dtype, kc.memory_limit)) return chain;
  return PrepareCompiled(e, kc.in, kc.out[0].dtype, reason);
}

}  // namespace

void RegisterEinsumOps(std::vector<OpDef> *ops) {
  ops->push_back({"Einsum", 1, 64, 1, 1, nullptr, InferEinsum, PrepareEinsum, true, false, /*variadic=*/true});
}

}  // namespace onnx
}  // namespace twin
