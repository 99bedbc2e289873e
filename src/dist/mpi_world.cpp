#include "dist/mpi_world.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "comm/mpi_check.hpp"
#include "comm/mpi_transport.hpp"
#include "core/format.hpp"
#include "core/progress_line.hpp"
#include "dist/mpi_arrivals.hpp"
#include "dist/mpi_group.hpp"
#include "dist/mpi_single_copy.hpp"
#include "dist/mpi_waits.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

struct MpiWorld::Comms {
  // `world`: MPI_COMM_WORLD's duplicate, for the job's gathers, which go point to point: on
  // MPI_COMM_WORLD a script's own message with their tag was taken for one.
  MPI_Comm world = MPI_COMM_NULL, pipe = MPI_COMM_NULL, tp = MPI_COMM_NULL, dp = MPI_COMM_NULL;
};

namespace {

// Test hook (tests/mpi_failure.sh): RRFP_FAULT_STOP=<phase>:<world rank> makes that process
// stop itself with SIGSTOP, as a suspended or hung node would, when it reaches <phase>
// (startup: before MPI_Init; shutdown: before the closing barrier; dp-gather: before a
// data-parallel gradient sum; gather: before every other all-gather, the barriers before a step
// and at shutdown included, those being gathers of nothing). Continued, it stays hung
// until a signal ends it: mpirun, ending the job, continues a stopped process before its
// SIGTERM, and one that went on into MPI_Init as the job was torn down once left mpirun
// hanging ("PMIX ERROR: UNREACHABLE"). Two minutes at most, so that none is left for good.
void stop_if_asked(const std::string& phase) {
  const char* spec = std::getenv("RRFP_FAULT_STOP");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!spec || !rank || spec != phase + ":" + rank) return;
  std::raise(SIGSTOP);
  for (int s = 0; s < 120; ++s)
    std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(3);
}

}  // namespace

MpiWorld::MpiWorld(MpiWorldOptions o)
    : opt_(o),
      comms_(std::make_unique<Comms>()),
      guard_([this](const std::string& call, std::int64_t ms, DeadlineGuard::Stopped stopped) {
        expired(call, ms, stopped);
      }) {
  check_timeout_ms(opt_.timeout_ms);
  if (opt_.arrival_ms != -1) check_timeout_ms(opt_.arrival_ms, "`arrival_timeout`");  // -1: none
  // Until MPI says otherwise, the rank mpirun gave this process (for the deadline's message).
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) rank_ = std::atoi(r);
  stop_if_asked("startup");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) throw Error("mpi: MPI is already initialised in this process");
  // Large messages in one copy where the machine allows it: with more processes than cores,
  // the two-copy path's shared-memory fragments each wait for the scheduler, and a step with
  // large messages is far slower and less steady (measured: docs/mpi.md, "Launch").
  choose_single_copy();
  int provided = 0;
  {
    auto d = deadline("MPI_Init_thread (start-up)", Wait::kEnds);
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw Error(
        "mpi: this Open MPI cannot give MPI_THREAD_MULTIPLE (the progress thread and the "
        "compute threads call MPI concurrently)");
  }
  live_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  {
    auto d = deadline("MPI_Comm_dup (start-up)", Wait::kEnds);
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comms_->world), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comms_->world, MPI_ERRORS_RETURN);
  }
  set_layout(JobLayout{size_, 1, 1});  // one pipeline of P = job size until told otherwise
}

MpiWorld::~MpiWorld() {
  stop_if_asked("shutdown");
  {
    // A gather of nothing, as the barrier before a step: it names the processes not come.
    auto d = deadline("MPI_Barrier (shutdown)", Wait::kEnds);
    try {
      gathered({}, Group::kWorld, GatherKind::kShutdown);
    } catch (const std::exception&) {
      // MPI_Barrier's failure went unchecked here too: the process ends either way.
    }
  }
  for (MPI_Comm* c : {&comms_->pipe, &comms_->tp, &comms_->dp, &comms_->world})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  live_ = false;
  auto d = deadline("MPI_Finalize (shutdown)", Wait::kEnds);
  MPI_Finalize();
}

namespace {

// Between the call and its limit's name in an armed phase: the guard keeps one string.
constexpr char kLimitSep = '\x1f';
// The pipeline raises it to its `timeout` where that is longer, and passes only the larger.
constexpr const char* kArrivalName = "`arrival_timeout`, or `timeout` where longer";

}  // namespace

