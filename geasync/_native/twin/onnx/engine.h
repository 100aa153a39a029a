// The twin's ONNX engine: the only interface between the GE twin (sessions, graphs, threads) and the
// code that decodes ONNX ModelProto bytes, infers shapes and runs kernels on host memory.
// Nothing here knows about GE, ACL or Python; errors come back as text, never as exceptions or aborts.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "small_vec.h"

namespace twin {
namespace onnx {

// Element types are numbered like ge::DataType so descriptors cross the GE boundary unchanged.
enum class ElemType : int32_t {
  kFloat = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kUint8 = 4,
  kInt16 = 6,
  kUint16 = 7,
  kUint32 = 8,
  kInt64 = 9,
  kUint64 = 10,
  kDouble = 11,
  kBool = 12,
  kBf16 = 27,
  kUndefined = 28,
};

// Bytes per element; 0 for kUndefined.
size_t ElemSize(ElemType t);
// "float32", "int64", ... for messages.
const char *ElemTypeName(ElemType t);

// A tensor's type and shape. A dim of -1 is unknown (symbolic in the model, e.g. a batch dim "N"). dims {-2} is an
// unknown rank (GE's UNKNOWN_DIM_NUM): a graph input declared with no shape takes any rank; inference gives {-2}
// for every output of a model fed such a desc.
constexpr int64_t kUnknownRankDim = -2;
struct TensorDesc {
  ElemType dtype = ElemType::kUndefined;
  Dims dims;

  bool IsStatic() const;       // no -1 dims (and not an unknown rank)
  bool IsUnknownRank() const { return dims.size() == 1 && dims[0] == kUnknownRankDim; }
  int64_t NumElements() const; // -1 if not static
  size_t Bytes() const;        // 0 if not static
};

struct ValueInfo {
  std::string name;
  TensorDesc desc;
};

// A decoded and structurally validated ONNX graph. Immutable and safe to share between threads.
class Model {
 public:
  virtual ~Model() = default;
  // Graph inputs that are not initializers, in declaration order (GE's Data nodes).
  virtual const std::vector<ValueInfo> &inputs() const = 0;
  virtual const std::vector<ValueInfo> &outputs() const = 0;
  virtual const std::string &graph_name() const = 0;
  virtual int64_t opset_version() const = 0;  // of the default ("" / "ai.onnx") domain
  virtual size_t node_count() const = 0;
  virtual size_t initializer_bytes() const = 0;  // total bytes of initializers and Constant values
};

// Decodes ModelProto bytes (protobuf wire format, no protobuf library) and validates the graph structure:
// supported ops and domains, required attributes, every consumed value produced exactly once (no dangling edges),
// no cycles. Returns nullptr and sets *error on failure; the message names the node, its op and the reason, e.g.
//   node 'conv1' (op Conv): operator not supported by the twin
//   node 'add_3' (op Add): input 'x9' is not produced by any node, initializer or graph input
//   corrupt ONNX model: truncated varint at byte 1234
// Never crashes, whatever the bytes.
std::shared_ptr<const Model> ParseModel(const void *data, size_t size, std::string *error);

// What `python -m geasync check` reports about a model: every problem that keeps it off the twin (all unsupported
// nodes, not only the first), its declared inputs/outputs and opset. Never crashes, whatever the bytes.
struct ModelCheck {
  int64_t ir_version = 0;
  int64_t opset = 0;                      // default domain; 0 if not imported
  std::vector<ValueInfo> inputs, outputs;  // as declared (initializer-backed inputs excluded)
  std::vector<std::string> problems;      // each names the node, op and reason where there is one
};
void CheckModel(const void *data, size_t size, ModelCheck *report);

// Infers output descs from input descs that may contain unknown (-1) dims; used at GE compile time with the
// Data nodes' shapes. Unknown dims propagate as -1. Fails (false + *error naming node, op and reason) on
// a definite mismatch: wrong input count or dtype, incompatible broadcast, MatMul inner dims, bad Reshape, ...
// max_memory_bytes bounds what inference computes (a Loop with constant inputs is run): 0, the machine's memory.
bool InferShapes(const Model &model, const std::vector<TensorDesc> &inputs, std::vector<TensorDesc> *outputs,
                 std::string *error, uint64_t max_memory_bytes = 0);

// A model compiled for fully static input descs: shapes of every value known, intermediates planned.
// Owns its intermediate buffers, so Run is NOT re-entrant: callers serialise Run calls on one Plan
// (GE executes one job at a time per loaded model). Different Plans may run concurrently.
class Plan {
 public:
  virtual ~Plan() = default;
  virtual const std::vector<TensorDesc> &input_descs() const = 0;
  virtual const std::vector<TensorDesc> &output_descs() const = 0;
  virtual size_t const_bytes() const = 0;      // initializers / constants held by the plan
  virtual size_t workspace_bytes() const = 0;  // intermediate buffers owned by the plan
  // inputs[i] points to input_descs()[i].Bytes() readable bytes; outputs[i] to output_descs()[i].Bytes()
  // writable bytes (may be nullptr when that size is 0). Returns false + *error (node, op, reason) on failure.
  virtual bool Run(const std::vector<const void *> &inputs, const std::vector<void *> &outputs,
                   std::string *error) = 0;

