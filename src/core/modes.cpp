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
  throw InputError("`tp_protocol`: unknown protocol '" + s + "' (expected leader or agree)");
}

int checked_tp(int tp) {
  if (tp < 1) throw InputError("`tp`: must be at least 1, got " + std::to_string(tp));
  return tp;
}

}  // namespace rrfp
