// ParseModel: decodes ONNX ModelProto bytes (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
// ValueInfoProto) into the IR of model.h, then validates the graph structure and sorts nodes topologically.
#include <functional>
#include <map>
#include <new>
#include <queue>
#include <set>
#include <unordered_map>

#include "common.h"
#include "op_registry.h"
#include "proto_reader.h"

namespace twin {
namespace onnx {

const Attribute *Node::FindAttr(const char *attr_name) const {
  for (const Attribute &a : attrs)
    if (a.name == attr_name) return &a;
  return nullptr;
}

std::string Node::Where() const { return "node '" + name + "' (op " + op_type + "): "; }

namespace {

// ---------------------------------------------------------------------------------------------------------
// Decoding. Wire-level problems fail immediately with "corrupt ONNX model: ..."; semantic problems inside a node
// (bad attribute tensor, ...) are remembered and reported once the node's name is known.

struct RawValueInfo {
  std::string name;
  bool has_tensor_type = false;
  bool other_type = false;  // sequence, map, optional, sparse
  int64_t elem_type = 0;
  bool has_shape = false;
  std::vector<int64_t> dims;  // -1 for dim_param / missing value
};

struct RawNode {
  Node node;
  std::string deferred_error;
};

struct RawGraph {
  std::string name;
  std::vector<RawNode> nodes;
  std::vector<std::shared_ptr<ConstTensor>> initializers;
  std::vector<std::string> initializer_errors;  // per initializer, "" if fine
  std::vector<RawValueInfo> inputs, outputs;
  bool has_sparse_initializer = false;
};

struct RawModel {
  int64_t ir_version = 0;
  std::vector<std::pair<std::string, int64_t>> opsets;
  int graph_count = 0;
  RawGraph graph;
};

// Decodes a TensorProto. Returns false with *err for wire-level corruption; a semantic problem (unsupported dtype,
// external data, size mismatch) leaves *semantic non-empty and returns true.
bool DecodeTensor(const uint8_t *base, ProtoReader r, ConstTensor *t, std::string *semantic, std::string *err) {
  std::vector<int64_t> dims, int64_data;
  std::vector<uint64_t> int32_data, uint64_data;  // int32_data kept as raw varints
  std::vector<float> float_data;
  std::vector<double> double_data;
  int64_t data_type = 0, data_location = 0;
  bool has_raw = false, has_external = false, has_segment = false, has_strings = false;
  size_t raw_off = 0, raw_len = 0;
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    bool ok = true;
    switch (field) {
      case 1: ok = r.RepeatedInt64(wire, &dims, err); break;
      case 2: ok = r.Int64Field(wire, &data_type, err); break;
      case 3: has_segment = true; ok = r.Skip(wire, err); break;
      case 4: ok = r.RepeatedFloat(wire, &float_data, err); break;
      case 5: ok = r.RepeatedUint64(wire, &int32_data, err); break;
      case 6: has_strings = true; ok = r.Skip(wire, err); break;
      case 7: ok = r.RepeatedInt64(wire, &int64_data, err); break;
      case 8: ok = r.StringField(wire, &t->name, err); break;
      case 9: {
        ProtoReader sub(base, 0, 0);
        ok = r.SubField(wire, &sub, err);
        if (ok) {
          has_raw = true;
          raw_off = sub.pos();
          raw_len = r.pos() - raw_off;  // payload ends where the reader now stands
        }
        break;
      }
      case 10: ok = r.RepeatedDouble(wire, &double_data, err); break;
      case 11: ok = r.RepeatedUint64(wire, &uint64_data, err); break;
      case 13: has_external = true; ok = r.Skip(wire, err); break;
      case 14: ok = r.Int64Field(wire, &data_location, err); break;
      default: ok = r.Skip(wire, err); break;
    }
    if (!ok) return false;
  }
  const std::string who = "tensor '" + t->name + "'";
  if (has_external || data_location == 1) {
    *semantic = who + " uses external data: give the model by path (Graph.from_onnx(path) reads the files beside it)";
    return true;
  }
  if (has_segment) {
    *semantic = who + " is segmented, which the twin does not support";
    return true;
  }
  ElemType et;
  if (has_strings || !OnnxTypeToElemType(data_type, &et)) {
    *semantic = who + " has data type " + OnnxTypeName(data_type) + ", which the twin does not support";
    return true;
  }
  for (int64_t d : dims) {
    if (d < 0) {
      *semantic = who + " has negative dimension " + std::to_string(d);
      return true;
    }
  }
  int64_t n;
  std::string reason;
  if (!CheckedNumElements(dims, &n, &reason)) {
    *semantic = who + ": " + reason;
    return true;
  }
  t->desc.dtype = et;
  t->desc.dims = dims;
  const size_t esize = ElemSize(et);
  const size_t count = static_cast<size_t>(n);
  auto mismatch = [&](size_t have) {
    *semantic = who + " holds " + std::to_string(have) + " values but its shape " + ShapeStr(dims) + " needs " +
                std::to_string(count);
    return true;
  };
  if (has_raw) {
    if (raw_len / esize != count || raw_len % esize != 0) return mismatch(raw_len / esize);
    t->data.assign(base + raw_off, base + raw_off + raw_len);
    return true;
  }
  t->data.resize(0);
  switch (et) {
    case ElemType::kFloat:
      if (float_data.size() != count) return mismatch(float_data.size());
      t->data.resize(count * 4);
      CopyBytes(t->data.data(), float_data.data(), count * 4);
      return true;
    case ElemType::kDouble:
      if (double_data.size() != count) return mismatch(double_data.size());
      t->data.resize(count * 8);
      CopyBytes(t->data.data(), double_data.data(), count * 8);
      return true;
    case ElemType::kInt64:
      if (int64_data.size() != count) return mismatch(int64_data.size());
      t->data.resize(count * 8);
      CopyBytes(t->data.data(), int64_data.data(), count * 8);
      return true;
    case ElemType::kUint32:
    case ElemType::kUint64:
      if (uint64_data.size() != count) return mismatch(uint64_data.size());
      t->data.resize(count * esize);
      for (size_t i = 0; i < count; ++i) {
        uint64_t v = uint64_data[i];
        if (esize == 4) {
          uint32_t v32 = static_cast<uint32_t>(v);
          std::memcpy(&t->data[i * 4], &v32, 4);
        } else {
          std::memcpy(&t->data[i * 8], &v, 8);
        }
      }
      return true;
    default:  // int32, int16, int8, uint16, uint8, bool, float16, bfloat16 all live in int32_data
      if (int32_data.size() != count) return mismatch(int32_data.size());
      t->data.resize(count * esize);
      for (size_t i = 0; i < count; ++i) {
        uint32_t v = static_cast<uint32_t>(int32_data[i]);  // keeps the low bits (little-endian below)
        for (size_t b = 0; b < esize; ++b) t->data[i * esize + b] = static_cast<uint8_t>(v >> (8 * b));
      }
      return true;
  }
}

bool DecodeAttribute(const uint8_t *base, ProtoReader r, Attribute *a, std::string *semantic, std::string *err) {
  bool has_f = false, has_i = false, has_s = false, has_t = false, has_g = false, has_ref = false;
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    bool ok = true;
    switch (field) {
      case 1: ok = r.StringField(wire, &a->name, err); break;
      case 2: has_f = true; ok = r.FloatField(wire, &a->f, err); break;
      case 3: has_i = true; ok = r.Int64Field(wire, &a->i, err); break;
      case 4: has_s = true; ok = r.StringField(wire, &a->s, err); break;
      case 5: {
        has_t = true;
        ProtoReader sub(base, 0, 0);
        ok = r.SubField(wire, &sub, err);
        if (ok) {
          auto t = std::make_shared<ConstTensor>();
          std::string sem;
          ok = DecodeTensor(base, sub, t.get(), &sem, err);
          if (ok && !sem.empty() && semantic->empty()) *semantic = sem;
          a->t = t;
        }
        break;
      }
      case 6: case 11: has_g = true; ok = r.Skip(wire, err); break;
      case 7: ok = r.RepeatedFloat(wire, &a->floats, err); break;
      case 8: ok = r.RepeatedInt64(wire, &a->ints, err); break;
      case 9: {
        std::string s;
        ok = r.StringField(wire, &s, err);
        if (ok) a->strings.push_back(std::move(s));
        break;
      }
      case 20: {
        int64_t ty;
        ok = r.Int64Field(wire, &ty, err);
        if (ok) a->type = static_cast<int32_t>(ty < 0 || ty > 100 ? -1 : ty);
        break;
      }
      case 21: has_ref = true; ok = r.Skip(wire, err); break;
      default: ok = r.Skip(wire, err); break;
    }
    if (!ok) return false;
  }
  if (has_ref && semantic->empty())
    *semantic = "attribute '" + a->name + "' refers to a function attribute (ref_attr_name), which is not supported";
  if (a->type == kAttrUndefined) {  // very old models omit the type: deduce it from the populated field
    if (has_f) a->type = kAttrFloat;
    else if (has_i) a->type = kAttrInt;
    else if (has_s) a->type = kAttrString;
    else if (has_t) a->type = kAttrTensor;
    else if (has_g) a->type = kAttrGraph;
    else if (!a->floats.empty()) a->type = kAttrFloats;
    else if (!a->ints.empty()) a->type = kAttrInts;
    else if (!a->strings.empty()) a->type = kAttrStrings;
  }
  if (a->type == kAttrTensor && !a->t && semantic->empty())
    *semantic = "attribute '" + a->name + "' of type tensor has no value";
  return true;
}

bool DecodeNode(const uint8_t *base, ProtoReader r, RawNode *rn, std::string *err) {
  Node &n = rn->node;
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    bool ok = true;
    switch (field) {
      case 1:
      case 2: {
        std::string s;
        ok = r.StringField(wire, &s, err);
        if (ok) (field == 1 ? n.input_names : n.output_names).push_back(std::move(s));
        break;
      }
      case 3: ok = r.StringField(wire, &n.name, err); break;
      case 4: ok = r.StringField(wire, &n.op_type, err); break;
      case 5: {
        ProtoReader sub(base, 0, 0);
        ok = r.SubField(wire, &sub, err);
        if (ok) {
          n.attrs.emplace_back();
          ok = DecodeAttribute(base, sub, &n.attrs.back(), &rn->deferred_error, err);
        }
        break;
      }
      case 7: ok = r.StringField(wire, &n.domain, err); break;
      default: ok = r.Skip(wire, err); break;
    }
    if (!ok) return false;
  }
  return true;
}

