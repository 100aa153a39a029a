// Signal operators: DFT (opset 17 axis attribute, opset 20 axis input; forward, inverse, one-sided, real or complex
// input, dft_length zero-padding/truncation), STFT and MelWeightMatrix. Transforms use a twiddle table built once at
// prepare time (no trigonometric call per element): a radix-2 FFT for power-of-two lengths, else the direct sum;
// accumulated in double. Lengths given as inputs are value-dependent shapes (known at compile time or bound by a
// value-dependent plan).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3", "no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

using Cplx = std::complex<double>;

// exp(sign * 2*pi*i * m / n) for m in [0, n).
std::vector<Cplx> Twiddles(int64_t n, double sign) {
  std::vector<Cplx> t(static_cast<size_t>(n));
  const double step = sign * 2 * 3.14159265358979323846 / static_cast<double>(n);
  for (int64_t m = 0; m < n; ++m) t[m] = Cplx(std::cos(step * m), std::sin(step * m));
  return t;
}

// A length-N transform, in double. Power of two: radix-2 FFT. Other lengths whose prime factors are all small:
// mixed-radix FFT (N * sum of the factors operations instead of N^2: a 400-point frame, 25 ms at 16 kHz, is
// 4*4*5*5). A larger prime factor: Bluestein's algorithm, the transform as a convolution done with power-of-two
// FFTs. Short lengths: the direct sum over the twiddle table, which is faster there.
class DftPlan {
 public:
  DftPlan(int64_t n, double sign) : n_(n), tw_(Twiddles(n, sign)), pow2_(n > 0 && (n & (n - 1)) == 0) {
    if (pow2_) {
      work_.resize(static_cast<size_t>(n));
      rev_.resize(static_cast<size_t>(n));  // the bit-reversal permutation, once per plan instead of per transform
      int bits = 0;
      while ((int64_t(1) << bits) < n_) ++bits;
      for (int64_t i = 0; i < n_; ++i) {
        int64_t r = 0;
        for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
        rev_[static_cast<size_t>(i)] = r;
      }
      return;
    }
    if (n_ <= kDirectMax) return;
    // Factors, 4s first (the fewest levels), then the primes in increasing order.
    std::vector<int64_t> f;
    int64_t rest = n_;
    while (rest % 4 == 0) f.push_back(4), rest /= 4;
    for (int64_t p = 2; p * p <= rest; ++p)
      while (rest % p == 0) f.push_back(p), rest /= p;
    if (rest > 1) f.push_back(rest);
    const int64_t largest = *std::max_element(f.begin(), f.end());
    if (largest <= kMaxRadix) {
      if (f.size() == 1) return;  // a small prime: the direct sum
      factors_ = std::move(f);
      work_.resize(static_cast<size_t>(n_));
      scratch_.resize(static_cast<size_t>(2 * largest));
      return;
    }
    InitBluestein(sign);
  }

  // out[k] = sum_{j < N} in[j] * exp(sign * 2*pi*i * k * j / N) for k in [0, k_count).
  void Apply(const Cplx *in, int64_t k_count, Cplx *out) {
    if (pow2_) {
      Fft(in);
      std::copy(work_.begin(), work_.begin() + k_count, out);
    } else if (!factors_.empty()) {
      Mixed(in, 1, n_, 0, work_.data());
      std::copy(work_.begin(), work_.begin() + k_count, out);
    } else if (conv_) {
      Bluestein(in, k_count, out);
    } else {
      Direct(in, k_count, out);
    }
  }

 private:
  static constexpr int64_t kDirectMax = 32;  // at and below: the direct sum
  static constexpr int64_t kMaxRadix = 64;   // a larger prime factor: Bluestein

