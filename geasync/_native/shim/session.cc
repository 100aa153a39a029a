// Shim: sessions, graphs, the three run modes and external allocators over ge::GeSession.
// RunGraphAsync completions go to a completion queue; jobs the runtime drops without a callback (session
// destroyed, GE finalised, queued behind a pre-run failure that stopped the session's async queue) are reported as
// "abandoned" so no awaiting task can hang.
#include <pthread.h>

#include <cstring>
#include <set>

#include "parser/onnx_parser.h"
#include "shim_internal.h"

namespace {
// One RunGraphAsync submission the runtime has not called back yet.
struct Request {
  ga_completion_queue *queue;
  uint64_t token;
  std::thread::id submitter;  // whose GE error stream the request's workers write to
};

// Outstanding requests of a session, shared with the callbacks (which may outlive ga_session bookkeeping).
// Request ids follow the order in which GE queued the requests (submit_mu keeps id and push together).
struct Outstanding {
  std::mutex submit_mu;
  std::mutex mu;
  std::map<uint64_t, Request> requests;  // by request id
  uint64_t next_id = 1;
  uint64_t stopped_by = 0;  // the request whose pre-run failure stopped GE's async queue of the session
  std::string stopped_why;  // what the requests behind it are told
};

// GE's RunGraphAsync pre-run thread (GraphManager::PreRunThreadV2 names it so; pthread names keep 15 characters).
// Every callback GE makes there is GraphManager::ReturnError, which then stops the session's async queue for good.
bool OnPreRunThread() {
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return false;
  return std::strncmp(name, "ge_comp_prerun", 14) == 0;
}

// While a thread is inside ga_session_run_graph_async, a callback GE makes on that same thread (mode conflict)
// reports through the submit's return value instead of the queue.
struct SyncCallbackSlot {
  uint64_t request_id = 0;
  bool called = false;
  std::string error;
};
thread_local SyncCallbackSlot *t_sync_slot = nullptr;

// Bridges a Python allocator (function pointers from cffi) to ge::Allocator. GE calls Malloc on the thread that
// called into the runtime; blocks are freed by ga_tensor_destroy on a Python thread. Each block keeps the bridge
// alive; the bridge tells Python when it is gone (release_fn), so Python can drop its own reference.
class AllocatorBridge : public ge::Allocator, public std::enable_shared_from_this<AllocatorBridge> {
 public:
  AllocatorBridge(ga_alloc_malloc_fn m, ga_alloc_free_fn f, ga_alloc_release_fn r, void *user)
      : malloc_fn_(m), free_fn_(f), release_fn_(r), user_(user) {
    shim::Live().allocators.fetch_add(1);
  }
  ~AllocatorBridge() override {
    if (release_fn_ != nullptr) release_fn_(user_);
    shim::Live().allocators.fetch_sub(1);
  }
  struct Block : ge::MemBlock {
    Block(ge::Allocator &a, void *p, size_t n, std::shared_ptr<AllocatorBridge> keep)
        : ge::MemBlock(a, p, n), keep_alive(std::move(keep)) {}
    std::shared_ptr<AllocatorBridge> keep_alive;
  };
  ge::MemBlock *Malloc(size_t size) override {
    void *p = malloc_fn_(user_, size);
    if (p == nullptr) return nullptr;
    auto *b = new (std::nothrow) Block(*this, p, size, shared_from_this());
    if (b == nullptr) free_fn_(user_, p);
    return b;
  }
  void Free(ge::MemBlock *block) override {
    if (block == nullptr) return;
    free_fn_(user_, block->GetAddr());
    delete static_cast<Block *>(block);  // may release this bridge: nothing after this line
  }

