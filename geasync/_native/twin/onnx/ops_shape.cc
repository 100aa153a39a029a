// Data-movement ops whose output shape is the interesting part: Reshape (shape input must be known at compile
// time), Flatten, Transpose, Identity. All dtypes are supported since they only move bytes.
#include <algorithm>
#include <cstring>

#include "op_registry.h"
#include "vmath.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

// ---- Identity ----

bool InferIdentity(InferCtx *c, std::string *reason) {
  if (!AnyDtype(c->in[0]->dtype, reason)) return false;
  c->out[0] = *c->in[0];
  return true;
}

std::unique_ptr<Kernel> PrepareCopy(const KernelCtx &c, std::string *) { return MakeCopyKernel(c.out[0].Bytes()); }

// ---- Reshape ----

bool CheckReshape(const Node &n, int64_t opset, std::string *reason) {
  if (opset >= 5 && (n.input_names.size() != 2 || n.input_names[1].empty())) {
    *reason = "expects 2 inputs (data, shape), got " + std::to_string(n.input_names.size());
    return false;
  }
  if (opset < 5) {
    const Attribute *a = n.FindAttr("shape");
    if (!a || a->type != kAttrInts) {
      *reason = "requires an ints attribute 'shape' at opset < 5";
      return false;
    }
  }
  int64_t allowzero;
  return AttrInt(n, "allowzero", 0, &allowzero, reason);
}

bool InferReshape(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  std::vector<int64_t> shape;
  if (c->opset < 5) {
    shape = c->node->FindAttr("shape")->ints;
  } else {
    const TensorDesc &s = *c->in[1];
    if (s.dtype != ElemType::kInt64 || s.dims.size() != 1) {
      *reason = "shape input '" + c->node->input_names[1] + "' must be a 1-D int64 tensor, got " + DescStr(s);
      return false;
    }
    if (!c->in_data[1]) {
      if (c->need_static) c->missing_input = 1;  // CompilePlan may specialise on the runtime value
      if (c->need_static || s.dims[0] < 0 || s.dims[0] > static_cast<int64_t>(kMaxRank)) {
        *reason = "shape input '" + c->node->input_names[1] +
                  "' is not a compile-time constant (it depends on runtime data), which the twin does not support";
        return false;
      }
      c->out[0].dtype = x.dtype;
      c->out[0].dims.assign(s.dims[0], -1);  // rank known, dims not
      return true;
    }
    shape.resize(s.dims[0]);
    CopyBytes(shape.data(), c->in_data[1], shape.size() * sizeof(int64_t));
  }
  int64_t allowzero;
  if (!AttrInt(*c->node, "allowzero", 0, &allowzero, reason)) return false;
  if (shape.size() > kMaxRank) {
    *reason = "target shape has rank " + std::to_string(shape.size()) + ", above the supported maximum";
    return false;
  }
  std::vector<int64_t> out(shape.size());
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t v = shape[i];
    if (v == -1) {
      if (infer_at >= 0) {
        *reason = "target shape has more than one -1";
        return false;
      }
      infer_at = static_cast<int>(i);
      out[i] = -1;
    } else if (v == 0 && !allowzero) {
      if (i >= x.dims.size()) {
        *reason = "target shape copies dimension " + std::to_string(i) +
                  " (0) but the input " + ShapeStr(x.dims) + " has rank " + std::to_string(x.dims.size());
        return false;
      }
      out[i] = x.dims[i];
    } else if (v < 0) {
      *reason = "target shape contains invalid value " + std::to_string(v);
      return false;
    } else {
      if (v == 0) has_zero = true;
      out[i] = v;
    }
  }
  if (has_zero && infer_at >= 0) {
    *reason = "target shape may not contain both 0 and -1 when allowzero=1";
    return false;
  }
  const int64_t in_n = DimsProduct(x.dims, 0, x.dims.size());
  const int64_t known = DimsProduct(out, 0, out.size());  // -1 when an inferred/copied dim is unknown
  std::string target = "[";
  for (size_t i = 0; i < shape.size(); ++i) target += (i ? "," : "") + std::to_string(shape[i]);
  std::string bad = "cannot reshape input of shape " + ShapeStr(x.dims) + " to " + target + "]";
  if (infer_at >= 0) {
    int64_t rest = 1;
    bool rest_unknown = false;
    for (size_t i = 0; i < out.size(); ++i) {
      if (static_cast<int>(i) == infer_at) continue;
      if (out[i] < 0) rest_unknown = true;
      else if (out[i] == 0) rest = 0;
      else if (rest != 0 && !rest_unknown) rest = (rest > kMaxElements / out[i]) ? kMaxElements + 1 : rest * out[i];
    }
    if (!rest_unknown && in_n >= 0) {
      if (rest == 0 || in_n % rest != 0) {
        *reason = bad;
        return false;
      }
      out[infer_at] = in_n / rest;
    }
  } else if (known >= 0 && in_n >= 0 && known != in_n) {
    *reason = bad;
    return false;
  }
  c->out[0].dtype = x.dtype;
  c->out[0].dims = std::move(out);
  return true;
}

