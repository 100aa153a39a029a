// Twin of GE's ge/ge_api_error_codes.h: the status type and the only two codes CANN publishes. GE's other codes
// (PARAM_INVALID, MEMALLOC_FAILED, ...) live in GE-internal headers CANN does not install; the twin keeps its
// copies in a private header (src/ge_inner_error_codes.h), so code written against these headers cannot use them.
#ifndef GEASYNC_TWIN_GE_GE_API_ERROR_CODES_H_
#define GEASYNC_TWIN_GE_GE_API_ERROR_CODES_H_

#include <cstdint>

#include "graph/error_codes.h"

namespace ge {
using Status = uint32_t;

constexpr Status SUCCESS = 0U;
constexpr Status FAILED = 0xFFFFFFFFU;
}  // namespace ge

#endif  // GEASYNC_TWIN_GE_GE_API_ERROR_CODES_H_
