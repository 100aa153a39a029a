// Recurrent layers: RNN, GRU and LSTM (forward, reverse, bidirectional; layout 0 and 1; sequence_lens; initial
// states; LSTM peepholes and input_forget; clip; linear_before_reset; every activation ONNX lists for them).
// The input projection X W^T of all time steps is one GEMM per direction; each step then does one H R^T GEMM and
// the gate arithmetic. float32 and float64.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>

#include "elem.h"
#include "gemm.h"

namespace twin {
namespace onnx {
namespace {

enum class Kind { kRnn, kGru, kLstm };

Kind KindOf(const Node &n) { return n.op_type == "RNN" ? Kind::kRnn : n.op_type == "GRU" ? Kind::kGru : Kind::kLstm; }
int Gates(Kind k) { return k == Kind::kRnn ? 1 : k == Kind::kGru ? 3 : 4; }
int ActsPerDir(Kind k) { return k == Kind::kRnn ? 1 : k == Kind::kGru ? 2 : 3; }

enum class Act { kSigmoid, kTanh, kRelu, kLeakyRelu, kHardSigmoid, kAffine, kScaledTanh, kThresholdedRelu, kElu,
                 kSoftsign, kSoftplus };

struct Activation {
  Act act = Act::kTanh;
  double alpha = 0, beta = 0;
  double operator()(double x) const {
    switch (act) {
      case Act::kSigmoid: return 1 / (1 + std::exp(-x));
      case Act::kTanh: return std::tanh(x);
      case Act::kRelu: return x > 0 ? x : 0;
      case Act::kLeakyRelu: return x >= 0 ? x : alpha * x;
      case Act::kHardSigmoid: return std::max(0.0, std::min(1.0, alpha * x + beta));
      case Act::kAffine: return alpha * x + beta;
      case Act::kScaledTanh: return alpha * std::tanh(beta * x);
      case Act::kThresholdedRelu: return x > alpha ? x : 0;
      case Act::kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case Act::kSoftsign: return x / (1 + std::fabs(x));
      case Act::kSoftplus: return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
    }
    return x;
  }
};

struct RnnAttrs {
  Kind kind = Kind::kLstm;
  int dirs = 1;
  bool reverse = false;  // single direction "reverse"
  int64_t hidden = 0, layout = 0;
  bool has_clip = false, input_forget = false, linear_before_reset = false;
  double clip = 0;
  std::vector<Activation> acts;  // ActsPerDir per direction
};

bool ParseActivation(const std::string &name, Activation *a, const std::vector<float> &alphas,
                     const std::vector<float> &betas, size_t *ai, size_t *bi, std::string *reason) {
  struct Spec {
    const char *name;
    Act act;
    int params;  // 0 none, 1 alpha, 2 alpha+beta
    double da, db;
  };
  static const Spec kSpecs[] = {
      {"Sigmoid", Act::kSigmoid, 0, 0, 0},         {"Tanh", Act::kTanh, 0, 0, 0},
      {"Relu", Act::kRelu, 0, 0, 0},               {"LeakyRelu", Act::kLeakyRelu, 1, 0.01, 0},
      {"HardSigmoid", Act::kHardSigmoid, 2, 0.2, 0.5}, {"Affine", Act::kAffine, 2, 1.0, 0},
      {"ScaledTanh", Act::kScaledTanh, 2, 1.0, 1.0},   {"ThresholdedRelu", Act::kThresholdedRelu, 1, 1.0, 0},
      {"Elu", Act::kElu, 1, 1.0, 0},               {"Softsign", Act::kSoftsign, 0, 0, 0},
      {"Softplus", Act::kSoftplus, 0, 0, 0},
  };
  for (const Spec &s : kSpecs) {
    std::string lower_name = s.name, lower_arg = name;
    for (char &ch : lower_name) ch = static_cast<char>(std::tolower(ch));
    for (char &ch : lower_arg) ch = static_cast<char>(std::tolower(ch));
    if (lower_name != lower_arg) continue;
    a->act = s.act;
    a->alpha = s.da;
    a->beta = s.db;
    if (s.params >= 1 && *ai < alphas.size()) a->alpha = alphas[(*ai)++];
    if (s.params >= 2 && *bi < betas.size()) a->beta = betas[(*bi)++];
    return true;
  }
  *reason = "activation '" + name + "' is not supported";
  return false;
}

bool ReadRnnAttrs(const Node &n, RnnAttrs *r, std::string *reason) {
  r->kind = KindOf(n);
  const Attribute *dir = n.FindAttr("direction");
  const std::string d = dir ? dir->s : "forward";
  if (d != "forward" && d != "reverse" && d != "bidirectional") {
    *reason = "attribute 'direction' must be forward, reverse or bidirectional, not '" + d + "'";
    return false;
  }
  r->dirs = d == "bidirectional" ? 2 : 1;
  r->reverse = d == "reverse";
  int64_t inf = 0, lbr = 0;
  float clip = 0;
  if (!AttrInt(n, "hidden_size", 0, &r->hidden, reason) || !AttrInt(n, "layout", 0, &r->layout, reason) ||
      !AttrInt(n, "input_forget", 0, &inf, reason) || !AttrInt(n, "linear_before_reset", 0, &lbr, reason) ||
      !AttrFloat(n, "clip", 0.f, &clip, reason))
    return false;
  r->has_clip = n.FindAttr("clip") != nullptr;
  r->clip = clip;
  r->input_forget = inf != 0;
  r->linear_before_reset = lbr != 0;
  if (r->layout != 0 && r->layout != 1) {
    *reason = "attribute 'layout' must be 0 or 1";
    return false;
  }
  std::vector<std::string> names;
  if (const Attribute *a = n.FindAttr("activations")) names = a->strings;
  const int per = ActsPerDir(r->kind);
  if (names.empty()) {
    static const char *kDefaults[3] = {"Sigmoid", "Tanh", "Tanh"};
    for (int k = 0; k < r->dirs; ++k)
      for (int j = 0; j < per; ++j) names.push_back(r->kind == Kind::kRnn ? "Tanh" : kDefaults[j]);
  }
  if (static_cast<int>(names.size()) != per * r->dirs) {
    *reason = "attribute 'activations' must list " + std::to_string(per * r->dirs) + " functions";
    return false;
  }
  std::vector<float> alphas, betas;
  if (const Attribute *a = n.FindAttr("activation_alpha")) alphas = a->floats;
  if (const Attribute *a = n.FindAttr("activation_beta")) betas = a->floats;
  size_t ai = 0, bi = 0;
  r->acts.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    if (!ParseActivation(names[i], &r->acts[i], alphas, betas, &ai, &bi, reason)) return false;
  return true;
}

bool CheckRnn(const Node &n, int64_t, std::string *reason) {
  RnnAttrs r;
  return ReadRnnAttrs(n, &r, reason);
}

// Input positions: X W R B sequence_lens initial_h [initial_c P].
bool InferRnn(InferCtx *c, std::string *reason) {
  RnnAttrs r;
  if (!ReadRnnAttrs(*c->node, &r, reason)) return false;
  if (c->out.empty()) {
    *reason = "the node has no outputs";
    return false;
  }
  const TensorDesc &x = *c->in[0], &w = *c->in[1], &rr = *c->in[2];
  if (x.dtype != ElemType::kFloat && x.dtype != ElemType::kDouble) {
    *reason = DtypeNotSupported(x.dtype);
    return false;
  }
  if (x.dims.size() != 3 || w.dims.size() != 3 || rr.dims.size() != 3 || w.dtype != x.dtype || rr.dtype != x.dtype) {
    *reason = "X, W and R must be rank-3 tensors of one dtype, got " + DescStr(x) + ", " + DescStr(w) + ", " +
              DescStr(rr);
    return false;
  }
  const int64_t G = Gates(r.kind);
  int64_t H = r.hidden > 0 ? r.hidden : (rr.dims[2] >= 0 ? rr.dims[2] : -1);
  const int64_t seq = x.dims[r.layout == 0 ? 0 : 1], batch = x.dims[r.layout == 0 ? 1 : 0], in_size = x.dims[2];
  auto bad = [&](const TensorDesc &d, std::vector<int64_t> want, const char *what) {
    bool ok = d.dims.size() == want.size() && d.dtype == (std::string(what) == "sequence_lens" ? d.dtype : x.dtype);
    for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || d.dims[i] < 0 || d.dims[i] == want[i];
    if (!ok) *reason = std::string(what) + " has shape/dtype " + DescStr(d) + ", expected " + ShapeStr(want);
    return !ok;
  };
  if (bad(w, {r.dirs, G * H, in_size}, "W") || bad(rr, {r.dirs, G * H, H}, "R")) return false;
  if (c->has(3) && bad(*c->in[3], {r.dirs, 2 * G * H}, "B")) return false;
  if (c->has(4) && (c->in[4]->dtype != ElemType::kInt32 || bad(*c->in[4], {batch}, "sequence_lens"))) {
    if (reason->empty()) *reason = "sequence_lens must be int32, got " + DescStr(*c->in[4]);
    return false;
  }
  const std::vector<int64_t> state = r.layout == 0 ? std::vector<int64_t>{r.dirs, batch, H}
                                                   : std::vector<int64_t>{batch, r.dirs, H};
  if (c->has(5) && bad(*c->in[5], state, "initial_h")) return false;
  if (r.kind == Kind::kLstm && c->has(6) && bad(*c->in[6], state, "initial_c")) return false;
  if (r.kind == Kind::kLstm && c->has(7) && bad(*c->in[7], {r.dirs, 3 * H}, "P")) return false;
  const std::vector<int64_t> y = r.layout == 0 ? std::vector<int64_t>{seq, r.dirs, batch, H}
                                               : std::vector<int64_t>{batch, seq, r.dirs, H};
  c->out[0] = {x.dtype, y};
  for (size_t o = 1; o < c->out.size(); ++o) c->out[o] = {x.dtype, state};
  return true;
}

template <class T>
class RnnKernel : public Kernel {
 public:
  RnnKernel(RnnAttrs r, int64_t seq, int64_t batch, int64_t in_size, int n_in, int n_out)
      : r_(std::move(r)), seq_(seq), batch_(batch), in_(in_size), H_(r_.hidden), G_(Gates(r_.kind)), n_in_(n_in),
        n_out_(n_out), work_(static_cast<size_t>(3 * H_)) {}
  size_t scratch_bytes() const override {
    // x_dir [seq*batch, in], xw [seq*batch, G*H], hr [batch, G*H], h, c, h_tmp [batch, H]
    return sizeof(T) * static_cast<size_t>(seq_ * batch_ * in_ + seq_ * batch_ * G_ * H_ + batch_ * G_ * H_ +
                                           3 * batch_ * H_) + 6 * 64;
  }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const T *X = static_cast<const T *>(in[0]);
    const T *W = static_cast<const T *>(in[1]);
    const T *R = static_cast<const T *>(in[2]);
    const T *B = Opt(in, 3), *H0 = Opt(in, 5), *C0 = r_.kind == Kind::kLstm ? Opt(in, 6) : nullptr;
    const T *P = r_.kind == Kind::kLstm ? Opt(in, 7) : nullptr;
    const int32_t *lens = n_in_ > 4 && in[4] ? static_cast<const int32_t *>(in[4]) : nullptr;
    for (int64_t b = 0; lens && b < batch_; ++b)
      if (lens[b] < 0 || lens[b] > seq_) {
        *reason = "sequence_lens[" + std::to_string(b) + "] = " + std::to_string(lens[b]) + " is outside [0, " +
                  std::to_string(seq_) + "]";
        return false;
      }
    T *Y = static_cast<T *>(out[0]);
    T *Yh = n_out_ > 1 ? static_cast<T *>(out[1]) : nullptr;
    T *Yc = n_out_ > 2 ? static_cast<T *>(out[2]) : nullptr;
    T *xs = static_cast<T *>(scratch_);
    T *xw = xs + Pad(seq_ * batch_ * in_);
    T *hr = xw + Pad(seq_ * batch_ * G_ * H_);
    T *h = hr + Pad(batch_ * G_ * H_);
    T *cst = h + Pad(batch_ * H_);
    T *tmp = cst + Pad(batch_ * H_);
    const int64_t GH = G_ * H_;
    std::fill(Y, Y + seq_ * r_.dirs * batch_ * H_, T(0));
    for (int d = 0; d < r_.dirs; ++d) {
      const bool rev = r_.reverse || d == 1;
      // X in [seq, batch, in] order.
      for (int64_t t = 0; t < seq_; ++t)
        for (int64_t b = 0; b < batch_; ++b)
          std::copy_n(X + (r_.layout == 0 ? (t * batch_ + b) : (b * seq_ + t)) * in_, in_, xs + (t * batch_ + b) * in_);
      Gemm<T>(false, true, seq_ * batch_, GH, in_, T(1), xs, in_, W + d * GH * in_, in_, T(0), xw, GH);
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t j = 0; j < H_; ++j) {
          h[b * H_ + j] = H0 ? H0[StateIndex(d, b, j)] : T(0);
          cst[b * H_ + j] = C0 ? C0[StateIndex(d, b, j)] : T(0);
        }
      const T *Rd = R + d * GH * H_;
      const T *Wb = B ? B + d * 2 * GH : nullptr, *Rb = B ? B + d * 2 * GH + GH : nullptr;
      const Activation *acts = &r_.acts[d * ActsPerDir(r_.kind)];
      for (int64_t step = 0; step < seq_; ++step) {
        const int64_t t = rev ? seq_ - 1 - step : step;
        Gemm<T>(false, true, batch_, GH, H_, T(1), h, H_, Rd, H_, T(0), hr, GH);
        for (int64_t b = 0; b < batch_; ++b) {
          const int64_t len = lens ? lens[b] : seq_;
          // Reverse runs over each sequence's own valid steps, from its last one.
          const int64_t tt = rev ? len - 1 - step : t;
          if (step >= len) continue;
          const T *xg = xw + (tt * batch_ + b) * GH;
          const T *hg = hr + b * GH;
          T *hb = h + b * H_, *cb = cst + b * H_;
          if (rev && tt != t) {  // the projection row of step tt, not t
            xg = xw + (tt * batch_ + b) * GH;
          }
          StepCell(xg, hg, Wb, Rb, P ? P + d * 3 * H_ : nullptr, acts, hb, cb, tmp + b * H_, Rd);
          T *yrow = Y + YIndex(tt, d, b);
          std::copy_n(hb, H_, yrow);
        }
      }
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t j = 0; j < H_; ++j) {
          if (Yh) Yh[StateIndex(d, b, j)] = h[b * H_ + j];
          if (Yc) Yc[StateIndex(d, b, j)] = cst[b * H_ + j];
        }
    }
    return true;
  }

