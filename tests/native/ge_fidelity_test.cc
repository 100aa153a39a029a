// GE-level fidelity tests of the twin: written only against the GE v2 / ACL / parser API (plus the twin-only fault
// controls of twin/twin_control.h), so each one shows a GE behaviour the way a C++ user of GE would meet it.
// Built and run by tests/test_ge_fidelity.py: ge_fidelity_test <add.onnx> <dyn.onnx> <bad.onnx> <test name>...
// Prints "PASS <name>" or "FAIL <name>: <why>" per test.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "acl/acl_rt.h"
#include "ge/ge_api_v2.h"
#include "parser/onnx_parser.h"
#include "ge_inner_error_codes.h"  // twin-private: GE's internal codes, to check which one the twin returns
#include "twin/twin_control.h"

namespace {
using Clock = std::chrono::steady_clock;
std::string g_add_model, g_dyn_model;  // bytes of [1,4]+[1,4] and [N,4]+[N,4] Add graphs
std::string g_bad_model;                // [2,4]+[3,4]: parses, but cannot be compiled (the shapes do not broadcast)
// GE's thread names as pthread reports them (15 characters).
const char *const kPreRunThread = "ge_comp_prerunV";
const char *const kExecutorThread = "ge_mdlexecrun";
const char *const kModelThread = "ge_davidmdlrun";

std::string ThreadName() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

std::string ReadFile(const char *path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

ge::Graph Parse(const std::string &bytes) {
  ge::Graph g;
  if (ge::aclgrphParseONNXFromMem(bytes.data(), bytes.size(), {}, g) != ge::GRAPH_SUCCESS) std::abort();
  return g;
}

// Host input tensors over a shared buffer (inputs are borrowed by GE).
std::vector<gert::Tensor> Inputs(std::vector<float> &buf, int64_t rows, int64_t cols = 4, int count = 2) {
  buf.assign(static_cast<size_t>(rows * cols), 1.0f);
  std::vector<gert::Tensor> v;
  for (int i = 0; i < count; ++i) {
    gert::Tensor t({{rows, cols}, {rows, cols}}, {ge::FORMAT_ND, ge::FORMAT_ND, {}}, gert::kOnHost, ge::DT_FLOAT,
                   buf.data());
    v.push_back(std::move(t));
  }
  return v;
}

// [2,4] and [3,4] inputs for the [N,4] + [N,4] graph: they cannot broadcast, so compiling from them fails.
std::vector<gert::Tensor> Unbroadcastable(std::vector<float> &b1, std::vector<float> &b2) {
  std::vector<gert::Tensor> v;
  auto in1 = Inputs(b1, 2, 4, 1);
  auto in2 = Inputs(b2, 3, 4, 1);
  v.push_back(std::move(in1[0]));
  v.push_back(std::move(in2[0]));
  return v;
}

// Runs `submit` on another thread; true if it was still blocked 200 ms later. `release` then unblocks it.
bool SubmitBlocks(const std::function<void()> &submit, const std::function<void()> &release) {
  std::atomic<bool> returned{false};
  std::thread t([&] {
    submit();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const bool blocked = !returned.load();
  release();
  t.join();
  return blocked;
}

// Collects RunGraphAsync callbacks: status, thread name, order.
struct Calls {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<ge::Status, std::string>> calls;
  ge::RunAsyncCallbackV2 Callback(std::function<void()> during = nullptr) {
    return [this, during](ge::Status st, std::vector<gert::Tensor> &) {
      if (during) during();
      std::lock_guard<std::mutex> lk(mu);
      calls.emplace_back(st, ThreadName());
      cv.notify_all();
    };
  }
  bool WaitFor(size_t n, int ms = 5000) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return calls.size() >= n; });
  }
  size_t Count() {
    std::lock_guard<std::mutex> lk(mu);
    return calls.size();
  }
};

#define EXPECT(cond, msg)                        \
  do {                                           \
    if (!(cond)) return std::string(msg);        \
  } while (0)

std::string Status(ge::Status st) { return std::to_string(st); }

// --- the tests ------------------------------------------------------------------------------------------------

std::string CallbackThreads() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_add_model));
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  Calls calls;
  EXPECT(s.RunGraphAsync(1, in, calls.Callback()) == ge::SUCCESS, "RunGraphAsync did not queue");
  EXPECT(calls.WaitFor(1), "no callback");
  EXPECT(calls.calls[0].first == ge::SUCCESS, "run failed");
  EXPECT(calls.calls[0].second == kModelThread, "success callback on '" + calls.calls[0].second + "', not the model thread");
  // compile failure: callback on the compile thread
  s.AddGraph(2, Parse(g_dyn_model));
  std::vector<float> b1, b2;
  auto bad = Unbroadcastable(b1, b2);
  EXPECT(s.RunGraphAsync(2, bad, calls.Callback()) == ge::SUCCESS, "bad job refused at submit");
  EXPECT(calls.WaitFor(2), "no callback for the compile failure");
  EXPECT(calls.calls[1].first != ge::SUCCESS, "compile failure reported success");
  EXPECT(calls.calls[1].second == kPreRunThread, "compile-failure callback on '" + calls.calls[1].second + "'");
  // mode conflict: callback on the caller's thread, before the call returns
  std::vector<gert::Tensor> outs;
  s.AddGraph(3, Parse(g_add_model));
  EXPECT(s.RunGraph(3, in, outs) == ge::SUCCESS, "RunGraph failed");
  const std::string me = ThreadName();
  size_t before = calls.Count();
  EXPECT(s.RunGraphAsync(3, in, calls.Callback()) == ge::UNSUPPORTED, "mode conflict not UNSUPPORTED");
  EXPECT(calls.Count() == before + 1, "mode-conflict callback not called before RunGraphAsync returned");
  EXPECT(calls.calls.back().first == ge::UNSUPPORTED && calls.calls.back().second == me,
         "mode-conflict callback not (UNSUPPORTED, caller's thread)");
  return "";
}

