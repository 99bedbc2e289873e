#include "core/modes.hpp"

#include "core/error.hpp"

namespace rrfp {

std::string to_string(CommMode c) {
  return c == CommMode::Async ? "async" : "blocking";
}

CommMode parse_comm(const std::string& s) {
  if (s == "async") return CommMode::Async;
  if (s == "blocking") return CommMode::Blocking;
  throw InputError("`comm`: unknown mode '" + s + "' (expected async or blocking)");
}

std::string to_string(TpProtocol p) {
  return p == TpProtocol::Leader ? "leader" : p == TpProtocol::Agree ? "agree" : "none";
}

TpProtocol parse_tp_protocol(const std::string& s) {
  if (s == "leader") return TpProtocol::Leader;
  if (s == "agree") return TpProtocol::Agree;
  if (s == "none") return TpProtocol::None;
  throw InputError("`tp_protocol`: unknown protocol '" + s + "' (expected leader, agree or none)");
}

std::string to_string(TransportKind t) {
  return t == TransportKind::Inproc ? "inproc" : t == TransportKind::Mpi ? "mpi" : "c10d";
}

TransportKind parse_transport(const std::string& s, const std::vector<TransportKind>& allowed) {
  std::string names;  // "inproc or mpi", "inproc, mpi or c10d"
  size_t k = 0;
  for (TransportKind t : allowed) {
    if (to_string(t) == s) return t;
    names += (k == 0 ? "" : k + 1 == allowed.size() ? " or " : ", ") + to_string(t);
    ++k;
  }
  throw InputError("`transport`: unknown transport '" + s + "' (expected " + names + ")");
}

int checked_tp(int tp) {
  if (tp < 1 || tp > kMaxTp)
    throw InputError("`tp`: must be between 1 and " + std::to_string(kMaxTp) + ", got " +
                     std::to_string(tp));
  return tp;
}

}  // namespace rrfp
