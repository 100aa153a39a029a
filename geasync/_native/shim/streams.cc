// Shim: ACL streams, the host-function completion signal on a stream, and device memory.
// Every thread of ours that touches a stream first makes the stream's device current (ACL contexts are
// thread-local); completion of stream work is signalled with aclrtLaunchHostFunc, never by blocking a thread.
#include <string>

#include "shim_internal.h"

namespace {
std::mutex g_streams_mu;
std::map<void *, int32_t> &StreamDevices() {
  static auto *m = new std::map<void *, int32_t>();
  return *m;
}

using shim::AclFail;
}  // namespace

namespace shim {
// Makes the stream's device current on this thread (streams belong to their device's context); unknown streams
// fall back to the default device and let ACL report the error.
aclError EnterStreamDevice(void *stream) {
  int32_t device = shim::DefaultDevice();
  {
    std::lock_guard<std::mutex> lk(g_streams_mu);
    auto it = StreamDevices().find(stream);
    if (it != StreamDevices().end()) device = it->second;
  }
  return shim::EnsureDevice(device);
}
}  // namespace shim

namespace {
using shim::EnterStreamDevice;

struct HostFuncArg {
  ga_completion_queue *queue;
  uint64_t token;
};

// Runs on ACL's callback thread: only signals, as a host function must.
void CompletionHostFunc(void *p) {
  auto *arg = static_cast<HostFuncArg *>(p);
  shim::CqPush(arg->queue, arg->token, 0, GA_COMPLETION_HOST_FUNC, nullptr, std::string());
  shim::CqRelease(arg->queue);
  delete arg;
}
}  // namespace

extern "C" {

ga_status ga_stream_create(int32_t device_id, void **out) {
  if (out == nullptr) return shim::FailWith("aclrtCreateStream", ACL_ERROR_INVALID_PARAM, "out is null");
  shim::ClearErrors();
  const int32_t device = device_id < 0 ? shim::DefaultDevice() : device_id;
  aclError e = shim::EnsureDevice(device);
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  aclrtStream s = nullptr;
  e = aclrtCreateStream(&s);
  if (e != ACL_SUCCESS) return AclFail("aclrtCreateStream", e);
  {
    std::lock_guard<std::mutex> lk(g_streams_mu);
    StreamDevices()[s] = device;
  }
  shim::Live().streams.fetch_add(1);
  *out = s;
  return 0;
}

ga_status ga_stream_destroy(void *stream) {
  shim::ClearErrors();
  aclError e = EnterStreamDevice(stream);
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  e = aclrtDestroyStream(stream);
  if (e != ACL_SUCCESS) return AclFail("aclrtDestroyStream", e);
  {
    std::lock_guard<std::mutex> lk(g_streams_mu);
    StreamDevices().erase(stream);
  }
  shim::Live().streams.fetch_sub(1);
  return 0;
}

ga_status ga_stream_synchronize(void *stream, int32_t timeout_ms) {
  shim::ClearErrors();
  aclError e = EnterStreamDevice(stream);
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  if (timeout_ms < 0) {
    e = aclrtSynchronizeStream(stream);
    if (e != ACL_SUCCESS) return AclFail("aclrtSynchronizeStream", e);
  } else {
    e = aclrtSynchronizeStreamWithTimeout(stream, timeout_ms == 0 ? 1 : timeout_ms);
    if (e != ACL_SUCCESS) return AclFail("aclrtSynchronizeStreamWithTimeout", e);
  }
  return 0;
}

ga_status ga_stream_query(void *stream, int *complete) {
  shim::ClearErrors();
  aclError e = EnterStreamDevice(stream);
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  aclrtStreamStatus status = ACL_STREAM_STATUS_NOT_READY;
  e = aclrtStreamQuery(stream, &status);
  if (e != ACL_SUCCESS) return AclFail("aclrtStreamQuery", e);
  if (complete != nullptr) *complete = status == ACL_STREAM_STATUS_COMPLETE ? 1 : 0;
  return 0;
}

ga_status ga_stream_launch_completion(void *stream, ga_completion_queue *queue, uint64_t token) {
  if (queue == nullptr) return shim::FailWith("aclrtLaunchHostFunc", ACL_ERROR_INVALID_PARAM, "queue is null");
  shim::ClearErrors();
  aclError e = EnterStreamDevice(stream);
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  auto *arg = new (std::nothrow) HostFuncArg{queue, token};
  if (arg == nullptr) return shim::FailWith("aclrtLaunchHostFunc", ACL_ERROR_BAD_ALLOC, "out of memory");
  shim::CqRetain(queue);
  shim::Live().pending_completions.fetch_add(1);
  e = aclrtLaunchHostFunc(stream, CompletionHostFunc, arg);
  if (e != ACL_SUCCESS) {
    shim::CqRelease(queue);
    shim::Live().pending_completions.fetch_sub(1);
    delete arg;
    return AclFail("aclrtLaunchHostFunc", e);
  }
  return 0;
}

ga_status ga_device_malloc(int32_t device_id, size_t size, void **out) {
  if (out == nullptr) return shim::FailWith("aclrtMalloc", ACL_ERROR_INVALID_PARAM, "out is null");
  shim::ClearErrors();
  aclError e = shim::EnsureDevice(device_id < 0 ? shim::DefaultDevice() : device_id);
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  e = aclrtMalloc(out, size, ACL_MEM_MALLOC_NORMAL_ONLY);
  return e == ACL_SUCCESS ? 0 : AclFail("aclrtMalloc", e);
}

ga_status ga_device_free(void *ptr) {
  shim::ClearErrors();
  const aclError e = aclrtFree(ptr);
  return e == ACL_SUCCESS ? 0 : AclFail("aclrtFree", e);
}

ga_status ga_memcpy(void *dst, size_t dst_max, const void *src, size_t count, int32_t kind) {
  shim::ClearErrors();
  aclError e = shim::EnsureDevice(shim::DefaultDevice());
  if (e != ACL_SUCCESS) return AclFail("aclrtSetDevice", e);
  e = aclrtMemcpy(dst, dst_max, src, count, static_cast<aclrtMemcpyKind>(kind));
  return e == ACL_SUCCESS ? 0 : AclFail("aclrtMemcpy", e);
}

}  // extern "C"
