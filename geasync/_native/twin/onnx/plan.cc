// CompilePlan and the Plan implementation: kernels prepared for static shapes, one arena for intermediates with
// lifetime-based reuse, graph outputs written straight into the caller's buffers. Run does no heap allocation.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <new>

#include "analysis.h"
#include "common.h"
#include "intra_op.h"
#include "op_registry.h"

namespace twin {
namespace onnx {
namespace {

constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string DescsStr(const std::vector<TensorDesc> &descs) {
  std::string s;
  for (const TensorDesc &d : descs) s += (s.empty() ? "" : ", ") + ShapeStr(d.dims);
  return "(" + s + ")";
}

// First-fit offset allocator with coalescing free list; sizes are kAlign multiples.
class ArenaAllocator {
 public:
  size_t Alloc(size_t size) {
    size = AlignUp(size);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].second < size) continue;
      size_t off = free_[i].first;
      free_[i].first += size;
      free_[i].second -= size;
      if (free_[i].second == 0) free_.erase(free_.begin() + i);
      return off;
    }
    if (!free_.empty() && free_.back().first + free_.back().second == top_) {  // grow the trailing hole
      size_t off = free_.back().first;
      free_.pop_back();
      top_ = off + size;
      return off;
    }
    size_t off = top_;
    top_ += size;
    return off;
  }
  void Free(size_t off, size_t size) {
    size = AlignUp(size);
    auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, size_t(0)));
    it = free_.insert(it, {off, size});
    size_t i = it - free_.begin();
    if (i + 1 < free_.size() && free_[i].first + free_[i].second == free_[i + 1].first) {
      free_[i].second += free_[i + 1].second;
      free_.erase(free_.begin() + i + 1);
    }
    if (i > 0 && free_[i - 1].first + free_[i - 1].second == free_[i].first) {
      free_[i - 1].second += free_[i].second;
      free_.erase(free_.begin() + i);
    }
  }
  size_t top() const { return top_; }

 private:
  std::vector<std::pair<size_t, size_t>> free_;  // (offset, size), sorted by offset
  size_t top_ = 0;
};

struct Step {
  const Node *node = nullptr;
  std::shared_ptr<Kernel> kernel;  // may be shared with the graph's other plans (CompileOptions::donor)
  void *scratch = nullptr;         // its scratch in this plan's arena, bound before each Run
  // inline for up to 4 inputs / outputs: a plan built per new input shape allocates none for most steps
  SmallVec<int, 4> in_vals, out_vals;  // value ids; -1 omitted input; out slots index into slot table
  size_t scratch_bytes = 0, scratch_off = 0;
  SmallVec<const void *, 4> in_ptrs;   // filled at Run (preallocated)
  SmallVec<void *, 4> out_ptrs;
};

struct FinalCopy {
  int slot;
  size_t out_index;
  size_t bytes;
};

class PlanImpl : public Plan {
 public:
  const std::vector<TensorDesc> &input_descs() const override { return input_descs_; }
  const std::vector<TensorDesc> &output_descs() const override { return output_descs_; }
  size_t const_bytes() const override { return const_bytes_; }
  size_t workspace_bytes() const override { return workspace_bytes_; }
  bool Run(const std::vector<const void *> &inputs, const std::vector<void *> &outputs, std::string *error) override;

  // bound: per graph input, contents to treat as constants (value-specialised plans; copied), or nullptr.
  bool WithinMemoryLimit(const std::vector<TensorDesc> &inputs, uint64_t memory_limit, std::string *err);
  bool Build(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs, uint64_t memory_limit,
             std::string *err, const std::vector<const void *> *bound = nullptr);
  int missing_value() const { return a_.missing_value; }
  // A plan of the same model whose kernels this Build may take over (CompileOptions::donor); during Build only.
  void set_donor(const PlanImpl *donor) { donor_ = donor; }

 private:
  // Build's working tables, per value id (then per slot for the omitted outputs of runtime nodes).
  struct BuildState {
    std::vector<size_t> slot_bytes;
    std::vector<char> in_arena;     // an intermediate: lives in the arena
    std::vector<int> out_binding;   // graph output index a producing step writes directly, or -1
    std::vector<int> uses, sole_user;  // consumers (graph outputs count twice: never fused away)
    std::vector<char> absorbed;     // per node: fused into an earlier step
    std::vector<int> source;        // per value: the value its readers read instead (a dropped copy's input)
  };
  // Build's steps, in order.
  bool BindModel(std::shared_ptr<const Model> model, std::string *err);
  std::vector<const void *> CopyBoundInputs(const std::vector<TensorDesc> &inputs,
                                            const std::vector<const void *> *bound);
  void DescribeIo(const std::vector<TensorDesc> &inputs);
  void InitSlots(BuildState *b);
  void BindOutputsToProducers(BuildState *b);
  void CountUses(BuildState *b) const;
  bool PrepareSteps(BuildState *b, std::string *err);
  KernelCtx KernelCtxFor(size_t k) const;
  bool PrepareStep(size_t k, BuildState *b, std::string *err);
  std::shared_ptr<Kernel> DonorKernel(size_t k) const;
  void AssignOutputSlots(const std::vector<int> &node_outputs, const std::vector<TensorDesc> &out, Step *s,
                         BuildState *b);
  std::vector<size_t> LayOutArena(const BuildState &b);
  int InPlaceSource(size_t st, const BuildState &b, const std::vector<int> &last_use) const;
  bool WithinArenaLimits(const std::vector<TensorDesc> &inputs, uint64_t memory_limit, std::string *err) const;
  void BindArenaSlots(const BuildState &b, const std::vector<size_t> &offset);
  void PlanFinalCopies();

