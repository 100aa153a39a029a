// Shared internals of the shim (the C ABI of include/geasync.h over the GE v2 / ACL C++ API):
// handle structs, the per-thread error slot, live counters and helpers used by several shim files.
// Written only against GE/ACL headers, so the same source builds against the twin and a real CANN.
#pragma once

#include <atomic>
#include <map>
#include <thread>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "acl/acl_rt.h"
// metadef deprecates exe_graph/runtime/tensor.h (removed after 2027-06) for runtime_tensor.h; older toolkits have
// only the former.
#if __has_include("exe_graph/runtime/runtime_tensor.h")
#include "exe_graph/runtime/runtime_tensor.h"
#else
#include "exe_graph/runtime/tensor.h"
#endif
#include "ge/ge_api_v2.h"
#include "geasync.h"
#include "graph/graph.h"

namespace shim {

// Statuses of failures the shim detects itself (a null argument, out of memory, no compiled graph). CANN publishes
// only ge::SUCCESS and ge::FAILED; these are the values of GE's internal PARAM_INVALID, MEMALLOC_FAILED and
// GE_GRAPH_NOT_BUILT (ge_inner_error_codes.h, not installed), so the same kind of failure has the same status
// whether GE or the shim found it.
constexpr ga_status kParamInvalid = 1343225857U;
constexpr ga_status kMemallocFailed = 1343225856U;
constexpr ga_status kGraphNotBuilt = 1343242295U;

// The calling thread's last ACL error text, read and cleared; "" when ACL has none (aclGetRecentErrMsg returns
// nullptr then: never build a std::string from it directly).
std::string AclRecentText();
// Records a failed ACL call: ACL's text, or one naming the call and its code when ACL has none.
ga_status AclFail(const char *api, aclError e);

// Live counters of shim handles (ga_get_live_counters); every create/destroy pair updates one.
struct Counters {
  std::atomic<int64_t> sessions{0}, graphs{0}, tensors{0}, outputs_lists{0}, streams{0}, completion_queues{0},
      pending_completions{0}, allocators{0};
};
Counters &Live();

// Records a failure for the calling thread: the GE error text (read and cleared here, on the thread that saw the
// failure, as GE requires) or `fallback` when GE said nothing. Returns status for `return Fail(...)` chains.
ga_status Fail(const char *api, ga_status status, const std::string &fallback = std::string());
// Records a failure whose text the shim composes itself (argument checks, ACL errors).
ga_status FailWith(const char *api, ga_status status, const std::string &message);
// Clears stale GE/ACL messages on this thread before a call whose failure text we will read.
void ClearErrors();
// On a GE thread running an async request that failed: GE's text for it, including text a clear on the
// submitting thread took first.
std::string AsyncRunErrorText(std::thread::id submitter);

std::map<ge::AscendString, ge::AscendString> ToMap(const ga_options *options);

// Makes `device` the calling thread's current ACL device (threads touching streams need a context).
aclError EnsureDevice(int32_t device);
// Why a ge.exec.deviceId / ge.session_device_id option names no device of this machine ("" if both are valid, or
// when ACL cannot count the devices: GE then has the last word). GE reports it with PARAM_INVALID.
std::string BadDeviceOption(const std::map<ge::AscendString, ge::AscendString> &options);
int32_t DefaultDevice();  // from GEInitializeV2's ge.exec.deviceId, else 0
// Makes the device of `stream` (one created by ga_stream_create) current on the calling thread.
aclError EnterStreamDevice(void *stream);
void SetDefaultDevice(int32_t device);

// Borrowed gert::Tensors over the caller's descriptors (the caller keeps the memory alive).
bool ToGertTensors(const ga_tensor_desc *descs, size_t count, std::vector<gert::Tensor> *out, std::string *error);

// The input vector a run call builds, reused per thread so a run allocates none (GE copies what it keeps). A call
// re-entered on the same thread while the vector is in use (a Python allocator running a graph) gets its own.
class InputScratch {
 public:
  InputScratch() : v_(busy_ ? &own_ : &shared_) {
    if (v_ == &shared_) busy_ = true;
  }
  ~InputScratch() {
    if (v_ == &shared_) {
      shared_.clear();  // keeps the capacity
      busy_ = false;
    }
  }
  InputScratch(const InputScratch &) = delete;
  InputScratch &operator=(const InputScratch &) = delete;
  std::vector<gert::Tensor> *get() { return v_; }

 private:
  static thread_local std::vector<gert::Tensor> shared_;
  static thread_local bool busy_;
  std::vector<gert::Tensor> own_;
  std::vector<gert::Tensor> *v_;
};
// Fills `info` with the handle and description of an output the caller takes over.
void Describe(ga_tensor *handle, ga_output_info *info);
// Moves runtime tensors into a new ga_outputs (nullptr on allocation failure).
ga_outputs *MakeOutputs(std::vector<gert::Tensor> &&tensors);

// A completion queue with shared ownership: the consumer's handle and every outstanding request hold a reference,
// so the queue (and its eventfd) outlive the last completion the runtime may still deliver.
void CqRetain(ga_completion_queue *q);
void CqRelease(ga_completion_queue *q);
// Pushes a record (takes ownership of outputs and error text) and signals the consumer once per batch.
// The GeSession behind a shim session (for shim files other than session.cc).
ge::GeSession *NativeSession(ga_session *session);

void CqPush(ga_completion_queue *q, uint64_t token, ga_status status, int32_t kind, ga_outputs *outputs,
            const std::string &error);

}  // namespace shim

struct ga_tensor {
  gert::Tensor tensor;
};

struct ga_outputs {
  std::vector<ga_tensor *> items;
};

struct ga_graph {
  ge::Graph graph;
};
