#include "dist/c10d_world.hpp"

#include <cstdlib>
#include <cstring>

#include <c10/core/InferenceMode.h>

#include "comm/c10d_transport.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

C10dWorld::C10dWorld(C10dGroups g, std::chrono::milliseconds timeout)
    : pg_(std::move(g.pipeline)),
      coll_(g.collectives ? std::move(g.collectives) : pg_),
      dp_(std::move(g.replicas)),
      arr_(g.arrivals ? std::move(g.arrivals) : coll_),
      arr_dp_(g.arrival_replicas ? std::move(g.arrival_replicas) : dp_),
      own_arrivals_(static_cast<bool>(arr_) && arr_ != coll_),
      own_collectives_(coll_ != pg_),
      timeout_(timeout),
      stage_(pg_->getRank()),
      stages_(pg_->getSize()),
      replica_(dp_ ? dp_->getRank() : 0),
      replicas_(dp_ ? dp_->getSize() : 1) {
  // Ranks by the transport's group: the collectives' must number the processes alike.
  for (const auto& [pg, name] :
       {std::pair{coll_.get(), "`collectives`"}, {arr_.get(), "`arrivals`"}})
    if (pg->getRank() != stage_ || pg->getSize() != stages_)
      throw InputError(std::string(name) + ": rank " + std::to_string(pg->getRank()) + " of " +
                       std::to_string(pg->getSize()) + ", where the pipeline's group has rank " +
                       std::to_string(stage_) + " of " + std::to_string(stages_));
  if ((arr_dp_ != nullptr) != (dp_ != nullptr) ||
      (dp_ && (arr_dp_->getRank() != replica_ || arr_dp_->getSize() != replicas_)))
    throw InputError("`arrival_replicas`: must number the replicas as `replicas` does");
  if (!g.global_ranks.empty() && static_cast<int>(g.global_ranks.size()) != size())
    throw InputError("`global_ranks`: one for each of the job's " + std::to_string(size()) +
                     " ranks, got " + std::to_string(g.global_ranks.size()));
  global_ranks_ = std::move(g.global_ranks);
}

namespace {

// ", global rank G" of job rank r, where the caller's group numbers the processes otherwise.
std::string global_rank_of(const std::vector<int>& global_ranks, int r) {
  return global_ranks.empty() ? "" : ", global rank " + std::to_string(global_ranks[r]);
}

}  // namespace

std::string C10dWorld::job_rank_name(int r) const {
  return "rank " + std::to_string(r) + " of the job" + global_rank_of(global_ranks_, r);
}

C10dWorld::~C10dWorld() {
  for (auto* g : {&pg_, &coll_, &dp_, &arr_, &arr_dp_})
    g->reset();
  C10dTransport::release_closed();
}

void C10dWorld::set_layout(const JobLayout& l) {
  validate(l, size(), "the process groups of " + std::to_string(size()));
  if (l.tp != 1)
    throw InputError("`tp`: a c10d job runs no tensor parallelism (got " + std::to_string(l.tp) +
                     ")");
  if (l.pp != stages_ || l.dp != replicas_)
    throw InputError("`dp`: the process groups hold " + std::to_string(stages_) + " stages x " +
                     std::to_string(replicas_) + " replicas, not pp " + std::to_string(l.pp) +
                     " x dp " + std::to_string(l.dp));
}

Hosting C10dWorld::hosting() {
  Hosting h;
  h.local = {stage_};
  // The process's rank in the job (replica r's stage s is rank r * P + s), not its rank in the
  // replica's own group, which another replica's processes share.
  h.peer_name = [first = replica_ * stages_, global = global_ranks_](int e) {
    return "stage " + std::to_string(e) + " (c10d rank " + std::to_string(first + e) +
           global_rank_of(global, first + e) + ")";
  };
  h.transports.push_back(
      std::make_unique<C10dTransport>(pg_, C10dTransport::next_channel(pg_), h.peer_name));
  h.before_step = [this] { barrier(); };
  return h;
}

void C10dWorld::barrier() {
  refuse_given_up();
  wait(coll_->barrier(), "the barrier before a step");
}

void C10dWorld::refuse_given_up() const {
  if (!given_up_.empty())
    throw Error("c10d: stage " + std::to_string(stage_) + " (" + job_rank_name(rank()) +
                "): the processes are out of step on the `group` given since " + given_up_ +
                " was given up after `timeout`: it stays posted on that group, whose own "
                "timeout is longer, and pairs with the next collective; make a new group and "
                "Pipeline");
}

