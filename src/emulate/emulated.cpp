#include "emulate/emulated.hpp"

#include <array>
#include <cstring>
#include <map>

#include "comm/buffer_pool.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"

namespace rrfp {

namespace {

class EmulatedProgram final : public StageProgram {
 public:
  EmulatedProgram(const WorkModel& m, const RealizedWork& w, int stage, int rank,
                  EmulationOptions opt)
      : m_(m), w_(w), rank_(rank), opt_(opt) {
    if (rank < 0 || rank >= w.tp)  // a runtime of more TP ranks than the work was drawn for
      throw InputError("realized work: drawn for tp " + std::to_string(w.tp) +
                       ", which has no rank " + std::to_string(rank) + " (stage " +
                       std::to_string(stage) + "); realize it with the runtime's `tp`");
    for (const auto& [cap, count] : buffers_ahead(m, w, stage, opt))
      pool_->reserve(cap, count, opt.touch_outputs);
  }

  Payload forward(TaskContext& ctx, int chunk, int mb, Payload) override {
    return run(ctx, {Kind::F, chunk, mb});
  }
  Payload backward(TaskContext& ctx, int chunk, int mb, Payload) override {
    return run(ctx, {Kind::B, chunk, mb});
  }
  void weight_grad(TaskContext& ctx, int chunk, int mb) override { run(ctx, {Kind::W, chunk, mb}); }

  std::optional<std::size_t> input_bytes(const TaskId& c) const override {
    const std::optional<TaskId> p = data_producer(c);
    if (!p || !m_.valid(*p)) return std::nullopt;
    return static_cast<std::size_t>(w_.message_bytes[m_.index(*p)]);
  }
  std::optional<std::int64_t> microbatch_size(int mb) const override {
    return rrfp::microbatch_size(m_, w_, mb);
  }

 private:
  Payload run(TaskContext& ctx, const TaskId& t) {
    const int idx = m_.index(t);
    const std::int64_t end = now_ns() + w_.compute(rank_, idx);
    Payload out;
    if (t.kind != Kind::W && w_.message_bytes[idx] > 0) {
      bool fresh = false;
      out = pool_->get(static_cast<std::size_t>(w_.message_bytes[idx]), &fresh);
      if (fresh && opt_.touch_outputs)
        std::memset(const_cast<std::byte*>(out.data()), 0, out.size());
    }
    ctx.wait_until(end, opt_.spin);
    if (ctx.tp_size() > 1) {  // every task meets its group, as the simulator models it
      std::array<float, 4> partial{static_cast<float>(rank_), 1, 0, 0};
      ctx.all_reduce(partial, w_.collective_after(t.kind));
    }
    return out;
  }

  const WorkModel& m_;
  const RealizedWork& w_;
  int rank_;
  EmulationOptions opt_;
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>();
};

}  // namespace

ProgramFactory emulated_programs(const WorkModel& m, const RealizedWork& w, EmulationOptions opt) {
  check_work(w, m);  // each task reads its rank's row without a check
  return [&m, &w, opt](int stage, int rank) -> std::unique_ptr<StageProgram> {
    return std::make_unique<EmulatedProgram>(m, w, stage, rank, opt);
  };
}

std::vector<std::pair<std::size_t, int>> buffers_ahead(const WorkModel& m, const RealizedWork& w,
                                                       int stage, const EmulationOptions& opt) {
  if (opt.outputs_in_flight <= 0) return {};
  std::map<std::size_t, std::array<int, 2>> outputs;  // capacity -> outputs of F, of B
  for (const int chunk : m.chunks_of(stage))
    for (int mb = 0; mb < m.microbatches(); ++mb)
      for (const Kind k : {Kind::F, Kind::B}) {
        const std::int64_t bytes = w.message_bytes[m.index({k, chunk, mb})];
        if (bytes > 0)
          ++outputs[BufferPool::capacity_of(static_cast<std::size_t>(bytes))][k == Kind::F ? 0 : 1];
      }
  std::vector<std::pair<std::size_t, int>> out;
  for (const auto& [cap, n] : outputs)
    out.emplace_back(cap,
                     std::min(n[0], opt.outputs_in_flight) + std::min(n[1], opt.outputs_in_flight));
  return out;
}

LatencyFn emulated_latency(const WorkModel& m, const RealizedWork& w) {
  return [&m, &w](int rank, const TaskId& t) { return w.message(rank, m.index(t)); };
}

}  // namespace rrfp
