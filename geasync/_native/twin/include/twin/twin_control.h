/* Twin-only entry points (no CANN equivalent): live counters of the twin's native objects for leak tests, and
 * deterministic fault injection for users' test suites. Only the twin build has them; Python reports them as
 * unavailable on a CANN backend. */
#ifndef GEASYNC_TWIN_TWIN_CONTROL_H_
#define GEASYNC_TWIN_TWIN_CONTROL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct geasync_twin_counters {
  int64_t ge_sessions;
  int64_t ge_graphs;
  int64_t host_output_blocks;
  int64_t device_output_blocks;
  int64_t device_allocations;
  int64_t streams;
} geasync_twin_counters;

void geasync_twin_live_counters(geasync_twin_counters *out);

/* Fault kinds. nth counts runs of the graph from the call that arms the fault (1 = the next run); nth = 0 applies
 * the fault to every run. geasync_twin_fault_runs counts the graph's runs since its first fault was armed. */
enum {
  GEASYNC_TWIN_FAULT_FAIL_RUN = 1,       /* the run fails with `status` (callback status / return code) */
  GEASYNC_TWIN_FAULT_DELAY_RUN = 2,      /* the run starts `delay_ms` late */
  GEASYNC_TWIN_FAULT_STALL_CALLBACK = 3, /* the completion is held until geasync_twin_fault_release/clear */
  GEASYNC_TWIN_FAULT_DROP_CALLBACK = 4,  /* RunGraphAsync: no callback at all; stream mode: nothing executes */
  GEASYNC_TWIN_FAULT_FAIL_ALLOC = 5,     /* the run's output allocation fails (MEMALLOC_FAILED) */
  GEASYNC_TWIN_FAULT_STALL_COMPILE = 6,  /* RunGraphAsync's compile stage holds this graph's jobs until released
                                            (nth is ignored): fills the session's compile queue */
  GEASYNC_TWIN_FAULT_FAIL_PRERUN = 7     /* RunGraphAsync's pre-run stage fails this graph's jobs with `status`
                                            (nth is ignored): GE then stops the session's async queue */
};
/* Returns 0, or -1 for an unknown kind or a negative delay. */
int geasync_twin_fault_add(uint64_t session_id, uint32_t graph_id, int kind, uint64_t nth, uint32_t status,
                           int64_t delay_ms);
void geasync_twin_fault_release(uint64_t session_id, uint32_t graph_id);
void geasync_twin_fault_clear(uint64_t session_id, uint32_t graph_id);
uint64_t geasync_twin_fault_runs(uint64_t session_id, uint32_t graph_id);
/* One-shot faults (nth >= 1) of the graph whose run has not come yet (stall_compile, which ignores nth, excluded). */
uint64_t geasync_twin_fault_unfired(uint64_t session_id, uint32_t graph_id);

/* Checks ONNX ModelProto bytes against the twin: writes a text report (NUL-terminated, truncated to cap) of lines
 * "ir_version\tN", "opset\tN", "input|output\tNAME\tDTYPE\tD1,D2,..." (-1 = unknown dim) and one
 * "problem\tMESSAGE" per problem found (all unsupported nodes, not only the first). Returns the report's full
 * length; call again with a larger buffer when it is >= cap. */
size_t geasync_twin_check_onnx(const void *data, size_t size, char *buf, size_t cap);

/* Bytes one compiled plan of the session's graphs may hold (intermediates, folded constants, outputs of a run);
 * a plan that needs more is refused at compile (GeError naming both). 0 restores the default (physical memory). */
void geasync_twin_set_memory_limit(uint64_t session_id, uint64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* GEASYNC_TWIN_TWIN_CONTROL_H_ */