bool DecodeValueInfo(const uint8_t *base, ProtoReader r, RawValueInfo *vi, std::string *err) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    if (field == 1) {
      if (!r.StringField(wire, &vi->name, err)) return false;
    } else if (field == 2) {  // TypeProto
      ProtoReader tp(base, 0, 0);
      if (!r.SubField(wire, &tp, err)) return false;
      while (!tp.done()) {
        uint32_t f2;
        int w2;
        if (!tp.ReadTag(&f2, &w2, err)) return false;
        if (f2 == 1) {  // TypeProto.Tensor
          vi->has_tensor_type = true;
          ProtoReader tt(base, 0, 0);
          if (!tp.SubField(w2, &tt, err)) return false;
          while (!tt.done()) {
            uint32_t f3;
            int w3;
            if (!tt.ReadTag(&f3, &w3, err)) return false;
            if (f3 == 1) {
              if (!tt.Int64Field(w3, &vi->elem_type, err)) return false;
            } else if (f3 == 2) {  // TensorShapeProto
              vi->has_shape = true;
              vi->dims.clear();
              ProtoReader sp(base, 0, 0);
              if (!tt.SubField(w3, &sp, err)) return false;
              while (!sp.done()) {
                uint32_t f4;
                int w4;
                if (!sp.ReadTag(&f4, &w4, err)) return false;
                if (f4 != 1) {
                  if (!sp.Skip(w4, err)) return false;
                  continue;
                }
                ProtoReader dp(base, 0, 0);
                if (!sp.SubField(w4, &dp, err)) return false;
                int64_t dim = -1;
                while (!dp.done()) {
                  uint32_t f5;
                  int w5;
                  if (!dp.ReadTag(&f5, &w5, err)) return false;
                  if (f5 == 1) {
                    if (!dp.Int64Field(w5, &dim, err)) return false;
                    if (dim < 0) dim = -2;  // invalid; reported by validation
                  } else {
                    if (f5 == 2) dim = -1;  // dim_param: symbolic
                    if (!dp.Skip(w5, err)) return false;
                  }
                }
                vi->dims.push_back(dim);
              }
            } else if (!tt.Skip(w3, err)) {
              return false;
            }
          }
        } else {
          if (f2 == 4 || f2 == 5 || f2 == 8 || f2 == 9) vi->other_type = true;
          if (!tp.Skip(w2, err)) return false;
        }
      }
    } else if (!r.Skip(wire, err)) {
      return false;
    }
  }
  return true;
}

