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

struct RawGraph;

struct RawNode {
  Node node;
  std::string deferred_error;
  std::vector<std::pair<size_t, std::shared_ptr<RawGraph>>> graphs;  // (attribute index, its decoded subgraph)
};

struct RawGraph {
  std::string name;
  std::vector<RawNode> nodes;
  std::vector<std::shared_ptr<ConstTensor>> initializers;
  std::vector<std::string> initializer_errors;  // per initializer, "" if fine
  std::vector<RawValueInfo> inputs, outputs;
  bool has_sparse_initializer = false;
};

using FunctionNames = std::set<std::pair<std::string, std::string>>;  // (domain, name)

// One message for loading and for `geasync check`: torch.onnx.export(export_modules_as_functions=True) makes such
// models, and the fix is the same whichever of the two meets it first.
std::string LocalFunctionProblem(const Node &n) {
  return n.Where() + "calls the model-local function '" + (n.domain.empty() ? "" : n.domain + ".") + n.op_type +
         "', which GE's ONNX parser does not expand: inline the model's functions before loading it "
         "(onnx.inliner.inline_local_functions(model))";
}

// An operator the twin does not have. The sequence operators get a reason: torch.onnx.export(dynamo=True)
// writes them for nn.EmbeddingBag (a Loop that SequenceInserts one row per bag), and "not supported" alone
// reads as if implementing one operator would do.
std::string UnsupportedOpProblem(const Node &n) {
  std::string msg = n.Where() + "operator not supported by the twin";
  const std::string &t = n.op_type;
  if (t.rfind("Sequence", 0) == 0 || t == "ConcatFromSequence" || t == "SplitToSequence")
    msg += " (the twin has no ONNX sequence values: no operator that makes or reads a sequence runs on it)";
  // onnxruntime's extended optimizations write this fusion (T5 / Llama RMS norms) in the default domain.
  if (t == "SimplifiedLayerNormalization")
    msg += " (an onnxruntime fusion written in the default domain, not an ONNX operator: load the model as "
           "exported, or as onnxruntime saves it at graph_optimization_level ORT_ENABLE_BASIC at most; opset 23 "
           "has RMSNormalization)";
  return msg;
}

// An operator of a domain other than ONNX's default one. onnxruntime's graph optimizations (saved with
// optimized_model_filepath at ORT_ENABLE_EXTENDED / ALL), its transformer optimizer and quantize_static's QOperator
// format write com.microsoft operators (FusedMatMul, FusedConv, SkipLayerNormalization, QLinearAdd, ...) and
// com.microsoft.nchwc layouts; the message says how to get a model without them.
std::string UnsupportedDomainProblem(const Node &n) {
  std::string msg = n.Where() + "operator domain '" + n.domain + "' is not supported by the twin";
  if (n.domain.rfind("com.microsoft", 0) == 0)
    msg += " (" + n.op_type +
           " is an onnxruntime operator, not ONNX; the twin runs the default ONNX domain only: load the model as "
           "exported, or as onnxruntime saves it at graph_optimization_level ORT_ENABLE_BASIC at most, without "
           "onnxruntime.transformers.optimizer fusions, and quantised with quantize_static's QDQ format, not "
           "QOperator)";
  // Below opset 21 onnxruntime's quantizer writes 4-bit (and 16-bit) QDQ in its own domain.
  if (n.domain == "com.microsoft" && (n.op_type == "DequantizeLinear" || n.op_type == "QuantizeLinear"))
    msg += "; for 4-bit or 16-bit types convert the model to opset 21 (onnx.version_converter) before quantising: "
           "then onnxruntime writes the standard operator";
  return msg;
}

struct RawModel {
  int64_t ir_version = 0;
  std::vector<std::pair<std::string, int64_t>> opsets;
  int graph_count = 0;
  RawGraph graph;
  FunctionNames local_functions;  // of ModelProto.functions
};

// A TensorProto's fields as read from the wire (raw_data as a range of the model's bytes).
struct TensorFields {
  std::vector<int64_t> dims, int64_data;
  std::vector<uint64_t> int32_data, uint64_data;  // int32_data kept as raw varints
  std::vector<float> float_data;
  std::vector<double> double_data;
  int64_t data_type = 0, data_location = 0;
  bool has_raw = false, has_external = false, has_segment = false, has_strings = false;
  size_t raw_off = 0, raw_len = 0;
};