  bool BindIo(const void *p, const TensorDesc &d, const char *what, size_t i, void **slot, std::string *err);
  bool AllocateArena(std::string *err);
  std::unique_ptr<Kernel> TryFuseConv(const KernelCtx &kc, const std::vector<int> &uses,
                                      const std::vector<int> &sole_user, std::vector<char> *absorbed,
                                      std::vector<int> *outputs);
  std::unique_ptr<Kernel> TryFuseQdq(const KernelCtx &kc, const std::vector<int> &uses,
                                     const std::vector<int> &sole_user, std::vector<char> *absorbed,
                                     std::vector<int> *outputs);
  std::unique_ptr<Kernel> TryFuseQdqConv(size_t k, const KernelCtx &kc, const std::vector<int> &uses,
                                         const std::vector<int> &sole_user, std::vector<char> *absorbed,
                                         std::vector<int> *outputs);

  std::shared_ptr<const Model> model_;  // keeps initializers and Constant values alive
  const ModelImpl *m_ = nullptr;
  Analysis a_;
  std::vector<TensorDesc> input_descs_, output_descs_;
  size_t const_bytes_ = 0, workspace_bytes_ = 0;
  std::vector<Step> steps_;
  std::vector<int> step_of_node_;  // per node: its step (-1: folded, fused into another, or a dropped copy)
  const PlanImpl *donor_ = nullptr;
  // Slots: one per value id, then one per omitted output of a runtime node. ptr_[slot] is fixed at compile for
  // constants and arena slots, rebound at each Run for graph inputs and outputs.
  std::vector<void *> ptr_;
  std::vector<int> input_slot_;   // per graph input
  std::vector<int> output_slot_;  // per graph output: slot written directly by a kernel, or -1
  std::vector<FinalCopy> copies_;
  // Intermediates: allocated (not zeroed) by the first Run, so compiling commits no memory; offsets per slot.
  std::unique_ptr<uint8_t[]> arena_storage_;
  std::vector<size_t> arena_offset_;  // per slot, SIZE_MAX if the slot is not in the arena
  std::vector<std::vector<uint8_t>> bound_storage_;  // copies of bound input contents
  std::vector<char> input_bound_;                    // per graph input
};

// Kernels size their tables from their outputs' shapes (a pool's taps per output position, say), so refuse a graph
// before preparing them when one step's outputs, or the graph's outputs, alone exceed the limit: a lower bound of
// what a run would need (the exact figure, with the arena's reuse, is checked after planning).
bool PlanImpl::WithinMemoryLimit(const std::vector<TensorDesc> &inputs, uint64_t memory_limit, std::string *err) {
  uint64_t outputs = 0;
  for (int vid : m_->output_values_) outputs += a_.desc[vid].Bytes();
  uint64_t widest = 0;
  size_t widest_node = 0;
  for (size_t k = 0; k < m_->nodes_.size(); ++k) {
    if (a_.node_folded[k]) continue;
    uint64_t step = 0;
    for (const TensorDesc &d : a_.node_out[k]) step += d.Bytes();
    if (step > widest) widest = step, widest_node = k;
  }
  const uint64_t need = std::max(outputs, widest) + a_.folded_bytes;
  if (need <= memory_limit) return true;
  const std::string what = widest >= outputs ? m_->nodes_[widest_node].Where() + "outputs" : "the graph's outputs";
  *err = MemoryLimitError(what + " for input shapes " + DescsStr(inputs), need, memory_limit);
  return false;
}

bool PlanImpl::Build(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs,
                     uint64_t memory_limit, std::string *err, const std::vector<const void *> *bound) {
  if (!BindModel(std::move(model), err)) return false;
  const std::vector<const void *> bound_ptrs = CopyBoundInputs(inputs, bound);
  a_.memory_limit = memory_limit;
  if (!Analyze(*m_, inputs, /*compile=*/true, &a_, err, bound ? &bound_ptrs : nullptr)) return false;
  DescribeIo(inputs);
  BuildState b;
  InitSlots(&b);
  BindOutputsToProducers(&b);
  CountUses(&b);
  if (!WithinMemoryLimit(inputs, memory_limit, err)) return false;
  if (!PrepareSteps(&b, err)) return false;
  const std::vector<size_t> offset = LayOutArena(b);
  if (!WithinArenaLimits(inputs, memory_limit, err)) return false;
  BindArenaSlots(b, offset);
  PlanFinalCopies();
  return true;
}

bool PlanImpl::BindModel(std::shared_ptr<const Model> model, std::string *err) {
  model_ = std::move(model);
  m_ = dynamic_cast<const ModelImpl *>(model_.get());
  if (!m_) {
    *err = "CompilePlan: model was not created by ParseModel";
    return false;
  }
  return true;
}

