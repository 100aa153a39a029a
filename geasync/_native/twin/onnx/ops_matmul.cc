// MatMul (numpy matmul semantics: 1-D promotion, broadcast batch dims) and Gemm (alpha, beta, transA, transB,
// optional unidirectionally broadcast C). Both run on OpenBLAS through gemm.cc; float16/bfloat16 through float32.
// A constant float32 B (a weight initializer) with few rows of A runs on the panel kernel instead (gemm_panel.h),
// B packed once here rather than by BLAS on every call.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "broadcast.h"
#include "gemm.h"
#include "gemm_panel.h"
#include "intra_op.h"
#include "shared_const.h"
#include "elem.h"

namespace twin {
namespace onnx {
namespace {

bool MatMulType(ElemType t) { return IsFloatType(t); }

bool CheckSameFloatTypes(const InferCtx &c, size_t count, std::string *reason) {
  for (size_t i = 0; i < count; ++i) {
    if (!c.has(i)) continue;
    if (!MatMulType(c.in[i]->dtype)) {
      *reason = DtypeNotSupported(c.in[i]->dtype);
      return false;
    }
    if (c.in[i]->dtype != c.in[0]->dtype) {
      *reason = std::string("input dtypes ") + ElemTypeName(c.in[0]->dtype) + " and " + ElemTypeName(c.in[i]->dtype) +
                " differ";
      return false;
    }
  }
  return true;
}

// Rows of A up to which a constant B runs on the panel kernel. Measured single-threaded against BLAS (K x N of 64 x 256
// to 1024 x 1024): on an AVX-512 EPYC 0.7-1.0x of BLAS's time from 5 to 256 rows, about even at 1024; on an AVX2-only
// EPYC (Zen 3) 0.6-0.9x from 9 to 256 rows (BLAS's packing dominates at a few dozen rows). The limit bounds the
// second copy of B rather than speed.
constexpr int64_t kPanelMaxRows = 256;
// Largest packed copy of B kept per node (floats, 64 MB): beyond, BLAS's packing is small next to the product.
constexpr int64_t kPanelMaxFloats = int64_t(1) << 24;

// op(B) of a constant float32 B in panels, when the product's rows suit the panel kernel: more than the small-GEMM
// kernel's rows (it reads B once without packing), at most kPanelMaxRows. Otherwise empty (width 0).
// The pack depends on B alone, so every plan of the graph (one per input shape) shares it.
struct PanelB {
  std::shared_ptr<const std::vector<float>> pack;
  int width = 0;

