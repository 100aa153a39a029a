// SmallVec<T, N>: a vector of a trivially copyable T that keeps up to N elements inline (heap beyond), and Dims, the
// dims of a TensorDesc. A plan copies, infers and frees thousands of descs and per-step tables: with std::vector
// each was a heap allocation, and a plan built for a new input shape (a decode loop meets one per step) spent a
// third of its time in malloc and free. It reads and converts like std::vector<T>, so code written against vectors
// keeps working.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <type_traits>
#include <vector>

namespace twin {
namespace onnx {

template <class T, size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable<T>::value, "SmallVec moves its elements with memcpy");

 public:
  static constexpr size_t kInline = N;
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T &;
  using const_reference = const T &;
  using pointer = T *;
  using const_pointer = const T *;
  using iterator = T *;
  using const_iterator = const T *;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVec() noexcept : data_(inline_) {}
  explicit SmallVec(size_t n, T v = T()) : SmallVec() { assign(n, v); }
  SmallVec(std::initializer_list<T> il) : SmallVec() { assign(il.begin(), il.end()); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  SmallVec(It first, It last) : SmallVec() { assign(first, last); }
  SmallVec(const std::vector<T> &v) : SmallVec() { assign(v.begin(), v.end()); }  // NOLINT: implicit, as a vector
  SmallVec(const SmallVec &o) : SmallVec() { assign(o.begin(), o.end()); }
  SmallVec(SmallVec &&o) noexcept : SmallVec() { Steal(o); }
  ~SmallVec() { Free(); }

  SmallVec &operator=(const SmallVec &o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVec &operator=(SmallVec &&o) noexcept {
    if (this != &o) {
      Free();
      data_ = inline_;
      size_ = 0;
      cap_ = kInline;
      Steal(o);
    }
    return *this;
  }
  SmallVec &operator=(const std::vector<T> &v) {
    assign(v.begin(), v.end());
    return *this;
  }
  SmallVec &operator=(std::initializer_list<T> il) {
    assign(il.begin(), il.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return cap_; }
  T *data() noexcept { return data_; }
  const T *data() const noexcept { return data_; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  T &operator[](size_t i) noexcept { return data_[i]; }
  const T &operator[](size_t i) const noexcept { return data_[i]; }
  T &front() noexcept { return data_[0]; }
  const T &front() const noexcept { return data_[0]; }
  T &back() noexcept { return data_[size_ - 1]; }
  const T &back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > cap_) Grow(n);
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_t n, T v = T()) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = v;
    size_ = n;
  }
  void push_back(T v) {
    if (size_ == cap_) Grow(cap_ * 2);
    data_[size_++] = v;
  }
  void emplace_back(T v) { push_back(v); }
  void pop_back() noexcept { --size_; }
  void assign(size_t n, T v) {
    clear();
    resize(n, v);
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (n > cap_) {  // read before freeing: the range may not be ours, but never alias a buffer we drop
      SmallVec fresh;
      fresh.Grow(n);
      std::copy(first, last, fresh.data_);
      fresh.size_ = n;
      *this = std::move(fresh);
      return;
    }
    std::copy(first, last, data_);
    size_ = n;
  }
  void assign(std::initializer_list<T> il) { assign(il.begin(), il.end()); }

  iterator insert(const_iterator pos, T v) { return insert(pos, size_t{1}, v); }
  iterator insert(const_iterator pos, size_t n, T v) {
    const size_t at = static_cast<size_t>(pos - data_);
    reserve(size_ + n);
    std::memmove(data_ + at + n, data_ + at, (size_ - at) * sizeof(T));
    for (size_t i = 0; i < n; ++i) data_[at + i] = v;
    size_ += n;
    return data_ + at;
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data_);
    const SmallVec items(first, last);  // the range may be part of this
    reserve(size_ + items.size_);
    std::memmove(data_ + at + items.size_, data_ + at, (size_ - at) * sizeof(T));
    std::copy(items.begin(), items.end(), data_ + at);
    size_ += items.size_;
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_), n = static_cast<size_t>(last - first);
    std::memmove(data_ + at, data_ + at + n, (size_ - at - n) * sizeof(T));
    size_ -= n;
    return data_ + at;
  }
  void swap(SmallVec &o) noexcept {
    SmallVec t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const SmallVec &a, const SmallVec &b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVec &a, const SmallVec &b) { return !(a == b); }
  friend bool operator<(const SmallVec &a, const SmallVec &b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVec &a, const std::vector<T> &b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const std::vector<T> &a, const SmallVec &b) { return b == a; }
  friend bool operator!=(const SmallVec &a, const std::vector<T> &b) { return !(a == b); }
  friend bool operator!=(const std::vector<T> &a, const SmallVec &b) { return !(b == a); }

 private:
  void Grow(size_t n) {
    n = std::max(n, 2 * static_cast<size_t>(cap_));
    auto *p = static_cast<T *>(::operator new(n * sizeof(T)));
    std::memcpy(p, data_, size_ * sizeof(T));
    Free();
    data_ = p;
    cap_ = static_cast<uint32_t>(n);
  }
  void Free() noexcept {
    if (data_ != inline_) ::operator delete(data_);
  }
  void Steal(SmallVec &o) noexcept {  // this is empty and inline
    if (o.data_ == o.inline_) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));
      size_ = o.size_;
    } else {
      data_ = o.data_;
      size_ = o.size_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = kInline;
    }
    o.size_ = 0;
  }

  T *data_;
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
  T inline_[kInline];
};

// A tensor's dims: ranks up to 6 (nearly every tensor) need no heap.
using Dims = SmallVec<int64_t, 6>;

}  // namespace onnx
}  // namespace twin
