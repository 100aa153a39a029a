// Graph-level shape inference and constant folding (Analyze), and the public InferShapes entry point.
// Per-op rules live with each op's OpDef::infer in ops_*.cc.
#include <unistd.h>

#include <new>

#include "analysis.h"
#include "common.h"
#include "op_registry.h"
#include "shared_const.h"

namespace twin {
namespace onnx {
namespace {

// Folding while only inferring shapes is for small shape-like tensors; big ones are left to CompilePlan.
constexpr int64_t kInferFoldLimit = int64_t(1) << 16;
// Compile folds only values up to this size: a bigger one (a ConstantOfShape filling an output) would be held by
// the plan for its lifetime and copied into every run's output; computed at run time it is written in place.
constexpr uint64_t kCompileFoldBytes = uint64_t(1) << 20;
// A bigger value is still folded when it is at most this many times the size of its constant inputs: weights stored
// quantised or in float16 (DequantizeLinear, Cast, a Transpose of an initializer) would otherwise be recomputed on
// every run and reach Conv / MatMul as run-time values, which cannot be packed when the plan is built (a resnet18
// saved in the QDQ format ran at 18x onnxruntime's time). 8 covers 4-bit weights dequantised to float32.
constexpr uint64_t kFoldGrowth = 8;
// A bigger value that only ever reaches operands an op prepares from constants (Conv / MatMul weights, normalisation
// parameters; see FeedsOnlyWeights) is folded too, up to this size, while the plan's folded constants stay within a
// quarter of its memory limit (else it is computed at run time, in the arena, where its bytes are reused once
// consumed). A ConstantOfShape, Expand or Tile of a small constant (weights of a model saved without their values)
// is otherwise refilled on every run and reaches Conv / MatMul as a run-time value that cannot be packed: onnx's
// "light" resnet50 took 2.7x onnxruntime's CPU time that way, 1.7x folded. Other uses (a big fill added to an
// input) keep the run-time fill, written where it is consumed instead of held by the plan.
constexpr uint64_t kInternalFoldBytes = uint64_t(1) << 30;

}  // namespace

bool CheckInputDescs(const ModelImpl &m, const std::vector<TensorDesc> &inputs, bool need_static, std::string *err) {
  if (inputs.size() != m.inputs_.size()) {
    *err = "model '" + m.graph_name_ + "' has " + std::to_string(m.inputs_.size()) + " inputs, got descs for " +
           std::to_string(inputs.size());
    return false;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc &want = m.inputs_[i].desc;
    const TensorDesc &got = inputs[i];
    const std::string who = "input '" + m.inputs_[i].name + "'";
    if (got.dtype != want.dtype && want.dtype != ElemType::kUndefined) {  // undefined: an untyped subgraph input
      *err = who + ": dtype " + ElemTypeName(got.dtype) + " does not match the model's " + ElemTypeName(want.dtype);
      return false;
    }
    if (m.input_rank_known_[i]) {
      bool ok = got.dims.size() == want.dims.size();
      for (size_t d = 0; ok && d < got.dims.size(); ++d)
        if (want.dims[d] >= 0 && got.dims[d] >= 0 && want.dims[d] != got.dims[d]) ok = false;
      if (!ok) {
        *err = who + ": shape " + ShapeStr(got.dims) + " does not match the model's " + ShapeStr(want.dims);
        return false;
      }
    }
    if (!need_static && !m.input_rank_known_[i] && got.IsUnknownRank()) continue;  // see InferShapes
    int64_t n;
    std::string reason;
    if (!CheckedNumElements(got.dims, &n, &reason)) {
      *err = who + ": " + reason;
      return false;
    }
    if (need_static && !got.IsStatic()) {
      *err = who + ": shape " + ShapeStr(got.dims) + " is not fully known";
      return false;
    }
  }
  return true;
}

namespace {
// --- Analyze's steps ---

// Resets a and records what is known before any node: the inputs' descs (and bound contents), the initializers.
void SeedKnownValues(const ModelImpl &m, const std::vector<TensorDesc> &inputs, const std::vector<const void *> *bound,
                     Analysis *a) {
  const size_t nv = m.values_.size();
  a->desc.assign(nv, TensorDesc());
  a->cdata.assign(nv, nullptr);
  a->node_folded.assign(m.nodes_.size(), 0);
  a->model_const.assign(nv, 0);
  a->node_out.assign(m.nodes_.size(), {});
  a->missing_value = -1;
  for (size_t i = 0; i < m.input_values_.size(); ++i) {
    a->desc[m.input_values_[i]] = inputs[i];
    if (bound && i < bound->size() && (*bound)[i])
      a->cdata[m.input_values_[i]] = inputs[i].Bytes() ? (*bound)[i] : EmptyTensorData();
  }
  for (size_t v = 0; v < nv; ++v) {
    const Value &val = m.values_[v];
    if (val.kind != ValueKind::kInitializer) continue;
    const ConstTensor &t = *m.initializers_[val.index];
    a->desc[v] = t.desc;
    a->cdata[v] = t.data.empty() ? EmptyTensorData() : t.data.data();
    a->model_const[v] = 1;
  }
}

// Runs the op's inference rule on the node's input descs; on failure also records a missing value-dependent input.
bool InferNode(const ModelImpl &m, const Node &n, bool compile, InferCtx *ctx, Analysis *a, std::string *err) {
  // ctx is Analyze's, reused node after node (its vectors keep their capacity: a plan per new shape is built often)
  ctx->in.clear();
  ctx->in_data.clear();
  ctx->missing_input = -1;
  ctx->node = &n;
  ctx->opset = m.opset_;
  ctx->need_static = compile;
  ctx->memory_limit = a->memory_limit;
  for (int vid : n.inputs) {
    ctx->in.push_back(vid < 0 ? nullptr : &a->desc[vid]);
    ctx->in_data.push_back(vid < 0 ? nullptr : a->cdata[vid]);
  }
  ctx->out.resize(n.outputs.size());
  for (TensorDesc &d : ctx->out) {
    d.dtype = ElemType::kUndefined;
    d.dims.clear();
  }
  std::string reason;
  if (n.op->infer(ctx, &reason)) return true;
  *err = n.Where() + reason;
  if (ctx->missing_input >= 0 && static_cast<size_t>(ctx->missing_input) < n.inputs.size())
    a->missing_value = n.inputs[ctx->missing_input];
  return false;
}

// One inferred output: size limits, a known dtype, and a static shape when compiling. *count: its element count
// (-1 when not static).
bool CheckInferredOutput(const Node &n, size_t o, const TensorDesc &d, bool compile, int64_t *count,
                         std::string *err) {
  std::string reason;
  if (!CheckedNumElements(d.dims, count, &reason)) {
    *err = n.Where() + "output '" + n.output_names[o] + "': " + reason;
    return false;
  }
  if (d.dtype == ElemType::kUndefined) {
    *err = n.Where() + "could not infer the dtype of output '" + n.output_names[o] + "'";
    return false;
  }
  if (*count > 0 && static_cast<uint64_t>(*count) * ElemSize(d.dtype) > kMaxTensorBytes) {
    *err = n.Where() + "output '" + n.output_names[o] + "' of shape " + ShapeStr(d.dims) +
           " would need more than 1 TiB";
    return false;
  }
  if (*count < 0 && compile) {
    *err = n.Where() + "shape of output '" + n.output_names[o] + "' " + ShapeStr(d.dims) +
           " cannot be determined at compile time";
    return false;
  }
  return true;
}

// Checks and records the node's output descs. *total: their element count, -1 when any is not static.
bool RecordNodeOutputs(const Node &n, const InferCtx &ctx, bool compile, Analysis *a, int64_t *total,
                       std::string *err) {
  *total = 0;
  bool all_static = true;
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    int64_t count;
    if (!CheckInferredOutput(n, o, ctx.out[o], compile, &count, err)) return false;
    if (count < 0) all_static = false;
    else *total += count;
    if (n.outputs[o] >= 0) a->desc[n.outputs[o]] = ctx.out[o];
  }
  if (!all_static) *total = -1;
  return true;
}

bool InputsKnown(const Node &n, const Analysis &a) {
  for (int vid : n.inputs)
    if (vid >= 0 && !a.cdata[vid]) return false;
  return true;
}

enum class Fold { kNo, kYes, kIfRoom };  // kIfRoom: only while the plan's memory limit allows (else left to run time)

// Who reads each value (node, operand slot) and which values the graph outputs: built once per Analyze, at the
// first big fold candidate, so that FeedsOnlyWeights costs the value's uses, not a scan of every node.
class Uses {
 public:
  explicit Uses(const ModelImpl &m) : m_(m) {}
  const std::vector<std::pair<int, int>> &Of(int vid) {
    Build();
    return by_value_[static_cast<size_t>(vid)];
  }
  bool IsGraphOutput(int vid) {
    Build();
    return graph_output_[static_cast<size_t>(vid)] != 0;
  }

