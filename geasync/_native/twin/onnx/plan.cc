// CompilePlan and the Plan implementation: kernels prepared for static shapes, one arena for intermediates with
// lifetime-based reuse, graph outputs written straight into the caller's buffers. Run does no heap allocation.
#include <algorithm>
#include <new>

#include "analysis.h"
#include "common.h"
#include "op_registry.h"

namespace twin {
namespace onnx {
namespace {

constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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
  std::unique_ptr<Kernel> kernel;
  std::vector<int> in_vals, out_vals;  // value ids; -1 omitted input; out slots index into slot table
  std::vector<const void *> in_ptrs;   // filled at Run (preallocated)
  std::vector<void *> out_ptrs;
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

  bool Build(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs, std::string *err);

 private:
  bool BindIo(const void *p, const TensorDesc &d, const char *what, size_t i, void **slot, std::string *err);

  std::shared_ptr<const Model> model_;  // keeps initializers and Constant values alive
  const ModelImpl *m_ = nullptr;
  Analysis a_;
  std::vector<TensorDesc> input_descs_, output_descs_;
  size_t const_bytes_ = 0, workspace_bytes_ = 0;
  std::vector<Step> steps_;
  // Slots: one per value id, then one per omitted output of a runtime node. ptr_[slot] is fixed at compile for
  // constants and arena slots, rebound at each Run for graph inputs and outputs.
  std::vector<void *> ptr_;
  std::vector<int> input_slot_;   // per graph input
  std::vector<int> output_slot_;  // per graph output: slot written directly by a kernel, or -1
  std::vector<FinalCopy> copies_;
  std::vector<uint8_t> arena_storage_;
};

bool PlanImpl::Build(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs, std::string *err) {
  model_ = std::move(model);
  m_ = dynamic_cast<const ModelImpl *>(model_.get());
  if (!m_) {
    *err = "CompilePlan: model was not created by ParseModel";
    return false;
  }
  if (!Analyze(*m_, inputs, /*compile=*/true, &a_, err)) return false;
  input_descs_ = inputs;
  for (int vid : m_->output_values_) output_descs_.push_back(a_.desc[vid]);
  const_bytes_ = m_->initializer_bytes() + a_.folded_bytes;

  const size_t nv = m_->values_.size();
  ptr_.assign(nv, nullptr);
  std::vector<size_t> slot_bytes(nv, 0);
  std::vector<char> is_arena(nv, 0);
  for (size_t v = 0; v < nv; ++v) {
    slot_bytes[v] = a_.desc[v].Bytes();
    if (a_.cdata[v]) ptr_[v] = const_cast<void *>(a_.cdata[v]);  // kernels never write inputs
  }
  for (size_t i = 0; i < m_->input_values_.size(); ++i) input_slot_.push_back(m_->input_values_[i]);

  // Runtime steps; graph outputs produced by a step are bound to the caller's buffer (first listing wins).
  output_slot_.assign(m_->output_values_.size(), -1);
  std::vector<int> out_binding(nv, -1);
  for (size_t j = 0; j < m_->output_values_.size(); ++j) {
    int v = m_->output_values_[j];
    if (m_->values_[v].kind == ValueKind::kNodeOutput && !a_.cdata[v] && out_binding[v] < 0) {
      out_binding[v] = static_cast<int>(j);
      output_slot_[j] = v;
    }
  }
  for (size_t k = 0; k < m_->nodes_.size(); ++k) {
    if (a_.node_folded[k]) continue;
    const Node &n = m_->nodes_[k];
    Step s;
    s.node = &n;
    KernelCtx kc;
    kc.node = &n;
    kc.opset = m_->opset_;
    for (int vid : n.inputs) {
      kc.in.push_back(vid < 0 ? nullptr : &a_.desc[vid]);
      kc.in_data.push_back(vid < 0 ? nullptr : a_.cdata[vid]);
    }
    kc.out = a_.node_out[k];
    std::string reason;
    s.kernel = n.op->prepare(kc, &reason);
    if (!s.kernel) {
      *err = n.Where() + reason;
      return false;
    }
    s.in_vals = n.inputs;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      int vid = n.outputs[o];
      if (vid < 0) {  // omitted optional output: kernels still need somewhere to write it
        vid = static_cast<int>(ptr_.size());
        ptr_.push_back(nullptr);
        slot_bytes.push_back(kc.out[o].Bytes());
        is_arena.push_back(0);
      }
      s.out_vals.push_back(vid);
      if (out_binding.size() <= static_cast<size_t>(vid) || out_binding[vid] < 0) is_arena[vid] = 1;
    }
    s.in_ptrs.resize(s.in_vals.size());
    s.out_ptrs.resize(s.out_vals.size());
    steps_.push_back(std::move(s));
  }

  // Lifetimes and arena offsets: allocate a step's outputs before freeing what it consumed last,
  // so an output never aliases one of its own inputs.
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
    if (is_arena[v] && slot_bytes[v] > 0) frees[last_use[v]].push_back(static_cast<int>(v));
  for (size_t st = 0; st < steps_.size(); ++st) {
    for (int v : steps_[st].out_vals)
      if (is_arena[v] && slot_bytes[v] > 0) offset[v] = alloc.Alloc(slot_bytes[v]);
    for (int v : frees[st]) alloc.Free(offset[v], slot_bytes[v]);
  }
  workspace_bytes_ = alloc.top();
  if (workspace_bytes_ > 4 * kMaxTensorBytes) {
    *err = "intermediate tensors would need " + std::to_string(workspace_bytes_) + " bytes, which is absurd";
    return false;
  }
  arena_storage_.assign(workspace_bytes_ + kAlign, 0);
  uint8_t *base = arena_storage_.data();
  base += (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
  for (size_t v = 0; v < ns; ++v) {
    if (!is_arena[v]) continue;
    ptr_[v] = slot_bytes[v] > 0 ? base + offset[v] : const_cast<void *>(EmptyTensorData());
  }

  // Graph outputs not written by a kernel are copied at the end of Run.
  for (size_t j = 0; j < m_->output_values_.size(); ++j) {
    if (output_slot_[j] >= 0) continue;
    copies_.push_back({m_->output_values_[j], j, output_descs_[j].Bytes()});
  }
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
      bool ok = true;
      for (size_t i = 0; ok && i < inputs.size(); ++i)
        ok = BindIo(inputs[i], input_descs_[i], "input", i, &ptr_[input_slot_[i]], &err);
      for (size_t j = 0; ok && j < outputs.size(); ++j) {
        void *p = nullptr;
        ok = BindIo(outputs[j], output_descs_[j], "output", j, &p, &err);
        if (ok && output_slot_[j] >= 0) ptr_[output_slot_[j]] = p;
      }
      for (size_t st = 0; ok && st < steps_.size(); ++st) {
        Step &s = steps_[st];
        for (size_t i = 0; i < s.in_vals.size(); ++i) s.in_ptrs[i] = s.in_vals[i] < 0 ? nullptr : ptr_[s.in_vals[i]];
        for (size_t o = 0; o < s.out_vals.size(); ++o) s.out_ptrs[o] = ptr_[s.out_vals[o]];
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

}  // namespace

std::unique_ptr<Plan> CompilePlan(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs,
                                  std::string *error) {
  std::string err;
  try {
    if (!model) {
      err = "CompilePlan: no model";
    } else {
      std::unique_ptr<PlanImpl> plan(new PlanImpl());
      if (plan->Build(std::move(model), inputs, &err)) return plan;
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
