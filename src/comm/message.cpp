#include "comm/message.hpp"

namespace rrfp {

std::string to_string(const MessageTag& t) {
  std::string what = t.ack ? " ack of " : t.offer ? " offer of " : t.pull ? " pull of " : " ";
  if (t.control == Control::Choice) what = " choice ";
  if (t.control == Control::Proposal) what = " proposal " + std::to_string(t.round) + " ";
  if (t.control == Control::Abort) return "step " + std::to_string(t.step) + " abort";
  if (t.control == Control::Query) return "step " + std::to_string(t.step) + " stall query";
  if (t.control == Control::Answer) return "step " + std::to_string(t.step) + " stall answer";
  return "step " + std::to_string(t.step) + what + to_string(t.producer);
}

}  // namespace rrfp
