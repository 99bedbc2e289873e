#pragma once
// Threads in one process: a send hands the payload by reference straight to the receiver's
// handler, on the sending thread. No copy, no queue, no progress thread.
#include <memory>
#include <vector>

#include "comm/transport.hpp"

namespace rrfp {

// `world` connected endpoints, endpoint i having rank i. The endpoints share their routing
// table; each may be destroyed independently.
std::vector<std::unique_ptr<Transport>> make_inproc_transports(int world);

}  // namespace rrfp
