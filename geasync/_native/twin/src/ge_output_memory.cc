// GE twin: run outputs and their memory. Host outputs (RunGraph, RunGraphAsync) and device outputs (stream runs)
// are owned through TensorData managers as GE hands them out; device outputs come from the external allocator
// registered for the stream (a process-wide map, as GE's) or the graph's built-in per-stream allocator.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "acl/acl_rt.h"
#include "acl_internal.h"
#include "ge_session_internal.h"

namespace ge {
namespace {
std::atomic<int64_t> g_live_host_blocks{0};
std::atomic<int64_t> g_live_mem_blocks{0};
constexpr size_t kHostOutputSlack = 64;
// Host outputs start on a cache line, as device memory (aclrtMalloc) and the plan's intermediates do. malloc's
// 16-byte alignment made every vector store of a kernel writing an output straddle two cache lines: a Cast of 64K
// floats to float16 into a 64 KiB-plus malloc block ran ~1.3x slower than into an aligned one. The block is
// malloc'd 48 bytes larger and the data starts at its first 64-byte boundary: posix_memalign cost 100-300 ns more
// than malloc per output (measured), which the small outputs' runs noticed.
constexpr size_t kHostOutputAlign = 64;
constexpr size_t kMallocAlign = alignof(std::max_align_t);

// Host output blocks of 16 MiB and more, kept for reuse once freed. glibc serves a block over its mmap threshold
// (32 MiB at most) with fresh pages every time, and their page faults made a run with a 32 MiB output 6x slower than
// onnxruntime's, which reuses its arena. A few blocks, bounded in bytes; the oldest go back to the system first.
// Never destroyed: an output may be freed while the process exits, after static destructors ran.
class LargeBlockCache {
 public:
  static constexpr size_t kMinBytes = size_t(16) << 20;
  static constexpr size_t kMaxBlocks = 4;
  static constexpr size_t kMaxBytes = size_t(512) << 20;

  // A kept block of at least `bytes` (and at most twice that, the smallest such), or nullptr; *cap: its size.
  void *Take(size_t bytes, size_t *cap) {
    std::lock_guard<std::mutex> lk(mu_);
    size_t best = blocks_.size();
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const size_t c = blocks_[i].second;
      if (c >= bytes && c / 2 <= bytes && (best == blocks_.size() || c < blocks_[best].second)) best = i;
    }
    if (best == blocks_.size()) return nullptr;
    void *data = blocks_[best].first;
    *cap = blocks_[best].second;
    bytes_ -= *cap;
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(best));
    return data;
  }

  // Keeps a freed block, or frees it (and the oldest kept ones over the bounds).
  void Give(void *data, size_t cap) {
    std::vector<void *> evicted;
    if (cap > kMaxBytes) {
      evicted.push_back(data);
    } else {
      std::lock_guard<std::mutex> lk(mu_);
      blocks_.emplace_back(data, cap);
      bytes_ += cap;
      while (blocks_.size() > kMaxBlocks || bytes_ > kMaxBytes) {
        evicted.push_back(blocks_.front().first);
        bytes_ -= blocks_.front().second;
        blocks_.erase(blocks_.begin());
      }
    }
    for (void *p : evicted) std::free(p);  // outside the lock: unmapping takes a while
  }

  void Clear() {
    std::vector<std::pair<void *, size_t>> all;
    {
      std::lock_guard<std::mutex> lk(mu_);
      all.swap(blocks_);
      bytes_ = 0;
    }
    for (auto &b : all) std::free(b.first);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<void *, size_t>> blocks_;  // oldest first
  size_t bytes_ = 0;
};

LargeBlockCache &LargeBlocks() {
  static LargeBlockCache *cache = new LargeBlockCache;
  return *cache;
}

// Host output memory owned through a TensorData manager, as GE hands out RunGraph / RunGraphAsync outputs.
struct HostBlock {
  void *base;  // what malloc returned (or the large-block cache gave)
  void *data;  // the first kHostOutputAlign boundary in it
  size_t cap;  // bytes allocated at base
  std::atomic<int> refs{1};
};

void FreeHostData(void *data, size_t cap) {
  if (cap >= LargeBlockCache::kMinBytes) {
    LargeBlocks().Give(data, cap);
  } else {
    std::free(data);
  }
}

graphStatus HostBlockManager(gert::TensorAddress addr, gert::TensorOperateType op, void **out) {
  auto *b = static_cast<HostBlock *>(addr);
  switch (op) {
    case gert::kGetTensorAddress:
      if (out != nullptr) *out = b->data;
      return GRAPH_SUCCESS;
    case gert::kFreeTensor:
      if (b->refs.fetch_sub(1) == 1) {
        FreeHostData(b->base, b->cap);
        delete b;
        g_live_host_blocks.fetch_sub(1);
      }
      return GRAPH_SUCCESS;
    case gert::kPlusShareCount:
      b->refs.fetch_add(1);
      return GRAPH_SUCCESS;
    default:
      return GRAPH_FAILED;
  }
}

// Device output memory owned through a MemBlock (external or built-in allocator).
graphStatus MemBlockManager(gert::TensorAddress addr, gert::TensorOperateType op, void **out) {
  auto *b = static_cast<MemBlock *>(addr);
  switch (op) {
    case gert::kGetTensorAddress:
      if (out != nullptr) *out = b->GetAddr();
      return GRAPH_SUCCESS;
    case gert::kFreeTensor:
      b->Free();
      return GRAPH_SUCCESS;
    case gert::kPlusShareCount:
      b->AddCount();
      return GRAPH_SUCCESS;
    default:
      return GRAPH_FAILED;
  }
}
}  // namespace

