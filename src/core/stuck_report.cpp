#include "core/stuck_report.hpp"

namespace rrfp {

std::string describe(const StuckRank& r, const std::function<std::string(int stage)>& peer) {
  std::string out = r.arbiter->describe();
  if (r.tp > 1) out += " [tp rank " + std::to_string(r.tp_rank) + "]";
  if (r.rendezvous) {
    if (r.rendezvous->held())
      out += "; held on " + std::to_string(r.rendezvous->held()) + " unacknowledged send(s)";
    if (r.rendezvous->has_offers()) {
      // Which, and what the rank takes first: under `fixed` the receive posted in list order,
      // which the offers wait behind (a cycle when its own input waits behind them).
      out += "; " + std::to_string(r.rendezvous->pending_offers()) +
             " transfer(s) offered, not accepted (" +
             to_string(r.rendezvous->offers().front().consumer) +
             (r.rendezvous->pending_offers() > 1 ? ", ..." : "");
      if (const TaskId* p = r.rendezvous->posted())
        out += "; the receive posted in list order is " + to_string(*p);
      out += ")";
    }
  }
  if (!r.running.empty())
    out += "; " + r.running;
  else if (!r.arbiter->finished())
    // A rank held on its sends computes nothing, its next task ready or not: it was said to
    // wait for a ready task beside "next in fixed order F c0 m0 (ready)".
    out +=
        "; waits for " + (!r.waiting.empty() ? r.waiting
                          : r.rendezvous && r.rendezvous->held()
                              ? std::string("its send(s) to be accepted before it computes again")
                              : std::string("a ready task"));
  int total = 0;
  const auto shown = r.inputs->expected(4, total);
  out += "; expects messages: ";
  if (total == 0) return out + "none";
  const WorkModel& m = r.inputs->model();
  for (size_t i = 0; i < shown.size(); ++i) {
    const int s = m.stage_of(shown[i]);
    out += (i ? ", " : "") + to_string(shown[i]) + " from " +
           (peer ? peer(s) : "stage " + std::to_string(s));
  }
  if (total > static_cast<int>(shown.size()))
    out += " and " + std::to_string(total - static_cast<int>(shown.size())) + " more";
  return out;
}

}  // namespace rrfp
