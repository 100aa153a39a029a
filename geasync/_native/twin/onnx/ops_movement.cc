// Data-movement ops: Concat, Split, Slice, Gather, Squeeze, Unsqueeze, Expand, Shape, ConstantOfShape, Range.
// Inputs that determine an output shape (Split's split, Slice's starts/ends/axes/steps, Squeeze/Unsqueeze axes,
// Expand's shape, ConstantOfShape's input, Range's start/limit/delta) are read at compile time; when they are
// graph inputs, CompilePlan specialises the plan on their runtime values (see engine.h).
// Every dtype the twin represents is supported: these kernels only move bytes.
// Kernel loops: -O3 vectorisation (beyond -O2's very-cheap cost model) and no FP-trap semantics, so that
// selects and divisions in them can be if-converted. Before the includes, so inline helpers get it too.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "broadcast.h"
#include "elem.h"
#include "intra_op.h"

namespace twin {
namespace onnx {
namespace {

// ---- Concat ----

bool InferConcat(InferCtx *c, std::string *reason) {
  const TensorDesc &x0 = *c->in[0];
  if (!AnyDtype(x0.dtype, reason)) return false;
  int64_t axis, norm;
  if (!AttrInt(*c->node, "axis", 0, &axis, reason)) return false;
  if (!c->node->FindAttr("axis")) {
    *reason = "required attribute 'axis' is missing";
    return false;
  }
  const size_t r = x0.dims.size();
  if (r == 0) {
    *reason = "inputs must have rank >= 1";
    return false;
  }
  if (!NormalizeAxis(axis, static_cast<int64_t>(r), false, &norm, reason)) return false;
  std::vector<int64_t> out = x0.dims;
  for (size_t i = 1; i < c->in.size(); ++i) {
    const TensorDesc &x = *c->in[i];
    if (x.dtype != x0.dtype || x.dims.size() != r) {
      *reason = "input " + std::to_string(i) + " " + DescStr(x) + " does not match input 0 " + DescStr(x0);
      return false;
    }
    for (size_t d = 0; d < r; ++d) {
      if (static_cast<int64_t>(d) == norm) {
        out[d] = (out[d] < 0 || x.dims[d] < 0) ? -1 : out[d] + x.dims[d];
      } else if (out[d] >= 0 && x.dims[d] >= 0 && out[d] != x.dims[d]) {
        *reason = "input " + std::to_string(i) + " " + ShapeStr(x.dims) + " does not match input 0 " +
                  ShapeStr(x0.dims) + " outside axis " + std::to_string(norm);
        return false;
      } else if (out[d] < 0) {
        out[d] = x.dims[d];
      }
    }
  }
  c->out[0].dtype = x0.dtype;
  c->out[0].dims = std::move(out);
  return true;
}

// Bytes of a copy worth a helper of the intra-op pool: ~25 us of one core's memory bandwidth (a 1M float32 Concat
// measured ~0.2 ms for 8 MB moved). Concat and Split give it runs of whole outer rows (disjoint outputs).
constexpr int64_t kCopyGrainBytes = int64_t(1) << 20;

int64_t RowGrain(size_t row_bytes) {
  return std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(static_cast<int64_t>(row_bytes), 1));
}

class ConcatKernel : public Kernel {
 public:
  ConcatKernel(int64_t outer, std::vector<size_t> chunk) : outer_(outer), chunk_(std::move(chunk)) {
    for (size_t b : chunk_) row_ += b;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    ParallelForAnyCut(outer_, RowGrain(row_), [&](int64_t lo, int64_t hi) {
      uint8_t *o = static_cast<uint8_t *>(out[0]) + lo * row_;
      for (int64_t i = lo; i < hi; ++i) {
        for (size_t k = 0; k < chunk_.size(); ++k) {
          CopyBytes(o, static_cast<const uint8_t *>(in[k]) + i * chunk_[k], chunk_[k]);
          o += chunk_[k];
        }
      }
    });
    return true;
  }