 private:
  void Build() {
    if (built_) return;
    built_ = true;
    by_value_.resize(m_.values_.size());
    graph_output_.assign(m_.values_.size(), 0);
    for (size_t k = 0; k < m_.nodes_.size(); ++k) {
      const Node &c = m_.nodes_[k];
      for (size_t slot = 0; slot < c.inputs.size(); ++slot)
        if (c.inputs[slot] >= 0)
          by_value_[static_cast<size_t>(c.inputs[slot])].emplace_back(static_cast<int>(k), static_cast<int>(slot));
    }
    for (int out : m_.output_values_)
      if (out >= 0) graph_output_[static_cast<size_t>(out)] = 1;
  }
  const ModelImpl &m_;
  bool built_ = false;
  std::vector<std::vector<std::pair<int, int>>> by_value_;
  std::vector<char> graph_output_;
};

// Operand `slot` of `op` is one the op prepares from its contents when they are known at compile time (packed
// weights, folded normalisation parameters).
bool IsWeightOperand(const std::string &op, size_t slot) {
  if (op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "BatchNormalization" ||
      op == "InstanceNormalization" || op == "LayerNormalization" || op == "GroupNormalization" || op == "PRelu")
    return slot >= 1;
  if (op == "QLinearConv") return slot >= 3;
  return op == "MatMul" || op == "Gemm" || op == "MatMulInteger";
}

// Ops that pass values on unchanged or elementwise-converted (a weight may go through them on its way).
bool IsWeightPath(const std::string &op) {
  return op == "Cast" || op == "Reshape" || op == "Transpose" || op == "Identity" || op == "Squeeze" ||
         op == "Unsqueeze" || op == "Flatten" || op == "DequantizeLinear";
}

// Every use of value `vid` is a weight operand, directly or through IsWeightPath ops (depth-limited).
bool FeedsOnlyWeights(const ModelImpl &m, Uses *uses, int vid, int depth) {
  if (depth > 4 || uses->IsGraphOutput(vid)) return false;
  const std::vector<std::pair<int, int>> &readers = uses->Of(vid);
  for (const auto &use : readers) {
    const Node &c = m.nodes_[static_cast<size_t>(use.first)];
    const size_t slot = static_cast<size_t>(use.second);
    if (!c.domain.empty() && c.domain != "ai.onnx") return false;
    if (slot >= c.inputs.size() - c.implicit_inputs) return false;  // read by a subgraph
    if (IsWeightOperand(c.op_type, slot)) continue;
    if (!IsWeightPath(c.op_type) || slot != 0 || c.outputs.empty() || c.outputs[0] < 0) return false;
    if (!FeedsOnlyWeights(m, uses, c.outputs[0], depth + 1)) return false;
  }
  return !readers.empty();
}

// Folded: a foldable op whose inputs are all known (a shape-only op reads descs only), with static outputs, small
// enough to infer cheaply or to keep with the plan.
Fold WorthFolding(const ModelImpl &m, const Node &n, const InferCtx &ctx, const Analysis &a, bool compile,
                  int64_t total, Uses *uses) {
  const OpDef &op = *n.op;
  if (!op.foldable || n.nondeterministic || !(op.shape_only || InputsKnown(n, a))) return Fold::kNo;
  if (total < 0 || (!compile && total > kInferFoldLimit)) return Fold::kNo;
  if (op.shape_only) {  // the Shape of a tensor with unknown (-1) dims has no value yet
    for (int vid : n.inputs)
      if (vid >= 0 && !a.desc[vid].IsStatic()) return Fold::kNo;
    return Fold::kYes;
  }
  uint64_t out_bytes = 0, in_bytes = 0;
  for (const TensorDesc &d : ctx.out) out_bytes += d.Bytes();
  for (const TensorDesc *d : ctx.in)
    if (d) in_bytes += d->Bytes();
  if (out_bytes <= kCompileFoldBytes || (compile && out_bytes <= kFoldGrowth * in_bytes)) return Fold::kYes;
  if (compile && out_bytes <= kInternalFoldBytes && n.outputs.size() == 1 && n.outputs[0] >= 0 &&
      FeedsOnlyWeights(m, uses, n.outputs[0], 0))
    return Fold::kIfRoom;
  return Fold::kNo;
}

// Folded values stay with the plan: they count against its memory limit.
bool FoldWithinMemoryLimit(const Node &n, const InferCtx &ctx, const Kernel &kernel, const Analysis &a,
                           std::string *err) {
  if (!a.memory_limit) return true;
  uint64_t need = a.folded_bytes + kernel.scratch_bytes();
  for (const TensorDesc &d : ctx.out) need += d.Bytes();
  if (need <= a.memory_limit) return true;
  *err = n.Where() + MemoryLimitError("folding its constant inputs at compile time", need, a.memory_limit);
  return false;
}

// Runs the kernel into fresh buffers (bufs own them, outs are their addresses).
bool RunFoldKernel(const Node &n, const InferCtx &ctx, Kernel *kernel,
                   std::vector<std::shared_ptr<std::vector<uint8_t>>> *bufs, std::vector<void *> *outs,
                   std::string *err) {
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    bufs->push_back(std::make_shared<std::vector<uint8_t>>(ctx.out[o].Bytes()));
    outs->push_back(bufs->back()->empty() ? const_cast<void *>(EmptyTensorData()) : bufs->back()->data());
  }
  std::vector<uint8_t> scratch;
  if (const size_t sb = kernel->scratch_bytes()) {
    scratch.resize(sb + 64);
    uint8_t *p = scratch.data();
    kernel->set_scratch(p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64);
  }
  std::string reason;
  if (kernel->Run(ctx.in_data.data(), outs->data(), &reason)) return true;
  *err = n.Where() + reason;
  return false;
}

// Folded outputs shared by the plans of a model (FoldNode), kept alive by each plan holding one of them.
struct SharedFold {
  std::vector<std::shared_ptr<std::vector<uint8_t>>> bufs;
};

// Fold: run the kernel now, keep the results as constants.
// if_room: a fold the memory limit has no room for is skipped (*folded false) instead of failing the compile.
bool FoldNode(const ModelImpl &m, const Node &n, const InferCtx &ctx, bool if_room, Analysis *a, bool *folded,
              std::string *err) {
  *folded = false;
  KernelCtx kctx;
  kctx.node = &n;
  kctx.opset = m.opset_;
  kctx.in = ctx.in;
  kctx.in_data = ctx.in_data;
  kctx.out = ctx.out;
  kctx.memory_limit = a->memory_limit;
  std::string reason;
  std::unique_ptr<Kernel> kernel = n.op->prepare(kctx, &reason);
  if (!kernel) {
    *err = n.Where() + reason;
    return false;
  }
  if (if_room && a->memory_limit) {
    uint64_t out_bytes = 0;
    for (const TensorDesc &d : ctx.out) out_bytes += d.Bytes();
    if (a->folded_bytes + out_bytes > a->memory_limit / 4) return true;
  }
  if (!FoldWithinMemoryLimit(n, ctx, *kernel, *a, err)) {
    if (!if_room) return false;
    err->clear();
    return true;
  }
  std::vector<std::shared_ptr<std::vector<uint8_t>>> bufs;
  std::vector<void *> outs;
  bool from_model = true;
  for (int vid : n.inputs) from_model = from_model && (vid < 0 || a->model_const[vid]);
  if (from_model) {
    // The same in every plan of the model (a dequantised or widened weight: megabytes): folded once, shared. The
    // node is the key: the model owns it, and every plan holding the result holds the model.
    auto made = std::static_pointer_cast<const SharedFold>(SharedDerivedRaw(&n, "folded node", {}, [&]() {
      auto f = std::make_shared<SharedFold>();
      std::vector<void *> ptrs;
      if (!RunFoldKernel(n, ctx, kernel.get(), &f->bufs, &ptrs, err)) f.reset();
      return std::shared_ptr<const void>(std::move(f));
    }));
    if (!made) return false;
    for (const auto &b : made->bufs) {
      bufs.emplace_back(made, b.get());  // owns the whole fold: its entry stays alive with this plan
      outs.push_back(b->empty() ? const_cast<void *>(EmptyTensorData()) : b->data());
    }
  } else if (!RunFoldKernel(n, ctx, kernel.get(), &bufs, &outs, err)) {
    return false;
  }
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (n.outputs[o] < 0) continue;
    a->cdata[n.outputs[o]] = outs[o];
    a->model_const[n.outputs[o]] = from_model;
    a->folded_bytes += bufs[o]->size();
    a->folded_storage.push_back(bufs[o]);
  }
  *folded = true;
  return true;
}

