// LinearAttention (opset 27): recurrent linear attention with a [d_k, d_v] state per key/value head, updated step by
// step with the linear, gated (exp(decay) forgetting), delta (beta-weighted error correction) or gated_delta rule;
// query heads share key/value heads in groups (GQA / MQA). Computed in float32 like the reference; chunk_size is a
// tuning hint without effect on the result.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <cmath>

#include "elem.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

struct LinAttrs {
  int64_t q_heads = 0, kv_heads = 0;
  float scale = 0;
  bool gating = true, delta = true;
};

bool ReadLinAttrs(const Node &n, LinAttrs *a, std::string *reason) {
  const Attribute *rule = n.FindAttr("update_rule");
  const std::string r = rule ? rule->s : "gated_delta";
  if ((rule && rule->type != kAttrString) || (r != "linear" && r != "gated" && r != "delta" && r != "gated_delta")) {
    *reason = "attribute 'update_rule' must be 'linear', 'gated', 'delta' or 'gated_delta', got '" + r + "'";
    return false;
  }
  a->gating = r == "gated" || r == "gated_delta";
  a->delta = r == "delta" || r == "gated_delta";
  if (!AttrInt(n, "q_num_heads", 0, &a->q_heads, reason) || !AttrInt(n, "kv_num_heads", 0, &a->kv_heads, reason) ||
      !AttrFloat(n, "scale", 0.f, &a->scale, reason))
    return false;
  if (a->q_heads <= 0 || a->kv_heads <= 0 || a->q_heads % a->kv_heads != 0) {
    *reason = "attributes 'q_num_heads' (" + std::to_string(a->q_heads) + ") and 'kv_num_heads' (" +
              std::to_string(a->kv_heads) +
              ") are required, and q_num_heads must be a positive multiple of kv_num_heads";
    return false;
  }
  return true;
}

bool CheckLinAttention(const Node &n, int64_t, std::string *reason) {
  LinAttrs a;
  if (!ReadLinAttrs(n, &a, reason)) return false;
  auto given = [&](size_t i) { return i < n.input_names.size() && !n.input_names[i].empty(); };
  if (given(4) != a.gating || given(5) != a.delta) {
    *reason = std::string("this update_rule ") + (a.gating ? "requires" : "forbids") + " input 'decay' and " +
              (a.delta ? "requires" : "forbids") + " input 'beta'";
    return false;
  }
  return true;
}

// Sizes: batch, steps, d_k, d_v, and the last dims of decay / beta (per head or per head and key dim / shared).
struct LinGeom {
  int64_t b = 0, t = 0, dk = 0, dv = 0, decay_last = 0, beta_last = 0;
};

bool LinShape(const InferCtx &c, const LinAttrs &a, LinGeom *g, std::string *reason) {
  const TensorDesc &q = *c.in[0], &k = *c.in[1], &v = *c.in[2];
  for (const TensorDesc *d : {&q, &k, &v})
    if (d->dtype != q.dtype || d->dims.size() != 3 || !IsFloatType(q.dtype)) {
      *reason = "query, key and value must be float tensors [batch, steps, heads * head_size] of one dtype, got " +
                DescStr(q) + ", " + DescStr(k) + ", " + DescStr(v);
      return false;
    }
  g->b = q.dims[0], g->t = q.dims[1];
  if (q.dims[2] < 0 || v.dims[2] < 0) return true;  // sizes checked once known
  g->dk = q.dims[2] / a.q_heads, g->dv = v.dims[2] / a.kv_heads;
  bool ok = q.dims[2] % a.q_heads == 0 && v.dims[2] % a.kv_heads == 0 && k.dims[2] == a.kv_heads * g->dk;
  for (const TensorDesc *d : {&k, &v})
    ok &= (d->dims[0] < 0 || d->dims[0] == g->b) && (d->dims[1] < 0 || d->dims[1] == g->t);
  if (!ok) {
    *reason = "query " + DescStr(q) + ", key " + DescStr(k) + " and value " + DescStr(v) +
              " do not split into q_num_heads / kv_num_heads heads of one key size";
    return false;
  }
  if (c.has(3)) {
    const TensorDesc &p = *c.in[3];
    if (p.dtype != q.dtype || p.dims != std::vector<int64_t>{g->b, a.kv_heads, g->dk, g->dv}) {
      *reason = "input 'past_state' must be " + ShapeStr({g->b, a.kv_heads, g->dk, g->dv}) +
                " of the query's dtype, got " + DescStr(p);
      return false;
    }
  }
  for (size_t i : {size_t(4), size_t(5)}) {
    if (!c.has(i)) continue;
    const TensorDesc &d = *c.in[i];
    const int64_t last = d.dims.size() == 3 ? d.dims[2] : -1;
    const bool fits = i == 4 ? (last == a.kv_heads || last == a.kv_heads * g->dk) : (last == a.kv_heads || last == 1);
    if (d.dtype != q.dtype || !fits || d.dims[0] != g->b || d.dims[1] != g->t) {
      *reason = std::string("input '") + (i == 4 ? "decay' must be [batch, steps, kv_num_heads (* d_k)]"
                                                 : "beta' must be [batch, steps, kv_num_heads or 1]") +
                " of the query's dtype, got " + DescStr(d);
      return false;
    }
    (i == 4 ? g->decay_last : g->beta_last) = last;
  }
  return true;
}

