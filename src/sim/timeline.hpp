#pragma once
// A recorded step as a list of timed tasks, whatever tool recorded it (docs/twin.md), and what
// the twin takes from it: every duration (RealizedWork), the order each stage ran its tasks in,
// and the step's measured length. The trace importers (sim/trace_import.hpp) fill a Timeline;
// build_run checks it against the run's shape.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/hint.hpp"
#include "core/modes.hpp"
#include "core/record.hpp"
#include "sim/workload.hpp"

namespace rrfp {

struct TimelineTask {
  TaskId task;
  int tp_rank = 0;
  double start_us = 0, dur_us = 0;
  double send_us = -1;  // the message its output sent, when the trace says (rrfp's own)
  // Its rank's wait in the TP group's collective right after it, when the trace says (rrfp's
  // own "blocked: collective" spans); -1: not recorded.
  double collective_us = -1;
  // A B the trace names as a whole backward beside input halves of others (torch's "B" among
  // its "I"s): its W's work is within it, so a replay that folds W tasks needs none for it.
  bool whole_backward = false;
  // A B the trace names as the input half of a split backward (torch's "I"): its W is a task
  // of its own, which a step without any W lacks (it was replayed as a whole backward).
  bool input_half = false;
};

// A receive of `consumer`'s cross-stage input on its rank: from when the rank began waiting (or
// posted it) to when the data was there.
struct TimelineRecv {
  TaskId consumer;
  int tp_rank = 0;
  double start_us = 0, end_us = 0;
};

struct Timeline {
  std::string format;  // the mapping that read it: rrfp, torch or megatron
  std::string run;     // which run or step of the file, e.g. "step 3"
  int step = -1;       // its number, as --step selects it
  // False when each rank's clock starts on its own (the legacy PyTorch exporter): build_run
  // then aligns neighbouring stages by their messages.
  bool clocks_aligned = true;
  // Agree's latency as its "blocked: tp coordination" spans tell it (rrfp's own: a rank's round
  // of proposals; sim/trace_rrfp.cpp), -1: none recorded.
  double coordination_us = -1;
  // The earliest start of its recorded waits (rrfp's own "blocked: ..." spans: coordination,
  // send, collective), +inf: none. Agree's first round runs before any task starts: the step
  // began there, and the twin replays it.
  double first_wait_us = std::numeric_limits<double>::infinity();
  // Whether the run ran each chunk's forwards in microbatch order (PipelineConfig::
  // ordered_forwards), where the trace says (rrfp's own since it records it); unset: it does not.
  std::optional<bool> ordered_forwards;
  // A simulated blocking step whose payloads rode on their offers (RealizedWork::
  // offer_payload), and their acknowledgements' latency (link_latency_ns), where the trace says
  // so (rrfp's own since it records them).
  std::optional<bool> offer_payload;
  std::optional<double> offer_ack_us;
  // The run's own step, from its start (its trace's ts 0) to its end, as the run measured or
  // simulated it (rrfp's own trace since it records it): a measured one holds the runtime's
  // start-up before its first task, which the trace's tasks do not show.
  std::optional<double> step_us;
  // rrfp's own trace of a fixed order with a rendezvous per message (its run's label "fixed
  // HINT (blocking)"), read from the whole label: `run` shows it cut to 60 characters, and a
  // hint file's long path cut off its " (blocking)".
  bool fixed_blocking = false;
  // The same of a ready run ("ready HINT (blocking)"): its receives accepted offers as they came.
  bool ready_blocking = false;
  std::vector<TimelineTask> tasks;
  std::vector<TimelineRecv> recvs;
};

struct ImportedRun {
  RealizedWork work;
  ListHint order;  // each stage's tasks as tp rank 0 started them
  // The step as recorded: from its first start, a task's or a recorded wait's (agree's first
  // round comes before any task), to its last task's end, a folded W's and a TP collective's
  // (TimelineTask::collective_us) included.
  std::int64_t measured_ns = 0;
  std::vector<std::int64_t> start_ns;  // [rank * num_tasks + index], from the step's start
  int messages = 0;                    // cross-stage messages of the step (per TP rank, summed)
  int messages_measured = 0;           // of those, the ones whose latency the timeline gave
  int messages_inferred = 0;           // and those seen from when their consumers started
  std::string format, run;
  int step = -1;  // the step of the trace it was built from (Timeline::step)
  // Without a step asked for, the earlier steps passed over for lacking tasks (a profiler's
  // window cuts the first), and the first's refusal: said beside the step replayed, where
  // only its name showed that another was meant.
  int passed_over = 0;
  std::string passed_over_why;
  // The TP collective's own time (work.collective_ns), measured: of each F and B, from its last
  // rank's compute end to its last rank's leaving the collective, the mean over them (a W has
  // none). False: the trace does not say (TP = 1, no "blocked: collective" spans).
  bool collective_measured = false;
  // The TP coordination's latency (work.coord_ns), measured: agree's shortest round, or the
  // leader's choice, the least lag of a follower's start behind its leader's. False: the trace
  // does not say (TP = 1, or ranks that start tasks before their leader: no coordination).
  bool coordination_measured = false;
  // How its TP groups coordinated: agree where the trace records rounds (agree's spans), else
  // leader, the runtime's default.
  TpProtocol tp_protocol = TpProtocol::Leader;
  // Cross-stage inputs the trace says were taken over 100 us before their producer ended, and
  // the largest lead (sim/timeline_clocks.hpp: early_inputs): clocks that disagree.
  int early_inputs = 0;
  std::int64_t early_worst_ns = 0;
  bool has_w = false;                    // that step recorded W tasks (a split backward)
  std::optional<bool> ordered_forwards;  // Timeline::ordered_forwards of that step
  std::int64_t run_step_ns = -1;         // Timeline::step_us of that step; -1: not recorded
  bool fixed_blocking = false;           // Timeline::fixed_blocking of that step
  bool ready_blocking = false;           // Timeline::ready_blocking of that step
};

// A step record (simulated or measured) as a timeline: each task at its start, for its compute
// time, with the message its output took when the record knows it (the simulator's).
Timeline timeline_of(const StepRecord& r);

// Whether a task that recorded a message (send_us) sends one to another stage here. One whose
// output no task of the shape takes (the last chunk's F, chunk 0's B, a W) was recorded with a
// stage this shape lacks: InputError naming `where` (a trace missing its last rank was replayed
// as a shorter pipeline, "40 of 32 messages timed"). One that hands its output to its own stage
// sends none.
// `lacked`: the error's end (nullptr: a trace's).
bool sends_across(const WorkModel& m, const TaskId& t, const std::string& where,
                  const char* lacked = nullptr);

// Checks `t` against the shape (task exists, on the right stage, tp rank < tp, none twice, none
// missing: named per stage) and derives the run. A W task of a run without the split backward
// adds its duration to its B's (a recording with W apart, replayed without). A message's latency
// is, in this order: the task's send_us; the receive that waited for it (its end minus the later of
// its start and the producer's end, so a receive posted early does not count the producer's
// compute); else `message_us` when >= 0; else (the default) inferred: a consumer idle until its
// producer ended waited for the message, which took its start minus the producer's end (delivery
// and wake-up); the messages not seen so get the median of the seen ones. Unaligned clocks are
// first aligned stage by stage: stage s+1's offset is the middle of what its receives allow (no
// forward arrives before its producer ended there, no backward arrives here before it ended on
// s+1), as NTP does with round trips; with messages one way only, the tightest one took no time;
// with no receive between two stages, their tasks bound it alike (no consumer starts before its
// producer ended).
// Throws InputError naming `origin`.
// Refuses a `message_us` (>= 0) where `run` timed every message: it would time none. Apart from
// build_run, whose errors a search for a complete step passes over.
void refuse_needless_message_us(const ImportedRun& run, double message_us,
                                const std::string& origin);
// build_run's refusal of a timeline that lacks tasks the shape needs. Where the W tasks alone
// are missing, a recording without the split backward explains it: trace import says so then,
// and of no other refusal (a TP rank's missing tasks, a task twice).
class MissingTasks : public InputError {
 public:
  MissingTasks(const std::string& what, bool only_w) : InputError(what), only_w(only_w) {}
  bool only_w;
};
ImportedRun build_run(const Timeline& t, const WorkModel& m, int tp, double message_us,
                      const std::string& origin);

}  // namespace rrfp
