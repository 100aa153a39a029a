// Twin of GE's status type and GE's status codes (values are GE's).
#ifndef GEASYNC_TWIN_GE_GE_API_ERROR_CODES_H_
#define GEASYNC_TWIN_GE_GE_API_ERROR_CODES_H_

#include <cstdint>

namespace ge {
using Status = uint32_t;
using graphStatus = uint32_t;

constexpr Status SUCCESS = 0U;
constexpr Status FAILED = 0xFFFFFFFFU;
constexpr graphStatus GRAPH_SUCCESS = 0U;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFFU;
constexpr graphStatus GRAPH_PARAM_INVALID = 50331649U;
constexpr Status MEMALLOC_FAILED = 1343225856U;
constexpr Status PARAM_INVALID = 1343225857U;
constexpr Status RT_FAILED = 1343225859U;
constexpr Status INTERNAL_ERROR = 1343225860U;
constexpr Status END_OF_SEQUENCE = 1343225863U;
constexpr Status UNSUPPORTED = 1343225956U;
constexpr Status GE_CLI_GE_NOT_INITIALIZED = 1343229963U;
constexpr Status GE_SESS_ALREADY_RUNNING = 1343238145U;
constexpr Status GE_GRAPH_ALREADY_RUNNING = 1343242241U;
constexpr Status GE_GRAPH_GRAPH_NOT_EXIST = 1343242242U;
constexpr Status GE_GRAPH_SYNC_MODEL_FAILED = 1343242272U;
constexpr Status GE_GRAPH_UNSUPPORTED = 1343242281U;
constexpr Status GE_GRAPH_NOT_BUILT = 1343242295U;
constexpr Status GE_GRAPH_REPEAT_OPERATION = 1343242306U;
}  // namespace ge

#endif  // GEASYNC_TWIN_GE_GE_API_ERROR_CODES_H_