  void Direct(const Cplx *in, int64_t k_count, Cplx *out) const {
    const double *x = reinterpret_cast<const double *>(in), *t = reinterpret_cast<const double *>(tw_.data());
    for (int64_t k = 0; k < k_count; ++k) {
      // Doubles, not a Cplx accumulator (see Fft), and two partial sums: one sum is bound by the latency of its
      // adds.
      double r0 = 0, i0 = 0, r1 = 0, i1 = 0;
      int64_t idx = 0, j = 0;
      const int64_t step = k % n_;
      auto next = [&]() {
        idx += step;
        if (idx >= n_) idx -= n_;
      };
      for (; j + 1 < n_; j += 2) {
        const double *t0 = t + 2 * idx;
        next();
        const double *t1 = t + 2 * idx;
        next();
        const double *x0 = x + 2 * j;
        r0 += x0[0] * t0[0] - x0[1] * t0[1];
        i0 += x0[0] * t0[1] + x0[1] * t0[0];
        r1 += x0[2] * t1[0] - x0[3] * t1[1];
        i1 += x0[2] * t1[1] + x0[3] * t1[0];
      }
      if (j < n_) {
        r0 += x[2 * j] * t[2 * idx] - x[2 * j + 1] * t[2 * idx + 1];
        i0 += x[2 * j] * t[2 * idx + 1] + x[2 * j + 1] * t[2 * idx];
      }
      out[k] = Cplx(r0 + r1, i0 + i1);
    }
  }

  // Iterative decimation in time into work_: bit-reversed copy, then butterflies of doubling span.
  void Fft(const Cplx *in) {
    for (int64_t i = 0; i < n_; ++i) work_[rev_[static_cast<size_t>(i)]] = in[i];
    for (int64_t len = 2; len <= n_; len <<= 1) {
      const int64_t half = len / 2, step = n_ / len;
      // On the doubles of each complex (std::complex is array-compatible with double[2]): with Cplx values GCC
      // builds each product through two 8-byte stack stores and a 16-byte reload, a store-forwarding stall per
      // butterfly that took most of an STFT's time.
      double *w = reinterpret_cast<double *>(work_.data());
      const double *t = reinterpret_cast<const double *>(tw_.data());
      for (int64_t i = 0; i < n_; i += len)
        for (int64_t j = 0; j < half; ++j) {
          double *a = w + 2 * (i + j), *b = a + 2 * half;
          const double *tj = t + 2 * j * step;
          const double vr = b[0] * tj[0] - b[1] * tj[1], vi = b[0] * tj[1] + b[1] * tj[0];
          const double ur = a[0], ui = a[1];
          a[0] = ur + vr, a[1] = ui + vi;
          b[0] = ur - vr, b[1] = ui - vi;
        }
    }
  }

