// Twin of libfmk_onnx_parser: aclgrphParseONNX(FromMem) decode ONNX bytes with the twin's engine into a ge::Graph.
// Failures are reported in GE's error context with the engine's message (node, op, reason).
#include <fstream>
#include <iterator>
#include <vector>

#include "ge_internal.h"
#include "parser/onnx_parser.h"

namespace ge {
Graph::Graph(const char *name) : name_(name == nullptr ? "" : name) {}

graphStatus Graph::GetName(AscendString &name) const {
  if (impl_ && name_.empty()) {
    name = AscendString(impl_->model->graph_name().c_str());
  } else {
    name = AscendString(name_.c_str());
  }
  return GRAPH_SUCCESS;
}

bool Graph::IsValid() const { return impl_ != nullptr; }

graphStatus aclgrphParseONNXFromMem(const char *buffer, size_t size,
                                    const std::map<AscendString, AscendString> &parser_params, ge::Graph &graph) {
  (void)parser_params;
  if (buffer == nullptr || size == 0) {
    twin::ReportError("aclgrphParseONNXFromMem: the model buffer is empty");
    return GRAPH_PARAM_INVALID;
  }
  std::string error;
  auto model = twin::onnx::ParseModel(buffer, size, &error);
  if (!model) {
    twin::ReportError("aclgrphParseONNXFromMem: " + error);
    return GRAPH_FAILED;
  }
  twin::GraphAccess::Impl(graph) = std::make_shared<GraphImpl>(std::move(model));
  return GRAPH_SUCCESS;
}

graphStatus aclgrphParseONNX(const char *model_file, const std::map<AscendString, AscendString> &parser_params,
                             ge::Graph &graph) {
  if (model_file == nullptr) {
    twin::ReportError("aclgrphParseONNX: model_file is null");
    return GRAPH_PARAM_INVALID;
  }
  std::ifstream in(model_file, std::ios::binary);
  if (!in) {
    twin::ReportError(std::string("aclgrphParseONNX: cannot open '") + model_file + "'");
    return GRAPH_FAILED;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return aclgrphParseONNXFromMem(bytes.data(), bytes.size(), parser_params, graph);
}
}  // namespace ge
