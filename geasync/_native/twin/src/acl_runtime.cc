// CPU twin of CANN's ACL runtime (aclrt*): devices with thread-local contexts, in-order streams run by one
// executor thread each, host functions on one callback thread per context, events, and host memory posing as
// device memory (tracked in a registry so misuse is reported as ACL would). The GE twin uses acl_internal.h.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "acl/acl_base.h"
#include "acl/acl_rt.h"
#include "acl_internal.h"

namespace {

using Task = std::function<void()>;

// ---------------------------------------------------------------------------------------------------------------
// Recent error text (thread-local). The returned buffer is separate so clearing does not invalidate it.
thread_local std::string t_recent_err;
thread_local std::string t_returned_err;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
aclError Fail(aclError code, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  t_recent_err = buf;
  return code;
}

// ---------------------------------------------------------------------------------------------------------------
// Objects. Contexts live for the whole process (one per device, never destroyed), so a context pointer held by
// any thread stays valid; streams and events are shared_ptr-owned so in-flight tasks keep them alive.
struct Stream;

struct Context {
  int32_t device = 0;
  std::mutex mu;
  std::shared_ptr<Stream> default_stream;  // created lazily
  // The context's single callback thread: runs host functions serially, in submission order.
  std::condition_variable cb_cv;
  std::deque<Task> cb_queue;
  bool cb_started = false;
};

thread_local Context *t_current_ctx = nullptr;

struct Stream {
  Context *ctx = nullptr;
  std::mutex mu;
  std::condition_variable work_cv;  // executor: queue non-empty or stopping
  std::condition_variable done_cv;  // waiters: finished advanced
  std::deque<Task> queue;
  uint64_t enqueued = 0;  // tickets handed out
  uint64_t finished = 0;  // tasks completed (in order, so ticket t is done iff finished >= t)
  bool stopping = false;
  std::thread executor;

  // Returns the task's ticket, or 0 if the stream is being destroyed.
  uint64_t Enqueue(Task t) {
    std::lock_guard<std::mutex> lk(mu);
    if (stopping) return 0;
    queue.push_back(std::move(t));
    work_cv.notify_one();
    return ++enqueued;
  }

  // Waits until every task up to ticket `target` finished; timeout_ms < 0 waits forever. False on expiry.
  bool WaitFor(uint64_t target, int32_t timeout_ms) {
    std::unique_lock<std::mutex> lk(mu);
    auto ready = [&] { return finished >= target; };
    if (timeout_ms < 0) {
      done_cv.wait(lk, ready);
      return true;
    }
    return done_cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), ready);
  }

  uint64_t Ticket() {
    std::lock_guard<std::mutex> lk(mu);
    return enqueued;
  }
};

// The executor holds a reference so the Stream outlives its own loop even if destroyed from one of its tasks.
void RunStream(std::shared_ptr<Stream> s) {
  t_current_ctx = s->ctx;  // tasks (GE twin kernels) see the stream's context, as on the device
  std::unique_lock<std::mutex> lk(s->mu);
  for (;;) {
    s->work_cv.wait(lk, [&] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) break;  // stopping and drained
    Task t = std::move(s->queue.front());
    s->queue.pop_front();
    lk.unlock();
    t();
    t = nullptr;  // release captures before reporting completion
    lk.lock();
    ++s->finished;
    s->done_cv.notify_all();
  }
}

std::shared_ptr<Stream> NewStream(Context *ctx, bool detach) {
  auto s = std::make_shared<Stream>();
  s->ctx = ctx;
  s->executor = std::thread(RunStream, s);
  if (detach) s->executor.detach();  // default streams live forever; never joined
  return s;
}

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;  // records issued (re-recording bumps it, which resets the status)
  uint64_t reached = 0;   // highest record whose marker the stream has executed
};