bool DecodeGraph(const uint8_t *base, ProtoReader r, RawGraph *g, std::string *err) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    ProtoReader sub(base, 0, 0);
    switch (field) {
      case 1:
        if (!r.SubField(wire, &sub, err)) return false;
        g->nodes.emplace_back();
        if (!DecodeNode(base, sub, &g->nodes.back(), err)) return false;
        break;
      case 2:
        if (!r.StringField(wire, &g->name, err)) return false;
        break;
      case 5: {
        if (!r.SubField(wire, &sub, err)) return false;
        auto t = std::make_shared<ConstTensor>();
        std::string sem;
        if (!DecodeTensor(base, sub, t.get(), &sem, err)) return false;
        g->initializers.push_back(t);
        g->initializer_errors.push_back(sem);
        break;
      }
      case 11:
      case 12:
        if (!r.SubField(wire, &sub, err)) return false;
        (field == 11 ? g->inputs : g->outputs).emplace_back();
        if (!DecodeValueInfo(base, sub, &(field == 11 ? g->inputs : g->outputs).back(), err)) return false;
        break;
      case 15:
        g->has_sparse_initializer = true;
        if (!r.Skip(wire, err)) return false;
        break;
      default:
        if (!r.Skip(wire, err)) return false;
        break;
    }
  }
  return true;
}

