// GE twin: RunGraphAsync's pipeline as GE runs it: a session's compile (pre-run) thread, its executor thread and
// one model thread per graph, with GE's queue bounds, its 32 pending callbacks of a dynamic-shape graph, and its
// stop-on-pre-run-failure rule.
#include "ge_session_internal.h"
#include "../onnx/intra_op.h"

namespace ge {
namespace {
constexpr size_t kModelQueueCapacity = 2048;  // GE (DataInputer): a full per-model queue fails the job
// GE (RunAsyncListener): a dynamic-shape graph holds at most 32 pending callbacks; the 33rd job waits on the
// session's executor thread, stalling every graph of the session behind it.
constexpr int kDynamicPendingLimit = 32;
constexpr const char *kModelThread = "ge_davidmdlrun";

// Borrowed copies of the caller's input tensors (RunGraphAsync shares inputs, it does not copy data).
std::vector<gert::Tensor> BorrowInputs(const std::vector<gert::Tensor> &inputs) {
  std::vector<gert::Tensor> out;
  out.reserve(inputs.size());
  for (const auto &t : inputs) {
    gert::Tensor b(t.GetShape(), t.GetFormat(), t.GetDataType());
    b.SetData(gert::TensorData(t.GetAddr(), nullptr, t.GetSize(), t.GetPlacement()));
    out.push_back(std::move(b));
  }
  return out;
}

// One RunGraphAsync job on its way through the compile -> executor -> model-thread stages: a single object the
// stages share, so a submit costs one allocation for the job and one for the queued closure.
struct AsyncRun {
  SessionImpl *session;
  std::shared_ptr<GraphNode> node;
  std::vector<gert::Tensor> inputs;  // borrowed copies of the caller's tensors (GE shares inputs, it copies no data)
  RunAsyncCallbackV2 callback;
  bool counted = false;  // holds one of a dynamic-shape graph's 32 pending-callback places
  uint64_t work_stream = 0;  // the submitter's error-context id, adopted by each stage (GE's SetErrMgrContext)