DeadlineGuard::Phase MpiWorld::deadline(const char* call, Wait wait, std::int64_t arrival_ms) {
  std::int64_t ms = opt_.timeout_ms;
  std::string phase = call, limit = opt_.limit_name;
  if (wait == Wait::kArrival) {
    ms = arrival_ms;
    limit = kArrivalName;
  } else if (wait == Wait::kEnds) {
    if (opt_.arrival_ms >= 0) {  // the Python pipeline's: a process may come this late
      ms = opt_.arrival_ms;
      limit = kArrivalName;
    }
    if (ms > 0 && ms < MpiWorldOptions::kMinStartupMs) {
      ms = MpiWorldOptions::kMinStartupMs;
      limit += ", at least 10 s here";
    }
  } else if (const auto [extra, why] = allowance(); ms > 0 && extra > 0) {
    ms += extra;
    phase += ", " + why;
  }
  return guard_.arm(phase + kLimitSep + limit, ms);
}

void MpiWorld::expired(const std::string& phase, std::int64_t ms, DeadlineGuard::Stopped stopped) {
  const std::size_t sep = phase.rfind(kLimitSep);
  const std::string call = phase.substr(0, sep);
  const std::string limit = sep == std::string::npos ? "" : phase.substr(sep + 1);
  // The job is ended from here: the SIGTERM mpirun sends as it aborts the job is no request
  // to stop after the step, which the handler said it took, after this line.
  for (int sig : kStopSignals)
    std::signal(sig, SIG_IGN);
  clear_progress_line_on_stderr();
  // The ranks an all-gather still awaits, where it awaits any: under data parallelism the
  // line named none, and no other line named the stopped process.
  const std::string missing = arrivals_.missing();
  std::string why = missing.empty() ? "a process of the job is stopped, gone or far behind"
                                    : missing + ": stopped, gone, or held up by another process";
  // Stopped itself within it, or shortly before (its deadline and a few seconds), this process
  // is the likely cause: the others it names ended for want of it (continued, it named a
  // healthy process as stopped or gone).
  const auto secs = [](std::int64_t v) { return fmt("%.1f", static_cast<double>(v) / 1000); };
  std::string self;
  if (stopped.within_ms > 0)
    self = secs(stopped.within_ms) + " s within it";
  else if (stopped.last_ago_ms >= 0 && stopped.last_ago_ms <= ms + 5000)
    self = secs(stopped.last_ms) + " s, " + secs(stopped.last_ago_ms) + " s before this line";
  if (!self.empty())
    why = "this process was itself stopped or not run for " + self +
          " (SIGSTOP, Ctrl-Z, a suspended or overloaded machine), the likely cause: the others "
          "may have ended for want of it (" +
          why + ")";
  std::fprintf(stderr,
               "rrfp: error: mpi rank %d: %s did not finish within %s s: %s (the limit is %s)\n",
               rank_, call.c_str(), fmt("%g", static_cast<double>(ms) / 1000).c_str(), why.c_str(),
               limit.c_str());
  std::fflush(stderr);
  // MPI_Abort ends every process of the job; before MPI is up or while it finalises it is not
  // safe, and exiting non-zero makes mpirun end the others.
  if (live_.load()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void MpiWorld::set_layout(const JobLayout& l) {
  validate(l, size_, "mpirun -np " + std::to_string(size_));
  layout_ = l;
  // Where the processes meet for a pipeline of a new layout (the first, or one after the
  // others were deleted): a process may come as late as to start-up.
  auto d = deadline("MPI_Comm_split", Wait::kEnds);
  for (MPI_Comm* c : {&comms_->pipe, &comms_->tp, &comms_->dp})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, replica(), endpoint(), &comms_->pipe), "MPI_Comm_split");
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, replica() * l.pp + stage(), tp_rank(), &comms_->tp),
            "MPI_Comm_split");
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, endpoint(), replica(), &comms_->dp), "MPI_Comm_split");
  for (MPI_Comm c : {comms_->pipe, comms_->tp, comms_->dp})
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
}

std::unique_ptr<Transport> MpiWorld::make_transport(MpiPollOptions poll, MpiLargeMessages large) {
  auto d = deadline("MPI_Comm_dup (transport)");
  return std::make_unique<MpiTransport>(static_cast<void*>(comms_->pipe), poll, large);
}