 private:
  int64_t outer_;
  std::vector<size_t> chunk_;  // bytes per outer row of each input
  size_t row_ = 0;
};

std::unique_ptr<Kernel> PrepareConcat(const KernelCtx &c, std::string *reason) {
  int64_t axis, norm;
  if (!AttrInt(*c.node, "axis", 0, &axis, reason)) return nullptr;
  const auto &od = c.out[0].dims;
  if (!NormalizeAxis(axis, static_cast<int64_t>(od.size()), false, &norm, reason)) return nullptr;
  const int64_t outer = DimsProduct(od, 0, norm);
  const size_t es = ElemSize(c.out[0].dtype);
  std::vector<size_t> chunk;
  for (const TensorDesc *d : c.in) chunk.push_back(static_cast<size_t>(DimsProduct(d->dims, norm, d->dims.size())) * es);
  return std::make_unique<ConcatKernel>(outer, chunk);
}

// ---- Split ----

bool SplitSizes(InferCtx *c, int64_t dim, int64_t *axis_out, std::vector<int64_t> *sizes, bool *unknown,
                std::string *reason) {
  const TensorDesc &x = *c->in[0];
  int64_t axis, norm;
  if (!AttrInt(*c->node, "axis", 0, &axis, reason)) return false;
  if (!NormalizeAxis(axis, static_cast<int64_t>(x.dims.size()), false, &norm, reason)) return false;
  *axis_out = norm;
  dim = x.dims[norm];
  const size_t nout = c->out.size();
  *unknown = false;
  std::vector<int64_t> split;
  bool have_split = false;
  if (!ReadIntsInputOrAttr(c, 13, "split", &split, &have_split, unknown, reason)) return false;
  if (*unknown) return true;
  if (have_split) {
    if (split.size() != nout) {
      *reason = "split has " + std::to_string(split.size()) + " entries for " + std::to_string(nout) + " outputs";
      return false;
    }
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) {
        *reason = "split contains negative size " + std::to_string(s);
        return false;
      }
      sum += s;
    }
    if (dim >= 0 && sum != dim) {
      *reason = "split sizes sum to " + std::to_string(sum) + " but axis " + std::to_string(norm) + " has " +
                std::to_string(dim);
      return false;
    }
    *sizes = split;
    return true;
  }
  int64_t num = static_cast<int64_t>(nout);
  if (c->opset >= 18) {
    int64_t n_attr;
    if (!AttrInt(*c->node, "num_outputs", -1, &n_attr, reason)) return false;
    if (n_attr >= 0 && n_attr != num) {
      *reason = "num_outputs is " + std::to_string(n_attr) + " but the node has " + std::to_string(num) + " outputs";
      return false;
    }
  }
  if (dim < 0) {
    *unknown = true;
    return true;
  }
  sizes->clear();
  if (c->opset >= 18) {  // uneven: ceil(dim / n) each, the last one smaller
    const int64_t each = (dim + num - 1) / num;
    int64_t left = dim;
    for (int64_t i = 0; i < num; ++i) {
      const int64_t s = std::min(each, left);
      sizes->push_back(s);
      left -= s;
    }
    if (left != 0 || (num > 1 && sizes->back() == 0 && each * (num - 1) > dim)) {
      *reason = "cannot split dimension " + std::to_string(dim) + " into " + std::to_string(num) + " outputs";
      return false;
    }
  } else {
    if (dim % num != 0) {
      *reason = "dimension " + std::to_string(dim) + " is not divisible into " + std::to_string(num) + " equal parts";
      return false;
    }
    sizes->assign(num, dim / num);
  }
  return true;
}

bool InferSplit(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  int64_t axis;
  std::vector<int64_t> sizes;
  bool unknown;
  if (!SplitSizes(c, 0, &axis, &sizes, &unknown, reason)) return false;
  for (size_t o = 0; o < c->out.size(); ++o) {
    c->out[o].dtype = x.dtype;
    c->out[o].dims = x.dims;
    c->out[o].dims[axis] = unknown ? -1 : sizes[o];
  }
  return true;
}

class SplitKernel : public Kernel {
 public:
  SplitKernel(int64_t outer, std::vector<size_t> chunk) : outer_(outer), chunk_(std::move(chunk)) {
    for (size_t b : chunk_) row_ += b;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    ParallelForAnyCut(outer_, RowGrain(row_), [&](int64_t lo, int64_t hi) {
      const uint8_t *x = static_cast<const uint8_t *>(in[0]) + lo * row_;
      for (int64_t i = lo; i < hi; ++i) {
        for (size_t k = 0; k < chunk_.size(); ++k) {
          CopyBytes(static_cast<uint8_t *>(out[k]) + i * chunk_[k], x, chunk_[k]);
          x += chunk_[k];
        }
      }
    });
    return true;
  }

