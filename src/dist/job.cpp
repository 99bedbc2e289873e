#include "dist/job.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/modes.hpp"

namespace rrfp {

void validate(const JobLayout& l, int ranks, const std::string& where) {
  if (l.pp < 1) throw InputError("`pp`: must be at least 1, got " + std::to_string(l.pp));
  checked_tp(l.tp);
  if (l.dp < 1) throw InputError("`dp`: must be at least 1, got " + std::to_string(l.dp));
  if (l.world() != ranks)
    throw InputError(where + ": the layout `pp` " + std::to_string(l.pp) + " x `tp` " +
                     std::to_string(l.tp) + " x `dp` " + std::to_string(l.dp) + " needs " +
                     std::to_string(l.world()) + " ranks");
}

std::size_t place_among(std::span<const int> peers, int me, int endpoints) {
  std::size_t at = peers.size();
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < 0 || peers[i] >= endpoints || (i > 0 && peers[i] <= peers[i - 1]))
      throw InputError("`peers`: endpoints in ascending order between 0 and " +
                       std::to_string(endpoints - 1) + ", got " + std::to_string(peers[i]) +
                       " at place " + std::to_string(i));
    if (peers[i] == me) at = i;
  }
  if (at == peers.size())
    throw InputError("`peers`: must include this endpoint (" + std::to_string(me) + ")");
  return at;
}

double max_over_job(Job& job, double mine) {
  double most = mine;
  for (const auto& v : job.all_gather(std::span<const double>(&mine, 1)))
    most = std::max(most, v.at(0));
  return most;
}

}  // namespace rrfp
