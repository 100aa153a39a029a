// GE twin: class GeSession with GE v2's observable behaviour (checked against hicann/ge, see docs/fidelity.md):
// graph registry, compile/load on demand, the three mutually exclusive run modes with GE's codes and E10062
// text, RunGraphAsync's compile -> executor -> per-model thread pipeline, stream-mode runs enqueued on ACL
// streams, outputs owned through TensorData managers, and the process-wide external allocator map.
#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstring>
#include <list>
#include <set>
#include <sstream>

#include "acl/acl_rt.h"
#include "acl_internal.h"
#include "ge_internal.h"
#include "faults.h"
#include "memory_limits.h"
#include "twin/twin_control.h"

namespace ge {
namespace {
using twin::onnx::ElemType;
using twin::onnx::Plan;
using ODesc = twin::onnx::TensorDesc;

constexpr size_t kCompileQueueCapacity = 2048;  // GE: a further submit blocks the caller
constexpr size_t kModelQueueCapacity = 2048;    // GE (DataInputer): a full per-model queue fails the job
constexpr size_t kMaxPlansPerGraph = 16;        // shape-specialised plans kept per graph (dynamic shapes)
// GE (RunAsyncListener): a dynamic-shape graph holds at most 32 pending callbacks; the 33rd job waits on the
// session's executor thread, stalling every graph of the session behind it.
constexpr int kDynamicPendingLimit = 32;
// GE's thread names (prctl / pthread names are cut to 15 characters).
constexpr const char *kCompileThread = "ge_comp_prerunV2";
constexpr const char *kExecutorThread = "ge_mdlexecrun";
constexpr const char *kModelThread = "ge_davidmdlrun";

enum class RunMode { kNone, kRunGraph, kRunGraphAsync, kRunGraphWithStreamAsync };

const char *ModeApi(RunMode m) {
  switch (m) {
    case RunMode::kRunGraph: return "RunGraph";
    case RunMode::kRunGraphAsync: return "RunGraphAsync";
    case RunMode::kRunGraphWithStreamAsync: return "RunGraphWithStreamAsync";
    default: return "none";
  }
}

std::atomic<int64_t> g_live_host_blocks{0};
std::atomic<int64_t> g_live_mem_blocks{0};
std::atomic<int64_t> g_live_sessions{0};
std::atomic<int64_t> g_live_graph_nodes{0};

// Host output memory owned through a TensorData manager, as GE hands out RunGraph / RunGraphAsync outputs.
struct HostBlock {
  void *data;
  std::atomic<int> refs{1};
};

graphStatus HostBlockManager(gert::TensorAddress addr, gert::TensorOperateType op, void **out) {
  auto *b = static_cast<HostBlock *>(addr);
  switch (op) {
    case gert::kGetTensorAddress:
      if (out != nullptr) *out = b->data;
      return GRAPH_SUCCESS;
    case gert::kFreeTensor:
      if (b->refs.fetch_sub(1) == 1) {
        std::free(b->data);
        delete b;
        g_live_host_blocks.fetch_sub(1);
      }
      return GRAPH_SUCCESS;
    case gert::kPlusShareCount:
      b->refs.fetch_add(1);
      return GRAPH_SUCCESS;
    default:
      return GRAPH_FAILED;
  }
}

// Device output memory owned through a MemBlock (external or built-in allocator).
graphStatus MemBlockManager(gert::TensorAddress addr, gert::TensorOperateType op, void **out) {
  auto *b = static_cast<MemBlock *>(addr);
  switch (op) {
    case gert::kGetTensorAddress:
      if (out != nullptr) *out = b->GetAddr();
      return GRAPH_SUCCESS;
    case gert::kFreeTensor:
      b->Free();
      return GRAPH_SUCCESS;
    case gert::kPlusShareCount:
      b->AddCount();
      return GRAPH_SUCCESS;
    default:
      return GRAPH_FAILED;
  }
}

// GE's built-in per-model, per-stream allocator: device memory from aclrtMalloc. Each block keeps its
// allocator alive, so an output released after its graph was removed is still freed correctly.
class BuiltinAllocator : public Allocator, public std::enable_shared_from_this<BuiltinAllocator> {
 public:
  struct Block : MemBlock {
    Block(Allocator &a, void *p, size_t n, std::shared_ptr<Allocator> keep)
        : MemBlock(a, p, n), keep_alive(std::move(keep)) {}
    std::shared_ptr<Allocator> keep_alive;
  };
  MemBlock *Malloc(size_t size) override {
    void *p = nullptr;
    if (aclrtMalloc(&p, size == 0 ? 1 : size, ACL_MEM_MALLOC_NORMAL_ONLY) != ACL_SUCCESS) return nullptr;
    g_live_mem_blocks.fetch_add(1);
    return new (std::nothrow) Block(*this, p, size, shared_from_this());
  }
  void Free(MemBlock *block) override {
    if (block == nullptr) return;
    (void)aclrtFree(block->GetAddr());
    g_live_mem_blocks.fetch_sub(1);
    delete static_cast<Block *>(block);  // may release this allocator: nothing after this line
  }
};

struct ExternalAllocators {
  std::mutex mu;
  std::map<const void *, AllocatorPtr> by_stream;
};
ExternalAllocators &Externals() {
  static ExternalAllocators *e = new ExternalAllocators();  // process-wide, leaked: used during exit
  return *e;
}

std::mutex g_run_graph_lock;  // GE's process-wide RunGraph try-lock

std::string DimsToString(const std::vector<int64_t> &dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

// A tensor's shape as gert holds it: origin = storage (the twin does no format transforms).
gert::StorageShape StorageShapeOf(const std::vector<int64_t> &dims) {
  gert::StorageShape shape;
  for (int64_t v : dims) {
    shape.MutableOriginShape().AppendDim(v);
    shape.MutableStorageShape().AppendDim(v);
  }
  return shape;
}

// An input tensor's dtype and storage dims as the engine's desc (reuses desc's dims buffer).
void ReadDesc(const gert::Tensor &t, ODesc *desc) {
  desc->dtype = static_cast<ElemType>(t.GetDataType());
  const gert::Shape &shape = t.GetStorageShape();
  desc->dims.resize(shape.GetDimNum());
  for (size_t k = 0; k < shape.GetDimNum(); ++k) desc->dims[k] = shape.GetDim(k);
}

std::string PlanKey(const std::vector<ODesc> &descs) {
  std::string key;
  for (const auto &d : descs) {
    key += std::to_string(static_cast<int>(d.dtype)) + ":";
    for (int64_t v : d.dims) key += std::to_string(v) + ",";
    key += ";";
  }
  return key;
}
}  // namespace

// One graph added to a session (GE's graph node): model, run mode, compile/load state, plans, model thread.
struct GraphNode {
  GraphNode(uint64_t sid, uint32_t graph_id, std::shared_ptr<const twin::onnx::Model> m)
      : session_id(sid), id(graph_id), model(std::move(m)) {
    for (const auto &in : model->inputs()) data_descs.push_back(in.desc);
    g_live_graph_nodes.fetch_add(1);
  }
  ~GraphNode() {
    if (model_queue) model_queue->Stop();
    g_live_graph_nodes.fetch_sub(1);
  }