 private:
  int64_t outer_;
  std::vector<size_t> chunk_;
  size_t row_ = 0;
};

std::unique_ptr<Kernel> PrepareSplit(const KernelCtx &c, std::string *reason) {
  int64_t axis, norm;
  if (!AttrInt(*c.node, "axis", 0, &axis, reason)) return nullptr;
  const auto &xd = c.in[0]->dims;
  if (!NormalizeAxis(axis, static_cast<int64_t>(xd.size()), false, &norm, reason)) return nullptr;
  const size_t es = ElemSize(c.in[0]->dtype);
  std::vector<size_t> chunk;
  for (const TensorDesc &d : c.out) chunk.push_back(static_cast<size_t>(DimsProduct(d.dims, norm, d.dims.size())) * es);
  return std::make_unique<SplitKernel>(DimsProduct(xd, 0, norm), chunk);
}

// ---- Slice ----

struct SliceSpec {
  std::vector<int64_t> start, step, count;  // per input axis
};

// Computes per-axis start/step/count. *unknown when an input's contents are not known yet.
bool SliceSpecFor(InferCtx *c, SliceSpec *sp, bool *unknown, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  const size_t r = x.dims.size();
  std::vector<int64_t> starts, ends, axes, steps;
  *unknown = false;
  if (c->opset < 10) {
    bool p1, p2, p3;
    if (!AttrInts(*c->node, "starts", &starts, &p1, reason) || !AttrInts(*c->node, "ends", &ends, &p2, reason) ||
        !AttrInts(*c->node, "axes", &axes, &p3, reason))
      return false;
    if (!p1 || !p2) {
      *reason = "attributes 'starts' and 'ends' are required";
      return false;
    }
    if (!p3) axes.clear();
  } else {
    if (c->in.size() < 3 || !c->has(1) || !c->has(2)) {
      *reason = "inputs 'starts' and 'ends' are required";
      return false;
    }
    std::vector<int64_t> *dst[4] = {&starts, &ends, &axes, &steps};
    for (size_t i = 1; i < c->in.size() && i <= 4; ++i) {
      if (!c->has(i)) continue;
      ValueState st = ReadIntsInput(c, i, dst[i - 1], reason);
      if (st == ValueState::kError) return false;
      if (st == ValueState::kUnknown) *unknown = true;
    }
    if (*unknown) return true;
  }
  if (ends.size() != starts.size() || (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size())) {
    *reason = "starts, ends, axes and steps must have the same length";
    return false;
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  sp->start.assign(r, 0);
  sp->step.assign(r, 1);
  sp->count = x.dims;
  std::vector<char> seen(r, 0);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a;
    if (!NormalizeAxis(axes[i], static_cast<int64_t>(r), false, &a, reason)) return false;
    if (seen[a]) {
      *reason = "axis " + std::to_string(a) + " is repeated in axes";
      return false;
    }
    seen[a] = 1;
    const int64_t dim = x.dims[a], step = steps[i];
    if (step == 0) {
      *reason = "steps must not be 0";
      return false;
    }
    if (dim < 0) {
      sp->count[a] = -1;
      continue;
    }
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    // Counts without end - start + step - 1 or -step, which overflow for steps near +-2^63.
    int64_t n = 0;
    if (step > 0 && e > s) n = (e - s - 1) / step + 1;
    if (step < 0 && s > e) n = 1 - (s - e - 1) / step;
    sp->start[a] = n > 0 ? s : 0;
    sp->step[a] = n > 1 ? step : 1;  // never applied to one element or none (and step * stride may wrap)
    sp->count[a] = n;
  }
  return true;
}

bool CheckSlice(const Node &n, int64_t opset, std::string *reason) {
  if (opset >= 10 && (n.input_names.size() < 3)) {
    *reason = "expects at least 3 inputs (data, starts, ends)";
    return false;
  }
  return true;
}

