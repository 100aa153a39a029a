// Data a kernel derives from a constant input when a plan is built (a weight packed into panels, widened from
// float16, transformed for Winograd), shared by every plan that derives the same thing from the same constant.
//
// Why: a graph with dynamic dims gets one plan per input shape (a decoder: one per prompt length and per past
// length). Each plan used to derive its own copy: a 144 MB MLP took 0.4-1.2 s per new shape to pack, and each cached
// plan held another 144 MB.
//
// Entries are keyed by the source's address, a tag naming the derivation and its parameters, and held weakly: the
// data lives while a kernel holds it. That keying is sound because a kernel never outlives the constants it was
// prepared from (its plan owns the model's initializers and its own folded values), and constants never change:
// while an entry is alive its source is alive, so an equal address means the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

namespace twin {
namespace onnx {

// The shared entry for (source, tag, params), built by build() if none is alive (a build returning null is a
// failure, returned and not kept). tag must be a string literal, one per derivation and element type.
std::shared_ptr<const void> SharedDerivedRaw(const void *source, const char *tag, std::initializer_list<int64_t> params,
                                             const std::function<std::shared_ptr<const void>()> &build);

template <class T>
std::shared_ptr<const std::vector<T>> SharedDerived(const void *source, const char *tag,
                                                    std::initializer_list<int64_t> params,
                                                    const std::function<void(std::vector<T> *)> &build) {
  std::shared_ptr<const void> p = SharedDerivedRaw(source, tag, params, [&build]() -> std::shared_ptr<const void> {
    auto v = std::make_shared<std::vector<T>>();
    build(v.get());
    return v;
  });
  return std::static_pointer_cast<const std::vector<T>>(p);
}

}  // namespace onnx
}  // namespace twin