  const uint64_t session_id;
  const uint32_t id;
  const std::shared_ptr<const twin::onnx::Model> model;
  std::map<std::string, std::string> options;

  std::mutex mu;  // guards everything below except the atomics
  RunMode mode = RunMode::kNone;
  std::vector<ODesc> data_descs;  // the Data nodes' descs (CompileGraph with inputs updates them)
  bool compiled = false;
  bool loaded = false;
  bool need_rebuild = false;
  std::vector<ODesc> compiled_outputs;
  std::list<std::pair<std::string, std::shared_ptr<Plan>>> plans;  // most recently used first
  std::map<const void *, std::shared_ptr<BuiltinAllocator>> builtin_allocators;
  std::unique_ptr<twin::WorkQueue> model_queue;
  // Set (release) once compiled, loaded and the model queue exists; read (acquire) by RunGraphAsync's fast path.
  // Cleared before the model queue is stopped at shutdown.
  std::atomic<twin::WorkQueue *> ready_queue{nullptr};

  std::atomic<bool> dynamic{false};  // compiled with unknown dims: RunGraphAsync keeps at most 32 callbacks pending
  std::mutex pending_mu;
  std::condition_variable pending_cv;
  int pending = 0;

  std::mutex run_mu;   // GE's per-graph mutex for RunGraph / RunGraphWithStreamAsync
  std::mutex exec_mu;  // one execution at a time per graph (plans own their intermediates)
  std::atomic<int> running{0};
};

class SessionImpl {
 public:
  explicit SessionImpl(uint64_t sid) : id(sid) { g_live_sessions.fetch_add(1); }
  ~SessionImpl() { g_live_sessions.fetch_sub(1); }

  const uint64_t id;
  std::map<std::string, std::string> options;
  std::mutex mu;  // graph registry; AddGraph/RemoveGraph are serialised per session
  std::map<uint32_t, std::shared_ptr<GraphNode>> graphs;
  std::vector<std::weak_ptr<GraphNode>> all_nodes;  // including removed ones still running, for shutdown
  twin::WorkQueue compile_queue{kCompileThread, kCompileQueueCapacity};
  twin::WorkQueue executor_queue{kExecutorThread};
  std::atomic<bool> async_stopped{false};
  std::atomic<int64_t> staged{0};  // RunGraphAsync jobs in the compile or executor stage
  std::atomic<bool> finalized{false};
  std::once_flag shutdown_once;

  void Shutdown() {
    std::call_once(shutdown_once, [this] {
      finalized.store(true);
      twin::ForgetSession(id);  // injected stalls must not keep the joins below waiting
      twin::ForgetMemoryLimit(id);
      std::vector<std::shared_ptr<GraphNode>> nodes;
      {
        std::lock_guard<std::mutex> lk(mu);
        for (auto &w : all_nodes)
          if (auto n = w.lock()) nodes.push_back(std::move(n));
      }
      for (auto &n : nodes) {  // an executor thread waiting for a pending-callback place gives up
        std::lock_guard<std::mutex> lk(n->pending_mu);
        n->pending_cv.notify_all();
      }
      compile_queue.Stop();
      executor_queue.Stop();
      for (auto &n : nodes) {
        std::unique_ptr<twin::WorkQueue> q;
        {
          std::lock_guard<std::mutex> lk(n->mu);
          n->ready_queue.store(nullptr);
          q = std::move(n->model_queue);
        }
        if (q) q->Stop();
      }
    });
  }

