// Internal graph IR of a decoded ONNX model (values, nodes in topological order, constant tensors) and the
// concrete Model class returned by ParseModel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine.h"

namespace twin {
namespace onnx {

struct OpDef;
class ModelImpl;

// Subgraphs (If branches, Loop/Scan bodies) nest at most this deep; a deeper model is refused while decoding, so
// hostile nesting cannot exhaust the stack of the decoder, the analysis or a run.
constexpr int kMaxGraphDepth = 16;

// A tensor whose contents are known when the model is parsed (initializer or Constant value).
// Data is little-endian, densely packed, ElemSize(desc.dtype) bytes per element.
struct ConstTensor {
  std::string name;
  TensorDesc desc;
  std::vector<uint8_t> data;
  // ONNX type INT4 / UINT4 stored one value a byte as int8 / uint8 (0 otherwise): exact for DequantizeLinear, the
  // only reader the model builder lets such an initializer have.
  int64_t widened_from = 0;
};

// AttributeProto.AttributeType values.
enum AttrType : int32_t {
  kAttrUndefined = 0,
  kAttrFloat = 1,
  kAttrInt = 2,
  kAttrString = 3,
  kAttrTensor = 4,
  kAttrGraph = 5,
  kAttrFloats = 6,
  kAttrInts = 7,
  kAttrStrings = 8,
  kAttrTensors = 9,
  kAttrGraphs = 10,
  kAttrSparseTensor = 11,
  kAttrSparseTensors = 12,
  kAttrTypeProto = 13,
  kAttrTypeProtos = 14,
};

struct Attribute {
  std::string name;
  int32_t type = kAttrUndefined;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<const ConstTensor> t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<const ModelImpl> g;  // kAttrGraph: the subgraph, built like a model (see ModelImpl::captured_)
};

struct Node {
  std::string name;  // as in the model, or "#<index>" when unnamed
  std::string op_type;
  std::string domain;
  std::vector<std::string> input_names;   // "" = omitted optional input
  std::vector<std::string> output_names;  // "" = omitted optional output
  std::vector<Attribute> attrs;
  const OpDef *op = nullptr;
  std::vector<int> inputs;   // value ids, -1 for omitted
  std::vector<int> outputs;  // value ids, -1 for omitted
  std::shared_ptr<const ConstTensor> const_value;  // Constant nodes: their value, decoded at parse time
  // Nodes with subgraphs: the outer-scope names their subgraphs read are appended to input_names/inputs (so they
  // are ordered, kept alive and handed to the kernel like inputs); this many trailing inputs are such captures.
  size_t implicit_inputs = 0;
  bool nondeterministic = false;  // a subgraph holds a non-foldable (random) op: never fold this node

  const Attribute *FindAttr(const char *attr_name) const;
  // "node 'NAME' (op TYPE): " prefix of every node error message.
  std::string Where() const;
};

enum class ValueKind { kGraphInput, kInitializer, kNodeOutput };

struct Value {
  std::string name;
  ValueKind kind = ValueKind::kNodeOutput;
  int index = -1;  // graph input position (in inputs()), initializer position, or node position (topo order)
};

class ModelImpl : public Model {
 public:
  const std::vector<ValueInfo> &inputs() const override { return inputs_; }
  const std::vector<ValueInfo> &outputs() const override { return outputs_; }
  const std::string &graph_name() const override { return graph_name_; }
  int64_t opset_version() const override { return opset_; }
  size_t node_count() const override { return nodes_.size(); }
  size_t initializer_bytes() const override { return initializer_bytes_; }

  int64_t ir_version_ = 0;
  int64_t opset_ = 0;
  std::string graph_name_;
  std::vector<ValueInfo> inputs_;         // Data inputs only
  std::vector<bool> input_rank_known_;    // false when the model gives no shape for that input
  std::vector<int> input_values_;         // value id of each Data input
  std::vector<ValueInfo> outputs_;
  std::vector<int> output_values_;        // value id of each graph output (may repeat)
  std::vector<std::shared_ptr<const ConstTensor>> initializers_;
  std::vector<Node> nodes_;  // topological order
  std::vector<Value> values_;
  size_t initializer_bytes_ = 0;
  // Subgraphs: names of the enclosing scopes they read; each is also a trailing entry of inputs_ (dtype and rank
  // unknown until the owning node binds it).
  std::vector<std::string> captured_;
};

}  // namespace onnx
}  // namespace twin
