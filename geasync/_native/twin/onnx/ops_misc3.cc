// Unique (sorted or in first-occurrence order, flat or along an axis, all four outputs), TensorScatter (KV-cache
// update, linear or circular), CausalConvWithState (stateful causal depthwise 1-D convolution, optional SiLU) and
// BitCast.
// Unique's output sizes depend on the input's contents: known at compile time (constants,
// or the input bound by a value-dependent plan, as for NonZero).
#include <algorithm>
#include <numeric>

#include "elem.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

// The contents of input i are needed now: records the missing input when compiling.
bool NeedContents(InferCtx *c, size_t i, const char *what, bool *known, std::string *reason) {
  *known = c->in_data[i] && c->in[i]->IsStatic();
  if (*known || !c->need_static) return true;
  c->missing_input = static_cast<int>(i);
  *reason = "input '" + c->node->input_names[i] + "' is not a compile-time constant, and " + what + " depends on it";
  return false;
}

// ---- Unique ----

// x seen as [outer, len, inner]; the items compared are the len slices (flat: outer = inner = 1).
struct UniqueGeom {
  bool flat = true;
  int64_t axis = 0, outer = 1, len = 0, inner = 1;
};

bool UniqueShape(const Node &n, const TensorDesc &x, UniqueGeom *g, std::string *reason) {
  if (!IsNumericType(x.dtype) && x.dtype != ElemType::kBool) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  int64_t sorted;
  if (!AttrInt(n, "sorted", 1, &sorted, reason)) return false;
  if (sorted != 0 && sorted != 1) {
    *reason = "attribute 'sorted' must be 0 or 1, got " + std::to_string(sorted);
    return false;
  }
  const Attribute *a = n.FindAttr("axis");
  g->flat = a == nullptr;
  if (g->flat) {
    g->len = x.NumElements();
    return true;
  }
  if (a->type != kAttrInt) {
    *reason = "attribute 'axis' must be an int";
    return false;
  }
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (!NormalizeAxis(a->i, rank, false, &g->axis, reason)) return false;
  g->outer = DimsProduct(x.dims, 0, static_cast<size_t>(g->axis));
  g->len = x.dims[g->axis];
  g->inner = DimsProduct(x.dims, static_cast<size_t>(g->axis) + 1, x.dims.size());
  return true;
}

// Three-way comparison with NaN above everything and equal to NaN (numpy's unique, equal_nan=True).
template <class C>
int Cmp(C a, C b) {
  const bool an = a != a, bn = b != b;
  if (an || bn) return an == bn ? 0 : (an ? 1 : -1);
  return a < b ? -1 : (b < a ? 1 : 0);
}

// The unique slices: first[g] = index of group g's first occurrence, inverse[k] = group of slice k, in sorted or
// first-occurrence group order.
struct UniqueResult {
  std::vector<int64_t> first, inverse, counts;
};

template <class S>
void ComputeUnique(const S *x, const UniqueGeom &g, bool sorted, UniqueResult *r) {
  using C = typename Num<S>::C;
  const int64_t len = g.len, row = g.len * g.inner;
  auto cmp = [&](int64_t p, int64_t q) {
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t i = 0; i < g.inner; ++i) {
        const int c = Cmp<C>(Num<S>::Load(x[o * row + p * g.inner + i]), Num<S>::Load(x[o * row + q * g.inner + i]));
        if (c) return c;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(len));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return cmp(p, q) < 0; });
  r->first.clear(), r->counts.clear();
  r->inverse.assign(static_cast<size_t>(len), 0);
  for (int64_t k = 0; k < len; ++k) {
    const int64_t s = order[k];
    if (k == 0 || cmp(order[k - 1], s) != 0) r->first.push_back(s), r->counts.push_back(0);
    r->inverse[s] = static_cast<int64_t>(r->first.size()) - 1;
    ++r->counts.back();
  }
  if (sorted) return;
  const size_t n = r->first.size();
  std::vector<int64_t> by_first(n), rank(n);
  std::iota(by_first.begin(), by_first.end(), 0);
  std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return r->first[a] < r->first[b]; });
  std::vector<int64_t> first(n), counts(n);
  for (size_t k = 0; k < n; ++k) {
    rank[by_first[k]] = static_cast<int64_t>(k);
    first[k] = r->first[by_first[k]], counts[k] = r->counts[by_first[k]];
  }
  for (int64_t &v : r->inverse) v = rank[v];
  r->first.swap(first), r->counts.swap(counts);
}