  // Returns the node or reports GE's "graph does not exist" error.
  std::shared_ptr<GraphNode> Find(uint32_t graph_id, const char *api) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = graphs.find(graph_id);
    if (it == graphs.end()) {
      twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(graph_id) +
                        ") does not exist in session " + std::to_string(id) + "; add it with AddGraph first");
      return nullptr;
    }
    return it->second;
  }

  bool Usable(const char *api) {
    if (!twin::GeInitialized()) {
      twin::ReportError(std::string(api) + ": GE is not initialized (call GEInitializeV2 first)");
      return false;
    }
    if (finalized.load()) {
      twin::ReportError(std::string(api) + ": session " + std::to_string(id) +
                        " was finalized by GEFinalizeV2; create a new session");
      return false;
    }
    return true;
  }
};

void FinalizeSessionImpl(SessionImpl *s) { s->Shutdown(); }

namespace {
// --- compile / load -------------------------------------------------------------------------------------

// Plans may be value-dependent (an output shape depends on an input's contents, e.g. a Reshape shape fed as a
// graph input): the run then uses the plan the engine specialises for that run's input values.
twin::onnx::CompileOptions ValueDependentOk(const GraphNode &node) {
  twin::onnx::CompileOptions o;
  o.allow_value_dependent = true;
  o.max_memory_bytes = twin::SessionMemoryLimit(node.session_id);  // geasync.max_memory_bytes
  return o;
}

std::shared_ptr<Plan> ForValues(uint32_t graph_id, std::shared_ptr<Plan> plan, const std::vector<const void *> &in,
                                const char *api) {
  if (!plan || !plan->value_dependent()) return plan;
  std::string error;
  auto p = plan->Specialize(in, &error);
  if (!p)
    twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(graph_id) +
                      ") cannot run with these inputs: " + error);
  return p;
}

// Compiles node from its Data descs (node->mu held). GE: CompileGraph does shape/dtype inference.
Status CompileLocked(GraphNode &node, const char *api) {
  std::string error;
  std::vector<ODesc> outs;
  if (!twin::onnx::InferShapes(*node.model, node.data_descs, &outs, &error)) {
    twin::ReportError(std::string(api) + ": compiling graph (graph_id=" + std::to_string(node.id) +
                      ") failed: " + error);
    return FAILED;
  }
  bool is_static = true;
  for (const auto &d : node.data_descs) is_static = is_static && d.IsStatic();
  if (is_static) {
    auto plan = twin::onnx::CompilePlan(node.model, node.data_descs, ValueDependentOk(node), &error);
    if (!plan) {
      twin::ReportError(std::string(api) + ": compiling graph (graph_id=" + std::to_string(node.id) +
                        ") failed: " + error);
      return FAILED;
    }
    node.plans.clear();
    node.plans.emplace_front(PlanKey(node.data_descs), std::shared_ptr<Plan>(std::move(plan)));
  }
  node.compiled_outputs = std::move(outs);
  node.dynamic = !is_static;
  node.compiled = true;
  return SUCCESS;
}

Status EnsureLoaded(GraphNode &node, const char *api) {
  std::lock_guard<std::mutex> lk(node.mu);
  if (!node.compiled) {
    const Status st = CompileLocked(node, api);
    if (st != SUCCESS) return st;
  }
  node.loaded = true;
  return SUCCESS;
}

// Shape-specialised plan for concrete input descs (compiled on first use, LRU-capped).
std::shared_ptr<Plan> GetPlan(GraphNode &node, const std::vector<ODesc> &descs, const char *api) {
  const std::string key = PlanKey(descs);
  std::lock_guard<std::mutex> lk(node.mu);
  for (auto it = node.plans.begin(); it != node.plans.end(); ++it) {
    if (it->first == key) {
      node.plans.splice(node.plans.begin(), node.plans, it);
      return node.plans.front().second;
    }
  }
  std::string error;
  auto plan = twin::onnx::CompilePlan(node.model, descs, ValueDependentOk(node), &error);
  if (!plan) {
    twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(node.id) +
                      ") cannot run with these inputs: " + error);
    return nullptr;
  }
  node.plans.emplace_front(key, std::shared_ptr<Plan>(std::move(plan)));
  if (node.plans.size() > kMaxPlansPerGraph) node.plans.pop_back();
  return node.plans.front().second;
}