  void Init(const void *b, bool b_transposed, int64_t rows, int64_t N, int64_t K) {
    const int w = PanelWidth();
    if (!b || !w || rows <= kSmallGemmMaxRows || rows > kPanelMaxRows || N <= 0 || K <= 0) return;
    if (PackedSize(N, K, w) > kPanelMaxFloats) return;
    width = w;
    pack = SharedDerived<float>(b, "matmul panels", {b_transposed, N, K, width}, [&](std::vector<float> *v) {
      v->resize(static_cast<size_t>(PackedSize(N, K, width)));
      PackPanels(static_cast<const float *>(b), b_transposed, N, K, width, v->data());
    });
  }
  const float *data() const { return pack->data(); }
};

// ---- MatMul ----

struct MatMulShape {
  Dims a_batch, b_batch, batch;  // batch dims (broadcast)
  int64_t M = 0, K = 0, N = 0, Kb = 0;
  bool a_vec = false, b_vec = false;
};

bool MatMulDims(const Dims &a, const Dims &b, MatMulShape *s, Dims *out,
                std::string *reason) {
  if (a.empty() || b.empty()) {
    *reason = "inputs must have rank >= 1, got shapes " + ShapeStr(a) + " and " + ShapeStr(b);
    return false;
  }
  Dims a2 = a, b2 = b;
  s->a_vec = a.size() == 1;
  s->b_vec = b.size() == 1;
  if (s->a_vec) a2.insert(a2.begin(), 1);
  if (s->b_vec) b2.push_back(1);
  s->M = a2[a2.size() - 2];
  s->K = a2[a2.size() - 1];
  s->Kb = b2[b2.size() - 2];
  s->N = b2[b2.size() - 1];
  if (s->K >= 0 && s->Kb >= 0 && s->K != s->Kb) {
    *reason = "inner dimensions do not match: shapes " + ShapeStr(a) + " and " + ShapeStr(b);
    return false;
  }
  s->a_batch.assign(a2.begin(), a2.end() - 2);
  s->b_batch.assign(b2.begin(), b2.end() - 2);
  std::string r2;
  if (!BroadcastShapes(s->a_batch, s->b_batch, &s->batch, &r2)) {
    *reason = "batch dimensions of shapes " + ShapeStr(a) + " and " + ShapeStr(b) + " cannot be broadcast together";
    return false;
  }
  *out = s->batch;
  if (!s->a_vec) out->push_back(s->M);
  if (!s->b_vec) out->push_back(s->N);
  return true;
}

bool InferMatMul(InferCtx *c, std::string *reason) {
  if (!CheckSameFloatTypes(*c, 2, reason)) return false;
  MatMulShape s;
  c->out[0].dtype = c->in[0]->dtype;
  return MatMulDims(c->in[0]->dims, c->in[1]->dims, &s, &c->out[0].dims, reason);
}

template <class T>
class MatMulKernel : public Kernel {
 public:
  MatMulKernel(int64_t M, int64_t N, int64_t K, std::vector<int64_t> a_off, std::vector<int64_t> b_off)
      : M_(M), N_(N), K_(K), a_off_(std::move(a_off)), b_off_(std::move(b_off)) {
    // A's batches back to back and one shared B (activations x weights): a single GEMM with M * batches rows.
    fold_ = !a_off_.empty();
    for (size_t bi = 0; fold_ && bi < a_off_.size(); ++bi)
      fold_ = a_off_[bi] == static_cast<int64_t>(bi) * M_ * K_ && b_off_[bi] == b_off_[0];
  }
  // B known now: packed for the panel kernel where the (folded) rows suit it.
  void UseConstantB(const void *b) {
    if constexpr (std::is_same<T, float>::value)
      if (fold_) panel_.Init(b, false, M_ * static_cast<int64_t>(a_off_.size()), N_, K_);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    const T *A = static_cast<const T *>(in[0]);
    const T *B = static_cast<const T *>(in[1]);
    T *C = static_cast<T *>(out[0]);
    const int64_t mn = M_ * N_;
    if constexpr (std::is_same<T, float>::value) {
      if (panel_.width) {
        const int64_t rows = M_ * static_cast<int64_t>(a_off_.size());
        RunPanels({A, K_, rows, K_, panel_.data(), N_, C, N_}, panel_.width);
        return true;
      }
    }
    if (fold_) {
      Gemm<T>(false, false, M_ * static_cast<int64_t>(a_off_.size()), N_, K_, T(1), A, K_, B + b_off_[0], N_, T(0), C,
              N_);
      return true;
    }
    // One GEMM per batch (attention's per-head products): batches are independent calls, shared over the intra-op
    // pool in runs of >= kMinChunkMacs multiply-adds; each batch's result is the same whoever computes it.
    ParallelForAnyCut(static_cast<int64_t>(a_off_.size()), GrainForMacs(mn * K_), [&](int64_t lo, int64_t hi) {
      for (int64_t bi = lo; bi < hi; ++bi)
        Gemm<T>(false, false, M_, N_, K_, T(1), A + a_off_[bi], K_, B + b_off_[bi], N_, T(0), C + mn * bi, N_);
    });
    return true;
  }

