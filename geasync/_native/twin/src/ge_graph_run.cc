// GE twin: the steps every run takes (run-mode check, input check, injected fault, execution) and the two
// entry points that run without the async pipeline: RunGraph (host outputs, on the caller's thread) and
// RunGraphWithStreamAsync (enqueued on an ACL stream).
#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "acl/acl_rt.h"
#include "acl_internal.h"
#include "ge_session_internal.h"
#include "../onnx/intra_op.h"

namespace ge {
namespace {
std::mutex g_run_graph_lock;  // GE's process-wide RunGraph try-lock

const char *ModeApi(RunMode m) {
  switch (m) {
    case RunMode::kRunGraph: return "RunGraph";
    case RunMode::kRunGraphAsync: return "RunGraphAsync";
    case RunMode::kRunGraphWithStreamAsync: return "RunGraphWithStreamAsync";
    default: return "none";
  }
}

std::string DimsToString(const twin::onnx::Dims &dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}
}  // namespace

void ReadDesc(const gert::Tensor &t, ODesc *desc) {
  desc->dtype = static_cast<ElemType>(t.GetDataType());
  const gert::Shape &shape = t.GetStorageShape();
  desc->dims.resize(shape.GetDimNum());
  for (size_t k = 0; k < shape.GetDimNum(); ++k) desc->dims[k] = shape.GetDim(k);
}

namespace {
// --- CheckInputs' steps: hot path, messages are built only on failure ---

std::string InputName(const GraphNode &node, size_t i, const char *api) {
  return std::string(api) + ": graph (graph_id=" + std::to_string(node.id) + ") input " + std::to_string(i) + " ('" +
         node.model->inputs()[i].name + "')";
}

bool DimsMatch(const ODesc &got, const ODesc &want) {
  bool ok = got.dims.size() == want.dims.size() || want.IsUnknownRank();  // a Data node of unknown rank
  for (size_t k = 0; ok && k < got.dims.size(); ++k)
    ok = got.dims[k] >= 0 && (want.IsUnknownRank() || want.dims[k] < 0 || want.dims[k] == got.dims[k]);
  return ok;
}

// The input's dtype and shape against its Data node's, read under the node's lock (not copied).
Status CheckAgainstDataNode(GraphNode &node, size_t i, const ODesc &d, const char *api) {
  std::string problem;
  {
    std::lock_guard<std::mutex> lk(node.mu);
    const ODesc &want = node.data_descs[i];
    if (d.dtype != want.dtype) {
      problem = std::string(": dtype ") + twin::onnx::ElemTypeName(d.dtype) + " does not match the graph's " +
                twin::onnx::ElemTypeName(want.dtype);
    } else if (!DimsMatch(d, want)) {
      problem = ": shape " + DimsToString(d.dims) + " does not match the graph's " + DimsToString(want.dims) +
                " (-1 = any)";
    }
  }
  if (problem.empty()) return SUCCESS;
  twin::ReportError(InputName(node, i, api) + problem);
  return PARAM_INVALID;
}

// The tensor holds enough bytes for its shape; a device tensor lies inside a live aclrtMalloc block.
Status CheckInputMemory(const GraphNode &node, size_t i, const gert::Tensor &t, const ODesc &d, const char *api) {
  const size_t need = d.Bytes();
  const void *addr = t.GetAddr();
  if (t.GetSize() < need || (need > 0 && addr == nullptr)) {
    twin::ReportError(InputName(node, i, api) + ": holds " + std::to_string(addr == nullptr ? 0 : t.GetSize()) +
                      " bytes but shape " + DimsToString(d.dims) + " needs " + std::to_string(need));
    return PARAM_INVALID;
  }
  if (t.GetPlacement() == gert::kOnDeviceHbm && need > 0) {
    size_t remaining = 0;
    if (!twin::acl::LookupDeviceMemory(addr, &remaining) || remaining < need) {
      twin::ReportError(InputName(node, i, api) + ": placement is device but the address is not inside a live "
                                                  "aclrtMalloc block large enough for " + std::to_string(need) +
                        " bytes");
      return PARAM_INVALID;
    }
    // GE documents 32-byte alignment ("otherwise undefined errors") but never checks it: neither does the twin.
  }
  return SUCCESS;
}
}  // namespace

Status CheckInputs(GraphNode &node, const std::vector<gert::Tensor> &inputs, const char *api,
                   std::vector<ODesc> *descs, std::vector<const void *> *ptrs) {
  const size_t expected = node.model->inputs().size();
  if (inputs.size() != expected) {
    twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(node.id) + ") expects " +
                      std::to_string(expected) + " input(s), got " + std::to_string(inputs.size()));
    return PARAM_INVALID;
  }
  descs->resize(inputs.size());
  ptrs->resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ODesc &d = (*descs)[i];
    ReadDesc(inputs[i], &d);
    Status st = CheckAgainstDataNode(node, i, d, api);
    if (st == SUCCESS) st = CheckInputMemory(node, i, inputs[i], d, api);
    if (st != SUCCESS) return st;
    (*ptrs)[i] = inputs[i].GetAddr();
  }
  return SUCCESS;
}