// ---- Flatten ----

bool InferFlatten(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  int64_t axis, norm;
  if (!AttrInt(*c->node, "axis", 1, &axis, reason)) return false;
  if (!NormalizeAxis(axis, static_cast<int64_t>(x.dims.size()), true, &norm, reason)) return false;
  c->out[0].dtype = x.dtype;
  c->out[0].dims = {DimsProduct(x.dims, 0, norm), DimsProduct(x.dims, norm, x.dims.size())};
  return true;
}

// ---- Transpose ----

bool ReadPerm(const Node &n, size_t rank, std::vector<int64_t> *perm, std::string *reason) {
  bool present;
  if (!AttrInts(n, "perm", perm, &present, reason)) return false;
  if (!present) {
    perm->resize(rank);
    for (size_t i = 0; i < rank; ++i) (*perm)[i] = static_cast<int64_t>(rank - 1 - i);
    return true;
  }
  std::vector<char> seen(rank, 0);
  bool ok = perm->size() == rank;
  for (size_t i = 0; ok && i < perm->size(); ++i) {
    int64_t p = (*perm)[i];
    if (p < 0) p += static_cast<int64_t>(rank);  // tolerated like onnxruntime
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) ok = false;
    else {
      seen[p] = 1;
      (*perm)[i] = p;
    }
  }
  if (!ok) {
    *reason = "perm is not a permutation of the " + std::to_string(rank) + " input axes";
    return false;
  }
  return true;
}

bool InferTranspose(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  std::vector<int64_t> perm;
  if (!ReadPerm(*c->node, x.dims.size(), &perm, reason)) return false;
  c->out[0].dtype = x.dtype;
  c->out[0].dims.resize(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) c->out[0].dims[i] = x.dims[perm[i]];
  return true;
}

