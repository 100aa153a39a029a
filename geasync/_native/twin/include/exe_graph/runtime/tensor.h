// Twin of metadef's exe_graph/runtime/tensor.h: a compatibility header that only includes runtime_tensor.h
// (metadef deprecates it, to be removed after 2027-06; new code includes runtime_tensor.h).
#ifndef GEASYNC_TWIN_EXE_GRAPH_RUNTIME_TENSOR_H_
#define GEASYNC_TWIN_EXE_GRAPH_RUNTIME_TENSOR_H_
#include "exe_graph/runtime/runtime_tensor.h"
#endif  // GEASYNC_TWIN_EXE_GRAPH_RUNTIME_TENSOR_H_
