// Shim: the completion queue through which runtime threads hand finished work to the event loop without
// ever entering Python. Multi-producer (GE model threads, ACL callback threads), single consumer (the loop),
// an eventfd written at most once per batch (the signal state), shared ownership so it outlives late callbacks.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "shim_internal.h"

namespace {
// Who writes the eventfd next. kArmed: the first producer to push (it moves the state to kFired and writes);
// kFired: written (or being written), the consumer clears it and re-arms when it drains; kPolling: nobody, the
// consumer is watching the record count itself (ga_cq_poll), so a run that completes meanwhile costs no system
// call on either side. Producers only move kArmed -> kFired, so the fd holds a write only in kFired.
enum : int { kFired = 0, kArmed = 1, kPolling = 2 };
}  // namespace

struct ga_completion_queue {
  std::mutex mu;
  std::deque<ga_completion> records;
  // records.size(), read without the lock: a consumer polling through the mutex would contend with every push
  std::atomic<size_t> count{0};
  std::atomic<int> signal{kArmed};
  std::atomic<int> refs{1};
  int fd = -1;
};

namespace shim {
namespace {
char *CopyText(const std::string &s) {
  if (s.empty()) return nullptr;
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

void Signal(ga_completion_queue *q) {
  // Only the producer that finds the queue armed writes: one wake-up per batch, however many records.
  int armed = kArmed;
  if (q->signal.compare_exchange_strong(armed, kFired)) {
    const uint64_t one = 1;
    ssize_t n;
    do {
      n = write(q->fd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
  }
}

// Moves up to `capacity` records into `out`.
size_t DrainRecords(ga_completion_queue *queue, ga_completion *out, size_t capacity) {
  if (queue == nullptr || out == nullptr || capacity == 0) return 0;
  // Clear the fd if a producer wrote it and re-arm, then pop: a record pushed after the re-arm signals again, one
  // pushed before it is popped here, so no wake-up is lost. Only the producer that moved kArmed to kFired writes,
  // so re-arming waits until its write has been read: if it has not written yet, its write wakes the reader later
  // (re-armed now, that late write would stay readable while a drain saw kArmed and never read it).
  if (queue->signal.load() == kFired) {
    uint64_t value;
    ssize_t got;
    while ((got = read(queue->fd, &value, sizeof(value))) < 0 && errno == EINTR) {
    }
    if (got == static_cast<ssize_t>(sizeof(value))) queue->signal.store(kArmed);
  }
  size_t n = 0;
  std::lock_guard<std::mutex> lk(queue->mu);
  while (n < capacity && !queue->records.empty()) {
    out[n++] = queue->records.front();
    queue->records.pop_front();
  }
  queue->count.store(queue->records.size());
  Live().pending_completions.fetch_sub(static_cast<int64_t>(n));
  return n;
}

}  // namespace

void CqRetain(ga_completion_queue *q) { q->refs.fetch_add(1, std::memory_order_relaxed); }

void CqRelease(ga_completion_queue *q) {
  if (q->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Last reference: the consumer is gone and no runtime callback can reach this queue any more.
  for (auto &c : q->records) {
    ga_completion_release(&c);
    Live().pending_completions.fetch_sub(1);
  }
  close(q->fd);
  delete q;
  Live().completion_queues.fetch_sub(1);
}

void CqPush(ga_completion_queue *q, uint64_t token, ga_status status, int32_t kind, ga_outputs *outputs,
            const std::string &error) {
  ga_completion c;
  c.token = token;
  c.status = status;
  c.kind = kind;
  c.outputs = outputs;
  c.error_message = CopyText(error);
  c.output_count = -1;
  {
    std::lock_guard<std::mutex> lk(q->mu);
    q->records.push_back(c);
    q->count.store(q->records.size());
  }
  Signal(q);
}
}  // namespace shim

extern "C" {

ga_status ga_cq_create(ga_completion_queue **out) {
  if (out == nullptr) return shim::FailWith("ga_cq_create", shim::kParamInvalid, "out is null");
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    return shim::FailWith("eventfd", ge::FAILED, std::string("eventfd failed: ") + std::strerror(errno));
  }
  auto *q = new (std::nothrow) ga_completion_queue();
  if (q == nullptr) {
    close(fd);
    return shim::FailWith("ga_cq_create", shim::kMemallocFailed, "out of memory");
  }
  q->fd = fd;
  shim::Live().completion_queues.fetch_add(1);
  *out = q;
  return 0;
}

int ga_cq_fd(const ga_completion_queue *queue) { return queue == nullptr ? -1 : queue->fd; }

size_t ga_cq_drain_outputs(ga_completion_queue *queue, ga_completion *out, size_t capacity, ga_output_info *infos,
                           size_t info_capacity) {
  const size_t n = shim::DrainRecords(queue, out, capacity);
  size_t used = 0;
  for (size_t i = 0; i < n; ++i) {
    ga_completion &c = out[i];
    if (c.outputs == nullptr) {
      c.output_count = -1;
      continue;
    }
    const size_t k = c.outputs->items.size();
    if (infos == nullptr || k > info_capacity - used || k > INT32_MAX) {
      c.output_count = -2;
      continue;
    }
    ga_outputs_take_all(c.outputs, infos + used, k);  // destroys the list
    c.outputs = nullptr;
    c.output_count = static_cast<int32_t>(k);
    used += k;
  }
  return n;
}

size_t ga_cq_pending(const ga_completion_queue *queue) {
  if (queue == nullptr) return 0;
  return queue->count.load();
}

void ga_cq_signal(ga_completion_queue *queue) {
  if (queue != nullptr) shim::Signal(queue);
}

size_t ga_cq_poll(ga_completion_queue *queue, uint64_t budget_ns) {
  if (queue == nullptr) return 0;
  // Producers stop writing the fd while this watches (unless one already has: then records wait already).
  int armed = kArmed;
  queue->signal.compare_exchange_strong(armed, kPolling);
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns);
  size_t n = queue->count.load();
  for (unsigned i = 1; n == 0; ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
    if ((i & 31) == 0 && std::chrono::steady_clock::now() >= until) break;
    n = queue->count.load();
  }
  // Re-arm, then look once more: a record pushed between the last look and the re-arm did not write the fd
  // (sequentially consistent: either its producer sees kArmed and writes, or this load sees its record).
  int polling = kPolling;
  queue->signal.compare_exchange_strong(polling, kArmed);
  return n != 0 ? n : queue->count.load();
}

void ga_cq_destroy(ga_completion_queue *queue) {
  if (queue != nullptr) shim::CqRelease(queue);
}

void ga_completion_release(ga_completion *completion) {
  if (completion == nullptr) return;
  std::free(completion->error_message);
  completion->error_message = nullptr;
  ga_outputs_destroy(completion->outputs);
  completion->outputs = nullptr;
}

}  // extern "C"
