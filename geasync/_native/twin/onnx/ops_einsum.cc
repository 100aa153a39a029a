// Einsum: any number of operands, explicit or implicit output, ellipsis broadcasting, repeated labels (diagonals).
// The equation is compiled at prepare time into per-operand strides for every label; the kernel walks the output
// labels and, for each output element, the contracted labels, with incremental offsets (no per-element division).
// Floating types accumulate in double, integers in 64 bits (wrapping like the reference's fixed-width sums).
// Two float32 / float64 operands that form a batched matrix product (attention's "bhqd,bhkd->bhqk", "ij,jk",
// "bij,bjk->bik", ...) run as GEMMs instead (EinsumGemmKernel).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no per-file optimize pragma
#pragma GCC optimize("O3")
#endif

#include <algorithm>
#include <map>

#include "elem.h"
#include "gemm.h"

namespace twin {
namespace onnx {
namespace {

constexpr int kEllipsisBase = 1000;  // label ids of ellipsis dims: kEllipsisBase + position from the left

struct Einsum {
  std::vector<std::vector<int>> terms;  // per operand: label per dim (ellipsis expanded)
  std::vector<int> out;                 // output labels
  std::map<int, int64_t> size;          // label -> extent
};

int LabelId(char ch) { return ch >= 'a' && ch <= 'z' ? ch - 'a' : (ch >= 'A' && ch <= 'Z' ? 26 + ch - 'A' : -1); }

// Splits a term into letters with "..." marked as -2; false on bad characters.
bool ParseTerm(const std::string &t, std::vector<int> *labels, std::string *reason) {
  labels->clear();
  bool ell = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "...") == 0) {
      if (ell) {
        *reason = "equation term '" + t + "' has two ellipses";
        return false;
      }
      ell = true;
      labels->push_back(-2);
      i += 2;
      continue;
    }
    const int id = LabelId(t[i]);
    if (id < 0) {
      *reason = "equation term '" + t + "' has the invalid character '" + std::string(1, t[i]) + "'";
      return false;
    }
    labels->push_back(id);
  }
  return true;
}

bool Compile(const Node &n, const std::vector<const TensorDesc *> &in, Einsum *e, std::string *reason) {
  const Attribute *a = n.FindAttr("equation");
  if (!a || a->type != kAttrString) {
    *reason = "attribute 'equation' (string) is required";
    return false;
  }
  std::string eq;
  for (char ch : a->s)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  for (size_t i = 0; i <= lhs.size(); ++i)
    if (i == lhs.size() || lhs[i] == ',') terms.push_back(lhs.substr(start, i - start)), start = i + 1;
  if (terms.size() != in.size()) {
    *reason = "equation '" + a->s + "' has " + std::to_string(terms.size()) + " operands, the node " +
              std::to_string(in.size()) + " inputs";
    return false;
  }
  int64_t ell_rank = 0;
  std::vector<std::vector<int>> raw(terms.size());
  for (size_t k = 0; k < terms.size(); ++k) {
    if (!ParseTerm(terms[k], &raw[k], reason)) return false;
    const bool ell = std::count(raw[k].begin(), raw[k].end(), -2) > 0;
    const int64_t letters = static_cast<int64_t>(raw[k].size()) - (ell ? 1 : 0);
    const int64_t rank = static_cast<int64_t>(in[k]->dims.size());
    if (ell ? rank < letters : rank != letters) {
      *reason = "operand " + std::to_string(k) + " has rank " + std::to_string(rank) + " but term '" + terms[k] +
                "' needs " + std::to_string(letters) + (ell ? " or more" : "");
      return false;
    }
    if (ell) ell_rank = std::max(ell_rank, rank - letters);
  }
  e->terms.assign(terms.size(), {});
  e->size.clear();
  std::map<int, int> count;
  for (size_t k = 0; k < terms.size(); ++k) {
    const auto &dims = in[k]->dims;
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t letters = static_cast<int64_t>(raw[k].size()) - (std::count(raw[k].begin(), raw[k].end(), -2) ? 1 : 0);
    size_t d = 0;
    for (int lab : raw[k]) {
      if (lab == -2) {
        const int64_t m = rank - letters;
        for (int64_t j = 0; j < m; ++j) e->terms[k].push_back(kEllipsisBase + static_cast<int>(ell_rank - m + j)), ++d;
      } else {
        e->terms[k].push_back(lab), ++d;
      }
    }
    for (size_t j = 0; j < e->terms[k].size(); ++j) {
      const int lab = e->terms[k][j];
      const int64_t ext = dims[j];
      auto it = e->size.find(lab);
      if (it == e->size.end() || it->second == 1) {
        e->size[lab] = ext;
      } else if (ext != 1 && ext != it->second && ext >= 0 && it->second >= 0) {
        *reason = "label dims disagree: " + std::to_string(it->second) + " vs " + std::to_string(ext);
        return false;
      }
    }
    std::vector<int> uniq = e->terms[k];
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (int lab : uniq) ++count[lab];
  }
  e->out.clear();
  if (arrow == std::string::npos) {
    for (int64_t j = 0; j < ell_rank; ++j) e->out.push_back(kEllipsisBase + static_cast<int>(j));
    for (const auto &kv : count)  // letters seen once, alphabetically (uppercase sorts before lowercase in ASCII)
      if (kv.first < kEllipsisBase && kv.second == 1) e->out.push_back(kv.first);
    std::stable_sort(e->out.begin() + ell_rank, e->out.end(), [](int x, int y) {
      auto ascii = [](int v) { return v < 26 ? 'a' + v : 'A' + (v - 26); };
      return ascii(x) < ascii(y);
    });
    // Repeated letters within one operand only still count once per operand; a letter repeated in a single term
    // (a diagonal, "ii") is summed in implicit mode, as numpy does.
    std::vector<int> keep;
    for (int lab : e->out) {
      int occurrences = 0;
      for (const auto &t : e->terms) occurrences += static_cast<int>(std::count(t.begin(), t.end(), lab));
      if (lab >= kEllipsisBase || occurrences == 1) keep.push_back(lab);
    }
    e->out = keep;
  } else {
    std::vector<int> o;
    if (!ParseTerm(eq.substr(arrow + 2), &o, reason)) return false;
    for (int lab : o) {
      if (lab == -2) {
        for (int64_t j = 0; j < ell_rank; ++j) e->out.push_back(kEllipsisBase + static_cast<int>(j));
        continue;
      }
      if (!e->size.count(lab) || std::count(e->out.begin(), e->out.end(), lab)) {
        *reason = "output label in '" + a->s + "' is unknown or repeated";
        return false;
      }
      e->out.push_back(lab);
    }
  }
  return true;
}

