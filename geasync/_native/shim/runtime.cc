// Shim: process-level calls (GE initialise/finalise, the per-thread error slot, live counters) and the
// small helpers shared by the other shim files (options, device context, tensor conversion).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>

#include "shim_internal.h"

namespace shim {
namespace {
thread_local std::string t_error;
thread_local std::string t_api;
std::atomic<int32_t> g_default_device{0};
}  // namespace

Counters &Live() {
  static Counters *c = new Counters();  // leaked: read during interpreter exit
  return *c;
}

ga_status Fail(const char *api, ga_status status, const std::string &fallback) {
  std::string msg = ge::GEGetErrorMsgV3().GetString();
  if (msg.empty()) msg = fallback;
  if (msg.empty()) msg = std::string(api) + " returned status " + std::to_string(status) + " without a message";
  return FailWith(api, status, msg);
}

ga_status FailWith(const char *api, ga_status status, const std::string &message) {
  t_api = api;
  t_error = message;
  return status;
}

std::string AclRecentText() {
  const char *text = aclGetRecentErrMsg();
  return text == nullptr ? std::string() : std::string(text);
}

ga_status AclFail(const char *api, aclError e) {
  std::string msg = AclRecentText();
  if (msg.empty()) msg = std::string(api) + " failed with ACL error " + std::to_string(e);
  return FailWith(api, static_cast<ga_status>(e), msg);
}

// GE keeps error text per work stream, and the workers running an async request adopt the submitter's stream.
// So a clear on the submitting thread can take the text of its own in-flight request before that request's
// callback reads it. While async requests are pending, a clear keeps what it took, by thread, for that callback.
namespace {
std::mutex &TakenMu() {
  static std::mutex *m = new std::mutex();  // leaked: GE threads may report during exit
  return *m;
}
std::map<std::thread::id, std::string> &Taken() {
  static auto *m = new std::map<std::thread::id, std::string>();
  return *m;
}
}  // namespace

void ClearErrors() {
  if (Live().pending_completions.load(std::memory_order_acquire) == 0) {
    (void)ge::GEGetErrorMsgV3();
    std::lock_guard<std::mutex> lk(TakenMu());
    Taken().clear();  // no request left to claim what earlier clears kept: stale, never to label a later failure
  } else {
    std::lock_guard<std::mutex> lk(TakenMu());
    std::string text = ge::GEGetErrorMsgV3().GetString();
    if (!text.empty()) Taken()[std::this_thread::get_id()] = std::move(text);
  }
  (void)aclGetRecentErrMsg();
}

std::string AsyncRunErrorText(std::thread::id submitter) {
  std::lock_guard<std::mutex> lk(TakenMu());
  std::string text = ge::GEGetErrorMsgV3().GetString();
  if (text.empty()) {
    auto it = Taken().find(submitter);
    if (it != Taken().end()) {
      text = std::move(it->second);
      Taken().erase(it);
    }
  }
  return text;
}

std::map<ge::AscendString, ge::AscendString> ToMap(const ga_options *options) {
  std::map<ge::AscendString, ge::AscendString> m;
  if (options == nullptr) return m;
  for (size_t i = 0; i < options->count; ++i) {
    if (options->keys[i] == nullptr || options->values[i] == nullptr) continue;
    m[ge::AscendString(options->keys[i])] = ge::AscendString(options->values[i]);
  }
  return m;
}

aclError EnsureDevice(int32_t device) {
  thread_local int32_t current = -1;
  if (current == device) return ACL_SUCCESS;
  const aclError e = aclrtSetDevice(device);
  if (e == ACL_SUCCESS) current = device;
  return e;
}

std::string BadDeviceOption(const std::map<ge::AscendString, ge::AscendString> &options) {
  for (const char *key : {"ge.exec.deviceId", "ge.session_device_id"}) {
    auto it = options.find(ge::AscendString(key));
    if (it == options.end()) continue;
    const char *text = it->second.GetString();
    char *end = nullptr;
    const long v = std::strtol(text, &end, 10);
    uint32_t count = 0;
    const bool counted = aclrtGetDeviceCount(&count) == ACL_SUCCESS;
    if (*text == '\0' || *end != '\0' || v < -1 || (counted && v >= static_cast<long>(count))) {
      const std::string range = counted ? " (0.." + std::to_string(count == 0 ? 0 : count - 1) + ")" : "";
      return std::string("option ") + key + "='" + text + "' is not a device id of this machine" + range;
    }
  }
  return std::string();
}

int32_t DefaultDevice() { return g_default_device.load(); }
void SetDefaultDevice(int32_t device) { g_default_device.store(device); }

thread_local std::vector<gert::Tensor> InputScratch::shared_;
thread_local bool InputScratch::busy_ = false;

bool ToGertTensors(const ga_tensor_desc *descs, size_t count, std::vector<gert::Tensor> *out, std::string *error) {
  out->clear();
  if (count > 0 && descs == nullptr) {
    *error = "inputs is null but input_count is " + std::to_string(count);
    return false;
  }
  out->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const ga_tensor_desc &d = descs[i];
    if (d.ndim > gert::Shape::kMaxDimNum) {
      *error = "input " + std::to_string(i) + " has " + std::to_string(d.ndim) + " dims; GE allows at most 25";
      return false;
    }
    gert::StorageShape shape;
    for (uint32_t k = 0; k < d.ndim; ++k) {
      shape.MutableOriginShape().AppendDim(d.dims[k]);
      shape.MutableStorageShape().AppendDim(d.dims[k]);
    }
    gert::Tensor t(shape, gert::StorageFormat(ge::FORMAT_ND, ge::FORMAT_ND, {}), static_cast<ge::DataType>(d.dtype));
    const auto placement = d.placement == GA_PLACEMENT_DEVICE ? gert::kOnDeviceHbm : gert::kOnHost;
    t.SetData(gert::TensorData(d.data, nullptr, d.size, placement));  // borrowed: no manager
    out->push_back(std::move(t));
  }
  return true;
}

