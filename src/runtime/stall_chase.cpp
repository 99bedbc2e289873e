// A stalled process's question down the chain of processes it waits on. A watchdog sees its
// own process's stages only: when a process stops, the first of the others to time out may be
// one that waits on a neighbour that itself waits on the stopped process, and its report named
// the neighbour. Before it fails the step, the process asks each process it expects messages
// from what that one waits on, then asks those, and its report says where the chain ends: a
// process that does not answer (stopped, hung, or not scheduled) or one that waits on nobody
// (in a long task). The answers come from the transports' threads, which keep running in a
// process whose compute is stuck.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <set>
#include <utility>

#include "core/clock.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "runtime/control_text.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

namespace {

constexpr std::size_t kMaxAnswerText = 600;  // of a peer's description, in the report
constexpr int kMaxAwaits = 64;               // endpoints named in one answer

}  // namespace

// Runs on the transport's thread, which must not throw: an answer that cannot be made is none,
// which the asker reports as such.
void Runtime::answer_query(const Message& msg, const Stage& st, int r, Transport& ep) {
  try {
    const int tp = std::max(1, opt_.tp);
    std::string body;
    int n = 0;
    for (int s : st.awaited_stages(r)) {
      if (n++ == kMaxAwaits) break;
      body += (body.empty() ? "" : ",") + std::to_string(s * tp + r);
    }
    const std::int64_t now = now_ns();
    body += ";" + st.describe(now);
    MessageTag tag;
    tag.control = Control::Answer;
    tag.round = msg.tag.round;
    tag.step = step_now_.load();
    tag.cost_ns = now - std::max(step_start_ns_.load(), failure_.last_progress_ns());
    body.resize(std::min(body.size(), kMaxAnswerText + 4 * kMaxAwaits));
    ep.send(msg.src, tag, payload_of_text(body));
  } catch (...) {
  }
}

void Runtime::on_answer(Message&& msg) {
  PeerAnswer a;
  a.arrived_ns = now_ns();
  a.step = msg.tag.step;
  a.idle_ns = msg.tag.cost_ns;
  const std::string body = text_of_payload(msg.payload);
  const std::size_t semi = std::min(body.find(';'), body.size());
  const int world = m_.pp() * std::max(1, opt_.tp);
  for (std::size_t at = 0; at < semi;) {
    int e = -1;
    const auto [end, ec] = std::from_chars(body.data() + at, body.data() + semi, e);
    if (ec == std::errc() && e >= 0 && e < world) a.awaits.push_back(e);
    at = static_cast<std::size_t>(end - body.data()) + 1;  // past the comma (or the junk)
  }
  if (semi < body.size())
    a.text = printable(std::string_view(body).substr(semi + 1), kMaxAnswerText);
  std::lock_guard lk(ask_mu_);
  if (msg.tag.round != ask_round_) return;  // a round the asker has given up on
  answers_[msg.src] = std::move(a);
  ask_cv_.notify_all();
}

Runtime::Round Runtime::ask_round(const std::vector<int>& wave, int step, std::int64_t end,
                                  std::int64_t wave_ns, std::vector<std::string>& said) {
  MessageTag tag;
  tag.control = Control::Query;
  tag.step = step;
  {
    std::lock_guard lk(ask_mu_);
    tag.round = ++ask_round_;
    answers_.clear();
  }
  Round r;
  r.from_ns = now_ns();  // before the queries: an in-process peer answers within its send
  for (int e : wave) {
    try {
      endpoints_[0]->send(e, tag, Payload{});
      r.asked.push_back(e);
    } catch (const std::exception&) {
      said.push_back(peer_name(e) + " could not be asked (its connection is closed)");
    }
  }
  const std::int64_t from = now_ns(), until = std::min(end, from + wave_ns);
  r.waited_ns = std::max<std::int64_t>(until - from, 0);
  std::unique_lock lk(ask_mu_);
  ask_cv_.wait_for(lk, std::chrono::nanoseconds(r.waited_ns),
                   [&] { return answers_.size() >= r.asked.size(); });
  r.got.swap(answers_);
  ++ask_round_;  // later answers are stale
  return r;
}

