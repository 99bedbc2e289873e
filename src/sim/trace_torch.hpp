#pragma once
// Inside the PyTorch profiler's reader (sim/trace_torch.cpp): its task labels, and its files
// read into one process per rank (sim/trace_torch_ranks.cpp), each rank's spans and steps on
// one clock across the files.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sim/trace_formats.hpp"

namespace rrfp::trace::torch {

struct Label {
  bool recv = false;
  bool input_half = false;  // "I": the input half of a split backward
  TaskId task;              // the task, or the receive's consumer
};

// The digits at s[i] (at most 9, and no digit after them) into `value`, i past them.
bool digits_at(const std::string& s, size_t& i, int& value);
// "PP:3F12" -> F c3 m12; "PP:1RECV_B4" -> the receive of B c1 m4; "Forward 7" -> F on the
// rank's own chunk (`own`); anything else: nullopt.
std::optional<Label> parse_label(const std::string& name, int own);
// Whether `name` is torch.distributed.pipelining's label of a compute action or a receive
// whatever follows (parse_label refusing it, a label gone wrong).
bool names_a_task(const std::string& name);

struct Span {
  double ts = 0, dur = 0;
  std::string name;
  bool gpu = false;
  size_t event = 0;  // its index in its file, from 1
};

struct TorchProcess {
  double rank = 0;      // distributedInfo.rank, else the file's position
  bool ranked = false;  // the rank is distributedInfo's
  size_t file = 0;
  size_t order = 0;
  bool legacy = false;
  std::vector<Span> spans;
  std::map<int, std::pair<double, double>> steps;  // N -> [start, end)
  std::set<int> cpu_steps;                         // the N of each ProfilerStep#N seen on the CPU
  std::string origin;
  std::string pid;  // as the JSON gives it (a merged file's "rank1")
};

// The files' processes with task spans, one a rank, in rank order, each on the clock of the
// earliest-started file where the profiler gives the files' starts (baseTimeNanoseconds).
std::vector<TorchProcess> processes_of(const std::vector<Doc>& docs);

}  // namespace rrfp::trace::torch