#if defined(__x86_64__)
// One 8x8 block: 8 row loads, an in-register transpose, 8 row stores (named registers: arrays of vectors here were
// kept on the stack).
__attribute__((target("avx2"), always_inline)) inline void Transpose8x8Avx2(const float *src, int64_t is, float *dst,
                                                                           int64_t cols) {
  const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + is), r2 = _mm256_loadu_ps(src + 2 * is),
               r3 = _mm256_loadu_ps(src + 3 * is), r4 = _mm256_loadu_ps(src + 4 * is),
               r5 = _mm256_loadu_ps(src + 5 * is), r6 = _mm256_loadu_ps(src + 6 * is),
               r7 = _mm256_loadu_ps(src + 7 * is);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + cols, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * cols, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * cols, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * cols, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * cols, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * cols, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * cols, _mm256_permute2f128_ps(u3, u7, 0x31));
}
// y[i][j] = x[i + j * is] for 4-byte elements: 8x8 blocks, 8 output rows at a time across up to 2048 columns (the
// 2048 source lines they read, 128 KB, stay in L2 for the next 8 rows); the ragged edges go element by element. Not
// square tiles: with power-of-two row lengths, the 32 output rows of the earlier 32x32 tiles mapped to the same
// cache sets (4x16x128x128 to [0, 3, 1, 2]: 1.9x of onnxruntime -> 0.6; 1024x1024: 0.8 -> 0.6).
__attribute__((target("avx2"))) void TransposeTiled4Avx2(const void *xv, void *yv, int64_t rows, int64_t cols,
                                                           int64_t is) {
  const float *x = static_cast<const float *>(xv);
  float *y = static_cast<float *>(yv);
  const int64_t rows8 = rows & ~int64_t{7}, cols8 = cols & ~int64_t{7};
  constexpr int64_t kColBlock = 2048;
  for (int64_t j0 = 0; j0 < cols8; j0 += kColBlock)
    for (int64_t i = 0; i < rows8; i += 8)
      for (int64_t j = j0; j < std::min(cols8, j0 + kColBlock); j += 8)
        Transpose8x8Avx2(x + i + j * is, is, y + i * cols + j, cols);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j_begin = i < rows8 ? cols8 : 0;
    for (int64_t j = j_begin; j < cols; ++j) y[i * cols + j] = x[i + j * is];
  }
}
// The same for 1-byte elements in 16x16 blocks (SSE2, every x86-64): four rounds of byte interleaves, each pairing
// row k with row k + 8, turn 16 rows into their transpose (the element loop measured 2.7-7x onnxruntime).
void TransposeTiled1Sse2(const void *xv, void *yv, int64_t rows, int64_t cols, int64_t is, int64_t ys) {
  const uint8_t *x = static_cast<const uint8_t *>(xv);
  uint8_t *y = static_cast<uint8_t *>(yv);
  const int64_t rows16 = rows & ~int64_t{15}, cols16 = cols & ~int64_t{15};
  for (int64_t i = 0; i < rows16; i += 16)
    for (int64_t j = 0; j < cols16; j += 16) {
      __m128i v[16], t[16];  // (fully unrolled, so that the arrays are registers)
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) v[r] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i + (j + r) * is));
#pragma GCC unroll 4
      for (int round = 0; round < 4; ++round) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          t[2 * k] = _mm_unpacklo_epi8(v[k], v[k + 8]);
          t[2 * k + 1] = _mm_unpackhi_epi8(v[k], v[k + 8]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) v[r] = t[r];
      }
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) _mm_storeu_si128(reinterpret_cast<__m128i *>(y + (i + r) * ys + j), v[r]);
    }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j_begin = i < rows16 ? cols16 : 0;
    for (int64_t j = j_begin; j < cols; ++j) y[i * ys + j] = x[i + j * is];
  }
}
// The same 16x16 interleaves on two blocks at once, one per 128-bit half of AVX2 registers: the half of register r
// holds input row j + r (low) or j + 16 + r (high), so each result register is 32 contiguous output bytes, and the
// shuffles per byte halve (the SSE2 tiles measured 1.27-1.38x onnxruntime on a 2048x32 uint8 matrix).
__attribute__((target("avx2"))) void TransposeTiled1Avx2(const void *xv, void *yv, int64_t rows, int64_t cols,
                                                           int64_t is) {
  const uint8_t *x = static_cast<const uint8_t *>(xv);
  uint8_t *y = static_cast<uint8_t *>(yv);
  const int64_t rows16 = rows & ~int64_t{15}, cols32 = cols & ~int64_t{31};
  for (int64_t i = 0; i < rows16; i += 16)
    for (int64_t j = 0; j < cols32; j += 32) {
      __m256i v[16], t[16];  // (fully unrolled, so that the arrays are registers)
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        const uint8_t *src = x + i + (j + r) * is;
        v[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src))),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 16 * is)), 1);
      }