  // Decimation in time over factors_[level..]: out[0, n) is the n-point transform of in[0], in[s], ...,
  // in[(n-1)s]. The p sub-transforms of every p-th element land side by side in out, then each group of p
  // outputs k, k+m, ..., k+(p-1)m is a p-point transform of the twiddled sub-results at k (in place).
  void Mixed(const Cplx *in, int64_t s, int64_t n, size_t level, Cplx *out) {
    if (n == 1) {
      *out = *in;
      return;
    }
    const int64_t p = factors_[level], m = n / p;
    for (int64_t r = 0; r < p; ++r) Mixed(in + r * s, s * p, m, level + 1, out + r * m);
    const int64_t tw_step = n_ / n, rot = n_ / p;  // W_n^e = tw_[e * tw_step], W_p^e = tw_[e * rot]
    double *o = reinterpret_cast<double *>(out), *z = scratch_.data();
    const double *t = reinterpret_cast<const double *>(tw_.data());
    for (int64_t k = 0; k < m; ++k) {
      const int64_t dk = k * tw_step;  // < n_ / p
      for (int64_t r = 0, e = 0; r < p; ++r, e += dk) {  // z_r = W_n^(r k) Y_r[k]; r * dk < n_
        const double *y = o + 2 * (r * m + k), *w = t + 2 * e;
        z[2 * r] = y[0] * w[0] - y[1] * w[1];
        z[2 * r + 1] = y[0] * w[1] + y[1] * w[0];
      }
      if (p == 2) {
        double *a = o + 2 * k, *b = o + 2 * (k + m);
        a[0] = z[0] + z[2], a[1] = z[1] + z[3];
        b[0] = z[0] - z[2], b[1] = z[1] - z[3];
        continue;
      }
      if (p == 4) {  // W_4 = -i or +i: additions only
        const double s0r = z[0] + z[4], s0i = z[1] + z[5], d0r = z[0] - z[4], d0i = z[1] - z[5];
        const double s1r = z[2] + z[6], s1i = z[3] + z[7], d1r = z[2] - z[6], d1i = z[3] - z[7];
        const double ji = t[2 * rot + 1];  // W_4^1 = (0, -1) forward, (0, 1) inverse
        double *x0 = o + 2 * k, *x1 = o + 2 * (k + m), *x2 = o + 2 * (k + 2 * m), *x3 = o + 2 * (k + 3 * m);
        x0[0] = s0r + s1r, x0[1] = s0i + s1i;
        x2[0] = s0r - s1r, x2[1] = s0i - s1i;
        // W_4 * d1 = (-ji d1i, ji d1r)
        x1[0] = d0r - ji * d1i, x1[1] = d0i + ji * d1r;
        x3[0] = d0r + ji * d1i, x3[1] = d0i - ji * d1r;
        continue;
      }
      for (int64_t q = 0; q < p; ++q) {
        double re = z[0], im = z[1];
        const int64_t dq = (q * rot) % n_;
        for (int64_t r = 1, e = dq; r < p; ++r) {
          const double *w = t + 2 * e;
          re += z[2 * r] * w[0] - z[2 * r + 1] * w[1];
          im += z[2 * r] * w[1] + z[2 * r + 1] * w[0];
          e += dq;
          if (e >= n_) e -= n_;
        }
        o[2 * (k + q * m)] = re, o[2 * (k + q * m) + 1] = im;
      }
    }
  }

  // Bluestein: with c_m = exp(sign * i*pi * m^2 / N), jk = (j^2 + k^2 - (k-j)^2) / 2 makes
  // X_k = c_k * sum_j (x_j c_j) conj(c_(k-j)), a convolution done as FFTs of a power-of-two length M >= 2N-1.
  void InitBluestein(double sign) {
    int64_t m = 1;
    while (m < 2 * n_ - 1) m <<= 1;
    conv_.reset(new DftPlan(m, -1));
    chirp_.resize(static_cast<size_t>(n_));
    for (int64_t j = 0; j < n_; ++j) {
      const int64_t e = (j * j) % (2 * n_);  // exact: the angle stays small
      const double a = sign * 3.14159265358979323846 * static_cast<double>(e) / static_cast<double>(n_);
      chirp_[static_cast<size_t>(j)] = Cplx(std::cos(a), std::sin(a));
    }
    std::vector<Cplx> b(static_cast<size_t>(m), Cplx(0, 0));
    b[0] = std::conj(chirp_[0]);
    for (int64_t j = 1; j < n_; ++j) b[static_cast<size_t>(j)] = b[static_cast<size_t>(m - j)] = std::conj(chirp_[j]);
    kernel_.resize(static_cast<size_t>(m));
    conv_->Apply(b.data(), m, kernel_.data());
    const double inv = 1.0 / static_cast<double>(m);
    for (Cplx &v : kernel_) v *= inv;  // the inverse transform's 1/M, folded in once
    a_.assign(static_cast<size_t>(m), Cplx(0, 0));
    spec_.resize(static_cast<size_t>(m));
  }

  void Bluestein(const Cplx *in, int64_t k_count, Cplx *out) {
    const int64_t m = static_cast<int64_t>(a_.size());
    for (int64_t j = 0; j < n_; ++j) a_[j] = in[j] * chirp_[j];
    std::fill(a_.begin() + n_, a_.end(), Cplx(0, 0));
    conv_->Apply(a_.data(), m, spec_.data());
    // the inverse transform as the forward one of the conjugate: conj(F(conj(A * K))) / M
    for (int64_t j = 0; j < m; ++j) spec_[j] = std::conj(spec_[j] * kernel_[j]);
    conv_->Apply(spec_.data(), m, a_.data());
    for (int64_t k = 0; k < k_count; ++k) out[k] = std::conj(a_[k]) * chirp_[k];
  }

