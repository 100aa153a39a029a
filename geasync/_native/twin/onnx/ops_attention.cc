// Attention (opset 23+): 3-D ([B, S, H*D]) or 4-D ([B, H, S, D]) Q/K/V, grouped-query heads, attn_mask (bool or
// additive, right-aligned broadcast, last dim padded), is_causal (bottom-right aligned), past key/value with present
// outputs, nonpad_kv_seqlen, sliding windows, softcap, scale, softmax_precision and the four qk_matmul_output modes.
// QK^T and PV run through the GEMM. float32/float64 natively; float16/bfloat16 through float32, where float16 rounds
// every intermediate to float16 as the reference does (its tolerances are one float16 ulp).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")  // the per-row mask and softmax loops vectorise
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "elem.h"
#include "gemm.h"
#include "intra_op.h"
#include "vmath.h"

namespace twin {
namespace onnx {
namespace {

struct AttnAttrs {
  float scale = 0.f;  // 0: 1/sqrt(head size)
  bool has_scale = false;
  int64_t is_causal = 0, q_heads = 0, kv_heads = 0, softmax_precision = 0, mode = 0;
  int64_t left = -1, right = -1;
  float softcap = 0.f;
};

bool ReadAttnAttrs(const Node &n, AttnAttrs *a, std::string *reason) {
  a->has_scale = n.FindAttr("scale") != nullptr;
  if (!AttrFloat(n, "scale", 0.f, &a->scale, reason) || !AttrInt(n, "is_causal", 0, &a->is_causal, reason) ||
      !AttrInt(n, "q_num_heads", 0, &a->q_heads, reason) || !AttrInt(n, "kv_num_heads", 0, &a->kv_heads, reason) ||
      !AttrInt(n, "softmax_precision", 0, &a->softmax_precision, reason) ||
      !AttrInt(n, "qk_matmul_output_mode", 0, &a->mode, reason) ||
      !AttrInt(n, "left_window_size", -1, &a->left, reason) ||
      !AttrInt(n, "right_window_size", -1, &a->right, reason) || !AttrFloat(n, "softcap", 0.f, &a->softcap, reason))
    return false;
  if (a->mode < 0 || a->mode > 3) {
    *reason = "attribute 'qk_matmul_output_mode' is " + std::to_string(a->mode) + "; expected 0, 1, 2 or 3";
    return false;
  }
  if (a->is_causal != 0 && a->is_causal != 1) {
    *reason = "attribute 'is_causal' is " + std::to_string(a->is_causal) + "; expected 0 or 1";
    return false;
  }
  if (a->left < -1 || a->right < -1) {
    *reason = "attributes 'left_window_size' / 'right_window_size' must be -1 or nonnegative";
    return false;
  }
  if (a->q_heads < 0 || a->kv_heads < 0) {
    *reason = "attributes 'q_num_heads' / 'kv_num_heads' must be positive";
    return false;
  }
  if (a->has_scale && !(a->scale > 0.f) && !(a->scale < 0.f)) {
    *reason = "attribute 'scale' must be nonzero";
    return false;
  }
  return true;
}

bool CheckAttention(const Node &n, int64_t, std::string *reason) {
  AttnAttrs a;
  return ReadAttnAttrs(n, &a, reason);
}

// Geometry in the 4-D view: Q [B, Hq, Sq, D], K [B, Hkv, Skv, D], V [B, Hkv, Skv, Dv], past length P.
struct AttnGeom {
  bool rank3 = false;
  int64_t b = -1, hq = -1, hkv = -1, sq = -1, skv = -1, d = -1, dv = -1, past = 0;
};

int64_t DimAdd(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a + b; }
bool DimsMismatch(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

bool HeadSplit(int64_t hidden, int64_t heads, const char *what, int64_t *d, std::string *reason) {
  if (hidden < 0) {
    *d = -1;
    return true;
  }
  if (heads <= 0 || hidden % heads != 0) {
    *reason = std::string(what) + " hidden size " + std::to_string(hidden) + " is not a multiple of its head count " +
              std::to_string(heads) + " (3-D inputs need attributes q_num_heads and kv_num_heads)";
    return false;
  }
  *d = hidden / heads;
  return true;
}

bool AttnGeometry(const std::vector<const TensorDesc *> &in, const AttnAttrs &a, AttnGeom *g, std::string *reason) {
  const auto &q = in[0]->dims, &k = in[1]->dims, &v = in[2]->dims;
  if ((q.size() != 3 && q.size() != 4) || k.size() != q.size() || v.size() != q.size()) {
    *reason = "Q, K and V must all be 3-D or all 4-D, not " + ShapeStr(q) + ", " + ShapeStr(k) + ", " + ShapeStr(v);
    return false;
  }
  g->rank3 = q.size() == 3;
  g->b = q[0];
  if (g->rank3) {
    g->hq = a.q_heads;
    g->hkv = a.kv_heads;
    g->sq = q[1];
    g->skv = k[1];
    int64_t dk;
    if (!HeadSplit(q[2], g->hq, "Q", &g->d, reason) || !HeadSplit(k[2], g->hkv, "K", &dk, reason) ||
        !HeadSplit(v[2], g->hkv, "V", &g->dv, reason))
      return false;
    if (DimsMismatch(dk, g->d)) {
      *reason = "K head size " + std::to_string(dk) + " differs from Q head size " + std::to_string(g->d);
      return false;
    }
    if (DimsMismatch(k[1], v[1])) {
      *reason = "K " + ShapeStr(k) + " and V " + ShapeStr(v) + " differ in sequence length";
      return false;
    }
  } else {
    g->hq = q[1];
    g->hkv = k[1];
    g->sq = q[2];
    g->skv = k[2];
    g->d = q[3];
    g->dv = v[3];
    if (DimsMismatch(k[3], q[3]) || DimsMismatch(k[1], v[1]) || DimsMismatch(k[2], v[2])) {
      *reason = "K " + ShapeStr(k) + " must be [B, Hkv, Skv, " + std::to_string(q[3]) + "] and V " + ShapeStr(v) +
                " [B, Hkv, Skv, Dv]";
      return false;
    }
  }
  if (DimsMismatch(k[0], g->b) || DimsMismatch(v[0], g->b)) {
    *reason = "Q, K and V differ in batch size";
    return false;
  }
  if (g->hq > 0 && g->hkv > 0 && g->hq % g->hkv != 0) {
    *reason = "Q's " + std::to_string(g->hq) + " heads are not a multiple of K/V's " + std::to_string(g->hkv);
    return false;
  }
  return true;
}

bool CheckPast(const TensorDesc &p, const AttnGeom &g, int64_t last, const char *what, std::string *reason) {
  const auto &d = p.dims;
  if (d.size() != 4 || DimsMismatch(d[0], g.b) || DimsMismatch(d[1], g.hkv) || DimsMismatch(d[3], last)) {
    *reason = std::string(what) + " " + DescStr(p) + " must be [B, Hkv, P, head size] = [" + std::to_string(g.b) +
              ", " + std::to_string(g.hkv) + ", P, " + std::to_string(last) + "]";
    return false;
  }
  return true;
}

bool InferAttention(InferCtx *c, std::string *reason) {
  const TensorDesc &q = *c->in[0];
  if (!IsFloatType(q.dtype)) {
    *reason = DtypeNotSupported(q.dtype);
    return false;
  }
  for (size_t i = 1; i < 6; ++i) {
    if (!c->has(i) || c->in[i]->dtype == q.dtype || (i == 3 && c->in[i]->dtype == ElemType::kBool)) continue;
    *reason = "input '" + c->node->input_names[i] + "' is " + ElemTypeName(c->in[i]->dtype) + ", expected " +
              ElemTypeName(q.dtype) + (i == 3 ? " or bool" : "");
    return false;
  }
  AttnAttrs a;
  if (!ReadAttnAttrs(*c->node, &a, reason)) return false;
  for (size_t i = 0; i < 7; ++i) {
    if (c->has(i) && c->in[i]->IsUnknownRank()) {
      for (auto &o : c->out) o = TensorDesc{q.dtype, {kUnknownRankDim}};
      return true;
    }
  }
  AttnGeom g;
  if (!AttnGeometry(c->in, a, &g, reason)) return false;
  if (c->has(4) != c->has(5)) {
    *reason = "past_key and past_value must be given together";
    return false;
  }
  if (c->has(4)) {
    if (!CheckPast(*c->in[4], g, g.d, "past_key", reason) || !CheckPast(*c->in[5], g, g.dv, "past_value", reason))
      return false;
    g.past = c->in[4]->dims[2];
    if (DimsMismatch(c->in[5]->dims[2], g.past)) {
      *reason = "past_key and past_value differ in sequence length";
      return false;
    }
  }
  const int64_t total = DimAdd(g.past, g.skv);
  if (c->has(3)) {
    const auto &m = c->in[3]->dims;
    const int64_t full[4] = {g.b, g.hq, g.sq, total};
    bool ok = !m.empty() && m.size() <= 4 && !(m.back() >= 0 && total >= 0 && m.back() > total);
    for (size_t i = 0; ok && i + 1 < m.size(); ++i) {
      const int64_t want = full[4 - m.size() + i];
      ok = m[i] == 1 || m[i] < 0 || want < 0 || m[i] == want;
    }
    if (!ok) {
      *reason = "attn_mask " + ShapeStr(m) + " does not broadcast to [B, Hq, Sq, <= P + Skv] = " +
                ShapeStr({full[0], full[1], full[2], full[3]});
      return false;
    }
  }
  if (c->has(6)) {
    const TensorDesc &np = *c->in[6];
    if (np.dtype != ElemType::kInt64 || np.dims.size() != 1 || DimsMismatch(np.dims[0], g.b)) {
      *reason = "nonpad_kv_seqlen " + DescStr(np) + " must be int64 [B]";
      return false;
    }
    if (c->has(4)) {
      *reason = "nonpad_kv_seqlen cannot be combined with past_key/past_value";
      return false;
    }
  }
  c->out[0] = TensorDesc{q.dtype, g.rank3 ? std::vector<int64_t>{g.b, g.sq, g.hq * g.dv}
                                          : std::vector<int64_t>{g.b, g.hq, g.sq, g.dv}};
  if (g.rank3 && (g.hq < 0 || g.dv < 0)) c->out[0].dims[2] = -1;
  if (c->out.size() > 1) c->out[1] = TensorDesc{q.dtype, {g.b, g.hkv, total, g.d}};
  if (c->out.size() > 2) c->out[2] = TensorDesc{q.dtype, {g.b, g.hkv, total, g.dv}};
  if (c->out.size() > 3) c->out[3] = TensorDesc{q.dtype, {g.b, g.hq, g.sq, total}};
  return true;
}

// kHalf: round every intermediate to float16 (the reference computes each numpy step in float16).
template <class T, bool kHalf>
class AttentionKernel : public Kernel {
 public:
  AttentionKernel(const AttnAttrs &a, const AttnGeom &g, std::vector<int64_t> mask_dims, bool mask_bool,
                  bool has_past, bool has_nonpad, size_t n_out)
      : a_(a), g_(g), total_(g.past + g.skv), mask_dims_(std::move(mask_dims)), mask_bool_(mask_bool),
        has_past_(has_past), has_nonpad_(has_nonpad), n_out_(n_out) {
    const double scale = a.has_scale ? static_cast<double>(a.scale) : 1.0 / std::sqrt(static_cast<double>(g.d));
    sqrt_scale_ = R(static_cast<T>(std::sqrt(scale)));
    plain_ = mask_dims_.empty() && !has_nonpad_ && !a_.is_causal && a_.left < 0 && a_.right < 0 && a_.softcap <= 0.f;
    // The (batch, head) pairs are independent: the intra-op pool shares them out, each chunk with a scratch slot.
    grain_ = GrainForMacs(g.sq * total_ * (g.d + g.dv));
    work_.resize(ScratchSlots::SlotCount(ChunksOf(g.b * g.hq, grain_)));
    for (Work &w : work_) {
      w.qs.resize(g.sq * g.d);
      w.ks.resize(total_ * g.d);
      w.s.resize(g.sq * total_);
      w.bias.resize(total_);
      if (plain_) w.p.resize(g.sq * total_);
      w.y.resize(g.sq * g.dv);
    }
    if (n_out < 2) pk_.resize(g.b * g.hkv * total_ * g.d);
    if (n_out < 3) pv_.resize(g.b * g.hkv * total_ * g.dv);
    // Mask strides over the [B, Hq, Sq, last] view (0 on broadcast axes).
    for (size_t i = 0; i < mask_dims_.size(); ++i) {
      const size_t ax = 4 - mask_dims_.size() + i;
      int64_t st = 1;
      for (size_t j = i + 1; j < mask_dims_.size(); ++j) st *= mask_dims_[j];
      mstride_[ax] = mask_dims_[i] == 1 && ax != 3 ? 0 : st;
    }
    mlast_ = mask_dims_.empty() ? 0 : mask_dims_.back();
  }

  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *q = static_cast<const T *>(in[0]);
    // K and V as [B, Hkv, total, width]: the 4-D inputs themselves without a past (unless present_* is an output)
    const T *pk = static_cast<const T *>(in[1]), *pv = static_cast<const T *>(in[2]);
    if (has_past_ || g_.rank3 || (n_out_ > 1 && out[1])) {
      T *dst = n_out_ > 1 && out[1] ? static_cast<T *>(out[1]) : pk_.data();
      BuildPresent(pk, has_past_ ? static_cast<const T *>(in[4]) : nullptr, g_.d, dst);
      pk = dst;
    }
    if (has_past_ || g_.rank3 || (n_out_ > 2 && out[2])) {
      T *dst = n_out_ > 2 && out[2] ? static_cast<T *>(out[2]) : pv_.data();
      BuildPresent(pv, has_past_ ? static_cast<const T *>(in[5]) : nullptr, g_.dv, dst);
      pv = dst;
    }
    const void *mask = mask_dims_.empty() ? nullptr : in[3];
    const int64_t *nonpad = has_nonpad_ ? static_cast<const int64_t *>(in[6]) : nullptr;
    T *y = static_cast<T *>(out[0]);
    T *qk_out = n_out_ > 3 && out[3] ? static_cast<T *>(out[3]) : nullptr;
    if (g_.sq == 0 || total_ == 0 || g_.dv == 0) {  // no keys: every row is fully masked, Y = 0
      std::fill(y, y + g_.b * g_.hq * g_.sq * g_.dv, T(0));
      return true;
    }
    ScratchSlots slots(static_cast<int>(work_.size()));
    ParallelForAnyCut(g_.b * g_.hq, grain_, [&](int64_t lo, int64_t hi) {
      const ScratchSlots::Hold hold(slots);
      Work &w = work_[hold.index()];
      for (int64_t bh = lo; bh < hi; ++bh) Head(w, bh / g_.hq, bh % g_.hq, q, pk, pv, mask, nonpad, y, qk_out);
    });
    return true;
  }

 private:
  struct Work {  // one head's scratch
    std::vector<T> qs, ks, s, bias, y;
    std::vector<T> p;  // PlainSoftmax's probabilities
  };

  // Head h of batch b: scaled Q and K, scores, softmax, times V into Y (and qk_matmul_output's slice).
  void Head(Work &w, int64_t b, int64_t h, const T *q, const T *pk, const T *pv, const void *mask,
            const int64_t *nonpad, T *y, T *qk_out) {
    const int64_t kvh = h / (g_.hq / g_.hkv);
    const T *kb = pk + (b * g_.hkv + kvh) * total_ * g_.d;
    const T *vb = pv + (b * g_.hkv + kvh) * total_ * g_.dv;
    for (int64_t i = 0; i < total_ * g_.d; ++i) w.ks[i] = R(kb[i] * sqrt_scale_);
    for (int64_t s = 0; s < g_.sq; ++s)
      for (int64_t j = 0; j < g_.d; ++j) w.qs[s * g_.d + j] = R(q[QIndex(b, h, s) + j] * sqrt_scale_);
    Gemm<T>(false, true, g_.sq, total_, g_.d, T(1), w.qs.data(), g_.d, w.ks.data(), g_.d, T(0), w.s.data(), total_);
    T *qk_bh = qk_out ? qk_out + (b * g_.hq + h) * g_.sq * total_ : nullptr;
    const T *probs = w.s.data();
    if (!PlainSoftmax(w, qk_bh, &probs))
      for (int64_t s = 0; s < g_.sq; ++s) Row(w, b, h, s, mask, nonpad, w.s.data() + s * total_, qk_bh);
    if (!kHalf && !g_.rank3) {  // the head's rows are contiguous in Y: no copy
      Gemm<T>(false, false, g_.sq, g_.dv, total_, T(1), probs, total_, vb, g_.dv, T(0), y + YIndex(b, h, 0), g_.dv);
      return;
    }
    Gemm<T>(false, false, g_.sq, g_.dv, total_, T(1), probs, total_, vb, g_.dv, T(0), w.y.data(), g_.dv);
    for (int64_t s = 0; s < g_.sq; ++s)
      for (int64_t j = 0; j < g_.dv; ++j) y[YIndex(b, h, s) + j] = R(w.y[s * g_.dv + j]);
  }

  static T R(T v) {
    if constexpr (kHalf) return HalfToFloat(FloatToHalf(v));
    else return v;
  }
  int64_t QIndex(int64_t b, int64_t h, int64_t s) const {
    return g_.rank3 ? ((b * g_.sq + s) * g_.hq + h) * g_.d : ((b * g_.hq + h) * g_.sq + s) * g_.d;
  }
  int64_t YIndex(int64_t b, int64_t h, int64_t s) const {
    return g_.rank3 ? ((b * g_.sq + s) * g_.hq + h) * g_.dv : ((b * g_.hq + h) * g_.sq + s) * g_.dv;
  }

  // present = concat(past, new) along the sequence, in the 4-D layout [B, Hkv, P + Skv, width].
  void BuildPresent(const T *x, const T *past, int64_t width, T *dst) const {
    for (int64_t b = 0; b < g_.b; ++b)
      for (int64_t h = 0; h < g_.hkv; ++h) {
        T *o = dst + (b * g_.hkv + h) * total_ * width;
        if (past) CopyBytes(o, past + (b * g_.hkv + h) * g_.past * width, sizeof(T) * g_.past * width);
        o += g_.past * width;
        for (int64_t s = 0; s < g_.skv; ++s) {
          const T *src = g_.rank3 ? x + ((b * g_.skv + s) * g_.hkv + h) * width
                                  : x + ((b * g_.hkv + h) * g_.skv + s) * width;
          CopyBytes(o + s * width, src, sizeof(T) * width);
        }
      }
  }

  // float32 rows without bias (no mask, causality, window or key padding) or softcap: vmath's fused softmax of the
  // whole [sq, total] block into w.p (*probs). Rows it turns into NaN (a NaN score, or an infinite maximum, which
  // the per-row path guards) are redone by Softmax from the scores, which stay in w.s. False: not applicable.
  bool PlainSoftmax(Work &w, T *qk_bh, const T **probs) {
    if constexpr (std::is_same<T, float>::value && !kHalf) {
      if (!plain_) return false;
      const int64_t n = total_;
      if (qk_bh && a_.mode <= 2) std::copy(w.s.begin(), w.s.end(), qk_bh);  // scores = scores after the zero bias
      vmath::SoftmaxRows(w.s.data(), w.p.data(), g_.sq, n, false);
      for (int64_t i = 0; vmath::AnyNan(w.p.data(), g_.sq * n) && i < g_.sq; ++i) {
        T *row = w.p.data() + i * n;
        if (!vmath::AnyNan(row, n)) continue;
        std::copy_n(w.s.data() + i * n, n, row);
        Softmax(w, row, n, false);
      }
      if (qk_bh && a_.mode == 3) std::copy(w.p.begin(), w.p.end(), qk_bh);
      *probs = w.p.data();
      return true;
    }
    return false;
  }

  // Additive bias of query row (b, h, i): mask, causal frontier, window, key padding (0 or -inf each).
  void RowBias(Work &w, int64_t b, int64_t h, int64_t i, const void *mask, const int64_t *nonpad) const {
    const T ninf = -std::numeric_limits<T>::infinity();
    const int64_t offset = has_past_ ? g_.past : nonpad ? nonpad[b] - g_.sq : 0;
    const int64_t mbase = b * mstride_[0] + h * mstride_[1] + i * mstride_[2];
    for (int64_t j = 0; j < total_; ++j) {
      T v = T(0);
      if (mask) {
        if (j >= mlast_) v = ninf;
        else if (mask_bool_) v = static_cast<const uint8_t *>(mask)[mbase + j] ? T(0) : ninf;
        else v = static_cast<const T *>(mask)[mbase + j];
      }
      const int64_t diff = i + offset - j;
      if (a_.is_causal && diff < 0) v = ninf;
      if ((a_.left >= 0 && diff > a_.left) || (a_.right >= 0 && -diff > a_.right)) v = ninf;
      if (nonpad && j >= nonpad[b]) v = ninf;
      w.bias[j] = v;
    }
  }

  // Softcap, bias, softmax and the fully-masked guard on one row of scores, in place; fills qk_matmul_output.
  void Row(Work &w, int64_t b, int64_t h, int64_t i, const void *mask, const int64_t *nonpad, T *x, T *qk_bh) {
    // Without a mask, causality, window or key padding the bias is all zeros: skipped.
    const bool biased = mask || nonpad || a_.is_causal || a_.left >= 0 || a_.right >= 0;
    if (biased) RowBias(w, b, h, i, mask, nonpad);
    const int64_t n = total_;
    if constexpr (kHalf)
      for (int64_t j = 0; j < n; ++j) x[j] = R(x[j]);
    if (a_.softcap > 0.f) {
      const T cap = static_cast<T>(a_.softcap);
      for (int64_t j = 0; j < n; ++j) x[j] = R(R(std::tanh(R(x[j] / cap))) * cap);
    }
    T *qo = qk_bh ? qk_bh + i * n : nullptr;
    if (qo && a_.mode <= 1)
      for (int64_t j = 0; j < n; ++j) qo[j] = x[j];
    bool all_masked = biased;
    if (biased) {
      const T ninf = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        all_masked &= w.bias[j] == ninf;
        x[j] = R(x[j] + w.bias[j]);
      }
    }
    if (qo && a_.mode == 2)
      for (int64_t j = 0; j < n; ++j) qo[j] = x[j];
    Softmax(w, x, n, all_masked);
    if (qo && a_.mode == 3)
      for (int64_t j = 0; j < n; ++j) qo[j] = x[j];
  }