#pragma GCC unroll 4
      for (int round = 0; round < 4; ++round) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          t[2 * k] = _mm256_unpacklo_epi8(v[k], v[k + 8]);
          t[2 * k + 1] = _mm256_unpackhi_epi8(v[k], v[k + 8]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) v[r] = t[r];
      }
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + (i + r) * cols + j), v[r]);
    }
  // the columns past the last 32 by the SSE2 tiles (and their edges), then the rows past the last 16
  if (cols32 < cols) TransposeTiled1Sse2(x + cols32 * is, y + cols32, rows, cols - cols32, is, cols);
  for (int64_t i = rows16; i < rows; ++i)
    for (int64_t j = 0; j < cols32; ++j) y[i * cols + j] = x[i + j * is];
}
// The same for 2-byte elements (float16, bfloat16, int16) in 8x8 blocks of SSE2 registers: interleaves of 16-, 32-
// and 64-bit pairs (the generic tiles measured 1.6-1.9x onnxruntime on float16 matrices). Moved as bits.
void TransposeTiled2Sse2(const void *xv, void *yv, int64_t rows, int64_t cols, int64_t is) {
  const uint16_t *x = static_cast<const uint16_t *>(xv);
  uint16_t *y = static_cast<uint16_t *>(yv);
  const int64_t rows8 = rows & ~int64_t{7}, cols8 = cols & ~int64_t{7};
  constexpr int64_t kColBlock = 2048;
  for (int64_t j0 = 0; j0 < cols8; j0 += kColBlock)
    for (int64_t i = 0; i < rows8; i += 8)
      for (int64_t j = j0; j < std::min(cols8, j0 + kColBlock); j += 8) {
        const uint16_t *src = x + i + j * is;
        __m128i v[8], a[8], b[8];  // (fully unrolled, so that the arrays are registers)
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) v[r] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + r * is));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          a[2 * k] = _mm_unpacklo_epi16(v[2 * k], v[2 * k + 1]);
          a[2 * k + 1] = _mm_unpackhi_epi16(v[2 * k], v[2 * k + 1]);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {  // rows 4h..4h+3: a[4h..4h+3] hold their pairs
          b[4 * h] = _mm_unpacklo_epi32(a[4 * h], a[4 * h + 2]);
          b[4 * h + 1] = _mm_unpackhi_epi32(a[4 * h], a[4 * h + 2]);
          b[4 * h + 2] = _mm_unpacklo_epi32(a[4 * h + 1], a[4 * h + 3]);
          b[4 * h + 3] = _mm_unpackhi_epi32(a[4 * h + 1], a[4 * h + 3]);
        }
        uint16_t *dst = y + i * cols + j;
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + 2 * k * cols), _mm_unpacklo_epi64(b[k], b[4 + k]));
          _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + (2 * k + 1) * cols), _mm_unpackhi_epi64(b[k], b[4 + k]));
        }
      }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j_begin = i < rows8 ? cols8 : 0;
    for (int64_t j = j_begin; j < cols; ++j) y[i * cols + j] = x[i + j * is];
  }
}
// The same for 8-byte elements in 4x4 blocks (int64, double, and pairs of floats moved as one: the element loop of
// the generic tiles measured 1.7x onnxruntime there). Moved as integers: any bits, NaN payloads included, as they are.
__attribute__((target("avx2"))) void TransposeTiled8Avx2(const void *xv, void *yv, int64_t rows, int64_t cols,
                                                           int64_t is) {
  const uint64_t *x = static_cast<const uint64_t *>(xv);
  uint64_t *y = static_cast<uint64_t *>(yv);
  const int64_t rows4 = rows & ~int64_t{3}, cols4 = cols & ~int64_t{3};
  constexpr int64_t kColBlock = 2048;
  for (int64_t j0 = 0; j0 < cols4; j0 += kColBlock)
    for (int64_t i = 0; i < rows4; i += 4)
      for (int64_t j = j0; j < std::min(cols4, j0 + kColBlock); j += 4) {
        const uint64_t *src = x + i + j * is;
        const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src)),
                      r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + is)),
                      r2 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + 2 * is)),
                      r3 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + 3 * is));
        const __m256i t0 = _mm256_unpacklo_epi64(r0, r1), t1 = _mm256_unpackhi_epi64(r0, r1),
                      t2 = _mm256_unpacklo_epi64(r2, r3), t3 = _mm256_unpackhi_epi64(r2, r3);
        uint64_t *dst = y + i * cols + j;
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), _mm256_permute2x128_si256(t0, t2, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + cols), _mm256_permute2x128_si256(t1, t3, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 2 * cols), _mm256_permute2x128_si256(t0, t2, 0x31));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 3 * cols), _mm256_permute2x128_si256(t1, t3, 0x31));
      }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j_begin = i < rows4 ? cols4 : 0;
    for (int64_t j = j_begin; j < cols; ++j) y[i * cols + j] = x[i + j * is];
  }
}
#endif