bool InferSlice(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  SliceSpec sp;
  bool unknown;
  if (!SliceSpecFor(c, &sp, &unknown, reason)) return false;
  c->out[0].dtype = x.dtype;
  c->out[0].dims = unknown ? std::vector<int64_t>(x.dims.size(), -1) : sp.count;
  return true;
}

// Strided copy: out[i0..] = in[base + sum(i_d * stride_d)], innermost run contiguous when its stride is 1.
class StridedCopyKernel : public Kernel {
 public:
  StridedCopyKernel(size_t es, int64_t base, std::vector<int64_t> dims, std::vector<int64_t> strides)
      : es_(es), base_(base), dims_(std::move(dims)), strides_(std::move(strides)), idx_(dims_.size()) {
    total_ = 1;
    for (int64_t d : dims_) total_ *= d;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if (total_ == 0) return true;
    switch (es_) {
      case 1: return Go<uint8_t>(in[0], out[0]);
      case 2: return Go<uint16_t>(in[0], out[0]);
      case 4: return Go<uint32_t>(in[0], out[0]);
      default: return Go<uint64_t>(in[0], out[0]);
    }
  }

 private:
  template <class T>
  bool Go(const void *xin, void *yout) {
    const T *x = static_cast<const T *>(xin) + base_;
    T *y = static_cast<T *>(yout);
    const size_t r = dims_.size();
    const int64_t inner = dims_[r - 1], is = strides_[r - 1];
    std::fill(idx_.begin(), idx_.end(), 0);
    int64_t off = 0;
    for (int64_t o = 0; o < total_; o += inner) {
      const T *src = x + off;
      T *dst = y + o;
      if (is == 1) CopyBytes(dst, src, static_cast<size_t>(inner) * sizeof(T));
      else for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * is];
      for (size_t d = r - 1; d-- > 0;) {
        off += strides_[d];
        if (++idx_[d] < dims_[d]) break;
        off -= strides_[d] * dims_[d];
        idx_[d] = 0;
      }
    }
    return true;
  }

  size_t es_;
  int64_t base_;
  std::vector<int64_t> dims_, strides_;
  int64_t total_ = 0;
  std::vector<int64_t> idx_;
};

std::unique_ptr<Kernel> MakeStridedCopy(size_t es, int64_t base, const std::vector<int64_t> &dims,
                                        const std::vector<int64_t> &strides) {
  std::vector<int64_t> d2, s2;
  CoalesceStrided(dims, strides, &d2, &s2);
  if (es != 1 && es != 2 && es != 4 && es != 8) return nullptr;
  return std::make_unique<StridedCopyKernel>(es, base, d2, s2);
}

std::unique_ptr<Kernel> PrepareSlice(const KernelCtx &kc, std::string *reason) {
  InferCtx c = kc.AsInferCtx();
  SliceSpec sp;
  bool unknown;
  if (!SliceSpecFor(&c, &sp, &unknown, reason)) return nullptr;
  const auto &xd = kc.in[0]->dims;
  const std::vector<int64_t> xs = Strides(xd);
  int64_t base = 0;
  std::vector<int64_t> strides(xd.size());
  for (size_t d = 0; d < xd.size(); ++d) {
    base += sp.start[d] * xs[d];
    strides[d] = sp.step[d] * xs[d];
  }
  auto k = MakeStridedCopy(ElemSize(kc.out[0].dtype), base, sp.count, strides);
  if (!k) *reason = DtypeNotSupported(kc.out[0].dtype);
  return k;
}

// ---- Gather ----

bool InferGather(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &idx = *c->in[1];
  if (!AnyDtype(x.dtype, reason)) return false;
  if (idx.dtype != ElemType::kInt64 && idx.dtype != ElemType::kInt32) {
    *reason = "indices must be int32 or int64, got " + DescStr(idx);
    return false;
  }
  int64_t axis, norm;
  if (!AttrInt(*c->node, "axis", 0, &axis, reason)) return false;
  if (x.dims.empty()) {
    *reason = "data must have rank >= 1";
    return false;
  }
  if (!NormalizeAxis(axis, static_cast<int64_t>(x.dims.size()), false, &norm, reason)) return false;
  std::vector<int64_t> out(x.dims.begin(), x.dims.begin() + norm);
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), x.dims.begin() + norm + 1, x.dims.end());
  c->out[0].dtype = x.dtype;
  c->out[0].dims = std::move(out);
  return true;
}