// Gloo's own failures ("Operation timed out!", "Connection closed by peer") named neither the
// call nor this process: said here with both, Gloo's first line kept.
void C10dWorld::wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what, Limit limit) {
  bool done = false;
  // A wait given up before the group's own timeout leaves the collective posted there; on a
  // group of the pipeline's the two are the same, and Gloo closes the group.
  const bool leaves_it_posted = !own_collectives_ && limit.ms.count() > 0;
  try {
    done = w->wait(limit.ms);
  } catch (const std::exception& e) {
    const std::string why = e.what();
    // Only the wait's own limit leaves the collective posted: Gloo's errors (a peer gone, the
    // group's own timeout) end it and close the group.
    const bool given_up = leaves_it_posted && why.find("Operation timed out!") != std::string::npos;
    if (given_up && given_up_.empty()) given_up_ = what;
    throw Error(
        "c10d: stage " + std::to_string(stage_) + " (" + job_rank_name(rank()) + "): " + what +
        " with the job's other processes failed (one exited, stopped answering, or " + limit.late +
        (given_up ? "" : "; Gloo then closes the groups for good") + "): " + first_line(why));
  }
  if (!done) {
    if (leaves_it_posted && given_up_.empty()) given_up_ = what;
    throw Error(std::string("c10d: ") + what + " did not finish within " +
                std::to_string(limit.ms.count()) + " ms");
  }
}

namespace {

// What rides in the first all-gather of gather_bytes, after its size: the step's outcome, a
// loss, a batch's digest fit in one round; a longer buffer (a step record) takes a second.
constexpr std::int64_t kFirstRoundBytes = 2048;

}  // namespace

