// GE twin: compiling and loading a graph on demand, and the per-graph cache of shape-specialised plans.
#include "ge_session_internal.h"
#include "memory_limits.h"

namespace ge {
namespace {
// Shape-specialised plans kept per graph (dynamic shapes): 16, and up to 64 while their intermediates take at most
// 256 MB in all. A decoder's plans (one per past length, their weights shared) are small, and a service decoding
// request after request meets the same lengths again; a CNN's plans for large maps are not.
constexpr size_t kPlansKept = 16, kMaxPlansKept = 64;
constexpr uint64_t kPlanWorkspaceBudget = uint64_t(256) << 20;

// Whether a cached plan was specialised for these input descriptions (compared in place: a run looks its plan up
// on every call, and a formatted key cost more than the rest of the lookup).
bool SameDescs(const std::vector<ODesc> &a, const std::vector<ODesc> &b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].dtype != b[i].dtype || a[i].dims != b[i].dims) return false;
  return true;
}

// Plans may be value-dependent (an output shape depends on an input's contents, e.g. a Reshape shape fed as a
// graph input): the run then uses the plan the engine specialises for that run's input values.
twin::onnx::CompileOptions ValueDependentOk(const GraphNode &node) {
  twin::onnx::CompileOptions o;
  o.allow_value_dependent = true;
  o.max_memory_bytes = twin::SessionMemoryLimit(node.session_id);  // geasync.max_memory_bytes
  return o;
}
}  // namespace

std::shared_ptr<Plan> ForValues(const GraphNode &node, std::shared_ptr<Plan> plan,
                                const std::vector<const void *> &in, const char *api) {
  if (!plan || !plan->value_dependent()) return plan;
  std::string error;
  const twin::onnx::StopFlagScope stop(&node.stopping);
  auto p = plan->Specialize(in, &error);
  if (!p)
    twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(node.id) +
                      ") cannot run with these inputs: " + error);
  return p;
}

Status CompileLocked(GraphNode &node, const char *api) {
  std::string error;
  const twin::onnx::StopFlagScope stop(&node.stopping);  // inference runs loops with constant inputs
  std::vector<ODesc> outs;
  if (!twin::onnx::InferShapes(*node.model, node.data_descs, &outs, &error,
                               twin::SessionMemoryLimit(node.session_id))) {
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
    node.plans.emplace_front(node.data_descs, std::shared_ptr<Plan>(std::move(plan)));
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

std::shared_ptr<Plan> GetPlan(GraphNode &node, const std::vector<ODesc> &descs, const char *api) {
  std::lock_guard<std::mutex> lk(node.mu);
  for (auto it = node.plans.begin(); it != node.plans.end(); ++it) {
    if (SameDescs(it->first, descs)) {
      node.plans.splice(node.plans.begin(), node.plans, it);
      return node.plans.front().second;
    }
  }
  std::string error;
  const twin::onnx::StopFlagScope stop(&node.stopping);
  twin::onnx::CompileOptions options = ValueDependentOk(node);
  // The last plan used lends the kernels the new shapes leave as they were (a decoder's next past length: all but
  // those around attention); runs of a graph's plans never overlap (exec_mu), as sharing requires.
  if (!node.plans.empty()) options.donor = node.plans.front().second;
  auto plan = twin::onnx::CompilePlan(node.model, descs, options, &error);
  if (!plan) {
    twin::ReportError(std::string(api) + ": graph (graph_id=" + std::to_string(node.id) +
                      ") cannot run with these inputs: " + error);
    return nullptr;
  }
  node.plans.emplace_front(descs, std::shared_ptr<Plan>(std::move(plan)));
  uint64_t workspace = 0;
  for (const auto &p : node.plans) workspace += p.second->workspace_bytes();
  while (node.plans.size() > kMaxPlansKept || (node.plans.size() > kPlansKept && workspace > kPlanWorkspaceBudget)) {
    workspace -= node.plans.back().second->workspace_bytes();
    node.plans.pop_back();
  }
  return node.plans.front().second;
}
}  // namespace ge
