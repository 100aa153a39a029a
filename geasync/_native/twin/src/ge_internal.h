// Twin-internal helpers shared by the GE twin's files: the per-thread error context, the global GE state,
// access to ge::Graph's content and a small worker-thread queue. Not part of GE's API.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ge/ge_api_v2.h"
#include "../onnx/engine.h"
#include "ge_inner_error_codes.h"

namespace ge {
// What a ge::Graph holds in the twin: a parsed ONNX model. `added` is set by AddGraph (GE refuses a second add).
class GraphImpl {
 public:
  explicit GraphImpl(std::shared_ptr<const twin::onnx::Model> m) : model(std::move(m)) {}
  std::shared_ptr<const twin::onnx::Model> model;
  bool added = false;
};
}  // namespace ge

namespace twin {

// GE keeps error text per work stream (pid x 100000 + tid), not per thread: an async worker adopts the submitter's
// work stream while it handles the submitter's job (error_message::SetErrMgrContext), so text it reports lands in,
// and GEGetErrorMsgV3 on it reads, the submitter's slot.
uint64_t CurrentWorkStream();
class WorkStreamScope {
 public:
  explicit WorkStreamScope(uint64_t work_stream);
  ~WorkStreamScope();
  WorkStreamScope(const WorkStreamScope &) = delete;
  WorkStreamScope &operator=(const WorkStreamScope &) = delete;

 private:
  uint64_t saved_;
};

// Appends to the calling work stream's GE error context (read and cleared by GEGetErrorMsgV3).
void ReportError(const std::string &msg);
void ReportWarning(const std::string &msg);
// E10062 as GE's error manager formats it: "[PID: <pid>] <time> Invalid_Argument_API_Call_Sequence(E10062):
// Failed to <what>. Reason: <why>."
std::string E10062(const std::string &what, const std::string &why);

// Global GE state: initialised flag and the process-wide registries.
bool GeInitialized();
// Called by GEFinalizeV2 for every live session; sessions register themselves.
class SessionRegistry {
 public:
  static void Add(ge::SessionImpl *s);
  static void Remove(ge::SessionImpl *s);
  static void FinalizeAll();
};

class GraphAccess {
 public:
  static std::shared_ptr<ge::GraphImpl> &Impl(ge::Graph &g) { return g.impl_; }
  static const std::shared_ptr<ge::GraphImpl> &Impl(const ge::Graph &g) { return g.impl_; }
};

class SummaryAccess {
 public:
  static ge::CompiledGraphSummary &Get(ge::CompiledGraphSummary &s) { return s; }
  static void Fill(ge::CompiledGraphSummary &s, bool is_static, size_t const_size, size_t feature_size,
                   std::vector<ge::Shape> shapes, std::vector<ge::DataType> dtypes) {
    s.is_static_ = is_static;
    s.const_size_ = const_size;
    s.feature_size_ = feature_size;
    s.output_shapes_ = std::move(shapes);
    s.output_dtypes_ = std::move(dtypes);
  }
};

// One worker thread running jobs in FIFO order. Stop() drops queued jobs (GE drops them without callbacks)
// and joins (or detaches when called from the worker itself, e.g. when a job releases the queue's owner);
// a job that is running finishes first. The thread shares the queue's state, so the owner may go away first.
class WorkQueue {
 public:
  explicit WorkQueue(std::string name, size_t capacity = 0);
  ~WorkQueue() { Stop(); }
  WorkQueue(const WorkQueue &) = delete;
  WorkQueue &operator=(const WorkQueue &) = delete;

  // A queued job: a function and the object it works on, stored by value (no allocation per job, unlike a
  // std::function holding a shared_ptr: RunGraphAsync pushes one per run).
  struct Job {
    void (*run)(const std::shared_ptr<void> &arg) = nullptr;
    std::shared_ptr<void> arg;
  };
  enum class PushResult { kOk, kStopped, kFull };
  // A bounded queue that is full blocks the caller (block_when_full) or returns kFull.
  PushResult Push(Job job, bool block_when_full);
  void Stop();
  size_t Queued();

 private:
  struct State;
  std::shared_ptr<State> st_;
};

}  // namespace twin
