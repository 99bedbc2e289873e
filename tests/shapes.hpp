#pragma once
// Random pipeline shapes for property tests of the simulator and the runtime.
#include <string>

#include "core/hint.hpp"
#include "sim/rng.hpp"
#include "sim/simulator.hpp"

namespace rrfp::test {

struct Shape {
  PipelineConfig cfg;
  int tp = 1;
  CommMode comm = CommMode::Async;
  TpProtocol protocol = TpProtocol::Leader;
  int limit = 0;
};

// A random pipeline shape that the hint accepts.
Shape random_shape(const std::string& hint, std::uint64_t seed) {
  auto pick = [&](int stream, int lo, int hi) {
    return lo + static_cast<int>(hash_keys(seed, 1000 + stream) % (hi - lo + 1));
  };
  Shape s;
  s.cfg.pp = pick(0, 1, 8);
  s.cfg.microbatches = pick(1, 1, 32);
  s.cfg.split_backward = hint_wants_split(hint) || pick(2, 0, 1);
  s.tp = pick(3, 1, 2);
  s.comm = pick(4, 0, 1) ? CommMode::Blocking : CommMode::Async;
  s.protocol = pick(5, 0, 1) ? TpProtocol::Agree : TpProtocol::Leader;
  s.limit = pick(6, 0, 1) ? 0 : pick(7, 1, 4);
  s.cfg.ordered_forwards = pick(11, 0, 2) == 0;  // every generated list keeps to it
  const bool v1 = hint == "gpipe" || hint == "1f1b" || hint == "zb-h1" || hint == "zb-h2";
  if (v1) return s;
  if (hint == "zb-v") {
    s.cfg.vpp = 2;
    s.cfg.placement = Placement::VShape;
  } else if (hint == "interleaved-1f1b") {
    s.cfg.vpp = pick(8, 2, 3);
    s.cfg.microbatches = s.cfg.pp * pick(9, 1, std::max(1, 32 / s.cfg.pp));
  } else {
    s.cfg.vpp = pick(8, hint == "bfs" ? 2 : 1, 3);
    if (s.cfg.vpp == 2 && pick(10, 0, 1)) s.cfg.placement = Placement::VShape;
  }
  return s;
}

}  // namespace rrfp::test
