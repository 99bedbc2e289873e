#include "dist/c10d_world.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "comm/c10d_transport.hpp"
#include "core/error.hpp"

namespace rrfp {

C10dWorld::C10dWorld(c10::intrusive_ptr<c10d::ProcessGroup> group,
                     std::chrono::milliseconds timeout)
    : pg_(std::move(group)), timeout_(timeout), rank_(pg_->getRank()), size_(pg_->getSize()) {}

void C10dWorld::set_layout(const JobLayout& l) {
  validate(l, size_, "the process group of " + std::to_string(size_));
  if (l.tp != 1 || l.dp != 1)
    throw InputError("`dp`: a c10d job runs one pipeline without TP (got tp " +
                     std::to_string(l.tp) + ", dp " + std::to_string(l.dp) +
                     "); use mpirun for data parallelism");
}

namespace {

// Every transport on a group gets the next channel of that group; the processes create their
// transports in the same order, so the channels agree.
int next_channel(const c10d::ProcessGroup* pg) {
  static std::mutex mu;
  static std::map<const c10d::ProcessGroup*, int> next;
  std::lock_guard lk(mu);
  const int c = next[pg]++;
  if (c > 126) throw Error("c10d: more than 127 runtimes on one process group; make a new group");
  return c;
}

}  // namespace

Hosting C10dWorld::hosting() {
  Hosting h;
  h.local = {rank_};
  h.transports.push_back(std::make_unique<C10dTransport>(pg_, next_channel(pg_.get())));
  h.peer_name = [](int e) {
    return "stage " + std::to_string(e) + " (c10d rank " + std::to_string(e) + ")";
  };
  h.before_step = [this] { barrier(); };
  return h;
}

void C10dWorld::barrier() {
  auto w = pg_->barrier();
  if (!w->wait(timeout_))
    throw Error("c10d: the barrier before a step did not finish within " +
                std::to_string(timeout_.count()) + " ms");
}

std::vector<std::vector<std::byte>> C10dWorld::gather_bytes(std::span<const std::byte> mine) {
  auto wait = [&](const c10::intrusive_ptr<c10d::Work>& w) {
    if (!w->wait(timeout_))
      throw Error("c10d: an all-gather did not finish within " + std::to_string(timeout_.count()) +
                  " ms");
  };
  std::vector<at::Tensor> n_in{at::full({1}, static_cast<std::int64_t>(mine.size()), at::kLong)};
  std::vector<std::vector<at::Tensor>> n_out(1);
  for (int r = 0; r < size_; ++r)
    n_out[0].push_back(at::empty({1}, at::kLong));
  wait(pg_->allgather(n_out, n_in));
  std::int64_t most = 0;
  for (const auto& t : n_out[0])
    most = std::max(most, t.item<std::int64_t>());
  std::vector<at::Tensor> in{at::zeros({std::max<std::int64_t>(most, 1)}, at::kByte)};
  if (!mine.empty()) std::memcpy(in[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size_; ++r)
    out[0].push_back(at::empty_like(in[0]));
  wait(pg_->allgather(out, in));
  std::vector<std::vector<std::byte>> all(size_);
  for (int r = 0; r < size_; ++r) {
    const auto n = static_cast<std::size_t>(n_out[0][r].item<std::int64_t>());
    const auto* p = static_cast<const std::byte*>(out[0][r].data_ptr());
    all[r].assign(p, p + n);
  }
  return all;
}

std::vector<std::vector<double>> C10dWorld::all_gather(std::span<const double> mine) {
  std::vector<std::vector<double>> out;
  for (const auto& b : gather_bytes(std::as_bytes(mine))) {
    auto& v = out.emplace_back(b.size() / sizeof(double));
    std::memcpy(v.data(), b.data(), v.size() * sizeof(double));
  }
  return out;
}

std::vector<std::vector<std::byte>> C10dWorld::gather_to_root(std::span<const std::byte> mine) {
  auto all = gather_bytes(mine);
  if (rank_ != 0) all.clear();
  return all;
}

std::vector<std::vector<float>> C10dWorld::dp_all_gather(std::span<const float> mine) {
  return {std::vector<float>(mine.begin(), mine.end())};  // one replica
}

void C10dWorld::abort(int code) {
  std::_Exit(code);
}

}  // namespace rrfp