// y[i][j] = x[j * R + i]: R rows out of interleaved input. -O3 (this file builds at -O2, whose cost model leaves
// the strided loads scalar).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif
template <class T, int R>
void Deinterleave(const T *__restrict x, T *__restrict y, int64_t cols) {
  // one pass over x, R output streams: the group of R loads vectorises as loads and permutes (R passes of stride-R
  // loads stayed scalar: 3 channels measured 9x onnxruntime)
  for (int64_t j = 0; j < cols; ++j)
    for (int i = 0; i < R; ++i) y[i * cols + j] = x[j * R + i];
}
// y[i][j] = x[j * rows + i] for C columns: C planes interleaved (the tiles leave a row of 2-4 to their edge loop).
template <class T, int C>
void Interleave(const T *__restrict x, T *__restrict y, int64_t rows) {
  for (int64_t i = 0; i < rows; ++i)
    for (int j = 0; j < C; ++j) y[i * C + j] = x[j * rows + i];
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#if defined(__x86_64__)
// Deinterleave<uint32_t, 3> with AVX-512 (NHWC -> NCHW of 3 channels, 4-byte elements): 16 pixels (three 16-lane
// loads) a step, each channel by two two-source permutes (its lanes from the first two loads, then from the third);
// the compiler's stride-3 loop measured 1.35-1.5x onnxruntime. Moved as integers: any bits, as they are.
__attribute__((target("avx512f"))) void Deinterleave3x4Avx512(const uint32_t *__restrict x, uint32_t *__restrict y,
                                                              int64_t cols) {
  __m512i first[3], second[3];
  for (int c = 0; c < 3; ++c) {
    alignas(64) int32_t a[16], b[16];
    for (int p = 0; p < 16; ++p) {
      const int pos = 3 * p + c;              // its element in the 48 loaded
      a[p] = pos < 32 ? pos : 0;              // from the first two loads (16.. is the second's lane pos - 16)
      b[p] = pos < 32 ? p : 16 + (pos - 32);  // kept, or from the third load
    }
    first[c] = _mm512_load_si512(a);
    second[c] = _mm512_load_si512(b);
  }
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const uint32_t *src = x + 3 * j;
    const __m512i v0 = _mm512_loadu_si512(src), v1 = _mm512_loadu_si512(src + 16), v2 = _mm512_loadu_si512(src + 32);
    for (int c = 0; c < 3; ++c) {
      const __m512i t = _mm512_permutex2var_epi32(v0, first[c], v1);
      _mm512_storeu_si512(y + c * cols + j, _mm512_permutex2var_epi32(t, second[c], v2));
    }
  }
  for (; j < cols; ++j)
    for (int c = 0; c < 3; ++c) y[c * cols + j] = x[j * 3 + c];
}
#endif