bool InferEinsum(InferCtx *c, std::string *reason) {
  const ElemType t = c->in[0]->dtype;
  for (const TensorDesc *d : c->in)
    if (d->dtype != t || !IsNumericType(t)) {
      *reason = "operands must share one numeric dtype, got " + DescStr(*d);
      return false;
    }
  Einsum e;
  if (!Compile(*c->node, c->in, &e, reason)) return false;
  c->out[0].dtype = t;
  c->out[0].dims.clear();
  for (int lab : e.out) c->out[0].dims.push_back(e.size[lab]);
  return true;
}

template <class S>
class EinsumKernel : public Kernel {
 public:
  using Acc = typename std::conditional<kIsFloat<S>, double, int64_t>::type;
  EinsumKernel(std::vector<int64_t> out_ext, std::vector<int64_t> sum_ext, std::vector<std::vector<int64_t>> out_str,
               std::vector<std::vector<int64_t>> sum_str)
      : out_ext_(std::move(out_ext)), sum_ext_(std::move(sum_ext)), out_str_(std::move(out_str)),
        sum_str_(std::move(sum_str)), nops_(out_str_.size()), opos_(out_ext_.size()), spos_(sum_ext_.size()),
        base_(nops_), off_(nops_) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    int64_t total = 1, inner = 1;
    for (int64_t v : out_ext_) total *= v;
    for (int64_t v : sum_ext_) inner *= v;
    S *y = static_cast<S *>(out[0]);
    std::vector<int64_t> &opos = opos_, &spos = spos_, &base = base_, &off = off_;
    std::fill(opos.begin(), opos.end(), 0);
    std::fill(base.begin(), base.end(), 0);
    for (int64_t o = 0; o < total; ++o) {
      Acc acc = 0;
      std::fill(spos.begin(), spos.end(), 0);
      off = base;
      for (int64_t s = 0; s < inner; ++s) {
        Acc p = 1;
        for (size_t k = 0; k < nops_; ++k) p *= static_cast<Acc>(Num<S>::Load(static_cast<const S *>(in[k])[off[k]]));
        acc += p;
        for (size_t d = sum_ext_.size(); d-- > 0;) {  // advance the contraction odometer
          for (size_t k = 0; k < nops_; ++k) off[k] += sum_str_[k][d];
          if (++spos[d] < sum_ext_[d]) break;
          for (size_t k = 0; k < nops_; ++k) off[k] -= sum_str_[k][d] * sum_ext_[d];
          spos[d] = 0;
        }
      }
      y[o] = Num<S>::Store(static_cast<typename Num<S>::C>(acc));
      for (size_t d = out_ext_.size(); d-- > 0;) {
        for (size_t k = 0; k < nops_; ++k) base[k] += out_str_[k][d];
        if (++opos[d] < out_ext_[d]) break;
        for (size_t k = 0; k < nops_; ++k) base[k] -= out_str_[k][d] * out_ext_[d];
        opos[d] = 0;
      }
    }
    return true;
  }

 private:
  std::vector<int64_t> out_ext_, sum_ext_;
  std::vector<std::vector<int64_t>> out_str_, sum_str_;  // [operand][label]
  size_t nops_;
  std::vector<int64_t> opos_, spos_, base_, off_;  // odometers and operand offsets, reused by every Run
};

