#pragma once
// Errors that end a runtime step. Each message is one line naming the stage, rank and task.
#include <exception>
#include <new>
#include <string>

#include "core/error.hpp"

namespace rrfp {

// A stage program threw; the message carries the stage, task and the original message.
class TaskError : public Error {
 public:
  using Error::Error;
};

// Nothing progressed for the watchdog timeout; the message lists, per stage, what it runs,
// what is ready, the messages it still expects and the task it waits for.
class StallError : public Error {
 public:
  using Error::Error;
};

// Another process's step failed in a task (its own, or one a protocol refused), and it said so
// (Control::Abort): this process's part of the step cannot finish. A TaskError, since the step
// failed in a task, only not here: a front end reports it as it reports its own tasks' failures.
class PeerFailure : public TaskError {
 public:
  using TaskError::TaskError;
};

// Another process's step ended in a stall, or in a failure that is neither a task's, a
// transport's nor a cancel (TP ranks in different collectives, a thread that could not start),
// and it said so: the process that one waited for may be gone. A StallError: a front end reports it
// as it reports its own watchdog's.
class PeerStall : public StallError {
 public:
  using StallError::StallError;
};

// Another process's step ended with its transport broken (a process it exchanged with gone),
// and it said so: an Error as this process's own transport's would be, not a stall (nothing
// waited out a timeout). Told as a stall, a killed peer's neighbours raised RuntimeError in
// Python and the processes they told TimeoutError, for one event.
class PeerBroken : public Error {
 public:
  using Error::Error;
};

// Another process's step was cancelled (Runtime::cancel: its user's Ctrl-C, its pipeline closed
// mid-step) and it said so: an Error, as the cancel is there. Neither a stall (nothing timed
// out: told as one, the peers of a process interrupted alone raised TimeoutError) nor a task's
// failure (that process is leaving, so nobody waits for it in a closing exchange).
class PeerCancelled : public Error {
 public:
  using Error::Error;
};

// A failure another process told this one of (PeerFailure, PeerStall, PeerBroken,
// PeerCancelled), not its own: it said it already, where it began.
inline bool from_peer(const std::exception& e) {
  return dynamic_cast<const PeerFailure*>(&e) != nullptr ||
         dynamic_cast<const PeerStall*>(&e) != nullptr ||
         dynamic_cast<const PeerBroken*>(&e) != nullptr ||
         dynamic_cast<const PeerCancelled*>(&e) != nullptr;
}

// What a failed task says: an allocation refused in words, where std::bad_alloc's own were
// printed ("task F c7 m7 failed: std::bad_alloc").
inline std::string failure_reason(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    return "out of memory (an allocation failed; ulimit -v, -d or the machine's memory)";
  return e.what();
}

// What a program's call threw, as the TaskError that fails the step; `what` names the call
// ("stage 1: task B c1 m2", "stage 1: begin_step"): "<what> failed: <reason>", or "<what>
// failed with a non-standard exception". Call it inside a catch block.
inline TaskError call_failed(const std::string& what) {
  try {
    throw;
  } catch (const std::exception& e) {
    return TaskError(what + " failed: " + failure_reason(e));
  } catch (...) {
    return TaskError(what + " failed with a non-standard exception");
  }
}

// Whether `e` holds an E (or a class derived from it).
template <class E>
bool holds(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Whether a step's error is a task's (here, or a peer's told: PeerFailure) or a protocol's
// refusal, which leave every process able to answer; a stall or a transport's error may mean a
// process is gone.
inline bool failed_in_task(const std::exception_ptr& e) {
  return holds<TaskError>(e) || holds<ProtocolError>(e);
}

// Thrown inside a task whose step is being torn down because of another error; never
// reported itself.
class Aborted : public Error {
 public:
  Aborted() : Error("step aborted") {}
};

}  // namespace rrfp
