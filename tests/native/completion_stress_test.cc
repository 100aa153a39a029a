// Native stress test of the event-loop plumbing, for ThreadSanitizer (tools/tsan_stress.sh): completion queues
// fed by GE's runtime threads (RunGraphAsync, single and batched submits) and by ACL host functions on streams,
// drained by consumer threads the way hubs drain them (waiting on the fd, or watching the queue after a submit),
// with sessions created and destroyed under load and stream-mode runs alongside. Written against geasync.h (the shim's C ABI) only.
//   completion_stress_test <add.onnx> [seconds] [big.onnx]
// big.onnx (MatMul + Tanh + Add on two [256, 256] float inputs) is run by two more threads, big enough for the
// kernels to split their work over the intra-op pool while the other runs leave a core idle.
// Prints "PASS ..." and exits 0 when every submitted token completed exactly once and the live counters return
// to zero; TSan reports (halt_on_error) fail it.
#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "geasync.h"

namespace {

std::atomic<bool> g_failed{false};

void Fail(const char *what, ga_status st) {
  std::fprintf(stderr, "FAIL %s: status %u: %s\n", what, st, ga_last_error());
  g_failed = true;
}

struct Input {
  float a[16], b[16];
  ga_tensor_desc descs[2];
  Input() {
    for (int i = 0; i < 16; ++i) a[i] = b[i] = 1.0f;
    float *bufs[2] = {a, b};
    for (int k = 0; k < 2; ++k) {
      std::memset(&descs[k], 0, sizeof(descs[k]));
      descs[k].data = bufs[k];
      descs[k].size = sizeof(a);
      descs[k].dtype = 0;      // float32
      descs[k].placement = 1;  // host
      descs[k].ndim = 2;
      descs[k].dims[0] = 1;
      descs[k].dims[1] = 16;
    }
  }
};

// Threads of this process named "ge-intra-op" (the pool starts them on its first parallel region).
int IntraOpHelpers() {
  int n = 0;
  DIR *dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;  // no /proc: unknown, not a failure
  while (dirent *e = readdir(dir)) {
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (comm && std::getline(comm, name) && name == "ge-intra-op") ++n;
  }
  closedir(dir);
  return n;
}

// Two [256, 256] float inputs of 1/256 each.
struct BigInput {
  static constexpr int kSide = 256;
  std::vector<float> a, b;
  ga_tensor_desc descs[2];
  BigInput() : a(kSide * kSide, 1.0f / kSide), b(kSide * kSide, 1.0f / kSide) {
    float *bufs[2] = {a.data(), b.data()};
    for (int k = 0; k < 2; ++k) {
      std::memset(&descs[k], 0, sizeof(descs[k]));
      descs[k].data = bufs[k];
      descs[k].size = a.size() * sizeof(float);
      descs[k].dtype = 0;      // float32
      descs[k].placement = 1;  // host
      descs[k].ndim = 2;
      descs[k].dims[0] = kSide;
      descs[k].dims[1] = kSide;
    }
  }
};

// One consumer: owns a queue, drains it when its fd is readable, counts tokens.
struct Consumer {
  ga_completion_queue *queue = nullptr;
  std::atomic<uint64_t> submitted{0};
  uint64_t completed = 0;
  std::vector<uint8_t> seen;  // per token: completions received

