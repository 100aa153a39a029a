// Twin-internal hooks of the ACL twin (acl_runtime.cc) used by the GE twin: device-memory registry lookups
// and enqueueing work on a stream. Not part of CANN's API; the shim never includes this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "acl/acl_rt.h"

namespace twin {
namespace acl {

// True if p points inside a live aclrtMalloc block; *remaining = bytes from p to the block's end.
bool LookupDeviceMemory(const void *p, size_t *remaining);

// True if stream is a live stream created by aclrtCreateStream(WithConfig).
bool IsLiveStream(aclrtStream stream);

// Appends a task to the stream's in-order queue; it runs on the stream's executor after every earlier task
// (kernels, memcpys, host functions) and before every later one. The task must not throw.
aclError EnqueueStreamTask(aclrtStream stream, std::function<void()> task);

// Live object counts for the twin's debug counters.
int64_t LiveDeviceAllocations();
int64_t LiveStreams();

// Records an ACL error text for the calling thread (read and cleared by aclGetRecentErrMsg).
void SetRecentErrMsg(const char *msg);

}  // namespace acl
}  // namespace twin
