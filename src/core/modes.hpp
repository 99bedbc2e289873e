#pragma once
// The executor-wide modes of semantics.md §3-4, shared by the simulator and the runtime.
#include <string>

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

// The size of a tensor-parallel group, whoever takes it (workloads, the runtime, job layouts):
// returns `tp`, or throws InputError naming `tp` unless it is at least 1.
int checked_tp(int tp);

}  // namespace rrfp