  int64_t n_;
  std::vector<Cplx> tw_, work_;
  std::vector<int64_t> rev_;
  bool pow2_;
  std::vector<int64_t> factors_;  // mixed radix
  std::vector<double> scratch_;
  std::unique_ptr<DftPlan> conv_;  // Bluestein
  std::vector<Cplx> chirp_, kernel_, a_, spec_;
};

bool FloatSignal(const TensorDesc &x, const char *what, std::string *reason) {
  const size_t r = x.dims.size();
  if (!IsFloatType(x.dtype) || r < 2 || (x.dims[r - 1] >= 0 && x.dims[r - 1] != 1 && x.dims[r - 1] != 2)) {
    *reason = std::string(what) + " must be a float tensor whose last dim is 1 (real) or 2 (complex), got " +
              DescStr(x);
    return false;
  }
  return true;
}

bool ReadOptionalLength(InferCtx *c, size_t i, const char *name, int64_t *v, bool *unknown, std::string *reason) {
  if (!c->has(i)) return true;
  if (!IsIntType(c->in[i]->dtype)) {
    *reason = std::string("input '") + name + "' must be an integer scalar, got " + DescStr(*c->in[i]);
    return false;
  }
  double d = 0;
  const ValueState st = ReadScalarInput(c, i, &d, reason);
  if (st == ValueState::kError) return false;
  if (st == ValueState::kUnknown) {
    *unknown = true;
    return true;
  }
  *v = static_cast<int64_t>(d);
  return true;
}

// ---- DFT ----

// x seen as [outer, len, inner, comp]; y as [outer, out_len, inner, out_comp].
struct DftGeom {
  bool inverse = false, onesided = false;
  int64_t outer = 1, len = 0, inner = 1, comp = 1;
  int64_t n = -1;  // dft_length (-1: not known yet)
  int64_t out_len = -1, out_comp = 2;
  int64_t axis = 0;
};

bool DftAttrs(const Node &node, int64_t opset, DftGeom *g, int64_t *axis_attr, std::string *reason) {
  int64_t inv, one;
  if (!AttrInt(node, "inverse", 0, &inv, reason) || !AttrInt(node, "onesided", 0, &one, reason) ||
      !AttrInt(node, "axis", 1, axis_attr, reason))
    return false;
  if ((inv != 0 && inv != 1) || (one != 0 && one != 1)) {
    *reason = "attributes 'inverse' and 'onesided' must be 0 or 1";
    return false;
  }
  if (opset >= 20 && node.FindAttr("axis")) {
    *reason = "attribute 'axis' is an input since opset 20";
    return false;
  }
  g->inverse = inv != 0, g->onesided = one != 0;
  return true;
}

bool CheckDft(const Node &n, int64_t opset, std::string *reason) {
  DftGeom g;
  int64_t axis;
  return DftAttrs(n, opset, &g, &axis, reason);
}

bool CheckStft(const Node &n, int64_t, std::string *reason) {
  int64_t onesided;
  if (!AttrInt(n, "onesided", 1, &onesided, reason)) return false;
  if (onesided != 0 && onesided != 1) {
    *reason = "attribute 'onesided' must be 0 or 1";
    return false;
  }
  return true;
}

bool MelDtype(const Node &n, ElemType *t, std::string *reason);

bool CheckMel(const Node &n, int64_t, std::string *reason) {
  ElemType t;
  return MelDtype(n, &t, reason);
}