// dst[i] = src[i] over a dims-long index space, each side with its own element strides (the last dim innermost).
template <class T>
void StridedCopy(const T *src, const std::vector<int64_t> &src_str, T *dst, const std::vector<int64_t> &dst_str,
                 const std::vector<int64_t> &ext) {
  const size_t r = ext.size();
  if (r == 0) {
    *dst = *src;
    return;
  }
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < r; ++d) outer *= ext[d];
  const int64_t n = ext[r - 1], ss = src_str[r - 1], ds = dst_str[r - 1];
  std::vector<int64_t> pos(r, 0);
  int64_t so = 0, doff = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) dst[doff + j * ds] = src[so + j * ss];
    for (size_t d = r - 1; d-- > 0;) {  // advance the outer odometer
      so += src_str[d], doff += dst_str[d];
      if (++pos[d] < ext[d]) break;
      so -= src_str[d] * ext[d], doff -= dst_str[d] * ext[d];
      pos[d] = 0;
    }
  }
}

// A two-operand Einsum as C[batch, M, N] = A[batch, M, K] B[batch, K, N]: labels in A, B and the output are batch
// dims, in one operand and the output M or N dims, in both operands only K dims.
struct EinsumGemmPlan {
  struct View {  // how an operand (or the output) relates to its [batch, rows, cols] matrix
    bool in_place = true, trans = false;
    std::vector<int64_t> ext, str;  // when copied: canonical extents and the tensor's strides for them
  };
  int64_t batch = 1, M = 1, N = 1, K = 1;
  View a, b, c;
};