bool ReadRawData(const uint8_t *base, ProtoReader *r, int wire, TensorFields *f, std::string *err) {
  ProtoReader sub(base, 0, 0);
  if (!r->SubField(wire, &sub, err)) return false;
  f->has_raw = true;
  f->raw_off = sub.pos();
  f->raw_len = r->pos() - f->raw_off;  // payload ends where the reader now stands
  return true;
}

bool ReadTensorFields(const uint8_t *base, ProtoReader r, TensorFields *f, std::string *name, std::string *err) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    bool ok = true;
    switch (field) {
      case 1: ok = r.RepeatedInt64(wire, &f->dims, err); break;
      case 2: ok = r.Int64Field(wire, &f->data_type, err); break;
      case 3: f->has_segment = true; ok = r.Skip(wire, err); break;
      case 4: ok = r.RepeatedFloat(wire, &f->float_data, err); break;
      case 5: ok = r.RepeatedUint64(wire, &f->int32_data, err); break;
      case 6: f->has_strings = true; ok = r.Skip(wire, err); break;
      case 7: ok = r.RepeatedInt64(wire, &f->int64_data, err); break;
      case 8: ok = r.StringField(wire, name, err); break;
      case 9: ok = ReadRawData(base, &r, wire, f, err); break;
      case 10: ok = r.RepeatedDouble(wire, &f->double_data, err); break;
      case 11: ok = r.RepeatedUint64(wire, &f->uint64_data, err); break;
      case 13: f->has_external = true; ok = r.Skip(wire, err); break;
      case 14: ok = r.Int64Field(wire, &f->data_location, err); break;
      default: ok = r.Skip(wire, err); break;
    }
    if (!ok) return false;
  }
  return true;
}

// The tensor's storage, dtype and shape are ones the twin supports; else false with *semantic.
bool SupportedTensor(const TensorFields &f, const std::string &who, ElemType *et, int64_t *n, std::string *semantic) {
  if (f.has_external || f.data_location == 1) {
    *semantic = who + " uses external data: give the model by path (Graph.from_onnx(path) reads the files beside it)";
    return false;
  }
  if (f.has_segment) {
    *semantic = who + " is segmented, which the twin does not support";
    return false;
  }
  if (f.has_strings || !OnnxTypeToElemType(f.data_type, et)) {
    *semantic = who + " has data type " + OnnxTypeName(f.data_type) + ", which the twin does not support";
    return false;
  }
  for (int64_t d : f.dims) {
    if (d < 0) {
      *semantic = who + " has negative dimension " + std::to_string(d);
      return false;
    }
  }
  std::string reason;
  if (!CheckedNumElements(f.dims, n, &reason)) {
    *semantic = who + ": " + reason;
    return false;
  }
  return true;
}

template <typename T>
bool CopyTypedData(const std::vector<T> &src, size_t count, ConstTensor *t, size_t *have) {
  *have = src.size();
  if (src.size() != count) return false;
  t->data.resize(count * sizeof(T));
  CopyBytes(t->data.data(), src.data(), count * sizeof(T));
  return true;
}

// uint32 and uint64 values both live in uint64_data.
bool CopyUint64Data(const std::vector<uint64_t> &src, size_t count, size_t esize, ConstTensor *t, size_t *have) {
  *have = src.size();
  if (src.size() != count) return false;
  t->data.resize(count * esize);
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = src[i];
    if (esize == 4) {
      uint32_t v32 = static_cast<uint32_t>(v);
      std::memcpy(&t->data[i * 4], &v32, 4);
    } else {
      std::memcpy(&t->data[i * 8], &v, 8);
    }
  }
  return true;
}

