// TfIdfVectorizer over integer tokens (pool_int64s; string pools are refused: the twin holds numeric tensors only):
// counts the pool's n-grams in each row, with skips between their items, and weights the counts (TF, IDF, TFIDF).
#include <algorithm>
#include <map>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

struct TfIdfModel {
  int mode = 0;  // 0 TF, 1 IDF, 2 TFIDF
  int64_t min_n = 1, max_n = 1, max_skip = 0, out_size = 0;
  std::vector<int64_t> indexes;  // n-gram id - 1 -> output column
  std::vector<float> weights;
  // Every n-gram of a counted size and every prefix of one -> its id (1-based), or 0 for a prefix that is no n-gram.
  std::map<std::vector<int64_t>, int64_t> grams;
};

bool FloatsAttr(const Node &n, const char *name, std::vector<float> *v, std::string *reason) {
  const Attribute *a = n.FindAttr(name);
  v->clear();
  if (!a) return true;
  if (a->type != kAttrFloats) {
    *reason = std::string("attribute '") + name + "' must be floats";
    return false;
  }
  *v = a->floats;
  return true;
}

bool BuildTfIdf(const Node &n, TfIdfModel *m, std::string *reason) {
  const Attribute *mode = n.FindAttr("mode");
  const std::string ms = mode && mode->type == kAttrString ? mode->s : "";
  m->mode = ms == "TF" ? 0 : ms == "IDF" ? 1 : ms == "TFIDF" ? 2 : -1;
  if (m->mode < 0) {
    *reason = "attribute 'mode' must be 'TF', 'IDF' or 'TFIDF', got '" + ms + "'";
    return false;
  }
  if (n.FindAttr("pool_strings")) {
    *reason = "attribute 'pool_strings' is not supported: the twin holds numeric tensors only (use pool_int64s)";
    return false;
  }
  std::vector<int64_t> pool, counts;
  bool has_pool, has_counts, has_indexes;
  if (!AttrInt(n, "min_gram_length", 0, &m->min_n, reason) || !AttrInt(n, "max_gram_length", 0, &m->max_n, reason) ||
      !AttrInt(n, "max_skip_count", 0, &m->max_skip, reason) || !AttrInts(n, "pool_int64s", &pool, &has_pool, reason) ||
      !AttrInts(n, "ngram_counts", &counts, &has_counts, reason) ||
      !AttrInts(n, "ngram_indexes", &m->indexes, &has_indexes, reason) ||
      !FloatsAttr(n, "weights", &m->weights, reason))
    return false;
  if (!has_pool || !has_counts || !has_indexes || m->min_n < 1 || m->max_n < m->min_n || m->max_skip < 0) {
    *reason = "attributes pool_int64s, ngram_counts and ngram_indexes are required, with 1 <= min_gram_length <= "
              "max_gram_length and max_skip_count >= 0";
    return false;
  }
  int64_t id = 1;
  for (size_t level = 0; level < counts.size(); ++level) {
    const int64_t size = static_cast<int64_t>(level) + 1, begin = counts[level];
    const int64_t end = level + 1 < counts.size() ? counts[level + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size())) {
      *reason = "attribute 'ngram_counts' holds offsets outside pool_int64s or out of order";
      return false;
    }
    for (int64_t g = begin; g + size <= end; g += size, ++id) {
      if (size < m->min_n || size > m->max_n) continue;
      std::vector<int64_t> key;
      for (int64_t k = 0; k < size; ++k) {
        key.push_back(pool[g + k]);
        m->grams.emplace(key, 0);  // a prefix (kept if it is also an n-gram of its own)
      }
      m->grams[key] = id;
    }
  }
  for (int64_t i : m->indexes) m->out_size = std::max(m->out_size, i + 1);
  bool ok = static_cast<int64_t>(m->indexes.size()) >= id - 1 &&
            (m->weights.empty() || static_cast<int64_t>(m->weights.size()) >= m->out_size);
  for (int64_t i : m->indexes) ok &= i >= 0;
  if (!ok) {
    *reason = "attribute 'ngram_indexes' needs a non-negative column for each of the " + std::to_string(id - 1) +
              " n-grams, and 'weights' (when given) one weight per output column";
    return false;
  }
  return true;
}

