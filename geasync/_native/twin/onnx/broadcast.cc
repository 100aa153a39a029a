// Numpy broadcasting rule and iteration-plan construction (see broadcast.h).
#include "broadcast.h"

#include <algorithm>

namespace twin {
namespace onnx {

bool BroadcastShapes(const Dims &a, const Dims &b, Dims *out, std::string *reason) {
  const size_t r = std::max(a.size(), b.size());
  Dims res(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    int64_t d;
    if (da == db) d = da;
    else if (da == 1) d = db;
    else if (db == 1) d = da;
    else if (da == -1) d = db;  // unknown must equal the known non-1 dim (or be 1)
    else if (db == -1) d = da;
    else {
      *reason = "shapes " + ShapeStr(a) + " and " + ShapeStr(b) + " cannot be broadcast together";
      return false;
    }
    res[i] = d;
  }
  *out = std::move(res);
  return true;
}

bool BroadcastShapes(const Dims &a, const Dims &b, std::vector<int64_t> *out, std::string *reason) {
  Dims res;
  if (!BroadcastShapes(a, b, &res, reason)) return false;
  out->assign(res.begin(), res.end());
  return true;
}

void Broadcast2::Init(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                      const std::vector<int64_t> &out) {
  const size_t r = out.size();
  total = 1;
  for (int64_t d : out) total *= d;
  // Per-operand contiguous strides, 0 where broadcast.
  auto strides = [&](const std::vector<int64_t> &s) {
    std::vector<int64_t> st(r, 0);
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      size_t off = r - s.size();
      int64_t d = i < off ? 1 : s[i - off];
      st[i] = (d == 1 && out[i] != 1) ? 0 : acc;
      acc *= d;
    }
    return st;
  };
  std::vector<int64_t> fa = strides(a), fb = strides(b);
  dims.clear();
  sa.clear();
  sb.clear();
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    if (!dims.empty() && sa.back() == fa[i] * out[i] && sb.back() == fb[i] * out[i]) {
      // Previous dim continues this one contiguously for both operands: merge.
      dims.back() *= out[i];
      sa.back() = fa[i];
      sb.back() = fb[i];
      continue;
    }
    dims.push_back(out[i]);
    sa.push_back(fa[i]);
    sb.push_back(fb[i]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    sa.push_back(0);
    sb.push_back(0);
  }
}

void BroadcastN::Init(std::initializer_list<const Dims *> ins, const Dims &out) {
  n = ins.size();
  const size_t r = out.size();
  total = 1;
  for (int64_t d : out) total *= d;
  Dims full[kMaxOperands];
  for (size_t k = 0; k < n; ++k) {
    const Dims &s = *ins.begin()[k];
    full[k].assign(r, 0);
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      const size_t off = r - s.size();
      const int64_t d = i < off ? 1 : s[i - off];
      full[k][i] = (d == 1 && out[i] != 1) ? 0 : acc;
      acc *= d;
    }
  }
  dims.clear();
  for (size_t k = 0; k < kMaxOperands; ++k) strides[k].clear();
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; merge && k < n; ++k) merge = strides[k].back() == full[k][i] * out[i];
    if (merge) {
      dims.back() *= out[i];
      for (size_t k = 0; k < n; ++k) strides[k].back() = full[k][i];
      continue;
    }
    dims.push_back(out[i]);
    for (size_t k = 0; k < n; ++k) strides[k].push_back(full[k][i]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (size_t k = 0; k < n; ++k) strides[k].push_back(0);
  }
}

void CoalesceStrided(const std::vector<int64_t> &dims, const std::vector<int64_t> &strides,
                     std::vector<int64_t> *out_dims, std::vector<int64_t> *out_strides) {
  std::vector<int64_t> &d2 = *out_dims, &s2 = *out_strides;
  d2.clear();
  s2.clear();
  bool empty = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    empty = empty || dims[i] == 0;
    if (dims[i] == 1) continue;
    if (!d2.empty() && s2.back() == strides[i] * dims[i]) {  // contiguous with the previous dim (or both 0)
      d2.back() *= dims[i];
      s2.back() = strides[i];
      continue;
    }
    d2.push_back(dims[i]);
    s2.push_back(strides[i]);
  }
  if (empty) {
    d2.assign(1, 0);
    s2.assign(1, 0);
  } else if (d2.empty()) {
    d2.assign(1, 1);
    s2.assign(1, 0);
  }
}

}  // namespace onnx
}  // namespace twin