// Checks the run's inputs against the graph's Data nodes; fills descs and data pointers. Runs once per job on
// the hot path: messages are only built on failure, and the Data descs are read under the node's lock, not copied.
Status CheckInputs(GraphNode &node, const std::vector<gert::Tensor> &inputs, const char *api,
                   std::vector<ODesc> *descs, std::vector<const void *> *ptrs) {
  const auto &model_inputs = node.model->inputs();
  auto where = [&]() { return std::string(api) + ": graph (graph_id=" + std::to_string(node.id) + ")"; };
  if (inputs.size() != model_inputs.size()) {
    twin::ReportError(where() + " expects " + std::to_string(model_inputs.size()) + " input(s), got " +
                      std::to_string(inputs.size()));
    return PARAM_INVALID;
  }
  auto name = [&](size_t i) { return where() + " input " + std::to_string(i) + " ('" + model_inputs[i].name + "')"; };
  descs->resize(inputs.size());
  ptrs->resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const gert::Tensor &t = inputs[i];
    ODesc &d = (*descs)[i];
    ReadDesc(t, &d);
    int mismatch = 0;  // 1: dtype, 2: shape
    std::string want_dtype, want_dims;
    {
      std::lock_guard<std::mutex> lk(node.mu);
      const ODesc &want = node.data_descs[i];
      if (d.dtype != want.dtype) {
        mismatch = 1;
      } else {
        bool ok = d.dims.size() == want.dims.size() || want.IsUnknownRank();  // a Data node of unknown rank
        for (size_t k = 0; ok && k < d.dims.size(); ++k)
          ok = d.dims[k] >= 0 && (want.IsUnknownRank() || want.dims[k] < 0 || want.dims[k] == d.dims[k]);
        if (!ok) mismatch = 2;
      }
      if (mismatch != 0) {
        want_dtype = twin::onnx::ElemTypeName(want.dtype);
        want_dims = DimsToString(want.dims);
      }
    }
    if (mismatch == 1) {
      twin::ReportError(name(i) + ": dtype " + twin::onnx::ElemTypeName(d.dtype) + " does not match the graph's " +
                        want_dtype);
      return PARAM_INVALID;
    }
    if (mismatch == 2) {
      twin::ReportError(name(i) + ": shape " + DimsToString(d.dims) + " does not match the graph's " + want_dims +
                        " (-1 = any)");
      return PARAM_INVALID;
    }
    const size_t need = d.Bytes();
    const void *addr = t.GetAddr();
    if (t.GetSize() < need || (need > 0 && addr == nullptr)) {
      twin::ReportError(name(i) + ": holds " + std::to_string(addr == nullptr ? 0 : t.GetSize()) +
                        " bytes but shape " + DimsToString(d.dims) + " needs " + std::to_string(need));
      return PARAM_INVALID;
    }
    if (t.GetPlacement() == gert::kOnDeviceHbm && need > 0) {
      size_t remaining = 0;
      if (!twin::acl::LookupDeviceMemory(addr, &remaining) || remaining < need) {
        twin::ReportError(name(i) + ": placement is device but the address is not inside a live aclrtMalloc block "
                                    "large enough for " + std::to_string(need) + " bytes");
        return PARAM_INVALID;
      }
      // GE documents 32-byte alignment ("otherwise undefined errors") but never checks it: neither does the twin.
    }
    (*ptrs)[i] = addr;
  }
  return SUCCESS;
}

// Allocates host outputs owned by TensorData managers.
Status MakeHostOutputs(const Plan &plan, std::vector<gert::Tensor> &outputs, std::vector<void *> *ptrs) {
  outputs.clear();
  ptrs->clear();
  for (const ODesc &d : plan.output_descs()) {
    const size_t bytes = d.Bytes();
    void *data = std::malloc(bytes == 0 ? 1 : bytes);
    auto *block = data == nullptr ? nullptr : new (std::nothrow) HostBlock{data};
    if (block == nullptr) {
      std::free(data);
      twin::ReportError("out of host memory for a " + std::to_string(bytes) + "-byte output");
      return MEMALLOC_FAILED;
    }
    g_live_host_blocks.fetch_add(1);
    outputs.emplace_back(StorageShapeOf(d.dims), gert::StorageFormat(FORMAT_ND, FORMAT_ND, {}), gert::kOnHost,
                         static_cast<DataType>(d.dtype), block, HostBlockManager);
    ptrs->push_back(bytes == 0 ? nullptr : data);
  }
  return SUCCESS;
}

Status RunPlan(GraphNode &node, Plan &plan, const std::vector<const void *> &in, const std::vector<void *> &out,
               const char *api) {
  std::string error;
  bool ok;
  {
    std::lock_guard<std::mutex> lk(node.exec_mu);
    ok = plan.Run(in, out, &error);
  }
  if (!ok) {
    twin::ReportError(std::string(api) + ": executing graph (graph_id=" + std::to_string(node.id) +
                      ") failed: " + error);
    return INTERNAL_ERROR;
  }
  return SUCCESS;
}

// Applies an injected fault's delay and failure to a run (twin-only test control). Returns SUCCESS to go on.
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

