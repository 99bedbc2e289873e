#pragma once
// The text a control message carries (an abort's error line, a stall chase's answer), to and
// from its payload: the one place the runtime reads inside a payload.
#include <span>
#include <string>
#include <string_view>

#include "comm/payload.hpp"

namespace rrfp {

inline Payload payload_of_text(std::string_view text) {
  return Payload::copy_of(std::as_bytes(std::span(text.data(), text.size())));
}

inline std::string text_of_payload(const Payload& p) {
  return {reinterpret_cast<const char*>(p.data()), p.size()};
}

}  // namespace rrfp