  void Softmax(Work &w, T *x, int64_t n, bool all_masked) const {
    if (all_masked) {
      for (int64_t j = 0; j < n; ++j) x[j] = T(0);
      return;
    }
    // float16 with softmax_precision = float computes the softmax unrounded, then casts back.
    const bool round = kHalf && (a_.softmax_precision == 0 || a_.softmax_precision == 10);
    auto rs = [=](T v) { return round ? R(v) : v; };
    T mx = -std::numeric_limits<T>::infinity();
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {  // written so that it vectorises: a NaN never wins the comparison
      nan |= x[j] != x[j];
      mx = x[j] > mx ? x[j] : mx;
    }
    if (nan) mx = std::numeric_limits<T>::quiet_NaN();
    if (std::isinf(mx) && mx < 0) mx = T(0);
    if constexpr (std::is_same<T, float>::value && !kHalf) {  // vmath's vectorised exp; w.bias is free by now
      for (int64_t j = 0; j < n; ++j) x[j] -= mx;
      float *e = w.bias.data();
      vmath::ExpArray(x, e, n);
      double total = 0;
      for (int64_t j = 0; j < n; ++j) total += static_cast<double>(e[j]);
      const float s = total == 0 ? 1.0f : static_cast<float>(total);
      for (int64_t j = 0; j < n; ++j) x[j] = e[j] / s;
      return;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      x[j] = rs(static_cast<T>(std::exp(rs(x[j] - mx))));
      sum += static_cast<double>(x[j]);
    }
    T s = rs(static_cast<T>(sum));
    if (s == T(0)) s = T(1);
    for (int64_t j = 0; j < n; ++j) x[j] = R(rs(x[j] / s));
  }

