// Twin of GE's graph/types.h subset: data types and formats (values are GE's).
#ifndef GEASYNC_TWIN_GRAPH_TYPES_H_
#define GEASYNC_TWIN_GRAPH_TYPES_H_

#include <cstdint>

namespace ge {
enum DataType : int32_t {
  DT_FLOAT = 0,
  DT_FLOAT16 = 1,
  DT_INT8 = 2,
  DT_INT32 = 3,
  DT_UINT8 = 4,
  DT_INT16 = 6,
  DT_UINT16 = 7,
  DT_UINT32 = 8,
  DT_INT64 = 9,
  DT_UINT64 = 10,
  DT_DOUBLE = 11,
  DT_BOOL = 12,
  DT_BF16 = 27,
  DT_UNDEFINED = 28,
};

enum Format : int32_t {
  FORMAT_NCHW = 0,
  FORMAT_NHWC = 1,
  FORMAT_ND = 2,
  FORMAT_RESERVED = 40,
};

// Bytes per element of t; -1 for types the twin does not know.
inline int32_t GetSizeByDataType(DataType t) {
  switch (t) {
    case DT_FLOAT: case DT_INT32: case DT_UINT32: return 4;
    case DT_FLOAT16: case DT_INT16: case DT_UINT16: case DT_BF16: return 2;
    case DT_INT8: case DT_UINT8: case DT_BOOL: return 1;
    case DT_INT64: case DT_UINT64: case DT_DOUBLE: return 8;
    default: return -1;
  }
}
}  // namespace ge

#endif  // GEASYNC_TWIN_GRAPH_TYPES_H_