 private:
  ga_alloc_malloc_fn malloc_fn_;
  ga_alloc_free_fn free_fn_;
  ga_alloc_release_fn release_fn_;
  void *user_;
};

// aclrtMalloc-backed allocator with no Python in it (see ga_session_register_default_allocator).
class DeviceAllocator : public ge::Allocator, public std::enable_shared_from_this<DeviceAllocator> {
 public:
  DeviceAllocator() { shim::Live().allocators.fetch_add(1); }
  ~DeviceAllocator() override { shim::Live().allocators.fetch_sub(1); }
  struct Block : ge::MemBlock {
    Block(ge::Allocator &a, void *p, size_t n, std::shared_ptr<DeviceAllocator> keep)
        : ge::MemBlock(a, p, n), keep_alive(std::move(keep)) {}
    std::shared_ptr<DeviceAllocator> keep_alive;
  };
  ge::MemBlock *Malloc(size_t size) override {
    void *p = nullptr;
    if (aclrtMalloc(&p, size == 0 ? 1 : size, ACL_MEM_MALLOC_NORMAL_ONLY) != ACL_SUCCESS) return nullptr;
    auto *b = new (std::nothrow) Block(*this, p, size, shared_from_this());
    if (b == nullptr) (void)aclrtFree(p);
    return b;
  }
  void Free(ge::MemBlock *block) override {
    if (block == nullptr) return;
    (void)aclrtFree(block->GetAddr());
    delete static_cast<Block *>(block);  // may release this allocator: nothing after this line
  }
};

void AbandonAll(Outstanding &o, const std::string &why) {
  std::map<uint64_t, Request> left;
  {
    std::lock_guard<std::mutex> lk(o.mu);
    left.swap(o.requests);
  }
  for (auto &kv : left) {
    shim::CqPush(kv.second.queue, kv.second.token, ge::FAILED, GA_COMPLETION_ABANDONED, nullptr, why);
    shim::CqRelease(kv.second.queue);
  }
}

// GE stopped the session's async queue at request `failed`: the requests GE queued after it are dropped without
// callbacks. Completes them now as abandoned, naming the failure, so nothing waits for a callback that cannot come.
void AbandonQueuedBehind(Outstanding &o, uint64_t failed, ga_status status, const std::string &text) {
  const std::string why = "GE stopped this session's RunGraphAsync queue when an earlier request failed before "
                          "running (status " + std::to_string(status) + (text.empty() ? "" : ": " + text) +
                          "); GE drops the requests queued behind it without calling them back";
  std::map<uint64_t, Request> left;
  {
    std::lock_guard<std::mutex> lk(o.mu);
    if (o.stopped_by != 0) return;
    o.stopped_by = failed;
    o.stopped_why = why;
    auto from = o.requests.upper_bound(failed);
    left.insert(from, o.requests.end());
    o.requests.erase(from, o.requests.end());
  }
  for (auto &kv : left) {
    shim::CqPush(kv.second.queue, kv.second.token, ge::FAILED, GA_COMPLETION_ABANDONED, nullptr, why);
    shim::CqRelease(kv.second.queue);
  }
}

std::mutex g_sessions_mu;
std::set<ga_session *> &Sessions() {
  static auto *s = new std::set<ga_session *>();
  return *s;
}
}  // namespace

struct ga_session {
  std::unique_ptr<ge::GeSession> session;
  std::shared_ptr<Outstanding> outstanding = std::make_shared<Outstanding>();
};

namespace shim {
ge::GeSession *NativeSession(ga_session *session) { return session->session.get(); }
}  // namespace shim