class GatherKernel : public Kernel {
 public:
  GatherKernel(bool idx64, int64_t outer, int64_t axis_dim, int64_t n_idx, size_t inner_bytes)
      : idx64_(idx64), outer_(outer), axis_dim_(axis_dim), n_idx_(n_idx), inner_(inner_bytes) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const uint8_t *x = static_cast<const uint8_t *>(in[0]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    for (int64_t j = 0; j < n_idx_; ++j) {
      int64_t v = idx64_ ? static_cast<const int64_t *>(in[1])[j] : static_cast<const int32_t *>(in[1])[j];
      if (v < -axis_dim_ || v >= axis_dim_) {
        *reason = "index " + std::to_string(v) + " is out of range for an axis of size " + std::to_string(axis_dim_);
        return false;
      }
    }
    for (int64_t o = 0; o < outer_; ++o) {
      const uint8_t *xo = x + static_cast<size_t>(o * axis_dim_) * inner_;
      for (int64_t j = 0; j < n_idx_; ++j) {
        int64_t v = idx64_ ? static_cast<const int64_t *>(in[1])[j] : static_cast<const int32_t *>(in[1])[j];
        if (v < 0) v += axis_dim_;
        CopyBytes(y, xo + static_cast<size_t>(v) * inner_, inner_);
        y += inner_;
      }
    }
    return true;
  }

 private:
  bool idx64_;
  int64_t outer_, axis_dim_, n_idx_;
  size_t inner_;
};

std::unique_ptr<Kernel> PrepareGather(const KernelCtx &c, std::string *reason) {
  int64_t axis, norm;
  if (!AttrInt(*c.node, "axis", 0, &axis, reason)) return nullptr;
  const auto &xd = c.in[0]->dims;
  if (!NormalizeAxis(axis, static_cast<int64_t>(xd.size()), false, &norm, reason)) return nullptr;
  const size_t inner = static_cast<size_t>(DimsProduct(xd, norm + 1, xd.size())) * ElemSize(c.in[0]->dtype);
  return std::make_unique<GatherKernel>(c.in[1]->dtype == ElemType::kInt64, DimsProduct(xd, 0, norm), xd[norm],
                                        c.in[1]->NumElements(), inner);
}

// ---- Squeeze / Unsqueeze ----

bool InferSqueeze(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  std::vector<int64_t> axes;
  bool present, unknown;
  if (!ReadIntsInputOrAttr(c, 13, "axes", &axes, &present, &unknown, reason)) return false;
  c->out[0].dtype = x.dtype;
  const int64_t r = static_cast<int64_t>(x.dims.size());
  if (unknown) {
    const int64_t n = c->in[1]->dims.empty() ? 1 : c->in[1]->dims[0];
    c->out[0].dims.assign(n >= 0 && n <= r ? r - n : 0, -1);
    return true;
  }
  std::vector<char> drop(r, 0);
  if (present) {
    for (int64_t a : axes) {
      int64_t n;
      if (!NormalizeAxis(a, r, false, &n, reason)) return false;
      if (x.dims[n] != 1 && x.dims[n] >= 0) {
        *reason = "cannot squeeze axis " + std::to_string(a) + " of shape " + ShapeStr(x.dims) + ": it is not 1";
        return false;
      }
      drop[n] = 1;
    }
  } else {
    for (int64_t i = 0; i < r; ++i) {
      if (x.dims[i] < 0 && c->need_static) {
        *reason = "input shape must be known to squeeze without axes";
        return false;
      }
      drop[i] = x.dims[i] == 1;
    }
  }
  c->out[0].dims.clear();
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) c->out[0].dims.push_back(x.dims[i]);
  return true;
}

