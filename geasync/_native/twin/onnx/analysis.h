// Whole-graph shape/dtype propagation with constant folding, shared by InferShapes (unknown dims allowed) and
// CompilePlan (everything static, every constant-input node folded).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model.h"

namespace twin {
namespace onnx {

struct Analysis {
  std::vector<TensorDesc> desc;     // per value id
  std::vector<const void *> cdata;  // per value id: contents if known at compile time, else nullptr
  std::vector<char> node_folded;    // per node (topo order): computed at compile time, no kernel at run
  // per value id: contents that follow from the model alone (initializers, Constants and what is folded from them
  // only), the same in every plan: folded once and shared by the graph's plans
  std::vector<char> model_const;
  std::vector<std::vector<TensorDesc>> node_out;  // per node: descs of all outputs, omitted ones included
  std::vector<std::shared_ptr<std::vector<uint8_t>>> folded_storage;  // owns folded values
  size_t folded_bytes = 0;
  // When Analyze fails because a shape depends on contents unknown at compile time: that value's id, else -1.
  int missing_value = -1;
  // Input: bytes folding may hold (0: no limit beyond kMaxTensorBytes per tensor).
  uint64_t memory_limit = 0;
};

// The message of a plan refused for memory: `what` needs `need` bytes, above `limit`.
std::string MemoryLimitError(const std::string &what, uint64_t need, uint64_t limit);

// Checks caller-supplied descs against the model's Data inputs (count, dtype, rank, known dims, size limits).
bool CheckInputDescs(const ModelImpl &m, const std::vector<TensorDesc> &inputs, bool need_static, std::string *err);

// Propagates descs through the graph in topological order and folds nodes whose inputs are all constant.
// compile=true: every shape must be static and all foldable nodes are folded; otherwise only small ones are.
// bound (optional, one entry per graph input): contents of inputs to treat as compile-time constants (value-
// specialised plans); nullptr entries stay runtime data.
bool Analyze(const ModelImpl &m, const std::vector<TensorDesc> &inputs, bool compile, Analysis *a, std::string *err,
             const std::vector<const void *> *bound = nullptr);

// Marks in (*inputs)[i] the graph inputs whose contents value `vid` depends on, through nodes that are not
// shape-only: the inputs a value-specialised plan (or a control-flow subgraph) must bind to settle that value.
void MarkInputAncestors(const ModelImpl &m, int vid, std::vector<char> *inputs);

}  // namespace onnx
}  // namespace twin