// Copies the bound inputs' contents (the caller's buffers may change after compiling); returns their addresses.
std::vector<const void *> PlanImpl::CopyBoundInputs(const std::vector<TensorDesc> &inputs,
                                                    const std::vector<const void *> *bound) {
  input_bound_.assign(inputs.size(), 0);
  std::vector<const void *> bound_ptrs;
  if (!bound) return bound_ptrs;
  bound_storage_.resize(inputs.size());
  bound_ptrs.assign(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size() && i < bound->size(); ++i) {
    if (!(*bound)[i]) continue;
    const uint8_t *src = static_cast<const uint8_t *>((*bound)[i]);
    bound_storage_[i].assign(src, src + inputs[i].Bytes());
    bound_ptrs[i] = bound_storage_[i].empty() ? EmptyTensorData() : bound_storage_[i].data();
    input_bound_[i] = 1;
  }
  return bound_ptrs;
}

void PlanImpl::DescribeIo(const std::vector<TensorDesc> &inputs) {
  input_descs_ = inputs;
  for (int vid : m_->output_values_) output_descs_.push_back(a_.desc[vid]);
  const_bytes_ = m_->initializer_bytes() + a_.folded_bytes;
}

// One slot per value: constants point at their data (kernels never write inputs), the rest are bound later.
void PlanImpl::InitSlots(BuildState *b) {
  const size_t nv = m_->values_.size();
  ptr_.assign(nv, nullptr);
  b->slot_bytes.assign(nv, 0);
  b->in_arena.assign(nv, 0);
  for (size_t v = 0; v < nv; ++v) {
    b->slot_bytes[v] = a_.desc[v].Bytes();
    if (a_.cdata[v]) ptr_[v] = const_cast<void *>(a_.cdata[v]);
  }
  for (size_t i = 0; i < m_->input_values_.size(); ++i) input_slot_.push_back(m_->input_values_[i]);
}

// Graph outputs produced by a step are bound to the caller's buffer (first listing wins).
void PlanImpl::BindOutputsToProducers(BuildState *b) {
  output_slot_.assign(m_->output_values_.size(), -1);
  b->out_binding.assign(m_->values_.size(), -1);
  for (size_t j = 0; j < m_->output_values_.size(); ++j) {
    int v = m_->output_values_[j];
    if (m_->values_[v].kind == ValueKind::kNodeOutput && !a_.cdata[v] && b->out_binding[v] < 0) {
      b->out_binding[v] = static_cast<int>(j);
      output_slot_[j] = v;
    }
  }
}

// Consumers of each value (graph outputs count as consumers that cannot be fused away).
void PlanImpl::CountUses(BuildState *b) const {
  const size_t nv = m_->values_.size();
  b->uses.assign(nv, 0);
  b->sole_user.assign(nv, -1);
  for (size_t k = 0; k < m_->nodes_.size(); ++k)
    for (int vid : m_->nodes_[k].inputs)
      if (vid >= 0) {
        ++b->uses[vid];
        b->sole_user[vid] = static_cast<int>(k);
      }
  for (int vid : m_->output_values_) b->uses[vid] += 2;
}

// One step per runtime node, its kernel prepared for the static shapes (or fused with the nodes after it).
bool PlanImpl::PrepareSteps(BuildState *b, std::string *err) {
  b->absorbed.assign(m_->nodes_.size(), 0);
  step_of_node_.assign(m_->nodes_.size(), -1);
  b->source.resize(m_->values_.size());
  for (size_t v = 0; v < b->source.size(); ++v) b->source[v] = static_cast<int>(v);
  for (size_t k = 0; k < m_->nodes_.size(); ++k) {
    if (a_.node_folded[k] || b->absorbed[k]) continue;
    if (!PrepareStep(k, b, err)) return false;
  }
  return true;
}

KernelCtx PlanImpl::KernelCtxFor(size_t k) const {
  const Node &n = m_->nodes_[k];
  KernelCtx kc;
  kc.node = &n;
  kc.opset = m_->opset_;
  for (int vid : n.inputs) {
    kc.in.push_back(vid < 0 ? nullptr : &a_.desc[vid]);
    kc.in_data.push_back(vid < 0 ? nullptr : a_.cdata[vid]);
  }
  kc.out = a_.node_out[k];
  kc.memory_limit = a_.memory_limit;
  return kc;
}

