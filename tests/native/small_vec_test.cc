// Differential test of the twin's SmallVec (geasync/_native/twin/onnx/small_vec.h) against std::vector: random
// sequences of every operation, on both sides of the inline capacity, with copies, moves, self-assignment and
// ranges taken from the vector itself. Built with AddressSanitizer and UBSan by tests/test_small_vec.py.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#include "small_vec.h"

using twin::onnx::SmallVec;

namespace {

int failures = 0;

template <class V, class T>
bool Same(const V &v, const std::vector<T> &ref) {
  if (v.size() != ref.size() || v.empty() != ref.empty()) return false;
  for (size_t i = 0; i < ref.size(); ++i)
    if (v[i] != ref[i]) return false;
  if (!(v == ref) || v != ref) return false;
  const std::vector<T> back = v;  // the implicit conversion
  return back == ref;
}

template <class T, size_t N>
void Run(unsigned seed, int steps) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : size_t{0}; };
  auto value = [&]() { return static_cast<T>(static_cast<int>(rng() % 1000) - 500); };
  SmallVec<T, N> v;
  std::vector<T> ref;
  for (int step = 0; step < steps; ++step) {
    const int op = static_cast<int>(rng() % 17);
    switch (op) {
      case 0: {
        const T x = value();
        v.push_back(x);
        ref.push_back(x);
        break;
      }
      case 1:
        if (!ref.empty()) {
          v.pop_back();
          ref.pop_back();
        }
        break;
      case 2: {
        const size_t n = pick(3 * N);
        const T x = value();
        v.resize(n, x);
        ref.resize(n, x);
        break;
      }
      case 3: {
        const size_t at = pick(ref.size() + 1), n = pick(N + 2);
        const T x = value();
        v.insert(v.begin() + at, n, x);
        ref.insert(ref.begin() + static_cast<std::ptrdiff_t>(at), n, x);
        break;
      }
      case 4:
        if (!ref.empty()) {  // a range of itself, inserted into itself
          const size_t lo = pick(ref.size()), hi = lo + pick(ref.size() - lo + 1), at = pick(ref.size() + 1);
          const std::vector<T> items(ref.begin() + static_cast<std::ptrdiff_t>(lo),
                                     ref.begin() + static_cast<std::ptrdiff_t>(hi));
          v.insert(v.begin() + at, v.begin() + lo, v.begin() + hi);
          ref.insert(ref.begin() + static_cast<std::ptrdiff_t>(at), items.begin(), items.end());
        }
        break;
      case 5:
        if (!ref.empty()) {
          const size_t lo = pick(ref.size()), hi = lo + pick(ref.size() - lo + 1);
          v.erase(v.begin() + lo, v.begin() + hi);
          ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(lo), ref.begin() + static_cast<std::ptrdiff_t>(hi));
        }
        break;
      case 6: {
        SmallVec<T, N> copy(v);
        v = copy;
        break;
      }
      case 7: {
        SmallVec<T, N> moved(std::move(v));
        v = std::move(moved);
        break;
      }
      case 8: {
        SmallVec<T, N> &self = v;
        v = self;  // self-assignment
        break;
      }
      case 9:
        if (!ref.empty()) {  // assign from a range of itself
          const size_t lo = pick(ref.size());
          v.assign(v.begin() + lo, v.end());
          ref.assign(ref.begin() + static_cast<std::ptrdiff_t>(lo), ref.end());
        }
        break;
      case 10: {
        std::vector<T> src(pick(3 * N));
        for (T &x : src) x = value();
        v = src;
        ref = src;
        break;
      }
      case 11: {
        SmallVec<T, N> other;
        std::vector<T> other_ref;
        for (size_t i = pick(3 * N); i-- > 0;) {
          const T x = value();
          other.push_back(x);
          other_ref.push_back(x);
        }
        v.swap(other);
        ref.swap(other_ref);
        if (!Same(other, other_ref)) ++failures;
        break;
      }
      case 12:
        v.clear();
        ref.clear();
        break;
      case 13: {
        const size_t n = pick(3 * N);
        v.reserve(n);
        if (v.capacity() < n) ++failures;
        break;
      }
      case 14: {
        const size_t at = pick(ref.size() + 1);
        const T x = value();
        v.insert(v.begin() + at, x);
        ref.insert(ref.begin() + static_cast<std::ptrdiff_t>(at), x);
        break;
      }
      case 15: {
        SmallVec<T, N> from(ref.begin(), ref.end());
        if (!Same(from, ref)) ++failures;
        SmallVec<T, N> moved(std::move(from));
        if (!Same(moved, ref) || !from.empty()) ++failures;
        from.push_back(value());  // a moved-from vector is usable
        break;
      }
      default:
        if (!ref.empty()) {
          const size_t i = pick(ref.size());
          v[i] = ref[i] = value();
          if (v.front() != ref.front() || v.back() != ref.back()) ++failures;
        }
        break;
    }
    if (!Same(v, ref)) {
      std::fprintf(stderr, "mismatch: seed %u step %d op %d (size %zu vs %zu)\n", seed, step, op, v.size(),
                   ref.size());
      ++failures;
      return;
    }
  }
}

}  // namespace

int main() {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    Run<int64_t, 6>(seed, 400);
    Run<int, 4>(seed, 400);
    Run<int, 1>(seed, 200);
  }
  // pointers, as plans keep them
  SmallVec<const void *, 4> p(3);
  if (p.size() != 3 || p[0] != nullptr) ++failures;
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