bool AnalyzeNode(const ModelImpl &m, size_t k, bool compile, InferCtx &ctx, Analysis *a, Uses *uses,
                 std::string *err) {
  const Node &n = m.nodes_[k];
  if (!InferNode(m, n, compile, &ctx, a, err)) return false;
  int64_t total;
  if (!RecordNodeOutputs(n, ctx, compile, a, &total, err)) return false;
  a->node_out[k] = ctx.out;
  if (n.const_value) {  // Constant: its value was decoded with the model
    a->cdata[n.outputs[0]] = n.const_value->data.empty() ? EmptyTensorData() : n.const_value->data.data();
    a->model_const[n.outputs[0]] = 1;
    a->node_folded[k] = 1;
    return true;
  }
  const Fold fold = WorthFolding(m, n, ctx, *a, compile, total, uses);
  if (fold == Fold::kNo) return true;
  bool folded;
  if (!FoldNode(m, n, ctx, fold == Fold::kIfRoom, a, &folded, err)) return false;
  a->node_folded[k] = folded ? 1 : 0;
  return true;
}
}  // namespace

bool Analyze(const ModelImpl &m, const std::vector<TensorDesc> &inputs, bool compile, Analysis *a, std::string *err,
             const std::vector<const void *> *bound) {
  if (!CheckInputDescs(m, inputs, compile, err)) return false;
  SeedKnownValues(m, inputs, bound, a);
  InferCtx ctx;
  Uses uses(m);
  for (size_t k = 0; k < m.nodes_.size(); ++k)
    if (!AnalyzeNode(m, k, compile, ctx, a, &uses, err)) return false;
  return true;
}

