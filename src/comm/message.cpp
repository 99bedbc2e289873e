#include "comm/message.hpp"

namespace rrfp {

std::string to_string(const MessageTag& t) {
  return "step " + std::to_string(t.step) + (t.ack ? " ack of " : " ") + to_string(t.producer);
}

}  // namespace rrfp
