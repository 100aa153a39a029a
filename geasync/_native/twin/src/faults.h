// Twin-only deterministic fault injection (geasync_twin_fault_* in twin/twin_control.h): lets users' test suites
// make chosen runs of a graph fail, slow down, hang or lose their callback, or fail to allocate outputs.
#pragma once

#include <cstdint>

namespace twin {

// What to do with one run. Runs are counted per (session, graph) from the moment a fault is added.
struct FaultDecision {
  bool fail = false;        // fail the run with `status`
  uint32_t status = 0;
  int64_t delay_ms = 0;     // sleep this long before executing
  bool stall = false;       // hold the completion (callback / stream task) until released
  bool drop = false;        // complete without a callback (RunGraphAsync) / without executing (stream)
  bool fail_alloc = false;  // the run's output allocation fails
};

// Called once per run; cheap when no fault is armed anywhere.
FaultDecision NextRun(uint64_t session_id, uint32_t graph_id);
// True if the compile stage must hold this graph's jobs (GEASYNC_TWIN_FAULT_STALL_COMPILE armed, not released).
bool CompileStalled(uint64_t session_id, uint32_t graph_id);
// True (and *status set) if the pre-run stage must fail this graph's jobs (GEASYNC_TWIN_FAULT_FAIL_PRERUN armed).
bool PreRunFails(uint64_t session_id, uint32_t graph_id, uint32_t *status);
// Blocks the calling (runtime) thread while the graph's stalled runs are held.
void WaitWhileStalled(uint64_t session_id, uint32_t graph_id);
// Session teardown: forget the session's faults and release its stalled runs.
void ForgetSession(uint64_t session_id);

}  // namespace twin
