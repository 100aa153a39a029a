// The operator table: op_type -> {arity, parse-time attribute check, shape/dtype inference, kernel factory}.
// Adding an op = one ops_*.cc file defining OpDefs and one Register* line in op_registry.cc.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "model.h"

namespace twin {
namespace onnx {

// Shape/dtype inference input. in[i] is nullptr for an omitted optional input; in_data[i] holds the contents
// of inputs known at compile time (initializers, Constants, folded subgraphs), else nullptr.
struct InferCtx {
  const Node *node = nullptr;
  int64_t opset = 0;
  bool need_static = false;  // CompilePlan: a shape that cannot be determined is an error
  std::vector<const TensorDesc *> in;
  std::vector<const void *> in_data;
  std::vector<TensorDesc> out;  // sized to the node's output count by the caller
  // Set by infer (via ReadIntsInput / ReadScalarInput) when an output shape depends on the contents of input
  // missing_input, which are not known at compile time.
  int missing_input = -1;
  // The plan's memory limit (geasync.max_memory_bytes; 0: the machine's memory): control flow holds its subgraphs'
  // plans and what a Loop accumulates to it too.
  uint64_t memory_limit = 0;

  bool has(size_t i) const { return i < in.size() && in[i] != nullptr; }
};

// A kernel prepared for static shapes. Run must not allocate in the common path. in[i] is nullptr for omitted
// optional inputs; otherwise pointers are non-null and aligned for their dtype, even for zero-size tensors.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual bool Run(const void *const *in, void *const *out, std::string *reason) = 0;
  // Temporary bytes Run needs (im2col columns, float copies of float16 data, ...). The plan places them in its
  // arena, live only during this step, and binds them with set_scratch before the first Run (64-byte aligned).
  virtual size_t scratch_bytes() const { return 0; }
  void set_scratch(void *p) { scratch_ = p; }
  // Whether output 0 may share input i's buffer: output 0 has that input's size, and element j of the input is read
  // before element j of the output is written and never after (an element-wise step). The plan then writes an
  // intermediate that dies at this step in place, halving a chain's memory traffic.
  virtual bool InPlaceOver(size_t /*input*/) const { return false; }
  // Whether Run only copies input 0's bytes to output 0 (Identity, Reshape, ...): the plan may then let the
  // output's readers read the input instead and drop the step.
  virtual bool CopiesInput0() const { return false; }

 protected:
  void *scratch_ = nullptr;
};

struct KernelCtx {
  const Node *node = nullptr;
  int64_t opset = 0;
  std::vector<const TensorDesc *> in;  // all static
  std::vector<const void *> in_data;   // compile-time constant inputs, else nullptr
  std::vector<TensorDesc> out;         // all static
  uint64_t memory_limit = 0;           // as InferCtx::memory_limit

  bool has(size_t i) const { return i < in.size() && in[i] != nullptr; }