std::string FifoNextJobAfterCallback() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_add_model));
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  std::atomic<int> inside{0}, overlap{0};
  std::mutex order_mu;
  std::vector<int> order;
  std::vector<std::unique_ptr<Calls>> keep;
  Calls calls;
  for (int i = 0; i < 20; ++i) {
    auto cb = [&, i](ge::Status, std::vector<gert::Tensor> &) {
      if (inside.fetch_add(1) != 0) overlap.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      {
        std::lock_guard<std::mutex> lk(order_mu);
        order.push_back(i);
      }
      inside.fetch_sub(1);
      std::lock_guard<std::mutex> lk(calls.mu);
      calls.calls.emplace_back(0, "");
      calls.cv.notify_all();
    };
    EXPECT(s.RunGraphAsync(1, in, cb) == ge::SUCCESS, "submit failed");
  }
  EXPECT(calls.WaitFor(20), "callbacks missing");
  EXPECT(overlap.load() == 0, "two callbacks of one model ran at once");
  for (int i = 0; i < 20; ++i) EXPECT(order[i] == i, "callbacks out of submission order");
  return "";
}

std::string CompileQueueBlocksAt2048() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_add_model));
  geasync_twin_fault_add(s.GetSessionId(), 1, GEASYNC_TWIN_FAULT_STALL_COMPILE, 0, 0, 0);
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  Calls calls;
  // The first job is taken by the (stalled) compile thread; 2048 more fill the queue.
  for (int i = 0; i < 2049; ++i) EXPECT(s.RunGraphAsync(1, in, calls.Callback()) == ge::SUCCESS, "submit failed");
  const bool blocked_while_full = SubmitBlocks([&] { s.RunGraphAsync(1, in, calls.Callback()); },
                                                [&] { geasync_twin_fault_release(s.GetSessionId(), 1); });
  EXPECT(blocked_while_full, "the 2050th submit did not block while the compile queue held 2048 jobs");
  EXPECT(calls.WaitFor(2050, 20000), "not every job was called back after the release");
  return "";
}

