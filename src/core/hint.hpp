#pragma once
// Hints rank a stage's ready tasks (semantics.md §2). A list hint is a per-stage order of every
// task; a rule hint is a stateful rule over the ready set (BF, FB, B-/F-priority, BFW).
#include <string>
#include <variant>
#include <vector>

#include "core/task.hpp"
#include "core/work_model.hpp"

namespace rrfp {

enum class Rule { BF, FB, BPriority, FPriority, BFW, Adaptive };

struct ListHint {
  std::vector<std::vector<TaskId>> stages;  // stages[s] = the order of stage s's tasks
};

struct Hint {
  std::string name;  // "1f1b", "bfw", "file:PATH", ...
  std::variant<ListHint, Rule> body;

  bool is_list() const { return std::holds_alternative<ListHint>(body); }
  const ListHint& list() const { return std::get<ListHint>(body); }
  Rule rule() const { return std::get<Rule>(body); }
};

// Every generator and rule name `make_hint` accepts, in documentation order.
const std::vector<std::string>& hint_names();
// Whether `name` is one of hint_names() (else a hint names a file).
bool is_hint_name(const std::string& name);
// hint_names() as one line for messages: "gpipe, 1f1b, ..., adaptive".
std::string hint_names_listed();
bool is_rule_hint_name(const std::string& name);
// Whether a hint file written to `path` is JSON: its name ends in .json in any case (best.JSON
// was written as text). Reading picks the format from the content.
bool hint_path_is_json(const std::string& path);
// Whether the hint needs (or, for the ZB family and BFW, implies) a split backward; for a hint
// file, whether it was written for one.
bool hint_wants_split(const std::string& name);
// Whether the hint cannot run without a split backward (the ZB family, BFW, a hint file written
// for one), so that a W cap under `split_backward` off is left to the hint's own refusal: the
// adaptive rule wants the split but runs without it, ignoring the cap.
bool hint_needs_split(const std::string& name);

// Builds a named hint for the model, or reads a hint file when `name_or_path` names one (a
// path containing '/', ending in .txt or .json in any case, or any file that exists: what
// `plan --out` and `schedule show --out` wrote is read back whatever its name, unless the name
// is a hint's own). Throws InputError/HintError.
Hint make_hint(const std::string& name_or_path, const WorkModel& model);

// The largest `F done - B done` any stage reaches when the list runs in fixed order.
int fixed_order_peak(const ListHint& hint, const WorkModel& model);
std::vector<int> fixed_order_peaks(const ListHint& hint, const WorkModel& model);
// The largest `B done - W done` any stage reaches when the list runs in fixed order: the
// weight gradients it defers, whose inputs it holds meanwhile (ZB-H2's greedy list defers most
// of a stage's to its end; the ready policy's cap, `max_pending_w`, does not bound them).
int fixed_order_pending_w_peak(const ListHint& hint, const WorkModel& model);

// Default back-pressure limit (semantics.md §2): the hint's own fixed-order peak on its most
// loaded stage; rule hints use 1F1B's (V = 1), interleaved 1F1B's (V >= 2, loop placement) or
// ZB-V's (the V-shaped placement).
int default_limit(const Hint& hint, const WorkModel& model);

// Generators (exposed for tests). Each throws InputError when the config does not fit.
ListHint gen_gpipe(const WorkModel& m);
ListHint gen_1f1b(const WorkModel& m);
ListHint gen_interleaved_1f1b(const WorkModel& m);
// Whether interleaved 1F1B takes `microbatches` at `pp` stages: in rounds of pp or more that
// divide them (every multiple of pp; any count below it; 10 at pp 4, not 9).
bool interleaved_1f1b_takes(int pp, int microbatches);
// The microbatches of one of its rounds: pp where pp divides them, as torch groups them else
// (microbatches / max(1, microbatches / pp): all of them below pp, 5 of 10 at pp 4).
int interleaved_1f1b_round(int pp, int microbatches);
ListHint gen_looped_bfs(const WorkModel& m);
ListHint gen_zb_h1(const WorkModel& m);
ListHint gen_zb_h2(const WorkModel& m);
ListHint gen_zb_v(const WorkModel& m);

}  // namespace rrfp