  // The same node as an inference input, for kernels that re-derive what inference computed (axes, slices);
  // every value-dependent input must be known here.
  InferCtx AsInferCtx() const {
    InferCtx c;
    c.node = node;
    c.opset = opset;
    c.need_static = true;
    c.in = in;
    c.in_data = in_data;
    c.out = out;
    c.memory_limit = memory_limit;
    return c;
  }
};

using CheckFn = bool (*)(const Node &node, int64_t opset, std::string *reason);
using InferFn = bool (*)(InferCtx *ctx, std::string *reason);
using PrepareFn = std::unique_ptr<Kernel> (*)(const KernelCtx &ctx, std::string *reason);

struct OpDef {
  const char *op_type;
  int min_inputs, max_inputs;
  int min_outputs, max_outputs;
  CheckFn check;      // parse-time attribute validation; may be nullptr
  InferFn infer;      // required
  PrepareFn prepare;  // required
  bool foldable;      // false for ops whose result must not be computed at compile time (e.g. random)
  // The outputs depend only on the inputs' descs, never on their contents (Shape): folded whenever the output
  // descs are static, and the kernel may be run with null input pointers.
  bool shape_only = false;
  // Every input is required (ONNX variadic inputs have no omitted form): Concat, Max, Min, Sum, Mean, Einsum.
  bool variadic = false;
};

const OpDef *FindOp(const std::string &op_type);

// Per-family registration; each ops_*.cc defines one.
void RegisterElementwiseOps(std::vector<OpDef> *ops);
void RegisterMatMulOps(std::vector<OpDef> *ops);
void RegisterSoftmaxOps(std::vector<OpDef> *ops);
void RegisterShapeOps(std::vector<OpDef> *ops);
void RegisterCastOps(std::vector<OpDef> *ops);
void RegisterConstantOps(std::vector<OpDef> *ops);
void RegisterNNOps(std::vector<OpDef> *ops);
void RegisterMovementOps(std::vector<OpDef> *ops);
void RegisterReduceOps(std::vector<OpDef> *ops);
void RegisterLogicOps(std::vector<OpDef> *ops);
// Ops needing structural work (control flow, recurrent, quantisation, detection, Einsum, random).
void RegisterResizeOps(std::vector<OpDef> *ops);
void RegisterTopKOps(std::vector<OpDef> *ops);
void RegisterQuantOps(std::vector<OpDef> *ops);
void RegisterEinsumOps(std::vector<OpDef> *ops);
void RegisterDetectOps(std::vector<OpDef> *ops);
void RegisterRnnOps(std::vector<OpDef> *ops);
void RegisterRandomOps(std::vector<OpDef> *ops);
void RegisterIndexOps(std::vector<OpDef> *ops);
void RegisterPadOps(std::vector<OpDef> *ops);
void RegisterSpaceOps(std::vector<OpDef> *ops);
void RegisterLossOps(std::vector<OpDef> *ops);
void RegisterAttentionOps(std::vector<OpDef> *ops);
void RegisterNormOps(std::vector<OpDef> *ops);
void RegisterConvTransposeOps(std::vector<OpDef> *ops);
void RegisterLpPoolOps(std::vector<OpDef> *ops);
void RegisterControlOps(std::vector<OpDef> *ops);  // If, Loop, Scan
void RegisterMisc2Ops(std::vector<OpDef> *ops);    // windows, NonZero, Compress, ReverseSequence
void RegisterMisc3Ops(std::vector<OpDef> *ops);    // Unique, TensorScatter, CausalConvWithState, BitCast
void RegisterSignalOps(std::vector<OpDef> *ops);   // DFT, STFT, MelWeightMatrix
void RegisterGridOps(std::vector<OpDef> *ops);     // GridSample, AffineGrid, Col2Im, DeformConv
void RegisterLinearAttentionOps(std::vector<OpDef> *ops);
void RegisterTfIdfOps(std::vector<OpDef> *ops);  // TfIdfVectorizer (integer pools)

// Decodes a Constant node's value attribute into a tensor (ParseModel calls it once per Constant node).
bool BuildConstantValue(const Node &node, std::shared_ptr<const ConstTensor> *value, std::string *reason);

// Attribute accessors: false + reason if present with the wrong type.
bool AttrInt(const Node &n, const char *name, int64_t def, int64_t *v, std::string *reason);
bool AttrFloat(const Node &n, const char *name, float def, float *v, std::string *reason);
bool AttrString(const Node &n, const char *name, const char *def, std::string *v, std::string *reason);
// A string attribute that names one of `choices`: *index is its position (0, the first choice, when absent).
bool AttrChoice(const Node &n, const char *name, std::initializer_list<const char *> choices, int *index,
                std::string *reason);
// The convolutions' and pools' auto_pad: NOTSET (the default), SAME_UPPER, SAME_LOWER or VALID.
bool ReadAutoPad(const Node &n, std::string *mode, std::string *reason);
bool AttrInts(const Node &n, const char *name, std::vector<int64_t> *v, bool *present, std::string *reason);
inline bool AttrInts(const Node &n, const char *name, Dims *v, bool *present, std::string *reason) {
  std::vector<int64_t> read;
  if (!AttrInts(n, name, &read, present, reason)) return false;
  *v = read;
  return true;
}
// An ints attribute that must have `want` values; absent: `want` copies of def. present may be nullptr.
bool ReadIntsAttr(const Node &n, const char *name, size_t want, int64_t def, std::vector<int64_t> *v, bool *present,
                  std::string *reason);

// Normalises axis into [0, rank) (or [0, rank] when allow_end); false + reason if out of range.
bool NormalizeAxis(int64_t axis, int64_t rank, bool allow_end, int64_t *out, std::string *reason);
std::string DtypeNotSupported(ElemType t, const char *what = "input");
// For ops that only move bytes: true for every dtype the twin can hold, else false + reason.
bool AnyDtype(ElemType t, std::string *reason);
// Infer step of a float-only op whose output is its input's shape and dtype.
bool InferSameFloat(InferCtx *c, std::string *reason);

// Plan-level fusion: Conv (float32, constant W/B) followed by a per-channel affine y = conv * scale[m] + shift[m]
// (a folded inference BatchNormalization; nullptr = identity) and optionally Relu, as one kernel.
std::unique_ptr<Kernel> PrepareFusedConv(const KernelCtx &conv, const std::vector<double> *scale,
                                         const std::vector<double> *shift, bool relu, std::string *reason);

// Plan-level fusion: QuantizeLinear -> DequantizeLinear (per tensor, float32, constant scales and zero points) as one
// float -> float kernel with the pair's exact results; nullptr when the pair does not qualify.
std::unique_ptr<Kernel> PrepareQuantDequant(const KernelCtx &q, const KernelCtx &dq);

// Plan-level fusion: DequantizeLinear (8-bit activations, per tensor) -> Conv (weights a folded DequantizeLinear of
// an 8-bit initializer, per tensor or per output channel; bias a float constant) -> QuantizeLinear (8-bit, per
// tensor) as one integer convolution (ops_quant.cc QdqConvKernel); nullptr when the nodes do not qualify.
std::unique_ptr<Kernel> PrepareQdqConv(const KernelCtx &conv, const KernelCtx &dqx, const KernelCtx &dqw,
                                       const KernelCtx &q);

// A float32 Conv at stride 1 without dilation on [N, C, H, W] (1-D: H = 1, kh = 1), pads {top, left, bottom, right},
// weights [M, C / group, kh, kw] as input 1 (bias, if any, input 2), for ops that reduce to one (ConvTranspose at
// stride 1). `w`, when not null, is input 1's constant value. nullptr unless one of Conv's direct / Winograd
// kernels takes it (the caller keeps its own path).
std::unique_ptr<Kernel> MakeFastConvFloat(int64_t N, int64_t C, int64_t M, int64_t group, int64_t H, int64_t W,
                                          int64_t kh, int64_t kw, const int64_t pads[4], bool has_bias,
                                          const float *w);

// Conv's geometry (attributes, auto_pad, output sizes) for kernels outside ops_nn.cc that lay out their own
// columns (ConvInteger / QLinearConv). Spatial dims padded to 3 with size-1 dims; conv.in = {X, W} descs.
struct ConvShape {
  int64_t N = 0, C = 0, M = 0, group = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1};
  int64_t pb[3] = {0, 0, 0};
};
bool ConvShapeOf(const KernelCtx &conv, ConvShape *shape, std::string *reason);

// Kernel that copies input 0 to output 0 byte for byte (Identity, Reshape, Flatten, ...).
std::unique_ptr<Kernel> MakeCopyKernel(size_t bytes);

}  // namespace onnx
}  // namespace twin