// int32, int16, int8, uint16, uint8, bool, float16 and bfloat16 values all live in int32_data.
bool CopyInt32Data(const std::vector<uint64_t> &src, size_t count, size_t esize, ConstTensor *t, size_t *have) {
  *have = src.size();
  if (src.size() != count) return false;
  t->data.resize(count * esize);
  for (size_t i = 0; i < count; ++i) {
    uint32_t v = static_cast<uint32_t>(src[i]);  // keeps the low bits (little-endian below)
    for (size_t b = 0; b < esize; ++b) t->data[i * esize + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  return true;
}

// Fills t->data from raw_data or the typed field of et; false (with the number of values found) on a count mismatch.
bool CopyTensorData(const uint8_t *base, const TensorFields &f, ElemType et, size_t count, ConstTensor *t,
                    size_t *have) {
  const size_t esize = ElemSize(et);
  if (f.has_raw) {
    *have = f.raw_len / esize;
    if (f.raw_len / esize != count || f.raw_len % esize != 0) return false;
    t->data.assign(base + f.raw_off, base + f.raw_off + f.raw_len);
    return true;
  }
  t->data.resize(0);
  switch (et) {
    case ElemType::kFloat: return CopyTypedData(f.float_data, count, t, have);
    case ElemType::kDouble: return CopyTypedData(f.double_data, count, t, have);
    case ElemType::kInt64: return CopyTypedData(f.int64_data, count, t, have);
    case ElemType::kUint32:
    case ElemType::kUint64: return CopyUint64Data(f.uint64_data, count, esize, t, have);
    default: return CopyInt32Data(f.int32_data, count, esize, t, have);
  }
}

// Decodes a TensorProto. Returns false with *err for wire-level corruption; a semantic problem (unsupported dtype,
// external data, size mismatch) leaves *semantic non-empty and returns true.
// 4-bit integers (ONNX INT4 = 22, UINT4 = 21), two a byte with the first in the low nibble, in raw_data or one byte
// an int32_data entry: unpacked one a byte, sign-extended for INT4. quantize_static writes them for QInt4 / QUInt4
// weights (opset 21).
constexpr int64_t kOnnxUint4 = 21, kOnnxInt4 = 22;

void Widen4Bit(const uint8_t *base, const TensorFields *f, ConstTensor *t, const std::string &who,
               std::string *semantic) {
  const bool is_signed = f->data_type == kOnnxInt4;
  if (f->has_external || f->data_location == 1 || f->has_segment) return;  // SupportedTensor says why
  for (int64_t d : f->dims) {
    if (d < 0) {
      *semantic = who + " has negative dimension " + std::to_string(d);
      return;
    }
  }
  int64_t n;
  std::string reason;
  if (!CheckedNumElements(f->dims, &n, &reason)) {
    *semantic = who + ": " + reason;
    return;
  }
  const size_t count = static_cast<size_t>(n), packed = (count + 1) / 2;
  std::vector<uint8_t> bytes;
  if (f->has_raw) {
    bytes.assign(base + f->raw_off, base + f->raw_off + f->raw_len);
  } else {
    for (uint64_t v : f->int32_data) bytes.push_back(static_cast<uint8_t>(v));
  }
  if (bytes.size() != packed) {
    *semantic = who + " holds " + std::to_string(bytes.size()) + " bytes of 4-bit values but its shape " +
                ShapeStr(f->dims) + " needs " + std::to_string(packed);
    return;
  }
  t->data.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const int nibble = (bytes[i / 2] >> (4 * (i % 2))) & 0xF;
    t->data[i] = static_cast<uint8_t>(is_signed && nibble >= 8 ? nibble - 16 : nibble);
  }
  t->desc.dtype = is_signed ? ElemType::kInt8 : ElemType::kUint8;
  t->desc.dims = f->dims;
  t->widened_from = f->data_type;
}

bool DecodeTensor(const uint8_t *base, ProtoReader r, ConstTensor *t, std::string *semantic, std::string *err) {
  TensorFields f;
  if (!ReadTensorFields(base, r, &f, &t->name, err)) return false;
  const std::string who = "tensor '" + t->name + "'";
  if ((f.data_type == kOnnxInt4 || f.data_type == kOnnxUint4) && !f.has_strings) {
    Widen4Bit(base, &f, t, who, semantic);
    if (t->widened_from || !semantic->empty()) return true;
  }
  ElemType et;
  int64_t n;
  if (!SupportedTensor(f, who, &et, &n, semantic)) return true;
  t->desc.dtype = et;
  t->desc.dims = f.dims;
  const size_t count = static_cast<size_t>(n);
  size_t have = 0;
  if (!CopyTensorData(base, f, et, count, t, &have))
    *semantic = who + " holds " + std::to_string(have) + " values but its shape " + ShapeStr(f.dims) + " needs " +
                std::to_string(count);
  return true;
}

bool DecodeGraph(const uint8_t *base, ProtoReader r, RawGraph *g, int depth, std::string *err);

// A graph-valued attribute's GraphProto, decoded depth levels below the model's graph.
bool DecodeSubgraph(const uint8_t *base, ProtoReader *r, int wire, int depth, std::shared_ptr<RawGraph> *g,
                    std::string *err) {
  ProtoReader sub(base, 0, 0);
  if (!r->SubField(wire, &sub, err)) return false;
  if (depth > kMaxGraphDepth) {
    *err = "ONNX model nests subgraphs (If/Loop/Scan bodies) more than " + std::to_string(kMaxGraphDepth) +
           " levels deep, which the twin refuses";
    return false;
  }
  *g = std::make_shared<RawGraph>();
  return DecodeGraph(base, sub, g->get(), depth, err);
}

bool DecodeAttribute(const uint8_t *base, ProtoReader r, Attribute *a, int depth, std::shared_ptr<RawGraph> *graph,
                     std::string *semantic, std::string *err) {
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
          if (ok && t->widened_from && sem.empty())  // only initializers may hold 4-bit values (as DequantizeLinear's)
            sem = "tensor '" + t->name + "' has data type " + OnnxTypeName(t->widened_from) +
                  ", which the twin supports only in initializers read by DequantizeLinear";
          if (ok && !sem.empty() && semantic->empty()) *semantic = sem;
          a->t = t;
        }
        break;
      }
      case 6: has_g = true; ok = DecodeSubgraph(base, &r, wire, depth + 1, graph, err); break;
      case 11:
        if (semantic->empty()) *semantic = "attribute '" + a->name + "' is a list of graphs, which the twin does not support";
        ok = r.Skip(wire, err);
        break;
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

