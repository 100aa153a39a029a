// Broadcasting loops over two operands for kernels outside ops_elementwise.cc (comparisons, bitwise, Mod,
// variadic Sum/Mean): the innermost run of each operand is contiguous or a scalar, so the loops vectorise.
#pragma once

#include <vector>

#include "broadcast.h"

namespace twin {
namespace onnx {

// o = f(a, b) over the broadcast plan bc (operands 0 and 1); ctr holds bc.dims.size() counters.
template <class SA, class SB, class SO, class F>
void BinaryBroadcastLoop(const BroadcastN &bc, int64_t *ctr, const SA *a, const SB *b, SO *o, F f) {
  const int64_t ia = bc.strides[0].back(), ib = bc.strides[1].back();
  ForEachRunN(bc, ctr, [&](const int64_t *off, int64_t oo, int64_t n) {
    const SA *__restrict pa = a + off[0];
    const SB *__restrict pb = b + off[1];
    SO *__restrict po = o + oo;
    if (ia && ib) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (ia) {
      const SB bv = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], bv);
    } else if (ib) {
      const SA av = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(av, pb[i]);
    } else {
      const SO v = f(*pa, *pb);
      for (int64_t i = 0; i < n; ++i) po[i] = v;
    }
  });
}

inline BroadcastN MakeBroadcast2(const Dims &a, const Dims &b,
                                 const Dims &out) {
  BroadcastN bc;
  bc.Init({&a, &b}, out);
  return bc;
}

}  // namespace onnx
}  // namespace twin
