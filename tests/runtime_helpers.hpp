#pragma once
// Helpers for runtime tests: random short emulated work, a transport that injects faults, and
// per-rank execution orders.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/inproc.hpp"
#include "emulate/emulated.hpp"
#include "runtime/runtime.hpp"
#include "sim/rng.hpp"

namespace rrfp::test {

inline PipelineConfig shape(int p, int m, int v = 1, bool split = false) {
  PipelineConfig c;
  c.pp = p;
  c.microbatches = m;
  c.vpp = v;
  c.split_backward = split;
  return c;
}

// Every (rank, task) takes a random 0..max_compute_us; every message a random latency and a
// random size (so size checks are exercised). Short, so hundreds of runs stay fast.
inline RealizedWork random_work(const WorkModel& m, int tp, std::uint64_t seed,
                                int max_compute_us = 120, int max_message_us = 60) {
  RealizedWork w;
  w.tp = tp;
  w.num_tasks = m.num_tasks();
  w.compute_ns.resize(static_cast<size_t>(tp) * w.num_tasks);
  w.message_ns.resize(w.compute_ns.size());
  w.message_bytes.resize(w.num_tasks);
  for (size_t i = 0; i < w.compute_ns.size(); ++i) {
    w.compute_ns[i] = static_cast<std::int64_t>(hash_keys(seed, 1, i) % (max_compute_us * 1000));
    w.message_ns[i] = static_cast<std::int64_t>(hash_keys(seed, 2, i) % (max_message_us * 1000));
  }
  for (int i = 0; i < w.num_tasks; ++i)
    w.message_bytes[i] = static_cast<std::int64_t>(1 + hash_keys(seed, 3, i) % 4096);
  return w;
}

inline RuntimeOptions runtime_options(const WorkModel& m, const RealizedWork& w, Policy policy,
                                      TpProtocol protocol = TpProtocol::Leader) {
  RuntimeOptions o;
  o.arbiter.policy = policy;
  o.tp = w.tp;
  o.tp_protocol = protocol;
  o.timeout_ms = 30'000;  // generous: sanitizers slow everything down
  o.latency = emulated_latency(m, w);
  return o;
}

// Forwards to an inproc endpoint, letting a test rewrite or drop each outgoing message.
class FaultyTransport final : public Transport {
 public:
  // Returns false to drop the message (the sender believes it was sent).
  using Fault = std::function<bool(int src, int& dst, MessageTag& tag, Payload& payload)>;
  FaultyTransport(std::unique_ptr<Transport> inner, Fault fault)
      : inner_(std::move(inner)), fault_(std::move(fault)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void set_receiver(Receiver r) override { inner_->set_receiver(std::move(r)); }
  void send(int dst, const MessageTag& tag, Payload payload, SendDone done) override {
    MessageTag t = tag;
    if (!fault_(rank(), dst, t, payload)) {
      if (done) done(nullptr);
      return;
    }
    inner_->send(dst, t, std::move(payload), std::move(done));
  }
  void shutdown() override { inner_->shutdown(); }
  void set_in_step(bool on) override {
    in_step_calls.push_back(on);
    inner_->set_in_step(on);
  }
  std::vector<bool> in_step_calls;  // what set_in_step was told, in order

 private:
  std::unique_ptr<Transport> inner_;
  Fault fault_;
};

inline std::vector<std::unique_ptr<Transport>> faulty_transports(int world,
                                                                 FaultyTransport::Fault fault) {
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& t : make_inproc_transports(world))
    out.push_back(std::make_unique<FaultyTransport>(std::move(t), fault));
  return out;
}

// Runs `hook` before the task `task` of the stage it wraps, every step; otherwise the emulated
// program.
class HookBefore final : public StageProgram {
 public:
  HookBefore(std::unique_ptr<StageProgram> inner, TaskId task, std::function<void()> hook)
      : in_(std::move(inner)), task_(task), hook_(std::move(hook)) {}
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    at({Kind::F, chunk, mb});
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    at({Kind::B, chunk, mb});
    return in_->backward(c, chunk, mb, std::move(p));
  }
  std::optional<std::size_t> input_bytes(const TaskId& t) const override {
    return in_->input_bytes(t);
  }

 private:
  void at(const TaskId& t) {
    if (t == task_ && hook_) hook_();
  }
  std::unique_ptr<StageProgram> in_;
  TaskId task_;
  std::function<void()> hook_;
};

// Tasks of each (stage, rank) in the order they started.
inline std::map<std::pair<int, int>, std::vector<TaskId>> orders(
    const std::vector<TaskRecord>& tasks) {
  std::vector<TaskRecord> sorted = tasks;
  std::sort(sorted.begin(), sorted.end(),
            [](const TaskRecord& a, const TaskRecord& b) { return a.start < b.start; });
  std::map<std::pair<int, int>, std::vector<TaskId>> out;
  for (const TaskRecord& t : sorted)
    out[{t.stage, t.rank}].push_back(t.task);
  return out;
}

}  // namespace rrfp::test