bool DecodeNode(const uint8_t *base, ProtoReader r, RawNode *rn, int depth, std::string *err) {
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
          std::shared_ptr<RawGraph> graph;
          ok = DecodeAttribute(base, sub, &n.attrs.back(), depth, &graph, &rn->deferred_error, err);
          if (ok && graph) rn->graphs.emplace_back(n.attrs.size() - 1, std::move(graph));
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

bool DecodeGraph(const uint8_t *base, ProtoReader r, RawGraph *g, int depth, std::string *err) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    if (!r.ReadTag(&field, &wire, err)) return false;
    ProtoReader sub(base, 0, 0);
    switch (field) {
      case 1:
        if (!r.SubField(wire, &sub, err)) return false;
        g->nodes.emplace_back();
        if (!DecodeNode(base, sub, &g->nodes.back(), depth, err)) return false;
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
      if (!DecodeGraph(base, sub, &m->graph, 0, err)) return false;
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
    } else if (field == 25) {  // FunctionProto: only its name (1) and domain (10), to name it in an error
      if (!r.SubField(wire, &sub, err)) return false;
      std::pair<std::string, std::string> fn;
      while (!sub.done()) {
        uint32_t f2;
        int w2;
        if (!sub.ReadTag(&f2, &w2, err)) return false;
        if (f2 == 1) {
          if (!sub.StringField(w2, &fn.second, err)) return false;
        } else if (f2 == 10) {
          if (!sub.StringField(w2, &fn.first, err)) return false;
        } else if (!sub.Skip(w2, err)) {
          return false;
        }
      }
      m->local_functions.insert(std::move(fn));
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

// Builds the IR from a decoded model in steps; each returns false with *err set (the first problem found).
class ModelBuilder {
 public:
  ModelBuilder(RawModel &raw, ModelImpl *m, std::string *err)
      : raw_(&raw), functions_(&raw.local_functions), g_(raw.graph), m_(m), err_(err) {}
  // A subgraph: the enclosing model's opset; names it reads but does not define become captured inputs.
  ModelBuilder(RawGraph &g, int64_t opset, const FunctionNames *functions, ModelImpl *m, std::string *err)
      : functions_(functions), g_(g), m_(m), err_(err) {
    m_->opset_ = opset;
  }

  bool Build() {
    return ReadHeader() && AddInitializers() && AddGraphInputs() && AddNodes() && CheckWidenedReaders() &&
           ResolveNodeInputs() && SortNodes() && AddGraphOutputs();
  }

 private:
  bool Fail(std::string msg) {
    *err_ = std::move(msg);
    return false;
  }
  bool ReadHeader();
  bool ReadOpset();
  void AddValue(const std::string &name, ValueKind kind, int index);
  std::string ProducerName(int vid) const;
  bool AddInitializers();
  bool AddGraphInputs();
  bool AddGraphInput(const RawValueInfo &vi);
  bool AddNodes();
  bool CheckWidenedReaders();
  bool CheckNode(size_t k, Node &n);
  bool CheckArity(const Node &n);
  bool CheckRequiredIo(const Node &n);
  bool AddNodeOutputs(size_t k, Node &n);
  bool BuildSubgraphs(size_t k, Node &n);
  bool Lookup(const std::string &name, int *vid);
  bool ResolveNodeInputs();
  bool SortNodes();
  bool ReportCycle(const std::vector<int> &remaining);
  void ApplyOrder(const std::vector<int> &order);
  bool AddGraphOutputs();

  RawModel *raw_ = nullptr;  // nullptr for a subgraph
  const FunctionNames *functions_;  // the model's local functions, for subgraphs too
  RawGraph &g_;
  ModelImpl *m_;
  std::string *err_;
  std::unordered_map<std::string, int> value_of_;
  std::vector<std::vector<int>> consumers_;  // per node: the nodes reading its outputs
  std::vector<int> indegree_;                // per node: inputs produced by other nodes
};

bool ModelBuilder::ReadHeader() {
  if (raw_) {
    m_->ir_version_ = raw_->ir_version;
    if (raw_->graph_count == 0) return Fail("ONNX model has no graph");
    if (!ReadOpset()) return false;
  }
  m_->graph_name_ = g_.name;
  if (g_.has_sparse_initializer)
    return Fail("graph '" + g_.name + "' has sparse initializers, which the twin does not support");
  return true;
}

// The highest opset imported for the default domain.
bool ModelBuilder::ReadOpset() {
  bool have_opset = false;
  for (const auto &op : raw_->opsets) {
    if (op.first.empty() || op.first == "ai.onnx") {
      if (!have_opset || op.second > m_->opset_) m_->opset_ = op.second;
      have_opset = true;
    }
  }
  if (!have_opset) return Fail("ONNX model has no opset_import for the default domain");
  if (m_->opset_ < 1) return Fail("ONNX model imports invalid opset version " + std::to_string(m_->opset_));
  return true;
}

void ModelBuilder::AddValue(const std::string &name, ValueKind kind, int index) {
  value_of_.emplace(name, static_cast<int>(m_->values_.size()));
  Value v;
  v.name = name;
  v.kind = kind;
  v.index = index;
  m_->values_.push_back(std::move(v));
}

std::string ModelBuilder::ProducerName(int vid) const {
  const Value &v = m_->values_[vid];
  if (v.kind == ValueKind::kGraphInput) return "graph input '" + v.name + "'";
  if (v.kind == ValueKind::kInitializer) return "initializer '" + v.name + "'";
  return "node '" + g_.nodes[v.index].node.name + "'";
}

bool ModelBuilder::AddInitializers() {
  for (size_t i = 0; i < g_.initializers.size(); ++i) {
    auto &t = g_.initializers[i];
    if (!g_.initializer_errors[i].empty()) return Fail("initializer " + g_.initializer_errors[i]);
    if (t->name.empty()) return Fail("initializer #" + std::to_string(i) + " has no name");
    if (value_of_.count(t->name)) return Fail("initializer '" + t->name + "' is defined twice");
    AddValue(t->name, ValueKind::kInitializer, static_cast<int>(m_->initializers_.size()));
    m_->initializer_bytes_ += t->data.size();
    m_->initializers_.push_back(t);
  }
  return true;
}

// Graph inputs; those that are initializers are constants, not Data nodes.
bool ModelBuilder::AddGraphInputs() {
  std::set<std::string> seen;
  for (const RawValueInfo &vi : g_.inputs) {
    if (vi.name.empty()) return Fail("graph input without a name");
    if (!seen.insert(vi.name).second) return Fail("graph input '" + vi.name + "' is declared twice");
    if (value_of_.count(vi.name)) continue;  // an initializer
    if (!AddGraphInput(vi)) return false;
  }
  return true;
}

bool ModelBuilder::AddGraphInput(const RawValueInfo &vi) {
  ValueInfo info;
  info.name = vi.name;
  bool rank_known = false;
  if (!ValueInfoToDesc(vi, "graph input", &info.desc, &rank_known, err_)) return false;
  // A subgraph's inputs may leave their types to the owning node (Loop and Scan bodies often do).
  if (info.desc.dtype == ElemType::kUndefined && raw_)
    return Fail("graph input '" + vi.name + "' has no tensor element type");
  if (!rank_known) info.desc.dims = {kUnknownRankDim};  // no shape field: any rank, as in onnxruntime
  AddValue(vi.name, ValueKind::kGraphInput, static_cast<int>(m_->inputs_.size()));
  m_->input_values_.push_back(value_of_[vi.name]);
  m_->inputs_.push_back(std::move(info));
  m_->input_rank_known_.push_back(rank_known);
  return true;
}

// Nodes: op support, arity, attributes, outputs produced once.
bool ModelBuilder::AddNodes() {
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    Node &n = g_.nodes[k].node;
    if (!CheckNode(k, n) || !AddNodeOutputs(k, n)) return false;
  }
  return true;
}

// A 4-bit initializer, held as int8 / uint8, may only be read as DequantizeLinear's x or zero point: there the
// wider type gives the same float results; anywhere else its type would show.
bool ModelBuilder::CheckWidenedReaders() {
  std::map<std::string, const ConstTensor *> widened;
  for (const auto &t : g_.initializers)
    if (t->widened_from) widened.emplace(t->name, t.get());
  if (widened.empty()) return true;
  auto refuse = [&](const ConstTensor &t, const std::string &reader) {
    return Fail("initializer '" + t.name + "' has data type " + OnnxTypeName(t.widened_from) + ", which the twin " +
                "supports only as the input or zero point of DequantizeLinear, but " + reader + " reads it");
  };
  for (const RawNode &rn : g_.nodes) {
    const Node &n = rn.node;
    for (size_t i = 0; i < n.input_names.size(); ++i) {
      auto it = widened.find(n.input_names[i]);
      if (it == widened.end()) continue;
      if (n.op_type != "DequantizeLinear" || (i != 0 && i != 2))
        return refuse(*it->second, "node '" + n.name + "' (op " + n.op_type + ", input " + std::to_string(i) + ")");
    }
  }
  for (const RawValueInfo &vi : g_.outputs) {
    auto it = widened.find(vi.name);
    if (it != widened.end()) return refuse(*it->second, "the graph output");
  }
  return true;
}

bool ModelBuilder::CheckNode(size_t k, Node &n) {
  const RawNode &rn = g_.nodes[k];
  if (n.name.empty()) n.name = "#" + std::to_string(k);
  if (!rn.deferred_error.empty()) return Fail(n.Where() + rn.deferred_error);
  if (functions_->count({n.domain, n.op_type}))  // as GE's parser: no model-local functions
    return Fail(LocalFunctionProblem(n));
  if (!n.domain.empty() && n.domain != "ai.onnx")
    return Fail(UnsupportedDomainProblem(n));
  n.op = FindOp(n.op_type);
  if (!n.op) return Fail(UnsupportedOpProblem(n));
  if (!CheckArity(n) || !CheckRequiredIo(n)) return false;
  if (!BuildSubgraphs(k, n)) return false;
  std::string reason;
  if (n.op->check && !n.op->check(n, m_->opset_, &reason)) return Fail(n.Where() + reason);
  if (n.op_type == "Constant") {
    if (!BuildConstantValue(n, &n.const_value, &reason)) return Fail(n.Where() + reason);
    m_->initializer_bytes_ += n.const_value->data.size();
  }
  return true;
}

// Builds the node's graph attributes; the outer names they read become the node's trailing (implicit) inputs.
bool ModelBuilder::BuildSubgraphs(size_t k, Node &n) {
  std::set<std::string> seen;
  for (auto &ag : g_.nodes[k].graphs) {
    Attribute &a = n.attrs[ag.first];
    auto sub = std::make_shared<ModelImpl>();
    std::string err;
    if (!ModelBuilder(*ag.second, m_->opset_, functions_, sub.get(), &err).Build())
      return Fail(n.Where() + "subgraph '" + a.name + "': " + err);
    for (const std::string &name : sub->captured_)
      if (seen.insert(name).second) n.input_names.push_back(name);
    for (const Node &inner : sub->nodes_)
      n.nondeterministic = n.nondeterministic || inner.nondeterministic || !inner.op->foldable;
    m_->initializer_bytes_ += sub->initializer_bytes_;
    a.g = std::move(sub);
  }
  n.implicit_inputs = seen.size();
  return true;
}

// The value named `name`; in a subgraph a name defined by no enclosing part of it is captured from outside.
bool ModelBuilder::Lookup(const std::string &name, int *vid) {
  auto it = value_of_.find(name);
  if (it != value_of_.end()) {
    *vid = it->second;
    return true;
  }
  if (raw_) return false;
  ValueInfo info;
  info.name = name;
  info.desc.dims = {kUnknownRankDim};
  AddValue(name, ValueKind::kGraphInput, static_cast<int>(m_->inputs_.size()));
  *vid = value_of_[name];
  m_->input_values_.push_back(*vid);
  m_->inputs_.push_back(std::move(info));
  m_->input_rank_known_.push_back(false);
  m_->captured_.push_back(name);
  return true;
}

std::string ArityError(const Node &n, int lo, int hi, int got, const char *what) {
  return n.Where() + "expects " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
         " " + what + ", got " + std::to_string(got);
}

bool ModelBuilder::CheckArity(const Node &n) {
  const OpDef &op = *n.op;
  const int nin = static_cast<int>(n.input_names.size()), nout = static_cast<int>(n.output_names.size());
  if (nin < op.min_inputs || nin > op.max_inputs)
    return Fail(ArityError(n, op.min_inputs, op.max_inputs, nin, "inputs"));
  if (nout < op.min_outputs || nout > op.max_outputs)
    return Fail(ArityError(n, op.min_outputs, op.max_outputs, nout, "outputs"));
  return true;
}

bool ModelBuilder::CheckRequiredIo(const Node &n) {
  const OpDef &op = *n.op;
  const int required_inputs = op.variadic ? static_cast<int>(n.input_names.size()) : op.min_inputs;
  for (int i = 0; i < required_inputs; ++i)
    if (n.input_names[i].empty()) return Fail(n.Where() + "required input " + std::to_string(i) + " is missing");
  for (int i = 0; i < op.min_outputs; ++i)
    if (n.output_names[i].empty()) return Fail(n.Where() + "required output " + std::to_string(i) + " is missing");
  return true;
}

bool ModelBuilder::AddNodeOutputs(size_t k, Node &n) {
  n.outputs.assign(n.output_names.size(), -1);
  for (size_t o = 0; o < n.output_names.size(); ++o) {
    const std::string &name = n.output_names[o];
    if (name.empty()) continue;
    auto it = value_of_.find(name);
    if (it != value_of_.end())
      return Fail(n.Where() + "output '" + name + "' is already produced by " + ProducerName(it->second));
    AddValue(name, ValueKind::kNodeOutput, static_cast<int>(k));
    n.outputs[o] = value_of_[name];
  }
  return true;
}

// Every consumed value has a producer; build the dependency graph.
bool ModelBuilder::ResolveNodeInputs() {
  const size_t n_nodes = g_.nodes.size();
  consumers_.assign(n_nodes, {});
  indegree_.assign(n_nodes, 0);
  for (size_t k = 0; k < n_nodes; ++k) {
    Node &n = g_.nodes[k].node;
    n.inputs.assign(n.input_names.size(), -1);
    for (size_t i = 0; i < n.input_names.size(); ++i) {
      const std::string &name = n.input_names[i];
      if (name.empty()) continue;
      int vid;
      if (!Lookup(name, &vid)) {
        if (i + n.implicit_inputs >= n.input_names.size())
          return Fail(n.Where() + "its subgraphs read '" + name +
                      "', which is not produced by any node, initializer or graph input");
        return Fail(n.Where() + "input '" + name + "' is not produced by any node, initializer or graph input");
      }
      n.inputs[i] = vid;
      const Value &v = m_->values_[vid];
      if (v.kind == ValueKind::kNodeOutput) {
        consumers_[v.index].push_back(static_cast<int>(k));
        ++indegree_[k];
      }
    }
  }
  return true;
}

// Topological sort (Kahn), preferring the model's own order.
bool ModelBuilder::SortNodes() {
  const size_t n_nodes = g_.nodes.size();
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t k = 0; k < n_nodes; ++k)
    if (indegree_[k] == 0) ready.push(static_cast<int>(k));
  std::vector<int> order;
  order.reserve(n_nodes);
  std::vector<int> remaining = indegree_;
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    order.push_back(k);
    for (int c : consumers_[k])
      if (--remaining[c] == 0) ready.push(c);
  }
  if (order.size() != n_nodes) return ReportCycle(remaining);
  ApplyOrder(order);
  return true;
}