bool PlanImpl::PrepareStep(size_t k, BuildState *b, std::string *err) {
  const Node &n = m_->nodes_[k];
  Step s;
  s.node = &n;
  std::vector<int> fused_outputs;
  if (donor_) s.kernel = DonorKernel(k);
  if (!s.kernel) {
    const KernelCtx kc = KernelCtxFor(k);
    if (n.op_type == "Conv") s.kernel = TryFuseQdqConv(k, kc, b->uses, b->sole_user, &b->absorbed, &fused_outputs);
    if (n.op_type == "Conv" && !s.kernel)
      s.kernel = TryFuseConv(kc, b->uses, b->sole_user, &b->absorbed, &fused_outputs);
    if (n.op_type == "QuantizeLinear") s.kernel = TryFuseQdq(kc, b->uses, b->sole_user, &b->absorbed, &fused_outputs);
    std::string reason;
    if (!s.kernel) s.kernel = n.op->prepare(kc, &reason);
    if (!s.kernel) {
      *err = n.Where() + reason;
      return false;
    }
  }
  s.in_vals = n.inputs;
  for (int &v : s.in_vals)
    if (v >= 0) v = b->source[v];
  // A copy into an intermediate (not a graph output) is no step: its readers read the copied value itself, which
  // lives at least as long as they do (lifetimes follow the readers) and which no kernel writes while it is still
  // read (in-place steps only take over a value at its last read). Identity / Reshape / Squeeze chains then cost
  // nothing, or the one copy into a graph output.
  const int out0 = n.outputs.size() == 1 ? n.outputs[0] : -1;
  if (s.kernel->CopiesInput0() && out0 >= 0 && !s.in_vals.empty() && s.in_vals[0] >= 0 && b->out_binding[out0] < 0 &&
      !a_.cdata[out0] && b->slot_bytes[out0] == b->slot_bytes[s.in_vals[0]]) {
    b->source[out0] = s.in_vals[0];
    return true;
  }
  AssignOutputSlots(fused_outputs.empty() ? n.outputs : fused_outputs, a_.node_out[k], &s, b);
  s.scratch_bytes = s.kernel->scratch_bytes();
  s.in_ptrs.resize(s.in_vals.size());
  s.out_ptrs.resize(s.out_vals.size());
  step_of_node_[k] = static_cast<int>(steps_.size());
  steps_.push_back(std::move(s));
  return true;
}

// The donor's kernel for node k when it was prepared for exactly what this plan would prepare it for: the same
// input and output descs, the same constant inputs (by address: the model's own or folds both plans hold, so the
// kernel refers to nothing only the donor owns). A decoder's plan for a new past length shares every kernel but those around attention, and sharing
// them skips preparing them again and freeing them with the donor. Conv is left out (its kernel may have absorbed
// the nodes after it), as are nondeterministic ops (their generator's state would be shared).
std::shared_ptr<Kernel> PlanImpl::DonorKernel(size_t k) const {
  const PlanImpl &d = *donor_;
  if (d.m_ != m_ || k >= d.step_of_node_.size() || d.step_of_node_[k] < 0) return nullptr;
  const Node &n = m_->nodes_[k];
  // (Conv and QuantizeLinear: the donor's kernel may be a fusion that also wrote a later node's output.)
  if (!n.op->foldable || n.nondeterministic || n.op_type == "Conv" || n.op_type == "QuantizeLinear") return nullptr;
  const auto same = [](const TensorDesc &x, const TensorDesc &y) { return x.dtype == y.dtype && x.dims == y.dims; };
  for (int vid : n.inputs)
    if (vid >= 0 && (a_.cdata[vid] != d.a_.cdata[vid] || !same(a_.desc[vid], d.a_.desc[vid]))) return nullptr;
  const std::vector<TensorDesc> &out = a_.node_out[k], &dout = d.a_.node_out[k];
  if (out.size() != dout.size()) return nullptr;
  for (size_t o = 0; o < out.size(); ++o)
    if (!same(out[o], dout[o])) return nullptr;
  return d.steps_[static_cast<size_t>(d.step_of_node_[k])].kernel;
}

// A step's outputs: their value slots (an omitted optional output gets a slot of its own: kernels still need
// somewhere to write it); every output not bound to a graph output lives in the arena.
void PlanImpl::AssignOutputSlots(const std::vector<int> &node_outputs, const std::vector<TensorDesc> &out, Step *s,
                                 BuildState *b) {
  for (size_t o = 0; o < node_outputs.size(); ++o) {
    int vid = node_outputs[o];
    if (vid < 0) {
      vid = static_cast<int>(ptr_.size());
      ptr_.push_back(nullptr);
      b->slot_bytes.push_back(out[o].Bytes());
      b->in_arena.push_back(0);
    }
    s->out_vals.push_back(vid);
    if (b->out_binding.size() <= static_cast<size_t>(vid) || b->out_binding[vid] < 0) b->in_arena[vid] = 1;
  }
}

// Lifetimes and arena offsets: allocate a step's outputs before freeing what it consumed last, so an output never
// aliases one of its own inputs, except an element-wise step's output 0 written in place over an input that dies
// there (InPlaceSource). Returns each slot's offset and sets workspace_bytes_.
std::vector<size_t> PlanImpl::LayOutArena(const BuildState &b) {
  const size_t ns = ptr_.size();
  std::vector<int> last_use(ns, -1);
  for (size_t st = 0; st < steps_.size(); ++st) {
    for (int v : steps_[st].in_vals)
      if (v >= 0) last_use[v] = static_cast<int>(st);
    for (int v : steps_[st].out_vals) last_use[v] = std::max(last_use[v], static_cast<int>(st));
  }
  std::vector<size_t> offset(ns, 0);
  ArenaAllocator alloc;
  std::vector<std::vector<int>> frees(steps_.size());
  for (size_t v = 0; v < ns; ++v)
    if (b.in_arena[v] && b.slot_bytes[v] > 0) frees[last_use[v]].push_back(static_cast<int>(v));
  for (size_t st = 0; st < steps_.size(); ++st) {
    const int shared = InPlaceSource(st, b, last_use);
    for (int v : steps_[st].out_vals) {
      if (!b.in_arena[v] || b.slot_bytes[v] == 0) continue;
      offset[v] = v == steps_[st].out_vals[0] && shared >= 0 ? offset[shared] : alloc.Alloc(b.slot_bytes[v]);
    }
    if (steps_[st].scratch_bytes) {  // live during this step only
      steps_[st].scratch_off = alloc.Alloc(steps_[st].scratch_bytes);
      alloc.Free(steps_[st].scratch_off, steps_[st].scratch_bytes);
    }
    for (int v : frees[st])
      if (v != shared) alloc.Free(offset[v], b.slot_bytes[v]);  // a shared input's bytes live on as the output
  }
  workspace_bytes_ = alloc.top();
  return offset;
}

