// Recurrent layers: RNN, GRU and LSTM (forward, reverse, bidirectional; layout 0 and 1; sequence_lens; initial
// states; LSTM peepholes and input_forget; clip; linear_before_reset; every activation ONNX lists for them).
// The input projection X W^T of all time steps is one GEMM per direction; each step then does one H R^T GEMM and
// the gate arithmetic. float32 and float64; float16 runs the float32 kernel on widened copies (see HalfRnnKernel).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "elem.h"
#include "gemm.h"
#include "gemm_panel.h"
#include "shared_const.h"
#include "vmath.h"

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
  if (x.dtype != ElemType::kFloat && x.dtype != ElemType::kDouble && x.dtype != ElemType::kFloat16) {
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

// y = f(x) over n elements (x and y distinct). float Sigmoid and Tanh, the defaults, take vmath's vectorised
// kernels; the rest, and float64, the scalar definitions.
template <class T>
void ApplyActivation(const Activation &f, const T *x, T *y, int64_t n) {
  if constexpr (std::is_same<T, float>::value) {
    if (f.act == Act::kSigmoid) return vmath::SigmoidArray(x, y, n);
    if (f.act == Act::kTanh) return vmath::TanhArray(x, y, n);
  }
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<T>(f(static_cast<double>(x[j])));
}

// One LSTM row with the default activations (Sigmoid, Tanh, Tanh), no clip and no input_forget, in a single pass
// over the hidden units: the gates' pre-activations (projection + recurrent term + folded bias sum, + peepholes),
// their activations and the c and h updates stay in registers instead of going through four arrays and five
// activation calls. Compiled per instruction set like vmath's array kernels (GCC vectorises the inline vmath
// bodies); the clamp bounds arrive as arguments so that they stay run-time values (see vmath.cc's g_tanh_bound).
// Gate blocks of xg, hg and bias (each [4H]): i o f c. P (i o f, [3H]) may be null.
#define TWIN_LSTM_ROW_LOOP(PEEP)                                                                                   \
  for (int64_t j = 0; j < H; ++j) {                                                                                \
    const float cj = c[j];                                                                                         \
    float pi = xg[j] + hg[j] + bias[j], pf = xg[2 * H + j] + hg[2 * H + j] + bias[2 * H + j];                      \
    if (PEEP) {                                                                                                    \
      pi += P[j] * cj;                                                                                             \
      pf += P[2 * H + j] * cj;                                                                                     \
    }                                                                                                              \
    const float ig = vmath::SigmoidClamped(pi, lo, hi), fg = vmath::SigmoidClamped(pf, lo, hi);                    \
    const float gg = vmath::TanhClamped(xg[3 * H + j] + hg[3 * H + j] + bias[3 * H + j], tb);                      \
    const float cn = fg * cj + ig * gg;                                                                            \
    float po = xg[H + j] + hg[H + j] + bias[H + j];                                                                \
    if (PEEP) po += P[H + j] * cn;                                                                                 \
    c[j] = cn;                                                                                                     \
    h[j] = vmath::SigmoidClamped(po, lo, hi) * vmath::TanhClamped(cn, tb);                                         \
  }
// (Plain restrict parameters: with the pointers read from a struct GCC 12 leaves the loop scalar.)
#define TWIN_LSTM_ROW_FN(Name)                                                                                     \
  void Name(const float *__restrict xg, const float *__restrict hg, const float *__restrict bias,                  \
            const float *__restrict P, float *__restrict c, float *__restrict h, int64_t H, float tb, float lo,    \
            float hi) {                                                                                            \
    if (P) {                                                                                                       \
      TWIN_LSTM_ROW_LOOP(true)                                                                                     \
    } else {                                                                                                       \
      TWIN_LSTM_ROW_LOOP(false)                                                                                    \
    }                                                                                                              \
  }
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512dq"))) TWIN_LSTM_ROW_FN(LstmRowAvx512)
__attribute__((target("avx2,fma"))) TWIN_LSTM_ROW_FN(LstmRowAvx2)
#endif
TWIN_LSTM_ROW_FN(LstmRowBaseline)
#undef TWIN_LSTM_ROW_FN
#undef TWIN_LSTM_ROW_LOOP
using LstmRowFn = void (*)(const float *, const float *, const float *, const float *, float *, float *, int64_t,
                           float, float, float);
LstmRowFn PickLstmRow() {
#if defined(__x86_64__)
  switch (vmath::ActiveIsa()) {
    case vmath::Isa::kAvx512: return LstmRowAvx512;
    case vmath::Isa::kAvx2: return LstmRowAvx2;
    default: break;
  }
#endif
  return LstmRowBaseline;
}
// Never written: read at run time so that the compiler cannot fold the clamps (see above).
volatile float g_lstm_tanh_bound = 9.0f, g_lstm_sig_lo = -104.0f, g_lstm_sig_hi = 20.0f;

// dst[k, g] = src[g, k] for src [rows, cols], in tiles: a plain loop writes dst with a power-of-two stride that
// keeps hitting the same cache sets.
template <class T>
void Transpose(const T *src, int64_t rows, int64_t cols, T *dst) {
  constexpr int64_t kTile = 16;
  for (int64_t g0 = 0; g0 < rows; g0 += kTile)
    for (int64_t k0 = 0; k0 < cols; k0 += kTile) {
      const int64_t g1 = std::min(rows, g0 + kTile), k1 = std::min(cols, k0 + kTile);
      for (int64_t k = k0; k < k1; ++k)
        for (int64_t g = g0; g < g1; ++g) dst[k * rows + g] = src[g * cols + k];
    }
}

// Each step's h R^T for up to kPanelMaxRows rows, float32, AVX-512 / AVX2, runs on the panel kernel (gemm_panel.h)
// with R packed once; the generic small-GEMM kernel keeps its sums in memory and streams all of R^T per block of 4
// rows (~1.8x slower at 16 x 128 x 512).
constexpr int64_t kPanelMaxRows = 32;  // more rows: BLAS's own packing pays

template <class T>
class RnnKernel : public Kernel {
 public:
  RnnKernel(RnnAttrs r, int64_t seq, int64_t batch, int64_t in_size, int n_in, int n_out)
      : r_(std::move(r)), seq_(seq), batch_(batch), in_(in_size), H_(r_.hidden), G_(Gates(r_.kind)), n_in_(n_in),
        n_out_(n_out) {
    if constexpr (std::is_same<T, float>::value) {
      const std::vector<Activation> &a = r_.acts;
      bool defaults = r_.kind == Kind::kLstm && !r_.has_clip && !r_.input_forget;
      for (int d = 0; defaults && d < r_.dirs; ++d)
        defaults = a[3 * d].act == Act::kSigmoid && a[3 * d + 1].act == Act::kTanh && a[3 * d + 2].act == Act::kTanh;
      if (defaults) lstm_row_ = PickLstmRow();
      if (batch_ <= kPanelMaxRows) panel_w_ = PanelWidth();
    }
  }
  // R known when the graph is prepared (an initializer): its per-direction transposes are made once here.
  // Shared with the graph's other plans (one per sequence length / batch), which derive the same from the same R.
  void UseConstantR(const T *R) {
    const int64_t GH = G_ * H_, t_size = sizeof(T);
    if constexpr (std::is_same<T, float>::value)
      if (panel_w_) {
        packs_const_ = SharedDerived<T>(R, "rnn panels", {r_.dirs, GH, H_, panel_w_, RecurrentCols(), SeparateHBlock()},
                                        [&](std::vector<T> *v) {
                                          v->resize(static_cast<size_t>(r_.dirs * PackSizePerDir()));
                                          for (int d = 0; d < r_.dirs; ++d)
                                            Pack(R + d * GH * H_, v->data() + d * PackSizePerDir());
                                        });
        return;
      }
    rt_const_ = SharedDerived<T>(R, "rnn R transposed", {t_size, r_.dirs, GH, H_}, [&](std::vector<T> *v) {
      v->resize(static_cast<size_t>(r_.dirs * GH * H_));
      for (int d = 0; d < r_.dirs; ++d) Transpose(R + d * GH * H_, GH, H_, v->data() + d * GH * H_);
    });
  }
  size_t scratch_bytes() const override {
    // x_dir [seq*batch, in], xw [seq*batch, GH], hr [batch, GH], h, c [batch, H], pre, act [batch, GH],
    // rh, s [batch, H], rt [H, GH], bsum [GH]
    const int64_t GH = G_ * H_, BH = batch_ * H_;
    return sizeof(T) * static_cast<size_t>(seq_ * batch_ * in_ + seq_ * batch_ * GH + 3 * batch_ * GH + 4 * BH +
                                           H_ * GH + GH + PackSizePerDir()) +
           12 * 64;
  }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    const T *X = static_cast<const T *>(in[0]);
    const T *W = static_cast<const T *>(in[1]);
    const T *B = Opt(in, 3), *H0 = Opt(in, 5), *C0 = r_.kind == Kind::kLstm ? Opt(in, 6) : nullptr;
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
    const int64_t GH = G_ * H_;
    T *xs = static_cast<T *>(scratch_);
    buf_.xw = xs + Pad(seq_ * batch_ * in_);
    buf_.hr = buf_.xw + Pad(seq_ * batch_ * GH);
    buf_.h = buf_.hr + Pad(batch_ * GH);
    buf_.c = buf_.h + Pad(batch_ * H_);
    buf_.pre = buf_.c + Pad(batch_ * H_);
    buf_.act = buf_.pre + Pad(batch_ * GH);
    buf_.rh = buf_.act + Pad(batch_ * GH);
    buf_.s = buf_.rh + Pad(batch_ * H_);
    buf_.rt = buf_.s + Pad(batch_ * H_);
    buf_.bsum = buf_.rt + Pad(H_ * GH);
    buf_.pack = buf_.bsum + Pad(GH);
    std::fill(Y, Y + seq_ * r_.dirs * batch_ * H_, T(0));
    for (int d = 0; d < r_.dirs; ++d) {
      // X in [seq, batch, in] order (layout 0 already is).
      const T *xrows = X;
      if (r_.layout != 0) {
        for (int64_t t = 0; t < seq_; ++t)
          for (int64_t b = 0; b < batch_; ++b) std::copy_n(X + (b * seq_ + t) * in_, in_, xs + (t * batch_ + b) * in_);
        xrows = xs;
      }
      Gemm<T>(false, true, seq_ * batch_, GH, in_, T(1), xrows, in_, W + d * GH * in_, in_, T(0), buf_.xw, GH);
      if (lstm_row_) {  // the fused gate pass adds the biases itself
        for (int64_t k = 0; k < GH; ++k) buf_.bsum[k] = B ? B[d * 2 * GH + k] + B[d * 2 * GH + GH + k] : T(0);
      } else if (B) {
        FoldBiases(B + d * 2 * GH);
      }
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t j = 0; j < H_; ++j) {
          buf_.h[b * H_ + j] = H0 ? H0[StateIndex(d, b, j)] : T(0);
          buf_.c[b * H_ + j] = C0 ? C0[StateIndex(d, b, j)] : T(0);
        }
      RunDirection(in, d, lens, Y);
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t j = 0; j < H_; ++j) {
          if (Yh) Yh[StateIndex(d, b, j)] = buf_.h[b * H_ + j];
          if (Yc) Yc[StateIndex(d, b, j)] = buf_.c[b * H_ + j];
        }
    }
    return true;
  }

 private:
  struct Buffers {  // views into scratch_, set by Run
    T *xw, *hr, *h, *c, *pre, *act, *rh, *s, *rt, *bsum, *pack;
  };
  // Rows of one direction's time steps: each step's H R^T GEMM, then the gates of every batch row still inside
  // its sequence.
  void RunDirection(const void *const *in, int d, const int32_t *lens, T *Y) {
    const int64_t GH = G_ * H_;
    const bool rev = r_.reverse || d == 1;
    const T *Rd = static_cast<const T *>(in[2]) + d * GH * H_;
    const T *B = Opt(in, 3);
    const T *Rbh = B && r_.kind == Kind::kGru && r_.linear_before_reset ? B + d * 2 * GH + GH + 2 * H_ : nullptr;
    const T *P = r_.kind == Kind::kLstm ? Opt(in, 7) : nullptr;
    const Activation *acts = &r_.acts[d * ActsPerDir(r_.kind)];
    // GRU without linear_before_reset never reads the h gate's column block of H R^T: it multiplies (r . h) instead.
    const int64_t cols = RecurrentCols();
    // R^T [H, GH] once per direction (or once for good when R is constant): each step's product then streams R's
    // rows instead of repacking R.
    // With the panel kernel, R packed into panels instead (the recurrent products' columns: all gates, or GRU's z, r
    // and separately its h block).
    const T *rt = buf_.rt, *pack = buf_.pack;
    if (panel_w_) {
      if (packs_const_) pack = packs_const_->data() + d * PackSizePerDir();
      else Pack(Rd, buf_.pack);
    } else if (rt_const_) {
      rt = rt_const_->data() + d * GH * H_;
    } else {
      Transpose(Rd, GH, H_, buf_.rt);
    }
    const T *pack_h = panel_w_ ? pack + PackedSize(cols, H_, panel_w_) : nullptr;
    for (int64_t step = 0; step < seq_; ++step) {
      if (panel_w_) RunPanelGemm(buf_.h, pack, cols, buf_.hr, GH);
      else RecurrentGemm(batch_, cols, buf_.h, rt, buf_.hr, GH);
      for (int64_t b = 0; b < batch_; ++b) {
        const int64_t len = lens ? lens[b] : seq_;
        // Reverse runs over each sequence's own valid steps, from its last one.
        const int64_t t = rev ? len - 1 - step : step;
        if (step >= len) {
          if (r_.kind == Kind::kGru) std::fill_n(buf_.rh + b * H_, H_, T(0));  // the (r . h) GEMM reads every row
          continue;
        }
        const T *xg = buf_.xw + (t * batch_ + b) * GH, *hg = buf_.hr + b * GH;
        if (r_.kind == Kind::kLstm) LstmRow(xg, hg, P ? P + d * 3 * H_ : nullptr, acts, b, buf_.bsum);
        else if (r_.kind == Kind::kRnn) RnnRow(xg, hg, acts, b);
        else GruGates(xg, hg, acts, b);
      }
      if (r_.kind == Kind::kGru) {
        if (!r_.linear_before_reset) {  // s = (r . h) R_h^T for every row at once
          if (panel_w_) RunPanelGemm(buf_.rh, pack_h, H_, buf_.s, H_);
          else RecurrentGemm(batch_, H_, buf_.rh, rt + 2 * H_, buf_.s, H_);
        }
        for (int64_t b = 0; b < batch_; ++b) {
          const int64_t len = lens ? lens[b] : seq_;
          if (step < len) GruOutput(buf_.xw + ((rev ? len - 1 - step : step) * batch_ + b) * GH, Rbh, acts, b);
        }
      }
      for (int64_t b = 0; b < batch_; ++b) {
        const int64_t len = lens ? lens[b] : seq_;
        if (step < len) std::copy_n(buf_.h + b * H_, H_, Y + YIndex(rev ? len - 1 - step : step, d, b));
      }
    }
  }

  // C[rows, n] = A[rows, H] Rt[H, n] (Rt's rows GH apart), once per step. A few rows take the twin's small-GEMM
  // kernels, four rows at a time: BLAS would pack Rt again at every step.
  void RecurrentGemm(int64_t rows, int64_t n, const T *A, const T *Rt, T *C, int64_t ldc) const {
    const int64_t GH = G_ * H_;
    int64_t i = 0;
    if constexpr (std::is_same<T, float>::value)
      if (rows <= kRecurrentSmallRows)
        for (; i < rows; i += kSmallGemmMaxRows) {
          const int64_t m = std::min(kSmallGemmMaxRows, rows - i);
          if (!SmallGemm(false, false, m, n, H_, 1.0f, A + i * H_, H_, Rt, GH, 0.0f, C + i * ldc, ldc)) break;
        }
    if (i < rows) Gemm<T>(false, false, rows - i, n, H_, T(1), A + i * H_, H_, Rt, GH, T(0), C + i * ldc, ldc);
  }
  static constexpr int64_t kRecurrentSmallRows = 32;

  // Columns of the first recurrent product: GRU without linear_before_reset leaves out the h block (see RunDirection).
  int64_t RecurrentCols() const { return r_.kind == Kind::kGru && !r_.linear_before_reset ? 2 * H_ : G_ * H_; }
  bool SeparateHBlock() const { return r_.kind == Kind::kGru && !r_.linear_before_reset; }
  int64_t PackSizePerDir() const {
    if (!panel_w_) return 0;
    return PackedSize(RecurrentCols(), H_, panel_w_) + (SeparateHBlock() ? PackedSize(H_, H_, panel_w_) : 0);
  }
  // One direction's R [GH, H] into panels: the first product's columns, then GRU's h block.
  void Pack(const T *Rd, T *pack) const {
    if constexpr (std::is_same<T, float>::value) {
      PackPanels(Rd, true, RecurrentCols(), H_, panel_w_, pack);
      if (SeparateHBlock())
        PackPanels(Rd + 2 * H_ * H_, true, H_, H_, panel_w_, pack + PackedSize(RecurrentCols(), H_, panel_w_));
    }
  }
  void RunPanelGemm(const T *A, const T *pack, int64_t n, T *C, int64_t ldc) const {
    if constexpr (std::is_same<T, float>::value) RunPanels({A, H_, batch_, H_, pack, n, C, ldc}, panel_w_);
  }

  // Every gate's W and R biases added to the input projection once, instead of at every step; the exception is
  // GRU's h gate with linear_before_reset, whose R bias is inside r . (h R_h^T + Rb_h) (GruOutput).
  void FoldBiases(const T *Bd) {
    const int64_t GH = G_ * H_;
    T *sum = buf_.pre;  // free until the steps start
    for (int64_t k = 0; k < GH; ++k) sum[k] = Bd[k] + Bd[GH + k];
    if (r_.kind == Kind::kGru && r_.linear_before_reset) std::copy_n(Bd + 2 * H_, H_, sum + 2 * H_);
    for (int64_t row = 0; row < seq_ * batch_; ++row) {
      T *x = buf_.xw + row * GH;
      for (int64_t k = 0; k < GH; ++k) x[k] += sum[k];
    }
  }
  void ClipRange(T *p, int64_t n) const {
    if (!r_.has_clip) return;
    const T lo = static_cast<T>(-r_.clip), hi = static_cast<T>(r_.clip);
    for (int64_t j = 0; j < n; ++j) p[j] = p[j] < lo ? lo : p[j] > hi ? hi : p[j];  // NaN stays NaN
  }

  // LSTM, gates i o f c in that order, peepholes i o f; updates row b of h and c.
  void LstmRow(const T *xg, const T *hg, const T *P, const Activation *acts, int64_t b, const T *bsum) {
    const int64_t H = H_;
    if constexpr (std::is_same<T, float>::value)
      if (lstm_row_)
        return lstm_row_(xg, hg, bsum, P, buf_.c + b * H, buf_.h + b * H, H, g_lstm_tanh_bound, g_lstm_sig_lo,
                         g_lstm_sig_hi);
    T *pre = buf_.pre + b * G_ * H, *act = buf_.act + b * G_ * H, *c = buf_.c + b * H, *h = buf_.h + b * H;
    for (int64_t k = 0; k < 4 * H; ++k) pre[k] = xg[k] + hg[k];
    if (P)
      for (int64_t j = 0; j < H; ++j) {
        pre[j] += P[j] * c[j];
        pre[2 * H + j] += P[2 * H + j] * c[j];
      }
    ClipRange(pre, 4 * H);  // the o gate is clipped again below, with its peephole term
    ApplyActivation(acts[0], pre, act, H);
    if (r_.input_forget)
      for (int64_t j = 0; j < H; ++j) act[2 * H + j] = 1 - act[j];
    else
      ApplyActivation(acts[0], pre + 2 * H, act + 2 * H, H);
    ApplyActivation(acts[1], pre + 3 * H, act + 3 * H, H);
    for (int64_t j = 0; j < H; ++j) c[j] = act[2 * H + j] * c[j] + act[j] * act[3 * H + j];
    for (int64_t j = 0; j < H; ++j) pre[H + j] = xg[H + j] + hg[H + j];
    if (P)
      for (int64_t j = 0; j < H; ++j) pre[H + j] += P[H + j] * c[j];
    ClipRange(pre + H, H);
    ApplyActivation(acts[0], pre + H, act + H, H);
    ApplyActivation(acts[2], c, pre, H);  // the i gate's pre-activations are no longer needed
    for (int64_t j = 0; j < H; ++j) h[j] = act[H + j] * pre[j];
  }
  void RnnRow(const T *xg, const T *hg, const Activation *acts, int64_t b) {
    T *pre = buf_.pre + b * H_;
    for (int64_t j = 0; j < H_; ++j) pre[j] = xg[j] + hg[j];
    ClipRange(pre, H_);
    ApplyActivation(acts[0], pre, buf_.h + b * H_, H_);
  }
  // GRU, gates z r h: z and r of row b into act, and r . h_prev into rh (for the (r . h) R_h^T GEMM).
  void GruGates(const T *xg, const T *hg, const Activation *acts, int64_t b) {
    const int64_t H = H_;
    T *pre = buf_.pre + b * G_ * H, *act = buf_.act + b * G_ * H, *h = buf_.h + b * H, *rh = buf_.rh + b * H;
    for (int64_t k = 0; k < 2 * H; ++k) pre[k] = xg[k] + hg[k];
    ClipRange(pre, 2 * H);
    ApplyActivation(acts[0], pre, act, 2 * H);
    for (int64_t j = 0; j < H; ++j) rh[j] = act[H + j] * h[j];
  }
  // GRU's h gate and the new h of row b, after GruGates and (without linear_before_reset) the s GEMM.
  void GruOutput(const T *xg, const T *Rbh, const Activation *acts, int64_t b) {
    const int64_t H = H_;
    T *pre = buf_.pre + b * G_ * H, *act = buf_.act + b * G_ * H, *h = buf_.h + b * H;
    const T *hg = buf_.hr + b * G_ * H, *s = buf_.s + b * H;
    if (r_.linear_before_reset)
      for (int64_t j = 0; j < H; ++j)
        pre[2 * H + j] = xg[2 * H + j] + act[H + j] * (hg[2 * H + j] + (Rbh ? Rbh[j] : T(0)));
    else
      for (int64_t j = 0; j < H; ++j) pre[2 * H + j] = xg[2 * H + j] + s[j];
    ClipRange(pre + 2 * H, H);
    ApplyActivation(acts[1], pre + 2 * H, act + 2 * H, H);
    for (int64_t j = 0; j < H; ++j) h[j] = (1 - act[j]) * act[2 * H + j] + act[j] * h[j];
  }

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

  RnnAttrs r_;
  int64_t seq_, batch_, in_, H_, G_;
  int n_in_, n_out_;
  Buffers buf_{};
  LstmRowFn lstm_row_ = nullptr;  // the fused LSTM row (float32, default activations), else null
  std::shared_ptr<const std::vector<T>> rt_const_;     // R^T per direction when R is constant, else null
  int panel_w_ = 0;               // columns per panel of the panel kernel (float32), 0 without it
  std::shared_ptr<const std::vector<T>> packs_const_;  // R's panels per direction when R is constant, else null
};

