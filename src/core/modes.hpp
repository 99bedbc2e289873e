#pragma once
// The executor-wide modes of semantics.md §3-4, shared by the simulator and the runtime.
#include <string>
#include <vector>

namespace rrfp {

// How a task's output reaches another stage: a message queued without waiting (async, rrfp),
// or a rendezvous that holds the sender until the receiver takes it (blocking, the baseline).
enum class CommMode { Async, Blocking };
std::string to_string(CommMode c);
CommMode parse_comm(const std::string& s);  // throws InputError naming the value

// How the T ranks of a stage agree on the next collective-bearing task (semantics.md §4).
// `none` lets each rank choose alone: it exists to show that a mismatch is caught.
enum class TpProtocol { Leader, Agree, None };
std::string to_string(TpProtocol p);
TpProtocol parse_tp_protocol(const std::string& s);  // throws InputError naming the value

// Where a run's ranks live and what carries their messages: threads of this process (inproc),
// the processes of an mpirun job (mpi), or the ranks of a torch.distributed group (c10d).
enum class TransportKind { Inproc, Mpi, C10d };
std::string to_string(TransportKind t);
// Throws InputError naming `transport` and the kinds a front end offers (`allowed`) unless `s`
// names one of them.
TransportKind parse_transport(const std::string& s, const std::vector<TransportKind>& allowed);

// The largest tensor-parallel group: far past any machine's (8 GPUs of a node is the rule), and
// small enough that every per-rank table of a step stays in memory (--tp 2147483647 was
// std::bad_alloc; 1000000 grew past 8 GB).
inline constexpr int kMaxTp = 1024;

// The size of a tensor-parallel group, whoever takes it (workloads, the runtime, job layouts):
// returns `tp`, or throws InputError naming `tp` unless it is in [1, kMaxTp].
int checked_tp(int tp);

}  // namespace rrfp