std::string ModelQueueFullFailsJob() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_add_model));
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  Calls calls;
  std::vector<gert::Tensor> outs;
  EXPECT(s.CompileGraph(1) == ge::SUCCESS, "compile failed");
  geasync_twin_fault_add(s.GetSessionId(), 1, GEASYNC_TWIN_FAULT_STALL_CALLBACK, 1, 0, 0);
  EXPECT(s.RunGraphAsync(1, in, calls.Callback()) == ge::SUCCESS, "submit failed");
  // wait until job 1 holds the model thread, so the queue's 2048 places are all for the jobs behind it
  for (int i = 0; i < 500 && geasync_twin_fault_runs(s.GetSessionId(), 1) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (int i = 1; i < 2100; ++i) EXPECT(s.RunGraphAsync(1, in, calls.Callback()) == ge::SUCCESS, "submit failed");
  // job 1 holds the model thread; 2048 wait in the model queue; the rest fail with GE_GRAPH_SYNC_MODEL_FAILED
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  size_t failed = 0;
  std::string thread;
  {
    std::lock_guard<std::mutex> lk(calls.mu);
    for (auto &c : calls.calls)
      if (c.first == ge::GE_GRAPH_SYNC_MODEL_FAILED) {
        ++failed;
        thread = c.second;
      }
  }
  geasync_twin_fault_clear(s.GetSessionId(), 1);
  EXPECT(calls.WaitFor(2100, 20000), "callbacks missing after the release");
  EXPECT(failed == 2100 - 1 - 2048, "expected 51 GE_GRAPH_SYNC_MODEL_FAILED callbacks, got " + std::to_string(failed));
  EXPECT(thread == kExecutorThread, "queue-full callback on '" + thread + "', not the executor thread");
  return "";
}

std::string DynamicGraphHolds32Callbacks() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_dyn_model));
  EXPECT(s.CompileGraph(1) == ge::SUCCESS, "compile failed");  // Data shape [-1, 4]: a dynamic-shape graph
  auto summary = s.GetCompiledGraphSummary(1);
  EXPECT(summary && !summary->IsStatic(), "graph not dynamic");
  geasync_twin_fault_add(s.GetSessionId(), 1, GEASYNC_TWIN_FAULT_STALL_CALLBACK, 0, 0, 0);
  std::vector<float> buf;
  auto in = Inputs(buf, 2);
  Calls calls;
  for (int i = 0; i < 32; ++i) EXPECT(s.RunGraphAsync(1, in, calls.Callback()) == ge::SUCCESS, "submit failed");
  // The 33rd job waits for a place on the session's executor thread, not in the caller.
  const bool caller_blocked = SubmitBlocks([&] { s.RunGraphAsync(1, in, calls.Callback()); }, [] {});
  EXPECT(!caller_blocked, "the 33rd submit on a dynamic-shape graph blocked the caller");
  // ... so every other graph of the session stalls behind it.
  s.AddGraph(2, Parse(g_add_model));
  std::vector<float> b2;
  auto in2 = Inputs(b2, 1);
  Calls other;
  EXPECT(s.RunGraphAsync(2, in2, other.Callback()) == ge::SUCCESS, "submit of graph 2 failed");
  EXPECT(!other.WaitFor(1, 300), "graph 2 ran while the executor thread waited for graph 1's callbacks");
  geasync_twin_fault_clear(s.GetSessionId(), 1);
  EXPECT(calls.WaitFor(33), "callbacks missing");
  EXPECT(other.WaitFor(1) && other.calls[0].first == ge::SUCCESS, "graph 2 did not run after the release");
  return "";
}

std::string CompileFailureStopsAsyncQueue() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_dyn_model));
  s.AddGraph(2, Parse(g_add_model));
  std::vector<float> b1, b2;
  auto bad = Unbroadcastable(b1, b2);
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  Calls calls;
  // The bad job is held in the pre-run stage while three good jobs queue behind it.
  geasync_twin_fault_add(s.GetSessionId(), 1, GEASYNC_TWIN_FAULT_STALL_COMPILE, 0, 0, 0);
  EXPECT(s.RunGraphAsync(1, bad, calls.Callback()) == ge::SUCCESS, "bad job refused at submit");
  for (int i = 0; i < 3; ++i) EXPECT(s.RunGraphAsync(2, in, calls.Callback()) == ge::SUCCESS, "good job refused");
  geasync_twin_fault_release(s.GetSessionId(), 1);
  EXPECT(calls.WaitFor(1), "no callback");
  EXPECT(!calls.WaitFor(2, 300), "a job queued behind the pre-run failure was called back");
  const ge::Status st = s.RunGraphAsync(2, in, calls.Callback());
  EXPECT(st == ge::FAILED, "RunGraphAsync after a compile failure returned " + Status(st) + ", not FAILED");
  const std::string msg = ge::GEGetErrorMsgV3().GetString();
  EXPECT(msg.find("stopped") != std::string::npos, "no message about the stopped queue: " + msg);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT(calls.Count() == 1, "a refused submit, or a job queued behind the failure, was called back");
  std::vector<gert::Tensor> outs;
  EXPECT(s.RunGraph(2, in, outs) == ge::UNSUPPORTED, "mode of graph 2 was not fixed by the refused RunGraphAsync");
  return "";
}