// Process-wide state, deliberately leaked: threads still running at exit must never see it destroyed.
struct State {
  std::atomic<bool> initialized{false};
  std::mutex mu;  // devices, stream and event registries
  std::vector<Context *> contexts;  // per device, created on first aclrtSetDevice
  std::vector<int64_t> refcount;
  std::unordered_map<void *, std::shared_ptr<Stream>> streams;
  std::unordered_map<void *, std::shared_ptr<Event>> events;
  std::mutex mem_mu;  // memory registries
  std::map<uintptr_t, size_t> device_mem;
  std::map<uintptr_t, size_t> host_mem;
};

int DeviceCount() {
  static const int n = [] {
    const char *env = std::getenv("GEASYNC_TWIN_DEVICE_COUNT");
    char *end = nullptr;
    long v = env ? std::strtol(env, &end, 10) : 8;
    if (env && (end == env || *end != '\0')) v = 8;  // unset, empty or not a number: the default
    return static_cast<int>(v < 1 ? 1 : v > 64 ? 64 : v);
  }();
  return n;
}

State &S() {
  static State *s = [] {
    auto *st = new State;
    st->contexts.assign(DeviceCount(), nullptr);
    st->refcount.assign(DeviceCount(), 0);
    return st;
  }();
  return *s;
}

bool IsLiveContext(const Context *c) {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  for (Context *x : st.contexts)
    if (x == c) return c != nullptr;
  return false;
}

std::shared_ptr<Stream> DefaultStream(Context *c) {
  std::lock_guard<std::mutex> lk(c->mu);
  if (!c->default_stream) c->default_stream = NewStream(c, /*detach=*/true);
  return c->default_stream;
}

void CallbackLoop(Context *c) {
  t_current_ctx = c;
  std::unique_lock<std::mutex> lk(c->mu);
  for (;;) {
    c->cb_cv.wait(lk, [c] { return !c->cb_queue.empty(); });
    Task t = std::move(c->cb_queue.front());
    c->cb_queue.pop_front();
    lk.unlock();
    t();
    t = nullptr;
    lk.lock();
  }
}

void PostCallback(Context *c, Task t) {
  std::lock_guard<std::mutex> lk(c->mu);
  if (!c->cb_started) {
    c->cb_started = true;
    std::thread(CallbackLoop, c).detach();  // lives as long as the (immortal) context
  }
  c->cb_queue.push_back(std::move(t));
  c->cb_cv.notify_one();
}

// Resolves a stream handle (null = the current context's default stream). With need_ctx, the calling thread must
// have a current context owning the stream, as ACL requires for query/sync/host functions/destroy.
aclError ResolveStream(const char *api, aclrtStream handle, bool need_ctx, std::shared_ptr<Stream> *out) {
  Context *cur = t_current_ctx;
  if ((need_ctx || handle == nullptr) && cur == nullptr)
    return Fail(ACL_ERROR_RT_CONTEXT_NULL, "%s: no current context on this thread (call aclrtSetDevice or "
                "aclrtSetCurrentContext first)", api);
  if (handle == nullptr) {
    *out = DefaultStream(cur);
    return ACL_SUCCESS;
  }
  {
    State &st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto it = st.streams.find(handle);
    if (it == st.streams.end())
      return Fail(ACL_ERROR_INVALID_PARAM, "%s: stream %p is not a live stream (never created or destroyed)", api,
                  handle);
    *out = it->second;
  }
  if (need_ctx && (*out)->ctx != cur)
    return Fail(ACL_ERROR_RT_STREAM_CONTEXT, "%s: stream %p belongs to the context of device %d, not the current "
                "context (device %d)", api, handle, (*out)->ctx->device, cur->device);
  return ACL_SUCCESS;
}

aclError EnqueueOn(const char *api, const std::shared_ptr<Stream> &s, Task t) {
  if (s->Enqueue(std::move(t)) == 0) return Fail(ACL_ERROR_INVALID_PARAM, "%s: stream is being destroyed", api);
  return ACL_SUCCESS;
}

