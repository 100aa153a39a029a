// The intra-op pool (intra_op.h): helper threads, regions and the idle-core gate.
#include "intra_op.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace twin {
namespace onnx {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// The CPU quota of the process's cgroup in CPUs, rounded up (0: none). cgroup v2's cpu.max ("max 100000" or
// "200000 100000"), else v1's cfs_quota_us / cfs_period_us.
int CgroupCpus() {
  auto read = [](const std::string &path) {
    std::ifstream f(path);
    std::string text;
    std::getline(f, text);
    return text;
  };
  std::string dir = "/sys/fs/cgroup";
  {
    std::ifstream cg("/proc/self/cgroup");
    for (std::string line; std::getline(cg, line);) {
      if (line.rfind("0::", 0) == 0) dir += line.substr(3);  // v2: the process's own cgroup
    }
  }
  for (const std::string &path : {dir + "/cpu.max", std::string("/sys/fs/cgroup/cpu.max")}) {
    long long quota = 0, period = 0;
    if (std::sscanf(read(path).c_str(), "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0) {
      return static_cast<int>((quota + period - 1) / period);
    }
  }
  const long long quota = std::atoll(read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").c_str());
  const long long period = std::atoll(read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").c_str());
  return quota > 0 && period > 0 ? static_cast<int>((quota + period - 1) / period) : 0;
}

// UsableCores(): helpers beyond them would only take turns with the caller.
int ComputeCores() {
  int c = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) c = std::min(c, CPU_COUNT(&set));
  if (const int quota = CgroupCpus(); quota > 0) c = std::min(c, quota);
  return c < 1 ? 1 : c;
}

int Cores() {
  static const int c = ComputeCores();
  return c;
}

int ComputeIntraOpThreads() {
  const int cores = Cores();
  int n = cores;
  if (const char *env = std::getenv("GEASYNC_INTRA_OP_THREADS")) {
    char *end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1) n = static_cast<int>(std::min<long>(v, cores));
  }
  return n;
}

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Time threads spent spinning for work, process-wide (NoteSpin).
std::atomic<int64_t> g_spin_ns{0};

// Model runs executing kernels right now, process-wide (RunScope), and those of them for async submitters
// (AsyncRunScope).
std::atomic<int> g_busy_runs{0};
std::atomic<int> g_async_runs{0};
thread_local int t_run_depth = 0;
thread_local bool t_in_region = false;  // nested regions run serially

struct Region {
  intra_op_detail::ChunkFn fn;
  void *ctx;
  int64_t n, grain, chunks;
  int cap = 0;     // helpers that may join (the idle-core gate's answer when the region was published)
  int joined = 0;  // helpers that joined; cap and joined are guarded by the pool's mutex
  std::atomic<int64_t> next{0};
  std::atomic<int> active{0};  // helpers that joined and have not left yet
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // written by the first failing thread only (failed.exchange)

  // Claims and runs chunks until none are left.
  void Work() {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t b = c * grain;
      try {
        fn(ctx, b, std::min(n, b + grain));
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  }
};

// Helpers spin this long after their last region before they sleep: kernels of one model follow each other within
// microseconds, and a futex wake-up costs about as much as a small chunk.
constexpr auto kSpin = std::chrono::microseconds(50);

class Pool {
 public:
  static Pool &Get() {
    static Pool *pool = new Pool();  // never destroyed: helpers stay parked on its condition variable at exit
    return *pool;
  }

  int helpers() const { return helpers_; }
  pid_t pid() const { return pid_; }

  // CPU time the helpers have used, as they last published it (after each region, and before they sleep).
  int64_t HelperCpuNs() const {
    int64_t sum = 0;
    for (int i = 0; i < helpers_; ++i) sum += cpu_ns_[i].load(std::memory_order_relaxed);
    return sum;
  }

  // Offers r (r->cap helpers at most) to the helpers; false if another region holds the pool (the caller then
  // works alone).
  bool Publish(Region *r) {
    StartOnce();
    bool wake;
    {
      std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
      if (!lk.owns_lock() || region_) return false;
      region_ = r;
      gen_.store(gen_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    if (wake) cv_.notify_all();
    return true;
  }

  // A helper is in its spin loop (not asleep, not working); else wakes one sleeping helper, which spins for kSpin
  // (the next small region needs one; the others sleep on until a region is published).
  bool SpinningOrWake() {
    if (spinning_.load(std::memory_order_relaxed) > 0) return true;
    StartOnce();
    {
      std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
      if (!lk.owns_lock() || region_ || sleepers_ == 0) return false;
      gen_.store(gen_.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // no region: it spins
    }
    cv_.notify_one();
    return false;
  }

  // After this no helper joins r; the ones that joined finish the chunks they claimed, and their writes are
  // visible to the caller when this returns (the release / acquire pair on r->active).
  void Retract(Region *r) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      region_ = nullptr;
    }
    while (r->active.load(std::memory_order_acquire) > 0) CpuRelax();
  }

 private:
  Pool()
      : helpers_(IntraOpThreads() - 1),
        pid_(getpid()),
        cpu_ns_(new std::atomic<int64_t>[static_cast<size_t>(std::max(helpers_, 1))]()) {}

  void StartOnce() {
    std::call_once(started_, [this] {
      // Helpers block every signal: the interpreter's handlers belong to its own threads.
      sigset_t all, old;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      for (int i = 0; i < helpers_; ++i) {
        try {
          std::thread t(&Pool::HelperLoop, this, i);
          // named here, not by the thread itself: /proc shows the helper as soon as the region that started it runs
          pthread_setname_np(t.native_handle(), "ge-intra-op");
          t.detach();
        } catch (const std::system_error &) {
          break;  // fewer helpers: the caller does the rest
        }
      }
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
    });
  }

  void PublishCpu(int slot) { cpu_ns_[slot].store(ClockNs(CLOCK_THREAD_CPUTIME_ID), std::memory_order_relaxed); }

  void HelperLoop(int slot) {
    t_in_region = true;  // a kernel a helper runs never opens a region of its own
    uint64_t seen = 0;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      spinning_.fetch_add(1, std::memory_order_relaxed);
      for (int i = 0; gen_.load(std::memory_order_acquire) == seen; ++i) {
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
        CpuRelax();
      }
      spinning_.fetch_sub(1, std::memory_order_relaxed);
      Region *r;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (gen_.load(std::memory_order_relaxed) == seen) {
          lk.unlock();
          PublishCpu(slot);  // the spinning counts too
          lk.lock();
          ++sleepers_;
          cv_.wait(lk, [&] { return gen_.load(std::memory_order_relaxed) != seen; });
          --sleepers_;
        }
        seen = gen_.load(std::memory_order_relaxed);
        r = region_;
        if (!r || r->joined >= r->cap) continue;  // retracted before this helper got there, or enough joined
        ++r->joined;
        r->active.fetch_add(1, std::memory_order_relaxed);
      }
      r->Work();
      r->active.fetch_sub(1, std::memory_order_release);  // r may be gone from here on
      PublishCpu(slot);
    }
  }

  const int helpers_;
  const pid_t pid_;
  const std::unique_ptr<std::atomic<int64_t>[]> cpu_ns_;  // per helper: its thread's CPU time (PublishCpu)
  std::once_flag started_;
  std::mutex mu_;
  std::condition_variable cv_;
  Region *region_ = nullptr;      // guarded by mu_
  std::atomic<uint64_t> gen_{0};  // written under mu_; read without it while spinning
  int sleepers_ = 0;              // guarded by mu_
  std::atomic<int> spinning_{0};  // helpers in their spin loop
};

// The idle-core gate. Every 50 ms a region's caller measures the CPU time the process used over the
// last window, apart from the helpers' own and from spinning for work (NoteSpin): model threads, the event loop's
// thread, the user's threads. The cores it left idle are the helpers a region may use. Counting model runs alone
// is not enough: a service running one graph also keeps its event loop's thread busy, and a helper would take that
// thread's core.
class IdleGate {
 public:
  int Allowed(int helpers) {
    const int64_t now = ClockNs(CLOCK_MONOTONIC);
    if (now - last_wall_.load(std::memory_order_relaxed) >= kWindowNs && mu_.try_lock()) {
      Sample(now, helpers);
      mu_.unlock();
    }
    const int by_runs =
        Cores() - g_busy_runs.load(std::memory_order_relaxed) - g_async_runs.load(std::memory_order_relaxed);
    return std::max(0, std::min(allowed_.load(std::memory_order_relaxed), by_runs));
  }

 private:
  // The kernel adds a running thread's CPU time to the process's clock lazily (at scheduler ticks, up to 4 ms
  // late): over 2 ms windows two threads read as 2.7 cores. Over 50 ms the lag is a few percent of a core.
  static constexpr int64_t kWindowNs = 50000000;

  void Sample(int64_t now, int helpers) {
    const int64_t proc = ClockNs(CLOCK_PROCESS_CPUTIME_ID);
    const int64_t help = Pool::Get().HelperCpuNs() + g_spin_ns.load(std::memory_order_relaxed);
    const int64_t wall = now - last_wall_.load(std::memory_order_relaxed);
    const double others = double((proc - last_proc_) - (help - last_help_)) / double(std::max<int64_t>(wall, 1));
    // round the idle cores down unless a core is nearly free (0.6 of one): a half-busy core is not worth a helper
    const int idle = static_cast<int>(double(Cores()) - others + 0.4);
    allowed_.store(std::max(0, std::min(idle, helpers)), std::memory_order_relaxed);
    last_proc_ = proc;
    last_help_ = help;
    last_wall_.store(now, std::memory_order_relaxed);
  }

  std::mutex mu_;  // one sampler at a time; the others use the last answer
  std::atomic<int64_t> last_wall_{0};
  std::atomic<int> allowed_{0};
  int64_t last_proc_ = 0, last_help_ = 0;  // guarded by mu_
};

IdleGate &Gate() {
  static IdleGate *gate = new IdleGate();
  return *gate;
}

}  // namespace

int UsableCores() { return Cores(); }

int IntraOpThreads() {
  static const int n = ComputeIntraOpThreads();
  return n;
}

namespace intra_op_detail {

void Run(int64_t n, int64_t grain, ChunkFn fn, void *ctx, bool any_cut) {
  // Helpers only take work while a core is idle; a forked child (its pool's threads did not survive the fork) and
  // a nested region work alone.
  int cap = 0;
  if (!t_in_region && IntraOpThreads() > 1 && Pool::Get().helpers() > 0 && Pool::Get().pid() == getpid()) {
    cap = Gate().Allowed(Pool::Get().helpers());
  }
  if (cap == 0 && any_cut) {  // the cut does not change the results: one call, no chunk overhead
    fn(ctx, 0, n);
    return;
  }
  Region r;
  r.fn = fn;
  r.ctx = ctx;
  r.n = n;
  r.grain = grain;
  r.chunks = (n - 1) / grain + 1;
  r.cap = cap;
  if (cap == 0 || !Pool::Get().Publish(&r)) {
    const bool outer = t_in_region;
    t_in_region = true;
    r.Work();
    t_in_region = outer;
  } else {
    t_in_region = true;
    r.Work();
    t_in_region = false;
    Pool::Get().Retract(&r);
  }
  if (r.failed.load(std::memory_order_acquire)) std::rethrow_exception(r.error);
}

bool HelperSpinsOrWake() {
  if (t_in_region || IntraOpThreads() < 2 || Pool::Get().helpers() == 0 || Pool::Get().pid() != getpid()) return false;
  return Gate().Allowed(Pool::Get().helpers()) > 0 && Pool::Get().SpinningOrWake();
}

}  // namespace intra_op_detail

AsyncRunScope::AsyncRunScope() { g_async_runs.fetch_add(1, std::memory_order_relaxed); }
AsyncRunScope::~AsyncRunScope() { g_async_runs.fetch_sub(1, std::memory_order_relaxed); }

void NoteSpin(int64_t ns) { g_spin_ns.fetch_add(ns, std::memory_order_relaxed); }

RunScope::RunScope() : counted_(t_run_depth++ == 0) {
  if (counted_) g_busy_runs.fetch_add(1, std::memory_order_relaxed);
}

RunScope::~RunScope() {
  --t_run_depth;
  if (counted_) g_busy_runs.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace onnx
}  // namespace twin
