// Twin of GE's ge/ge_api_v2.h (libge_runner_v2.so): initialisation, error text and class GeSession,
// with the signatures of hicann/ge inc/external/ge/ge_api_v2.h.
#ifndef GEASYNC_TWIN_GE_GE_API_V2_H_
#define GEASYNC_TWIN_GE_GE_API_V2_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "exe_graph/runtime/runtime_tensor.h"
#include "ge/ge_allocator.h"
#include "ge/ge_api_error_codes.h"
#include "ge/ge_graph_compile_summary.h"
#include "graph/ascend_string.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace ge {
Status GEInitializeV2(const std::map<AscendString, AscendString> &options);
Status GEFinalizeV2();
AscendString GEGetErrorMsgV3();
AscendString GEGetWarningMsgV3();

using RunAsyncCallbackV2 = std::function<void(Status, std::vector<gert::Tensor> &)>;
using RunCallback = std::function<Status(uint32_t graph_id, const std::map<AscendString, gert::Tensor> &params_list)>;

enum class MemoryType : int32_t { MEMORY_TYPE_DEFAULT = 0, MEMORY_TYPE_P2P = 1 };

struct ModelBufferData {
  std::shared_ptr<uint8_t> data;
  uint64_t length = 0U;
};

class SessionImpl;

class GeSession {
 public:
  explicit GeSession(const std::map<AscendString, AscendString> &options);
  ~GeSession();
  GeSession(const GeSession &) = delete;
  GeSession &operator=(const GeSession &) = delete;

  Status AddGraph(uint32_t graph_id, const Graph &graph);
  Status AddGraph(uint32_t graph_id, const Graph &graph, const std::map<AscendString, AscendString> &options);
  Status AddGraphClone(uint32_t graph_id, const Graph &graph);
  Status AddGraphClone(uint32_t graph_id, const Graph &graph, const std::map<AscendString, AscendString> &options);
  Status RemoveGraph(uint32_t graph_id);
  bool IsGraphNeedRebuild(uint32_t graph_id);
  uint64_t GetSessionId() const;
  Status CompileGraph(uint32_t graph_id);
  Status CompileGraph(uint32_t graph_id, const std::vector<ge::Tensor> &inputs);
  Status LoadGraph(uint32_t graph_id, const std::map<AscendString, AscendString> &options, void *stream) const;
  Status RunGraph(uint32_t graph_id, const std::vector<gert::Tensor> &inputs, std::vector<gert::Tensor> &outputs);
  Status RunGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<gert::Tensor> &inputs,
                                 std::vector<gert::Tensor> &outputs);
  Status RunGraphAsync(uint32_t graph_id, const std::vector<gert::Tensor> &inputs, RunAsyncCallbackV2 callback);
  Status RegisterCallBackFunc(const char *key, const RunCallback &callback);
  CompiledGraphSummaryPtr GetCompiledGraphSummary(uint32_t graph_id);
  Status RegisterExternalAllocator(const void *const stream, AllocatorPtr allocator) const;
  Status UnregisterExternalAllocator(const void *const stream) const;

 private:
  std::shared_ptr<SessionImpl> impl_;
};
}  // namespace ge

#endif  // GEASYNC_TWIN_GE_GE_API_V2_H_