// False + reason on bad input; g->n / g->out_len stay -1 when a length is not known yet.
bool DftShape(InferCtx *c, DftGeom *g, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  int64_t axis = 1;
  if (!FloatSignal(x, "input", reason) || !DftAttrs(*c->node, c->opset, g, &axis, reason)) return false;
  if (c->opset >= 20) axis = -2;
  bool unknown = false;
  if (c->opset >= 20 && !ReadOptionalLength(c, 2, "axis", &axis, &unknown, reason)) return false;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (unknown) {  // shape unknown until the axis is
    g->axis = -1;
    return true;
  }
  if (!NormalizeAxis(axis, rank, false, &g->axis, reason)) return false;
  if (g->axis == rank - 1) {
    *reason = "axis " + std::to_string(axis) + " is the real/imaginary dim; it must name a signal dim";
    return false;
  }
  g->outer = DimsProduct(x.dims, 0, static_cast<size_t>(g->axis));
  g->len = x.dims[g->axis];
  g->inner = DimsProduct(x.dims, static_cast<size_t>(g->axis) + 1, x.dims.size() - 1);
  g->comp = x.dims.back();
  if (g->len < 0) return true;
  g->n = g->inverse && g->onesided ? 2 * (g->len - 1) : g->len;
  if (!ReadOptionalLength(c, 1, "dft_length", &g->n, &unknown, reason)) return false;
  if (unknown) {
    g->n = -1;
    return true;
  }
  if (g->n < 1) {
    *reason = "the DFT length must be at least 1, got " + std::to_string(g->n);
    return false;
  }
  if (g->inverse && g->onesided) {
    g->out_len = g->n, g->out_comp = 1;
  } else {
    g->out_len = g->onesided ? g->n / 2 + 1 : g->n;
  }
  return true;
}

bool InferDft(InferCtx *c, std::string *reason) {
  DftGeom g;
  if (!DftShape(c, &g, reason)) return false;
  const TensorDesc &x = *c->in[0];
  c->out[0].dtype = x.dtype;
  c->out[0].dims = x.dims;
  if (g.n < 0 && g.axis >= 0) {  // axis known, length not
    c->out[0].dims[g.axis] = -1;
  } else if (g.n < 0) {
    for (size_t d = 0; d + 1 < x.dims.size(); ++d) c->out[0].dims[d] = -1;
  } else {
    c->out[0].dims[g.axis] = g.out_len;
  }
  // real output for an inverse one-sided DFT whatever the length: known from the attributes even while the
  // length or axis waits for the run (g.out_comp is set only once the length is known)
  c->out[0].dims.back() = g.inverse && g.onesided ? 1 : 2;
  return true;
}

template <class S>
class DftKernel : public Kernel {
 public:
  explicit DftKernel(DftGeom g) : g_(g), plan_(g.n, g.inverse ? 1 : -1), sig_(g.n), spec_(g.n) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]);
    S *y = static_cast<S *>(out[0]);
    const int64_t used = std::min(g_.len, g_.inverse && g_.onesided ? g_.n / 2 + 1 : g_.n);
    const double scale = g_.inverse ? 1.0 / static_cast<double>(g_.n) : 1.0;
    for (int64_t o = 0; o < g_.outer; ++o)
      for (int64_t i = 0; i < g_.inner; ++i) {
        std::fill(sig_.begin(), sig_.end(), Cplx(0, 0));
        for (int64_t j = 0; j < used; ++j) {
          const S *p = x + ((o * g_.len + j) * g_.inner + i) * g_.comp;
          sig_[j] = Cplx(p[0], g_.comp == 2 ? p[1] : 0);
        }
        if (g_.inverse && g_.onesided)  // Hermitian extension of the one-sided spectrum
          for (int64_t j = g_.n / 2 + 1; j < g_.n; ++j) sig_[j] = std::conj(sig_[g_.n - j]);
        plan_.Apply(sig_.data(), g_.out_len, spec_.data());
        for (int64_t k = 0; k < g_.out_len; ++k) {
          S *q = y + ((o * g_.out_len + k) * g_.inner + i) * g_.out_comp;
          q[0] = static_cast<S>(spec_[k].real() * scale);
          if (g_.out_comp == 2) q[1] = static_cast<S>(spec_[k].imag() * scale);
        }
      }
    return true;
  }

 private:
  DftGeom g_;
  DftPlan plan_;
  std::vector<Cplx> sig_, spec_;
};

