// GE twin: process-wide state (GEInitializeV2 / GEFinalizeV2), the per-thread error context read and
// cleared by GEGetErrorMsgV3, the session registry that finalisation walks, and the worker queue.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <set>
#include <vector>

#include "acl/acl_base.h"
#include "ge_internal.h"
#include "../onnx/intra_op.h"

namespace ge {
// Defined in ge_session.cc: stops a session's threads and marks it unusable.
void FinalizeSessionImpl(SessionImpl *s);
// Defined in ge_output_memory.cc: frees the large host output blocks kept for reuse.
void ReleaseKeptHostOutputBlocks();
}  // namespace ge

namespace twin {
namespace {
thread_local uint64_t t_work_stream = 0;  // 0: the thread's own

struct Messages {
  std::string error, warning;
};
// Error and warning text by work stream. `pending` counts streams with text, so reading an empty context (the
// shim clears before most calls) costs no lock.
struct MessageStore {
  std::mutex mu;
  std::map<uint64_t, Messages> by_stream;
  std::atomic<int64_t> pending{0};
};
MessageStore &Store() {
  static MessageStore *m = new MessageStore();  // leaked: threads may report during exit
  return *m;
}

void Append(std::string Messages::*field, const std::string &msg) {
  MessageStore &m = Store();
  std::lock_guard<std::mutex> lk(m.mu);
  auto [it, fresh] = m.by_stream.try_emplace(CurrentWorkStream());
  if (fresh) m.pending.fetch_add(1);
  std::string &text = it->second.*field;
  if (!text.empty()) text += "\n";
  text += msg;
}

std::string Take(std::string Messages::*field) {
  MessageStore &m = Store();
  if (m.pending.load(std::memory_order_acquire) == 0) return std::string();
  std::lock_guard<std::mutex> lk(m.mu);
  auto it = m.by_stream.find(CurrentWorkStream());
  if (it == m.by_stream.end()) return std::string();
  std::string text;
  text.swap(it->second.*field);
  if (it->second.error.empty() && it->second.warning.empty()) {
    m.by_stream.erase(it);
    m.pending.fetch_sub(1);
  }
  return text;
}

// GE's error manager shows the first message, then the others under a traceback header.
std::string WithTraceback(const std::string &text) {
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return text;
  std::string out = text.substr(0, nl + 1) + "TraceBack (most recent call last):\n";
  size_t start = nl + 1;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += "        " + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

struct GlobalState {
  std::mutex mu;
  bool initialized = false;
  std::map<std::string, std::string> options;
  std::set<ge::SessionImpl *> sessions;
};
// Leaked on purpose: sessions and threads may still touch it during static destruction at exit.
GlobalState &Global() {
  static GlobalState *g = new GlobalState();
  return *g;
}
std::atomic<bool> g_initialized{false};
}  // namespace

namespace {
// The thread's own stream id, computed once per thread: getpid and gettid are system calls, and RunGraphAsync
// reads the id on every submit. A forked child's thread starts over (its pid and tid differ).
thread_local uint64_t t_own_stream = 0;
void ForgetOwnStreamInChild() { t_own_stream = 0; }
}  // namespace

uint64_t CurrentWorkStream() {
  if (t_work_stream != 0) return t_work_stream;
  if (t_own_stream == 0) {
    static const int at_fork = pthread_atfork(nullptr, nullptr, ForgetOwnStreamInChild);
    (void)at_fork;
    t_own_stream = static_cast<uint64_t>(getpid()) * 100000U + static_cast<uint64_t>(gettid());
  }
  return t_own_stream;
}
WorkStreamScope::WorkStreamScope(uint64_t work_stream) : saved_(t_work_stream) { t_work_stream = work_stream; }
WorkStreamScope::~WorkStreamScope() { t_work_stream = saved_; }

void ReportError(const std::string &msg) { Append(&Messages::error, msg); }
void ReportWarning(const std::string &msg) { Append(&Messages::warning, msg); }
std::string E10062(const std::string &what, const std::string &why) {
  char when[64];
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  const size_t n = std::strftime(when, sizeof(when), "%Y-%m-%d-%H:%M:%S", &tm);
  std::snprintf(when + n, sizeof(when) - n, ".%03d.%03d", static_cast<int>(us / 1000), static_cast<int>(us % 1000));
  return "[PID: " + std::to_string(getpid()) + "] " + when + " Invalid_Argument_API_Call_Sequence(E10062): Failed to " +
         what + ". Reason: " + why + ".";
}
bool GeInitialized() { return g_initialized.load(std::memory_order_acquire); }

void SessionRegistry::Add(ge::SessionImpl *s) {
  std::lock_guard<std::mutex> lk(Global().mu);
  Global().sessions.insert(s);
}
void SessionRegistry::Remove(ge::SessionImpl *s) {
  std::lock_guard<std::mutex> lk(Global().mu);
  Global().sessions.erase(s);
}
void SessionRegistry::FinalizeAll() {
  std::vector<ge::SessionImpl *> all;
  {
    std::lock_guard<std::mutex> lk(Global().mu);
    all.assign(Global().sessions.begin(), Global().sessions.end());
  }
  // Sessions stay registered (the user still owns them) but become unusable.
  for (ge::SessionImpl *s : all) ge::FinalizeSessionImpl(s);
}

namespace {
int SpinBudgetUs() {
  static const int us = [] {
    const char *env = std::getenv("GEASYNC_TWIN_SPIN_US");
    if (env == nullptr || *env == '\0') return 250;
    char *end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 0) return 250;
    return static_cast<int>(std::min<long>(v, 100000));
  }();
  return us;
}
// One step of a spin-wait: lets the sibling hardware thread run (x86), else the scheduler.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

std::atomic<int> g_spinners{0};
// Leaves a core to the threads that submit: on one core, a spinning worker would only delay them.
bool TakeSpinSlot() {
  static const int max_spinners = twin::onnx::UsableCores() - 1;
  int now = g_spinners.load(std::memory_order_relaxed);
  while (now < max_spinners) {
    if (g_spinners.compare_exchange_weak(now, now + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}
void ReleaseSpinSlot() { g_spinners.fetch_sub(1, std::memory_order_relaxed); }
}  // namespace

struct WorkQueue::State {
  std::string name;
  size_t capacity = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::condition_variable space_cv;
  std::deque<Job> jobs;
  std::atomic<size_t> in_hand{0};  // taken by the worker, not started yet (still count as queued)
  std::atomic<bool> stopped{false};
  bool worker_waiting = false;
  std::atomic<size_t> queued{0};  // jobs.size(), readable without the lock (the worker's spin)
  std::atomic<size_t> producers_waiting{0};
  std::thread thread;
  int spin_misses = 0, spin_skip = 0;  // the worker's own (SpinForJobs)

  size_t Queued() const { return jobs.size() + in_hand.load(); }

  // Before sleeping, the worker watches the queue for a while: the next job of a lone client (one request in
  // flight, resubmitted as soon as the last completed) or of a burst then finds it awake, with no futex wake-up.
  // Waking a sleeping thread costs the submitter far more than a tiny job (over 100 us on a VM whose idle vCPU
  // has halted). Bounded three ways: $GEASYNC_TWIN_SPIN_US per idle period (default 250, 0 = never), at most
  // cores - 1 workers spinning at once in the process, and a worker whose spins keep missing stops spinning for
  // a while (sporadic traffic). Unobservable: only when the worker wakes changes.
  void SpinForJobs() {
    if (spin_skip > 0) {
      --spin_skip;
      return;
    }
    const int budget = SpinBudgetUs();
    if (budget <= 0 || !TakeSpinSlot()) return;
    const auto start = std::chrono::steady_clock::now(), until = start + std::chrono::microseconds(budget);
    unsigned n = 0;
    bool hit = true;
    while (queued.load(std::memory_order_relaxed) == 0 && !stopped.load(std::memory_order_relaxed)) {
      CpuRelax();
      if ((++n & 63) == 0 && std::chrono::steady_clock::now() >= until) {
        hit = false;
        break;
      }
    }
    ReleaseSpinSlot();
    // (the intra-op pool's idle-core gate counts this core as idle while it spun)
    twin::onnx::NoteSpin(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                             .count());
    spin_misses = hit ? 0 : spin_misses + 1;
    if (spin_misses >= 8) {
      spin_misses = 0;
      spin_skip = 64;
    }
  }

  // The worker takes every queued job at once (one lock round-trip per batch, not per job: the submitting thread
  // and the worker contend less) and runs them in order, unless the queue is stopped meanwhile.
  void Loop() {
    // Named like GE's threads, so a callback can tell where it runs (pthread names are at most 15 chars).
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    std::deque<Job> batch;
    for (;;) {
      SpinForJobs();
      {
        // After a spin that saw a job, its submitter may still be inside Push: wait for it with a few pauses
        // rather than sleeping on the mutex (a futex round trip for both threads).
        std::unique_lock<std::mutex> l(mu, std::try_to_lock);
        for (int i = 0; i < 256 && !l.owns_lock(); ++i) {
          CpuRelax();
          l.try_lock();
        }
        if (!l.owns_lock()) l.lock();
        worker_waiting = true;
        cv.wait(l, [&] { return stopped.load() || !jobs.empty(); });
        worker_waiting = false;
        if (stopped.load()) return;
        batch.swap(jobs);
        queued.store(0, std::memory_order_relaxed);
        in_hand.store(batch.size());
      }
      while (!batch.empty()) {
        if (stopped.load()) {
          batch.clear();  // queued jobs are dropped without running, as GE drops them
          in_hand.store(0);
          return;
        }
        Job next = std::move(batch.front());
        batch.pop_front();
        in_hand.fetch_sub(1);
        if (producers_waiting.load() != 0) {
          std::lock_guard<std::mutex> l(mu);
          space_cv.notify_all();
        }
        next.run(next.arg);
      }
    }
  }
};

WorkQueue::WorkQueue(std::string name, size_t capacity) : st_(std::make_shared<State>()) {
  st_->name = std::move(name);
  st_->capacity = capacity;
}

WorkQueue::PushResult WorkQueue::Push(Job job, bool block_when_full) {
  std::shared_ptr<State> st = st_;
  std::unique_lock<std::mutex> lk(st->mu);
  if (st->stopped.load()) return PushResult::kStopped;
  if (st->capacity != 0 && st->Queued() >= st->capacity) {
    if (!block_when_full) return PushResult::kFull;
    ++st->producers_waiting;
    st->space_cv.wait(lk, [&] { return st->stopped.load() || st->Queued() < st->capacity; });
    --st->producers_waiting;
    if (st->stopped.load()) return PushResult::kStopped;
  }
  st->jobs.push_back(std::move(job));
  st->queued.store(st->jobs.size(), std::memory_order_relaxed);
  if (!st->thread.joinable()) {
    // Started lazily: most queues (one per loaded model) never see a job.
    st->thread = std::thread([st] { st->Loop(); });
  }
  const bool wake = st->worker_waiting;  // a busy worker takes the job with its next batch
  lk.unlock();
  if (wake) st->cv.notify_one();  // after unlocking: woken under the lock, the worker would block on it at once
  return PushResult::kOk;
}

void WorkQueue::Stop() {
  std::shared_ptr<State> st = st_;
  std::deque<Job> dropped;
  std::thread worker;
  {
    std::lock_guard<std::mutex> lk(st->mu);
    st->stopped.store(true);
    dropped.swap(st->jobs);
    st->queued.store(0, std::memory_order_relaxed);
    worker = std::move(st->thread);
    st->cv.notify_all();
    st->space_cv.notify_all();
  }
  if (worker.joinable()) {
    if (worker.get_id() == std::this_thread::get_id()) {
      worker.detach();  // the running job owns the last reference to us; the loop exits after it
    } else {
      worker.join();
    }
  }
  // Dropped jobs are destroyed last, outside the lock, without being run (GE calls no callback for them);
  // their destructors may release the owner of this queue, so nothing touches `this` after this point.
  dropped.clear();
}

size_t WorkQueue::Queued() {
  std::lock_guard<std::mutex> lk(st_->mu);
  return st_->Queued();
}

}  // namespace twin

namespace ge {
Status GEInitializeV2(const std::map<AscendString, AscendString> &options) {
  auto &g = twin::Global();
  std::lock_guard<std::mutex> lk(g.mu);
  std::map<std::string, std::string> opts;
  for (const auto &kv : options) opts[kv.first.GetString()] = kv.second.GetString();
  if (g.initialized) {
    if (opts != g.options) twin::ReportWarning("GEInitializeV2: GE is already initialized; the new options are ignored");
    return SUCCESS;
  }
  auto it = opts.find("ge.exec.deviceId");
  if (it != opts.end()) {
    char *end = nullptr;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || v < -1 || v > 63) {
      twin::ReportError(twin::E10062("call GEInitializeV2", "option ge.exec.deviceId='" + it->second +
                                                                  "' is not a device id"));
      return PARAM_INVALID;
    }
  }
  const aclError acl = aclInit(nullptr);
  if (acl != ACL_SUCCESS && acl != ACL_ERROR_REPEAT_INITIALIZE) {
    twin::ReportError("GEInitializeV2: aclInit failed with " + std::to_string(acl));
    return FAILED;
  }
  g.options = std::move(opts);
  g.initialized = true;
  twin::g_initialized.store(true, std::memory_order_release);
  return SUCCESS;
}

Status GEFinalizeV2() {
  {
    std::lock_guard<std::mutex> lk(twin::Global().mu);
    if (!twin::Global().initialized) return SUCCESS;
    twin::Global().initialized = false;
    twin::g_initialized.store(false, std::memory_order_release);
  }
  twin::SessionRegistry::FinalizeAll();
  ReleaseKeptHostOutputBlocks();
  return SUCCESS;
}

AscendString GEGetErrorMsgV3() {
  const std::string text = twin::Take(&twin::Messages::error);
  if (text.empty()) return AscendString("");
  return AscendString(twin::WithTraceback(text).c_str());
}

AscendString GEGetWarningMsgV3() { return AscendString(twin::Take(&twin::Messages::warning).c_str()); }
}  // namespace ge