// Checks the graph's run mode; with `record`, a graph with no mode yet takes this one. Returns false (message
// reported) on a conflict.
bool ClaimMode(GraphNode &node, RunMode mode, bool record = true) {
  std::lock_guard<std::mutex> lk(node.mu);
  if (node.mode == RunMode::kNone) {
    if (record) node.mode = mode;
    return true;
  }
  if (node.mode == mode) return true;
  const std::string api = ModeApi(mode);
  const std::string prev = ModeApi(node.mode);
  twin::ReportError(twin::E10062("call " + api, prev + " was already called for the graph (graph_id=" +
                                                    std::to_string(node.id) + "). " + api + " and " + prev +
                                                    " are mutually exclusive and cannot be used together"));
  return false;
}

struct RunningGuard {
  explicit RunningGuard(GraphNode &n) : node(n) { node.running.fetch_add(1); }
  ~RunningGuard() { node.running.fetch_sub(1); }
  GraphNode &node;
};

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

Status ParseDeviceOption(const std::map<std::string, std::string> &opts, const char *api) {
  for (const char *key : {"ge.exec.deviceId", "ge.session_device_id"}) {
    auto it = opts.find(key);
    if (it == opts.end()) continue;
    char *end = nullptr;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    uint32_t count = 0;
    (void)aclrtGetDeviceCount(&count);
    if (it->second.empty() || *end != '\0' || v < -1 || v >= static_cast<long>(count)) {
      twin::ReportError(twin::E10062(std::string("call ") + api, std::string("option ") + key + "='" + it->second +
                                                                     "' is not a device id of this machine (0.." +
                                                                     std::to_string(count == 0 ? 0 : count - 1) +
                                                                     ")"));
      return PARAM_INVALID;
    }
  }
  return SUCCESS;
}

std::map<std::string, std::string> ToStd(const std::map<AscendString, AscendString> &m) {
  std::map<std::string, std::string> out;
  for (const auto &kv : m) out[kv.first.GetString()] = kv.second.GetString();
  return out;
}

std::atomic<uint64_t> g_next_session_id{0};
}  // namespace

// --- GeSession ----------------------------------------------------------------------------------------------

GeSession::GeSession(const std::map<AscendString, AscendString> &options) {
  if (!twin::GeInitialized()) {
    twin::ReportError("GeSession: GE is not initialized (call GEInitializeV2 first)");
    return;
  }
  auto opts = ToStd(options);
  if (ParseDeviceOption(opts, "GeSession") != SUCCESS) return;
  impl_ = std::make_shared<SessionImpl>(g_next_session_id.fetch_add(1));
  impl_->options = std::move(opts);
  twin::SessionRegistry::Add(impl_.get());
}

GeSession::~GeSession() {
  if (!impl_) return;
  impl_->Shutdown();
  twin::SessionRegistry::Remove(impl_.get());
}

uint64_t GeSession::GetSessionId() const { return impl_ ? impl_->id : 0U; }

#define GE_SESSION_CHECK(api)                                          \
  do {                                                                 \
    if (!impl_) {                                                      \
      twin::ReportError(std::string(api) + ": the session is invalid"); \
      return FAILED;                                                   \
    }                                                                  \
    if (!impl_->Usable(api)) return FAILED;                            \
  } while (0)

Status GeSession::AddGraph(uint32_t graph_id, const Graph &graph) { return AddGraph(graph_id, graph, {}); }

Status GeSession::AddGraph(uint32_t graph_id, const Graph &graph,
                           const std::map<AscendString, AscendString> &options) {
  GE_SESSION_CHECK("AddGraph");
  auto gimpl = twin::GraphAccess::Impl(graph);
  if (!gimpl) {
    twin::ReportError("AddGraph: the graph is empty (parse a model into it first)");
    return PARAM_INVALID;
  }
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->graphs.count(graph_id) != 0) {
    twin::ReportError("AddGraph: graph (graph_id=" + std::to_string(graph_id) +
                      ") already exists in the session; remove it first or use another id");
    return FAILED;
  }
  if (gimpl->added) {
    twin::ReportError("AddGraph: this Graph object was already added to a session (graph_id=" +
                      std::to_string(graph_id) + "); use a fresh graph or AddGraphClone");
    return FAILED;
  }
  gimpl->added = true;
  auto node = std::make_shared<GraphNode>(impl_->id, graph_id, gimpl->model);
  node->options = ToStd(options);
  impl_->graphs[graph_id] = node;
  impl_->all_nodes.erase(std::remove_if(impl_->all_nodes.begin(), impl_->all_nodes.end(),
                                        [](const std::weak_ptr<GraphNode> &w) { return w.expired(); }),
                         impl_->all_nodes.end());
  impl_->all_nodes.push_back(node);
  return SUCCESS;
}

Status GeSession::AddGraphClone(uint32_t graph_id, const Graph &graph) { return AddGraphClone(graph_id, graph, {}); }

Status GeSession::AddGraphClone(uint32_t graph_id, const Graph &graph,
                                const std::map<AscendString, AscendString> &options) {
  GE_SESSION_CHECK("AddGraphClone");
  auto gimpl = twin::GraphAccess::Impl(graph);
  if (!gimpl) {
    twin::ReportError("AddGraphClone: the graph is empty (parse a model into it first)");
    return PARAM_INVALID;
  }
  Graph clone;
  twin::GraphAccess::Impl(clone) = std::make_shared<GraphImpl>(gimpl->model);  // the model is immutable
  return AddGraph(graph_id, clone, options);
}