bool InferUnsqueeze(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  std::vector<int64_t> axes;
  bool present, unknown;
  if (!ReadIntsInputOrAttr(c, 13, "axes", &axes, &present, &unknown, reason)) return false;
  if (!present) {
    *reason = "axes are required";
    return false;
  }
  c->out[0].dtype = x.dtype;
  const int64_t r = static_cast<int64_t>(x.dims.size());
  if (unknown) {
    const int64_t n = c->in[1]->dims.empty() ? 1 : c->in[1]->dims[0];
    c->out[0].dims.assign(n >= 0 ? r + n : 0, -1);
    return true;
  }
  const int64_t out_r = r + static_cast<int64_t>(axes.size());
  std::vector<char> ins(out_r, 0);
  for (int64_t a : axes) {
    int64_t n;
    if (!NormalizeAxis(a, out_r, false, &n, reason)) return false;
    if (ins[n]) {
      *reason = "axis " + std::to_string(a) + " is repeated";
      return false;
    }
    ins[n] = 1;
  }
  c->out[0].dims.clear();
  size_t k = 0;
  for (int64_t i = 0; i < out_r; ++i) c->out[0].dims.push_back(ins[i] ? 1 : x.dims[k++]);
  return true;
}

std::unique_ptr<Kernel> PrepareCopy(const KernelCtx &c, std::string *) { return MakeCopyKernel(c.out[0].Bytes()); }

// ---- Expand ----

bool InferExpand(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!AnyDtype(x.dtype, reason)) return false;
  std::vector<int64_t> shape;
  ValueState st = ReadIntsInput(c, 1, &shape, reason);
  if (st == ValueState::kError) return false;
  c->out[0].dtype = x.dtype;
  if (st == ValueState::kUnknown) {
    const int64_t n = c->in[1]->dims.empty() ? 1 : c->in[1]->dims[0];
    c->out[0].dims.assign(n >= 0 ? std::max<int64_t>(n, x.dims.size()) : x.dims.size(), -1);
    return true;
  }
  for (int64_t v : shape) {
    if (v < 0) {
      *reason = "shape contains negative value " + std::to_string(v);
      return false;
    }
  }
  return BroadcastShapes(x.dims, shape, &c->out[0].dims, reason);
}

template <class T>
class ExpandKernel : public Kernel {
 public:
  explicit ExpandKernel(BroadcastN bc) : bc_(std::move(bc)), ctr_(bc_.dims.size()) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    const int64_t ix = bc_.strides[0].back();
    ForEachRunN(bc_, ctr_.data(), [&](const int64_t *off, int64_t oo, int64_t n) {
      const T *px = x + off[0];
      T *py = y + oo;
      if (ix) CopyBytes(py, px, static_cast<size_t>(n) * sizeof(T));
      else std::fill(py, py + n, *px);
    });
    return true;
  }

 private:
  BroadcastN bc_;
  std::vector<int64_t> ctr_;
};

