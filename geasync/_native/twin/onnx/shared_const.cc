// The process-wide table behind SharedDerived (see shared_const.h for why sharing by address is sound).
#include "shared_const.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace twin {
namespace onnx {
namespace {

struct Key {
  const void *source;
  std::string tag;
  std::vector<int64_t> params;
  bool operator<(const Key &o) const {
    return std::tie(source, tag, params) < std::tie(o.source, o.tag, o.params);
  }
};

struct Table {
  std::mutex mu;
  std::map<Key, std::weak_ptr<const void>> entries;
  size_t sweep_at = 64;  // drop dead entries when the table doubles, so it stays proportional to the live ones
};

Table &table() {
  static Table *t = new Table();  // never destroyed: kernels may be freed during static destruction
  return *t;
}

}  // namespace

std::shared_ptr<const void> SharedDerivedRaw(const void *source, const char *tag, std::initializer_list<int64_t> params,
                                             const std::function<std::shared_ptr<const void>()> &build) {
  Table &t = table();
  Key key{source, tag, std::vector<int64_t>(params)};
  {
    std::lock_guard<std::mutex> lk(t.mu);
    auto it = t.entries.find(key);
    if (it != t.entries.end())
      if (std::shared_ptr<const void> live = it->second.lock()) return live;
  }
  // Built outside the lock (packing a large weight takes milliseconds); two plans building the same entry at
  // once both build it, and the second keeps the first's.
  std::shared_ptr<const void> made = build();
  if (!made) return nullptr;  // the build failed: nothing to share
  std::lock_guard<std::mutex> lk(t.mu);
  std::weak_ptr<const void> &slot = t.entries[key];
  if (std::shared_ptr<const void> live = slot.lock()) return live;
  slot = made;
  if (t.entries.size() >= t.sweep_at) {
    for (auto it = t.entries.begin(); it != t.entries.end();) it = it->second.expired() ? t.entries.erase(it) : ++it;
    t.sweep_at = std::max<size_t>(64, 2 * t.entries.size());
  }
  return made;
}

}  // namespace onnx
}  // namespace twin