 private:
  int64_t M_, N_, K_;
  std::vector<int64_t> a_off_, b_off_;  // element offset of each batch's matrices
  bool fold_ = false;
  PanelB panel_;  // float32 only
};

std::unique_ptr<Kernel> PrepareMatMulFloat(const KernelCtx &c, std::string *reason) {
  MatMulShape s;
  Dims out;
  if (!MatMulDims(c.in[0]->dims, c.in[1]->dims, &s, &out, reason)) return nullptr;
  // Batch offsets: walk the broadcast batch index space once, here, so Run does not.
  const size_t r = s.batch.size();
  int64_t nb = 1;
  for (int64_t d : s.batch) nb *= d;
  std::vector<int64_t> a_off, b_off;
  a_off.reserve(nb);
  b_off.reserve(nb);
  std::vector<int64_t> idx(r, 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t ao = 0, bo = 0, as = s.M * s.K, bs = s.K * s.N;
    for (size_t d = r; d-- > 0;) {
      if (d >= r - s.a_batch.size()) {
        int64_t dim = s.a_batch[d - (r - s.a_batch.size())];
        ao += (dim == 1 ? 0 : idx[d]) * as;
        as *= dim;
      }
      if (d >= r - s.b_batch.size()) {
        int64_t dim = s.b_batch[d - (r - s.b_batch.size())];
        bo += (dim == 1 ? 0 : idx[d]) * bs;
        bs *= dim;
      }
    }
    a_off.push_back(ao);
    b_off.push_back(bo);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < s.batch[d]) break;
      idx[d] = 0;
    }
  }
  switch (c.out[0].dtype) {
    case ElemType::kFloat: {
      auto k = std::make_unique<MatMulKernel<float>>(s.M, s.N, s.K, a_off, b_off);
      k->UseConstantB(c.in_data.size() > 1 ? c.in_data[1] : nullptr);
      return k;
    }
    case ElemType::kDouble: return std::make_unique<MatMulKernel<double>>(s.M, s.N, s.K, a_off, b_off);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

// ---- Gemm ----

struct GemmAttrs {
  float alpha = 1.f, beta = 1.f;
  int64_t trans_a = 0, trans_b = 0;
};

bool GemmReadAttrs(const Node &n, GemmAttrs *g, std::string *reason) {
  return AttrFloat(n, "alpha", 1.f, &g->alpha, reason) && AttrFloat(n, "beta", 1.f, &g->beta, reason) &&
         AttrInt(n, "transA", 0, &g->trans_a, reason) && AttrInt(n, "transB", 0, &g->trans_b, reason);
}

bool CheckGemm(const Node &n, int64_t, std::string *reason) {
  GemmAttrs g;
  return GemmReadAttrs(n, &g, reason);  // opset < 7 'broadcast' is ignored: broadcasting C is a superset
}

bool InferGemm(InferCtx *c, std::string *reason) {
  if (!CheckSameFloatTypes(*c, 3, reason)) return false;
  GemmAttrs g;
  if (!GemmReadAttrs(*c->node, &g, reason)) return false;
  const auto &a = c->in[0]->dims, &b = c->in[1]->dims;
  if (a.size() != 2 || b.size() != 2) {
    *reason = "A and B must be 2-D, got shapes " + ShapeStr(a) + " and " + ShapeStr(b);
    return false;
  }
  int64_t M = g.trans_a ? a[1] : a[0], K = g.trans_a ? a[0] : a[1];
  int64_t Kb = g.trans_b ? b[1] : b[0], N = g.trans_b ? b[0] : b[1];
  if (K >= 0 && Kb >= 0 && K != Kb) {
    *reason = "inner dimensions do not match: A " + ShapeStr(a) + (g.trans_a ? " (transposed)" : "") + ", B " +
              ShapeStr(b) + (g.trans_b ? " (transposed)" : "");
    return false;
  }
  if (c->has(2)) {
    const auto &cd = c->in[2]->dims;
    bool ok = cd.size() <= 2;
    std::vector<int64_t> y = {M, N};
    for (size_t i = 0; ok && i < cd.size(); ++i) {
      int64_t want = y[2 - cd.size() + i];
      if (cd[i] != 1 && cd[i] >= 0 && want >= 0 && cd[i] != want) ok = false;
    }
    if (!ok) {
      *reason = "C of shape " + ShapeStr(cd) + " cannot be broadcast to " + ShapeStr(y);
      return false;
    }
  }
  c->out[0].dtype = c->in[0]->dtype;
  c->out[0].dims = {M, N};
  return true;
}

template <class T>
class GemmKernel : public Kernel {
 public:
  GemmKernel(const GemmAttrs &g, int64_t M, int64_t N, int64_t K, bool has_c, int64_t c_rows, int64_t c_cols)
      : g_(g), M_(M), N_(N), K_(K), has_c_(has_c), c_rows_(c_rows), c_cols_(c_cols) {}
  // B known now: packed for the panel kernel where it applies. The kernel reads A's rows contiguously (no transA);
  // alpha == 0 takes the path of its own in Run.
  void UseConstantB(const void *b) {
    if constexpr (std::is_same<T, float>::value)
      if (!g_.trans_a && g_.alpha != 0.0f) panel_.Init(b, g_.trans_b != 0, M_, N_, K_);
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    T *Y = static_cast<T *>(out[0]);
    // beta == 0 leaves C out (NaN included), as the reference evaluator does.
    const bool add_c = has_c_ && g_.beta != 0.0f;
    if (add_c) {
      const T *C = static_cast<const T *>(in[2]);
      const T beta = static_cast<T>(g_.beta);
      for (int64_t i = 0; i < M_; ++i) {
        const T *crow = C + (c_rows_ == 1 ? 0 : i) * c_cols_;
        T *y = Y + i * N_;
        if (c_cols_ == 1) {
          const T v = beta * crow[0];
          for (int64_t j = 0; j < N_; ++j) y[j] = v;
        } else {
          for (int64_t j = 0; j < N_; ++j) y[j] = beta * crow[j];
        }
      }
    }
    if constexpr (std::is_same<T, float>::value) {
      if (panel_.width) {  // Y = alpha * A op(B) (+ Y: BLAS's beta == 1 below)
        RunPanels({static_cast<const float *>(in[0]), K_, M_, K_, panel_.data(), N_, Y, N_, g_.alpha, add_c},
                  panel_.width);
        return true;
      }
    }
    if (!add_c) std::fill(Y, Y + M_ * N_, T(0));
    if (g_.alpha == 0.0f) {
      // BLAS skips the product when alpha == 0, but 0 * A op(B) is NaN wherever the product is NaN or infinite
      // (the reference evaluator computes it): form the product, then add 0 times it. Rare: speed does not matter.
      std::vector<T> product(static_cast<size_t>(M_ * N_), T(0));
      GemmAccumulate<T>(g_.trans_a != 0, g_.trans_b != 0, M_, N_, K_, T(1), static_cast<const T *>(in[0]),
                        static_cast<const T *>(in[1]), product.data());
      for (size_t i = 0; i < product.size(); ++i) Y[i] += T(0) * product[i];
      return true;
    }
    GemmAccumulate<T>(g_.trans_a != 0, g_.trans_b != 0, M_, N_, K_, static_cast<T>(g_.alpha),
                      static_cast<const T *>(in[0]), static_cast<const T *>(in[1]), Y);
    return true;
  }

 private:
  GemmAttrs g_;
  int64_t M_, N_, K_;
  bool has_c_;
  int64_t c_rows_, c_cols_;
  PanelB panel_;  // float32 only
};

std::unique_ptr<Kernel> PrepareGemmFloat(const KernelCtx &c, std::string *reason) {
  GemmAttrs g;
  if (!GemmReadAttrs(*c.node, &g, reason)) return nullptr;
  const auto &a = c.in[0]->dims;
  const int64_t M = c.out[0].dims[0], N = c.out[0].dims[1];
  const int64_t K = g.trans_a ? a[0] : a[1];
  const bool has_c = c.in.size() > 2 && c.in[2] != nullptr;
  int64_t c_rows = 1, c_cols = 1;
  if (has_c) {
    const auto &cd = c.in[2]->dims;
    if (cd.size() == 2) {
      c_rows = cd[0];
      c_cols = cd[1];
    } else if (cd.size() == 1) {
      c_cols = cd[0];
    }
  }
  switch (c.out[0].dtype) {
    case ElemType::kFloat: {
      auto k = std::make_unique<GemmKernel<float>>(g, M, N, K, has_c, c_rows, c_cols);
      k->UseConstantB(c.in_data.size() > 1 ? c.in_data[1] : nullptr);
      return k;
    }
    case ElemType::kDouble: return std::make_unique<GemmKernel<double>>(g, M, N, K, has_c, c_rows, c_cols);
    default: *reason = DtypeNotSupported(c.out[0].dtype); return nullptr;
  }
}

std::unique_ptr<Kernel> PrepareMatMul(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareMatMulFloat, reason) : PrepareMatMulFloat(c, reason);
}

std::unique_ptr<Kernel> PrepareGemm(const KernelCtx &c, std::string *reason) {
  return HasHalfTypes(c) ? PrepareViaFloat(c, PrepareGemmFloat, reason) : PrepareGemmFloat(c, reason);
}

}  // namespace

void RegisterMatMulOps(std::vector<OpDef> *ops) {
  ops->push_back({"MatMul", 2, 2, 1, 1, nullptr, InferMatMul, PrepareMatMul, true});
  ops->push_back({"Gemm", 2, 3, 1, 1, CheckGemm, InferGemm, PrepareGemm, true});
}

}  // namespace onnx
}  // namespace twin
