// Intra-op parallelism: one process-wide pool of helper threads that kernels may split their work over.
//
// A region [0, n) is cut into chunks of `grain` items (the last one shorter): the cut depends only on n and grain,
// never on how many threads take part, and each chunk is computed by the same code whoever runs it, so results are
// bit-identical whatever the thread count. The calling thread always works too: chunks are claimed from an atomic
// counter, helpers claim chunks only while they are free, and the caller waits only for chunks a helper already
// claimed (never for a helper to wake up).
//
// Helpers (min(UsableCores(), $GEASYNC_INTRA_OP_THREADS) - 1, default UsableCores() - 1; 1 turns the pool off) are
// native threads named "ge-intra-op" that never enter Python. A region may use only the cores the process left idle
// over the last 50 ms (its CPU time apart from the helpers': model threads, the event loop's thread, the
// user's) and never more than the cores no model run holds (RunScope counts them; a run for an async submitter holds
// one more, AsyncRunScope), so a busy service gets no helper work at all. Nested regions, regions while another
// region holds the pool, and regions in a forked child run serially.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>

namespace twin {
namespace onnx {

// Multiply-adds below which a GEMM block is not worth a helper: ~25 us of one core. A helper woken from sleep
// arrives tens of microseconds later, and smaller blocks (~10 us) made a transformer at batch 1 slower.
constexpr int64_t kMinChunkMacs = int64_t(1) << 20;

// Regions of fewer chunks run inline, as one call: with two or three, a helper woken from sleep mostly arrived
// after the caller had claimed the last chunk (a transformer at batch 1 got 5-25% slower).
constexpr int64_t kMinChunks = 4;

// Multiply-adds from which a block is worth a helper that is spinning for work right now (it joins within a
// microsecond): ~2 us of one core. Only for regions whose results do not depend on the cut (WhenHelperSpins).
constexpr int64_t kHotChunkMacs = int64_t(1) << 16;

// The cores this process may run on: the online CPUs, fewer if its affinity mask (taskset, a cpuset) or its
// cgroup's CPU quota (a container's CPU limit, rounded up) says so. Fixed on first use.
int UsableCores();

// Threads (the caller included) one region may use: $GEASYNC_INTRA_OP_THREADS clamped to [1, cores], default (and
// for values that are not a positive integer) UsableCores(). Fixed on first use.
int IntraOpThreads();

namespace intra_op_detail {
using ChunkFn = void (*)(void *ctx, int64_t begin, int64_t end);
// Runs every chunk, on the caller and any free helper; returns when all are done (rethrows a chunk's exception).
// any_cut: fn's results do not depend on where [0, n) is cut, so a region no helper may join runs as one call.
void Run(int64_t n, int64_t grain, ChunkFn fn, void *ctx, bool any_cut);

// Whether a helper spins for work now; if none does but the gate would allow one, wakes one so that it spins for
// the next region (without waiting for it).
bool HelperSpinsOrWake();

// Run() for a callable: n > 0, grain >= 1.
template <class F>
inline void RunRegion(int64_t n, int64_t grain, F &fn, bool any_cut) {
  using Fn = std::remove_reference_t<F>;
  Run(
      n, grain, [](void *ctx, int64_t b, int64_t e) { (*static_cast<Fn *>(ctx))(b, e); },
      const_cast<void *>(static_cast<const void *>(&fn)), any_cut);
}

template <class F>
inline void ParallelRegion(int64_t n, int64_t grain, F &&fn, bool any_cut) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain * (kMinChunks - 1)) {  // the small-work case: no lock, no allocation, no atomic
    fn(int64_t(0), n);
    return;
  }
  RunRegion(n, grain, fn, any_cut);
}

}  // namespace intra_op_detail

// fn(begin, end) over [0, n) in chunks of `grain` (grain < 1 counts as 1), whoever runs them: for work whose
// results depend on the cut (a GEMM library call per block). A region of fewer than kMinChunks chunks runs inline.
template <class F>
inline void ParallelFor(int64_t n, int64_t grain, F &&fn) {
  intra_op_detail::ParallelRegion(n, grain, std::forward<F>(fn), false);
}