  AttnAttrs a_;
  AttnGeom g_;
  int64_t total_;
  std::vector<int64_t> mask_dims_;
  bool mask_bool_, has_past_, has_nonpad_;
  size_t n_out_;
  T sqrt_scale_;
  int64_t mstride_[4] = {0, 0, 0, 0}, mlast_ = 0;
  std::vector<T> pk_, pv_;  // present K / V when not outputs
  bool plain_ = false;      // float32 rows take PlainSoftmax
  int64_t grain_ = 1;       // (batch, head) pairs per chunk
  std::vector<Work> work_;  // a scratch slot per chunk running at once
};

template <bool kHalf>
std::unique_ptr<Kernel> PrepareAttentionFloat(const KernelCtx &c, std::string *reason) {
  AttnAttrs a;
  AttnGeom g;
  if (!ReadAttnAttrs(*c.node, &a, reason) || !AttnGeometry(c.in, a, &g, reason)) return nullptr;
  const bool has_past = c.has(4);
  if (has_past) g.past = c.in[4]->dims[2];
  std::vector<int64_t> mask_dims;
  bool mask_bool = false;
  if (c.has(3)) {
    mask_dims = c.in[3]->dims;
    mask_bool = c.in[3]->dtype == ElemType::kBool;
  }
  if (g.hkv == 0 || g.d == 0) {
    *reason = "Attention with zero heads or zero head size is not supported by the twin";
    return nullptr;
  }
  const size_t n_out = c.out.size();
  if (c.in[0]->dtype == ElemType::kFloat)
    return std::make_unique<AttentionKernel<float, kHalf>>(a, g, mask_dims, mask_bool, has_past, c.has(6), n_out);
  if constexpr (!kHalf) {
    if (c.in[0]->dtype == ElemType::kDouble)
      return std::make_unique<AttentionKernel<double, false>>(a, g, mask_dims, mask_bool, has_past, c.has(6), n_out);
  }
  *reason = DtypeNotSupported(c.in[0]->dtype);
  return nullptr;
}

std::unique_ptr<Kernel> PrepareAttention(const KernelCtx &c, std::string *reason) {
  if (!HasHalfTypes(c)) return PrepareAttentionFloat<false>(c, reason);
  return c.in[0]->dtype == ElemType::kFloat16 ? PrepareViaFloat(c, PrepareAttentionFloat<true>, reason)
                                              : PrepareViaFloat(c, PrepareAttentionFloat<false>, reason);
}

}  // namespace

void RegisterAttentionOps(std::vector<OpDef> *ops) {
  ops->push_back({"Attention", 3, 7, 1, 4, CheckAttention, InferAttention, PrepareAttention, true});
}

}  // namespace onnx
}  // namespace twin
