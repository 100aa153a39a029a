// Twin of metadef's graph/error_codes.h subset: the graph status type and its public codes (values are GE's).
#ifndef GEASYNC_TWIN_GRAPH_ERROR_CODES_H_
#define GEASYNC_TWIN_GRAPH_ERROR_CODES_H_

#include <cstdint>

namespace ge {
using graphStatus = uint32_t;
const graphStatus GRAPH_FAILED = 0xFFFFFFFF;
const graphStatus GRAPH_SUCCESS = 0;
const graphStatus GRAPH_PARAM_INVALID = 50331649;
}  // namespace ge

#endif  // GEASYNC_TWIN_GRAPH_ERROR_CODES_H_