// The same for work whose results do not depend on the cut (element-wise loops over blocks of whole vectors):
// without a helper to share it, it runs as fn(0, n), one call.
template <class F>
inline void ParallelForAnyCut(int64_t n, int64_t grain, F &&fn) {
  intra_op_detail::ParallelRegion(n, grain, std::forward<F>(fn), true);
}

// ParallelForAnyCut for work too small to wake a helper for (chunks of `grain` items, each of at least
// kHotChunkMacs): shared only with a helper that is already spinning (a model's kernels follow each other within
// microseconds, and helpers spin a while after each region), else one call, fn(0, n). A region that finds no helper
// spinning wakes one for the next.
template <class F>
inline void ParallelForWhenHelperSpins(int64_t n, int64_t grain, F &&fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain || !intra_op_detail::HelperSpinsOrWake()) {
    fn(int64_t(0), n);
    return;
  }
  intra_op_detail::RunRegion(n, grain, fn, true);
}

// Private scratch for a region's chunks. At most IntraOpThreads() chunks of a region run at once (the caller and
// the helpers; one region holds the pool at a time), so a kernel sizes SlotCount(chunks) slots in its scratch and
// each chunk holds a free one while it runs, on whichever thread runs it (a helper may run several chunks in turn).
class ScratchSlots {
 public:
  // Slots for a region of `chunks` chunks: one when it runs inline (fewer than kMinChunks chunks).
  static int SlotCount(int64_t chunks) {
    if (chunks < kMinChunks) return 1;
    return static_cast<int>(std::min<int64_t>({chunks, int64_t(IntraOpThreads()), int64_t(32)}));
  }
  explicit ScratchSlots(int slots) : slots_(slots) {}
  // Holds a slot for its lifetime.
  class Hold {
   public:
    explicit Hold(ScratchSlots &s) : s_(s), i_(s.Claim()) {}
    ~Hold() { s_.used_.fetch_and(~(uint32_t(1) << i_), std::memory_order_release); }
    Hold(const Hold &) = delete;
    Hold &operator=(const Hold &) = delete;
    int index() const { return i_; }

   private:
    ScratchSlots &s_;
    int i_;
  };

 private:
  int Claim() {
    for (;;) {  // a free slot exists (see above); the loop only retries lost races
      uint32_t u = used_.load(std::memory_order_relaxed);
      for (int i = 0; i < slots_; ++i) {
        const uint32_t bit = uint32_t(1) << i;
        if (u & bit) continue;
        if (used_.compare_exchange_weak(u, u | bit, std::memory_order_acquire)) return i;
        break;
      }
      std::this_thread::yield();
    }
  }
  std::atomic<uint32_t> used_{0};
  int slots_;
};

// Chunks of `grain` items over n items such that a chunk has at least kMinChunkMacs multiply-adds.
inline int64_t GrainForMacs(int64_t macs_per_item) {
  return std::max<int64_t>(1, (kMinChunkMacs + macs_per_item - 1) / std::max<int64_t>(macs_per_item, 1));
}
inline int64_t ChunksOf(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// Marks a run for an asynchronous submitter (RunGraphAsync): whoever submitted it may be busy meanwhile (an event
// loop serving other requests), so the gate counts a core for it besides the run's own. On two cores an async run
// gets no helper: a busy event loop lost a fifth of its throughput to them, and the gate cannot see from here
// whether the loop is busy while the run executes.
class AsyncRunScope {
 public:
  AsyncRunScope();
  ~AsyncRunScope();
  AsyncRunScope(const AsyncRunScope &) = delete;
  AsyncRunScope &operator=(const AsyncRunScope &) = delete;
};

// Time a thread of the process spent spinning for work (a model thread watching its queue): the idle-core gate
// counts it as idle, like the helpers' own time.
void NoteSpin(int64_t ns);

// Marks a model run executing kernels (the idle-core gate above). Nested scopes on one thread (a control-flow op's
// subgraph) count once.
class RunScope {
 public:
  RunScope();
  ~RunScope();
  RunScope(const RunScope &) = delete;
  RunScope &operator=(const RunScope &) = delete;

 private:
  bool counted_;
};

}  // namespace onnx
}  // namespace twin
