/* Twin-only entry points (no CANN equivalent): live counters of the twin's native objects for leak tests.
 * Only the twin build has them; the shim's twin-only C ABI (geasync_twin.h) forwards to them. */
#ifndef GEASYNC_TWIN_TWIN_CONTROL_H_
#define GEASYNC_TWIN_TWIN_CONTROL_H_

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

#ifdef __cplusplus
}
#endif

#endif /* GEASYNC_TWIN_TWIN_CONTROL_H_ */
