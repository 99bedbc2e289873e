#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "core/error.hpp"
#include "python/bindings.hpp"
#include "python/pipeline_core.hpp"

namespace rrfp::py {
namespace pyb = pybind11;
namespace {

using Group = c10::intrusive_ptr<c10d::ProcessGroup>;

// A ProcessGroup that does not cast means this extension and torch were built with two pybind11
// ABIs (torch 2.11's wheel against a pip pybind11 did), which no change of input can mend.
Group to_group(const pyb::object& group, const char* option) {
  try {
    return group.cast<Group>();
  } catch (const pyb::cast_error&) {
    auto torch = pyb::module_::import("torch");
    const pyb::object dist = torch.attr("distributed");
    if (!pyb::hasattr(dist, "ProcessGroup") || !pyb::isinstance(group, dist.attr("ProcessGroup")))
      throw pyb::type_error(std::string(option) + ": a torch.distributed ProcessGroup, got " +
                            pyb::str(pyb::type::of(group).attr("__name__")).cast<std::string>());
    throw pyb::type_error(
        std::string(option) + ": this rrfp extension cannot take torch " +
        pyb::str(torch.attr("__version__")).cast<std::string>() +
        "'s ProcessGroup: the two were built against different pybind11 ABIs (rebuild rrfp "
        "against this torch: its CMake takes torch's pybind11 headers and ABI tags)");
  }
}

}  // namespace

void bind_pipeline(pyb::module_& m) {
  pyb::class_<PipelineCore>(m, "PipelineCore",
                            "the C++ half of rrfp.Pipeline (use rrfp.Pipeline instead)")
      .def(pyb::init([](int pp, int vpp, int microbatches, std::string placement,
                        std::string split_backward, std::string hint, std::string policy, int limit,
                        int max_pending_w, std::string comm, double timeout, double arrival_timeout,
                        std::string transport, int dp, pyb::object group, pyb::object dp_group,
                        pyb::object collectives, pyb::object arrivals, pyb::object arrival_replicas,
                        pyb::object global_ranks) {
             CoreOptions o;
             o.pp = pp;
             o.vpp = vpp;
             o.microbatches = microbatches;
             o.placement = std::move(placement);
             o.split_backward = std::move(split_backward);
             o.hint = std::move(hint);
             o.policy = std::move(policy);
             o.limit = limit;
             o.max_pending_w = max_pending_w;
             o.comm = std::move(comm);
             o.timeout_s = timeout;
             o.arrival_timeout_s = arrival_timeout;
             o.transport = std::move(transport);
             o.dp = dp;
             C10dGroups& g = o.groups;
             if (!group.is_none()) g.pipeline = to_group(group, "group");
             if (!dp_group.is_none()) g.replicas = to_group(dp_group, "dp_group");
             if (!collectives.is_none()) g.collectives = to_group(collectives, "collectives");
             if (!arrivals.is_none()) g.arrivals = to_group(arrivals, "arrivals");
             if (!arrival_replicas.is_none())
               g.arrival_replicas = to_group(arrival_replicas, "arrival_replicas");
             if (!global_ranks.is_none()) g.global_ranks = global_ranks.cast<std::vector<int>>();
             return std::make_unique<PipelineCore>(o);
           }),
           pyb::kw_only(), pyb::arg("pp"), pyb::arg("vpp"), pyb::arg("microbatches"),
           pyb::arg("placement"), pyb::arg("split_backward"), pyb::arg("hint"), pyb::arg("policy"),
           pyb::arg("limit"), pyb::arg("max_pending_w"), pyb::arg("comm"), pyb::arg("timeout"),
           pyb::arg("arrival_timeout"), pyb::arg("transport"), pyb::arg("dp") = 1,
           pyb::arg("group") = pyb::none(), pyb::arg("dp_group") = pyb::none(),
           pyb::arg("collectives") = pyb::none(), pyb::arg("arrivals") = pyb::none(),
           pyb::arg("arrival_replicas") = pyb::none(), pyb::arg("global_ranks") = pyb::none())
      .def_property_readonly("pp", [](const PipelineCore& c) { return c.model().pp(); })
      .def_property_readonly("vpp", [](const PipelineCore& c) { return c.model().vpp(); })
      .def_property_readonly("chunks", [](const PipelineCore& c) { return c.model().chunks(); })
      .def_property_readonly("microbatches",
                             [](const PipelineCore& c) { return c.model().microbatches(); })
      .def_property_readonly("split_backward",
                             [](const PipelineCore& c) { return c.model().split(); })
      .def_property_readonly(
          "ordered_forwards",
          [](const PipelineCore& c) { return c.model().config().ordered_forwards; })
      .def_property_readonly("rank", &PipelineCore::rank)
      .def_property_readonly("holds_messages", &PipelineCore::holds_messages)
      .def_property_readonly("world", &PipelineCore::world)
      .def_property_readonly("replica", &PipelineCore::replica)
      .def("dp_sum", &PipelineCore::dp_sum, pyb::arg("parts"))
      .def("exchange", &PipelineCore::exchange, pyb::arg("mine"), pyb::arg("peers"))
      .def("all_gather", &PipelineCore::all_gather, pyb::arg("mine"), pyb::arg("arrival") = false)
      .def("all_gather_bytes", &PipelineCore::all_gather_bytes, pyb::arg("mine"))
      .def("replica_all_gather", &PipelineCore::replica_all_gather, pyb::arg("mine"))
      .def("dp_all_gather", &PipelineCore::dp_all_gather, pyb::arg("mine"))
      .def("close", &PipelineCore::close)
      .def("take_layout", &PipelineCore::take_layout)
      .def("order_forwards", &PipelineCore::order_forwards)
      .def("local_stages", &PipelineCore::local_stages)
      .def("stage_of",
           [](const PipelineCore& c, int chunk) {
             if (chunk < 0 || chunk >= c.model().chunks())
               throw InputError("`chunk`: must be between 0 and " +
                                std::to_string(c.model().chunks() - 1) + ", got " +
                                std::to_string(chunk));
             return c.model().stage_of(chunk);
           })
      .def("chunks_of", [](const PipelineCore& c, int stage) { return c.model().chunks_of(stage); })
      .def("set_runners", &PipelineCore::set_runners)
      .def("run_step", &PipelineCore::run_step, pyb::arg("step"),
           pyb::arg("sizes") = std::vector<std::int64_t>{}, pyb::arg("closing") = pyb::none());
  m.def("_shutdown", &shutdown_processes, pyb::arg("held_call") = "",
        "tears down every pipeline and the MPI world (registered with atexit)");
  m.def("_abort", &abort_processes, pyb::arg("code"),
        "ends every process of the MPI job (uncaught exceptions; returns without MPI)");
}

}  // namespace rrfp::py
