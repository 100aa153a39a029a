// Numpy-style multidirectional broadcasting: shape rule (with unknown dims) and a precomputed two-operand
// iteration plan whose innermost loop is contiguous or scalar for each operand.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "common.h"

namespace twin {
namespace onnx {

// Broadcast result of a and b; -1 propagates. False + reason on a definite mismatch.
bool BroadcastShapes(const Dims &a, const Dims &b, Dims *out, std::string *reason);
bool BroadcastShapes(const Dims &a, const Dims &b, std::vector<int64_t> *out, std::string *reason);

// Iteration plan for out = f(a, b) with static shapes. Size-1 output dims are dropped and mergeable dims
// collapsed; the innermost stride of each operand is 0 (broadcast) or 1.
struct Broadcast2 {
  std::vector<int64_t> dims;    // collapsed output dims (at least one)
  std::vector<int64_t> sa, sb;  // element strides per collapsed dim
  int64_t total = 0;

  void Init(const std::vector<int64_t> &a, const std::vector<int64_t> &b, const std::vector<int64_t> &out);
};

// Calls f(a_ptr, b_ptr, out_ptr, n, a_step, b_step) for each innermost run; counters must hold dims.size() values.
template <class T, class F>
void ForEachRun(const Broadcast2 &bc, const T *a, const T *b, T *out, int64_t *counters, F f) {
  if (bc.total == 0) return;
  const size_t r = bc.dims.size();
  const int64_t inner = bc.dims[r - 1];
  const int64_t ia = bc.sa[r - 1], ib = bc.sb[r - 1];
  for (size_t d = 0; d < r; ++d) counters[d] = 0;
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < bc.total; o += inner) {
    f(a + oa, b + ob, out + o, inner, ia, ib);
    // Advance the outer counters (odometer).
    for (size_t d = r - 1; d-- > 0;) {
      oa += bc.sa[d];
      ob += bc.sb[d];
      if (++counters[d] < bc.dims[d]) break;
      oa -= bc.sa[d] * bc.dims[d];
      ob -= bc.sb[d] * bc.dims[d];
      counters[d] = 0;
    }
  }
}

// Iteration plan over up to kMaxOperands operands broadcast to out (Where, variadic Max/Min, Expand).
struct BroadcastN {
  static constexpr size_t kMaxOperands = 4;
  size_t n = 0;
  Dims dims;                 // collapsed output dims (at least one)
  Dims strides[kMaxOperands];  // element strides per collapsed dim, 0 where broadcast
  int64_t total = 0;

  void Init(std::initializer_list<const Dims *> ins, const Dims &out);  // at most kMaxOperands
};

// Calls f(offsets, out_offset, run_length) for each innermost run; offsets[k] is operand k's element offset and
// the innermost step of operand k is strides[k].back(). counters must hold dims.size() values.
template <class F>
void ForEachRunN(const BroadcastN &bc, int64_t *counters, F f) {
  if (bc.total == 0) return;
  const size_t r = bc.dims.size();
  const int64_t inner = bc.dims[r - 1];
  int64_t off[BroadcastN::kMaxOperands] = {0, 0, 0, 0};
  for (size_t d = 0; d < r; ++d) counters[d] = 0;
  for (int64_t o = 0; o < bc.total; o += inner) {
    f(static_cast<const int64_t *>(off), o, inner);
    for (size_t d = r - 1; d-- > 0;) {
      for (size_t k = 0; k < bc.n; ++k) off[k] += bc.strides[k][d];
      if (++counters[d] < bc.dims[d]) break;
      for (size_t k = 0; k < bc.n; ++k) off[k] -= bc.strides[k][d] * bc.dims[d];
      counters[d] = 0;
    }
  }
}

// Simplifies a strided walk over `dims` (element strides `strides`, 0 for a broadcast or reduced dim): drops size-1
// dims and merges adjacent dims that are contiguous in that walk (including runs of stride 0). The result has at
// least one dim; a walk over zero elements becomes a single dim of size 0.
void CoalesceStrided(const std::vector<int64_t> &dims, const std::vector<int64_t> &strides,
                     std::vector<int64_t> *out_dims, std::vector<int64_t> *out_strides);

}  // namespace onnx
}  // namespace twin