// float16: the float32 kernel on float32 copies of the float16 inputs (exact), its outputs narrowed to float16 at
// the end (one rounding per element, where a float16 evaluation would round after every operation: the results are
// at least as close to the exact values). Constant inputs (the weights) are widened once, shared like the packed
// weights; the rest are widened each run into the step's scratch. As NPUs run a float16 LSTM: float16 data, float32
// arithmetic inside.
class HalfRnnKernel : public Kernel {
 public:
  HalfRnnKernel(const KernelCtx &kc, const RnnAttrs &r, int64_t seq, int64_t batch) {
    n_in_ = std::min(kc.in.size(), kMaxIn);  // (the op takes at most 8 inputs and 3 outputs)
    n_out_ = std::min(kc.out.size(), kMaxOut);
    const int n_in = static_cast<int>(n_in_), n_out = static_cast<int>(n_out_);
    inner_ = std::make_unique<RnnKernel<float>>(r, seq, batch, kc.in[0]->dims[2], n_in, n_out);
    size_t at = Round(inner_->scratch_bytes());
    for (int i = 0; i < n_in; ++i) {
      In &in = ins_[i];
      in.half = kc.in[i] && kc.in[i]->dtype == ElemType::kFloat16;  // (null: an optional input left out)
      if (!in.half) continue;
      in.n = kc.in[i]->NumElements();
      const void *data = i < static_cast<int>(kc.in_data.size()) ? kc.in_data[i] : nullptr;
      if (data) {
        const int64_t n = in.n;
        in.widened = SharedDerived<float>(data, "rnn float16 widened", {n}, [&](std::vector<float> *v) {
          v->resize(static_cast<size_t>(n));
          HalfToFloatArray(static_cast<const uint16_t *>(data), v->data(), n);
        });
      } else {
        in.offset = at;
        at += Round(sizeof(float) * static_cast<size_t>(in.n));
      }
    }
    for (int o = 0; o < n_out; ++o) {
      outs_[o].n = kc.out[o].NumElements();
      outs_[o].offset = at;
      at += Round(sizeof(float) * static_cast<size_t>(outs_[o].n));
    }
    scratch_total_ = at;
    // after the widened weights exist: R's panels are derived from (and keyed by) the widened copy
    if (ins_[2].widened) inner_->UseConstantR(ins_[2].widened->data());
  }
  size_t scratch_bytes() const override { return scratch_total_; }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    char *base = static_cast<char *>(scratch_);
    const void *fin[kMaxIn] = {};
    void *fout[kMaxOut] = {};
    for (size_t i = 0; i < n_in_; ++i) {
      const In &d = ins_[i];
      if (!in[i]) continue;  // an optional input left out
      if (!d.half) {
        fin[i] = in[i];  // sequence_lens (int32)
      } else if (d.widened) {
        fin[i] = d.widened->data();
      } else {
        float *w = reinterpret_cast<float *>(base + d.offset);
        HalfToFloatArray(static_cast<const uint16_t *>(in[i]), w, d.n);
        fin[i] = w;
      }
    }
    for (size_t o = 0; o < n_out_; ++o)
      if (out[o]) fout[o] = base + outs_[o].offset;
    inner_->set_scratch(base);
    if (!inner_->Run(fin, fout, reason)) return false;
    for (size_t o = 0; o < n_out_; ++o)
      if (out[o]) FloatToHalfArray(static_cast<const float *>(fout[o]), static_cast<uint16_t *>(out[o]), outs_[o].n);
    return true;
  }

 private:
  static constexpr size_t kMaxIn = 8, kMaxOut = 3;
  static size_t Round(size_t b) { return (b + 63) / 64 * 64; }
  struct In {
    bool half = false;
    int64_t n = 0;
    size_t offset = 0;
    std::shared_ptr<const std::vector<float>> widened;  // a constant input, widened once
  };
  struct Out {
    int64_t n = 0;
    size_t offset = 0;
  };
  size_t n_in_ = 0, n_out_ = 0;
  // Declared before inner_: the widened constants outlive the kernel whose derived data is keyed by their address.
  In ins_[kMaxIn];
  Out outs_[kMaxOut];
  size_t scratch_total_ = 0;
  std::unique_ptr<RnnKernel<float>> inner_;
};