template <class T>  // T only fixes the element width
class TransposeKernel : public Kernel {
 public:
  TransposeKernel(std::vector<int64_t> dims, std::vector<int64_t> strides, int64_t total)
      : dims_(std::move(dims)), strides_(std::move(strides)), total_(total), idx_(dims_.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if (total_ == 0) return true;
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    const size_t r = dims_.size();
    const int64_t inner = dims_[r - 1], is = strides_[r - 1];
    std::fill(idx_.begin(), idx_.end(), 0);
    int64_t off = 0;
    if (r >= 2 && strides_[r - 2] == 1 && is != 1) {
      // The second-last output dim is the input's contiguous one: a 2-D transpose per outer index, in tiles.
      const int64_t rows = dims_[r - 2], plane = rows * inner;
      for (int64_t o = 0; o < total_; o += plane) {
        TransposeTiled(x + off, y + o, rows, inner, is);
        NextOffset(r - 2, &off);
      }
      return true;
    }
    if (is == 1) {  // the last axis kept: runs of contiguous elements (is a run-time 1: no vectorised loop)
      for (int64_t o = 0; o < total_; o += inner) {
        CopyBytes(y + o, x + off, static_cast<size_t>(inner) * sizeof(T));
        NextOffset(r - 1, &off);
      }
      return true;
    }
    for (int64_t o = 0; o < total_; o += inner) {
      const T *src = x + off;
      T *dst = y + o;
      for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * is];
      NextOffset(r - 1, &off);
    }
    return true;
  }

 private:
  // Advances the index over output dims [0, end) (last fastest) and the input offset with it.
  void NextOffset(size_t end, int64_t *off) {
    for (size_t d = end; d-- > 0;) {
      *off += strides_[d];
      if (++idx_[d] < dims_[d]) break;
      *off -= strides_[d] * dims_[d];
      idx_[d] = 0;
    }
  }

  // y[i][j] = x[i + j * is] for a rows x cols output: tiles keep the strided source lines in cache while each is
  // read across a tile's rows.
  static void TransposeTiled(const T *__restrict x, T *__restrict y, int64_t rows, int64_t cols, int64_t is) {
    // A few rows read from interleaved input (x is [cols, rows]): the tiles below would leave them all to their
    // element-by-element edge (NCHW of a 2-channel NHWC plane measured 1.8x onnxruntime); a loop of constant stride
    // vectorises.
    if (is == rows && rows == 2) return Deinterleave<T, 2>(x, y, cols);
#if defined(__x86_64__)
    if constexpr (sizeof(T) == 4) {
      static const bool avx512 = vmath::ActiveIsa() == vmath::Isa::kAvx512;
      if (is == rows && rows == 3 && avx512)
        return Deinterleave3x4Avx512(reinterpret_cast<const uint32_t *>(x), reinterpret_cast<uint32_t *>(y), cols);
    }
#endif
    if (is == rows && rows == 3) return Deinterleave<T, 3>(x, y, cols);
    if (is == rows && rows == 4) return Deinterleave<T, 4>(x, y, cols);
    if (is == rows && cols == 2) return Interleave<T, 2>(x, y, rows);
    if (is == rows && cols == 3) return Interleave<T, 3>(x, y, rows);
    if (is == rows && cols == 4) return Interleave<T, 4>(x, y, rows);
    // 8 float32 columns (NCHW -> NHWC of 8 channels): the tiles measured 2.1x onnxruntime, this loop 1.1x
    if (sizeof(T) == 4 && is == rows && cols == 8) return Interleave<T, 8>(x, y, rows);
#if defined(__x86_64__)
    if constexpr (sizeof(T) == 4) {
      static const bool avx2 = vmath::ActiveIsa() != vmath::Isa::kBaseline;
      if (avx2) return TransposeTiled4Avx2(x, y, rows, cols, is);
    }
    if constexpr (sizeof(T) == 1) {
      static const bool avx2 = vmath::ActiveIsa() != vmath::Isa::kBaseline;
      if (avx2) return TransposeTiled1Avx2(x, y, rows, cols, is);
      return TransposeTiled1Sse2(x, y, rows, cols, is, cols);
    }
    if constexpr (sizeof(T) == 2) return TransposeTiled2Sse2(x, y, rows, cols, is);
    if constexpr (sizeof(T) == 8) {
      static const bool avx2 = vmath::ActiveIsa() != vmath::Isa::kBaseline;
      if (avx2) return TransposeTiled8Avx2(x, y, rows, cols, is);
    }
#endif
    constexpr int64_t kTile = 64 / sizeof(T) < 16 ? 16 : 64 / sizeof(T);
    for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile);
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = std::min(cols, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) y[i * cols + j] = x[i + j * is];
      }
    }
  }

  std::vector<int64_t> dims_, strides_;  // output dims and the matching input strides, size-1 dims dropped
  int64_t total_;
  std::vector<int64_t> idx_;
};