namespace {
// The output layouts named so far (ga_output_info.layout): the key is the description's words (size, dtype,
// placement, ndim, dims), the value its id. Ids are never reused, so a binding may keep what it derived from one.
struct Layouts {
  std::mutex mu;
  std::unordered_map<std::string, uint32_t> ids;
};
Layouts &KnownLayouts() {
  static Layouts *l = new Layouts();  // leaked: outputs may be described while the process exits
  return *l;
}
uint32_t LayoutId(const ga_output_info &info) {
  thread_local std::string key;  // reused: no allocation for a layout seen before
  const int64_t head[4] = {static_cast<int64_t>(info.size), info.dtype, info.placement, info.ndim};
  try {
    key.assign(reinterpret_cast<const char *>(head), sizeof head);
    key.append(reinterpret_cast<const char *>(info.dims), info.ndim * sizeof(int64_t));
    Layouts &l = KnownLayouts();
    std::lock_guard<std::mutex> lock(l.mu);
    const auto it = l.ids.find(key);
    if (it != l.ids.end()) return it->second;
    if (l.ids.size() >= GA_MAX_OUTPUT_LAYOUTS) return 0;  // unnamed: the binding reads the fields
    const auto id = static_cast<uint32_t>(l.ids.size() + 1);
    l.ids.emplace(key, id);
    return id;
  } catch (...) {  // out of memory: unnamed
    return 0;
  }
}
}  // namespace

void Describe(ga_tensor *handle, ga_output_info *info) {
  info->handle = handle;
  const gert::Tensor &t = handle->tensor;
  info->data = t.GetAddr();
  info->address = reinterpret_cast<uintptr_t>(info->data);
  info->size = t.GetSize();
  info->dtype = static_cast<int32_t>(t.GetDataType());
  info->placement = t.GetPlacement() == gert::kOnDeviceHbm ? GA_PLACEMENT_DEVICE : GA_PLACEMENT_HOST;
  const gert::Shape &shape = t.GetStorageShape();
  info->ndim = static_cast<uint32_t>(shape.GetDimNum());
  for (size_t k = 0; k < info->ndim; ++k) info->dims[k] = shape.GetDim(k);
  info->layout = LayoutId(*info);
}