bool InferLinAttention(InferCtx *c, std::string *reason) {
  LinAttrs a;
  LinGeom g;
  if (!ReadLinAttrs(*c->node, &a, reason) || !LinShape(*c, a, &g, reason)) return false;
  const TensorDesc &q = *c->in[0], &v = *c->in[2];
  const bool known = q.dims[2] >= 0 && v.dims[2] >= 0;
  c->out[0] = {q.dtype, {g.b, g.t, known ? a.q_heads * g.dv : -1}};
  if (c->out.size() > 1)
    c->out[1] = {c->has(3) ? c->in[3]->dtype : q.dtype, {g.b, a.kv_heads, known ? g.dk : -1, known ? g.dv : -1}};
  return true;
}

template <class S>
class LinAttentionKernel : public Kernel {
 public:
  LinAttentionKernel(const KernelCtx &c, LinAttrs a, LinGeom g)
      : a_(a), g_(g), has_past_(c.has(3)), has_present_(c.out.size() > 1),
        state_(static_cast<size_t>(g.dk * g.dv)), vt_(static_cast<size_t>(g.dv)), gate_(static_cast<size_t>(g.dk)) {
    scale_ = a.scale != 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(g.dk));
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *q = static_cast<const S *>(in[0]), *k = static_cast<const S *>(in[1]), *v = static_cast<const S *>(in[2]);
    const S *past = has_past_ ? static_cast<const S *>(in[3]) : nullptr;
    const S *decay = a_.gating ? static_cast<const S *>(in[4]) : nullptr;
    const S *beta = a_.delta ? static_cast<const S *>(in[5]) : nullptr;
    S *y = static_cast<S *>(out[0]), *present = has_present_ ? static_cast<S *>(out[1]) : nullptr;
    const int64_t hk = a_.kv_heads, group = a_.q_heads / hk, dk = g_.dk, dv = g_.dv;
    for (int64_t b = 0; b < g_.b; ++b)
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t sbase = (b * hk + h) * dk * dv;
        for (int64_t i = 0; i < dk * dv; ++i) state_[i] = past ? L(past[sbase + i]) : 0.f;
        for (int64_t t = 0; t < g_.t; ++t) {
          const int64_t bt = b * g_.t + t;
          const S *kt = k + (bt * hk + h) * dk, *vt = v + (bt * hk + h) * dv;
          if (decay) Decay(decay + bt * g_.decay_last, h);
          for (int64_t m = 0; m < dv; ++m) vt_[m] = L(vt[m]);
          if (beta) {  // v - S^T k, weighted by beta
            const float bw = L(beta[bt * g_.beta_last + (g_.beta_last == 1 ? 0 : h)]);
            for (int64_t m = 0; m < dv; ++m) {
              float r = 0;
              for (int64_t d = 0; d < dk; ++d) r += state_[d * dv + m] * L(kt[d]);
              vt_[m] = bw * (vt_[m] - r);
            }
          }
          for (int64_t d = 0; d < dk; ++d) {
            const float kd = L(kt[d]);
            float *row = &state_[d * dv];
            for (int64_t m = 0; m < dv; ++m) row[m] += kd * vt_[m];
          }
          for (int64_t hq = h * group; hq < (h + 1) * group; ++hq) {
            const S *qt = q + (bt * a_.q_heads + hq) * dk;
            S *yt = y + (bt * a_.q_heads + hq) * dv;
            for (int64_t m = 0; m < dv; ++m) vt_[m] = 0;
            for (int64_t d = 0; d < dk; ++d) {
              const float qd = L(qt[d]);
              const float *row = &state_[d * dv];
              for (int64_t m = 0; m < dv; ++m) vt_[m] += qd * row[m];
            }
            for (int64_t m = 0; m < dv; ++m) yt[m] = Num<S>::Store(static_cast<typename Num<S>::C>(scale_ * vt_[m]));
          }
        }
        if (present)
          for (int64_t i = 0; i < dk * dv; ++i)
            present[sbase + i] = Num<S>::Store(static_cast<typename Num<S>::C>(state_[i]));
      }
    return true;
  }

 private:
  static float L(S x) { return static_cast<float>(Num<S>::Load(x)); }

  // state *= exp(decay), one factor per head or per key dim of the head.
  void Decay(const S *row, int64_t h) {
    const int64_t dk = g_.dk, dv = g_.dv;
    const bool per_dim = g_.decay_last != a_.kv_heads;
    for (int64_t d = 0; d < dk; ++d) gate_[d] = L(per_dim ? row[h * dk + d] : row[h]);
    for (int64_t d = 0; d < dk; ++d) gate_[d] = vmath::Exp(gate_[d]);
    for (int64_t d = 0; d < dk; ++d)
      for (int64_t m = 0; m < dv; ++m) state_[d * dv + m] *= gate_[d];
  }

  LinAttrs a_;
  LinGeom g_;
  bool has_past_, has_present_;
  float scale_ = 1;
  std::vector<float> state_, vt_, gate_;
};

std::unique_ptr<Kernel> PrepareLinAttention(const KernelCtx &c, std::string *reason) {
  LinAttrs a;
  LinGeom g;
  InferCtx ic = c.AsInferCtx();
  if (!ReadLinAttrs(*c.node, &a, reason) || !LinShape(ic, a, &g, reason)) return nullptr;
  std::unique_ptr<Kernel> kernel;
  VisitType(c.in[0]->dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) kernel.reset(new LinAttentionKernel<S>(c, a, g));
  });
  if (!kernel) *reason = DtypeNotSupported(c.in[0]->dtype);
  return kernel;
}

}  // namespace

void RegisterLinearAttentionOps(std::vector<OpDef> *ops) {
  ops->push_back({"LinearAttention", 3, 6, 1, 2, CheckLinAttention, InferLinAttention, PrepareLinAttention, true});
}

}  // namespace onnx
}  // namespace twin