// Graph 1 (an Add) gets one job that runs for 200 ms and nine queued behind it.
std::string StartSlowJobAndQueueNine(ge::GeSession &s, std::vector<float> &buf, Calls &calls,
                                     std::vector<gert::Tensor> *in) {
  s.AddGraph(1, Parse(g_add_model));
  *in = Inputs(buf, 1);
  EXPECT(s.CompileGraph(1) == ge::SUCCESS, "compile failed");
  geasync_twin_fault_add(s.GetSessionId(), 1, GEASYNC_TWIN_FAULT_DELAY_RUN, 1, 0, 200);
  for (int i = 0; i < 10; ++i) EXPECT(s.RunGraphAsync(1, *in, calls.Callback()) == ge::SUCCESS, "submit failed");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // job 1 is running (delayed), 9 are queued
  return "";
}

std::string DestroyDropsQueuedJobs() {
  Calls calls;
  std::vector<float> buf;
  {
    ge::GeSession s({});
    std::vector<gert::Tensor> in;
    const std::string err = StartSlowJobAndQueueNine(s, buf, calls, &in);
    if (!err.empty()) return err;
  }  // ~GeSession: the running job finishes and calls back; queued jobs are dropped without callbacks
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT(calls.Count() == 1, "expected 1 callback (the running job), got " + std::to_string(calls.Count()));
  return "";
}

std::string FinalizeDropsQueuedJobs() {
  Calls calls;
  std::vector<float> buf;
  ge::GeSession s({});
  std::vector<gert::Tensor> in;
  const std::string err = StartSlowJobAndQueueNine(s, buf, calls, &in);
  if (!err.empty()) return err;
  EXPECT(ge::GEFinalizeV2() == ge::SUCCESS, "GEFinalizeV2 failed");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const size_t n = calls.Count();
  std::vector<gert::Tensor> outs;
  const ge::Status after = s.RunGraphAsync(1, in, calls.Callback());
  EXPECT(ge::GEInitializeV2({}) == ge::SUCCESS, "re-initialise failed");
  EXPECT(n == 1, "expected 1 callback after GEFinalizeV2, got " + std::to_string(n));
  EXPECT(after == ge::FAILED, "a finalised session accepted work");
  return "";
}

std::string ProcessWideRunGraphTryLock() {
  ge::GeSession s1({}), s2({});
  s1.AddGraph(1, Parse(g_add_model));
  s2.AddGraph(1, Parse(g_add_model));
  geasync_twin_fault_add(s1.GetSessionId(), 1, GEASYNC_TWIN_FAULT_DELAY_RUN, 1, 0, 300);
  std::vector<float> b1, b2;
  auto in1 = Inputs(b1, 1);
  auto in2 = Inputs(b2, 1);
  ge::Status first = 1;
  std::thread t([&] {
    std::vector<gert::Tensor> outs;
    first = s1.RunGraph(1, in1, outs);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<gert::Tensor> outs;
  const ge::Status second = s2.RunGraph(1, in2, outs);
  const std::string msg = ge::GEGetErrorMsgV3().GetString();
  t.join();
  geasync_twin_fault_clear(s1.GetSessionId(), 1);
  EXPECT(first == ge::SUCCESS, "first RunGraph failed");
  EXPECT(second == ge::FAILED, "concurrent RunGraph in another session returned " + Status(second));
  EXPECT(msg.find("GE_SESS_ALREADY_RUNNING") != std::string::npos, "message lacks GE_SESS_ALREADY_RUNNING: " + msg);
  return "";
}

std::string DeviceInputAlignmentNotChecked() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_add_model));
  EXPECT(aclrtSetDevice(0) == ACL_SUCCESS, "aclrtSetDevice failed");
  aclrtStream stream = nullptr;
  EXPECT(aclrtCreateStream(&stream) == ACL_SUCCESS, "aclrtCreateStream failed");
  void *dev = nullptr;
  EXPECT(aclrtMalloc(&dev, 64 + 16, ACL_MEM_MALLOC_NORMAL_ONLY) == ACL_SUCCESS, "aclrtMalloc failed");
  auto *unaligned = static_cast<char *>(dev) + 16;
  std::vector<gert::Tensor> in;
  for (int i = 0; i < 2; ++i)
    in.emplace_back(gert::StorageShape{{1, 4}, {1, 4}}, gert::StorageFormat{ge::FORMAT_ND, ge::FORMAT_ND, {}},
                    gert::kOnDeviceHbm, ge::DT_FLOAT, unaligned);
  std::vector<gert::Tensor> outs;
  const ge::Status st = s.RunGraphWithStreamAsync(1, stream, in, outs);
  const std::string msg = ge::GEGetErrorMsgV3().GetString();
  aclrtSynchronizeStream(stream);
  aclrtFree(dev);
  aclrtDestroyStream(stream);
  // GE documents 32-byte alignment ("otherwise undefined errors") but never checks it.
  EXPECT(st == ge::SUCCESS, "unaligned device input refused with " + Status(st) + ": " + msg);
  return "";
}

