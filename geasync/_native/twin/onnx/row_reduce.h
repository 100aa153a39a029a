// Reductions of a contiguous float32 run, vectorised (AVX2 chosen at run time, laned fallback), for the row
// reductions of several ops (ReduceMax / ReduceMin, ArgMax / ArgMin over the last axis, GlobalAveragePool).
#pragma once

#include <cstdint>

namespace twin {
namespace onnx {

// The largest (kMax) or smallest value of x[0..n), n >= 1, into *out. Returns false, leaving *out unset, when the
// run holds a NaN or the result is a zero: lanes lose which NaN or which signed zero came first, so callers redo
// those rows with their ordered scalar loop.
bool RowExtremum(const float *x, int64_t n, bool max, float *out);

// Sum of x[0..n) in double (independent lanes: only the order of the double additions differs from a loop).
double SumFloats(const float *x, int64_t n);

// Index of the first (or, with last, the last) element of x[0..n) equal to v; n if none.
int64_t FindValue(const float *x, int64_t n, float v, bool last);

}  // namespace onnx
}  // namespace twin