Status RunPlan(GraphNode &node, Plan &plan, const std::vector<const void *> &in, const std::vector<void *> &out,
               const char *api) {
  std::string error;
  bool ok;
  {
    std::lock_guard<std::mutex> lk(node.exec_mu);
    const twin::onnx::StopFlagScope stop(&node.stopping);
    ok = plan.Run(in, out, &error);
  }
  if (!ok) {
    twin::ReportError(std::string(api) + ": executing graph (graph_id=" + std::to_string(node.id) +
                      ") failed: " + error);
    return INTERNAL_ERROR;
  }
  return SUCCESS;
}

Status ApplyFault(const twin::FaultDecision &f, const GraphNode &node, const char *api) {
  if (f.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.delay_ms));
  if (f.fail_alloc) {
    twin::ReportError(std::string(api) + ": output allocation of graph (graph_id=" + std::to_string(node.id) +
                      ") failed (fault injected by the twin)");
    return MEMALLOC_FAILED;
  }
  if (f.fail) {
    twin::ReportError(std::string(api) + ": run of graph (graph_id=" + std::to_string(node.id) +
                      ") failed with status " + std::to_string(f.status) + " (fault injected by the twin)");
    return f.status == SUCCESS ? FAILED : f.status;
  }
  return SUCCESS;
}

bool ClaimMode(GraphNode &node, RunMode mode, bool record) {
  if (node.mode.load(std::memory_order_acquire) == mode) return true;  // a graph's mode never changes once set
  std::lock_guard<std::mutex> lk(node.mu);
  const RunMode established = node.mode.load(std::memory_order_relaxed);
  if (established == RunMode::kNone) {
    if (record) node.mode.store(mode, std::memory_order_release);
    return true;
  }
  if (established == mode) return true;
  const std::string api = ModeApi(mode);
  const std::string prev = ModeApi(established);
  twin::ReportError(twin::E10062("call " + api, prev + " was already called for the graph (graph_id=" +
                                                    std::to_string(node.id) + "). " + api + " and " + prev +
                                                    " are mutually exclusive and cannot be used together"));
  return false;
}

Status GeSession::RunGraph(uint32_t graph_id, const std::vector<gert::Tensor> &inputs,
                           std::vector<gert::Tensor> &outputs) {
  GE_SESSION_CHECK("RunGraph");
  auto node = impl_->Find(graph_id, "RunGraph");
  if (!node) return FAILED;
  if (!ClaimMode(*node, RunMode::kRunGraph, false)) return UNSUPPORTED;
  std::unique_lock<std::mutex> process_lock(g_run_graph_lock, std::try_to_lock);
  if (!process_lock.owns_lock()) {
    twin::ReportError("RunGraph: another RunGraph is running in this process (GE_SESS_ALREADY_RUNNING); "
                      "GeSession does not support concurrent execution");
    return FAILED;
  }
  std::lock_guard<std::mutex> graph_lock(node->run_mu);
  RunningGuard running(*node);
  // Internal codes above 9999999 are returned as FAILED (the message keeps the detail).
  if (EnsureLoaded(*node, "RunGraph") != SUCCESS) return FAILED;
  // GE sets the run mode after the implicit compile and load: a failure there leaves the graph without a mode.
  if (!ClaimMode(*node, RunMode::kRunGraph)) return UNSUPPORTED;
  std::vector<ODesc> descs;
  std::vector<const void *> in;
  if (CheckInputs(*node, inputs, "RunGraph", &descs, &in) != SUCCESS) return FAILED;
  auto plan = ForValues(*node, GetPlan(*node, descs, "RunGraph"), in, "RunGraph");
  if (!plan) return FAILED;
  const twin::FaultDecision fault = twin::NextRun(node->session_id, node->id);
  const Status injected = ApplyFault(fault, *node, "RunGraph");
  if (injected != SUCCESS) return injected > 9999999U ? FAILED : injected;
  std::vector<void *> out;
  if (MakeHostOutputs(*plan, outputs, &out) != SUCCESS) return FAILED;
  if (RunPlan(*node, *plan, in, out, "RunGraph") != SUCCESS) {
    outputs.clear();
    return FAILED;
  }
  return SUCCESS;
}