std::string MemoryLimitError(const std::string &what, uint64_t need, uint64_t limit) {
  return what + " needs " + std::to_string(need) + " bytes, above the memory limit of " + std::to_string(limit) +
         " bytes (Session option geasync.max_memory_bytes; the default is the machine's physical memory): check "
         "the model's declared shapes, or raise the limit";
}

uint64_t DefaultMemoryLimit() {
  static const uint64_t limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : kMaxTensorBytes;
  }();
  return limit;
}

bool InferShapes(const Model &model, const std::vector<TensorDesc> &inputs, std::vector<TensorDesc> *outputs,
                 std::string *error, uint64_t max_memory_bytes) {
  std::string err;
  try {
    const ModelImpl *m = dynamic_cast<const ModelImpl *>(&model);
    if (!m) {
      err = "InferShapes: model was not created by ParseModel";
    } else {
      Analysis a;
      a.memory_limit = max_memory_bytes;
      bool unknown_rank = false;
      for (const TensorDesc &d : inputs) unknown_rank = unknown_rank || d.IsUnknownRank();
      if (unknown_rank) {  // an input of any rank: nothing downstream has a known shape until the run's inputs
        if (!CheckInputDescs(*m, inputs, /*need_static=*/false, &err)) {
          if (error) *error = err;
          return false;
        }
        std::vector<TensorDesc> out(m->outputs_.size());
        for (size_t k = 0; k < out.size(); ++k) out[k] = {m->outputs_[k].desc.dtype, {kUnknownRankDim}};
        if (outputs) *outputs = std::move(out);
        return true;
      }
      if (Analyze(*m, inputs, /*compile=*/false, &a, &err)) {
        std::vector<TensorDesc> out;
        for (int vid : m->output_values_) out.push_back(a.desc[vid]);
        if (outputs) *outputs = std::move(out);
        return true;
      }
    }
  } catch (const std::bad_alloc &) {
    err = "out of memory during shape inference";
  } catch (const std::exception &e) {
    err = std::string("internal error during shape inference: ") + e.what();
  } catch (...) {
    err = "internal error during shape inference";
  }
  if (error) *error = err;
  return false;
}

void MarkInputAncestors(const ModelImpl &m, int vid, std::vector<char> *inputs) {
  std::vector<int> stack = {vid};
  std::vector<char> seen(m.values_.size(), 0);
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (v < 0 || seen[v]) continue;
    seen[v] = 1;
    const Value &val = m.values_[v];
    if (val.kind == ValueKind::kGraphInput) {
      (*inputs)[val.index] = 1;
    } else if (val.kind == ValueKind::kNodeOutput && !m.nodes_[val.index].op->shape_only) {
      for (int u : m.nodes_[val.index].inputs) stack.push_back(u);
    }
  }
}

}  // namespace onnx
}  // namespace twin
