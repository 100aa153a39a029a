// Twin of GE's graph/ascend_string.h: the ABI-stable string type of GE's options and messages.
#ifndef GEASYNC_TWIN_GRAPH_ASCEND_STRING_H_
#define GEASYNC_TWIN_GRAPH_ASCEND_STRING_H_

#include <cstddef>
#include <memory>
#include <string>

namespace ge {
class AscendString {
 public:
  AscendString() = default;
  AscendString(const char *name) : name_(std::make_shared<std::string>(name == nullptr ? "" : name)) {}  // NOLINT
  AscendString(const char *name, size_t length)
      : name_(std::make_shared<std::string>(name == nullptr ? std::string() : std::string(name, length))) {}
  const char *GetString() const { return name_ ? name_->c_str() : ""; }
  size_t GetLength() const { return name_ ? name_->size() : 0U; }
  bool operator<(const AscendString &d) const { return std::string(GetString()) < d.GetString(); }
  bool operator==(const AscendString &d) const { return std::string(GetString()) == d.GetString(); }
  bool operator!=(const AscendString &d) const { return !(*this == d); }

 private:
  std::shared_ptr<std::string> name_;
};
}  // namespace ge

#endif  // GEASYNC_TWIN_GRAPH_ASCEND_STRING_H_