// The arena input step st's output 0 takes over (-1: none): one the kernel may write in place (InPlaceOver), of
// the output's size, that no later step reads. Graph inputs and constants are the caller's or the model's.
int PlanImpl::InPlaceSource(size_t st, const BuildState &b, const std::vector<int> &last_use) const {
  const Step &s = steps_[st];
  if (s.out_vals.empty() || !b.in_arena[s.out_vals[0]]) return -1;
  const size_t bytes = b.slot_bytes[s.out_vals[0]];
  for (size_t i = 0; i < s.in_vals.size(); ++i) {
    const int in = s.in_vals[i];
    if (in >= 0 && b.in_arena[in] && bytes > 0 && b.slot_bytes[in] == bytes &&
        last_use[in] == static_cast<int>(st) && s.kernel->InPlaceOver(i))
      return in;
  }
  return -1;
}

// What a run needs: the arena, the folded constants and the outputs each run allocates.
bool PlanImpl::WithinArenaLimits(const std::vector<TensorDesc> &inputs, uint64_t memory_limit,
                                 std::string *err) const {
  if (workspace_bytes_ > 4 * kMaxTensorBytes) {
    *err = "intermediate tensors would need " + std::to_string(workspace_bytes_) + " bytes, which is absurd";
    return false;
  }
  uint64_t need = workspace_bytes_ + a_.folded_bytes;
  for (int vid : m_->output_values_) need += a_.desc[vid].Bytes();
  if (need > memory_limit) {
    *err = MemoryLimitError("the graph for input shapes " + DescsStr(inputs) + " (intermediates " +
                                std::to_string(workspace_bytes_) + " bytes, folded constants " +
                                std::to_string(a_.folded_bytes) + ", outputs the rest)",
                            need, memory_limit);
    return false;
  }
  return true;
}

void PlanImpl::BindArenaSlots(const BuildState &b, const std::vector<size_t> &offset) {
  const size_t ns = ptr_.size();
  arena_offset_.assign(ns, SIZE_MAX);
  for (size_t v = 0; v < ns; ++v) {
    if (!b.in_arena[v]) continue;
    if (b.slot_bytes[v] > 0)
      arena_offset_[v] = offset[v];
    else
      ptr_[v] = const_cast<void *>(EmptyTensorData());
  }
}

// Graph outputs not written by a kernel are copied at the end of Run.
void PlanImpl::PlanFinalCopies() {
  for (size_t j = 0; j < m_->output_values_.size(); ++j) {
    if (output_slot_[j] >= 0) continue;
    copies_.push_back({m_->output_values_[j], j, output_descs_[j].Bytes()});
  }
}

// Conv -> [BatchNormalization (inference, constant parameters)] -> [Relu], each intermediate used only by the
// next node and not a graph output: one kernel (BN folded into the weights, Relu as the GEMM epilogue).
std::unique_ptr<Kernel> PlanImpl::TryFuseConv(const KernelCtx &kc, const std::vector<int> &uses,
                                              const std::vector<int> &sole_user, std::vector<char> *absorbed,
                                              std::vector<int> *outputs) {
  const Node &conv = *kc.node;
  if (kc.out[0].dtype != ElemType::kFloat || conv.outputs.size() != 1 || conv.outputs[0] < 0) return nullptr;
  int v = conv.outputs[0];
  auto next = [&](int value, const char *op) -> int {
    if (uses[value] != 1) return -1;
    const int j = sole_user[value];
    const Node &nj = m_->nodes_[j];
    if (a_.node_folded[j] || nj.op_type != op || nj.inputs.empty() || nj.inputs[0] != value) return -1;
    if (nj.outputs.size() != 1 || nj.outputs[0] < 0) return -1;
    return j;
  };
  std::vector<double> scale, shift;
  bool have_bn = false, relu = false;
  std::vector<int> eat;
  const int bn = next(v, "BatchNormalization");
  if (bn >= 0) {
    const Node &b = m_->nodes_[bn];
    bool ok = b.inputs.size() == 5;
    for (size_t i = 1; ok && i < 5; ++i)
      ok = b.inputs[i] >= 0 && a_.cdata[b.inputs[i]] && a_.desc[b.inputs[i]].dtype == ElemType::kFloat;
    float eps = 1e-5f;
    int64_t training = 0;
    std::string r;
    ok = ok && AttrFloat(b, "epsilon", 1e-5f, &eps, &r) && AttrInt(b, "training_mode", 0, &training, &r) &&
         training == 0;
    if (ok) {
      const int64_t M = kc.out[0].dims[1];
      const float *p[4];
      for (int i = 0; i < 4; ++i) p[i] = static_cast<const float *>(a_.cdata[b.inputs[i + 1]]);
      for (int64_t m = 0; m < M; ++m) {
        const double a = p[0][m] / std::sqrt(static_cast<double>(p[3][m]) + eps);
        scale.push_back(a);
        shift.push_back(p[1][m] - p[2][m] * a);
      }
      have_bn = true;
      eat.push_back(bn);
      v = b.outputs[0];
    }
  }
  const int rl = next(v, "Relu");
  if (rl >= 0) {
    relu = true;
    eat.push_back(rl);
    v = m_->nodes_[rl].outputs[0];
  }
  if (eat.empty()) return nullptr;
  std::string reason;
  auto k = PrepareFusedConv(kc, have_bn ? &scale : nullptr, have_bn ? &shift : nullptr, relu, &reason);
  if (!k) return nullptr;
  for (int j : eat) (*absorbed)[j] = 1;
  outputs->assign(1, v);
  return k;
}