std::unique_ptr<Kernel> PrepareExpand(const KernelCtx &c, std::string *reason) {
  BroadcastN bc;
  bc.Init({&c.in[0]->dims}, c.out[0].dims);
  switch (ElemSize(c.out[0].dtype)) {
    case 1: return std::make_unique<ExpandKernel<uint8_t>>(bc);
    case 2: return std::make_unique<ExpandKernel<uint16_t>>(bc);
    case 4: return std::make_unique<ExpandKernel<uint32_t>>(bc);
    case 8: return std::make_unique<ExpandKernel<uint64_t>>(bc);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

// ---- Shape (depends only on the input's desc: folded whenever that is static) ----

bool ShapeRange(const Node &n, int64_t opset, int64_t rank, int64_t *lo, int64_t *hi, std::string *reason) {
  int64_t s = 0, e = rank;
  if (opset >= 15) {
    if (!AttrInt(n, "start", 0, &s, reason) || !AttrInt(n, "end", rank, &e, reason)) return false;
  }
  if (s < 0) s += rank;
  if (e < 0) e += rank;
  *lo = std::clamp<int64_t>(s, 0, rank);
  *hi = std::clamp<int64_t>(e, 0, rank);
  if (*hi < *lo) *hi = *lo;
  return true;
}

bool InferShape(InferCtx *c, std::string *reason) {
  int64_t lo, hi;
  if (!ShapeRange(*c->node, c->opset, static_cast<int64_t>(c->in[0]->dims.size()), &lo, &hi, reason)) return false;
  c->out[0].dtype = ElemType::kInt64;
  c->out[0].dims = {hi - lo};
  return true;
}

class ConstBytesKernel : public Kernel {
 public:
  explicit ConstBytesKernel(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    CopyBytes(out[0], bytes_.data(), bytes_.size());
    return true;
  }

 private:
  std::vector<uint8_t> bytes_;
};

std::unique_ptr<Kernel> PrepareShape(const KernelCtx &c, std::string *reason) {
  const auto &d = c.in[0]->dims;
  int64_t lo, hi;
  if (!ShapeRange(*c.node, c.opset, static_cast<int64_t>(d.size()), &lo, &hi, reason)) return nullptr;
  std::vector<uint8_t> bytes(static_cast<size_t>(hi - lo) * 8);
  CopyBytes(bytes.data(), d.data() + lo, bytes.size());
  return std::make_unique<ConstBytesKernel>(std::move(bytes));
}

// ---- ConstantOfShape ----

bool ConstantOfShapeValue(const Node &n, TensorDesc *desc, std::vector<uint8_t> *value, std::string *reason) {
  const Attribute *a = n.FindAttr("value");
  if (!a) {
    desc->dtype = ElemType::kFloat;
    value->assign(4, 0);
    return true;
  }
  if (a->type != kAttrTensor || !a->t || a->t->desc.NumElements() != 1) {
    *reason = "attribute 'value' must be a one-element tensor";
    return false;
  }
  desc->dtype = a->t->desc.dtype;
  *value = a->t->data;
  return true;
}

bool CheckConstantOfShape(const Node &n, int64_t, std::string *reason) {
  TensorDesc d;
  std::vector<uint8_t> v;
  return ConstantOfShapeValue(n, &d, &v, reason);
}

bool InferConstantOfShape(InferCtx *c, std::string *reason) {
  TensorDesc d;
  std::vector<uint8_t> v;
  if (!ConstantOfShapeValue(*c->node, &d, &v, reason)) return false;
  std::vector<int64_t> shape;
  ValueState st = ReadIntsInput(c, 0, &shape, reason);
  if (st == ValueState::kError) return false;
  c->out[0].dtype = d.dtype;
  if (st == ValueState::kUnknown) {
    const int64_t n = c->in[0]->dims.empty() ? 1 : c->in[0]->dims[0];
    c->out[0].dims.assign(n >= 0 ? n : 0, -1);
    return true;
  }
  for (int64_t v2 : shape) {
    if (v2 < 0) {
      *reason = "shape contains negative value " + std::to_string(v2);
      return false;
    }
  }
  c->out[0].dims = shape;
  return true;
}

class FillKernel : public Kernel {
 public:
  FillKernel(std::vector<uint8_t> value, int64_t n) : value_(std::move(value)), n_(n) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    const size_t es = value_.size();
    bool zero = true;
    for (uint8_t b : value_) zero = zero && b == 0;
    if (zero) {
      if (n_) std::memset(y, 0, static_cast<size_t>(n_) * es);
      return true;
    }
    for (int64_t i = 0; i < n_; ++i) std::memcpy(y + i * es, value_.data(), es);
    return true;
  }

 private:
  std::vector<uint8_t> value_;
  int64_t n_;
};

std::unique_ptr<Kernel> PrepareConstantOfShape(const KernelCtx &c, std::string *reason) {
  TensorDesc d;
  std::vector<uint8_t> v;
  if (!ConstantOfShapeValue(*c.node, &d, &v, reason)) return nullptr;
  return std::make_unique<FillKernel>(v, c.out[0].NumElements());
}

// ---- Range ----

bool InferRange(InferCtx *c, std::string *reason) {
  const ElemType t = c->in[0]->dtype;
  if (!IsNumericType(t)) {
    *reason = DtypeNotSupported(t);
    return false;
  }
  for (size_t i = 1; i < 3; ++i) {
    if (c->in[i]->dtype != t) {
      *reason = "start, limit and delta must have the same dtype";
      return false;
    }
  }
  double v[3];
  bool unknown = false;
  for (size_t i = 0; i < 3; ++i) {
    ValueState st = ReadScalarInput(c, i, &v[i], reason);
    if (st == ValueState::kError) return false;
    unknown = unknown || st == ValueState::kUnknown;
  }
  c->out[0].dtype = t;
  if (unknown) {
    c->out[0].dims = {-1};
    return true;
  }
  if (v[2] == 0) {
    *reason = "delta must not be 0";
    return false;
  }
  const double n = std::ceil((v[1] - v[0]) / v[2]);
  if (!(n < static_cast<double>(kMaxElements))) {
    *reason = "range would have too many elements";
    return false;
  }
  c->out[0].dims = {n > 0 ? static_cast<int64_t>(n) : 0};
  return true;
}

template <class S>
class RangeKernel : public Kernel {
 public:
  explicit RangeKernel(int64_t n) : n_(n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    using C = typename Num<S>::C;
    const C start = Num<S>::Load(*static_cast<const S *>(in[0]));
    const C delta = Num<S>::Load(*static_cast<const S *>(in[2]));
    S *y = static_cast<S *>(out[0]);
    if constexpr (std::is_integral<C>::value) {
      C v = start;
      for (int64_t i = 0; i < n_; ++i) {
        y[i] = v;
        v = static_cast<C>(static_cast<uint64_t>(v) + static_cast<uint64_t>(delta));
      }
    } else {
      // an int32 counter where it fits converts to the same C value, and that conversion vectorises
      if (n_ <= INT32_MAX) {
        for (int32_t i = 0; i < static_cast<int32_t>(n_); ++i)
          y[i] = Num<S>::Store(static_cast<C>(start + static_cast<C>(i) * delta));
      } else {
        for (int64_t i = 0; i < n_; ++i) y[i] = Num<S>::Store(static_cast<C>(start + static_cast<C>(i) * delta));
      }
    }
    return true;
  }

 private:
  int64_t n_;
};

std::unique_ptr<Kernel> PrepareRange(const KernelCtx &c, std::string *reason) {
  std::unique_ptr<Kernel> k;
  VisitType(c.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value) k = std::make_unique<RangeKernel<S>>(c.out[0].NumElements());
  });
  if (!k) *reason = DtypeNotSupported(c.out[0].dtype);
  return k;
}


