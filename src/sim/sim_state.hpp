#pragma once
// The simulator's state, one struct per thing it tracks (sim/simulation.hpp): events, the
// transfers in flight, each tensor-parallel rank's protocol state machines and each stage's
// collective. Internal to the simulator.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/rank_driver.hpp"
#include "core/record.hpp"

namespace rrfp::sim_state {

enum class Ev : std::uint8_t {
  GroupEnd,
  ShareDone,  // a rank's own share of its group's task is done (Simulation::in_collective)
  Arrive,
  SendLanded,
  AckLanded,
  Proposal,
  Choice,
  LinkJoin,
  LinkEnd
};

// What falls due at an instant (sim/event_queue.hpp keeps the time and the order).
struct Event {
  Ev type;
  std::int32_t stage, rank, a;  // a: task index, send id or transfer id
};

// A rendezvous transfer (blocking mode); its id is the offer's handle.
struct Send {
  int src_stage, dst_stage, rank;
  TaskId consumer;
  std::int64_t latency;
  std::size_t record;  // the producer's record on this rank
};

// A message on the shared links (WorkloadParams::comm_links): its latency first, on its own,
// then its bytes, sharing the machine's capacity with every other message in flight.
struct Transfer {
  int dst_stage, rank, consumer;  // consumer: task index
  int send = -1;                  // blocking mode: the Send's id; async: -1
  std::size_t record;             // the producer's record on this rank
  std::int64_t start, bytes_ns;   // bytes_ns: the message's time past its latency, alone
};

// One tensor-parallel rank: its protocol (core's driver) and what only time adds to it.
struct Rank {
  explicit Rank(RankDriver d) : driver(std::move(d)) {}
  RankDriver driver;
  bool computing = false;
  std::int64_t compute_end = 0;
  std::int64_t held_since = 0;
  std::size_t record = 0;  // index of the running task's record
  // The last instant the rank became free (its group's task ended, or its last held send was
  // released): a rank freed in the instant an input lands is awake.
  std::int64_t free_since = -1;
  // WorkloadParams::comm_wake_us: no task the rank launches starts before it (an input woke it;
  // Simulation::size_wakes).
  std::int64_t awake_at = 0;
  // Its latest wait (Simulation::block): one past the step's end is cut there (end_waits).
  std::int64_t wait_from = 0, wait_to = 0;
  BlockReason wait_why = BlockReason::Send;
  // `agree`: in a round since proposed_at, waiting in the all-gather for its peers' proposals.
  bool proposing = false;
  std::int64_t proposed_at = 0;
};

// `agree`: a proposal on its way to the group's other ranks (Ev::Proposal's index).
struct SentProposal {
  int from, round, task;  // task: index
};

// The collective of a stage's group.
struct Group {
  int launched = 0;
  TaskId task{};
  std::int64_t end = 0;
};

}  // namespace rrfp::sim_state