Status GeSession::RemoveGraph(uint32_t graph_id) {
  GE_SESSION_CHECK("RemoveGraph");
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->graphs.find(graph_id);
  if (it == impl_->graphs.end()) {
    twin::ReportError("RemoveGraph: graph (graph_id=" + std::to_string(graph_id) + ") does not exist");
    return GE_GRAPH_GRAPH_NOT_EXIST;
  }
  // A running graph's removal is deferred: its jobs keep the node alive until they finish.
  impl_->graphs.erase(it);
  return SUCCESS;
}

bool GeSession::IsGraphNeedRebuild(uint32_t graph_id) {
  if (!impl_) return true;
  std::shared_ptr<GraphNode> node;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    auto it = impl_->graphs.find(graph_id);
    if (it == impl_->graphs.end()) return true;
    node = it->second;
  }
  std::lock_guard<std::mutex> lk(node->mu);
  return !node->compiled || node->need_rebuild;
}

Status GeSession::CompileGraph(uint32_t graph_id) {
  GE_SESSION_CHECK("CompileGraph");
  auto node = impl_->Find(graph_id, "CompileGraph");
  if (!node) return GE_GRAPH_GRAPH_NOT_EXIST;
  if (node->running.load() > 0) {
    twin::ReportError("CompileGraph: graph (graph_id=" + std::to_string(graph_id) + ") is running");
    return GE_GRAPH_ALREADY_RUNNING;
  }
  std::lock_guard<std::mutex> lk(node->mu);
  if (node->need_rebuild) {
    twin::ReportError("CompileGraph: graph (graph_id=" + std::to_string(graph_id) +
                      ") needs a rebuild: remove it from GE first, then AddGraph again");
    return PARAM_INVALID;
  }
  if (node->compiled) {
    twin::ReportWarning("CompileGraph: graph (graph_id=" + std::to_string(graph_id) + ") is already compiled");
    return SUCCESS;
  }
  return CompileLocked(*node, "CompileGraph");
}

Status GeSession::CompileGraph(uint32_t graph_id, const std::vector<ge::Tensor> &inputs) {
  GE_SESSION_CHECK("CompileGraph");
  auto node = impl_->Find(graph_id, "CompileGraph");
  if (!node) return GE_GRAPH_GRAPH_NOT_EXIST;
  if (node->running.load() > 0) {
    twin::ReportError("CompileGraph: graph (graph_id=" + std::to_string(graph_id) + ") is running");
    return GE_GRAPH_ALREADY_RUNNING;
  }
  std::lock_guard<std::mutex> lk(node->mu);
  if (node->compiled) {
    twin::ReportWarning("CompileGraph: graph (graph_id=" + std::to_string(graph_id) + ") is already compiled");
    return SUCCESS;
  }
  if (inputs.size() != node->data_descs.size()) {
    twin::ReportError("CompileGraph: graph (graph_id=" + std::to_string(graph_id) + ") has " +
                      std::to_string(node->data_descs.size()) + " Data node(s), got " +
                      std::to_string(inputs.size()) + " input description(s)");
    return PARAM_INVALID;
  }
  std::vector<ODesc> descs;
  for (const auto &t : inputs) {
    ODesc d;
    d.dtype = static_cast<ElemType>(t.GetTensorDesc().GetDataType());
    d.dims = t.GetTensorDesc().GetShape().GetDims();
    descs.push_back(std::move(d));
  }
  const auto saved = node->data_descs;
  node->data_descs = descs;  // GE: CompileGraph with inputs updates the Data nodes' shapes and dtypes
  const Status st = CompileLocked(*node, "CompileGraph");
  if (st != SUCCESS) node->data_descs = saved;
  return st;
}