extern "C" {

const char *ga_backend_name(void) { return GEASYNC_BACKEND_NAME; }

ga_status ga_finalize(void) {
  shim::ClearErrors();
  const ge::Status st = ge::GEFinalizeV2();
  // GEFinalizeV2 joined every worker and dropped queued jobs without callbacks: report them as abandoned.
  std::vector<std::shared_ptr<Outstanding>> all;
  {
    std::lock_guard<std::mutex> lk(g_sessions_mu);
    for (ga_session *s : Sessions()) all.push_back(s->outstanding);
  }
  for (auto &o : all) AbandonAll(*o, "GE was finalized (GEFinalizeV2) before this RunGraphAsync job ran");
  if (st != ge::SUCCESS) return shim::Fail("GEFinalizeV2", st);
  return 0;
}

ga_status ga_session_create(const ga_options *options, ga_session **out) {
  if (out == nullptr) return shim::FailWith("GeSession", shim::kParamInvalid, "out is null");
  shim::ClearErrors();
  const auto opts = shim::ToMap(options);
  // GeSession's constructor has no status (it reports a failure only as text): a bad device id would be a bare
  // FAILED here, where GEInitializeV2 refuses it with PARAM_INVALID, so the shim checks it for every session.
  const std::string bad_device = shim::BadDeviceOption(opts);
  if (!bad_device.empty()) return shim::FailWith("GeSession", shim::kParamInvalid, bad_device);
  auto *s = new (std::nothrow) ga_session();
  if (s == nullptr) return shim::FailWith("GeSession", shim::kMemallocFailed, "out of memory");
  s->session.reset(new (std::nothrow) ge::GeSession(opts));
  // GeSession reports construction failures only through the error context.
  std::string error = s->session ? ge::GEGetErrorMsgV3().GetString() : "out of memory";
  if (!error.empty()) {
    delete s;
    return shim::FailWith("GeSession", ge::FAILED, error);
  }
  {
    std::lock_guard<std::mutex> lk(g_sessions_mu);
    Sessions().insert(s);
  }
  shim::Live().sessions.fetch_add(1);
  *out = s;
  return 0;
}

void ga_session_destroy(ga_session *session) {
  if (session == nullptr) return;
  {
    std::lock_guard<std::mutex> lk(g_sessions_mu);
    Sessions().erase(session);
  }
  session->session.reset();  // joins GE's threads; queued jobs are dropped without callbacks
  AbandonAll(*session->outstanding,
             "the session was closed before GE called this RunGraphAsync job back (GE drops unfinished jobs "
             "without calling back)");
  delete session;
  shim::Live().sessions.fetch_sub(1);
}

uint64_t ga_session_id(const ga_session *session) {
  return session == nullptr ? 0 : session->session->GetSessionId();
}

ga_status ga_graph_parse_onnx(const void *buffer, size_t size, const ga_options *parser_params, ga_graph **out) {
  if (out == nullptr) return shim::FailWith("aclgrphParseONNXFromMem", shim::kParamInvalid, "out is null");
  shim::ClearErrors();
  auto *g = new (std::nothrow) ga_graph();
  if (g == nullptr) return shim::FailWith("aclgrphParseONNXFromMem", shim::kMemallocFailed, "out of memory");
  const ge::graphStatus st =
      ge::aclgrphParseONNXFromMem(static_cast<const char *>(buffer), size, shim::ToMap(parser_params), g->graph);
  if (st != ge::GRAPH_SUCCESS) {
    delete g;
    return shim::Fail("aclgrphParseONNXFromMem", st);
  }
  shim::Live().graphs.fetch_add(1);
  *out = g;
  return 0;
}

void ga_graph_destroy(ga_graph *graph) {
  if (graph == nullptr) return;
  delete graph;
  shim::Live().graphs.fetch_sub(1);
}

#define SHIM_SESSION(api)                                                                    \
  if (session == nullptr) return shim::FailWith(api, shim::kParamInvalid, "session is null"); \
  shim::ClearErrors()

ga_status ga_session_add_graph(ga_session *session, uint32_t graph_id, const ga_graph *graph,
                               const ga_options *options) {
  SHIM_SESSION("GeSession::AddGraph");
  if (graph == nullptr) return shim::FailWith("GeSession::AddGraph", shim::kParamInvalid, "graph is null");
  const ge::Status st = session->session->AddGraph(graph_id, graph->graph, shim::ToMap(options));
  return st == ge::SUCCESS ? 0 : shim::Fail("GeSession::AddGraph", st);
}

ga_status ga_session_add_graph_clone(ga_session *session, uint32_t graph_id, const ga_graph *graph,
                                     const ga_options *options) {
  SHIM_SESSION("GeSession::AddGraphClone");
  if (graph == nullptr) return shim::FailWith("GeSession::AddGraphClone", shim::kParamInvalid, "graph is null");
  const ge::Status st = session->session->AddGraphClone(graph_id, graph->graph, shim::ToMap(options));
  return st == ge::SUCCESS ? 0 : shim::Fail("GeSession::AddGraphClone", st);
}

ga_status ga_session_remove_graph(ga_session *session, uint32_t graph_id) {
  SHIM_SESSION("GeSession::RemoveGraph");
  const ge::Status st = session->session->RemoveGraph(graph_id);
  return st == ge::SUCCESS ? 0 : shim::Fail("GeSession::RemoveGraph", st);
}

ga_status ga_session_compile_graph(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                                   size_t input_count, int with_inputs) {
  SHIM_SESSION("GeSession::CompileGraph");
  ge::Status st;
  if (with_inputs == 0) {
    st = session->session->CompileGraph(graph_id);
  } else {
    if (input_count > 0 && inputs == nullptr)
      return shim::FailWith("GeSession::CompileGraph", shim::kParamInvalid, "inputs is null");
    std::vector<ge::Tensor> descs;
    for (size_t i = 0; i < input_count; ++i) {
      const auto &d = inputs[i];
      std::vector<int64_t> dims(d.dims, d.dims + (d.ndim > 25 ? 25 : d.ndim));
      descs.emplace_back(ge::TensorDesc(ge::Shape(dims), ge::FORMAT_ND, static_cast<ge::DataType>(d.dtype)));
    }
    st = session->session->CompileGraph(graph_id, descs);
  }
  return st == ge::SUCCESS ? 0 : shim::Fail("GeSession::CompileGraph", st);
}

ga_status ga_session_load_graph(ga_session *session, uint32_t graph_id, const ga_options *options, void *stream) {
  SHIM_SESSION("GeSession::LoadGraph");
  if (stream != nullptr) {
    const aclError e = shim::EnterStreamDevice(stream);
    if (e != ACL_SUCCESS) return shim::AclFail("aclrtSetDevice", e);
  }
  const ge::Status st = session->session->LoadGraph(graph_id, shim::ToMap(options), stream);
  return st == ge::SUCCESS ? 0 : shim::Fail("GeSession::LoadGraph", st);
}

int ga_session_is_graph_need_rebuild(ga_session *session, uint32_t graph_id) {
  if (session == nullptr) return 1;
  return session->session->IsGraphNeedRebuild(graph_id) ? 1 : 0;
}

ga_status ga_session_get_compiled_graph_summary(ga_session *session, uint32_t graph_id, ga_graph_summary *summary,
                                                ga_tensor_desc *output_descs, size_t output_capacity) {
  SHIM_SESSION("GeSession::GetCompiledGraphSummary");
  if (summary == nullptr)
    return shim::FailWith("GeSession::GetCompiledGraphSummary", shim::kParamInvalid, "summary is null");
  ge::CompiledGraphSummaryPtr s = session->session->GetCompiledGraphSummary(graph_id);
  if (!s) {
    return shim::Fail("GeSession::GetCompiledGraphSummary", shim::kGraphNotBuilt,
                      "graph " + std::to_string(graph_id) + " is not compiled (compile, load or run it first)");
  }
  summary->is_static = s->IsStatic() ? 1 : 0;
  size_t v = 0;
  summary->const_memory_size = s->GetConstMemorySize(v) == ge::SUCCESS ? v : 0;
  summary->feature_memory_size = s->GetFeatureMemorySize(v) == ge::SUCCESS ? v : 0;
  summary->stream_num = s->GetStreamNum(v) == ge::SUCCESS ? v : 0;
  summary->event_num = s->GetEventNum(v) == ge::SUCCESS ? v : 0;
  std::vector<ge::Shape> shapes;
  std::vector<ge::DataType> dtypes;
  (void)s->GetOutputShapes(shapes);
  (void)s->GetOutputDtypes(dtypes);
  summary->output_count = shapes.size();
  for (size_t i = 0; i < shapes.size() && i < output_capacity && output_descs != nullptr; ++i) {
    ga_tensor_desc &d = output_descs[i];
    d.data = nullptr;
    d.size = 0;
    d.placement = GA_PLACEMENT_HOST;
    d.dtype = i < dtypes.size() ? static_cast<int32_t>(dtypes[i]) : -1;
    const auto dims = shapes[i].GetDims();
    d.ndim = static_cast<uint32_t>(dims.size() > 25 ? 25 : dims.size());
    for (uint32_t k = 0; k < d.ndim; ++k) d.dims[k] = dims[k];
  }
  return 0;
}

ga_status ga_session_run_graph(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                               size_t input_count, ga_output_info *infos, size_t capacity, size_t *output_count,
                               ga_outputs **overflow) {
  const char *api = "GeSession::RunGraph";
  SHIM_SESSION(api);
  if (output_count == nullptr || overflow == nullptr || (infos == nullptr && capacity != 0))
    return shim::FailWith(api, shim::kParamInvalid, "output_count, overflow or infos is null");
  *output_count = 0;
  *overflow = nullptr;
  shim::InputScratch scratch;
  std::vector<gert::Tensor> &in = *scratch.get();
  std::vector<gert::Tensor> out;
  std::string error;
  if (!shim::ToGertTensors(inputs, input_count, &in, &error)) return shim::FailWith(api, shim::kParamInvalid, error);
  ge::Status st;
  {
    // GE's RunGraph fails a concurrent caller (a process-wide try-lock): synchronous runs wait for each other here,
    // with the GIL released, instead of failing.
    static std::mutex sync_runs;
    std::lock_guard<std::mutex> lock(sync_runs);
    st = session->session->RunGraph(graph_id, in, out);
  }
  if (st != ge::SUCCESS) return shim::Fail(api, st);
  if (out.size() > capacity) {  // more outputs than the caller's buffer: it grows it and takes the list
    *overflow = shim::MakeOutputs(std::move(out));
    if (*overflow == nullptr) return shim::FailWith(api, shim::kMemallocFailed, "out of memory");
    *output_count = (*overflow)->items.size();
    return 0;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    auto *h = new (std::nothrow) ga_tensor{std::move(out[i])};
    if (h == nullptr) {
      for (size_t k = 0; k < i; ++k) ga_tensor_destroy(infos[k].handle);
      return shim::FailWith(api, shim::kMemallocFailed, "out of memory");
    }
    shim::Live().tensors.fetch_add(1);
    shim::Describe(h, &infos[i]);
  }
  *output_count = out.size();
  return 0;
}

ga_status ga_session_run_graph_with_stream_async(ga_session *session, uint32_t graph_id, void *stream,
                                                 const ga_tensor_desc *inputs, size_t input_count,
                                                 ga_outputs **outputs) {
  const char *api = "GeSession::RunGraphWithStreamAsync";
  SHIM_SESSION(api);
  if (outputs == nullptr) return shim::FailWith(api, shim::kParamInvalid, "outputs is null");
  const aclError e = shim::EnterStreamDevice(stream);
  if (e != ACL_SUCCESS) return shim::AclFail("aclrtSetDevice", e);
  shim::InputScratch scratch;
  std::vector<gert::Tensor> &in = *scratch.get();
  std::vector<gert::Tensor> out;
  std::string error;
  if (!shim::ToGertTensors(inputs, input_count, &in, &error)) return shim::FailWith(api, shim::kParamInvalid, error);
  const ge::Status st = session->session->RunGraphWithStreamAsync(graph_id, stream, in, out);
  if (st != ge::SUCCESS) return shim::Fail(api, st);
  *outputs = shim::MakeOutputs(std::move(out));
  if (*outputs == nullptr) return shim::FailWith(api, shim::kMemallocFailed, "out of memory");
  return 0;
}

ga_status ga_session_run_graph_with_stream_completion(ga_session *session, uint32_t graph_id, void *stream,
                                                      const ga_tensor_desc *inputs, size_t input_count,
                                                      ga_outputs **outputs, ga_completion_queue *queue,
                                                      uint64_t token) {
  if (queue == nullptr) return shim::FailWith("aclrtLaunchHostFunc", shim::kParamInvalid, "queue is null");
  const ga_status run = ga_session_run_graph_with_stream_async(session, graph_id, stream, inputs, input_count,
                                                               outputs);
  if (run != 0) return run;
  const ga_status launched = ga_stream_launch_completion(stream, queue, token);
  if (launched == 0) return 0;
  // The run is enqueued but nothing would say when the stream has passed it: wait for it here, so the caller may
  // release the inputs when this returns; the outputs nobody will take go with it.
  const std::string api = ga_last_api();
  const std::string text = ga_last_error();
  const aclError synced = aclrtSynchronizeStream(stream);
  ga_outputs_destroy(*outputs);
  *outputs = nullptr;
  return shim::FailWith(api.c_str(), launched,
                        text + (synced == ACL_SUCCESS ? " (the run was enqueued; geasync waited for the stream to "
                                                        "finish it)"
                                                      : " (the run was enqueued, and synchronising the stream "
                                                        "failed too)"));
}

ga_status ga_session_run_graph_async(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                                     size_t input_count, ga_completion_queue *queue, uint64_t token) {
  const char *api = "GeSession::RunGraphAsync";
  SHIM_SESSION(api);
  if (queue == nullptr) return shim::FailWith(api, shim::kParamInvalid, "queue is null");
  shim::InputScratch scratch;
  std::vector<gert::Tensor> &in = *scratch.get();
  std::string error;
  if (!shim::ToGertTensors(inputs, input_count, &in, &error)) return shim::FailWith(api, shim::kParamInvalid, error);

  std::shared_ptr<Outstanding> outstanding = session->outstanding;
  std::lock_guard<std::mutex> submit_order(outstanding->submit_mu);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lk(outstanding->mu);
    if (outstanding->stopped_by != 0) {
      // GE calls the failing request back before it stops the queue: a submit in between is accepted and then
      // never run. The pre-run thread has ended either way, so refuse as GE does once the queue is stopped.
      return shim::FailWith(api, static_cast<ga_status>(ge::FAILED),
                            outstanding->stopped_why + "; it runs no request submitted after that either");
    }
    id = outstanding->next_id++;
    outstanding->requests[id] = Request{queue, token, std::this_thread::get_id()};
  }
  shim::CqRetain(queue);
  shim::Live().pending_completions.fetch_add(1);

  // Runs on a GE thread (or on this thread for a mode conflict). Never enters Python: it moves the outputs
  // into a record, captures the error text on the thread that saw the failure, and signals the queue.
  auto callback = [outstanding, id](ge::Status status, std::vector<gert::Tensor> &outs) {
    Request req{};
    {
      std::lock_guard<std::mutex> lk(outstanding->mu);
      auto it = outstanding->requests.find(id);
      if (it == outstanding->requests.end()) return;  // already reported (abandoned)
      req = it->second;
      outstanding->requests.erase(it);
    }
    std::string text = status == ge::SUCCESS ? std::string() : shim::AsyncRunErrorText(req.submitter);
    if (status != ge::SUCCESS && text.empty()) {
      text = "GeSession::RunGraphAsync: the run failed with status " + std::to_string(status) +
             " (GE's message was not available on its callback thread)";
    }
    // A pre-run failure stops GE's queue: the requests behind it are abandoned after this one's completion is
    // queued, so a consumer learns of the failure before it meets their SessionBrokenError.
    const bool stops_queue = status != ge::SUCCESS && OnPreRunThread();
    if (t_sync_slot != nullptr && t_sync_slot->request_id == id) {
      t_sync_slot->called = true;
      t_sync_slot->error = std::move(text);
      shim::CqRelease(req.queue);
      shim::Live().pending_completions.fetch_sub(1);
      return;
    }
    ga_outputs *o = nullptr;
    if (status == ge::SUCCESS) {
      o = shim::MakeOutputs(std::move(outs));
      if (o == nullptr) {
        status = shim::kMemallocFailed;
        text = "out of memory moving RunGraphAsync outputs";
      }
    }
    const std::string failure = stops_queue ? text : std::string();
    shim::CqPush(req.queue, req.token, status, GA_COMPLETION_RUN, o, text);
    shim::CqRelease(req.queue);
    if (stops_queue) AbandonQueuedBehind(*outstanding, id, status, failure);
  };

  SyncCallbackSlot slot;
  slot.request_id = id;
  t_sync_slot = &slot;
  const ge::Status st = session->session->RunGraphAsync(graph_id, in, callback);
  t_sync_slot = nullptr;
  if (st == ge::SUCCESS) return 0;
  if (!slot.called) {
    // No callback will come for a refused submit: forget the request.
    bool erased;
    {
      std::lock_guard<std::mutex> lk(outstanding->mu);
      erased = outstanding->requests.erase(id) == 1;
    }
    if (erased) {
      shim::CqRelease(queue);
      shim::Live().pending_completions.fetch_sub(1);
    }
    return shim::Fail(api, st);
  }
  return shim::Fail(api, st, slot.error);
}