std::string LoadTwiceAndAddTwice() {
  ge::GeSession s({});
  ge::Graph g = Parse(g_add_model);
  EXPECT(s.AddGraph(1, g) == ge::SUCCESS, "AddGraph failed");
  EXPECT(s.AddGraph(2, g) == ge::FAILED, "adding the same Graph object twice succeeded");
  EXPECT(std::string(ge::GEGetErrorMsgV3().GetString()).find("AddGraphClone") != std::string::npos,
         "message does not point to AddGraphClone");
  EXPECT(s.AddGraphClone(2, g) == ge::SUCCESS, "AddGraphClone failed");
  EXPECT(s.LoadGraph(1, {}, nullptr) == ge::SUCCESS, "first LoadGraph failed");
  EXPECT(s.LoadGraph(1, {}, nullptr) == ge::FAILED, "LoadGraph of a loaded graph did not return FAILED");
  EXPECT(std::string(ge::GEGetErrorMsgV3().GetString()).find("GE_GRAPH_REPEAT_OPERATION") != std::string::npos,
         "message lacks GE_GRAPH_REPEAT_OPERATION");
  EXPECT(s.CompileGraph(1) == ge::SUCCESS, "CompileGraph of a compiled graph is not SUCCESS");
  return "";
}

std::string RemoveRunningGraphIsDeferred() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_add_model));
  EXPECT(s.CompileGraph(1) == ge::SUCCESS, "compile failed");
  geasync_twin_fault_add(s.GetSessionId(), 1, GEASYNC_TWIN_FAULT_STALL_CALLBACK, 1, 0, 0);
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  Calls calls;
  EXPECT(s.RunGraphAsync(1, in, calls.Callback()) == ge::SUCCESS, "submit failed");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT(s.RemoveGraph(1) == ge::SUCCESS, "RemoveGraph of a running graph failed");
  geasync_twin_fault_release(s.GetSessionId(), 1);
  EXPECT(calls.WaitFor(1), "the running job was not completed after RemoveGraph");
  EXPECT(calls.calls[0].first == ge::SUCCESS, "the running job failed");
  EXPECT(s.RemoveGraph(1) == ge::GE_GRAPH_GRAPH_NOT_EXIST, "graph still present after deferred removal");
  return "";
}