std::shared_ptr<Event> FindEvent(aclrtEvent handle) {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  auto it = st.events.find(handle);
  return it == st.events.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------------------------------------------
// Memory registry helpers (caller holds mem_mu).
bool Inside(const std::map<uintptr_t, size_t> &m, const void *p, size_t *remaining) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  if (a >= it->first + it->second) return false;
  if (remaining) *remaining = it->first + it->second - a;
  return true;
}

const char *KindName(int kind) {
  static const char *const kNames[] = {"ACL_MEMCPY_HOST_TO_HOST", "ACL_MEMCPY_HOST_TO_DEVICE",
                                       "ACL_MEMCPY_DEVICE_TO_HOST", "ACL_MEMCPY_DEVICE_TO_DEVICE",
                                       "ACL_MEMCPY_DEFAULT"};
  return kind >= 0 && kind <= 4 ? kNames[kind] : "invalid";
}

// Validates one side of a copy against the device registry. want: 'D' device, 'H' host, '?' infer (DEFAULT).
aclError CheckSide(const char *api, const char *side, const void *p, size_t count, char want, int kind) {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mem_mu);
  size_t rem = 0;
  bool is_dev = Inside(st.device_mem, p, &rem);
  if (want == 'D' && !is_dev)
    return Fail(ACL_ERROR_INVALID_PARAM, "%s: %s is not device memory (kind %s)", api, side, KindName(kind));
  if (want == 'H' && is_dev)
    return Fail(ACL_ERROR_INVALID_PARAM, "%s: %s is device memory but kind %s says host; device memory cannot be "
                "accessed as host memory", api, side, KindName(kind));
  if (is_dev && rem < count)
    return Fail(ACL_ERROR_INVALID_PARAM, "%s: %s device block has %zu bytes left from %p, copy needs %zu", api,
                side, rem, p, count);
  return ACL_SUCCESS;
}

aclError CheckCopy(const char *api, void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  if (dst == nullptr || src == nullptr)
    return Fail(ACL_ERROR_INVALID_PARAM, "%s: %s is null", api, dst == nullptr ? "dst" : "src");
  if (count > destMax)
    return Fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu exceeds destMax %zu", api, count, destMax);
  char ws, wd;
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST: ws = 'H', wd = 'H'; break;
    case ACL_MEMCPY_HOST_TO_DEVICE: ws = 'H', wd = 'D'; break;
    case ACL_MEMCPY_DEVICE_TO_HOST: ws = 'D', wd = 'H'; break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE: ws = 'D', wd = 'D'; break;
    case ACL_MEMCPY_DEFAULT: ws = '?', wd = '?'; break;
    default: return Fail(ACL_ERROR_INVALID_PARAM, "%s: invalid memcpy kind %d", api, static_cast<int>(kind));
  }
  aclError rc = CheckSide(api, "dst", dst, count, wd, kind);
  if (rc == ACL_SUCCESS) rc = CheckSide(api, "src", src, count, ws, kind);
  return rc;
}

aclError RegisterAlloc(const char *api, bool device, void **out, size_t size) {
  if (out == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "%s: output pointer is null", api);
  if (size == 0) return Fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", api);
  if (!S().initialized.load()) return Fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
  void *p = nullptr;
  // 64-byte alignment: the GE twin checks 32-byte alignment of device addresses, like real device memory.
  if (posix_memalign(&p, 64, size) != 0 || p == nullptr)
    return Fail(ACL_ERROR_BAD_ALLOC, "%s: cannot allocate %zu bytes", api, size);
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mem_mu);
  (device ? st.device_mem : st.host_mem)[reinterpret_cast<uintptr_t>(p)] = size;
  *out = p;
  return ACL_SUCCESS;
}

aclError UnregisterFree(const char *api, bool device, void *p) {
  if (p == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "%s: pointer is null", api);
  State &st = S();
  {
    std::lock_guard<std::mutex> lk(st.mem_mu);
    auto &m = device ? st.device_mem : st.host_mem;
    auto it = m.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.end()) {
      const char *why = Inside(m, p, nullptr) ? "an interior pointer of a live block"
                                              : "not a live allocation (double free or foreign pointer)";
      return Fail(ACL_ERROR_INVALID_PARAM, "%s: %p is %s; not freed", api, p, why);
    }
    m.erase(it);
  }
  std::free(p);
  return ACL_SUCCESS;
}

}  // namespace