// QuantizeLinear -> DequantizeLinear whose 8/16-bit intermediate has no other reader and is not a graph output (the
// "fake quantisation" between layers of QDQ models): one float -> float kernel (PrepareQuantDequant), which halves the
// pair's memory traffic and may run in place.
std::unique_ptr<Kernel> PlanImpl::TryFuseQdq(const KernelCtx &kc, const std::vector<int> &uses,
                                             const std::vector<int> &sole_user, std::vector<char> *absorbed,
                                             std::vector<int> *outputs) {
  const Node &q = *kc.node;
  if (q.outputs.size() != 1 || q.outputs[0] < 0 || uses[q.outputs[0]] != 1) return nullptr;
  const int j = sole_user[q.outputs[0]];
  const Node &d = m_->nodes_[j];
  if (a_.node_folded[j] || d.op_type != "DequantizeLinear" || d.domain != q.domain || d.inputs.empty() ||
      d.inputs[0] != q.outputs[0] || d.outputs.size() != 1 || d.outputs[0] < 0)
    return nullptr;
  auto k = PrepareQuantDequant(kc, KernelCtxFor(static_cast<size_t>(j)));
  if (!k) return nullptr;
  (*absorbed)[j] = 1;
  outputs->assign(1, d.outputs[0]);
  return k;
}

// DequantizeLinear -> Conv -> QuantizeLinear (every convolution of a QDQ model) as one integer convolution on the
// 8-bit values (PrepareQdqConv): the Conv's float output must have the QuantizeLinear as its only reader. The
// DequantizeLinear feeding the Conv stays (other readers, or a fused QuantizeLinear -> DequantizeLinear pair, may
// read its float output); the kernel recovers its 8-bit input from those floats exactly. GEASYNC_QDQ_CONV=float
// keeps the float Conv (the graph as written, summed in float).
std::unique_ptr<Kernel> PlanImpl::TryFuseQdqConv(size_t k, const KernelCtx &kc, const std::vector<int> &uses,
                                                 const std::vector<int> &sole_user, std::vector<char> *absorbed,
                                                 std::vector<int> *outputs) {
  static const bool off = [] {
    const char *e = std::getenv("GEASYNC_QDQ_CONV");
    return e && std::string(e) == "float";
  }();
  const Node &conv = *kc.node;
  if (off || conv.inputs.size() < 2 || conv.outputs.size() != 1 || conv.outputs[0] < 0) return nullptr;
  const int v = conv.outputs[0];
  if (uses[v] != 1) return nullptr;
  const int qj = sole_user[v];
  const Node &q = m_->nodes_[qj];
  if (a_.node_folded[qj] || q.op_type != "QuantizeLinear" || !q.domain.empty() || q.inputs.empty() ||
      q.inputs[0] != v || q.outputs.size() != 1 || q.outputs[0] < 0)
    return nullptr;
  // The nodes writing the Conv's input and weights (earlier in topological order).
  const auto producer = [&](int value) -> int {
    for (size_t j = k; j-- > 0;)
      for (int o : m_->nodes_[j].outputs)
        if (o == value) return static_cast<int>(j);
    return -1;
  };
  if (conv.inputs[0] < 0 || conv.inputs[1] < 0 || !a_.cdata[conv.inputs[1]]) return nullptr;
  const int dx = producer(conv.inputs[0]), dw = producer(conv.inputs[1]);
  if (dx < 0 || dw < 0 || a_.node_folded[dx] || !a_.node_folded[dw]) return nullptr;
  const Node &nx = m_->nodes_[dx], &nw = m_->nodes_[dw];
  if (nx.op_type != "DequantizeLinear" || nw.op_type != "DequantizeLinear" || !nx.domain.empty() ||
      !nw.domain.empty() || nx.outputs.size() != 1 || nw.outputs.size() != 1)
    return nullptr;
  auto kern = PrepareQdqConv(kc, KernelCtxFor(static_cast<size_t>(dx)), KernelCtxFor(static_cast<size_t>(dw)),
                             KernelCtxFor(static_cast<size_t>(qj)));
  if (!kern) return nullptr;
  (*absorbed)[qj] = 1;
  outputs->assign(1, q.outputs[0]);
  return kern;
}