bool RunUnique(ElemType t, const void *x, const UniqueGeom &g, bool sorted, UniqueResult *r) {
  return VisitType(t, [&](auto tag) { ComputeUnique(static_cast<const decltype(tag) *>(x), g, sorted, r); });
}

void UniqueOutDescs(const TensorDesc &x, const UniqueGeom &g, int64_t n_unique, std::vector<TensorDesc> *out) {
  (*out)[0].dtype = x.dtype;
  if (g.flat) {
    (*out)[0].dims = {n_unique};
  } else {
    (*out)[0].dims = x.dims;
    (*out)[0].dims[g.axis] = n_unique;
  }
  const int64_t len = g.len < 0 ? -1 : g.len;
  for (size_t k = 1; k < out->size(); ++k) (*out)[k] = {ElemType::kInt64, {k == 2 ? len : n_unique}};
}

bool InferUnique(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  UniqueGeom g;
  if (!UniqueShape(*c->node, x, &g, reason)) return false;
  bool known;
  if (!NeedContents(c, 0, "the number of unique values", &known, reason)) return false;
  int64_t n_unique = -1;
  if (known) {
    int64_t sorted;
    AttrInt(*c->node, "sorted", 1, &sorted, reason);
    UniqueResult r;
    RunUnique(x.dtype, c->in_data[0], g, sorted != 0, &r);
    n_unique = static_cast<int64_t>(r.first.size());
  }
  UniqueOutDescs(x, g, n_unique, &c->out);
  return true;
}

class UniqueKernel : public Kernel {
 public:
  UniqueKernel(ElemType t, UniqueGeom g, bool sorted, size_t n_out)
      : t_(t), g_(g), sorted_(sorted), n_out_(n_out), esize_(ElemSize(t)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    RunUnique(t_, in[0], g_, sorted_, &r_);
    const uint8_t *x = static_cast<const uint8_t *>(in[0]);
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    const size_t n = r_.first.size(), run = static_cast<size_t>(g_.inner) * esize_;
    for (int64_t o = 0; o < g_.outer; ++o)
      for (size_t k = 0; k < n; ++k)
        CopyBytes(y + (o * n + k) * run, x + (o * g_.len + r_.first[k]) * static_cast<int64_t>(run), run);
    const std::vector<int64_t> *lists[] = {&r_.first, &r_.inverse, &r_.counts};
    for (size_t k = 1; k < n_out_; ++k)
      if (out[k]) CopyBytes(out[k], lists[k - 1]->data(), lists[k - 1]->size() * sizeof(int64_t));
    return true;
  }

 private:
  ElemType t_;
  UniqueGeom g_;
  bool sorted_;
  size_t n_out_, esize_;
  UniqueResult r_;
};

