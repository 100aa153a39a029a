// Random ops: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli, Multinomial.
// Never folded (each Run draws new numbers). With the `seed` attribute a plan's sequence of draws is reproducible;
// without it each kernel is seeded from std::random_device. Values cannot match other runtimes bit for bit (ONNX
// does not define the generator); tests check their distributions.
#include <algorithm>
#include <cmath>
#include <random>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

bool AttrDtype(const Node &n, ElemType def, ElemType *out, std::string *reason) {
  int64_t t;
  if (!AttrInt(n, "dtype", 0, &t, reason)) return false;
  if (t == 0) {
    *out = def;
    return true;
  }
  if (!OnnxTypeToElemType(t, out)) {
    *reason = std::string("dtype ") + OnnxTypeName(t) + " is not supported by the twin";
    return false;
  }
  return true;
}

uint64_t SeedOf(const Node &n) {
  const Attribute *s = n.FindAttr("seed");
  if (s && s->type == kAttrFloat) {
    uint32_t bits;
    std::memcpy(&bits, &s->f, 4);
    return bits;
  }
  return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

bool IsNormal(const Node &n) { return n.op_type.rfind("RandomNormal", 0) == 0; }
bool IsLike(const Node &n) { return n.op_type.size() > 4 && n.op_type.compare(n.op_type.size() - 4, 4, "Like") == 0; }

bool InferRandom(InferCtx *c, std::string *reason) {
  const Node &n = *c->node;
  if (IsLike(n)) {
    if (!AttrDtype(n, c->in[0]->dtype, &c->out[0].dtype, reason)) return false;
    c->out[0].dims = c->in[0]->dims;
  } else {
    bool present;
    if (!AttrDtype(n, ElemType::kFloat, &c->out[0].dtype, reason) ||
        !AttrInts(n, "shape", &c->out[0].dims, &present, reason))
      return false;
    if (!present) {
      *reason = "attribute 'shape' is required";
      return false;
    }
  }
  if (!IsFloatType(c->out[0].dtype)) {
    *reason = DtypeNotSupported(c->out[0].dtype, "output");
    return false;
  }
  return true;
}

template <class S>
class RandomKernel : public Kernel {
 public:
  RandomKernel(int64_t n, bool normal, double a, double b, uint64_t seed)
      : n_(n), normal_(normal), a_(a), b_(b), rng_(seed) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    S *y = static_cast<S *>(out[0]);
    std::normal_distribution<double> nd(a_, b_);
    std::uniform_real_distribution<double> ud(a_, b_);
    for (int64_t i = 0; i < n_; ++i)
      y[i] = Num<S>::Store(static_cast<typename Num<S>::C>(normal_ ? nd(rng_) : ud(rng_)));
    return true;
  }

 private:
  int64_t n_;
  bool normal_;
  double a_, b_;
  std::mt19937_64 rng_;
};

std::unique_ptr<Kernel> PrepareRandom(const KernelCtx &kc, std::string *reason) {
  const Node &n = *kc.node;
  const bool normal = IsNormal(n);
  float a, b;
  if (normal ? !AttrFloat(n, "mean", 0.f, &a, reason) || !AttrFloat(n, "scale", 1.f, &b, reason)
             : !AttrFloat(n, "low", 0.f, &a, reason) || !AttrFloat(n, "high", 1.f, &b, reason))
    return nullptr;
  if (normal ? !(b >= 0) : !(b >= a)) {
    *reason = normal ? "attribute 'scale' must be >= 0" : "attribute 'high' must be >= 'low'";
    return nullptr;
  }
  std::unique_ptr<Kernel> k;
  const int64_t cnt = kc.out[0].NumElements();
  VisitType(kc.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kIsFloat<S>) k = std::make_unique<RandomKernel<S>>(cnt, normal, a, b, SeedOf(n));
  });
  if (!k) *reason = DtypeNotSupported(kc.out[0].dtype, "output");
  return k;
}

// ---- Bernoulli ----

bool InferBernoulli(InferCtx *c, std::string *reason) {
  if (!IsFloatType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  if (!AttrDtype(*c->node, c->in[0]->dtype, &c->out[0].dtype, reason)) return false;
  if (!IsNumericType(c->out[0].dtype) && c->out[0].dtype != ElemType::kBool) {
    *reason = DtypeNotSupported(c->out[0].dtype, "output");
    return false;
  }
  c->out[0].dims = c->in[0]->dims;
  return true;
}

template <class P, class Y>
class BernoulliKernel : public Kernel {
 public:
  BernoulliKernel(int64_t n, uint64_t seed) : n_(n), rng_(seed) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const P *p = static_cast<const P *>(in[0]);
    Y *y = static_cast<Y *>(out[0]);
    std::uniform_real_distribution<double> ud(0.0, 1.0);
    for (int64_t i = 0; i < n_; ++i)
      y[i] = Num<Y>::Store(static_cast<typename Num<Y>::C>(ud(rng_) < static_cast<double>(Num<P>::Load(p[i])) ? 1 : 0));
    return true;
  }

 private:
  int64_t n_;
  std::mt19937_64 rng_;
};

