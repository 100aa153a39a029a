// AVX-512 helpers shared by the kernels that sum float32 data in double (reductions, Einsum rows, normalisation
// moments): 8 floats widened to double, and the horizontal sum of 8 doubles.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace twin {
namespace onnx {

// 8 floats from p as doubles (the unmasked conversion trips GCC 12's -Wmaybe-uninitialized).
__attribute__((target("avx512f"), always_inline)) inline __m512d WidenFloats8(const float *p) {
  return _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(p));
}

// Horizontal sum of 8 doubles through memory (GCC 12 warns, -Wmaybe-uninitialized, inside the reduce-add
// intrinsic's upper-half extraction).
__attribute__((target("avx512f"), always_inline)) inline double SumLanes8(__m512d q) {
  alignas(64) double l[8];
  _mm512_store_pd(l, q);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

}  // namespace onnx
}  // namespace twin
#endif