  // Value-dependent plans (CompileOptions::allow_value_dependent): some output shapes depend on the *contents*
  // of inputs (a Reshape shape, Slice starts, Range limits, ReduceSum axes, ... fed as graph inputs). Such a plan
  // cannot Run itself and its output_descs() may hold -1 dims; Specialize returns the plan for the given input
  // values (same pointers as Run would get), with concrete output_descs(), compiled on first use and cached
  // (up to 16 per plan, keyed by the contents of the shape-determining inputs only). Specialize is thread-safe;
  // the returned plan follows the usual rules (Run not re-entrant). Other plans: value_dependent() is false and
  // Specialize fails.
  virtual bool value_dependent() const { return false; }
  virtual std::shared_ptr<Plan> Specialize(const std::vector<const void *> &inputs, std::string *error) {
    (void)inputs;
    if (error) *error = "Specialize: the plan does not depend on input values";
    return nullptr;
  }
};

struct CompileOptions {
  // Return a value-dependent plan (see Plan::Specialize) instead of failing when an output shape depends on the
  // contents of graph inputs. Callers that pass true must call Specialize before allocating outputs.
  bool allow_value_dependent = false;
  // Bytes the plan may hold (intermediates, folded constants, the outputs a run allocates); a plan that needs
  // more is refused with an error naming the need and the limit. 0: DefaultMemoryLimit().
  uint64_t max_memory_bytes = 0;
  // A plan of the same model compiled for other input descs: kernels prepared for the same input and output descs
  // are shared with it instead of prepared again. The two plans must then not run at the same time (the twin runs
  // one plan of a graph at a time).
  std::shared_ptr<const Plan> donor;
};

// The limit of plans compiled without one: the machine's physical memory (a plan beyond it can never run).
uint64_t DefaultMemoryLimit();

// Compiles for concrete input descs (all dims known; count and dtypes must match model.inputs(), dims must
// agree wherever the model's dims are known). Returns nullptr + *error on failure.
std::unique_ptr<Plan> CompilePlan(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs,
                                  std::string *error);
std::unique_ptr<Plan> CompilePlan(std::shared_ptr<const Model> model, const std::vector<TensorDesc> &inputs,
                                  const CompileOptions &options, std::string *error);

// The caller's request to stop long-running work on this thread: while a StopFlagScope is alive, a Loop checks
// *flag between iterations and fails ("stopped") once it is set, so a loop that never ends cannot keep its
// session's shutdown waiting. Scopes nest; nullptr: nothing can stop the work.
class StopFlagScope {
 public:
  explicit StopFlagScope(const std::atomic<bool> *flag);
  ~StopFlagScope();
  StopFlagScope(const StopFlagScope &) = delete;
  StopFlagScope &operator=(const StopFlagScope &) = delete;

 private:
  const std::atomic<bool> *outer_;
};
// True once the innermost StopFlagScope's flag is set.
bool StopRequested();

// Threads the twin's BLAS (OpenBLAS) uses inside one MatMul/Gemm/Conv: $GEASYNC_BLAS_THREADS clamped to
// [1, cores], default 1 (each loaded graph already has its own model thread).
int BlasThreads();

}  // namespace onnx
}  // namespace twin
