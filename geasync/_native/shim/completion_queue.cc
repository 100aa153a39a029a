// Shim: the completion queue through which runtime threads hand finished work to the event loop without
// ever entering Python. Multi-producer (GE model threads, ACL callback threads), single consumer (the loop),
// an eventfd written at most once per batch (the "armed" flag), shared ownership so it outlives late callbacks.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "shim_internal.h"

struct ga_completion_queue {
  std::mutex mu;
  std::deque<ga_completion> records;
  std::atomic<bool> armed{true};
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
  if (q->armed.exchange(false, std::memory_order_acq_rel)) {
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
  // Clear the fd, then re-arm, then pop: a record pushed after the pop finds the queue armed and signals,
  // a record pushed before it is popped here, so no wake-up is lost.
  uint64_t value;
  while (read(queue->fd, &value, sizeof(value)) < 0 && errno == EINTR) {
  }
  queue->armed.store(true, std::memory_order_release);
  size_t n = 0;
  std::lock_guard<std::mutex> lk(queue->mu);
  while (n < capacity && !queue->records.empty()) {
    out[n++] = queue->records.front();
    queue->records.pop_front();
  }
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
  auto *q = const_cast<ga_completion_queue *>(queue);
  std::lock_guard<std::mutex> lk(q->mu);
  return q->records.size();
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
