#pragma once
#include <vector>

#include "core/hint.hpp"

namespace rrfp {

// Builds a list hint by running every stage greedily at unit cost (F = B = W = 1, no
// communication): each free stage takes a ready B (latest chunk first), else a ready F if the
// stage has fewer than cap[s] microbatches in flight (admitted by its first chunk's F, retired
// by that chunk's B), else a pending W. This is the zero-bubble paper's heuristic shape; the
// recorded order is the hint.
ListHint zb_greedy(const WorkModel& m, const std::vector<int>& cap);

}  // namespace rrfp
