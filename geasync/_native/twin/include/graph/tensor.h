// Twin of GE's graph/tensor.h subset: ge::Shape, ge::TensorDesc and ge::Tensor, used to describe inputs
// to CompileGraph (run-time tensors are gert::Tensor, exe_graph/runtime/tensor.h).
#ifndef GEASYNC_TWIN_GRAPH_TENSOR_H_
#define GEASYNC_TWIN_GRAPH_TENSOR_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/types.h"

namespace ge {
class Shape {
 public:
  Shape() = default;
  explicit Shape(const std::vector<int64_t> &dims) : dims_(dims) {}
  size_t GetDimNum() const { return dims_.size(); }
  int64_t GetDim(size_t idx) const { return idx < dims_.size() ? dims_[idx] : 0; }
  std::vector<int64_t> GetDims() const { return dims_; }
  int64_t GetShapeSize() const {
    int64_t n = 1;
    for (int64_t d : dims_) {
      if (d < 0) return -1;
      n *= d;
    }
    return n;
  }

 private:
  std::vector<int64_t> dims_;
};

class TensorDesc {
 public:
  TensorDesc() = default;
  explicit TensorDesc(Shape shape, Format format = FORMAT_ND, DataType dt = DT_FLOAT)
      : shape_(std::move(shape)), format_(format), dtype_(dt) {}
  Shape GetShape() const { return shape_; }
  void SetShape(const Shape &shape) { shape_ = shape; }
  Format GetFormat() const { return format_; }
  DataType GetDataType() const { return dtype_; }
  void SetDataType(DataType dt) { dtype_ = dt; }

 private:
  Shape shape_;
  Format format_ = FORMAT_ND;
  DataType dtype_ = DT_FLOAT;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(const TensorDesc &desc) : desc_(desc) {}
  TensorDesc GetTensorDesc() const { return desc_; }
  void SetTensorDesc(const TensorDesc &desc) { desc_ = desc; }

 private:
  TensorDesc desc_;
};
}  // namespace ge

#endif  // GEASYNC_TWIN_GRAPH_TENSOR_H_