// =================================================================================================================
// Twin-internal hooks.
namespace twin {
namespace acl {

bool LookupDeviceMemory(const void *p, size_t *remaining) {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mem_mu);
  return Inside(st.device_mem, p, remaining);
}

bool IsLiveStream(aclrtStream stream) {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  return stream != nullptr && st.streams.count(stream) != 0;
}

aclError EnqueueStreamTask(aclrtStream stream, std::function<void()> task) {
  if (!task) return Fail(ACL_ERROR_INVALID_PARAM, "EnqueueStreamTask: task is empty");
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("EnqueueStreamTask", stream, /*need_ctx=*/false, &s);
  return rc != ACL_SUCCESS ? rc : EnqueueOn("EnqueueStreamTask", s, std::move(task));
}

int64_t LiveDeviceAllocations() {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mem_mu);
  return static_cast<int64_t>(st.device_mem.size());
}

int64_t LiveStreams() {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  return static_cast<int64_t>(st.streams.size());
}

void SetRecentErrMsg(const char *msg) { t_recent_err = msg ? msg : ""; }

}  // namespace acl
}  // namespace twin

// =================================================================================================================
// Public ACL API.
extern "C" {

aclError aclInit(const char * /*configPath*/) {
  bool expected = false;
  if (!S().initialized.compare_exchange_strong(expected, true))
    return Fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialized");
  return ACL_SUCCESS;
}

// Only marks the runtime uninitialised: streams, contexts and memory stay valid so teardown order cannot crash.
aclError aclFinalize(void) {
  S().initialized.store(false);
  return ACL_SUCCESS;
}

const char *aclGetRecentErrMsg(void) {
  if (t_recent_err.empty()) return nullptr;  // as CANN's: no message is nullptr, not ""
  t_returned_err.swap(t_recent_err);
  t_recent_err.clear();
  return t_returned_err.c_str();
}

// --- devices and contexts ---------------------------------------------------------------------------------------
aclError aclrtSetDevice(int32_t deviceId) {
  State &st = S();
  if (!st.initialized.load()) return Fail(ACL_ERROR_UNINITIALIZE, "aclrtSetDevice: aclInit has not been called");
  if (deviceId < 0 || deviceId >= DeviceCount())
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtSetDevice: invalid device id %d (device count %d)", deviceId,
                DeviceCount());
  std::lock_guard<std::mutex> lk(st.mu);
  Context *&c = st.contexts[deviceId];
  if (c == nullptr) {
    c = new Context;  // immortal: see the comment on Context
    c->device = deviceId;
  }
  ++st.refcount[deviceId];
  t_current_ctx = c;
  return ACL_SUCCESS;
}

// Reference counted; the default context is kept even at zero so streams created in it stay usable.
aclError aclrtResetDevice(int32_t deviceId) {
  if (deviceId < 0 || deviceId >= DeviceCount())
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtResetDevice: invalid device id %d (device count %d)", deviceId,
                DeviceCount());
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  if (st.refcount[deviceId] > 0) --st.refcount[deviceId];
  if (t_current_ctx != nullptr && t_current_ctx->device == deviceId) t_current_ctx = nullptr;
  return ACL_SUCCESS;
}

