// Helpers of elem.h: reading shape-determining integer inputs, row-major strides.
#include "elem.h"

#include "shared_const.h"

namespace twin {
namespace onnx {
namespace {
// Whether input i's contents are known now: kUnknown while shapes may stay open, kError (naming the input) when
// the plan needs them static.
ValueState ConstantState(InferCtx *c, size_t i, const std::string &who, std::string *reason) {
  if (c->in_data[i] && c->in[i]->IsStatic()) return ValueState::kKnown;
  if (!c->need_static) return ValueState::kUnknown;
  c->missing_input = static_cast<int>(i);
  *reason = who + " is not a compile-time constant (it depends on runtime data) and determines an output shape";
  return ValueState::kError;
}
}  // namespace

ValueState ReadIntsInput(InferCtx *c, size_t i, std::vector<int64_t> *vals, std::string *reason) {
  if (!c->has(i)) {  // an omitted (empty-named) input this op needs: refused, never dereferenced
    *reason = "required input " + std::to_string(i) + " is missing";
    return ValueState::kError;
  }
  const TensorDesc &d = *c->in[i];
  const std::string who = "input '" + c->node->input_names[i] + "'";
  if (d.dtype != ElemType::kInt64 && d.dtype != ElemType::kInt32) {
    *reason = who + " must be int64 (or int32), got " + DescStr(d);
    return ValueState::kError;
  }
  if (d.dims.size() > 1) {
    *reason = who + " must be a scalar or 1-D, got " + DescStr(d);
    return ValueState::kError;
  }
  if (const ValueState st = ConstantState(c, i, who, reason); st != ValueState::kKnown) return st;
  const int64_t n = d.NumElements();
  vals->resize(static_cast<size_t>(n));
  if (d.dtype == ElemType::kInt64) {
    CopyBytes(vals->data(), c->in_data[i], static_cast<size_t>(n) * 8);
  } else {
    const int32_t *p = static_cast<const int32_t *>(c->in_data[i]);
    for (int64_t k = 0; k < n; ++k) (*vals)[k] = p[k];
  }
  return ValueState::kKnown;
}

bool ReadIntsInputOrAttr(InferCtx *c, int64_t input_opset, const char *attr, std::vector<int64_t> *vals,
                         bool *present, bool *unknown, std::string *reason) {
  *unknown = false;
  if (c->opset >= input_opset) {
    *present = c->has(1);
    if (!*present) return true;
    const ValueState st = ReadIntsInput(c, 1, vals, reason);
    if (st == ValueState::kError) return false;
    *unknown = st == ValueState::kUnknown;
    return true;
  }
  return AttrInts(*c->node, attr, vals, present, reason);
}

ValueState ReadScalarInput(InferCtx *c, size_t i, double *val, std::string *reason) {
  if (!c->has(i)) {
    *reason = "required input " + std::to_string(i) + " is missing";
    return ValueState::kError;
  }
  const TensorDesc &d = *c->in[i];
  const std::string who = "input '" + c->node->input_names[i] + "'";
  if (d.NumElements() != 1 && d.IsStatic()) {
    *reason = who + " must hold exactly one value, got " + DescStr(d);
    return ValueState::kError;
  }
  if (const ValueState st = ConstantState(c, i, who, reason); st != ValueState::kKnown) return st;
  bool ok = VisitType(d.dtype, [&](auto tag) {
    using S = decltype(tag);
    S s;
    std::memcpy(&s, c->in_data[i], sizeof(S));
    *val = static_cast<double>(Num<S>::Load(s));
  });
  if (!ok) {
    *reason = DtypeNotSupported(d.dtype, who.c_str());
    return ValueState::kError;
  }
  return ValueState::kKnown;
}

bool KernelInts(const KernelCtx &c, size_t i, std::vector<int64_t> *vals) {
  if (i >= c.in.size() || !c.in[i] || !c.in_data[i]) return false;
  const TensorDesc &d = *c.in[i];
  const int64_t n = d.NumElements();
  if (n < 0) return false;
  vals->resize(static_cast<size_t>(n));
  if (d.dtype == ElemType::kInt64) {
    CopyBytes(vals->data(), c.in_data[i], static_cast<size_t>(n) * 8);
  } else if (d.dtype == ElemType::kInt32) {
    const int32_t *p = static_cast<const int32_t *>(c.in_data[i]);
    for (int64_t k = 0; k < n; ++k) (*vals)[k] = p[k];
  } else {
    return false;
  }
  return true;
}

std::vector<int64_t> Strides(const Dims &dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

}  // namespace onnx
}  // namespace twin

namespace twin {
namespace onnx {
namespace {

bool IsHalf(ElemType t) { return t == ElemType::kFloat16 || t == ElemType::kBf16; }
size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

void Widen(ElemType t, const void *src, float *dst, int64_t n) {
  const uint16_t *s = static_cast<const uint16_t *>(src);
  if (t == ElemType::kFloat16) HalfToFloatArray(s, dst, n);
  else for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
}

void Narrow(ElemType t, const float *src, void *dst, int64_t n) {
  uint16_t *d = static_cast<uint16_t *>(dst);
  if (t == ElemType::kFloat16) FloatToHalfArray(src, d, n);
  else for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(src[i]);
}

class ViaFloatKernel : public Kernel {
 public:
  struct Port {
    ElemType type;   // original dtype
    int64_t n = 0;   // elements
    size_t off = 0;  // scratch offset of the float copy (16-bit ports only)
    bool half = false;
    bool is_const = false;  // input widened at prepare time
  };
  ViaFloatKernel(std::unique_ptr<Kernel> inner, std::vector<Port> ins, std::vector<Port> outs,
                 std::vector<std::shared_ptr<const std::vector<float>>> consts, size_t own_bytes)
      : inner_(std::move(inner)), ins_(std::move(ins)), outs_(std::move(outs)), consts_(std::move(consts)),
        own_bytes_(own_bytes), in_ptrs_(ins_.size()), out_ptrs_(outs_.size()) {}
  size_t scratch_bytes() const override { return own_bytes_ + inner_->scratch_bytes(); }
  // A 16-bit output 0 is written only after the inner kernel has read every input; otherwise the inner kernel's
  // rule for an input it reads directly.
  bool InPlaceOver(size_t i) const override {
    if (outs_.empty() || i >= ins_.size()) return false;
    return outs_[0].half || (!ins_[i].half && inner_->InPlaceOver(i));
  }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    uint8_t *base = static_cast<uint8_t *>(scratch_);
    inner_->set_scratch(base + own_bytes_);
    for (size_t i = 0; i < ins_.size(); ++i) {
      const Port &p = ins_[i];
      if (!p.half || !in[i]) {
        in_ptrs_[i] = in[i];
      } else if (p.is_const) {
        in_ptrs_[i] = consts_[i]->empty() ? EmptyTensorData() : consts_[i]->data();
      } else {
        float *f = reinterpret_cast<float *>(base + p.off);
        Widen(p.type, in[i], f, p.n);
        in_ptrs_[i] = f;
      }
    }
    for (size_t o = 0; o < outs_.size(); ++o)
      out_ptrs_[o] = outs_[o].half ? static_cast<void *>(base + outs_[o].off) : out[o];
    if (!inner_->Run(in_ptrs_.data(), out_ptrs_.data(), reason)) return false;
    for (size_t o = 0; o < outs_.size(); ++o)
      if (outs_[o].half) Narrow(outs_[o].type, reinterpret_cast<const float *>(base + outs_[o].off), out[o], outs_[o].n);
    return true;
  }