std::unique_ptr<Kernel> PrepareUnique(const KernelCtx &c, std::string *reason) {
  UniqueGeom g;
  int64_t sorted;
  if (!UniqueShape(*c.node, *c.in[0], &g, reason) || !AttrInt(*c.node, "sorted", 1, &sorted, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new UniqueKernel(c.in[0]->dtype, g, sorted != 0, c.out.size()));
}

// Parse-time attribute checks (add_graph): everything not needing the input shapes.
bool CheckUnique(const Node &n, int64_t, std::string *reason) {
  int64_t sorted, axis;
  if (!AttrInt(n, "sorted", 1, &sorted, reason) || !AttrInt(n, "axis", 0, &axis, reason)) return false;
  if (sorted != 0 && sorted != 1) {
    *reason = "attribute 'sorted' must be 0 or 1, got " + std::to_string(sorted);
    return false;
  }
  return true;
}

// ---- TensorScatter ----

// past_cache seen as [batch, mid, max_len, inner] with the sequence axis third; update as [batch, mid, len, inner].
struct ScatterGeom {
  bool circular = false;
  int64_t batch = 0, mid = 1, max_len = 0, len = 0, inner = 1;
};

bool ScatterShape(const InferCtx &c, ScatterGeom *g, std::string *reason) {
  const TensorDesc &past = *c.in[0], &upd = *c.in[1];
  std::string mode;
  int64_t axis;
  if (!AttrString(*c.node, "mode", "linear", &mode, reason) || !AttrInt(*c.node, "axis", -2, &axis, reason)) return false;
  if (mode != "linear" && mode != "circular") {
    *reason = "attribute 'mode' must be 'linear' or 'circular', got '" + mode + "'";
    return false;
  }
  g->circular = mode == "circular";
  const int64_t rank = static_cast<int64_t>(past.dims.size());
  if (!NormalizeAxis(axis, rank, false, &axis, reason)) return false;
  if (axis == 0) {
    *reason = "attribute 'axis' must not be the batch axis 0";
    return false;
  }
  if (!AnyDtype(past.dtype, reason)) return false;
  bool ok = upd.dtype == past.dtype && upd.dims.size() == past.dims.size();
  for (size_t d = 0; ok && d < past.dims.size(); ++d) {
    const int64_t p = past.dims[d], u = upd.dims[d];
    if (p < 0 || u < 0) continue;
    ok = static_cast<int64_t>(d) == axis ? u <= p : u == p;
  }
  if (!ok) {
    *reason = "input 'update' " + DescStr(upd) + " must match 'past_cache' " + DescStr(past) +
              " in dtype and in every dim but axis " + std::to_string(axis) + ", where it may not be longer";
    return false;
  }
  if (c.has(2)) {
    const TensorDesc &w = *c.in[2];
    if (w.dtype != ElemType::kInt64 || w.dims.size() != 1 || (w.dims[0] >= 0 && past.dims[0] >= 0 &&
                                                              w.dims[0] != past.dims[0])) {
      *reason = "input 'write_indices' must be int64 of shape [batch], got " + DescStr(w);
      return false;
    }
  }
  g->batch = past.dims[0];
  g->mid = DimsProduct(past.dims, 1, static_cast<size_t>(axis));
  g->max_len = past.dims[axis];
  g->len = upd.dims[axis];
  g->inner = DimsProduct(past.dims, static_cast<size_t>(axis) + 1, past.dims.size());
  return true;
}

bool InferTensorScatter(InferCtx *c, std::string *reason) {
  ScatterGeom g;
  if (!ScatterShape(*c, &g, reason)) return false;
  c->out[0] = *c->in[0];
  return true;
}

class TensorScatterKernel : public Kernel {
 public:
  TensorScatterKernel(ScatterGeom g, size_t esize, bool has_w) : g_(g), esize_(esize), has_w_(has_w) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const uint8_t *past = static_cast<const uint8_t *>(in[0]), *upd = static_cast<const uint8_t *>(in[1]);
    const int64_t *w = has_w_ ? static_cast<const int64_t *>(in[2]) : nullptr;  // omitted: write at 0
    uint8_t *y = static_cast<uint8_t *>(out[0]);
    const size_t row = static_cast<size_t>(g_.inner) * esize_;
    if (y != past) CopyBytes(y, past, static_cast<size_t>(g_.batch * g_.mid * g_.max_len) * row);
    for (int64_t b = 0; b < g_.batch; ++b) {
      const int64_t start = w ? w[b] : 0;
      if (start < 0 || (!g_.circular && start > g_.max_len - g_.len)) {
        *reason = "write_indices[" + std::to_string(b) + "] = " + std::to_string(start) + " writes outside the " +
                  std::to_string(g_.max_len) + " cache positions";
        return false;
      }
      const int64_t first = g_.max_len ? start % g_.max_len : 0;  // circular wraps; linear is in range here
      for (int64_t m = 0; m < g_.mid; ++m) {
        const int64_t base = b * g_.mid + m;
        for (int64_t s = 0; s < g_.len; ++s) {
          int64_t pos = first + s;
          if (pos >= g_.max_len) pos -= g_.max_len;
          CopyBytes(y + (base * g_.max_len + pos) * static_cast<int64_t>(row),
                    upd + (base * g_.len + s) * static_cast<int64_t>(row), row);
        }
      }
    }
    return true;
  }

 private:
  ScatterGeom g_;
  size_t esize_;
  bool has_w_;
};