bool PlanImpl::AllocateArena(std::string *err) {
  arena_storage_.reset(new (std::nothrow) uint8_t[workspace_bytes_ + kAlign]);
  if (!arena_storage_) {
    *err = "out of memory: the plan's intermediate tensors need " + std::to_string(workspace_bytes_) + " bytes";
    return false;
  }
  uint8_t *base = arena_storage_.get();
  base += (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
  for (size_t v = 0; v < arena_offset_.size(); ++v)
    if (arena_offset_[v] != SIZE_MAX) ptr_[v] = base + arena_offset_[v];
  for (Step &s : steps_)
    if (s.scratch_bytes) s.scratch = base + s.scratch_off;
  return true;
}

bool PlanImpl::BindIo(const void *p, const TensorDesc &d, const char *what, size_t i, void **slot, std::string *err) {
  const size_t bytes = d.Bytes();
  if (bytes == 0) {
    *slot = const_cast<void *>(EmptyTensorData());
    return true;
  }
  if (!p) {
    *err = std::string(what) + " " + std::to_string(i) + " is null but holds " + std::to_string(bytes) + " bytes";
    return false;
  }
  if (reinterpret_cast<uintptr_t>(p) % ElemSize(d.dtype) != 0) {
    *err = std::string(what) + " " + std::to_string(i) + " is not aligned to its element size " +
           std::to_string(ElemSize(d.dtype));
    return false;
  }
  *slot = const_cast<void *>(p);
  return true;
}

bool PlanImpl::Run(const std::vector<const void *> &inputs, const std::vector<void *> &outputs, std::string *error) {
  std::string err;
  try {
    if (inputs.size() != input_descs_.size() || outputs.size() != output_descs_.size()) {
      err = "Run: expected " + std::to_string(input_descs_.size()) + " inputs and " +
            std::to_string(output_descs_.size()) + " outputs, got " + std::to_string(inputs.size()) + " and " +
            std::to_string(outputs.size());
    } else {
      bool ok = arena_storage_ || AllocateArena(&err);
      // A host input need not be aligned to its element size (numpy.frombuffer at an odd offset, a packed record
      // field): GE copies host inputs to the device, so any address works there. Kernels read elements in place,
      // so such an input is read from an aligned copy made for this run.
      std::vector<std::unique_ptr<uint8_t[]>> realigned;
      for (size_t i = 0; ok && i < inputs.size(); ++i) {
        void *unused = nullptr;  // bound inputs keep pointing at the plan's copy
        const void *p = inputs[i];
        const size_t bytes = input_descs_[i].Bytes();
        const size_t elem = ElemSize(input_descs_[i].dtype);
        if (p && bytes && elem > 1 && reinterpret_cast<uintptr_t>(p) % elem != 0) {
          realigned.emplace_back(new uint8_t[bytes]);  // operator new[]: aligned for any element type
          std::memcpy(realigned.back().get(), p, bytes);
          p = realigned.back().get();
        }
        ok = BindIo(p, input_descs_[i], "input", i, input_bound_[i] ? &unused : &ptr_[input_slot_[i]], &err);
      }
      for (size_t j = 0; ok && j < outputs.size(); ++j) {
        void *p = nullptr;
        ok = BindIo(outputs[j], output_descs_[j], "output", j, &p, &err);
        if (ok && output_slot_[j] >= 0) ptr_[output_slot_[j]] = p;
      }
      const RunScope busy;  // the intra-op pool's idle-core gate counts this run
      for (size_t st = 0; ok && st < steps_.size(); ++st) {
        Step &s = steps_[st];
        for (size_t i = 0; i < s.in_vals.size(); ++i) s.in_ptrs[i] = s.in_vals[i] < 0 ? nullptr : ptr_[s.in_vals[i]];
        for (size_t o = 0; o < s.out_vals.size(); ++o) s.out_ptrs[o] = ptr_[s.out_vals[o]];
        if (s.scratch_bytes) s.kernel->set_scratch(s.scratch);  // per run: a shared kernel has a place in each plan
        std::string reason;
        if (!s.kernel->Run(s.in_ptrs.data(), s.out_ptrs.data(), &reason)) {
          err = s.node->Where() + reason;
          ok = false;
        }
      }
      for (size_t c = 0; ok && c < copies_.size(); ++c) {
        const FinalCopy &fc = copies_[c];
        if (fc.bytes) CopyBytes(outputs[fc.out_index], ptr_[fc.slot], fc.bytes);
      }
      if (ok) return true;
    }
  } catch (const std::bad_alloc &) {
    err = "out of memory while running the plan";
  } catch (const std::exception &e) {
    err = std::string("internal error while running the plan: ") + e.what();
  } catch (...) {
    err = "internal error while running the plan";
  }
  if (error) *error = err;
  return false;
}

// A plan whose output shapes depend on the contents of some graph inputs: specialised per distinct contents.
class ValueDependentPlan : public Plan {
 public:
  static constexpr size_t kMaxSpecialised = 16;

  ValueDependentPlan(std::shared_ptr<const Model> model, std::vector<TensorDesc> inputs, std::vector<char> value_inputs,
                     std::vector<TensorDesc> outputs, uint64_t memory_limit)
      : model_(std::move(model)), input_descs_(std::move(inputs)), output_descs_(std::move(outputs)),
        memory_limit_(memory_limit), value_inputs_(std::move(value_inputs)) {}
  const std::vector<TensorDesc> &input_descs() const override { return input_descs_; }
  const std::vector<TensorDesc> &output_descs() const override { return output_descs_; }
  size_t const_bytes() const override { return model_->initializer_bytes(); }
  size_t workspace_bytes() const override { return 0; }
  bool Run(const std::vector<const void *> &, const std::vector<void *> &, std::string *error) override {
    if (error) *error = "Run: this plan's output shapes depend on input values; run the plan from Specialize()";
    return false;
  }
  bool value_dependent() const override { return true; }

  std::shared_ptr<Plan> Specialize(const std::vector<const void *> &inputs, std::string *error) override {
    std::string err;
    try {
      std::lock_guard<std::mutex> lk(mu_);
      if (inputs.size() != input_descs_.size()) {
        err = "Specialize: expected " + std::to_string(input_descs_.size()) + " inputs, got " +
              std::to_string(inputs.size());
      } else {
        for (;;) {
          std::string key;
          bool null_input = false;
          for (size_t i = 0; i < inputs.size(); ++i) {
            if (!value_inputs_[i]) continue;
            const size_t n = input_descs_[i].Bytes();
            if (n && !inputs[i]) null_input = true;
            key += std::to_string(i) + ":" + std::to_string(n) + ":";
            if (n && inputs[i]) key.append(static_cast<const char *>(inputs[i]), n);
          }
          if (null_input) {
            err = "Specialize: a shape-determining input is null";
            break;
          }
          for (auto it = cache_.begin(); it != cache_.end(); ++it) {
            if (it->first != key) continue;
            cache_.splice(cache_.begin(), cache_, it);
            return cache_.front().second;
          }
          std::vector<const void *> bound(inputs.size(), nullptr);
          for (size_t i = 0; i < inputs.size(); ++i)
            if (value_inputs_[i]) bound[i] = inputs[i];
          std::unique_ptr<PlanImpl> plan(new PlanImpl());
          if (plan->Build(model_, input_descs_, memory_limit_, &err, &bound)) {
            cache_.emplace_front(key, std::shared_ptr<Plan>(std::move(plan)));
            if (cache_.size() > kMaxSpecialised) cache_.pop_back();
            return cache_.front().second;
          }
          // Another shape depends on further inputs: bind those too and retry (the set only grows).
          const int mv = plan->missing_value();
          if (mv < 0) break;
          const ModelImpl &m = static_cast<const ModelImpl &>(*model_);
          std::vector<char> more = value_inputs_;
          MarkInputAncestors(m, mv, &more);
          if (more == value_inputs_) break;
          value_inputs_ = std::move(more);
          cache_.clear();
          err.clear();
        }
      }
    } catch (const std::bad_alloc &) {
      err = "out of memory while compiling the plan";
    } catch (const std::exception &e) {
      err = std::string("internal error while compiling the plan: ") + e.what();
    }
    if (error) *error = err;
    return nullptr;
  }

 private:
  std::shared_ptr<const Model> model_;
  std::vector<TensorDesc> input_descs_, output_descs_;
  const uint64_t memory_limit_;
  std::mutex mu_;
  std::vector<char> value_inputs_;  // per graph input: contents determine shapes
  std::list<std::pair<std::string, std::shared_ptr<Plan>>> cache_;  // most recently used first
};

}  // namespace