Status GeSession::LoadGraph(uint32_t graph_id, const std::map<AscendString, AscendString> &options,
                            void *stream) const {
  GE_SESSION_CHECK("LoadGraph");
  (void)stream;
  auto node = impl_->Find(graph_id, "LoadGraph");
  if (!node) return GE_GRAPH_GRAPH_NOT_EXIST;
  for (const auto &kv : options) {
    const std::string key = kv.first.GetString();
    if (key != "ge.exec.frozenInputIndexes" && key != "ge.exec.hostInputIndexes") {
      twin::ReportWarning("LoadGraph: option '" + key + "' is not a load option and is ignored");
    }
  }
  if (node->running.load() > 0) {
    twin::ReportError("LoadGraph: graph (graph_id=" + std::to_string(graph_id) + ") is running");
    return FAILED;
  }
  {
    std::lock_guard<std::mutex> lk(node->mu);
    if (node->loaded) {
      // GE_GRAPH_REPEAT_OPERATION, returned as FAILED
      twin::ReportError("LoadGraph: graph (graph_id=" + std::to_string(graph_id) +
                        ") is already loaded (GE_GRAPH_REPEAT_OPERATION)");
      return FAILED;
    }
  }
  return EnsureLoaded(*node, "LoadGraph");
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
  auto plan = ForValues(node->id, GetPlan(*node, descs, "RunGraph"), in, "RunGraph");
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

Status GeSession::RunGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<gert::Tensor> &inputs,
                                          std::vector<gert::Tensor> &outputs) {
  const char *api = "RunGraphWithStreamAsync";
  GE_SESSION_CHECK(api);
  auto node = impl_->Find(graph_id, api);
  if (!node) return FAILED;
  if (!ClaimMode(*node, RunMode::kRunGraphWithStreamAsync, false)) return FAILED;
  if (stream == nullptr || !twin::acl::IsLiveStream(stream)) {
    twin::ReportError(std::string(api) + ": stream is not a live stream created by aclrtCreateStream");
    return PARAM_INVALID;
  }
  std::lock_guard<std::mutex> graph_lock(node->run_mu);
  if (EnsureLoaded(*node, api) != SUCCESS) return FAILED;
  if (!ClaimMode(*node, RunMode::kRunGraphWithStreamAsync)) return FAILED;  // set after compile and load, as GE
  std::vector<ODesc> descs;
  std::vector<const void *> in;
  Status st = CheckInputs(*node, inputs, api, &descs, &in);
  if (st != SUCCESS) return st;
  auto plan = ForValues(node->id, GetPlan(*node, descs, api), in, api);
  if (!plan) return FAILED;
  twin::FaultDecision fault = twin::NextRun(node->session_id, node->id);
  if (fault.fail || fault.fail_alloc) {
    fault.delay_ms = 0;  // a failed enqueue returns at once
    return ApplyFault(fault, *node, api);
  }

  // Outputs: caller-provided addresses if every output has one, else the stream's allocator.
  const auto &out_descs = plan->output_descs();
  std::vector<void *> out;
  const bool caller_outputs =
      outputs.size() == out_descs.size() &&
      std::all_of(outputs.begin(), outputs.end(), [](const gert::Tensor &t) { return t.GetAddr() != nullptr; });
  if (caller_outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].GetSize() < out_descs[i].Bytes()) {
        twin::ReportError(std::string(api) + ": output " + std::to_string(i) + " holds " +
                          std::to_string(outputs[i].GetSize()) + " bytes, needs " +
                          std::to_string(out_descs[i].Bytes()));
        return PARAM_INVALID;
      }
      out.push_back(outputs[i].GetAddr());
    }
  } else {
    AllocatorPtr alloc;
    {
      std::lock_guard<std::mutex> lk(Externals().mu);
      auto it = Externals().by_stream.find(stream);
      if (it != Externals().by_stream.end()) alloc = it->second;
    }
    if (!alloc) {
      std::lock_guard<std::mutex> lk(node->mu);
      auto &b = node->builtin_allocators[stream];
      if (!b) b = std::make_shared<BuiltinAllocator>();
      alloc = b;
    }
    std::vector<gert::Tensor> made;
    for (const ODesc &d : out_descs) {
      MemBlock *block = alloc->Malloc(d.Bytes());
      if (block == nullptr) {
        twin::ReportError(std::string(api) + ": the allocator of the stream returned no memory for a " +
                          std::to_string(d.Bytes()) + "-byte output");
        return MEMALLOC_FAILED;  // `made` frees the blocks allocated so far
      }
      made.emplace_back(StorageShapeOf(d.dims), gert::StorageFormat(FORMAT_ND, FORMAT_ND, {}), gert::kOnDeviceHbm,
                        static_cast<DataType>(d.dtype), block, MemBlockManager);
      made.back().SetSize(d.Bytes());
      out.push_back(d.Bytes() == 0 ? nullptr : block->GetAddr());
    }
    outputs = std::move(made);
  }
  node->running.fetch_add(1);
  auto task = [node, plan, in, out, fault]() {
    if (fault.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(fault.delay_ms));
    if (fault.stall) twin::WaitWhileStalled(node->session_id, node->id);
    if (fault.drop) {
      node->running.fetch_sub(1);
      return;
    }
    std::string error;
    bool ok;
    {
      std::lock_guard<std::mutex> lk(node->exec_mu);
      ok = plan->Run(in, out, &error);
    }
    if (!ok) twin::acl::SetRecentErrMsg(("RunGraphWithStreamAsync: execution failed: " + error).c_str());
    node->running.fetch_sub(1);
  };
  const aclError acl = twin::acl::EnqueueStreamTask(stream, std::move(task));
  if (acl != ACL_SUCCESS) {
    node->running.fetch_sub(1);
    twin::ReportError(std::string(api) + ": enqueueing on the stream failed with ACL error " + std::to_string(acl));
    outputs.clear();
    return RT_FAILED;
  }
  return SUCCESS;
}

