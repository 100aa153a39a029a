// GE twin: class GeSession with GE v2's observable behaviour (checked against hicann/ge, see docs/fidelity.md).
// This file: sessions, the graph registry and the compile/load/summary entry points; the run modes and output
// memory are in the files ge_session_internal.h lists.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>

#include "acl/acl_rt.h"
#include "acl_internal.h"
#include "ge_session_internal.h"
#include "memory_limits.h"
#include "twin/twin_control.h"

namespace ge {
namespace {
std::atomic<int64_t> g_live_sessions{0};
std::atomic<int64_t> g_live_graph_nodes{0};
std::atomic<uint64_t> g_next_session_id{0};

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

// GE's parse of "ge.exec.frozenInputIndexes" (GraphNode::ParseFrozenInputIndex, run by LoadGraph): entries split
// by ';', each an input index or "index,address,length", digits (and spaces) only, the index an int32, address and
// length non-zero uint64s. Empty when the value is valid, else why not (GE fails the load on it).
std::string FrozenInputProblem(const std::string &value) {
  if (value.empty()) return "";
  auto split = [](const std::string &s, char delim) {  // GE's StringUtils::Split: a trailing delim adds ""
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t k = 0; k <= s.size(); ++k) {
      if (k == s.size() || s[k] == delim) {
        parts.push_back(s.substr(start, k - start));
        start = k + 1;
      }
    }
    return parts;
  };
  for (const auto &entry : split(value, ';')) {
    const auto fields = split(entry, ',');
    if (fields.size() != 1 && fields.size() != 3) {
      return "entry '" + entry + "' has " + std::to_string(fields.size()) +
             " field(s): each entry is an input index or 'index,address,length'";
    }
    for (const auto &f : fields) {
      for (const char ch : f) {
        if (ch != ' ' && !std::isdigit(static_cast<unsigned char>(ch))) {
          return "E10001: value '" + f + "' is not valid: the frozen input index is not a digit";
        }
      }
    }
    // what std::stoi / std::stoull accept: leading spaces, then digits; an index may not end in spaces
    const std::string &index = fields[0];
    const size_t first = index.find_first_not_of(' ');
    const std::string digits = first == std::string::npos ? "" : index.substr(first);
    const std::string trimmed = digits.substr(std::min(digits.find_first_not_of('0'), digits.size()));
    if (digits.empty() || digits.find(' ') != std::string::npos || trimmed.size() > 10 ||
        (!trimmed.empty() && std::stoll(trimmed) > INT32_MAX)) {
      return "input index '" + index + "' is not an int32";
    }
    for (size_t k = 1; k < fields.size(); ++k) {
      const std::string &f = fields[k];
      const size_t start = f.find_first_not_of(' ');
      if (start == std::string::npos) return "entry '" + entry + "' has an empty address or length";
      size_t end = f.find(' ', start);
      const std::string digits = f.substr(start, end == std::string::npos ? std::string::npos : end - start);
      const std::string trimmed = digits.substr(std::min(digits.find_first_not_of('0'), digits.size()));
      if (trimmed.size() > 20 || (trimmed.size() == 20 && trimmed > "18446744073709551615")) {
        return "entry '" + entry + "': '" + digits + "' is out of the uint64 range";
      }
      if (trimmed.empty()) {
        return std::string("entry '") + entry + "': the frozen input " + (k == 1 ? "address" : "length") +
               " cannot be zero";
      }
    }
  }
  return "";
}

// The graph's parsed model, or null after reporting that it has none (GE refuses an empty graph the same way).
std::shared_ptr<GraphImpl> ParsedGraph(const char *api, const Graph &graph) {
  auto gimpl = twin::GraphAccess::Impl(graph);
  if (!gimpl) twin::ReportError(std::string(api) + ": the graph is empty (parse a model into it first)");
  return gimpl;
}
}  // namespace

GraphNode::GraphNode(uint64_t sid, uint32_t graph_id, std::shared_ptr<const twin::onnx::Model> m)
    : session_id(sid), id(graph_id), model(std::move(m)) {
  for (const auto &in : model->inputs()) data_descs.push_back(in.desc);
  g_live_graph_nodes.fetch_add(1);
}

GraphNode::~GraphNode() {
  if (model_queue) model_queue->Stop();
  g_live_graph_nodes.fetch_sub(1);
}

SessionImpl::SessionImpl(uint64_t sid) : id(sid) { g_live_sessions.fetch_add(1); }
SessionImpl::~SessionImpl() { g_live_sessions.fetch_sub(1); }

void SessionImpl::Shutdown() {
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
      n->stopping.store(true);  // before n->mu: a compile holding it may be running a loop
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

std::shared_ptr<GraphNode> SessionImpl::Find(uint32_t graph_id, const char *api) {
  std::lock_guard<std::mutex> lk(mu);
  auto it = graphs.find(graph_id);
  if (it == graphs.end()) {
    twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(graph_id) +
                      ") does not exist in session " + std::to_string(id) + "; add it with AddGraph first");
    return nullptr;
  }
  return it->second;
}

bool SessionImpl::Usable(const char *api) {
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

void FinalizeSessionImpl(SessionImpl *s) { s->Shutdown(); }

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

Status GeSession::AddGraph(uint32_t graph_id, const Graph &graph) { return AddGraph(graph_id, graph, {}); }

Status GeSession::AddGraph(uint32_t graph_id, const Graph &graph,
                           const std::map<AscendString, AscendString> &options) {
  GE_SESSION_CHECK("AddGraph");
  auto gimpl = ParsedGraph("AddGraph", graph);
  if (!gimpl) return PARAM_INVALID;
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
  auto gimpl = ParsedGraph("AddGraphClone", graph);
  if (!gimpl) return PARAM_INVALID;
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
  {
    // GE reads the option from the graph's options, then LoadGraph's, then the session's, and fails the load on a
    // malformed value (which would otherwise be accepted here and refused on the NPU)
    std::string frozen;
    auto from = [&frozen](const std::map<std::string, std::string> &opts) {
      auto it = opts.find("ge.exec.frozenInputIndexes");
      if (frozen.empty() && it != opts.end()) frozen = it->second;
    };
    from(node->options);
    from(ToStd(options));
    from(impl_->options);
    const std::string problem = FrozenInputProblem(frozen);
    if (!problem.empty()) {
      twin::ReportError("LoadGraph: graph (graph_id=" + std::to_string(graph_id) +
                        "): option ge.exec.frozenInputIndexes='" + frozen + "' is invalid: " + problem);
      return FAILED;
    }
  }
  return EnsureLoaded(*node, "LoadGraph");
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
}  // namespace ge

// --- twin-only controls --------------------------------------------------------------------------------------
extern "C" void geasync_twin_live_counters(geasync_twin_counters *out) {
  if (out == nullptr) return;
  out->ge_sessions = ge::g_live_sessions.load();
  out->ge_graphs = ge::g_live_graph_nodes.load();
  out->host_output_blocks = ge::LiveHostOutputBlocks();
  out->device_output_blocks = ge::LiveDeviceOutputBlocks();
  out->device_allocations = twin::acl::LiveDeviceAllocations();
  out->streams = twin::acl::LiveStreams();
}