// GE's built-in per-model, per-stream allocator: device memory from aclrtMalloc. Each block keeps its
// allocator alive, so an output released after its graph was removed is still freed correctly.
class BuiltinAllocator : public Allocator, public std::enable_shared_from_this<BuiltinAllocator> {
 public:
  struct Block : MemBlock {
    Block(Allocator &a, void *p, size_t n, std::shared_ptr<Allocator> keep)
        : MemBlock(a, p, n), keep_alive(std::move(keep)) {}
    std::shared_ptr<Allocator> keep_alive;
  };
  MemBlock *Malloc(size_t size) override {
    void *p = nullptr;
    if (aclrtMalloc(&p, size == 0 ? 1 : size, ACL_MEM_MALLOC_NORMAL_ONLY) != ACL_SUCCESS) return nullptr;
    g_live_mem_blocks.fetch_add(1);
    return new (std::nothrow) Block(*this, p, size, shared_from_this());
  }
  void Free(MemBlock *block) override {
    if (block == nullptr) return;
    (void)aclrtFree(block->GetAddr());
    g_live_mem_blocks.fetch_sub(1);
    delete static_cast<Block *>(block);  // may release this allocator: nothing after this line
  }
};

namespace {
struct ExternalAllocators {
  std::mutex mu;
  std::map<const void *, AllocatorPtr> by_stream;
};
ExternalAllocators &Externals() {
  static ExternalAllocators *e = new ExternalAllocators();  // process-wide, leaked: used during exit
  return *e;
}

// A tensor's shape as gert holds it: origin = storage (the twin does no format transforms).
gert::StorageShape StorageShapeOf(const twin::onnx::Dims &dims) {
  gert::StorageShape shape;
  for (int64_t v : dims) {
    shape.MutableOriginShape().AppendDim(v);
    shape.MutableStorageShape().AppendDim(v);
  }
  return shape;
}

// The stream's output allocator: the external one registered for it, else the graph's built-in one.
AllocatorPtr StreamAllocator(GraphNode &node, void *stream) {
  {
    std::lock_guard<std::mutex> lk(Externals().mu);
    auto it = Externals().by_stream.find(stream);
    if (it != Externals().by_stream.end()) return it->second;
  }
  std::lock_guard<std::mutex> lk(node.mu);
  auto &b = node.builtin_allocators[stream];
  if (!b) b = std::make_shared<BuiltinAllocator>();
  return b;
}

Status UseCallerOutputs(const std::vector<ODesc> &descs, const std::vector<gert::Tensor> &outputs, const char *api,
                        std::vector<void *> *ptrs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].GetSize() < descs[i].Bytes()) {
      twin::ReportError(std::string(api) + ": output " + std::to_string(i) + " holds " +
                        std::to_string(outputs[i].GetSize()) + " bytes, needs " + std::to_string(descs[i].Bytes()));
      return PARAM_INVALID;
    }
    ptrs->push_back(outputs[i].GetAddr());
  }
  return SUCCESS;
}

// Device outputs owned through MemBlock managers; on failure the blocks allocated so far are freed.
Status AllocateDeviceOutputs(Allocator &alloc, const std::vector<ODesc> &descs, const char *api,
                             std::vector<gert::Tensor> *outputs, std::vector<void *> *ptrs) {
  std::vector<gert::Tensor> made;
  for (const ODesc &d : descs) {
    MemBlock *block = alloc.Malloc(d.Bytes());
    if (block == nullptr) {
      twin::ReportError(std::string(api) + ": the allocator of the stream returned no memory for a " +
                        std::to_string(d.Bytes()) + "-byte output");
      return MEMALLOC_FAILED;  // `made` frees the blocks allocated so far
    }
    made.emplace_back(StorageShapeOf(d.dims), gert::StorageFormat(FORMAT_ND, FORMAT_ND, {}), gert::kOnDeviceHbm,
                      static_cast<DataType>(d.dtype), block, MemBlockManager);
    made.back().SetSize(d.Bytes());
    // The twin's device memory is host memory: a user allocator's address outside every aclrtMalloc block (a
    // number, a numpy buffer) would be written by the run and crash the process, where the device reports a fault.
    size_t remaining = 0;
    if (d.Bytes() > 0 && (!twin::acl::LookupDeviceMemory(block->GetAddr(), &remaining) || remaining < d.Bytes())) {
      std::ostringstream addr;
      addr << block->GetAddr();
      twin::ReportError(std::string(api) + ": the allocator of the stream returned " + addr.str() + " for a " +
                        std::to_string(d.Bytes()) + "-byte output, which is not inside a live aclrtMalloc block " +
                        "large enough (an allocator must hand out device memory)");
      return MEMALLOC_FAILED;  // `made` frees the blocks allocated so far, this one too
    }
    ptrs->push_back(d.Bytes() == 0 ? nullptr : block->GetAddr());
  }
  *outputs = std::move(made);
  return SUCCESS;
}
}  // namespace

