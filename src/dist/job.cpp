#include "dist/job.hpp"

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "core/modes.hpp"

namespace rrfp {

void validate(const JobLayout& l, int ranks, const std::string& where) {
  if (l.pp < 1) throw InputError("`pp`: must be at least 1, got " + std::to_string(l.pp));
  checked_tp(l.tp);
  if (l.dp < 1) throw InputError("`dp`: must be at least 1, got " + std::to_string(l.dp));
  // Checked for overflow: an int product wrapped (641 x 6700417 read 1) and passed for a job of
  // 1 rank, and so may a 64-bit one.
  long long needs = 0;
  const bool past = __builtin_mul_overflow(static_cast<long long>(l.pp), l.tp, &needs) ||
                    __builtin_mul_overflow(needs, static_cast<long long>(l.dp), &needs);
  if (past || needs != ranks)
    throw InputError(where + ": the layout `pp` " + std::to_string(l.pp) + " x `tp` " +
                     std::to_string(l.tp) + " x `dp` " + std::to_string(l.dp) + " needs " +
                     (past ? std::string("more than 2^63") : std::to_string(needs)) + " ranks");
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

double job_digest(std::uint64_t hash) {
  return static_cast<double>(hash >> 12);
}

std::vector<Differing> differing_over_job(Job& job, std::span<const double> digests) {
  const auto every = job.all_gather(digests);
  std::vector<Differing> out(digests.size());
  for (std::size_t i = 0; i < digests.size(); ++i) {
    auto digest = [&](int r) { return i < every[r].size() ? every[r][i] : -1.0; };
    Differing& d = out[i];
    for (int r = 0; r < static_cast<int>(every.size()); ++r) {
      d.by_rank.push_back(digest(r));
      if (digest(r) < 0) continue;
      if (d.first < 0) d.first = r;
      if (digest(r) != digest(d.first)) d.other.push_back(r);
    }
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t k = 0; k < ranks.size() && k < 8; ++k)
    out += (k ? ", " : "") + std::to_string(ranks[k]);
  return out + (ranks.size() > 8 ? ", ..." : "");
}

void agree_on_input(Job* job, const std::function<void()>& check) {
  if (!job) return check();
  std::optional<std::string> refused;
  try {
    check();
  } catch (const JobInputError&) {
    throw;  // agreed already, by a collective every process reached
  } catch (const InputError& e) {
    refused = e.what();
  }
  const double mine = refused ? 1 : 0;
  const auto every = job->all_gather(std::span<const double>(&mine, 1));
  int first = -1;
  for (int r = 0; r < static_cast<int>(every.size()) && first < 0; ++r)
    if (!every[r].empty() && every[r][0] != 0) first = r;
  if (first < 0) return;
  if (first == job->rank())
    throw JobInputError((first == 0 ? "" : "mpi rank " + std::to_string(first) + ": ") + *refused,
                        true);
  throw JobInputError(
      "mpi rank " + std::to_string(first) + " refused its input (its line says why)", false);
}

}  // namespace rrfp
