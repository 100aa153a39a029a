// Per-session memory limits: a session option of geasync (geasync.max_memory_bytes), set through a twin control
// because GE has no such option; read when a graph of the session is compiled.
#include "memory_limits.h"

#include <mutex>
#include <unordered_map>

#include "twin/twin_control.h"

namespace twin {
namespace {

std::mutex &LimitsMutex() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<uint64_t, uint64_t> &Limits() {
  static auto *limits = new std::unordered_map<uint64_t, uint64_t>();  // never destroyed: used at exit
  return *limits;
}

}  // namespace

uint64_t SessionMemoryLimit(uint64_t session_id) {
  std::lock_guard<std::mutex> lk(LimitsMutex());
  auto it = Limits().find(session_id);
  return it == Limits().end() ? 0 : it->second;
}

void ForgetMemoryLimit(uint64_t session_id) {
  std::lock_guard<std::mutex> lk(LimitsMutex());
  Limits().erase(session_id);
}

}  // namespace twin

extern "C" void geasync_twin_set_memory_limit(uint64_t session_id, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(twin::LimitsMutex());
  if (bytes == 0)
    twin::Limits().erase(session_id);
  else
    twin::Limits()[session_id] = bytes;
}