 private:
  static int64_t Pad(int64_t n) { return (n * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64 / sizeof(T); }
  const T *Opt(const void *const *in, int i) const {
    return n_in_ > i && in[i] ? static_cast<const T *>(in[i]) : nullptr;
  }
  int64_t StateIndex(int d, int64_t b, int64_t j) const {
    return r_.layout == 0 ? (d * batch_ + b) * H_ + j : (b * r_.dirs + d) * H_ + j;
  }
  int64_t YIndex(int64_t t, int d, int64_t b) const {
    return r_.layout == 0 ? ((t * r_.dirs + d) * batch_ + b) * H_ : ((b * seq_ + t) * r_.dirs + d) * H_;
  }
  double Clip(double v) const { return r_.has_clip ? std::max(-r_.clip, std::min(r_.clip, v)) : v; }

  // One time step of one batch row. xg: X W^T row (G*H), hg: H R^T row (G*H); updates h (and c) in place.
  void StepCell(const T *xg, const T *hg, const T *Wb, const T *Rb, const T *P, const Activation *acts, T *h, T *c,
                T *tmp, const T *Rd) const {
    const int64_t H = H_;
    auto bias = [&](int g, int64_t j) { return Wb ? static_cast<double>(Wb[g * H + j]) + Rb[g * H + j] : 0.0; };
    if (r_.kind == Kind::kRnn) {
      for (int64_t j = 0; j < H; ++j) h[j] = static_cast<T>(acts[0](Clip(xg[j] + hg[j] + bias(0, j))));
      return;
    }
    if (r_.kind == Kind::kLstm) {  // gates i o f c; peepholes i o f
      for (int64_t j = 0; j < H; ++j) {
        const double cp = c[j];
        const double pi = P ? P[j] : 0.0, po = P ? P[H + j] : 0.0, pf = P ? P[2 * H + j] : 0.0;
        const double i = acts[0](Clip(xg[j] + hg[j] + bias(0, j) + pi * cp));
        const double f = r_.input_forget ? 1 - i : acts[0](Clip(xg[2 * H + j] + hg[2 * H + j] + bias(2, j) + pf * cp));
        const double g = acts[1](Clip(xg[3 * H + j] + hg[3 * H + j] + bias(3, j)));
        const double cn = f * cp + i * g;
        const double o = acts[0](Clip(xg[H + j] + hg[H + j] + bias(1, j) + po * cn));
        c[j] = static_cast<T>(cn);
        tmp[j] = static_cast<T>(o * acts[2](cn));
      }
      std::copy_n(tmp, H, h);
      return;
    }
    // GRU: gates z r h.
    const T *Rh = Rd + 2 * H * H;  // recurrence weights of the h gate, [H, H]
    double *z = work_.data(), *rg = z + H, *rh = rg + H;
    for (int64_t j = 0; j < H; ++j) {
      z[j] = acts[0](Clip(xg[j] + hg[j] + bias(0, j)));
      rg[j] = acts[0](Clip(xg[H + j] + hg[H + j] + bias(1, j)));
      rh[j] = rg[j] * static_cast<double>(h[j]);
    }
    for (int64_t j = 0; j < H; ++j) {
      const double wbh = Wb ? static_cast<double>(Wb[2 * H + j]) : 0.0;
      const double rbh = Rb ? static_cast<double>(Rb[2 * H + j]) : 0.0;
      double hh;
      if (r_.linear_before_reset) {
        hh = xg[2 * H + j] + wbh + rg[j] * (hg[2 * H + j] + rbh);
      } else {  // (r . h_prev) R_h^T
        double s = 0;
        for (int64_t k = 0; k < H; ++k) s += static_cast<double>(Rh[j * H + k]) * rh[k];
        hh = xg[2 * H + j] + s + rbh + wbh;
      }
      const double hn = acts[1](Clip(hh));
      tmp[j] = static_cast<T>((1 - z[j]) * hn + z[j] * h[j]);
    }
    std::copy_n(tmp, H, h);
  }

  RnnAttrs r_;
  int64_t seq_, batch_, in_, H_, G_;
  int n_in_, n_out_;
  mutable std::vector<double> work_;  // GRU gate values of one row (Run is not re-entrant)
};

std::unique_ptr<Kernel> PrepareRnn(const KernelCtx &kc, std::string *reason) {
  RnnAttrs r;
  if (!ReadRnnAttrs(*kc.node, &r, reason)) return nullptr;
  const auto &xd = kc.in[0]->dims;
  if (r.hidden <= 0) r.hidden = kc.in[2]->dims[2];
  const int64_t seq = xd[r.layout == 0 ? 0 : 1], batch = xd[r.layout == 0 ? 1 : 0];
  const int n_in = static_cast<int>(kc.in.size()), n_out = static_cast<int>(kc.out.size());
  if (kc.in[0]->dtype == ElemType::kFloat) return std::make_unique<RnnKernel<float>>(r, seq, batch, xd[2], n_in, n_out);
  return std::make_unique<RnnKernel<double>>(r, seq, batch, xd[2], n_in, n_out);
}

}  // namespace

void RegisterRnnOps(std::vector<OpDef> *ops) {
  ops->push_back({"RNN", 3, 6, 0, 2, CheckRnn, InferRnn, PrepareRnn, true});
  ops->push_back({"GRU", 3, 6, 0, 2, CheckRnn, InferRnn, PrepareRnn, true});
  ops->push_back({"LSTM", 3, 8, 0, 3, CheckRnn, InferRnn, PrepareRnn, true});
}

}  // namespace onnx
}  // namespace twin