bool DecodeModel(const uint8_t *base, size_t size, RawModel *m, std::string *err) {
  ProtoReader r(base, 0, size);
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    ProtoReader sub(base, 0, 0);
    if (field == 1) {
      if (!r.Int64Field(wire, &m->ir_version, err)) return false;
    } else if (field == 7) {
      if (!r.SubField(wire, &sub, err)) return false;
      if (++m->graph_count > 1) {
        *err = "corrupt ONNX model: more than one graph";
        return false;
      }
      if (!DecodeGraph(base, sub, &m->graph, err)) return false;
    } else if (field == 8) {
      if (!r.SubField(wire, &sub, err)) return false;
      std::pair<std::string, int64_t> op{"", 0};
      while (!sub.done()) {
        uint32_t f2;
        int w2;
        if (!sub.ReadTag(&f2, &w2, err)) return false;
        if (f2 == 1) {
          if (!sub.StringField(w2, &op.first, err)) return false;
        } else if (f2 == 2) {
          if (!sub.Int64Field(w2, &op.second, err)) return false;
        } else if (!sub.Skip(w2, err)) {
          return false;
        }
      }
      m->opsets.push_back(op);
    } else if (!r.Skip(wire, err)) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Validation and IR construction.

bool ValueInfoToDesc(const RawValueInfo &vi, const char *what, TensorDesc *d, bool *rank_known, std::string *err) {
  const std::string who = std::string(what) + " '" + vi.name + "'";
  if (vi.other_type && !vi.has_tensor_type) {
    *err = who + " is not a tensor (sequence/map/optional/sparse types are not supported by the twin)";
    return false;
  }
  d->dtype = ElemType::kUndefined;
  if (vi.has_tensor_type && vi.elem_type != 0 && !OnnxTypeToElemType(vi.elem_type, &d->dtype)) {
    *err = who + " has element type " + OnnxTypeName(vi.elem_type) + ", which the twin does not support";
    return false;
  }
  for (int64_t dim : vi.dims) {
    if (dim < -1) {
      *err = who + " has a negative dimension";
      return false;
    }
  }
  d->dims = vi.dims;
  int64_t n;
  std::string reason;
  if (!CheckedNumElements(d->dims, &n, &reason)) {
    *err = who + ": " + reason;
    return false;
  }
  *rank_known = vi.has_shape;
  return true;
}

bool Build(RawModel &raw, ModelImpl *m, std::string *err) {
  m->ir_version_ = raw.ir_version;
  if (raw.graph_count == 0) {
    *err = "ONNX model has no graph";
    return false;
  }
  bool have_opset = false;
  for (const auto &op : raw.opsets) {
    if (op.first.empty() || op.first == "ai.onnx") {
      if (!have_opset || op.second > m->opset_) m->opset_ = op.second;
      have_opset = true;
    }
  }
  if (!have_opset) {
    *err = "ONNX model has no opset_import for the default domain";
    return false;
  }
  if (m->opset_ < 1) {
    *err = "ONNX model imports invalid opset version " + std::to_string(m->opset_);
    return false;
  }
  RawGraph &g = raw.graph;
  m->graph_name_ = g.name;
  if (g.has_sparse_initializer) {
    *err = "graph '" + g.name + "' has sparse initializers, which the twin does not support";
    return false;
  }

  std::unordered_map<std::string, int> value_of;
  auto add_value = [&](const std::string &name, ValueKind kind, int index) {
    value_of.emplace(name, static_cast<int>(m->values_.size()));
    Value v;
    v.name = name;
    v.kind = kind;
    v.index = index;
    m->values_.push_back(std::move(v));
  };
  auto producer_name = [&](int vid) -> std::string {
    const Value &v = m->values_[vid];
    if (v.kind == ValueKind::kGraphInput) return "graph input '" + v.name + "'";
    if (v.kind == ValueKind::kInitializer) return "initializer '" + v.name + "'";
    return "node '" + g.nodes[v.index].node.name + "'";
  };

  // Initializers.
  for (size_t i = 0; i < g.initializers.size(); ++i) {
    auto &t = g.initializers[i];
    if (!g.initializer_errors[i].empty()) {
      *err = "initializer " + g.initializer_errors[i];
      return false;
    }
    if (t->name.empty()) {
      *err = "initializer #" + std::to_string(i) + " has no name";
      return false;
    }
    if (value_of.count(t->name)) {
      *err = "initializer '" + t->name + "' is defined twice";
      return false;
    }
    add_value(t->name, ValueKind::kInitializer, static_cast<int>(m->initializers_.size()));
    m->initializer_bytes_ += t->data.size();
    m->initializers_.push_back(t);
  }
  // Graph inputs; those that are initializers are constants, not Data nodes.
  std::map<std::string, bool> seen_inputs;
  for (const RawValueInfo &vi : g.inputs) {
    if (vi.name.empty()) {
      *err = "graph input without a name";
      return false;
    }
    if (seen_inputs.count(vi.name)) {
      *err = "graph input '" + vi.name + "' is declared twice";
      return false;
    }
    seen_inputs[vi.name] = true;
    if (value_of.count(vi.name)) continue;  // an initializer
    ValueInfo info;
    info.name = vi.name;
    bool rank_known = false;
    if (!ValueInfoToDesc(vi, "graph input", &info.desc, &rank_known, err)) return false;
    if (info.desc.dtype == ElemType::kUndefined) {
      *err = "graph input '" + vi.name + "' has no tensor element type";
      return false;
    }
    if (!rank_known) info.desc.dims = {kUnknownRankDim};  // no shape field: any rank, as in onnxruntime
    add_value(vi.name, ValueKind::kGraphInput, static_cast<int>(m->inputs_.size()));
    m->input_values_.push_back(value_of[vi.name]);
    m->inputs_.push_back(std::move(info));
    m->input_rank_known_.push_back(rank_known);
  }

  // Nodes: op support, arity, attributes, outputs produced once.
  const size_t n_nodes = g.nodes.size();
  for (size_t k = 0; k < n_nodes; ++k) {
    RawNode &rn = g.nodes[k];
    Node &n = rn.node;
    if (n.name.empty()) n.name = "#" + std::to_string(k);
    if (!rn.deferred_error.empty()) {
      *err = n.Where() + rn.deferred_error;
      return false;
    }
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      *err = n.Where() + "operator domain '" + n.domain + "' is not supported by the twin";
      return false;
    }
    n.op = FindOp(n.op_type);
    if (!n.op) {
      *err = n.Where() + "operator not supported by the twin";
      return false;
    }
    const OpDef &op = *n.op;
    const int nin = static_cast<int>(n.input_names.size()), nout = static_cast<int>(n.output_names.size());
    if (nin < op.min_inputs || nin > op.max_inputs) {
      *err = n.Where() + "expects " +
             (op.min_inputs == op.max_inputs ? std::to_string(op.min_inputs)
                                             : std::to_string(op.min_inputs) + " to " + std::to_string(op.max_inputs)) +
             " inputs, got " + std::to_string(nin);
      return false;
    }
    if (nout < op.min_outputs || nout > op.max_outputs) {
      *err = n.Where() + "expects " +
             (op.min_outputs == op.max_outputs
                  ? std::to_string(op.min_outputs)
                  : std::to_string(op.min_outputs) + " to " + std::to_string(op.max_outputs)) +
             " outputs, got " + std::to_string(nout);
      return false;
    }
    const int required_inputs = op.variadic ? nin : op.min_inputs;
    for (int i = 0; i < required_inputs; ++i) {
      if (n.input_names[i].empty()) {
        *err = n.Where() + "required input " + std::to_string(i) + " is missing";
        return false;
      }
    }
    for (int i = 0; i < op.min_outputs; ++i) {
      if (n.output_names[i].empty()) {
        *err = n.Where() + "required output " + std::to_string(i) + " is missing";
        return false;
      }
    }
    std::string reason;
    if (op.check && !op.check(n, m->opset_, &reason)) {
      *err = n.Where() + reason;
      return false;
    }
    if (n.op_type == "Constant") {
      if (!BuildConstantValue(n, &n.const_value, &reason)) {
        *err = n.Where() + reason;
        return false;
      }
      m->initializer_bytes_ += n.const_value->data.size();
    }
    n.outputs.assign(n.output_names.size(), -1);
    for (size_t o = 0; o < n.output_names.size(); ++o) {
      const std::string &name = n.output_names[o];
      if (name.empty()) continue;
      auto it = value_of.find(name);
      if (it != value_of.end()) {
        *err = n.Where() + "output '" + name + "' is already produced by " + producer_name(it->second);
        return false;
      }
      add_value(name, ValueKind::kNodeOutput, static_cast<int>(k));
      n.outputs[o] = value_of[name];
    }
  }
  // Every consumed value has a producer; build the dependency graph.
  std::vector<std::vector<int>> consumers(n_nodes);
  std::vector<int> indegree(n_nodes, 0);
  for (size_t k = 0; k < n_nodes; ++k) {
    Node &n = g.nodes[k].node;
    n.inputs.assign(n.input_names.size(), -1);
    for (size_t i = 0; i < n.input_names.size(); ++i) {
      const std::string &name = n.input_names[i];
      if (name.empty()) continue;
      auto it = value_of.find(name);
      if (it == value_of.end()) {
        *err = n.Where() + "input '" + name + "' is not produced by any node, initializer or graph input";
        return false;
      }
      n.inputs[i] = it->second;
      const Value &v = m->values_[it->second];
      if (v.kind == ValueKind::kNodeOutput) {
        consumers[v.index].push_back(static_cast<int>(k));
        ++indegree[k];
      }
    }
  }
  // Topological sort (Kahn), preferring the model's own order.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t k = 0; k < n_nodes; ++k)
    if (indegree[k] == 0) ready.push(static_cast<int>(k));
  std::vector<int> order;
  order.reserve(n_nodes);
  std::vector<int> remaining = indegree;
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    order.push_back(k);
    for (int c : consumers[k])
      if (--remaining[c] == 0) ready.push(c);
  }
  if (order.size() != n_nodes) {
    // Walk backwards through unfinished producers until a node repeats: that node lies on a cycle.
    int k = 0;
    while (remaining[k] == 0) ++k;
    std::vector<char> visited(n_nodes, 0);
    while (!visited[k]) {
      visited[k] = 1;
      const Node &n = g.nodes[k].node;
      int next = -1;
      for (int vid : n.inputs) {
        if (vid < 0) continue;
        const Value &v = m->values_[vid];
        if (v.kind == ValueKind::kNodeOutput && remaining[v.index] > 0) {
          next = v.index;
          break;
        }
      }
      if (next < 0) break;  // cannot happen: an unfinished node has an unfinished producer
      k = next;
    }
    const Node &n = g.nodes[k].node;
    *err = n.Where() + "is part of a cycle in the graph";
    return false;
  }
  std::vector<int> position(n_nodes);
  for (size_t p = 0; p < n_nodes; ++p) position[order[p]] = static_cast<int>(p);
  for (Value &v : m->values_)
    if (v.kind == ValueKind::kNodeOutput) v.index = position[v.index];
  m->nodes_.reserve(n_nodes);
  for (int k : order) m->nodes_.push_back(std::move(g.nodes[k].node));

  // Graph outputs.
  for (const RawValueInfo &vi : g.outputs) {
    auto it = value_of.find(vi.name);
    if (vi.name.empty() || it == value_of.end()) {
      *err = "graph output '" + vi.name + "' is not produced by any node, initializer or graph input";
      return false;
    }
    ValueInfo info;
    info.name = vi.name;
    bool rank_known = false;
    if (!ValueInfoToDesc(vi, "graph output", &info.desc, &rank_known, err)) return false;
    m->outputs_.push_back(std::move(info));
    m->output_values_.push_back(it->second);
  }
  if (m->outputs_.empty()) {
    *err = "graph '" + g.name + "' has no outputs";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Model check: the per-node checks of Build, continued past the first failure.

void CheckNodes(RawGraph &g, int64_t opset, std::vector<std::string> *problems) {
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    RawNode &rn = g.nodes[k];
    Node &n = rn.node;
    if (n.name.empty()) n.name = "#" + std::to_string(k);
    if (!rn.deferred_error.empty()) {
      problems->push_back(n.Where() + rn.deferred_error);
      continue;
    }
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      problems->push_back(n.Where() + "operator domain '" + n.domain + "' is not supported by the twin");
      continue;
    }
    n.op = FindOp(n.op_type);
    if (!n.op) {
      problems->push_back(n.Where() + "operator not supported by the twin");
      continue;
    }
    const int nin = static_cast<int>(n.input_names.size()), nout = static_cast<int>(n.output_names.size());
    if (nin < n.op->min_inputs || nin > n.op->max_inputs || nout < n.op->min_outputs || nout > n.op->max_outputs) {
      problems->push_back(n.Where() + "has " + std::to_string(nin) + " inputs and " + std::to_string(nout) +
                          " outputs, which the twin's implementation does not accept");
      continue;
    }
    std::string reason;
    if (n.op->check && !n.op->check(n, opset, &reason)) problems->push_back(n.Where() + reason);
  }
}