 private:
  std::unique_ptr<Kernel> inner_;
  std::vector<Port> ins_, outs_;
  std::vector<std::shared_ptr<const std::vector<float>>> consts_;  // widened constants, shared between plans
  size_t own_bytes_;
  std::vector<const void *> in_ptrs_;
  std::vector<void *> out_ptrs_;
};

}  // namespace

bool HasHalfTypes(const KernelCtx &c) {
  for (const TensorDesc *d : c.in)
    if (d && IsHalf(d->dtype)) return true;
  for (const TensorDesc &d : c.out)
    if (IsHalf(d.dtype)) return true;
  return false;
}

std::unique_ptr<Kernel> PrepareViaFloat(const KernelCtx &c, PrepareFn float_prepare, std::string *reason) {
  KernelCtx fc = c;
  std::vector<TensorDesc> in_descs(c.in.size());
  std::vector<ViaFloatKernel::Port> ins(c.in.size()), outs(c.out.size());
  std::vector<std::shared_ptr<const std::vector<float>>> consts(c.in.size());
  size_t bytes = 0;
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (!c.in[i]) continue;
    in_descs[i] = *c.in[i];
    ViaFloatKernel::Port &p = ins[i];
    p.type = c.in[i]->dtype;
    p.n = c.in[i]->NumElements();
    if (!IsHalf(p.type)) continue;
    p.half = true;
    in_descs[i].dtype = ElemType::kFloat;
    fc.in[i] = &in_descs[i];
    if (c.in_data[i]) {
      p.is_const = true;
      // Shared with the other plans of the graph: a float16 model's weights widened once, not once per shape
      const int64_t n = p.n;
      const ElemType type = p.type;
      const void *src = c.in_data[i];
      consts[i] = SharedDerived<float>(src, "widened to float32", {static_cast<int64_t>(type), n},
                                       [&](std::vector<float> *v) {
                                         v->resize(static_cast<size_t>(n));
                                         Widen(type, src, v->data(), n);
                                       });
      fc.in_data[i] = consts[i]->empty() ? EmptyTensorData() : consts[i]->data();
    } else {
      p.off = bytes;
      bytes += Align64(static_cast<size_t>(p.n) * 4);
    }
  }
  for (size_t o = 0; o < c.out.size(); ++o) {
    ViaFloatKernel::Port &p = outs[o];
    p.type = c.out[o].dtype;
    p.n = c.out[o].NumElements();
    if (!IsHalf(p.type)) continue;
    p.half = true;
    fc.out[o].dtype = ElemType::kFloat;
    p.off = bytes;
    bytes += Align64(static_cast<size_t>(p.n) * 4);
  }
  std::unique_ptr<Kernel> inner = float_prepare(fc, reason);
  if (!inner) return nullptr;
  return std::make_unique<ViaFloatKernel>(std::move(inner), std::move(ins), std::move(outs), std::move(consts), bytes);
}

}  // namespace onnx
}  // namespace twin