// The plan, or false when the equation is not a plain matrix product: not two operands, a repeated label
// (diagonal), a broadcast (size-1) dim, a label summed within one operand, or an empty dim.
bool PlanEinsumGemm(const Einsum &e, const std::vector<const TensorDesc *> &in, EinsumGemmPlan *p) {
  if (e.terms.size() != 2) return false;
  const auto &ta = e.terms[0], &tb = e.terms[1];
  auto has = [](const std::vector<int> &t, int lab) { return std::count(t.begin(), t.end(), lab) > 0; };
  for (size_t k = 0; k < 2; ++k)
    for (size_t j = 0; j < e.terms[k].size(); ++j) {
      const int lab = e.terms[k][j];
      if (std::count(e.terms[k].begin(), e.terms[k].end(), lab) != 1) return false;
      if (in[k]->dims[j] != e.size.at(lab) || in[k]->dims[j] <= 0) return false;
    }
  std::vector<int> bat, m, n, kk;
  for (int lab : e.out) {
    if (has(ta, lab) && has(tb, lab)) bat.push_back(lab);
    else if (has(ta, lab)) m.push_back(lab);
    else n.push_back(lab);
  }
  for (int lab : ta)
    if (!has(e.out, lab)) {
      if (!has(tb, lab)) return false;
      kk.push_back(lab);
    }
  for (int lab : tb)
    if (!has(e.out, lab) && !has(ta, lab)) return false;
  auto extent = [&](const std::vector<int> &labs) {
    int64_t v = 1;
    for (int lab : labs) v *= e.size.at(lab);
    return v;
  };
  p->batch = extent(bat), p->M = extent(m), p->N = extent(n), p->K = extent(kk);
  auto cat = [](std::vector<int> x, const std::vector<int> &y, const std::vector<int> &z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  // An operand is read in place when its labels are already [batch, rows, cols] (or, allow_trans, [batch, cols,
  // rows]); otherwise it is copied into that order, with the tensor's strides for each canonical dim.
  auto view = [&](const std::vector<int> &term, const std::vector<int> &rows, const std::vector<int> &cols,
                  bool allow_trans, EinsumGemmPlan::View *v) {
    const std::vector<int> canon = cat(bat, rows, cols);
    if (term == canon) return;
    if (allow_trans && term == cat(bat, cols, rows)) {
      v->trans = true;
      return;
    }
    v->in_place = false;
    std::vector<int64_t> full;
    for (int lab : term) full.push_back(e.size.at(lab));
    const std::vector<int64_t> st = Strides(full);
    for (int lab : canon) {
      v->ext.push_back(e.size.at(lab));
      v->str.push_back(st[std::find(term.begin(), term.end(), lab) - term.begin()]);
    }
  };
  view(ta, m, kk, true, &p->a);
  view(tb, kk, n, true, &p->b);
  view(e.out, m, n, false, &p->c);  // C is written [batch, M, N]
  return true;
}

template <class T>
class EinsumGemmKernel : public Kernel {
 public:
  explicit EinsumGemmKernel(EinsumGemmPlan p) : p_(std::move(p)) {}
  size_t scratch_bytes() const override {
    return sizeof(T) * static_cast<size_t>(Copied(p_.a) + Copied(p_.b) + Copied(p_.c)) + 3 * 64;
  }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    T *scratch = static_cast<T *>(scratch_);
    const T *A = Operand(static_cast<const T *>(in[0]), p_.a, &scratch);
    const T *B = Operand(static_cast<const T *>(in[1]), p_.b, &scratch);
    T *y = static_cast<T *>(out[0]);
    T *C = p_.c.in_place ? y : scratch;
    const int64_t lda = p_.a.trans ? p_.M : p_.K, ldb = p_.b.trans ? p_.K : p_.N;
    for (int64_t i = 0; i < p_.batch; ++i)
      Gemm<T>(p_.a.trans, p_.b.trans, p_.M, p_.N, p_.K, T(1), A + i * p_.M * p_.K, lda, B + i * p_.K * p_.N, ldb,
              T(0), C + i * p_.M * p_.N, p_.N);
    if (!p_.c.in_place) StridedCopy(C, Strides(p_.c.ext), y, p_.c.str, p_.c.ext);
    return true;
  }

 private:
  // Elements of scratch a copied operand takes (a multiple of 64 bytes).
  static int64_t Copied(const EinsumGemmPlan::View &v) {
    if (v.in_place) return 0;
    int64_t n = 1;
    for (int64_t x : v.ext) n *= x;
    return (n * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64 / static_cast<int64_t>(sizeof(T));
  }
  // The operand itself, or its copy in [batch, rows, cols] order at *scratch (advanced past it).
  static const T *Operand(const T *x, const EinsumGemmPlan::View &v, T **scratch) {
    if (v.in_place) return x;
    T *dst = *scratch;
    StridedCopy(x, v.str, dst, Strides(v.ext), v.ext);
    *scratch += Copied(v);
    return dst;
  }
  EinsumGemmPlan p_;
};

std::unique_ptr<Kernel> PrepareEinsum(const KernelCtx &kc, std::string *reason) {
  Einsum e;
  if (!Compile(*kc.node, kc.in, &e, reason)) return nullptr;
  std::vector<int> sum_labels;
  for (const auto &kv : e.size)
    if (!std::count(e.out.begin(), e.out.end(), kv.first)) sum_labels.push_back(kv.first);
  const size_t nops = kc.in.size();
  // Stride of each label in each operand: summed over the dims it labels (diagonals), 0 where broadcast/absent.
  auto label_strides = [&](const std::vector<int> &labels) {
    std::vector<std::vector<int64_t>> st(nops, std::vector<int64_t>(labels.size(), 0));
    for (size_t k = 0; k < nops; ++k) {
      const std::vector<int64_t> s = Strides(kc.in[k]->dims);
      for (size_t j = 0; j < e.terms[k].size(); ++j) {
        if (kc.in[k]->dims[j] == 1) continue;
        for (size_t l = 0; l < labels.size(); ++l)
          if (labels[l] == e.terms[k][j]) st[k][l] += s[j];
      }
    }
    return st;
  };
  EinsumGemmPlan plan;
  if (PlanEinsumGemm(e, kc.in, &plan)) {
    if (kc.out[0].dtype == ElemType::kFloat) return std::make_unique<EinsumGemmKernel<float>>(plan);
    if (kc.out[0].dtype == ElemType::kDouble) return std::make_unique<EinsumGemmKernel<double>>(plan);
  }
  std::vector<int64_t> out_ext, sum_ext;
  for (int lab : e.out) out_ext.push_back(e.size[lab]);
  for (int lab : sum_labels) sum_ext.push_back(e.size[lab]);
  std::unique_ptr<Kernel> k;
  VisitType(kc.out[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same<S, Bool>::value)
      k = std::make_unique<EinsumKernel<S>>(out_ext, sum_ext, label_strides(e.out), label_strides(sum_labels));
  });
  if (!k) *reason = DtypeNotSupported(kc.out[0].dtype);
  return k;
}

}  // namespace

void RegisterEinsumOps(std::vector<OpDef> *ops) {
  ops->push_back({"Einsum", 1, 64, 1, 1, nullptr, InferEinsum, PrepareEinsum, true, false, /*variadic=*/true});
}

}  // namespace onnx
}  // namespace twin