std::unique_ptr<Kernel> PrepareDftFloat(const KernelCtx &c, std::string *reason) {
  InferCtx ic = c.AsInferCtx();
  DftGeom g;
  if (!DftShape(&ic, &g, reason)) return nullptr;
  if (c.in[0]->dtype == ElemType::kDouble) return std::unique_ptr<Kernel>(new DftKernel<double>(g));
  return std::unique_ptr<Kernel>(new DftKernel<float>(g));
}

std::unique_ptr<Kernel> PrepareDft(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareDftFloat, reason) : PrepareDftFloat(c, reason);
}

// ---- STFT ----

// signal [batch, len, comp] -> [batch, frames, bins, 2].
struct StftGeom {
  int64_t batch = 0, len = 0, comp = 1, step = -1, frame = -1, frames = -1, bins = -1;
  bool has_window = false;
};

bool StftShape(InferCtx *c, StftGeom *g, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  int64_t onesided;
  if (!AttrInt(*c->node, "onesided", 1, &onesided, reason)) return false;
  if (onesided != 0 && onesided != 1) {
    *reason = "attribute 'onesided' must be 0 or 1";
    return false;
  }
  if (x.dims.size() != 2 && !FloatSignal(x, "input 'signal'", reason)) return false;
  if (!IsFloatType(x.dtype)) {
    *reason = "input 'signal' must be a float tensor, got " + DescStr(x);
    return false;
  }
  // A real [batch, length] signal too: torch.onnx.export's TorchScript exporter (opset 17) writes torch.stft's
  // signal without the trailing component axis (Whisper's log-mel front end), and onnxruntime runs it as real.
  if (x.dims.size() != 3 && x.dims.size() != 2) {
    *reason = "input 'signal' must be [batch, length, 1 or 2] (or a real [batch, length]), got " + DescStr(x);
    return false;
  }
  g->batch = x.dims[0], g->len = x.dims[1], g->comp = x.dims.size() == 3 ? x.dims[2] : 1;
  g->has_window = c->has(2);
  if (g->has_window) {
    const TensorDesc &w = *c->in[2];
    if (w.dtype != x.dtype || w.dims.size() != 1) {
      *reason = "input 'window' must be 1-D of the signal's dtype, got " + DescStr(w);
      return false;
    }
    g->frame = w.dims[0];
  }
  bool unknown = false;
  int64_t frame_in = -1;
  if (!ReadOptionalLength(c, 1, "frame_step", &g->step, &unknown, reason) ||
      !ReadOptionalLength(c, 3, "frame_length", &frame_in, &unknown, reason))
    return false;
  if (!c->has(1)) {
    *reason = "input 'frame_step' is required";
    return false;
  }
  if (c->has(3) && !unknown) {
    if (g->has_window && g->frame >= 0 && frame_in != g->frame) {
      *reason = "input 'frame_length' (" + std::to_string(frame_in) + ") differs from the window's length " +
                std::to_string(g->frame);
      return false;
    }
    g->frame = frame_in;
  }
  if (!c->has(3) && !g->has_window) g->frame = g->len;
  if (unknown || g->frame < 0 || g->len < 0) return true;
  if (g->step < 1 || g->frame < 1 || g->frame > g->len) {
    *reason = "frame_step must be >= 1 and frame_length in [1, signal length " + std::to_string(g->len) +
              "], got frame_step " + std::to_string(g->step) + ", frame_length " + std::to_string(g->frame);
    return false;
  }
  g->frames = 1 + (g->len - g->frame) / g->step;
  g->bins = onesided ? g->frame / 2 + 1 : g->frame;
  return true;
}