size_t ga_run_graph_async_batch(const ga_async_submit *items, size_t count, ga_completion_queue *queue) {
  if (items == nullptr || queue == nullptr) return 0;
  size_t refused = 0;
  for (size_t i = 0; i < count; ++i) {
    const ga_async_submit &it = items[i];
    const ga_status st =
        ga_session_run_graph_async(it.session, it.graph_id, it.inputs, it.input_count, queue, it.token);
    if (st != 0) {
      ++refused;
      shim::Live().pending_completions.fetch_add(1);
      shim::CqPush(queue, it.token, st, GA_COMPLETION_REFUSED, nullptr, ga_last_error());
    }
  }
  return refused;
}

ga_status ga_session_register_external_allocator(ga_session *session, void *stream, ga_alloc_malloc_fn malloc_fn,
                                                 ga_alloc_free_fn free_fn, ga_alloc_release_fn release_fn,
                                                 void *user) {
  const char *api = "GeSession::RegisterExternalAllocator";
  SHIM_SESSION(api);
  if (malloc_fn == nullptr || free_fn == nullptr)
    return shim::FailWith(api, shim::kParamInvalid, "malloc and free callbacks are required");
  std::shared_ptr<AllocatorBridge> bridge;
  try {
    bridge = std::make_shared<AllocatorBridge>(malloc_fn, free_fn, release_fn, user);
  } catch (...) {
    return shim::FailWith(api, shim::kMemallocFailed, "out of memory");
  }
  const ge::Status st = session->session->RegisterExternalAllocator(stream, bridge);
  return st == ge::SUCCESS ? 0 : shim::Fail(api, st);  // on failure `bridge` dies here and calls release_fn
}

// A native aclrtMalloc-backed allocator for a stream that has none (what GE's Python package does): outputs then
// stay valid after the graph is unloaded or the session closed, unlike GE's built-in per-model allocator.
ga_status ga_session_register_default_allocator(ga_session *session, void *stream) {
  const char *api = "GeSession::RegisterExternalAllocator";
  SHIM_SESSION(api);
  std::shared_ptr<DeviceAllocator> alloc;
  try {
    alloc = std::make_shared<DeviceAllocator>();
  } catch (...) {
    return shim::FailWith(api, shim::kMemallocFailed, "out of memory");
  }
  const ge::Status st = session->session->RegisterExternalAllocator(stream, alloc);
  return st == ge::SUCCESS ? 0 : shim::Fail(api, st);
}

ga_status ga_session_unregister_external_allocator(ga_session *session, void *stream) {
  const char *api = "GeSession::UnregisterExternalAllocator";
  SHIM_SESSION(api);
  const ge::Status st = session->session->UnregisterExternalAllocator(stream);
  return st == ge::SUCCESS ? 0 : shim::Fail(api, st);
}

}  // extern "C"