aclError aclrtGetDevice(int32_t *deviceId) {
  if (deviceId == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is null");
  if (t_current_ctx == nullptr)
    return Fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetDevice: no current context on this thread");
  *deviceId = t_current_ctx->device;
  return ACL_SUCCESS;
}

aclError aclrtGetDeviceCount(uint32_t *count) {
  if (count == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is null");
  *count = static_cast<uint32_t>(DeviceCount());
  return ACL_SUCCESS;
}

aclError aclrtGetCurrentContext(aclrtContext *context) {
  if (context == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetCurrentContext: context is null");
  if (t_current_ctx == nullptr)
    return Fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetCurrentContext: no current context on this thread");
  *context = t_current_ctx;
  return ACL_SUCCESS;
}

aclError aclrtSetCurrentContext(aclrtContext context) {
  if (context == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtSetCurrentContext: context is null");
  if (!IsLiveContext(static_cast<Context *>(context)))
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtSetCurrentContext: %p is not a live context", context);
  t_current_ctx = static_cast<Context *>(context);
  return ACL_SUCCESS;
}

// --- streams ----------------------------------------------------------------------------------------------------
aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t /*priority*/, uint32_t /*flag*/) {
  if (stream == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is null");
  if (!S().initialized.load()) return Fail(ACL_ERROR_UNINITIALIZE, "aclrtCreateStream: aclInit has not been called");
  Context *cur = t_current_ctx;
  if (cur == nullptr)
    return Fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtCreateStream: no current context on this thread");
  std::shared_ptr<Stream> s = NewStream(cur, /*detach=*/false);
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  st.streams[s.get()] = s;
  *stream = s.get();
  return ACL_SUCCESS;
}

aclError aclrtCreateStream(aclrtStream *stream) { return aclrtCreateStreamWithConfig(stream, 0, 0); }

aclError aclrtDestroyStream(aclrtStream stream) {
  if (stream == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: stream is null");
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("aclrtDestroyStream", stream, true, &s);
  if (rc != ACL_SUCCESS) return rc;
  {
    State &st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    // Erase first: a concurrent destroy of the same handle then fails cleanly instead of joining twice.
    if (st.streams.erase(stream) == 0)
      return Fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: stream %p is already destroyed", stream);
  }
  {
    std::lock_guard<std::mutex> lk(s->mu);
    s->stopping = true;  // the executor drains every queued task before it exits
    s->work_cv.notify_all();
  }
  if (s->executor.get_id() == std::this_thread::get_id())
    s->executor.detach();  // destroyed from one of its own tasks: cannot join ourselves
  else
    s->executor.join();
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
  if (timeout == 0 || timeout < -1)
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeStreamWithTimeout: invalid timeout %d (ms, -1 = forever)",
                timeout);
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("aclrtSynchronizeStream", stream, true, &s);
  if (rc != ACL_SUCCESS) return rc;
  if (!s->WaitFor(s->Ticket(), timeout))
    return Fail(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "aclrtSynchronizeStreamWithTimeout: stream %p not complete after "
                "%d ms", stream, timeout);
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream) { return aclrtSynchronizeStreamWithTimeout(stream, -1); }

aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status) {
  if (status == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamQuery: status is null");
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("aclrtStreamQuery", stream, true, &s);
  if (rc != ACL_SUCCESS) return rc;
  std::lock_guard<std::mutex> lk(s->mu);
  *status = s->finished == s->enqueued ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args) {
  if (fn == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtLaunchHostFunc: fn is null");
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("aclrtLaunchHostFunc", stream, true, &s);
  if (rc != ACL_SUCCESS) return rc;
  Context *ctx = s->ctx;
  // The stream task hands fn to the context's callback thread and blocks until it returns, like the device.
  return EnqueueOn("aclrtLaunchHostFunc", s, [ctx, fn, args] {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    PostCallback(ctx, [&] {
      fn(args);
      std::lock_guard<std::mutex> lk(m);  // notify under the lock: the waiter's stack frame owns m and cv
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return done; });
  });
}

// --- events -----------------------------------------------------------------------------------------------------
aclError aclrtCreateEvent(aclrtEvent *event) {
  if (event == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateEvent: event is null");
  if (!S().initialized.load()) return Fail(ACL_ERROR_UNINITIALIZE, "aclrtCreateEvent: aclInit has not been called");
  auto e = std::make_shared<Event>();
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  st.events[e.get()] = e;
  *event = e.get();
  return ACL_SUCCESS;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  std::shared_ptr<Event> e = FindEvent(event);
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtRecordEvent: event %p is not a live event", event);
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("aclrtRecordEvent", stream, false, &s);
  if (rc != ACL_SUCCESS) return rc;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    gen = ++e->recorded;
  }
  auto mark = [e, gen] {
    std::lock_guard<std::mutex> lk(e->mu);
    if (gen > e->reached) e->reached = gen;
    e->cv.notify_all();
  };
  rc = EnqueueOn("aclrtRecordEvent", s, mark);
  if (rc != ACL_SUCCESS) mark();  // never leave waiters on a record that will not run
  return rc;
}

aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status) {
  if (status == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: status is null");
  std::shared_ptr<Event> e = FindEvent(event);
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: event %p is not a live event", event);
  std::lock_guard<std::mutex> lk(e->mu);
  *status = e->recorded > 0 && e->reached >= e->recorded ? ACL_EVENT_RECORDED_STATUS_COMPLETE
                                                         : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeEvent(aclrtEvent event) {
  std::shared_ptr<Event> e = FindEvent(event);
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeEvent: event %p is not a live event", event);
  std::unique_lock<std::mutex> lk(e->mu);
  const uint64_t target = e->recorded;  // 0 when never recorded: returns at once
  e->cv.wait(lk, [&] { return e->reached >= target; });
  return ACL_SUCCESS;
}

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  std::shared_ptr<Event> e = FindEvent(event);
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamWaitEvent: event %p is not a live event", event);
  std::shared_ptr<Stream> s;
  aclError rc = ResolveStream("aclrtStreamWaitEvent", stream, false, &s);
  if (rc != ACL_SUCCESS) return rc;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    target = e->recorded;  // waits for the record current at enqueue time, not later re-records
  }
  return EnqueueOn("aclrtStreamWaitEvent", s, [e, target] {
    std::unique_lock<std::mutex> lk(e->mu);
    e->cv.wait(lk, [&] { return e->reached >= target; });
  });
}

aclError aclrtDestroyEvent(aclrtEvent event) {
  State &st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  // Pending markers and waits hold their own reference, so erasing here is safe.
  if (event == nullptr || st.events.erase(event) == 0)
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyEvent: event %p is not a live event", event);
  return ACL_SUCCESS;
}

// --- memory -----------------------------------------------------------------------------------------------------
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy /*policy*/) {
  return RegisterAlloc("aclrtMalloc", true, devPtr, size);
}

aclError aclrtFree(void *devPtr) { return UnregisterFree("aclrtFree", true, devPtr); }

aclError aclrtMallocHost(void **hostPtr, size_t size) { return RegisterAlloc("aclrtMallocHost", false, hostPtr, size); }

aclError aclrtFreeHost(void *hostPtr) { return UnregisterFree("aclrtFreeHost", false, hostPtr); }

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  aclError rc = CheckCopy("aclrtMemcpy", dst, destMax, src, count, kind);
  if (rc != ACL_SUCCESS) return rc;
  std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream) {
  // Validated now, copied when the stream reaches it: the caller keeps both buffers alive until then.
  aclError rc = CheckCopy("aclrtMemcpyAsync", dst, destMax, src, count, kind);
  if (rc != ACL_SUCCESS) return rc;
  std::shared_ptr<Stream> s;
  rc = ResolveStream("aclrtMemcpyAsync", stream, false, &s);
  if (rc != ACL_SUCCESS) return rc;
  return EnqueueOn("aclrtMemcpyAsync", s, [dst, src, count] { std::memmove(dst, src, count); });
}

aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  if (devPtr == nullptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: devPtr is null");
  if (count > maxCount)
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: count %zu exceeds maxCount %zu", count, maxCount);
  size_t rem = 0;
  if (!twin::acl::LookupDeviceMemory(devPtr, &rem))
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: %p is not device memory", devPtr);
  if (rem < count)
    return Fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: device block has %zu bytes left from %p, memset needs %zu",
                rem, devPtr, count);
  std::memset(devPtr, value & 0xFF, count);
  return ACL_SUCCESS;
}

}  // extern "C"