std::string CompileShapesByRunMode() {
  ge::GeSession s({});
  // RunGraph compiles from the Data nodes: a static [1,4] graph refuses [3,4] inputs
  s.AddGraph(1, Parse(g_add_model));
  std::vector<float> b3;
  auto in3 = Inputs(b3, 3);
  std::vector<gert::Tensor> outs;
  EXPECT(s.RunGraph(1, in3, outs) == ge::FAILED, "RunGraph ran [3,4] inputs on a [1,4] graph");
  // RunGraphAsync compiles from the input tensors: a [N,4] graph becomes static [5,4]
  s.AddGraph(2, Parse(g_dyn_model));
  std::vector<float> b5;
  auto in5 = Inputs(b5, 5);
  Calls calls;
  EXPECT(s.RunGraphAsync(2, in5, calls.Callback()) == ge::SUCCESS, "submit failed");
  EXPECT(calls.WaitFor(1) && calls.calls[0].first == ge::SUCCESS, "async run failed");
  auto summary = s.GetCompiledGraphSummary(2);
  std::vector<ge::Shape> shapes;
  EXPECT(summary && summary->IsStatic(), "async-compiled graph is not static");
  summary->GetOutputShapes(shapes);
  EXPECT(shapes.size() == 1 && shapes[0].GetDims() == std::vector<int64_t>({5, 4}), "output shape not [5,4]");
  // CompileGraph with inputs updates the Data nodes
  s.AddGraph(3, Parse(g_dyn_model));
  std::vector<ge::Tensor> descs(2, ge::Tensor(ge::TensorDesc(ge::Shape({7, 4}), ge::FORMAT_ND, ge::DT_FLOAT)));
  EXPECT(s.CompileGraph(3, descs) == ge::SUCCESS, "CompileGraph with inputs failed");
  s.GetCompiledGraphSummary(3)->GetOutputShapes(shapes);
  EXPECT(shapes.size() == 1 && shapes[0].GetDims() == std::vector<int64_t>({7, 4}), "Data nodes not updated");
  return "";
}

std::string FailedImplicitCompileLeavesModeUnset() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_bad_model));
  std::vector<float> buf;
  auto in = Inputs(buf, 2);
  std::vector<gert::Tensor> outs;
  EXPECT(s.RunGraph(1, in, outs) == ge::FAILED, "RunGraph of an uncompilable graph did not fail");
  (void)ge::GEGetErrorMsgV3();
  aclrtStream stream = nullptr;
  EXPECT(aclrtSetDevice(0) == ACL_SUCCESS && aclrtCreateStream(&stream) == ACL_SUCCESS, "no stream");
  const ge::Status st = s.RunGraphWithStreamAsync(1, stream, in, outs);
  const std::string msg = ge::GEGetErrorMsgV3().GetString();
  aclrtDestroyStream(stream);
  EXPECT(st == ge::FAILED, "stream-mode run of an uncompilable graph returned " + Status(st));
  EXPECT(msg.find("E10062") == std::string::npos,
         "the failed RunGraph fixed the graph's run mode (GE sets it only after compile and load): " + msg);
  return "";
}

std::string ErrorTextFollowsWorkStream() {
  ge::GeSession s({});
  s.AddGraph(1, Parse(g_dyn_model));
  std::vector<float> b1, b2;
  auto bad = Unbroadcastable(b1, b2);
  Calls calls;
  (void)ge::GEGetErrorMsgV3();
  // The callback leaves GE's text unread: the pre-run thread reported it under the submitter's work stream.
  EXPECT(s.RunGraphAsync(1, bad, calls.Callback()) == ge::SUCCESS, "bad job refused at submit");
  EXPECT(calls.WaitFor(1) && calls.calls[0].first != ge::SUCCESS, "no failure callback");
  std::string elsewhere;
  std::thread([&] { elsewhere = ge::GEGetErrorMsgV3().GetString(); }).join();
  const std::string mine = ge::GEGetErrorMsgV3().GetString();
  EXPECT(elsewhere.empty(), "another thread read the submitter's error text: " + elsewhere);
  EXPECT(mine.find("compiling graph") != std::string::npos,
         "the submitting thread does not hold the pre-run thread's error text: '" + mine + "'");
  return "";
}

std::string AclRecentErrMsgIsNullWhenNone() {
  (void)aclGetRecentErrMsg();
  EXPECT(aclGetRecentErrMsg() == nullptr, "aclGetRecentErrMsg is not nullptr without a message (CANN: @retval null)");
  EXPECT(aclrtSetDevice(9999) != ACL_SUCCESS, "aclrtSetDevice(9999) succeeded");
  const char *text = aclGetRecentErrMsg();
  EXPECT(text != nullptr && *text != '\0', "no text after a failed ACL call");
  EXPECT(aclGetRecentErrMsg() == nullptr, "the text was not cleared by reading it");
  return "";
}

