// A program of a user's: 1F1B at P=2, M=4 on the multimodal workload (seed 1), simulated; prints
// the step's makespan in ns, which `rrfp simulate` reports for the same run.
#include <iostream>

#include "core/hint.hpp"
#include "core/work_model.hpp"
#include "sim/simulator.hpp"
#include "sim/workload.hpp"

int main() {
  rrfp::PipelineConfig c;
  c.pp = 2;
  c.microbatches = 4;
  const rrfp::WorkModel m(c);
  rrfp::SimOptions opt;
  opt.arbiter.policy = rrfp::Policy::Fixed;
  const rrfp::RealizedWork w = rrfp::realize(rrfp::workload_preset("multimodal"), m, 1, 1);
  std::cout << rrfp::simulate(m, rrfp::make_hint("1f1b", m), w, opt).makespan << "\n";
}