bool InferStft(InferCtx *c, std::string *reason) {
  StftGeom g;
  if (!StftShape(c, &g, reason)) return false;
  c->out[0] = {c->in[0]->dtype, {g.batch, g.frames, g.bins, 2}};
  return true;
}

template <class S>
class StftKernel : public Kernel {
 public:
  explicit StftKernel(StftGeom g) : g_(g), plan_(g.frame, -1), sig_(g.frame), spec_(g.bins) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const S *x = static_cast<const S *>(in[0]), *w = g_.has_window ? static_cast<const S *>(in[2]) : nullptr;
    S *y = static_cast<S *>(out[0]);
    for (int64_t b = 0; b < g_.batch; ++b)
      for (int64_t f = 0; f < g_.frames; ++f) {
        for (int64_t j = 0; j < g_.frame; ++j) {
          const S *p = x + (b * g_.len + f * g_.step + j) * g_.comp;
          const double wj = w ? static_cast<double>(w[j]) : 1.0;
          sig_[j] = Cplx(p[0] * wj, g_.comp == 2 ? p[1] * wj : 0);
        }
        plan_.Apply(sig_.data(), g_.bins, spec_.data());
        S *q = y + (b * g_.frames + f) * g_.bins * 2;
        for (int64_t k = 0; k < g_.bins; ++k)
          q[2 * k] = static_cast<S>(spec_[k].real()), q[2 * k + 1] = static_cast<S>(spec_[k].imag());
      }
    return true;
  }

 private:
  StftGeom g_;
  DftPlan plan_;
  std::vector<Cplx> sig_, spec_;
};

std::unique_ptr<Kernel> PrepareStftFloat(const KernelCtx &c, std::string *reason) {
  InferCtx ic = c.AsInferCtx();
  StftGeom g;
  if (!StftShape(&ic, &g, reason)) return nullptr;
  if (c.in[0]->dtype == ElemType::kDouble) return std::unique_ptr<Kernel>(new StftKernel<double>(g));
  return std::unique_ptr<Kernel>(new StftKernel<float>(g));
}

std::unique_ptr<Kernel> PrepareStft(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareStftFloat, reason) : PrepareStftFloat(c, reason);
}

// ---- MelWeightMatrix ----

bool MelDtype(const Node &n, ElemType *t, std::string *reason) {
  int64_t dt;
  if (!AttrInt(n, "output_datatype", 1, &dt, reason)) return false;
  if (!OnnxTypeToElemType(dt, t) || !IsNumericType(*t)) {
    *reason = "attribute 'output_datatype' " + std::string(OnnxTypeName(dt)) + " is not supported";
    return false;
  }
  return true;
}

bool InferMel(InferCtx *c, std::string *reason) {
  ElemType t;
  if (!MelDtype(*c->node, &t, reason)) return false;
  for (size_t i = 0; i < 5; ++i)
    if ((i < 3 && !IsIntType(c->in[i]->dtype)) || (i >= 3 && !IsFloatType(c->in[i]->dtype))) {
      *reason = "input '" + c->node->input_names[i] + "' must be an " + (i < 3 ? "integer" : "float") +
                " scalar, got " + DescStr(*c->in[i]);
      return false;
    }
  int64_t bins = -1, dft = -1;
  bool unknown = false;
  if (!ReadOptionalLength(c, 0, "num_mel_bins", &bins, &unknown, reason) ||
      !ReadOptionalLength(c, 1, "dft_length", &dft, &unknown, reason))
    return false;
  if (!unknown && (bins < 1 || dft < 1)) {
    *reason = "num_mel_bins and dft_length must be >= 1, got " + std::to_string(bins) + " and " + std::to_string(dft);
    return false;
  }
  c->out[0] = {t, {unknown ? -1 : dft / 2 + 1, unknown ? -1 : bins}};
  return true;
}

double ScalarAsDouble(ElemType t, const void *p) {
  double v = 0;
  VisitType(t, [&](auto tag) {
    using S = decltype(tag);
    v = static_cast<double>(Num<S>::Load(*static_cast<const S *>(p)));
  });
  return v;
}