bool CheckTensorScatter(const Node &n, int64_t, std::string *reason) {
  std::string mode;
  int64_t axis;
  if (!AttrString(n, "mode", "linear", &mode, reason) || !AttrInt(n, "axis", -2, &axis, reason)) return false;
  if (mode != "linear" && mode != "circular") {
    *reason = "attribute 'mode' must be 'linear' or 'circular', got '" + mode + "'";
    return false;
  }
  if (axis == 0) {
    *reason = "attribute 'axis' must not be the batch axis 0";
    return false;
  }
  return true;
}

std::unique_ptr<Kernel> PrepareTensorScatter(const KernelCtx &c, std::string *reason) {
  ScatterGeom g;
  if (!ScatterShape(c.AsInferCtx(), &g, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new TensorScatterKernel(g, ElemSize(c.in[0]->dtype), c.has(2)));
}

// ---- CausalConvWithState ----

bool CausalActivation(const Node &n, bool *silu, std::string *reason) {
  std::string act;
  if (!AttrString(n, "activation", "none", &act, reason)) return false;
  if (act != "none" && act != "silu" && act != "swish") {
    *reason = "attribute 'activation' must be 'none', 'silu' or 'swish', got '" + act + "'";
    return false;
  }
  *silu = act != "none";
  return true;
}

bool CheckCausalConv(const Node &n, int64_t, std::string *reason) {
  bool silu;
  return CausalActivation(n, &silu, reason);
}

bool InferCausalConv(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0], &w = *c->in[1];
  if (!IsFloatType(x.dtype) || x.dims.size() != 3) {
    *reason = "input 'input' must be a float tensor [batch, channels, length], got " + DescStr(x);
    return false;
  }
  const int64_t ch = x.dims[1], k = w.dims.size() == 3 ? w.dims[2] : -1;
  auto fits = [](int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; };
  if (w.dtype != x.dtype || w.dims.size() != 3 || !fits(w.dims[0], ch) || !fits(w.dims[1], 1) || k == 0) {
    *reason = "input 'weight' must be [channels, 1, k >= 1] of the input's dtype, got " + DescStr(w) + " for input " +
              DescStr(x);
    return false;
  }
  if (c->has(2) && (c->in[2]->dtype != x.dtype || c->in[2]->dims.size() != 1 || !fits(c->in[2]->dims[0], ch))) {
    *reason = "input 'bias' must be [channels] of the input's dtype, got " + DescStr(*c->in[2]);
    return false;
  }
  const int64_t state = k < 0 ? -1 : k - 1;
  if (c->has(3)) {
    const TensorDesc &p = *c->in[3];
    if (p.dtype != x.dtype || p.dims.size() != 3 || !fits(p.dims[0], x.dims[0]) || !fits(p.dims[1], ch) ||
        !fits(p.dims[2], state)) {
      *reason = "input 'past_state' must be [batch, channels, k - 1] of the input's dtype, got " + DescStr(p);
      return false;
    }
  }
  c->out[0] = x;
  if (c->out.size() > 1) c->out[1] = {x.dtype, {x.dims[0], ch, state}};
  return true;
}