void CheckDeclared(const std::vector<RawValueInfo> &vis, const char *what, const std::set<std::string> &skip,
                   std::vector<ValueInfo> *out, std::vector<std::string> *problems) {
  for (const RawValueInfo &vi : vis) {
    if (skip.count(vi.name)) continue;
    ValueInfo info;
    info.name = vi.name;
    bool rank_known = false;
    std::string err;
    if (!ValueInfoToDesc(vi, what, &info.desc, &rank_known, &err)) problems->push_back(err);
    out->push_back(std::move(info));
  }
}

}  // namespace

void CheckModel(const void *data, size_t size, ModelCheck *report) {
  *report = ModelCheck();
  try {
    static const uint8_t kNothing = 0;
    const uint8_t *base = data ? static_cast<const uint8_t *>(data) : &kNothing;
    RawModel raw;
    std::string err;
    if (!data && size) {
      report->problems.push_back("ONNX model: null data");
      return;
    }
    if (!DecodeModel(base, size, &raw, &err)) {
      report->problems.push_back(err);
      return;
    }
    report->ir_version = raw.ir_version;
    for (const auto &op : raw.opsets)
      if ((op.first.empty() || op.first == "ai.onnx") && op.second > report->opset) report->opset = op.second;
    std::set<std::string> init_names;
    for (size_t i = 0; i < raw.graph.initializers.size(); ++i) {
      init_names.insert(raw.graph.initializers[i]->name);
      if (!raw.graph.initializer_errors[i].empty())
        report->problems.push_back("initializer " + raw.graph.initializer_errors[i]);
    }
    CheckDeclared(raw.graph.inputs, "graph input", init_names, &report->inputs, &report->problems);
    CheckDeclared(raw.graph.outputs, "graph output", {}, &report->outputs, &report->problems);
    CheckNodes(raw.graph, report->opset, &report->problems);
    if (!report->problems.empty()) return;
    // Nothing wrong node by node: the whole-graph checks (edges, cycles, shapes) report their first problem.
    std::shared_ptr<const Model> m = ParseModel(data, size, &err);
    if (!m) {
      report->problems.push_back(err);
      return;
    }
    const ModelImpl &mi = static_cast<const ModelImpl &>(*m);
    for (bool known : mi.input_rank_known_)
      if (!known) return;  // shapes cannot be propagated from an input of unknown rank; the runtime will know it
    std::vector<TensorDesc> in_descs;
    for (const ValueInfo &vi : m->inputs()) in_descs.push_back(vi.desc);
    std::vector<TensorDesc> outs;
    if (!InferShapes(*m, in_descs, &outs, &err)) report->problems.push_back(err);
  } catch (const std::bad_alloc &) {
    report->problems.push_back("out of memory while checking the ONNX model");
  } catch (const std::exception &e) {
    report->problems.push_back(std::string("internal error while checking the ONNX model: ") + e.what());
  }
}

std::shared_ptr<const Model> ParseModel(const void *data, size_t size, std::string *error) {
  std::string err;
  try {
    if (!data && size) {
      err = "ONNX model: null data";
    } else {
      RawModel raw;
      static const uint8_t kNothing = 0;
      const uint8_t *base = data ? static_cast<const uint8_t *>(data) : &kNothing;
      if (DecodeModel(base, size, &raw, &err)) {
        auto m = std::make_shared<ModelImpl>();
        if (Build(raw, m.get(), &err)) return m;
      }
    }
  } catch (const std::bad_alloc &) {
    err = "out of memory while parsing the ONNX model";
  } catch (const std::exception &e) {
    err = std::string("internal error while parsing the ONNX model: ") + e.what();
  } catch (...) {
    err = "internal error while parsing the ONNX model";
  }
  if (error) *error = err;
  return nullptr;
}

}  // namespace onnx
}  // namespace twin
