// Twin-only fault injection: a process-wide registry of armed faults per (session id, graph id), consulted once per
// run by the GE twin, and the twin-only C entry points that arm, release and clear them.
#include "faults.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "twin/twin_control.h"

namespace twin {
namespace {
struct Fault {
  int kind;
  uint64_t target_run;  // the graph's run count at which it fires (runs at arming + nth); 0 = every run
  uint32_t status;
  int64_t delay_ms;
  bool fired = false;
};

struct GraphFaults {
  std::vector<Fault> faults;
  uint64_t runs = 0;    // runs counted since the first fault was armed (each fault's nth counts from its own arming)
  bool released = false;  // stalled runs may proceed
};

struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<uint64_t, uint32_t>, GraphFaults> graphs;
  std::atomic<int> armed{0};  // number of (session, graph) entries: the fast path skips the lock when zero
};

Registry &Reg() {
  static Registry *r = new Registry();  // leaked: runtime threads may consult it during exit
  return *r;
}
}  // namespace

FaultDecision NextRun(uint64_t session_id, uint32_t graph_id) {
  FaultDecision d;
  Registry &r = Reg();
  if (r.armed.load(std::memory_order_acquire) == 0) return d;
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.graphs.find({session_id, graph_id});
  if (it == r.graphs.end()) return d;
  const uint64_t run = ++it->second.runs;
  for (Fault &f : it->second.faults) {
    if (f.target_run != 0 && f.target_run != run) continue;
    f.fired = true;
    switch (f.kind) {
      case GEASYNC_TWIN_FAULT_FAIL_RUN:
        d.fail = true;
        d.status = f.status;
        break;
      case GEASYNC_TWIN_FAULT_DELAY_RUN:
        d.delay_ms += f.delay_ms;
        break;
      case GEASYNC_TWIN_FAULT_STALL_CALLBACK:
        d.stall = true;
        break;
      case GEASYNC_TWIN_FAULT_DROP_CALLBACK:
        d.drop = true;
        break;
      case GEASYNC_TWIN_FAULT_FAIL_ALLOC:
        d.fail_alloc = true;
        break;
      default:
        break;
    }
  }
  return d;
}

bool CompileStalled(uint64_t session_id, uint32_t graph_id) {
  Registry &r = Reg();
  if (r.armed.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.graphs.find({session_id, graph_id});
  if (it == r.graphs.end() || it->second.released) return false;
  for (const Fault &f : it->second.faults)
    if (f.kind == GEASYNC_TWIN_FAULT_STALL_COMPILE) return true;
  return false;
}

bool PreRunFails(uint64_t session_id, uint32_t graph_id, uint32_t *status) {
  Registry &r = Reg();
  if (r.armed.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.graphs.find({session_id, graph_id});
  if (it == r.graphs.end()) return false;
  for (const Fault &f : it->second.faults) {
    if (f.kind == GEASYNC_TWIN_FAULT_FAIL_PRERUN) {
      *status = f.status;
      return true;
    }
  }
  return false;
}

void WaitWhileStalled(uint64_t session_id, uint32_t graph_id) {
  Registry &r = Reg();
  std::unique_lock<std::mutex> lk(r.mu);
  r.cv.wait(lk, [&] {
    auto it = r.graphs.find({session_id, graph_id});
    return it == r.graphs.end() || it->second.released;
  });
}

void ForgetSession(uint64_t session_id) {
  Registry &r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  for (auto it = r.graphs.begin(); it != r.graphs.end();) {
    if (it->first.first == session_id) {
      it = r.graphs.erase(it);
      r.armed.fetch_sub(1);
    } else {
      ++it;
    }
  }
  r.cv.notify_all();
}

}  // namespace twin

extern "C" {

int geasync_twin_fault_add(uint64_t session_id, uint32_t graph_id, int kind, uint64_t nth, uint32_t status,
                           int64_t delay_ms) {
  if (kind < GEASYNC_TWIN_FAULT_FAIL_RUN || kind > GEASYNC_TWIN_FAULT_FAIL_PRERUN || delay_ms < 0) return -1;
  twin::Registry &r = twin::Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto key = std::make_pair(session_id, graph_id);
  auto it = r.graphs.find(key);
  if (it == r.graphs.end()) {
    it = r.graphs.emplace(key, twin::GraphFaults{}).first;
    r.armed.fetch_add(1, std::memory_order_release);
  }
  // nth counts from now: a fault armed after earlier runs targets a run still to come
  const uint64_t target_run = nth == 0 ? 0 : it->second.runs + nth;
  it->second.faults.push_back(twin::Fault{kind, target_run, status, delay_ms});
  return 0;
}

void geasync_twin_fault_release(uint64_t session_id, uint32_t graph_id) {
  twin::Registry &r = twin::Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.graphs.find({session_id, graph_id});
  if (it != r.graphs.end()) it->second.released = true;
  r.cv.notify_all();
}

void geasync_twin_fault_clear(uint64_t session_id, uint32_t graph_id) {
  twin::Registry &r = twin::Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.graphs.erase({session_id, graph_id}) != 0) r.armed.fetch_sub(1);
  r.cv.notify_all();  // a cleared graph's stalled runs proceed
}

uint64_t geasync_twin_fault_runs(uint64_t session_id, uint32_t graph_id) {
  twin::Registry &r = twin::Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.graphs.find({session_id, graph_id});
  return it == r.graphs.end() ? 0 : it->second.runs;
}

uint64_t geasync_twin_fault_unfired(uint64_t session_id, uint32_t graph_id) {
  twin::Registry &r = twin::Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.graphs.find({session_id, graph_id});
  if (it == r.graphs.end()) return 0;
  uint64_t unfired = 0;
  for (const twin::Fault &f : it->second.faults)
    if (f.target_run != 0 && !f.fired && f.kind != GEASYNC_TWIN_FAULT_STALL_COMPILE) ++unfired;
  return unfired;
}

}  // extern "C"