std::unique_ptr<Kernel> PrepareTranspose(const KernelCtx &c, std::string *reason) {
  const auto &in = c.in[0]->dims;
  std::vector<int64_t> perm;
  if (!ReadPerm(*c.node, in.size(), &perm, reason)) return nullptr;
  std::vector<int64_t> in_strides(in.size());
  int64_t acc = 1;
  for (size_t i = in.size(); i-- > 0;) {
    in_strides[i] = acc;
    acc *= in[i];
  }
  std::vector<int64_t> dims, strides;
  int64_t total = 1;
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t d = in[perm[i]];
    total *= d;
    if (d == 1) continue;
    if (!dims.empty() && strides.back() == in_strides[perm[i]] * d) {  // contiguous run: merge
      dims.back() *= d;
      strides.back() = in_strides[perm[i]];
      continue;
    }
    dims.push_back(d);
    strides.push_back(in_strides[perm[i]]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back(1);
  }
  size_t esize = ElemSize(c.out[0].dtype);
  // The input's last axes kept last, in runs of up to 8 bytes: moved as one wider element (a copy call per run of 2
  // floats measured 7-10x onnxruntime). Every other input stride is a multiple of the run.
  const int64_t run = dims.back();
  const size_t wide = esize * static_cast<size_t>(run);
  if (dims.size() >= 2 && strides.back() == 1 && run > 1 && (wide == 2 || wide == 4 || wide == 8)) {
    esize = wide;
    total /= run;
    dims.pop_back();
    strides.pop_back();
    for (int64_t &st : strides) st /= run;
  }
  switch (esize) {
    case 1: return std::make_unique<TransposeKernel<uint8_t>>(dims, strides, total);
    case 2: return std::make_unique<TransposeKernel<uint16_t>>(dims, strides, total);
    case 4: return std::make_unique<TransposeKernel<uint32_t>>(dims, strides, total);
    case 8: return std::make_unique<TransposeKernel<uint64_t>>(dims, strides, total);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

}  // namespace

void TransposeFloats(const float *x, float *y, int64_t rows, int64_t cols, int64_t is) {
#if defined(__x86_64__)
  static const bool avx2 = vmath::ActiveIsa() != vmath::Isa::kBaseline;
  if (avx2) return TransposeTiled4Avx2(x, y, rows, cols, is);
#endif
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = x[i + j * is];
}

void RegisterShapeOps(std::vector<OpDef> *ops) {
  ops->push_back({"Identity", 1, 1, 1, 1, nullptr, InferIdentity, PrepareCopy, true});
  ops->push_back({"Reshape", 1, 2, 1, 1, CheckReshape, InferReshape, PrepareCopy, true});
  ops->push_back({"Flatten", 1, 1, 1, 1, nullptr, InferFlatten, PrepareCopy, true});
  ops->push_back({"Transpose", 1, 1, 1, 1, nullptr, InferTranspose, PrepareTranspose, true});
}

}  // namespace onnx
}  // namespace twin