ga_outputs *MakeOutputs(std::vector<gert::Tensor> &&tensors) {
  auto *outs = new (std::nothrow) ga_outputs();
  if (outs == nullptr) return nullptr;
  for (auto &t : tensors) {
    auto *h = new (std::nothrow) ga_tensor{std::move(t)};
    if (h == nullptr) {
      ga_outputs_destroy(outs);
      return nullptr;
    }
    Live().tensors.fetch_add(1);
    outs->items.push_back(h);
  }
  Live().outputs_lists.fetch_add(1);
  return outs;
}

}  // namespace shim

extern "C" {

ga_status ga_initialize(const ga_options *options) {
  shim::ClearErrors();
  const auto opts = shim::ToMap(options);
  // The same check as every session's (ga_session_create), so the first session's bad device id fails alike.
  const std::string bad_device = shim::BadDeviceOption(opts);
  if (!bad_device.empty()) return shim::FailWith("GEInitializeV2", shim::kParamInvalid, bad_device);
  const ge::Status st = ge::GEInitializeV2(opts);
  if (st != ge::SUCCESS) return shim::Fail("GEInitializeV2", st);
  for (const auto &kv : opts) {  // only once GE took it: a refused device id must not stay the process's default
    if (std::strcmp(kv.first.GetString(), "ge.exec.deviceId") == 0) {
      const long v = std::strtol(kv.second.GetString(), nullptr, 10);
      shim::SetDefaultDevice(v < 0 ? 0 : static_cast<int32_t>(v));
    }
  }
  return 0;
}

const char *ga_last_error(void) { return shim::t_error.c_str(); }
const char *ga_last_api(void) { return shim::t_api.c_str(); }

void ga_get_live_counters(ga_live_counters *out) {
  if (out == nullptr) return;
  auto &c = shim::Live();
  out->sessions = c.sessions.load();
  out->graphs = c.graphs.load();
  out->tensors = c.tensors.load();
  out->outputs_lists = c.outputs_lists.load();
  out->streams = c.streams.load();
  out->completion_queues = c.completion_queues.load();
  out->pending_completions = c.pending_completions.load();
  out->allocators = c.allocators.load();
}

size_t ga_outputs_take_all(ga_outputs *outputs, ga_output_info *infos, size_t capacity) {
  if (outputs == nullptr) return 0;
  const size_t n = outputs->items.size();
  if (n > capacity) return n;  // the caller grows its buffer and calls again; the list is left intact
  for (size_t i = 0; i < n; ++i) {
    shim::Describe(outputs->items[i], &infos[i]);
    outputs->items[i] = nullptr;  // taken: the list's destruction below leaves it alone
  }
  ga_outputs_destroy(outputs);
  return n;
}

void ga_outputs_destroy(ga_outputs *outputs) {
  if (outputs == nullptr) return;
  for (ga_tensor *t : outputs->items) ga_tensor_destroy(t);
  delete outputs;
  shim::Live().outputs_lists.fetch_sub(1);
}

void ga_tensor_destroy(ga_tensor *tensor) {
  if (tensor == nullptr) return;
  delete tensor;  // the TensorData manager returns the memory to its owner (GE block or allocator)
  shim::Live().tensors.fetch_sub(1);
}

void ga_tensor_destroy_with_data(ga_tensor *tensor, void * /*data*/) { ga_tensor_destroy(tensor); }

void ga_output_infos_release(ga_output_info *infos, size_t count) {
  if (infos == nullptr) return;
  for (size_t i = 0; i < count; ++i) {
    ga_tensor_destroy(infos[i].handle);
    infos[i].handle = nullptr;
  }
}

}  // extern "C"
