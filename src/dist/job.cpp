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

void dp_sum(Job& job, std::span<float> values) {
  const auto all = values_of<float>(job.dp_all_gather(std::as_bytes(values)));
  // Every replica gets the same list, so a mismatch fails on all of them alike; summing the
  // overlap would leave each replica other bits (which parameters train is the replicas' to
  // agree on, and a frozen parameter on one of them is easily missed).
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].size() != all[0].size())
      throw InputError("`dp`: the replicas' gradients differ in size (" +
                       std::to_string(all[0].size()) + " values on replica 0, " +
                       std::to_string(all[r].size()) + " on replica " + std::to_string(r) +
                       "): every replica must train the same parameters");
  std::copy(all[0].begin(), all[0].end(), values.begin());
  for (std::size_t r = 1; r < all.size(); ++r)
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] += all[r][i];
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