std::unique_ptr<Kernel> PrepareRnn(const KernelCtx &kc, std::string *reason) {
  RnnAttrs r;
  if (!ReadRnnAttrs(*kc.node, &r, reason)) return nullptr;
  const auto &xd = kc.in[0]->dims;
  if (r.hidden <= 0) r.hidden = kc.in[2]->dims[2];
  const int64_t seq = xd[r.layout == 0 ? 0 : 1], batch = xd[r.layout == 0 ? 1 : 0];
  const int n_in = static_cast<int>(kc.in.size()), n_out = static_cast<int>(kc.out.size());
  const void *R = kc.in_data.size() > 2 ? kc.in_data[2] : nullptr;
  if (kc.in[0]->dtype == ElemType::kFloat16) return std::make_unique<HalfRnnKernel>(kc, r, seq, batch);
  if (kc.in[0]->dtype == ElemType::kFloat) {
    auto k = std::make_unique<RnnKernel<float>>(r, seq, batch, xd[2], n_in, n_out);
    if (R) k->UseConstantR(static_cast<const float *>(R));
    return k;
  }
  auto k = std::make_unique<RnnKernel<double>>(r, seq, batch, xd[2], n_in, n_out);
  if (R) k->UseConstantR(static_cast<const double *>(R));
  return k;
}

}  // namespace

void RegisterRnnOps(std::vector<OpDef> *ops) {
  ops->push_back({"RNN", 3, 6, 0, 2, CheckRnn, InferRnn, PrepareRnn, true});
  ops->push_back({"GRU", 3, 6, 0, 2, CheckRnn, InferRnn, PrepareRnn, true});
  ops->push_back({"LSTM", 3, 8, 0, 3, CheckRnn, InferRnn, PrepareRnn, true});
}

}  // namespace onnx
}  // namespace twin
