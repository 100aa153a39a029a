// Twin of metadef's exe_graph/runtime/runtime_tensor.h (and the shape, storage and tensor-data headers it pulls
// in): gert::Tensor, the standard-layout run-time tensor of the v2 API, with TensorData's manager protocol.
// Sizes match GE on x86-64.
#ifndef GEASYNC_TWIN_EXE_GRAPH_RUNTIME_RUNTIME_TENSOR_H_
#define GEASYNC_TWIN_EXE_GRAPH_RUNTIME_RUNTIME_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "graph/error_codes.h"
#include "graph/types.h"

namespace gert {
class Shape {
 public:
  static constexpr size_t kMaxDimNum = 25U;  // metadef: a class member (exe_graph/runtime/shape.h)
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    for (int64_t d : dims) AppendDim(d);
  }
  size_t GetDimNum() const { return dim_num_; }
  void SetDimNum(size_t n) { dim_num_ = n > kMaxDimNum ? kMaxDimNum : n; }
  int64_t GetDim(size_t i) const { return i < dim_num_ ? dims_[i] : 0; }
  void SetDim(size_t i, int64_t v) {
    if (i < kMaxDimNum) dims_[i] = v;
  }
  Shape &AppendDim(int64_t v) {
    if (dim_num_ < kMaxDimNum) dims_[dim_num_++] = v;
    return *this;
  }
  int64_t GetShapeSize() const {
    int64_t n = 1;
    for (size_t i = 0; i < dim_num_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape &o) const {
    if (dim_num_ != o.dim_num_) return false;
    for (size_t i = 0; i < dim_num_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }

 private:
  size_t dim_num_ = 0;
  int64_t dims_[Shape::kMaxDimNum] = {};
  [[maybe_unused]] uint8_t reserved_[40] = {};
};

class StorageShape {
 public:
  StorageShape() = default;
  StorageShape(std::initializer_list<int64_t> origin, std::initializer_list<int64_t> storage)
      : origin_shape_(origin), storage_shape_(storage) {}
  const Shape &GetOriginShape() const { return origin_shape_; }
  const Shape &GetStorageShape() const { return storage_shape_; }
  Shape &MutableOriginShape() { return origin_shape_; }
  Shape &MutableStorageShape() { return storage_shape_; }

 private:
  Shape origin_shape_;
  Shape storage_shape_;
  [[maybe_unused]] uint8_t reserved_[40] = {};
};

struct ExpandDimsType {
  int64_t size_ = 0;
  uint64_t mask_ = 0;
  [[maybe_unused]] uint8_t reserved_[40] = {};
};

class StorageFormat {
 public:
  StorageFormat() = default;
  StorageFormat(ge::Format origin, ge::Format storage, const ExpandDimsType &expand)
      : origin_format_(origin), storage_format_(storage), expand_dims_type_(expand) {}
  ge::Format GetOriginFormat() const { return origin_format_; }
  ge::Format GetStorageFormat() const { return storage_format_; }
  void SetOriginFormat(ge::Format f) { origin_format_ = f; }
  void SetStorageFormat(ge::Format f) { storage_format_ = f; }

 private:
  ge::Format origin_format_ = ge::FORMAT_ND;
  ge::Format storage_format_ = ge::FORMAT_ND;
  ExpandDimsType expand_dims_type_;
  [[maybe_unused]] uint8_t reserved_[32] = {};
};

enum TensorPlacement : int32_t { kOnDeviceHbm, kOnHost, kFollowing, kOnDeviceP2p, kTensorPlacementEnd };
enum TensorOperateType { kGetTensorAddress, kFreeTensor, kPlusShareCount, kTensorOperateType };
using TensorAddress = void *;
using TensorAddrManager = ge::graphStatus (*)(TensorAddress addr, TensorOperateType op, void **out);

// Move-only. With a manager, the address is owned: destruction / Free / SetAddr / move-assignment free it.
class TensorData {
 public:
  explicit TensorData(TensorAddress addr = nullptr, TensorAddrManager manager = nullptr)
      : addr_(addr), manager_(manager) {}
  TensorData(TensorAddress addr, TensorAddrManager manager, size_t size, TensorPlacement placement)
      : addr_(addr), manager_(manager), size_(size), placement_(placement) {}
  TensorData(const TensorData &) = delete;
  TensorData &operator=(const TensorData &) = delete;
  TensorData(TensorData &&other) noexcept { MoveFrom(other); }
  TensorData &operator=(TensorData &&other) noexcept {
    if (this != &other) {
      Free();
      MoveFrom(other);
    }
    return *this;
  }
  ~TensorData() { Free(); }

  TensorAddress GetAddr() const {
    if (manager_ == nullptr || addr_ == nullptr) return addr_;
    void *out = nullptr;
    return manager_(addr_, kGetTensorAddress, &out) == ge::GRAPH_SUCCESS ? out : nullptr;
  }
  size_t GetSize() const { return size_; }
  void SetSize(size_t size) { size_ = size; }
  TensorPlacement GetPlacement() const { return placement_; }
  void SetPlacement(TensorPlacement p) { placement_ = p; }
  TensorAddrManager GetManager() const { return manager_; }
  bool IsSharedWith(const TensorData &other) const { return addr_ == other.addr_ && manager_ == other.manager_; }

  ge::graphStatus Free() {
    ge::graphStatus ret = ge::GRAPH_SUCCESS;
    if (manager_ != nullptr && addr_ != nullptr) ret = manager_(addr_, kFreeTensor, nullptr);
    addr_ = nullptr;
    manager_ = nullptr;
    return ret;
  }
  ge::graphStatus SetAddr(TensorAddress addr, TensorAddrManager manager) {
    const ge::graphStatus ret = Free();
    addr_ = addr;
    manager_ = manager;
    return ret;
  }
  // Shares other's data: raises the owner's share count, so each holder frees once.
  ge::graphStatus ShareFrom(const TensorData &other) {
    Free();
    if (other.manager_ != nullptr && other.addr_ != nullptr) {
      const ge::graphStatus ret = other.manager_(other.addr_, kPlusShareCount, nullptr);
      if (ret != ge::GRAPH_SUCCESS) return ret;
    }
    addr_ = other.addr_;
    manager_ = other.manager_;
    size_ = other.size_;
    placement_ = other.placement_;
    return ge::GRAPH_SUCCESS;
  }
  // Gives ownership away: returns the raw address and manager, leaving this empty.
  ge::graphStatus Release(TensorAddress &addr, TensorAddrManager &manager) {
    addr = addr_;
    manager = manager_;
    addr_ = nullptr;
    manager_ = nullptr;
    return ge::GRAPH_SUCCESS;
  }

 private:
  void MoveFrom(TensorData &other) {
    addr_ = other.addr_;
    manager_ = other.manager_;
    size_ = other.size_;
    placement_ = other.placement_;
    other.addr_ = nullptr;
    other.manager_ = nullptr;
  }
  TensorAddress addr_ = nullptr;
  TensorAddrManager manager_ = nullptr;
  size_t size_ = 0;
  TensorPlacement placement_ = kTensorPlacementEnd;
  [[maybe_unused]] uint8_t reserved_[44] = {};
};

using TensorVersion = uint8_t;

class Tensor {
 public:
  Tensor() = default;
  Tensor(const StorageShape &shape, const StorageFormat &format, TensorPlacement placement, ge::DataType dtype,
         TensorAddress addr, TensorAddrManager manager = nullptr)
      : storage_shape_(shape), storage_format_(format), data_type_(dtype),
        tensor_data_(addr, manager, CalcSize(shape, dtype), placement) {}
  Tensor(const StorageShape &shape, const StorageFormat &format, ge::DataType dtype)
      : storage_shape_(shape), storage_format_(format), data_type_(dtype) {}
  Tensor(Tensor &&) noexcept = default;
  Tensor &operator=(Tensor &&) noexcept = default;

  int64_t GetShapeSize() const { return storage_shape_.GetStorageShape().GetShapeSize(); }
  TensorAddress GetAddr() const { return tensor_data_.GetAddr(); }
  template <class T>
  const T *GetData() const { return static_cast<const T *>(GetAddr()); }
  template <class T>
  T *GetData() { return static_cast<T *>(GetAddr()); }
  size_t GetSize() const { return tensor_data_.GetSize(); }
  void SetSize(size_t size) { tensor_data_.SetSize(size); }
  void SetData(TensorData &&data) { tensor_data_ = std::move(data); }
  TensorPlacement GetPlacement() const { return tensor_data_.GetPlacement(); }
  void SetPlacement(TensorPlacement p) { tensor_data_.SetPlacement(p); }
  const StorageShape &GetShape() const { return storage_shape_; }
  const Shape &GetStorageShape() const { return storage_shape_.GetStorageShape(); }
  Shape &MutableStorageShape() { return storage_shape_.MutableStorageShape(); }
  const Shape &GetOriginShape() const { return storage_shape_.GetOriginShape(); }
  Shape &MutableOriginShape() { return storage_shape_.MutableOriginShape(); }
  const StorageFormat &GetFormat() const { return storage_format_; }
  ge::Format GetStorageFormat() const { return storage_format_.GetStorageFormat(); }
  void SetStorageFormat(ge::Format f) { storage_format_.SetStorageFormat(f); }
  ge::Format GetOriginFormat() const { return storage_format_.GetOriginFormat(); }
  void SetOriginFormat(ge::Format f) { storage_format_.SetOriginFormat(f); }
  ge::DataType GetDataType() const { return data_type_; }
  void SetDataType(ge::DataType t) { data_type_ = t; }
  const TensorData &GetTensorData() const { return tensor_data_; }
  TensorData &MutableTensorData() { return tensor_data_; }

 private:
  static size_t CalcSize(const StorageShape &shape, ge::DataType dtype) {
    const int64_t n = shape.GetStorageShape().GetShapeSize();
    const int32_t es = ge::GetSizeByDataType(dtype);
    return (n <= 0 || es <= 0) ? 0U : static_cast<size_t>(n) * static_cast<size_t>(es);
  }
  StorageShape storage_shape_;
  StorageFormat storage_format_;
  [[maybe_unused]] TensorVersion version_ = 0;
  [[maybe_unused]] uint8_t reserved_[3] = {};
  ge::DataType data_type_ = ge::DT_UNDEFINED;
  TensorData tensor_data_;
  [[maybe_unused]] uint8_t reserved_field_[40] = {};
};

#if defined(__x86_64__)
static_assert(sizeof(Shape) == 248, "gert::Shape layout");
static_assert(sizeof(StorageShape) == 536, "gert::StorageShape layout");
static_assert(sizeof(StorageFormat) == 96, "gert::StorageFormat layout");
static_assert(sizeof(TensorData) == 72, "gert::TensorData layout");
static_assert(sizeof(Tensor) == 752, "gert::Tensor layout");
#endif
static_assert(std::is_standard_layout<Tensor>::value, "gert::Tensor is standard layout");
}  // namespace gert

#endif  // GEASYNC_TWIN_EXE_GRAPH_RUNTIME_RUNTIME_TENSOR_H_
