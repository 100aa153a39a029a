// Constant: its value (value, value_float(s), value_int(s)) is decoded once by ParseModel into
// Node::const_value; shape inference then treats the output as a compile-time constant.
#include "op_registry.h"

namespace twin {
namespace onnx {

// Called by ParseModel for Constant nodes (after CheckConstant passed).
bool BuildConstantValue(const Node &node, std::shared_ptr<const ConstTensor> *value, std::string *reason) {
  auto t = std::make_shared<ConstTensor>();
  t->name = node.output_names.empty() ? std::string() : node.output_names[0];
  for (const Attribute &a : node.attrs) {
    if (a.name == "value") {
      t->desc = a.t->desc;
      t->data = a.t->data;
    } else if (a.name == "value_float") {
      t->desc = {ElemType::kFloat, {}};
      t->data.resize(4);
      std::memcpy(t->data.data(), &a.f, 4);
    } else if (a.name == "value_floats") {
      t->desc = {ElemType::kFloat, {static_cast<int64_t>(a.floats.size())}};
      t->data.resize(a.floats.size() * 4);
      CopyBytes(t->data.data(), a.floats.data(), t->data.size());
    } else if (a.name == "value_int") {
      t->desc = {ElemType::kInt64, {}};
      t->data.resize(8);
      std::memcpy(t->data.data(), &a.i, 8);
    } else if (a.name == "value_ints") {
      t->desc = {ElemType::kInt64, {static_cast<int64_t>(a.ints.size())}};
      t->data.resize(a.ints.size() * 8);
      CopyBytes(t->data.data(), a.ints.data(), t->data.size());
    } else {
      continue;
    }
    *value = t;
    return true;
  }
  *reason = "has no value attribute";
  return false;
}

namespace {

bool CheckConstant(const Node &n, int64_t, std::string *reason) {
  static const struct {
    const char *name;
    int32_t type;
  } kForms[] = {{"value", kAttrTensor}, {"value_float", kAttrFloat}, {"value_floats", kAttrFloats},
                {"value_int", kAttrInt}, {"value_ints", kAttrInts}};
  int found = 0;
  for (const Attribute &a : n.attrs) {
    if (a.name == "value_string" || a.name == "value_strings" || a.name == "sparse_value") {
      *reason = "attribute '" + a.name + "' is not supported by the twin";
      return false;
    }
    for (const auto &f : kForms) {
      if (a.name != f.name) continue;
      if (a.type != f.type || (f.type == kAttrTensor && !a.t)) {
        *reason = "attribute '" + a.name + "' has the wrong type";
        return false;
      }
      ++found;
    }
  }
  if (found != 1) {
    *reason = "requires exactly one of the attributes value, value_float, value_floats, value_int, value_ints";
    return false;
  }
  return true;
}

bool InferConstant(InferCtx *c, std::string *reason) {
  if (!c->node->const_value) {
    *reason = "value was not decoded";
    return false;
  }
  c->out[0] = c->node->const_value->desc;
  return true;
}

class ConstantKernel : public Kernel {
 public:
  explicit ConstantKernel(std::shared_ptr<const ConstTensor> v) : v_(std::move(v)) {}
  bool Run(const void *const *, void *const *out, std::string *) override {
    CopyBytes(out[0], v_->data.data(), v_->data.size());
    return true;
  }

 private:
  std::shared_ptr<const ConstTensor> v_;
};

std::unique_ptr<Kernel> PrepareConstant(const KernelCtx &c, std::string *) {
  return std::make_unique<ConstantKernel>(c.node->const_value);
}

}  // namespace

void RegisterConstantOps(std::vector<OpDef> *ops) {
  ops->push_back({"Constant", 0, 0, 1, 1, CheckConstant, InferConstant, PrepareConstant, true});
}

}  // namespace onnx
}  // namespace twin