  void CallBack(Status st, std::vector<gert::Tensor> &outs) {
    if (!callback) return;
    try {
      callback(st, outs);
    } catch (...) {
      // A throwing callback must not take a GE thread down.
    }
  }
  void Fail(Status st) {
    std::vector<gert::Tensor> none;
    CallBack(st, none);
  }
  // The job is over (called back, or dropped while the session shuts down).
  void Done() {
    ReleasePendingPlace();
    node->running.fetch_sub(1);
  }
  void ReleasePendingPlace() {
    if (!counted) return;
    counted = false;
    std::lock_guard<std::mutex> lk(node->pending_mu);
    --node->pending;
    node->pending_cv.notify_one();
  }
};

// For the direct hand-over to the model thread: a dynamic-shape graph's job needs one of its 32 pending-callback
// places free right now (else it takes the stages, where the executor waits for one as GE's does), and no compile
// stall or pre-run failure armed for the graph (test controls the compile stage applies).
bool TakePendingPlaceAtOnce(AsyncRun &run) {
  GraphNode &node = *run.node;
  if (!node.dynamic.load()) return true;
  uint32_t injected = 0;
  if (twin::CompileStalled(node.session_id, node.id) || twin::PreRunFails(node.session_id, node.id, &injected))
    return false;
  std::lock_guard<std::mutex> lk(node.pending_mu);
  if (node.pending >= kDynamicPendingLimit) return false;
  ++node.pending;
  run.counted = true;
  return true;
}

// Stage 3: the model thread executes, then calls back inline; the next job waits for the callback.
void ModelStage(AsyncRun &run) {
  twin::WorkStreamScope error_context(run.work_stream);
  GraphNode &node = *run.node;
  std::vector<gert::Tensor> outs;
  std::vector<ODesc> descs;
  std::vector<const void *> in;
  Status st = CheckInputs(node, run.inputs, "RunGraphAsync", &descs, &in);
  std::shared_ptr<Plan> plan;
  if (st == SUCCESS) {
    plan = ForValues(node, GetPlan(node, descs, "RunGraphAsync"), in, "RunGraphAsync");
    if (!plan) st = INTERNAL_ERROR;
  }
  const twin::FaultDecision fault = twin::NextRun(node.session_id, node.id);
  if (st == SUCCESS) st = ApplyFault(fault, node, "RunGraphAsync");
  std::vector<void *> out;
  if (st == SUCCESS) st = MakeHostOutputs(*plan, outs, &out);
  if (st == SUCCESS) {
    const twin::onnx::AsyncRunScope async_run;  // (the intra-op pool's gate: the submitter may be busy meanwhile)
    st = RunPlan(node, *plan, in, out, "RunGraphAsync");
  }
  if (st != SUCCESS) outs.clear();
  if (fault.stall) twin::WaitWhileStalled(node.session_id, node.id);
  if (!fault.drop) run.CallBack(st, outs);
  outs.clear();  // outputs not moved out by the callback are destroyed when it returns
  run.Done();
}

void ModelStageJob(const std::shared_ptr<void> &run) { ModelStage(*static_cast<AsyncRun *>(run.get())); }

// Stage 2: the executor thread loads the graph and hands the job to the model's thread.
void ExecStage(const std::shared_ptr<AsyncRun> &run) {
  struct Unstage {  // the job leaves the compile/executor stages however this stage ends
    SessionImpl *s;
    ~Unstage() { s->staged.fetch_sub(1); }
  } unstage{run->session};
  twin::WorkStreamScope error_context(run->work_stream);
  GraphNode &node = *run->node;
  const Status st = EnsureLoaded(node, "RunGraphAsync");
  if (st != SUCCESS) {
    run->Fail(st);  // an executor-stage failure: GE calls back and the queue goes on (ModelExecutor::ReturnError)
    run->Done();
    return;
  }
  if (node.dynamic.load()) {
    // GE: RunAsyncListener holds 32 callbacks of a dynamic-shape graph; the executor thread waits for a place.
    std::unique_lock<std::mutex> lk(node.pending_mu);
    node.pending_cv.wait(lk, [&] { return node.pending < kDynamicPendingLimit || run->session->finalized.load(); });
    if (run->session->finalized.load()) {
      lk.unlock();
      run->Done();  // shutting down: dropped without a callback
      return;
    }
    ++node.pending;
    run->counted = true;
  }
  twin::WorkQueue *q;
  {
    std::lock_guard<std::mutex> lk(node.mu);
    if (!node.model_queue) {
      node.model_queue.reset(new twin::WorkQueue(kModelThread, kModelQueueCapacity));
      node.ready_queue.store(node.model_queue.get(), std::memory_order_release);
    }
    q = node.model_queue.get();
  }
  const auto pushed = q->Push({ModelStageJob, run}, false);
  if (pushed == twin::WorkQueue::PushResult::kFull) {
    twin::ReportError("RunGraphAsync: the model queue of graph (graph_id=" + std::to_string(node.id) +
                      ") is full (GE_GRAPH_SYNC_MODEL_FAILED)");
    run->Fail(GE_GRAPH_SYNC_MODEL_FAILED);
    run->Done();
  } else if (pushed == twin::WorkQueue::PushResult::kStopped) {
    run->Done();  // session shutting down: dropped without a callback, as GE does
  }
}

void ExecStageJob(const std::shared_ptr<void> &run) { ExecStage(std::static_pointer_cast<AsyncRun>(run)); }

// GE compiles a graph not compiled yet from the first run's inputs: their descs replace the Data nodes' (kept
// when the compile fails).
Status CompileFromInputs(GraphNode &node, const std::vector<gert::Tensor> &inputs) {
  std::lock_guard<std::mutex> lk(node.mu);
  if (node.compiled) return SUCCESS;
  std::vector<ODesc> descs;
  for (const auto &t : inputs) {
    descs.emplace_back();
    ReadDesc(t, &descs.back());
  }
  const auto saved = node.data_descs;
  if (descs.size() == node.data_descs.size()) node.data_descs = descs;
  const Status st = CompileLocked(node, "RunGraphAsync");
  if (st != SUCCESS) node.data_descs = saved;
  return st;
}

// The compile stage's work: an injected pre-run failure (twin-only test control), else compiling on first use.
Status PreRun(GraphNode &node, const std::vector<gert::Tensor> &inputs) {
  uint32_t injected = 0;
  if (twin::PreRunFails(node.session_id, node.id, &injected)) {
    twin::ReportError("RunGraphAsync: pre-run of graph (graph_id=" + std::to_string(node.id) + ") failed with status " +
                      std::to_string(injected) + " (fault injected by the twin)");
    return injected == SUCCESS ? FAILED : injected;
  }
  return CompileFromInputs(node, inputs);
}

// Stage 1: the compile thread compiles from the actual inputs' descriptions.
void CompileStage(const std::shared_ptr<AsyncRun> &run) {
  SessionImpl *session = run->session;
  GraphNode &node = *run->node;
  twin::WorkStreamScope error_context(run->work_stream);
  if (twin::CompileStalled(node.session_id, node.id)) twin::WaitWhileStalled(node.session_id, node.id);
  if (session->async_stopped.load()) {
    // GE stopped the queue (ReturnError -> StopQueue): the jobs behind the failure are never called back.
    session->staged.fetch_sub(1);
    run->Done();
    return;
  }
  bool handed_on = false;
  struct Unstage {  // unless handed to the executor, the job leaves the staged count here
    SessionImpl *s;
    bool *handed_on;
    ~Unstage() {
      if (!*handed_on) s->staged.fetch_sub(1);
    }
  } unstage{session, &handed_on};
  const Status st = PreRun(node, run->inputs);
  if (st != SUCCESS) {
    // GE (GraphManager::ReturnError): every pre-run failure calls back and then stops the session's async queue
    // for good; the jobs queued behind it are dropped without callbacks and later submits return FAILED.
    run->Fail(st);
    session->async_stopped.store(true);
    run->Done();
    return;
  }
  handed_on = session->executor_queue.Push({ExecStageJob, run}, true) == twin::WorkQueue::PushResult::kOk;
  if (!handed_on) run->Done();
}
void CompileStageJob(const std::shared_ptr<void> &run) { CompileStage(std::static_pointer_cast<AsyncRun>(run)); }
}  // namespace

Status GeSession::RunGraphAsync(uint32_t graph_id, const std::vector<gert::Tensor> &inputs,
                                RunAsyncCallbackV2 callback) {
  GE_SESSION_CHECK("RunGraphAsync");
  auto node = impl_->Find(graph_id, "RunGraphAsync");
  if (!node) return FAILED;
  if (!ClaimMode(*node, RunMode::kRunGraphAsync)) {
    std::vector<gert::Tensor> none;
    if (callback) callback(UNSUPPORTED, none);  // GE calls back on the caller's thread before returning
    return UNSUPPORTED;
  }
  if (impl_->async_stopped.load()) {
    twin::ReportError("RunGraphAsync: the session's async queue has stopped after a pre-run (compile) failure; "
                      "create a new session");
    return FAILED;
  }
  auto run = std::make_shared<AsyncRun>();
  run->session = impl_.get();
  run->inputs = BorrowInputs(inputs);
  run->callback = std::move(callback);
  run->work_stream = twin::CurrentWorkStream();
  node->running.fetch_add(1);
  run->node = std::move(node);
  // Fast path, unobservable in GE's terms: when the graph is compiled and loaded, its model thread exists and no
  // earlier job of this session is still in the compile or executor stage, those stages would only forward the job
  // (in order) to the model thread: hand it over directly and spare two thread wake-ups per run (a dynamic-shape
  // graph's job when one of its pending-callback places is free).
  if (impl_->staged.load() == 0) {
    twin::WorkQueue *q = run->node->ready_queue.load(std::memory_order_acquire);
    if (q != nullptr && TakePendingPlaceAtOnce(*run)) {
      if (q->Push({ModelStageJob, run}, false) == twin::WorkQueue::PushResult::kOk) return SUCCESS;
      run->ReleasePendingPlace();
    }
  }
  impl_->staged.fetch_add(1);
  const auto pushed = impl_->compile_queue.Push({CompileStageJob, run}, true);
  if (pushed != twin::WorkQueue::PushResult::kOk) {
    impl_->staged.fetch_sub(1);
    run->Done();
    twin::ReportError("RunGraphAsync: the session's async queue is stopped");
    return FAILED;
  }
  return SUCCESS;
}
}  // namespace ge