// Walks backwards through unfinished producers until a node repeats: that node lies on a cycle.
bool ModelBuilder::ReportCycle(const std::vector<int> &remaining) {
  int k = 0;
  while (remaining[k] == 0) ++k;
  std::vector<char> visited(g_.nodes.size(), 0);
  while (!visited[k]) {
    visited[k] = 1;
    int next = -1;
    for (int vid : g_.nodes[k].node.inputs) {
      if (vid < 0) continue;
      const Value &v = m_->values_[vid];
      if (v.kind == ValueKind::kNodeOutput && remaining[v.index] > 0) {
        next = v.index;
        break;
      }
    }
    if (next < 0) break;  // cannot happen: an unfinished node has an unfinished producer
    k = next;
  }
  return Fail(g_.nodes[k].node.Where() + "is part of a cycle in the graph");
}

// Moves the nodes into the model in topological order; node-output values then index the sorted nodes.
void ModelBuilder::ApplyOrder(const std::vector<int> &order) {
  std::vector<int> position(order.size());
  for (size_t p = 0; p < order.size(); ++p) position[order[p]] = static_cast<int>(p);
  for (Value &v : m_->values_)
    if (v.kind == ValueKind::kNodeOutput) v.index = position[v.index];
  m_->nodes_.reserve(order.size());
  for (int k : order) m_->nodes_.push_back(std::move(g_.nodes[k].node));
}

