// Internals of the GE twin's GeSession, shared by its files (not part of GE's API):
//   ge_session.cc        sessions, the graph registry and the compile/load/summary entry points
//   ge_graph_compile.cc  compiling and loading a graph, the per-graph cache of shape-specialised plans
//   ge_graph_run.cc      the steps every run takes (mode check, input check, fault, execution), RunGraph and
//                        RunGraphWithStreamAsync
//   ge_async_pipeline.cc RunGraphAsync's compile -> executor -> per-model thread pipeline
//   ge_output_memory.cc  outputs owned through TensorData managers, built-in and external allocators
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "faults.h"
#include "ge_internal.h"

namespace ge {
using twin::onnx::ElemType;
using twin::onnx::Plan;
using ODesc = twin::onnx::TensorDesc;

constexpr size_t kCompileQueueCapacity = 2048;  // GE: a further submit blocks the caller
// GE's thread names (prctl / pthread names are cut to 15 characters).
constexpr const char *kCompileThread = "ge_comp_prerunV2";
constexpr const char *kExecutorThread = "ge_mdlexecrun";

enum class RunMode { kNone, kRunGraph, kRunGraphAsync, kRunGraphWithStreamAsync };

class BuiltinAllocator;  // ge_output_memory.cc

// One graph added to a session (GE's graph node): model, run mode, compile/load state, plans, model thread.
struct GraphNode {
  GraphNode(uint64_t sid, uint32_t graph_id, std::shared_ptr<const twin::onnx::Model> m);
  ~GraphNode();
  GraphNode(const GraphNode &) = delete;
  GraphNode &operator=(const GraphNode &) = delete;

  const uint64_t session_id;
  const uint32_t id;
  const std::shared_ptr<const twin::onnx::Model> model;
  std::map<std::string, std::string> options;

  std::mutex mu;  // guards everything below except the atomics
  // Set once (kNone -> a mode) under `mu`; read without it by ClaimMode's fast path, which every submit takes
  // while the model thread holds `mu` for its own reads.
  std::atomic<RunMode> mode{RunMode::kNone};
  std::vector<ODesc> data_descs;  // the Data nodes' descs (CompileGraph with inputs updates them)
  bool compiled = false;
  bool loaded = false;
  bool need_rebuild = false;
  std::vector<ODesc> compiled_outputs;
  std::list<std::pair<std::vector<ODesc>, std::shared_ptr<Plan>>> plans;  // by input descs, most recently used first
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
  // Set at shutdown: a run or compile still going stops at its next Loop iteration (see StopFlagScope).
  std::atomic<bool> stopping{false};
};

class SessionImpl {
 public:
  explicit SessionImpl(uint64_t sid);
  ~SessionImpl();

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

  // Stops the session's threads and every graph's model thread (GEFinalizeV2 or the GeSession's destructor).
  void Shutdown();

  // Returns the node or reports GE's "graph does not exist" error.
  std::shared_ptr<GraphNode> Find(uint32_t graph_id, const char *api);

  // False (message reported) before GEInitializeV2 or after GEFinalizeV2 finalized the session.
  bool Usable(const char *api);
};

// GeSession's entry points start with it: an invalid or unusable session fails with GE's message.
#define GE_SESSION_CHECK(api)                                          \
  do {                                                                 \
    if (!impl_) {                                                      \
      twin::ReportError(std::string(api) + ": the session is invalid"); \
      return FAILED;                                                   \
    }                                                                  \
    if (!impl_->Usable(api)) return FAILED;                            \
  } while (0)

// --- ge_graph_compile.cc ---
// Compiles node from its Data descs (node->mu held). GE: CompileGraph does shape/dtype inference.
Status CompileLocked(GraphNode &node, const char *api);
Status EnsureLoaded(GraphNode &node, const char *api);
// Shape-specialised plan for concrete input descs (compiled on first use, LRU-capped).
std::shared_ptr<Plan> GetPlan(GraphNode &node, const std::vector<ODesc> &descs, const char *api);
// The plan specialised for the run's input values when plan is value-dependent, else plan itself.
std::shared_ptr<Plan> ForValues(const GraphNode &node, std::shared_ptr<Plan> plan,
                                const std::vector<const void *> &in, const char *api);

// --- ge_graph_run.cc ---
// An input tensor's dtype and storage dims as the engine's desc (reuses desc's dims buffer).
void ReadDesc(const gert::Tensor &t, ODesc *desc);
// Checks the run's inputs against the graph's Data nodes; fills descs and data pointers.
Status CheckInputs(GraphNode &node, const std::vector<gert::Tensor> &inputs, const char *api,
                   std::vector<ODesc> *descs, std::vector<const void *> *ptrs);
Status RunPlan(GraphNode &node, Plan &plan, const std::vector<const void *> &in, const std::vector<void *> &out,
               const char *api);
// Applies an injected fault's delay and failure to a run (twin-only test control). Returns SUCCESS to go on.
Status ApplyFault(const twin::FaultDecision &f, const GraphNode &node, const char *api);
// Checks the graph's run mode; with `record`, a graph with no mode yet takes this one. Returns false (message
// reported) on a conflict.
bool ClaimMode(GraphNode &node, RunMode mode, bool record = true);

struct RunningGuard {
  explicit RunningGuard(GraphNode &n) : node(n) { node.running.fetch_add(1); }
  ~RunningGuard() { node.running.fetch_sub(1); }
  GraphNode &node;
};

// --- ge_output_memory.cc ---
// Allocates host outputs owned by TensorData managers.
Status MakeHostOutputs(const Plan &plan, std::vector<gert::Tensor> &outputs, std::vector<void *> *ptrs);
// A stream run's outputs: the caller's addresses if every output has one (each checked to be large enough),
// else device memory from the stream's allocator (registered external one, else the graph's built-in one).
Status MakeStreamOutputs(GraphNode &node, void *stream, const std::vector<ODesc> &descs, const char *api,
                         std::vector<gert::Tensor> *outputs, std::vector<void *> *ptrs);
int64_t LiveHostOutputBlocks();
int64_t LiveDeviceOutputBlocks();
}  // namespace ge