std::string ErrorCodes() {
  ge::GeSession s({});
  std::vector<float> buf;
  auto in = Inputs(buf, 1);
  std::vector<gert::Tensor> outs;
  EXPECT(s.RunGraph(9, in, outs) == ge::FAILED, "RunGraph of an unknown graph is not FAILED (large codes map)");
  EXPECT(s.RemoveGraph(9) == ge::GE_GRAPH_GRAPH_NOT_EXIST, "RemoveGraph of an unknown graph");
  EXPECT(s.CompileGraph(9) == ge::GE_GRAPH_GRAPH_NOT_EXIST, "CompileGraph of an unknown graph");
  EXPECT(s.GetCompiledGraphSummary(9) == nullptr, "summary of an unknown graph");
  Calls calls;
  EXPECT(s.RunGraphAsync(9, in, calls.Callback()) == ge::FAILED, "RunGraphAsync of an unknown graph");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT(calls.Count() == 0, "RunGraphAsync of an unknown graph called back");
  (void)ge::GEGetErrorMsgV3();
  s.AddGraph(1, Parse(g_add_model));
  EXPECT(s.RunGraph(1, in, outs) == ge::SUCCESS, "RunGraph failed");
  EXPECT(s.RunGraphWithStreamAsync(1, nullptr, in, outs) == ge::FAILED, "stream-mode conflict is not FAILED");
  const std::string msg = ge::GEGetErrorMsgV3().GetString();
  EXPECT(msg.find("mutually exclusive") != std::string::npos, "conflict message: " + msg);
  // as GE's error manager formats it: "[PID: n] <time> Invalid_Argument_API_Call_Sequence(E10062): Failed to ..."
  EXPECT(msg.rfind("[PID: ", 0) == 0 &&
             msg.find("] ") != std::string::npos &&
             msg.find(" Invalid_Argument_API_Call_Sequence(E10062): Failed to call RunGraphWithStreamAsync") !=
                 std::string::npos,
         "conflict message not in GE's error-manager format: " + msg);
  // the error text is per thread and read-and-clear
  EXPECT(std::string(ge::GEGetErrorMsgV3().GetString()).empty(), "error text not cleared by reading");
  return "";
}

const std::map<std::string, std::function<std::string()>> &Tests() {
  static const std::map<std::string, std::function<std::string()>> tests = {
      {"callback_threads", CallbackThreads},
      {"fifo_next_job_after_callback", FifoNextJobAfterCallback},
      {"compile_queue_blocks_at_2048", CompileQueueBlocksAt2048},
      {"model_queue_full_fails_job", ModelQueueFullFailsJob},
      {"dynamic_graph_32_pending_block_the_executor", DynamicGraphHolds32Callbacks},
      {"compile_failure_stops_async_queue", CompileFailureStopsAsyncQueue},
      {"destroy_drops_queued_jobs", DestroyDropsQueuedJobs},
      {"finalize_drops_queued_jobs", FinalizeDropsQueuedJobs},
      {"process_wide_run_graph_try_lock", ProcessWideRunGraphTryLock},
      {"device_input_alignment_not_checked", DeviceInputAlignmentNotChecked},
      {"failed_implicit_compile_leaves_mode_unset", FailedImplicitCompileLeavesModeUnset},
      {"error_text_follows_work_stream", ErrorTextFollowsWorkStream},
      {"acl_recent_err_msg_null_when_none", AclRecentErrMsgIsNullWhenNone},
      {"load_twice_and_add_twice", LoadTwiceAndAddTwice},
      {"remove_running_graph_is_deferred", RemoveRunningGraphIsDeferred},
      {"compile_shapes_by_run_mode", CompileShapesByRunMode},
      {"error_codes", ErrorCodes},
  };
  return tests;
}
}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s add.onnx dyn.onnx bad.onnx [test...]\n", argv[0]);
    return 2;
  }
  g_add_model = ReadFile(argv[1]);
  g_dyn_model = ReadFile(argv[2]);
  g_bad_model = ReadFile(argv[3]);
  if (ge::GEInitializeV2({}) != ge::SUCCESS) return 2;
  std::vector<std::string> names;
  for (int i = 4; i < argc; ++i) names.emplace_back(argv[i]);
  if (names.empty())
    for (auto &kv : Tests()) names.push_back(kv.first);
  int failed = 0;
  for (const auto &name : names) {
    auto it = Tests().find(name);
    std::string why = it == Tests().end() ? "no such test" : it->second();
    if (why.empty()) {
      std::printf("PASS %s\n", name.c_str());
    } else {
      std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
      ++failed;
    }
    std::fflush(stdout);
  }
  ge::GEFinalizeV2();
  return failed == 0 ? 0 : 1;
}