Runtime::Chase Runtime::chase_stall(std::int64_t now) {
  const int tp = std::max(1, opt_.tp), world = m_.pp() * tp;
  if (static_cast<int>(local_.size()) >= world || endpoints_.empty()) return {};
  // A round waits up to a second for its answers (less under a shorter `timeout`).
  const std::int64_t wave_ns =
      std::clamp<std::int64_t>(opt_.timeout_ms * 1'000'000, 100'000'000, 1'000'000'000);
  static_assert(3 * 1000 <= kStallChaseMaxMs);
  const std::int64_t end = now + 3 * wave_ns;
  std::set<int> seen(local_.begin(), local_.end());
  std::vector<int> wave;
  const auto ask_later = [&](int e) {
    if (seen.insert(e).second) wave.push_back(e);
  };
  for (int e : local_)
    for (int s : stages_[e / tp]->awaited_stages(e % tp))
      ask_later(s * tp + e % tp);
  std::vector<std::string> said;
  Chase out;
  const int step = step_now_.load();
  while (!wave.empty() && !failure_.failed() && now_ns() < end) {
    const Round r = ask_round(std::exchange(wave, {}), step, end, wave_ns, said);
    for (int e : r.asked) {
      const auto it = r.got.find(e);
      if (it == r.got.end()) {
        said.push_back(peer_name(e) + " did not answer within " +
                       fmt("%.1f", static_cast<double>(r.waited_ns) / 1e9) +
                       " s (stopped, hung, or not scheduled)");
        continue;
      }
      const PeerAnswer& a = it->second;
      std::string line = peer_name(e);
      // An answer that comes late came from a process that was stopped, or not run, until
      // then: its idle time was measured on waking (a rank under SIGSTOP, continued by
      // mpirun to be ended, answered that it had made no progress for 0 ms, and read as live).
      if (const std::int64_t took = a.arrived_ns - r.from_ns; took > wave_ns / 2)
        line += ", answering only after " + std::to_string(took / 1'000'000) +
                " ms (stopped or not run until then),";
      if (a.step < 0)
        line += " is between steps";
      else
        line += (a.step != step ? " in step " + std::to_string(a.step) + "," : std::string()) +
                " made no progress for " + std::to_string(a.idle_ns / 1'000'000) + " ms";
      std::string others;  // the processes it waits on but this one, which the report names
      for (int w : a.awaits) {
        if (std::find(local_.begin(), local_.end(), w) != local_.end()) continue;
        others += (others.empty() ? "" : ", ") + peer_name(w);
        ask_later(w);
      }
      // Waiting on this process alone, its own words say why (a leader's choice, an agree
      // round, a collective: waits the chain does not follow); "waits for messages from this
      // process" read as a cycle between the two. Following an agree round to the tp ranks it
      // waits for was tried (a message to one rank lost, P=2 T=2): the report went round the
      // group's ranks and lost the round's words, which name the proposals that differed.
      line += others.empty() ? ": [" + a.text + "]" : " and waits for messages from " + others;
      // Within a wave of its own timeout (the job's processes share theirs), its watchdog
      // fires about when this one's did, and its chase, a round shorter, ends about as soon:
      // awaited a wave, or until its timeout is up and half a wave more for its word to come
      // (a wave alone missed a peer whose last progress was fresh, under load). So too where it
      // waits on nothing the chain follows (its group's collective with a stopped rank, a
      // leader's choice, an agree round): its report says that wait, and both spoke, one
      // naming only it, in 3 of 4 runs with a stopped TP rank. (Waiting on this process alone,
      // it is this one's report that says why.)
      const std::int64_t left = opt_.timeout_ms * 1'000'000 - a.idle_ns;
      if (a.step == step && left <= wave_ns && (!others.empty() || a.awaits.empty()))
        out.defer_ns = std::max(out.defer_ns, std::max(wave_ns, left + wave_ns / 2));
      said.push_back(std::move(line));
    }
  }
  if (said.empty()) return {};
  out.text = "; asked in turn:";
  for (std::size_t i = 0; i < said.size(); ++i)
    out.text += (i ? "; " : " ") + said[i];
  return out;
}

}  // namespace rrfp