std::unique_ptr<TpCollective> MpiWorld::make_tp_group(int stage) {
  auto d = deadline("MPI_Comm_dup (tensor-parallel group)");
  return std::make_unique<MpiTpGroup>(static_cast<void*>(comms_->tp), stage);
}

Hosting MpiWorld::hosting() {
  Hosting h;
  h.local = {endpoint()};
  h.transports.push_back(make_transport());
  h.make_group = [this](int stage) { return make_tp_group(stage); };
  h.peer_name = [this, tp = layout_.tp](int e) {
    return endpoint_name(e, tp) + " (mpi rank " + std::to_string(world_rank_of(e)) + ")";
  };
  h.before_step = [this] { barrier(); };
  h.on_peer_failure = opt_.on_peer_failure;
  return h;
}

namespace {

// Each rank's share of a gathered `flat` buffer, given every rank's count.
template <typename T>
std::vector<std::vector<T>> split_by_rank(const std::vector<T>& flat,
                                          const std::vector<int>& counts) {
  std::vector<std::vector<T>> out(counts.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i].assign(flat.begin() + at, flat.begin() + at + counts[i]);
    at += counts[i];
  }
  return out;
}

// Where each rank's share starts in the flat buffer; the last entry is the total.
std::vector<int> offsets_of(const std::vector<int>& counts) {
  std::vector<int> at(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i)
    at[i + 1] = at[i] + counts[i];
  return at;
}

// Variable-length all-gather of bytes on `comm`, by rank, of any size, point to point
// (dist/mpi_arrivals.hpp): the sizes as 64-bit counts, then the bytes. Every all-gather of the
// job goes through it. Each size goes with what the gather is (`kind`): where the processes'
// kinds differ, none sends its bytes, and `apart` gets every rank's kind (the processes are out
// of step, and every one of them finds it in this gather).
std::vector<std::vector<std::byte>> gather_bytes_all(std::span<const std::byte> mine, MPI_Comm comm,
                                                     std::uint64_t kind,
                                                     std::vector<std::uint64_t>& apart,
                                                     Arrivals& arrivals) {
  int n = 0, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  // Apart from the tags of MpiWorld::exchange (1, 2) on the pipeline's communicator.
  Meeting at{static_cast<void*>(comm), std::vector<int>(n), static_cast<std::size_t>(me), 3};
  for (int r = 0; r < n; ++r)
    at.ranks[r] = r;
  const std::vector<std::uint64_t> heads = exchange_heads(mine.size(), kind, at, arrivals);
  for (int r = 0; r < n; ++r)
    if (heads[2 * r + 1] != kind) {
      for (int k = 0; k < n; ++k)
        apart.push_back(heads[2 * k + 1]);
      return {};
    }
  return exchange_parts(mine, heads, at, arrivals);
}

}  // namespace

std::vector<std::vector<std::byte>> MpiWorld::gathered(std::span<const std::byte> mine, Group group,
                                                       GatherKind kind) {
  const MPI_Comm comm = group == Group::kWorld ? comms_->world
                        : group == Group::kDp  ? comms_->dp
                                               : comms_->pipe;
  std::vector<std::uint64_t> apart;
  stop_if_asked(group == Group::kDp ? "dp-gather" : "gather");
  auto out = gather_bytes_all(mine, comm, static_cast<std::uint64_t>(kind), apart, arrivals_);
  if (!apart.empty()) {
    int me = 0;
    MPI_Comm_rank(comm, &me);
    out_of_step(apart, group == Group::kWorld, me);
  }
  return out;
}

std::vector<std::vector<std::byte>> MpiWorld::all_gather_bytes(std::span<const std::byte> mine) {
  auto d = deadline("MPI_Allgather (between steps)");
  return gathered(mine, Group::kWorld, GatherKind::kStep);
}

std::vector<std::vector<std::byte>> MpiWorld::arrival_gather_bytes(std::span<const std::byte> mine,
                                                                   std::int64_t within_ms) {
  auto d = deadline("MPI_Allgather (the processes coming to a call)", Wait::kArrival, within_ms);
  return gathered(mine, Group::kWorld, GatherKind::kCall);
}

// A process's end meets the others' next call on purpose: the same kind as a call's opening.
std::vector<std::vector<double>> MpiWorld::ending_gather(std::span<const double> mine) {
  auto d = deadline("MPI_Allgather (the end of the script)", Wait::kEnds);
  return values_of<double>(gathered(std::as_bytes(mine), Group::kWorld, GatherKind::kCall));
}