std::unique_ptr<Kernel> PrepareBernoulli(const KernelCtx &kc, std::string *reason) {
  std::unique_ptr<Kernel> k;
  const int64_t n = kc.out[0].NumElements();
  VisitType(kc.in[0]->dtype, [&](auto ptag) {
    using P = decltype(ptag);
    if constexpr (kIsFloat<P>)
      VisitType(kc.out[0].dtype, [&](auto ytag) {
        using Y = decltype(ytag);
        k = std::make_unique<BernoulliKernel<P, Y>>(n, SeedOf(*kc.node));
      });
  });
  if (!k) *reason = DtypeNotSupported(kc.in[0]->dtype);
  return k;
}

// ---- Multinomial: rows of unnormalised log-probabilities -> sample_size class indices per row ----

bool InferMultinomial(InferCtx *c, std::string *reason) {
  const TensorDesc &x = *c->in[0];
  if (!IsFloatType(x.dtype) || x.dims.size() != 2) {
    *reason = "input must be a [batch, classes] float tensor, got " + DescStr(x);
    return false;
  }
  int64_t samples;
  if (!AttrInt(*c->node, "sample_size", 1, &samples, reason)) return false;
  if (samples < 0) {
    *reason = "attribute 'sample_size' must be >= 0";
    return false;
  }
  if (!AttrDtype(*c->node, ElemType::kInt32, &c->out[0].dtype, reason)) return false;
  if (c->out[0].dtype != ElemType::kInt32 && c->out[0].dtype != ElemType::kInt64) {
    *reason = "dtype must be int32 or int64";
    return false;
  }
  c->out[0].dims = {x.dims[0], samples};
  return true;
}

template <class P>
class MultinomialKernel : public Kernel {
 public:
  MultinomialKernel(int64_t rows, int64_t classes, int64_t samples, bool i64, uint64_t seed)
      : rows_(rows), classes_(classes), samples_(samples), i64_(i64), rng_(seed), cdf_(classes) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const P *x = static_cast<const P *>(in[0]);
    std::uniform_real_distribution<double> ud(0.0, 1.0);
    for (int64_t r = 0; r < rows_; ++r) {
      double mx = -INFINITY;
      for (int64_t c = 0; c < classes_; ++c) mx = std::max(mx, static_cast<double>(Num<P>::Load(x[r * classes_ + c])));
      double acc = 0;
      for (int64_t c = 0; c < classes_; ++c) {
        acc += std::exp(static_cast<double>(Num<P>::Load(x[r * classes_ + c])) - mx);
        cdf_[c] = acc;
      }
      for (int64_t s = 0; s < samples_; ++s) {
        const double u = ud(rng_) * acc;
        int64_t c = std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
        c = std::min(c, classes_ - 1);
        if (i64_) static_cast<int64_t *>(out[0])[r * samples_ + s] = c;
        else static_cast<int32_t *>(out[0])[r * samples_ + s] = static_cast<int32_t>(c);
      }
    }
    return true;
  }

 private:
  int64_t rows_, classes_, samples_;
  bool i64_;
  std::mt19937_64 rng_;
  std::vector<double> cdf_;  // one row's cumulative weights, reused
};

std::unique_ptr<Kernel> PrepareMultinomial(const KernelCtx &kc, std::string *reason) {
  const auto &d = kc.in[0]->dims;
  if (d[1] == 0 && kc.out[0].NumElements() > 0) {
    *reason = "cannot sample from zero classes";
    return nullptr;
  }
  std::unique_ptr<Kernel> k;
  VisitType(kc.in[0]->dtype, [&](auto tag) {
    using P = decltype(tag);
    if constexpr (kIsFloat<P>)
      k = std::make_unique<MultinomialKernel<P>>(d[0], d[1], kc.out[0].dims[1],
                                                 kc.out[0].dtype == ElemType::kInt64, SeedOf(*kc.node));
  });
  if (!k) *reason = DtypeNotSupported(kc.in[0]->dtype);
  return k;
}

}  // namespace

void RegisterRandomOps(std::vector<OpDef> *ops) {
  ops->push_back({"RandomNormal", 0, 0, 1, 1, nullptr, InferRandom, PrepareRandom, false});
  ops->push_back({"RandomUniform", 0, 0, 1, 1, nullptr, InferRandom, PrepareRandom, false});
  ops->push_back({"RandomNormalLike", 1, 1, 1, 1, nullptr, InferRandom, PrepareRandom, false});
  ops->push_back({"RandomUniformLike", 1, 1, 1, 1, nullptr, InferRandom, PrepareRandom, false});
  ops->push_back({"Bernoulli", 1, 1, 1, 1, nullptr, InferBernoulli, PrepareBernoulli, false});
  ops->push_back({"Multinomial", 1, 1, 1, 1, nullptr, InferMultinomial, PrepareMultinomial, false});
}

}  // namespace onnx
}  // namespace twin