bool CheckTfIdf(const Node &n, int64_t, std::string *reason) {
  TfIdfModel m;
  return BuildTfIdf(n, &m, reason);
}

bool InferTfIdf(InferCtx *c, std::string *reason) {
  TfIdfModel m;
  if (!BuildTfIdf(*c->node, &m, reason)) return false;
  const TensorDesc &x = *c->in[0];
  if ((x.dtype != ElemType::kInt32 && x.dtype != ElemType::kInt64) || x.dims.empty() || x.dims.size() > 2) {
    *reason = "input must be an int32/int64 tensor [C] or [N, C], got " + DescStr(x);
    return false;
  }
  c->out[0] = {ElemType::kFloat, x.dims.size() == 1 ? std::vector<int64_t>{m.out_size}
                                                    : std::vector<int64_t>{x.dims[0], m.out_size}};
  return true;
}

class TfIdfKernel : public Kernel {
 public:
  TfIdfKernel(TfIdfModel m, const TensorDesc &x)
      : m_(std::move(m)), wide_(x.dtype == ElemType::kInt64), rows_(x.dims.size() == 2 ? x.dims[0] : 1),
        cols_(x.dims.back()), counts_(static_cast<size_t>(m_.out_size)) {}
  bool Run(const void *const *in, void *const *out, std::string *) override {
    float *y = static_cast<float *>(out[0]);
    for (int64_t r = 0; r < rows_; ++r) {
      std::fill(counts_.begin(), counts_.end(), 0);
      CountRow(in[0], r * cols_);
      for (int64_t i = 0; i < m_.out_size; ++i) {
        const float f = static_cast<float>(counts_[i]), w = m_.weights.empty() ? 1.f : m_.weights[i];
        y[r * m_.out_size + i] = m_.mode == 0 ? f : m_.mode == 1 ? (counts_[i] > 0 ? w : 0.f) : w * f;
      }
    }
    return true;
  }

 private:
  int64_t Token(const void *x, int64_t i) const {
    return wide_ ? static_cast<const int64_t *>(x)[i] : static_cast<const int32_t *>(x)[i];
  }

  // Unigrams are counted once (skip distance 1); longer n-grams at every skip distance up to max_skip_count + 1.
  void CountRow(const void *x, int64_t base) {
    // Distances and lengths past the row's fit no n-gram: bounded there, the loops end (a max_skip_count of 2^62
    // never did) and their arithmetic cannot overflow.
    const int64_t max_d = std::min<int64_t>(m_.max_skip, cols_) + 1;
    int64_t first_n = std::min<int64_t>(m_.min_n, cols_ + 1);
    for (int64_t d = 1; d <= max_d && first_n <= m_.max_n; ++d) {
      for (int64_t s = 0; s + d * (first_n - 1) < cols_; ++s) {
        key_.clear();
        for (int64_t k = 0, i = s; k < m_.max_n && i < cols_; ++k, i += d) {
          key_.push_back(Token(x, base + i));
          const auto it = m_.grams.find(key_);
          if (it == m_.grams.end()) break;
          if (k + 1 >= first_n && it->second) ++counts_[m_.indexes[it->second - 1]];
        }
      }
      if (first_n == 1) ++first_n;
    }
  }

  TfIdfModel m_;
  bool wide_;
  int64_t rows_, cols_;
  std::vector<int64_t> counts_, key_;
};

std::unique_ptr<Kernel> PrepareTfIdf(const KernelCtx &c, std::string *reason) {
  TfIdfModel m;
  if (!BuildTfIdf(*c.node, &m, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new TfIdfKernel(std::move(m), *c.in[0]));
}

}  // namespace

void RegisterTfIdfOps(std::vector<OpDef> *ops) {
  ops->push_back({"TfIdfVectorizer", 1, 1, 1, 1, CheckTfIdf, InferTfIdf, PrepareTfIdf, true});
}

}  // namespace onnx
}  // namespace twin