int64_t LiveHostOutputBlocks() { return g_live_host_blocks.load(); }
void ReleaseKeptHostOutputBlocks() { LargeBlocks().Clear(); }
int64_t LiveDeviceOutputBlocks() { return g_live_mem_blocks.load(); }

Status MakeHostOutputs(const Plan &plan, std::vector<gert::Tensor> &outputs, std::vector<void *> *ptrs) {
  outputs.clear();
  ptrs->clear();
  outputs.reserve(plan.output_descs().size());  // gert::Tensor is large: no re-moves as the vector grows
  ptrs->reserve(plan.output_descs().size());
  for (const ODesc &d : plan.output_descs()) {
    const size_t bytes = d.Bytes();
    // 64 spare bytes at the end: the binding copies small outputs into numpy arrays, which malloc often places
    // right after this block; without them, a block of a power-of-two size puts that array 16 bytes past it modulo
    // 4 KiB, where glibc's `rep movsb` runs 6x slower on AMD Zen 3/4 (glibc bug 30994; see CopyBytes).
    size_t cap = bytes + kHostOutputSlack + (kHostOutputAlign - kMallocAlign);
    void *base = cap >= LargeBlockCache::kMinBytes ? LargeBlocks().Take(cap, &cap) : nullptr;
    if (base == nullptr) base = std::malloc(cap);
    void *data = base == nullptr ? nullptr : reinterpret_cast<void *>(
        (reinterpret_cast<uintptr_t>(base) + kHostOutputAlign - 1) & ~uintptr_t(kHostOutputAlign - 1));
    auto *block = base == nullptr ? nullptr : new (std::nothrow) HostBlock{base, data, cap};
    if (block == nullptr) {
      if (base != nullptr) FreeHostData(base, cap);
      twin::ReportError("out of host memory for a " + std::to_string(bytes) + "-byte output");
      return MEMALLOC_FAILED;
    }
    g_live_host_blocks.fetch_add(1);
    outputs.emplace_back(StorageShapeOf(d.dims), gert::StorageFormat(FORMAT_ND, FORMAT_ND, {}), gert::kOnHost,
                         static_cast<DataType>(d.dtype), block, HostBlockManager);
    ptrs->push_back(bytes == 0 ? nullptr : data);
  }
  return SUCCESS;
}

Status MakeStreamOutputs(GraphNode &node, void *stream, const std::vector<ODesc> &descs, const char *api,
                         std::vector<gert::Tensor> *outputs, std::vector<void *> *ptrs) {
  const bool caller_outputs =
      outputs->size() == descs.size() &&
      std::all_of(outputs->begin(), outputs->end(), [](const gert::Tensor &t) { return t.GetAddr() != nullptr; });
  if (caller_outputs) return UseCallerOutputs(descs, *outputs, api, ptrs);
  const AllocatorPtr alloc = StreamAllocator(node, stream);
  return AllocateDeviceOutputs(*alloc, descs, api, outputs, ptrs);
}

Status GeSession::RegisterExternalAllocator(const void *const stream, AllocatorPtr allocator) const {
  GE_SESSION_CHECK("RegisterExternalAllocator");
  if (stream == nullptr || !allocator) {
    twin::ReportError("RegisterExternalAllocator: stream and allocator must not be null");
    return PARAM_INVALID;
  }
  std::lock_guard<std::mutex> lk(Externals().mu);
  Externals().by_stream[stream] = std::move(allocator);  // process-wide; the last registration wins
  return SUCCESS;
}

Status GeSession::UnregisterExternalAllocator(const void *const stream) const {
  GE_SESSION_CHECK("UnregisterExternalAllocator");
  AllocatorPtr dropped;  // released outside the lock: its destructor may call back into its owner
  {
    std::lock_guard<std::mutex> lk(Externals().mu);
    auto it = Externals().by_stream.find(stream);
    if (it != Externals().by_stream.end()) {
      dropped = std::move(it->second);
      Externals().by_stream.erase(it);
    }
  }
  return SUCCESS;
}
}  // namespace ge
