// Per-session memory limits of the twin's plans (geasync_twin_set_memory_limit in twin/twin_control.h).
#pragma once

#include <cstdint>

namespace twin {

// The session's limit, 0 if none was set (the engine then applies its default).
uint64_t SessionMemoryLimit(uint64_t session_id);
// Session teardown: forget its limit.
void ForgetMemoryLimit(uint64_t session_id);

}  // namespace twin