std::unique_ptr<Plan> CompilePlan(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs,
                                  std::string *error) {
  return CompilePlan(std::move(model), inputs, CompileOptions(), error);
}

std::unique_ptr<Plan> CompilePlan(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs,
                                  const CompileOptions &options, std::string *error) {
  std::string err;
  try {
    if (!model) {
      err = "CompilePlan: no model";
    } else {
      const uint64_t limit = options.max_memory_bytes ? options.max_memory_bytes : DefaultMemoryLimit();
      std::unique_ptr<PlanImpl> plan(new PlanImpl());
      plan->set_donor(dynamic_cast<const PlanImpl *>(options.donor.get()));
      const bool built = plan->Build(model, inputs, limit, &err);
      plan->set_donor(nullptr);
      if (built) return plan;
      const ModelImpl *m = dynamic_cast<const ModelImpl *>(model.get());
      if (options.allow_value_dependent && m && plan->missing_value() >= 0) {
        std::vector<char> value_inputs(m->inputs_.size(), 0);
        MarkInputAncestors(*m, plan->missing_value(), &value_inputs);
        bool any = false;
        for (char c : value_inputs) any = any || c;
        std::vector<TensorDesc> outs;
        std::string ierr;
        if (any && InferShapes(*model, inputs, &outs, &ierr, limit)) {
          return std::unique_ptr<Plan>(
              new ValueDependentPlan(std::move(model), inputs, std::move(value_inputs), std::move(outs), limit));
        }
      }
    }
  } catch (const std::bad_alloc &) {
    err = "out of memory while compiling the plan";
  } catch (const std::exception &e) {
    err = std::string("internal error while compiling the plan: ") + e.what();
  } catch (...) {
    err = "internal error while compiling the plan";
  }
  if (error) *error = err;
  return nullptr;
}

}  // namespace onnx
}  // namespace twin
