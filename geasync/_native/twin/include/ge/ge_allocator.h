// Twin of GE's ge/ge_allocator.h: external allocators and the refcounted MemBlock they hand out
// (hicann/metadef inc/external/ge/ge_allocator.h).
#ifndef GEASYNC_TWIN_GE_GE_ALLOCATOR_H_
#define GEASYNC_TWIN_GE_GE_ALLOCATOR_H_

#include <cstddef>
#include <memory>

namespace ge {
class MemBlock;

class Allocator {
 public:
  Allocator() = default;
  virtual ~Allocator() = default;
  Allocator(const Allocator &) = delete;
  Allocator &operator=(const Allocator &) = delete;
  virtual MemBlock *Malloc(size_t size) = 0;
  virtual void Free(MemBlock *block) = 0;
  virtual MemBlock *MallocAdvise(size_t size, void *addr) {
    (void)addr;
    return Malloc(size);
  }
};

class MemBlock {
 public:
  MemBlock(Allocator &allocator, void *addr, size_t block_size)
      : allocator_(allocator), addr_(addr), block_size_(block_size) {}
  virtual ~MemBlock() = default;
  const void *GetAddr() const { return addr_; }
  void *GetAddr() { return addr_; }
  size_t GetSize() const { return block_size_; }
  void SetSize(size_t size) { block_size_ = size; }
  // Drops one reference; the last one returns the block to its allocator.
  void Free() {
    if (SubCount() == 0U) allocator_.Free(this);
  }
  size_t AddCount() { return ++count_; }
  size_t SubCount() { return count_ == 0U ? 0U : --count_; }
  size_t GetCount() const { return count_; }

 private:
  Allocator &allocator_;
  void *addr_;
  size_t block_size_;
  size_t count_ = 1U;
};

using AllocatorPtr = std::shared_ptr<Allocator>;
}  // namespace ge

#endif  // GEASYNC_TWIN_GE_GE_ALLOCATOR_H_
