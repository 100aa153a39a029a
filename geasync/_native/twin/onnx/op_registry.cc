// The operator table (built once, immutable afterwards) and helpers shared by op implementations:
// attribute accessors, axis normalisation, the byte-copy kernel.
#include "op_registry.h"

#include <map>

#include "elem.h"

namespace twin {
namespace onnx {
namespace {

using OpTable = std::map<std::string, OpDef>;

OpTable BuildTable() {
  std::vector<OpDef> ops;
  RegisterElementwiseOps(&ops);
  RegisterMatMulOps(&ops);
  RegisterSoftmaxOps(&ops);
  RegisterShapeOps(&ops);
  RegisterCastOps(&ops);
  RegisterConstantOps(&ops);
  RegisterNNOps(&ops);
  RegisterMovementOps(&ops);
  RegisterReduceOps(&ops);
  RegisterLogicOps(&ops);
  RegisterResizeOps(&ops);
  RegisterTopKOps(&ops);
  RegisterQuantOps(&ops);
  RegisterDetectOps(&ops);
  RegisterEinsumOps(&ops);
  RegisterRnnOps(&ops);
  RegisterRandomOps(&ops);
  RegisterIndexOps(&ops);
  RegisterPadOps(&ops);
  RegisterSpaceOps(&ops);
  RegisterLossOps(&ops);
  RegisterAttentionOps(&ops);
  RegisterNormOps(&ops);
  RegisterConvTransposeOps(&ops);
  RegisterLpPoolOps(&ops);
  RegisterControlOps(&ops);
  RegisterMisc2Ops(&ops);
  RegisterMisc3Ops(&ops);
  RegisterSignalOps(&ops);
  RegisterGridOps(&ops);
  RegisterLinearAttentionOps(&ops);
  RegisterTfIdfOps(&ops);
  OpTable table;
  for (const OpDef &d : ops) table.emplace(d.op_type, d);
  return table;
}

const char *AttrTypeName(int32_t t) {
  switch (t) {
    case kAttrFloat: return "float";
    case kAttrInt: return "int";
    case kAttrString: return "string";
    case kAttrTensor: return "tensor";
    case kAttrGraph: return "graph";
    case kAttrFloats: return "floats";
    case kAttrInts: return "ints";
    case kAttrStrings: return "strings";
    case kAttrTensors: return "tensors";
    case kAttrGraphs: return "graphs";
    default: return "other";
  }
}

bool WrongType(const Attribute &a, const char *want, std::string *reason) {
  *reason = "attribute '" + a.name + "' must be of type " + want + ", not " + AttrTypeName(a.type);
  return false;
}

class CopyKernel : public Kernel {
 public:
  explicit CopyKernel(size_t bytes) : bytes_(bytes) {}
  // A copy of input 0 may take over that input's buffer when it dies here (the plan checks the sizes match): a chain
  // of Identity / Reshape / Squeeze steps then copies nothing.
  bool InPlaceOver(size_t i) const override { return i == 0; }
  bool CopiesInput0() const override { return true; }
  bool Run(const void *const *in, void *const *out, std::string *) override {
    if (out[0] != in[0]) CopyBytes(out[0], in[0], bytes_);
    return true;
  }