namespace {
// --- RunGraphWithStreamAsync's steps ---

Status CheckLiveStream(void *stream, const char *api) {
  if (stream == nullptr || !twin::acl::IsLiveStream(stream)) {
    twin::ReportError(std::string(api) + ": stream is not a live stream created by aclrtCreateStream");
    return PARAM_INVALID;
  }
  return SUCCESS;
}

// Compiles and loads on first use, takes the run mode (after compile and load, as GE), checks the inputs and picks
// the plan for them (node.run_mu held).
Status PrepareStreamRun(GraphNode &node, const std::vector<gert::Tensor> &inputs, const char *api,
                        std::shared_ptr<Plan> *plan, std::vector<const void *> *in) {
  if (EnsureLoaded(node, api) != SUCCESS) return FAILED;
  if (!ClaimMode(node, RunMode::kRunGraphWithStreamAsync)) return FAILED;
  std::vector<ODesc> descs;
  const Status st = CheckInputs(node, inputs, api, &descs, in);
  if (st != SUCCESS) return st;
  *plan = ForValues(node, GetPlan(node, descs, api), *in, api);
  return *plan ? SUCCESS : FAILED;
}

// What the stream executes when it reaches the run: the injected delay/stall/drop, then the plan. An execution
// error has no caller left to return to: it becomes the stream's recent error message.
struct StreamRunTask {
  std::shared_ptr<GraphNode> node;
  std::shared_ptr<Plan> plan;
  std::vector<const void *> in;
  std::vector<void *> out;
  twin::FaultDecision fault;

  void operator()() const {
    if (fault.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(fault.delay_ms));
    if (fault.stall) twin::WaitWhileStalled(node->session_id, node->id);
    if (!fault.drop) Execute();
    node->running.fetch_sub(1);
  }
  void Execute() const {
    std::string error;
    bool ok;
    {
      std::lock_guard<std::mutex> lk(node->exec_mu);
      const twin::onnx::StopFlagScope stop(&node->stopping);
      const twin::onnx::AsyncRunScope async_run;  // (the intra-op pool's gate: the submitter may be busy meanwhile)
      ok = plan->Run(in, out, &error);
    }
    if (!ok) twin::acl::SetRecentErrMsg(("RunGraphWithStreamAsync: execution failed: " + error).c_str());
  }
};

// The graph counts as running from the enqueue until the stream has executed (or dropped) the run.
Status EnqueueStreamRun(void *stream, StreamRunTask task, const char *api) {
  GraphNode &node = *task.node;
  node.running.fetch_add(1);
  const aclError acl = twin::acl::EnqueueStreamTask(stream, std::move(task));
  if (acl != ACL_SUCCESS) {
    node.running.fetch_sub(1);
    twin::ReportError(std::string(api) + ": enqueueing on the stream failed with ACL error " + std::to_string(acl));
    return RT_FAILED;
  }
  return SUCCESS;
}
}  // namespace

Status GeSession::RunGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<gert::Tensor> &inputs,
                                          std::vector<gert::Tensor> &outputs) {
  const char *api = "RunGraphWithStreamAsync";
  GE_SESSION_CHECK(api);
  auto node = impl_->Find(graph_id, api);
  if (!node) return FAILED;
  if (!ClaimMode(*node, RunMode::kRunGraphWithStreamAsync, false)) return FAILED;
  Status st = CheckLiveStream(stream, api);
  if (st != SUCCESS) return st;
  std::lock_guard<std::mutex> graph_lock(node->run_mu);
  StreamRunTask task{node, nullptr, {}, {}, {}};
  st = PrepareStreamRun(*node, inputs, api, &task.plan, &task.in);
  if (st != SUCCESS) return st;
  task.fault = twin::NextRun(node->session_id, node->id);
  if (task.fault.fail || task.fault.fail_alloc) {
    task.fault.delay_ms = 0;  // a failed enqueue returns at once
    return ApplyFault(task.fault, *node, api);
  }
  st = MakeStreamOutputs(*node, stream, task.plan->output_descs(), api, &outputs, &task.out);
  if (st != SUCCESS) return st;
  st = EnqueueStreamRun(stream, std::move(task), api);
  if (st != SUCCESS) outputs.clear();
  return st;
}
}  // namespace ge