template <class S>
class CausalConvKernel : public Kernel {
 public:
  // The node's input / output lists may end before the optional bias, past_state and present_state.
  CausalConvKernel(const KernelCtx &c, int64_t k, bool silu)
      : batch_(c.in[0]->dims[0]), ch_(c.in[0]->dims[1]), len_(c.in[0]->dims[2]), k_(k), silu_(silu),
        has_bias_(c.has(2)), has_past_(c.has(3)), has_present_(c.out.size() > 1), padded_(len_ + k - 1) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    using C = typename Num<S>::C;
    const S *x = static_cast<const S *>(in[0]), *w = static_cast<const S *>(in[1]);
    const S *bias = has_bias_ ? static_cast<const S *>(in[2]) : nullptr;
    const S *past = has_past_ ? static_cast<const S *>(in[3]) : nullptr;
    S *y = static_cast<S *>(out[0]), *present = has_present_ ? static_cast<S *>(out[1]) : nullptr;
    const int64_t state = k_ - 1;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t c = 0; c < ch_; ++c) {
        const int64_t row = b * ch_ + c;
        for (int64_t j = 0; j < state; ++j) padded_[j] = past ? Num<S>::Load(past[row * state + j]) : C(0);
        for (int64_t t = 0; t < len_; ++t) padded_[state + t] = Num<S>::Load(x[row * len_ + t]);
        const S *wc = w + c * k_;
        const C b0 = bias ? Num<S>::Load(bias[c]) : C(0);
        for (int64_t t = 0; t < len_; ++t) {
          C acc = b0;
          for (int64_t j = 0; j < k_; ++j) acc += Num<S>::Load(wc[j]) * padded_[t + j];
          if (silu_) {  // in float32, like the reference
            const float v = static_cast<float>(acc);
            acc = static_cast<C>(v * vmath::Sigmoid(v));
          }
          y[row * len_ + t] = Num<S>::Store(acc);
        }
        if (present)
          for (int64_t j = 0; j < state; ++j) present[row * state + j] = Num<S>::Store(padded_[len_ + j]);
      }
    return true;
  }

 private:
  int64_t batch_, ch_, len_, k_;
  bool silu_, has_bias_, has_past_, has_present_;
  std::vector<typename Num<S>::C> padded_;
};

std::unique_ptr<Kernel> PrepareCausalConv(const KernelCtx &c, std::string *reason) {
  bool silu;
  if (!CausalActivation(*c.node, &silu, reason)) return nullptr;
  const int64_t k = c.in[1]->dims[2];
  std::unique_ptr<Kernel> kernel;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) kernel.reset(new CausalConvKernel<S>(c, k, silu));
  });
  if (!kernel) *reason = DtypeNotSupported(c.in[0]->dtype);
  return kernel;
}

// ---- BitCast ----

bool BitCastTarget(const Node &n, ElemType *t, std::string *reason) {
  const Attribute *a = n.FindAttr("to");
  if (!a || a->type != kAttrInt) {
    *reason = "attribute 'to' (an int dtype) is required";
    return false;
  }
  if (!OnnxTypeToElemType(a->i, t) || ElemSize(*t) == 0) {
    *reason = "attribute 'to' names dtype " + std::string(OnnxTypeName(a->i)) + ", which the twin does not support";
    return false;
  }
  return true;
}

bool CheckBitCast(const Node &n, int64_t, std::string *reason) {
  ElemType t;
  return BitCastTarget(n, &t, reason);
}

bool InferBitCast(InferCtx *c, std::string *reason) {
  ElemType t;
  if (!BitCastTarget(*c->node, &t, reason) || !AnyDtype(c->in[0]->dtype, reason)) return false;
  if (ElemSize(t) != ElemSize(c->in[0]->dtype)) {
    *reason = std::string("BitCast needs types of one bit width: ") + ElemTypeName(c->in[0]->dtype) + " to " +
              ElemTypeName(t);
    return false;
  }
  c->out[0] = {t, c->in[0]->dims};
  return true;
}

std::unique_ptr<Kernel> PrepareBitCast(const KernelCtx &c, std::string *) { return MakeCopyKernel(c.out[0].Bytes()); }

}  // namespace

void RegisterMisc3Ops(std::vector<OpDef> *ops) {
  ops->push_back({"Unique", 1, 1, 1, 4, CheckUnique, InferUnique, PrepareUnique, true});
  ops->push_back({"BitCast", 1, 1, 1, 1, CheckBitCast, InferBitCast, PrepareBitCast, true});
  ops->push_back({"CausalConvWithState", 2, 4, 1, 2, CheckCausalConv, InferCausalConv, PrepareCausalConv, true});
  ops->push_back({"TensorScatter", 2, 3, 1, 1, CheckTensorScatter, InferTensorScatter, PrepareTensorScatter, true});
}

}  // namespace onnx
}  // namespace twin