namespace {
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
    if (counted) {
      std::lock_guard<std::mutex> lk(node->pending_mu);
      --node->pending;
      node->pending_cv.notify_one();
    }
    node->running.fetch_sub(1);
  }
};

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
    plan = ForValues(node.id, GetPlan(node, descs, "RunGraphAsync"), in, "RunGraphAsync");
    if (!plan) st = INTERNAL_ERROR;
  }
  const twin::FaultDecision fault = twin::NextRun(node.session_id, node.id);
  if (st == SUCCESS) st = ApplyFault(fault, node, "RunGraphAsync");
  std::vector<void *> out;
  if (st == SUCCESS) st = MakeHostOutputs(*plan, outs, &out);
  if (st == SUCCESS) st = RunPlan(node, *plan, in, out, "RunGraphAsync");
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
  Status st = SUCCESS;
  uint32_t injected = 0;
  if (twin::PreRunFails(node.session_id, node.id, &injected)) {
    twin::ReportError("RunGraphAsync: pre-run of graph (graph_id=" + std::to_string(node.id) + ") failed with status " +
                      std::to_string(injected) + " (fault injected by the twin)");
    st = injected == SUCCESS ? FAILED : injected;
  }
  if (st == SUCCESS) {
    std::lock_guard<std::mutex> lk(node.mu);
    if (!node.compiled) {
      std::vector<ODesc> descs;
      for (const auto &t : run->inputs) {
        descs.emplace_back();
        ReadDesc(t, &descs.back());
      }
      const auto saved = node.data_descs;
      if (descs.size() == node.data_descs.size()) node.data_descs = descs;
      st = CompileLocked(node, "RunGraphAsync");
      if (st != SUCCESS) node.data_descs = saved;
    }
  }
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
  // (in order) to the model thread: hand it over directly and spare two thread wake-ups per run.
  if (impl_->staged.load() == 0 && !run->node->dynamic.load()) {
    twin::WorkQueue *q = run->node->ready_queue.load(std::memory_order_acquire);
    if (q != nullptr && q->Push({ModelStageJob, run}, false) == twin::WorkQueue::PushResult::kOk) {
      return SUCCESS;
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

Status GeSession::RegisterCallBackFunc(const char *key, const RunCallback &callback) {
  GE_SESSION_CHECK("RegisterCallBackFunc");
  if (key == nullptr || !callback) {
    twin::ReportError("RegisterCallBackFunc: key and callback are required");
    return PARAM_INVALID;
  }
  return SUCCESS;  // the twin's graphs have no summary/checkpoint nodes that would call it
}

CompiledGraphSummaryPtr GeSession::GetCompiledGraphSummary(uint32_t graph_id) {
  if (!impl_ || !impl_->Usable("GetCompiledGraphSummary")) return nullptr;
  auto node = impl_->Find(graph_id, "GetCompiledGraphSummary");
  if (!node) return nullptr;
  std::lock_guard<std::mutex> lk(node->mu);
  if (!node->compiled) {
    twin::ReportError("GetCompiledGraphSummary: graph (graph_id=" + std::to_string(graph_id) + ") is not compiled");
    return nullptr;
  }
  bool is_static = true;
  for (const auto &d : node->data_descs) is_static = is_static && d.IsStatic();
  size_t const_size = 0, feature_size = 0;
  if (is_static && !node->plans.empty()) {
    const_size = node->plans.front().second->const_bytes();
    feature_size = node->plans.front().second->workspace_bytes();
  }
  std::vector<Shape> shapes;
  std::vector<DataType> dtypes;
  for (const auto &d : node->compiled_outputs) {
    shapes.emplace_back(d.dims);
    dtypes.push_back(static_cast<DataType>(d.dtype));
  }
  auto s = std::make_shared<CompiledGraphSummary>();
  twin::SummaryAccess::Fill(*s, is_static, const_size, feature_size, std::move(shapes), std::move(dtypes));
  return s;
}

Status GeSession::RegisterExternalAllocator(const void *const stream, AllocatorPtr allocator) const {
  GE_SESSION_CHECK("RegisterExternalAllocator");
  if (stream == nullptr || !allocator) {
    twin::ReportError("RegisterExternalAllocator: stream and allocator must not be null");
    return PARAM_INVALID;
  }
  std::lock_guard<std::mutex> lk(Externals().mu);
  Externals().by_stream[stream] = std::move(allocator);  // process-wide; the last registration wins
  return SUCCESS;
}

Status GeSession::UnregisterExternalAllocator(const void *const stream) const {
  GE_SESSION_CHECK("UnregisterExternalAllocator");
  AllocatorPtr dropped;  // released outside the lock: its destructor may call back into its owner
  {
    std::lock_guard<std::mutex> lk(Externals().mu);
    auto it = Externals().by_stream.find(stream);
    if (it != Externals().by_stream.end()) {
      dropped = std::move(it->second);
      Externals().by_stream.erase(it);
    }
  }
  return SUCCESS;
}
}  // namespace ge

// --- twin-only controls --------------------------------------------------------------------------------------
extern "C" void geasync_twin_live_counters(geasync_twin_counters *out) {
  if (out == nullptr) return;
  out->ge_sessions = ge::g_live_sessions.load();
  out->ge_graphs = ge::g_live_graph_nodes.load();
  out->host_output_blocks = ge::g_live_host_blocks.load();
  out->device_output_blocks = ge::g_live_mem_blocks.load();
  out->device_allocations = twin::acl::LiveDeviceAllocations();
  out->streams = twin::acl::LiveStreams();
}