bool ModelBuilder::AddGraphOutputs() {
  for (const RawValueInfo &vi : g_.outputs) {
    int vid;
    if (vi.name.empty() || !Lookup(vi.name, &vid))
      return Fail("graph output '" + vi.name + "' is not produced by any node, initializer or graph input");
    ValueInfo info;
    info.name = vi.name;
    bool rank_known = false;
    if (!ValueInfoToDesc(vi, "graph output", &info.desc, &rank_known, err_)) return false;
    m_->outputs_.push_back(std::move(info));
    m_->output_values_.push_back(vid);
  }
  if (m_->outputs_.empty()) return Fail("graph '" + g_.name + "' has no outputs");
  return true;
}

bool Build(RawModel &raw, ModelImpl *m, std::string *err) { return ModelBuilder(raw, m, err).Build(); }

// ---------------------------------------------------------------------------------------------------------
// Model check: the per-node checks of Build, continued past the first failure.

void CheckNodes(RawGraph &g, int64_t opset, const FunctionNames &functions, std::vector<std::string> *problems) {
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    RawNode &rn = g.nodes[k];
    Node &n = rn.node;
    if (n.name.empty()) n.name = "#" + std::to_string(k);
    for (auto &ag : rn.graphs) {  // subgraph nodes are listed too, named by the path to them
      std::vector<std::string> inner;
      CheckNodes(*ag.second, opset, functions, &inner);
      for (const std::string &p : inner)
        problems->push_back(n.Where() + "subgraph '" + n.attrs[ag.first].name + "': " + p);
    }
    if (!rn.deferred_error.empty()) {
      problems->push_back(n.Where() + rn.deferred_error);
      continue;
    }
    if (functions.count({n.domain, n.op_type})) {
      problems->push_back(LocalFunctionProblem(n));
      continue;
    }
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      problems->push_back(UnsupportedDomainProblem(n));
      continue;
    }
    n.op = FindOp(n.op_type);
    if (!n.op) {
      problems->push_back(UnsupportedOpProblem(n));
      continue;
    }
    const int nin = static_cast<int>(n.input_names.size()), nout = static_cast<int>(n.output_names.size());
    if (nin < n.op->min_inputs || nin > n.op->max_inputs || nout < n.op->min_outputs || nout > n.op->max_outputs) {
      problems->push_back(n.Where() + "has " + std::to_string(nin) + " inputs and " + std::to_string(nout) +
                          " outputs, which the twin's implementation does not accept");
      continue;
    }
    std::string reason;
    // Checks of ops with subgraphs read the built subgraphs: ParseModel runs them, after these per-node checks.
    if (n.op->check && rn.graphs.empty() && !n.op->check(n, opset, &reason)) problems->push_back(n.Where() + reason);
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
    CheckNodes(raw.graph, report->opset, raw.local_functions, &report->problems);
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
