// Shim: a native-only RunGraphAsync driver for benchmarks (ga_bench_native_run_graph_async): the same GE calls the
// event-loop layer makes, with no Python in the loop, to measure the limit the Python layer is compared with.
#include <chrono>
#include <condition_variable>

#include "shim_internal.h"

namespace {
struct Window {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t outstanding = 0;
  uint64_t failures = 0;
};
}  // namespace

extern "C" ga_status ga_bench_native_run_graph_async(ga_session *session, uint32_t graph_id,
                                                     const ga_tensor_desc *inputs, size_t input_count,
                                                     uint64_t runs, uint32_t in_flight, uint64_t *elapsed_ns) {
  const char *api = "GeSession::RunGraphAsync";
  if (session == nullptr || elapsed_ns == nullptr || in_flight == 0)
    return shim::FailWith(api, shim::kParamInvalid, "session, elapsed_ns and in_flight > 0 are required");
  shim::ClearErrors();
  std::vector<gert::Tensor> in;
  std::string error;
  if (!shim::ToGertTensors(inputs, input_count, &in, &error)) return shim::FailWith(api, shim::kParamInvalid, error);
  ge::GeSession *ge = shim::NativeSession(session);
  Window w;
  auto callback = [&w](ge::Status st, std::vector<gert::Tensor> &) {
    std::lock_guard<std::mutex> lk(w.mu);
    if (st != ge::SUCCESS) ++w.failures;
    --w.outstanding;
    w.cv.notify_one();
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < runs; ++i) {
    {
      std::unique_lock<std::mutex> lk(w.mu);
      w.cv.wait(lk, [&] { return w.outstanding < in_flight; });
      ++w.outstanding;
    }
    const ge::Status st = ge->RunGraphAsync(graph_id, in, callback);
    if (st != ge::SUCCESS) {
      std::unique_lock<std::mutex> lk(w.mu);
      --w.outstanding;
      w.cv.wait(lk, [&] { return w.outstanding == 0; });
      return shim::Fail(api, st);
    }
  }
  std::unique_lock<std::mutex> lk(w.mu);
  w.cv.wait(lk, [&] { return w.outstanding == 0; });
  *elapsed_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  if (w.failures != 0)
    return shim::FailWith(api, ge::FAILED, std::to_string(w.failures) + " of the runs failed in their callback");
  return 0;
}