std::vector<std::vector<std::byte>> C10dWorld::gather_bytes(c10d::ProcessGroup& pg,
                                                            std::span<const std::byte> mine,
                                                            Limit limit) {
  // Each collective costs this machine a millisecond of thread hand-offs in ProcessGroupGloo
  // (measured in docs/results-python.md), and a job runs several between two steps: one round
  // carries each rank's size with its first bytes, and only a longer buffer needs a second.
  refuse_given_up();
  // Made under a caller's torch.inference_mode(), its tensors were inference tensors, which
  // Gloo's threads (outside the mode) may not write: every gather of a call made in it failed.
  c10::InferenceMode outside(false);
  const int n = pg.getSize();
  auto wait = [&](const c10::intrusive_ptr<c10d::Work>& w) {
    this->wait(w, "an all-gather", limit);
  };
  const auto size = static_cast<std::int64_t>(mine.size());
  std::vector<at::Tensor> in{at::zeros({8 + kFirstRoundBytes}, at::kByte)};
  auto* slot = static_cast<std::byte*>(in[0].data_ptr());
  std::memcpy(slot, &size, 8);
  if (size > 0)
    std::memcpy(slot + 8, mine.data(), static_cast<std::size_t>(std::min(size, kFirstRoundBytes)));
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < n; ++r)
    out[0].push_back(at::empty_like(in[0]));
  wait(pg.allgather(out, in));
  std::vector<std::int64_t> sizes(n);
  std::int64_t most = 0;
  for (int r = 0; r < n; ++r) {
    std::memcpy(&sizes[r], out[0][r].data_ptr(), 8);
    if (sizes[r] < 0) throw Error("c10d: an all-gather brought a negative size");
    most = std::max(most, sizes[r]);
  }
  std::vector<std::vector<std::byte>> all(n);
  if (most <= kFirstRoundBytes) {
    for (int r = 0; r < n; ++r) {
      const auto* p = static_cast<const std::byte*>(out[0][r].data_ptr()) + 8;
      all[r].assign(p, p + sizes[r]);
    }
    return all;
  }
  std::vector<at::Tensor> whole{at::zeros({most}, at::kByte)};
  if (!mine.empty()) std::memcpy(whole[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<at::Tensor>> got(1);
  for (int r = 0; r < n; ++r)
    got[0].push_back(at::empty_like(whole[0]));
  wait(pg.allgather(got, whole));
  for (int r = 0; r < n; ++r) {
    const auto* p = static_cast<const std::byte*>(got[0][r].data_ptr());
    all[r].assign(p, p + sizes[r]);
  }
  return all;
}

std::vector<std::vector<std::byte>> C10dWorld::all_gather_bytes(std::span<const std::byte> mine) {
  return gather_job(*coll_, dp_.get(), mine, step_limit());
}

std::vector<std::vector<std::byte>> C10dWorld::arrival_gather_bytes(std::span<const std::byte> mine,
                                                                    std::int64_t within_ms) {
  const Limit limit =
      own_arrivals_
          ? Limit{std::chrono::milliseconds(within_ms),
                  "came to the call later than `arrival_timeout` (or `timeout` where longer), "
                  "or is in another call or another pipeline's (with several pipelines alive, "
                  "every process calls them in the same order)"}
          : Limit{std::chrono::milliseconds(0),
                  "came to the call later than the group's own timeout"};
  return gather_job(*arr_, arr_dp_.get(), mine, limit);
}

std::vector<std::vector<std::byte>> C10dWorld::gather_job(c10d::ProcessGroup& pipe,
                                                          c10d::ProcessGroup* reps,
                                                          std::span<const std::byte> mine,
                                                          Limit limit) {
  // Over the pipeline, then the replicas: every rank's bytes, by job rank.
  std::vector<std::vector<std::byte>> mine_all = gather_bytes(pipe, mine, limit);
  std::vector<std::byte> packed;
  for (const auto& b : mine_all) {
    const std::uint64_t n = b.size();
    packed.insert(packed.end(), reinterpret_cast<const std::byte*>(&n),
                  reinterpret_cast<const std::byte*>(&n) + sizeof n);
    packed.insert(packed.end(), b.begin(), b.end());
  }
  std::vector<std::vector<std::byte>> by_replica =
      reps ? gather_bytes(*reps, packed, limit) : std::vector<std::vector<std::byte>>{packed};
  std::vector<std::vector<std::byte>> flat;
  for (const auto& rep : by_replica)
    for (std::size_t at = 0; at < rep.size();) {
      std::uint64_t n = 0;
      std::memcpy(&n, rep.data() + at, sizeof n);
      at += sizeof n;
      flat.emplace_back(rep.begin() + static_cast<std::ptrdiff_t>(at),
                        rep.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  return flat;
}

std::vector<std::vector<std::byte>> C10dWorld::exchange(std::span<const std::byte> mine,
                                                        std::span<const int> peers) {
  refuse_given_up();
  c10::InferenceMode outside(false);  // as gather_bytes's
  const std::size_t me = place_among(peers, stage_, stages_);
  // The transports' tags are channel << 24 with channel at most 126 (next_channel).
  constexpr int kSizeTag = 127 << 24, kDataTag = kSizeTag + 1;
  std::vector<at::Tensor> size{at::full({1}, static_cast<std::int64_t>(mine.size()), at::kLong)};
  std::vector<std::vector<at::Tensor>> sizes(peers.size());
  for (auto& s : sizes)
    s = {at::empty({1}, at::kLong)};  // one tensor each: a receive writes into its own
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (std::size_t i = 0; i < peers.size(); ++i)
    if (i != me) {
      works.push_back(coll_->recv(sizes[i], peers[i], kSizeTag));
      works.push_back(coll_->send(size, peers[i], kSizeTag));
    }
  for (const auto& w : works)
    wait(w, "an exchange of sizes between stages");
  works.clear();
  // A copy the sends own: after a timeout Gloo may still read it, when `mine` is gone.
  std::vector<at::Tensor> data{at::empty({static_cast<std::int64_t>(mine.size())}, at::kByte)};
  if (!mine.empty()) std::memcpy(data[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<at::Tensor>> got(peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (i == me) continue;
    const std::int64_t n = sizes[i][0].item<std::int64_t>();
    got[i] = {at::empty({n}, at::kByte)};
    if (n > 0) works.push_back(coll_->recv(got[i], peers[i], kDataTag));
    if (!mine.empty()) works.push_back(coll_->send(data, peers[i], kDataTag));
  }
  for (const auto& w : works)
    wait(w, "an exchange between stages");
  std::vector<std::vector<std::byte>> out(peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (i == me) {
      out[i].assign(mine.begin(), mine.end());
    } else if (got[i][0].numel() > 0) {
      const auto* p = static_cast<const std::byte*>(got[i][0].data_ptr());
      out[i].assign(p, p + got[i][0].numel());
    }
  }
  return out;
}

std::vector<std::vector<std::byte>> C10dWorld::gather_to_root(std::span<const std::byte> mine) {
  // Within the replica: its first stage gets its stages' bytes (all a step record needs).
  auto all = gather_bytes(*coll_, mine, step_limit());
  if (rank() != 0) all.clear();
  return all;
}

std::vector<std::vector<std::byte>> C10dWorld::dp_all_gather(std::span<const std::byte> mine) {
  if (!dp_) return {std::vector<std::byte>(mine.begin(), mine.end())};
  return gather_bytes(*dp_, mine, step_limit());
}

void C10dWorld::abort(int code) {
  std::_Exit(code);
}

}  // namespace rrfp
