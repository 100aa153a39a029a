// Twin of GE's ge/ge_graph_compile_summary.h: what GetCompiledGraphSummary reports about a compiled graph.
#ifndef GEASYNC_TWIN_GE_GE_GRAPH_COMPILE_SUMMARY_H_
#define GEASYNC_TWIN_GE_GE_GRAPH_COMPILE_SUMMARY_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "ge/ge_api_error_codes.h"
#include "graph/tensor.h"
#include "graph/types.h"

namespace twin {
class SummaryAccess;
}

namespace ge {
class CompiledGraphSummary {
 public:
  bool IsStatic() const { return is_static_; }
  Status GetConstMemorySize(size_t &size) const {
    size = const_size_;
    return SUCCESS;
  }
  Status GetFeatureMemorySize(size_t &size) const {
    size = feature_size_;
    return SUCCESS;
  }
  Status GetFeatureMemoryBaseRefreshable(bool &v) const {
    v = false;
    return SUCCESS;
  }
  Status GetStreamNum(size_t &num) const {
    num = 1U;
    return SUCCESS;
  }
  Status GetEventNum(size_t &num) const {
    num = 0U;
    return SUCCESS;
  }
  Status GetOutputShapes(std::vector<ge::Shape> &shapes) const {
    shapes = output_shapes_;
    return SUCCESS;
  }
  Status GetOutputDtypes(std::vector<ge::DataType> &dtypes) const {
    dtypes = output_dtypes_;
    return SUCCESS;
  }

 private:
  friend class ::twin::SummaryAccess;
  bool is_static_ = false;
  size_t const_size_ = 0U;
  size_t feature_size_ = 0U;
  std::vector<ge::Shape> output_shapes_;
  std::vector<ge::DataType> output_dtypes_;
};
using CompiledGraphSummaryPtr = std::shared_ptr<CompiledGraphSummary>;
}  // namespace ge

#endif  // GEASYNC_TWIN_GE_GE_GRAPH_COMPILE_SUMMARY_H_