// Size: the element count of input 0 as an int64 scalar.
bool InferSize(InferCtx *c, std::string *) {
  c->out[0].dtype = ElemType::kInt64;
  c->out[0].dims = {};
  return true;
}

std::unique_ptr<Kernel> PrepareSize(const KernelCtx &c, std::string *) {
  const int64_t n = c.in[0]->NumElements();
  std::vector<uint8_t> bytes(8);
  CopyBytes(bytes.data(), &n, 8);
  return std::make_unique<ConstBytesKernel>(std::move(bytes));
}
}  // namespace

void RegisterMovementOps(std::vector<OpDef> *ops) {
  ops->push_back({"Concat", 1, 1024, 1, 1, nullptr, InferConcat, PrepareConcat, true, false, true});
  ops->push_back({"Split", 1, 2, 1, 1024, nullptr, InferSplit, PrepareSplit, true});
  ops->push_back({"Slice", 1, 5, 1, 1, CheckSlice, InferSlice, PrepareSlice, true});
  ops->push_back({"Gather", 2, 2, 1, 1, nullptr, InferGather, PrepareGather, true});
  ops->push_back({"Squeeze", 1, 2, 1, 1, nullptr, InferSqueeze, PrepareCopy, true});
  ops->push_back({"Unsqueeze", 1, 2, 1, 1, nullptr, InferUnsqueeze, PrepareCopy, true});
  ops->push_back({"Expand", 2, 2, 1, 1, nullptr, InferExpand, PrepareExpand, true});
  OpDef shape{"Shape", 1, 1, 1, 1, nullptr, InferShape, PrepareShape, true};
  shape.shape_only = true;
  ops->push_back(shape);
  OpDef size{"Size", 1, 1, 1, 1, nullptr, InferSize, PrepareSize, true};
  size.shape_only = true;
  ops->push_back(size);
  ops->push_back(
      {"ConstantOfShape", 1, 1, 1, 1, CheckConstantOfShape, InferConstantOfShape, PrepareConstantOfShape, true});
  ops->push_back({"Range", 3, 3, 1, 1, nullptr, InferRange, PrepareRange, true});
}

}  // namespace onnx
}  // namespace twin