 private:
  size_t bytes_;
};

}  // namespace

const OpDef *FindOp(const std::string &op_type) {
  static const OpTable table = BuildTable();  // thread-safe one-time init; read-only afterwards
  auto it = table.find(op_type);
  return it == table.end() ? nullptr : &it->second;
}

bool AttrInt(const Node &n, const char *name, int64_t def, int64_t *v, std::string *reason) {
  const Attribute *a = n.FindAttr(name);
  if (!a) {
    *v = def;
    return true;
  }
  if (a->type != kAttrInt) return WrongType(*a, "int", reason);
  *v = a->i;
  return true;
}

bool AttrFloat(const Node &n, const char *name, float def, float *v, std::string *reason) {
  const Attribute *a = n.FindAttr(name);
  if (!a) {
    *v = def;
    return true;
  }
  if (a->type != kAttrFloat) return WrongType(*a, "float", reason);
  *v = a->f;
  return true;
}

bool AttrString(const Node &n, const char *name, const char *def, std::string *v, std::string *reason) {
  const Attribute *a = n.FindAttr(name);
  if (!a) {
    *v = def;
    return true;
  }
  if (a->type != kAttrString) return WrongType(*a, "string", reason);
  *v = a->s;
  return true;
}

bool AttrChoice(const Node &n, const char *name, std::initializer_list<const char *> choices, int *index,
                std::string *reason) {
  std::string v;
  if (!AttrString(n, name, *choices.begin(), &v, reason)) return false;
  int i = 0;
  std::string listed;
  for (const char *choice : choices) {
    if (v == choice) {
      *index = i;
      return true;
    }
    listed += (i == 0 ? "" : i + 1 == static_cast<int>(choices.size()) ? " or " : ", ") + std::string(choice);
    ++i;
  }
  *reason = "attribute '" + std::string(name) + "' is '" + v + "'; expected " + listed;
  return false;
}

bool ReadAutoPad(const Node &n, std::string *mode, std::string *reason) {
  static constexpr const char *kModes[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  int i = 0;
  if (!AttrChoice(n, "auto_pad", {kModes[0], kModes[1], kModes[2], kModes[3]}, &i, reason)) return false;
  *mode = kModes[i];
  return true;
}

bool AttrInts(const Node &n, const char *name, std::vector<int64_t> *v, bool *present, std::string *reason) {
  const Attribute *a = n.FindAttr(name);
  *present = a != nullptr;
  v->clear();
  if (!a) return true;
  if (a->type != kAttrInts) return WrongType(*a, "ints", reason);
  *v = a->ints;
  return true;
}

bool ReadIntsAttr(const Node &n, const char *name, size_t want, int64_t def, std::vector<int64_t> *v,
                  bool *present, std::string *reason) {
  bool found;
  if (!AttrInts(n, name, v, &found, reason)) return false;
  if (present) *present = found;
  if (!found) {
    v->assign(want, def);
    return true;
  }
  if (v->size() != want) {
    *reason = "attribute '" + std::string(name) + "' has " + std::to_string(v->size()) + " values, expected " +
              std::to_string(want);
    return false;
  }
  return true;
}

namespace {
thread_local const std::atomic<bool> *t_stop_flag = nullptr;
}  // namespace

StopFlagScope::StopFlagScope(const std::atomic<bool> *flag) : outer_(t_stop_flag) { t_stop_flag = flag; }
StopFlagScope::~StopFlagScope() { t_stop_flag = outer_; }
bool StopRequested() { return t_stop_flag && t_stop_flag->load(std::memory_order_relaxed); }

bool NormalizeAxis(int64_t axis, int64_t rank, bool allow_end, int64_t *out, std::string *reason) {
  int64_t hi = allow_end ? rank : rank - 1;
  int64_t lo = allow_end ? -rank : -rank;
  if (axis < lo || axis > hi) {
    *reason = "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank);
    return false;
  }
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

std::string DtypeNotSupported(ElemType t, const char *what) {
  return std::string(what) + " dtype " + ElemTypeName(t) + " is not supported by the twin";
}

bool AnyDtype(ElemType t, std::string *reason) {
  if (ElemSize(t) == 0) {
    *reason = DtypeNotSupported(t);
    return false;
  }
  return true;
}

bool InferSameFloat(InferCtx *c, std::string *reason) {
  if (!IsFloatType(c->in[0]->dtype)) {
    *reason = DtypeNotSupported(c->in[0]->dtype);
    return false;
  }
  c->out[0] = *c->in[0];
  return true;
}

std::unique_ptr<Kernel> MakeCopyKernel(size_t bytes) { return std::unique_ptr<Kernel>(new CopyKernel(bytes)); }

}  // namespace onnx
}  // namespace twin