  void Drain() {
    ga_completion records[64];
    ga_output_info infos[64];
    for (;;) {
      const size_t n = ga_cq_drain_outputs(queue, records, 64, infos, 64);
      size_t pos = 0;
      for (size_t i = 0; i < n; ++i) {
        ga_completion &c = records[i];
        if (c.token >= seen.size()) seen.resize(c.token * 2 + 1, 0);
        if (++seen[c.token] != 1) {
          std::fprintf(stderr, "FAIL token %llu completed twice\n", static_cast<unsigned long long>(c.token));
          g_failed = true;
        }
        if (c.output_count >= 0) {
          for (int k = 0; k < c.output_count; ++k) ga_tensor_destroy(infos[pos + k].handle);
          pos += c.output_count;
        } else if (c.output_count == -2) {
          ga_outputs_destroy(c.outputs);
        }
        if (c.error_message) ga_completion_release(&c);
        ++completed;
      }
      if (n < 64) return;
    }
  }
};

ga_session *NewSession(const std::string &model) {
  ga_session *s = nullptr;
  ga_status st = ga_session_create(nullptr, &s);
  if (st != 0) {
    Fail("ga_session_create", st);
    return nullptr;
  }
  ga_graph *g = nullptr;
  if ((st = ga_graph_parse_onnx(model.data(), model.size(), nullptr, &g)) != 0) Fail("parse", st);
  if (g && (st = ga_session_add_graph(s, 1, g, nullptr)) != 0) Fail("add_graph", st);
  ga_graph *g2 = nullptr;
  if ((st = ga_graph_parse_onnx(model.data(), model.size(), nullptr, &g2)) != 0) Fail("parse", st);
  if (g2 && (st = ga_session_add_graph(s, 2, g2, nullptr)) != 0) Fail("add_graph", st);
  ga_graph_destroy(g);
  ga_graph_destroy(g2);
  return s;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <add.onnx> [seconds]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;
  ga_status st = ga_initialize(nullptr);
  if (st != 0) {
    Fail("ga_initialize", st);
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<uint64_t> async_done{0}, host_done{0}, stream_runs{0}, sessions{0};

  // Loop-like pairs: a submitting thread and a draining thread per queue, sessions recycled under load.
  auto async_pair = [&](int id) {
    ga_status st;
    Consumer consumer;
    if ((st = ga_cq_create(&consumer.queue)) != 0) return Fail("ga_cq_create", st);
    std::atomic<bool> stop{false};
    std::thread drainer([&] {
      pollfd p{ga_cq_fd(consumer.queue), POLLIN, 0};
      while (!stop.load() || consumer.completed < consumer.submitted.load()) {
        poll(&p, 1, 10);
        consumer.Drain();
      }
    });
    Input input;
    uint64_t token = 0;
    while (Clock::now() < deadline && !g_failed) {
      ga_session *s = NewSession(model);
      if (!s) break;
      ++sessions;
      for (int round = 0; round < 20; ++round) {
        if (id % 2 == 0) {
          ++token;
          consumer.submitted.fetch_add(1);
          if ((st = ga_session_run_graph_async(s, 1, input.descs, 2, consumer.queue, token)) != 0) {
            consumer.submitted.fetch_sub(1);  // refused: no completion comes
          }
        } else {
          ga_async_submit items[8];
          for (auto &item : items) item = {s, 1, input.descs, 2, ++token};
          consumer.submitted.fetch_add(8);
          ga_run_graph_async_batch(items, 8, consumer.queue);  // refused ones complete on the queue
        }
      }
      if (token % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      ga_session_destroy(s);  // jobs still queued are completed as abandoned
    }
    stop = true;
    drainer.join();
    async_done += consumer.completed;
    ga_cq_destroy(consumer.queue);
  };

  // Streams: stream-mode runs and host functions completing on a queue, synchronize and destroy under load.
  auto stream_worker = [&] {
    ga_status st;
    Consumer consumer;
    if ((st = ga_cq_create(&consumer.queue)) != 0) return Fail("ga_cq_create", st);
    ga_session *s = NewSession(model);
    if (!s) return;
    Input input;
    uint64_t token = 0;
    while (Clock::now() < deadline && !g_failed) {
      void *stream = nullptr;
      if ((st = ga_stream_create(-1, &stream)) != 0) return Fail("ga_stream_create", st);
      if ((st = ga_session_register_default_allocator(s, stream)) != 0) Fail("register allocator", st);
      std::vector<ga_outputs *> held;  // the runs write them until the stream has passed them
      for (int k = 0; k < 10; ++k) {
        ga_outputs *outs = nullptr;
        if ((st = ga_session_run_graph_with_stream_async(s, 2, stream, input.descs, 2, &outs)) != 0)
          Fail("RunGraphWithStreamAsync", st);
        consumer.submitted.fetch_add(1);
        if ((st = ga_stream_launch_completion(stream, consumer.queue, ++token)) != 0) {
          consumer.submitted.fetch_sub(1);
          Fail("aclrtLaunchHostFunc", st);
        }
        if (outs) held.push_back(outs);
        ++stream_runs;
      }
      if (token % 20 == 0) {
        if ((st = ga_stream_synchronize(stream, 10000)) != 0) Fail("aclrtSynchronizeStream", st);
      }
      consumer.Drain();
      ga_session_unregister_external_allocator(s, stream);
      if ((st = ga_stream_destroy(stream)) != 0) Fail("aclrtDestroyStream", st);  // waits for the queued work
      for (ga_outputs *outs : held) ga_outputs_destroy(outs);  // then their memory goes back
    }
    while (consumer.completed < consumer.submitted.load()) {
      pollfd p{ga_cq_fd(consumer.queue), POLLIN, 0};
      poll(&p, 1, 10);
      consumer.Drain();
    }
    host_done += consumer.completed;
    ga_cq_destroy(consumer.queue);
    ga_session_destroy(s);
  };

  // A hub's submit path on one thread: submit 1-48 runs, watch the queue for a while (ga_cq_poll: producers
  // skip the fd meanwhile), else wait on the fd alone. A wake-up lost between the two ways of waiting shows as a
  // wait on the fd that never ends.
  std::atomic<uint64_t> polled_done{0};
  auto poller = [&] {
    ga_status st;
    Consumer consumer;
    if ((st = ga_cq_create(&consumer.queue)) != 0) return Fail("ga_cq_create", st);
    ga_session *s = NewSession(model);
    if (!s) return;
    Input input;
    uint64_t token = 0;
    unsigned budget_us = 0;
    while (Clock::now() < deadline && !g_failed) {
      const int burst = 1 + static_cast<int>(token % 48);  // completions keep arriving while it drains
      for (int k = 0; k < burst; ++k) {
        consumer.submitted.fetch_add(1);
        if ((st = ga_session_run_graph_async(s, 1, input.descs, 2, consumer.queue, ++token)) != 0) {
          consumer.submitted.fetch_sub(1);
          Fail("RunGraphAsync", st);
        }
      }
      while (consumer.completed < consumer.submitted.load() && !g_failed) {
        budget_us = (budget_us * 7 + 3) % 41;  // 0-40 us: runs found by the watch and runs that outlast it
        if (ga_cq_poll(consumer.queue, budget_us * 1000ull) == 0) {
          pollfd p{ga_cq_fd(consumer.queue), POLLIN, 0};
          if (poll(&p, 1, 10000) == 0) {
            std::fprintf(stderr, "FAIL lost wake-up: %llu completions outstanding and the fd stayed silent 10 s\n",
                         static_cast<unsigned long long>(consumer.submitted.load() - consumer.completed));
            g_failed = true;
          }
        }
        consumer.Drain();
      }
    }
    polled_done += consumer.completed;
    ga_session_destroy(s);
    ga_cq_destroy(consumer.queue);
  };

  // Big runs, synchronous and async, alone at first (the pool takes them) and then among the others.
  std::string big_model;
  if (argc > 3) {
    std::ifstream big(argv[3], std::ios::binary);
    big_model.assign(std::istreambuf_iterator<char>(big), std::istreambuf_iterator<char>());
  }
  std::atomic<uint64_t> big_runs{0};
  auto big_worker = [&](bool async, decltype(deadline) until) {
    ga_status st;
    ga_session *s = nullptr;
    if ((st = ga_session_create(nullptr, &s)) != 0) return Fail("ga_session_create", st);
    ga_graph *g = nullptr;
    if ((st = ga_graph_parse_onnx(big_model.data(), big_model.size(), nullptr, &g)) != 0) return Fail("parse", st);
    if ((st = ga_session_add_graph(s, 1, g, nullptr)) != 0) Fail("add_graph", st);
    ga_graph_destroy(g);
    Consumer consumer;
    if ((st = ga_cq_create(&consumer.queue)) != 0) return Fail("ga_cq_create", st);
    BigInput input;
    uint64_t token = 0;
    while (Clock::now() < until && !g_failed) {
      if (async) {
        consumer.submitted.fetch_add(1);
        if ((st = ga_session_run_graph_async(s, 1, input.descs, 2, consumer.queue, ++token)) != 0) {
          consumer.submitted.fetch_sub(1);
          Fail("RunGraphAsync big", st);
        }
        while (consumer.completed < consumer.submitted.load() && !g_failed) {
          pollfd p{ga_cq_fd(consumer.queue), POLLIN, 0};
          poll(&p, 1, 10);
          consumer.Drain();
        }
      } else {
        ga_output_info infos[2];
        size_t count = 0;
        ga_outputs *overflow = nullptr;
        if ((st = ga_session_run_graph(s, 1, input.descs, 2, infos, 2, &count, &overflow)) != 0) {
          Fail("RunGraph big", st);
        }
        if (overflow) ga_outputs_destroy(overflow);
        // every element of y = tanh(a @ b) + a is tanh(1/256) + 1/256: read them all, so TSan checks the
        // hand-off of the pool helpers' writes to this thread
        const float want = std::tanh(1.0f / BigInput::kSide) + 1.0f / BigInput::kSide;
        for (size_t i = 0; i < count && i < 2; ++i) {
          const float *y = static_cast<const float *>(infos[i].data);
          for (size_t e = 0; e < infos[i].size / sizeof(float); ++e) {
            if (std::fabs(y[e] - want) > 1e-5f) {
              std::fprintf(stderr, "big run: element %zu is %g, want %g\n", e, double(y[e]), double(want));
              g_failed = true;
              break;
            }
          }
          ga_tensor_destroy(infos[i].handle);
        }
      }
      ++big_runs;
    }
    ga_cq_destroy(consumer.queue);
    ga_session_destroy(s);
  };
  std::vector<std::thread> threads;
  if (!big_model.empty()) {
    const auto start = Clock::now();
    const decltype(deadline) alone_until = start + (deadline - start) / 5;
    // one at a time first: a lone run leaves a core idle, so its kernels take the pool's helpers
    std::thread(big_worker, false, alone_until).join();
    std::thread(big_worker, true, alone_until + (deadline - start) / 5).join();
    if (IntraOpHelpers() == 0) {
      std::fprintf(stderr, "the big runs never started the intra-op pool's helpers\n");
      g_failed = true;
    }
    threads.emplace_back(big_worker, false, deadline);
    threads.emplace_back(big_worker, true, deadline);
  }
  for (int i = 0; i < 4; ++i) threads.emplace_back(async_pair, i);
  threads.emplace_back(poller);
  threads.emplace_back(stream_worker);
  for (auto &t : threads) t.join();

  ga_live_counters c;
  ga_get_live_counters(&c);
  if (c.sessions || c.tensors || c.outputs_lists || c.streams || c.completion_queues || c.pending_completions) {
    std::fprintf(stderr,
                 "FAIL live counters not back to zero: sessions=%lld tensors=%lld outputs=%lld streams=%lld "
                 "queues=%lld pending=%lld\n",
                 (long long)c.sessions, (long long)c.tensors, (long long)c.outputs_lists, (long long)c.streams,
                 (long long)c.completion_queues, (long long)c.pending_completions);
    g_failed = true;
  }
  ga_finalize();
  if (g_failed) return 1;
  std::printf("big runs: %llu\n", (unsigned long long)big_runs.load());
  std::printf("PASS completion stress: %llu async completions (%llu of them polled for), %llu host functions, "
              "%llu stream runs, %llu sessions\n",
              (unsigned long long)(async_done.load() + polled_done.load()), (unsigned long long)polled_done.load(),
              (unsigned long long)host_done.load(), (unsigned long long)stream_runs.load(),
              (unsigned long long)sessions.load());
  return 0;
}
