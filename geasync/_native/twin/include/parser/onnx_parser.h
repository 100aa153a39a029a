// Twin of GE's parser/onnx_parser.h (libfmk_onnx_parser.so): ONNX model -> ge::Graph.
#ifndef GEASYNC_TWIN_PARSER_ONNX_PARSER_H_
#define GEASYNC_TWIN_PARSER_ONNX_PARSER_H_

#include <cstddef>
#include <map>

#include "graph/ascend_string.h"
#include "graph/graph.h"

namespace ge {
graphStatus aclgrphParseONNX(const char *model_file, const std::map<AscendString, AscendString> &parser_params,
                             ge::Graph &graph);
graphStatus aclgrphParseONNXFromMem(const char *buffer, size_t size,
                                    const std::map<AscendString, AscendString> &parser_params, ge::Graph &graph);
}  // namespace ge

#endif  // GEASYNC_TWIN_PARSER_ONNX_PARSER_H_