std::vector<std::vector<std::byte>> MpiWorld::dp_all_gather(std::span<const std::byte> mine) {
  auto d = deadline("MPI_Allgather (data-parallel gradients)");
  return gathered(mine, Group::kDp, GatherKind::kGradients);
}

std::vector<std::vector<std::byte>> MpiWorld::replica_all_gather(std::span<const std::byte> mine) {
  auto d = deadline("MPI_Allgather (a replica's stages)");
  return gathered(mine, Group::kPipe, GatherKind::kReplica);
}

void MpiWorld::out_of_step(const std::vector<std::uint64_t>& kinds, bool world, int me) {
  auto name = [](std::uint64_t k) {
    switch (static_cast<GatherKind>(k)) {
      case GatherKind::kStep:
        return "the end of a step or a gather between steps";
      case GatherKind::kCall:
        return "the start of a call of the pipeline, or the end of its script";
      case GatherKind::kGradients:
        return "a data-parallel gradient sum";
      case GatherKind::kReplica:
        return "a gather of a replica's stages";
      case GatherKind::kBarrier:
        return "the barrier before a step";
      case GatherKind::kShutdown:
        return "the barrier at the job's end";
    }
    return "an unknown gather";
  };
  std::map<std::uint64_t, std::string> ranks;  // kind -> the ranks of the group making it
  for (std::size_t r = 0; r < kinds.size(); ++r)
    ranks[kinds[r]] += (ranks[kinds[r]].empty() ? "" : ", ") + std::to_string(r);
  std::string where;
  for (const auto& [kind, who] : ranks)
    where += (where.empty() ? "" : "; ") + std::string(world ? "mpi rank" : "rank") +
             (who.find(',') != std::string::npos ? "s " : " ") + who + " in " + name(kind);
  // The group's rank 0 says it once: every process found it in this same gather.
  if (me == 0) {
    clear_progress_line_on_stderr();
    std::fprintf(stderr,
                 "rrfp: error: the processes of the job are out of step (%s%s): a step that "
                 "failed on some processes (a timeout, an interrupt) completed on others, and "
                 "their gathers no longer pair; the job ends, as its steps would mix batches\n",
                 where.c_str(), world ? "" : " of a group");
    std::fflush(stderr);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));  // rank 0's line first
  }
  abort(1);
}

std::vector<std::vector<std::byte>> MpiWorld::exchange(std::span<const std::byte> mine,
                                                       std::span<const int> peers) {
  const std::size_t me = place_among(peers, endpoint(), layout_.pp * layout_.tp);
  auto d = deadline(
      "MPI_Isend/MPI_Irecv (an exchange between stages: shared parameters' gradients, clocks)");
  // On the pipeline communicator, whose point-to-point traffic is this and the gathers' alone
  // (the transport sends on a duplicate of it): sizes, then the bytes, as a gather's.
  const Meeting at{static_cast<void*>(comms_->pipe), std::vector<int>(peers.begin(), peers.end()),
                   me, 1};
  return exchange_parts(mine, exchange_heads(mine.size(), 0, at, arrivals_), at, arrivals_);
}

std::vector<std::vector<std::byte>> MpiWorld::gather_to_root(std::span<const std::byte> mine) {
  auto d = deadline("MPI_Gather (results to rank 0)");
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(rank_ == 0 ? size_ : 0);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi_check(MPI_Igather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &req),
            "MPI_Igather");
  wait_napping(std::span<MPI_Request>(&req, 1), "MPI_Igather");
  const std::vector<int> at = offsets_of(counts);
  std::vector<std::byte> flat(at.back());
  mpi_check(MPI_Igatherv(mine.data(), count, MPI_BYTE, flat.data(), counts.data(), at.data(),
                         MPI_BYTE, 0, MPI_COMM_WORLD, &req),
            "MPI_Igatherv");
  wait_napping(std::span<MPI_Request>(&req, 1), "MPI_Igatherv");
  return split_by_rank(flat, counts);
}

// A gather of nothing: its heads are a barrier that can say who has not come to it, and that
// finds processes out of step as the gathers do.
void MpiWorld::barrier() {
  auto d = deadline("MPI_Barrier");
  gathered({}, Group::kWorld, GatherKind::kBarrier);
}

void MpiWorld::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace rrfp