class MelKernel : public Kernel {
 public:
  MelKernel(std::vector<ElemType> in_types, ElemType out_type, int64_t spec_bins, int64_t mel_bins)
      : in_types_(std::move(in_types)), out_type_(out_type), spec_bins_(spec_bins), mel_bins_(mel_bins),
        w_(static_cast<size_t>(spec_bins * mel_bins)) {}
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    double v[5];
    for (int i = 0; i < 5; ++i) v[i] = ScalarAsDouble(in_types_[i], in[i]);
    const int64_t dft = static_cast<int64_t>(v[1]), rate = static_cast<int64_t>(v[2]);
    if (rate <= 0) {
      *reason = "sample_rate must be positive, got " + std::to_string(rate);
      return false;
    }
    // Band edges equally spaced on the mel scale, mapped back to DFT bins (floored like the reference).
    // lo, hi and step in float32 like the reference (its edge inputs are float32 numpy scalars).
    const float lo = 2595.f * std::log1p(static_cast<float>(v[3]) / 700.f) / std::log(10.f);
    const float hi = 2595.f * std::log1p(static_cast<float>(v[4]) / 700.f) / std::log(10.f);
    const float step = (hi - lo) / static_cast<float>(mel_bins_ + 2);
    std::vector<int64_t> edge(static_cast<size_t>(mel_bins_ + 2));
    for (int64_t i = 0; i < mel_bins_ + 2; ++i) {
      const double hz = 700 * std::expm1((static_cast<double>(i) * step + lo) / 2595 * std::log(10.0));
      edge[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate)));
    }
    std::fill(w_.begin(), w_.end(), 0.0);
    for (int64_t m = 0; m < mel_bins_; ++m) {
      const int64_t l = edge[m], ctr = edge[m + 1], r = edge[m + 2];
      if (l < 0 || r > spec_bins_ || ctr >= spec_bins_ || l > ctr || ctr > r) {
        *reason = "the mel band edges (DFT bins " + std::to_string(l) + ", " + std::to_string(ctr) + ", " +
                  std::to_string(r) + ") fall outside the " + std::to_string(spec_bins_) +
                  " spectrogram bins; check lower/upper_edge_hertz against sample_rate";
        return false;
      }
      if (ctr == l) w_[ctr * mel_bins_ + m] = 1;
      for (int64_t j = l; ctr > l && j <= ctr; ++j) w_[j * mel_bins_ + m] = double(j - l) / double(ctr - l);
      for (int64_t j = ctr; j < r; ++j) w_[j * mel_bins_ + m] = double(r - j) / double(r - ctr);
    }
    VisitType(out_type_, [&](auto tag) {
      using S = decltype(tag);
      S *y = static_cast<S *>(out[0]);
      for (size_t i = 0; i < w_.size(); ++i) y[i] = Num<S>::Store(static_cast<typename Num<S>::C>(w_[i]));
    });
    return true;
  }

 private:
  std::vector<ElemType> in_types_;
  ElemType out_type_;
  int64_t spec_bins_, mel_bins_;
  std::vector<double> w_;
};

std::unique_ptr<Kernel> PrepareMel(const KernelCtx &c, std::string *) {
  std::vector<ElemType> types;
  for (size_t i = 0; i < 5; ++i) types.push_back(c.in[i]->dtype);
  return std::unique_ptr<Kernel>(new MelKernel(types, c.out[0].dtype, c.out[0].dims[0], c.out[0].dims[1]));
}

}  // namespace

void RegisterSignalOps(std::vector<OpDef> *ops) {
  ops->push_back({"DFT", 1, 3, 1, 1, CheckDft, InferDft, PrepareDft, true});
  ops->push_back({"STFT", 2, 4, 1, 1, CheckStft, InferStft, PrepareStft, true});
  ops->push_back({"MelWeightMatrix", 5, 5, 1, 1, CheckMel, InferMel, PrepareMel, true});
}

}  // namespace onnx
}  // namespace twin
