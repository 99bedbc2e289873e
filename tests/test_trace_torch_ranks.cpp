// The PyTorch profiler's files read into ranks (sim/trace_torch_ranks.cpp): Kineto's files, each
// counting its times from its own process's start, on one clock; the world size they give
// holding the pipeline's ranks; a rank that is no whole number, and an action the replay cannot
// read, refused naming them.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "sim/trace_import.hpp"
#include "sim_helpers.hpp"
#include "trace_fixtures.hpp"

namespace rrfp::test {
namespace {

using Files = std::vector<std::pair<std::string, std::string>>;

// Kineto as PyTorch 2.2 on writes it: each file's ts counted from its process's start,
// baseTimeNanoseconds (rank r's process started r x 20.037 ms after rank 0's).
Files from_own_starts(Files files) {
  for (auto& [name, text] : files) {
    json doc = json::parse(text);
    const int rank = doc["distributedInfo"]["rank"];
    const std::int64_t start_us = 1712667379000000 + rank * 20037;
    doc["baseTimeNanoseconds"] = start_us * 1000;
    for (json& e : doc["traceEvents"])
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - static_cast<double>(start_us);
    text = doc.dump();
  }
  return files;
}

// Read as on one clock, such files put rank r r x 20 ms late in every step: a 4-stage step
// measured 67% long, and a rule 'saving' 6.6% of it, exit 0.
TEST(TorchRanks, FilesCountingFromTheirOwnStartsReplayOnOneClock) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    WorkModel m(config(4, 8, 1, true));
    RealizedWork w = realize(workload_preset("paper"), m, 1, seed);
    const StepRecord r = simulated(m, "bfw", Policy::Ready, w);
    const ImportedRun epoch = import_trace_texts(kineto_files(r, m, false), m, 1);
    const ImportedRun own = import_trace_texts(from_own_starts(kineto_files(r, m, false)), m, 1);
    EXPECT_EQ(own.work.compute_ns, w.compute_ns);
    EXPECT_EQ(own.messages_measured, epoch.messages_measured);
    // Both to a double's rounding of an epoch reading (0.25 us).
    EXPECT_NEAR(static_cast<double>(own.measured_ns), static_cast<double>(r.makespan), 250)
        << "seed " << seed;
    EXPECT_NEAR(static_cast<double>(own.measured_ns), static_cast<double>(epoch.measured_ns), 500);
  }
}

TEST(TorchRanks, RefusesClocksItCannotJoin) {
  WorkModel m(config(2, 2));
  RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  Files files = from_own_starts(kineto_files(simulated(m, "1f1b", Policy::Fixed, w), m, false));
  json doc = json::parse(files[0].second);  // rank 1's
  doc.erase("baseTimeNanoseconds");
  EXPECT_ERROR(import_trace_texts({files[1], {"rank1.json", doc.dump()}}, m, 1), InputError,
               "rank0.json counts its times from baseTimeNanoseconds and rank1.json gives none: "
               "the files of one run come from one profiler alike");
  for (const char* bad : {"-1", "\"1712667379000000000\"", "1.5", "4000000000000000001"}) {
    doc["baseTimeNanoseconds"] = json::parse(bad);
    EXPECT_ERROR(import_trace_texts({files[1], {"rank1.json", doc.dump()}}, m, 1), InputError,
                 "rank1.json: baseTimeNanoseconds (the epoch's, to the year 2096) must be a whole "
                 "number in [0, 4000000000000000000], got " +
                     std::string(bad));
  }
}

// A rank's file left out was replayed as a pipeline one stage shorter (twin -19%, exit 0).
TEST(TorchRanks, TheWorldSizeHoldsTheRanksOfCopiesOfOnePipeline) {
  WorkModel m(config(4, 4));
  RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  Files files = kineto_files(simulated(m, "1f1b", Policy::Fixed, w), m, false);
  files.erase(files.begin());  // rank 3's: the files come last rank first
  EXPECT_ERROR(import_trace_texts(files, WorkModel(config(3, 4)), 1), InputError,
               "rank2.json and the other files: 3 ranks with task spans (0, 1, 2), which do not "
               "divide distributedInfo.world_size 4 into copies of one pipeline: is a rank's "
               "file missing?");
  // One of two data-parallel copies of a pipeline of 2 (ranks 0 and 2 of 4) is a pipeline.
  WorkModel two(config(2, 4));
  RealizedWork w2 = realize(workload_preset("language"), two, 1, 1);
  Files copy = kineto_files(simulated(two, "1f1b", Policy::Fixed, w2), two, false);
  for (auto& [name, text] : copy) {
    json doc = json::parse(text);
    doc["distributedInfo"]["rank"] = 2 * doc["distributedInfo"]["rank"].get<int>();
    doc["distributedInfo"]["world_size"] = 4;
    text = doc.dump();
  }
  EXPECT_NO_THROW(import_trace_texts(copy, two, 1));
  json doc = json::parse(copy[0].second);
  doc["distributedInfo"]["world_size"] = 8;
  EXPECT_ERROR(import_trace_texts({copy[1], {copy[0].first, doc.dump()}}, two, 1), InputError,
               "rank0.json gives distributedInfo.world_size 4 and rank1.json 8: the files of one "
               "run share it");
}

// A rank given as a string, or as 2.5, was no rank: the files were taken in their names' order.
TEST(TorchRanks, ARankIsAWholeNumberBelowTheWorldSize) {
  const WorkModel m(config(1, 1));
  for (const char* bad : {"\"1\"", "2.5", "-1", "true"})
    EXPECT_ERROR(
        import_trace_texts({{"t.json", torch_one_rank("", R"("distributedInfo": {"rank": )" +
                                                              std::string(bad) + "}, ")}},
                           m, 1),
        InputError,
        "t.json: distributedInfo.rank must be a whole number in [0, 2147483646], got " +
            std::string(bad));
  EXPECT_ERROR(
      import_trace_texts({{"t.json", torch_one_rank("", R"("distributedInfo": {"rank": 4, )"
                                                        R"("world_size": 4}, )")}},
                         m, 1),
      InputError, "t.json: distributedInfo.rank is 4, past its world_size 4 (ranks count from 0)");
  EXPECT_NO_THROW(import_trace_texts(
      {{"t.json", torch_one_rank("", R"("distributedInfo": {"rank": 3.0, "world_size": 4}, )")}}, m,
      1));
}

// DualPipeV's overlapped forward and backward in one span was skipped, and the refusal of the
// step blamed the shape.
TEST(TorchRanks, ACombinedActionIsRefusedNamingIt) {
  EXPECT_ERROR(
      import_trace_texts({{"t.json", torch_one_rank(R"(, {"ph": "X", "name": )"
                                                    R"("PP:(0F1;0B0)OVERLAP_F_B", "ts": 40, )"
                                                    R"("dur": 10, "pid": 1, "tid": 1})")}},
                         WorkModel(config(1, 2)), 1),
      InputError,
      "t.json: event 3: span 'PP:(0F1;0B0)OVERLAP_F_B' times several actions at once "
      "(OVERLAP_F_B); a replay reads one task a span, PP:<chunk><F|I|B|W><microbatch>");
}

// The files of `files` in a fresh folder of the test's temporary one, named `name`.
std::string folder_of(const Files& files, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& [file, text] : files)
    std::ofstream(dir / file, std::ios::binary) << text;
  return dir.string();
}

// Zero bubble's V schedule puts chunks 0 and 2P-1 on stage 0: such a trace was read as a loop's
// and refused ("chunk 7 is not on that stage in this shape") unless --placement said vshape.
// Where each chunk ran tells the placement, as it does for rrfp's own traces.
TEST(TorchRanks, AVShapesChunksTellItsPlacement) {
  for (Placement pl : {Placement::VShape, Placement::Loop}) {
    const WorkModel m(config(4, 8, 2, true, pl));
    RealizedWork w = realize(workload_preset("paper"), m, 1, 1);
    const StepRecord r = simulated(m, pl == Placement::VShape ? "zb-v" : "bfw",
                                   pl == Placement::VShape ? Policy::Fixed : Policy::Ready, w);
    const std::string dir = folder_of(kineto_files(r, m, false), "rrfp_vshape_probe");
    const PipelineConfig c = infer_trace_config(dir, 1);
    EXPECT_EQ(c.placement, pl);
    EXPECT_EQ(c.vpp, 2);
    EXPECT_NEAR(static_cast<double>(import_trace(dir, WorkModel(c), 1).measured_ns),
                static_cast<double>(r.makespan), 250);
    std::filesystem::remove_all(dir);
  }
}

// A stage's TP ranks, a file each, read without --tp: four ranks running chunks 0 0 1 1. The
// refusal named --pp and --vpp only, where --tp 2 reads it.
TEST(TorchRanks, TensorParallelFilesReadAsStagesSayTp) {
  Files files;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string c = std::to_string(rank / 2);
    files.emplace_back("rank" + std::to_string(rank) + ".json",
                       R"([{"name": "PP:)" + c +
                           R"(F0", "ph": "X", "ts": 0, "dur": 10, )"
                           R"("pid": "CPU functions", "tid": 1}, {"name": "PP:)" +
                           c +
                           R"(B0", "ph": "X", "ts": 20, "dur": 10, "pid": "CPU functions", )"
                           R"("tid": 1}])");
  }
  const std::string dir = folder_of(files, "rrfp_tp_probe");
  EXPECT_ERROR(infer_trace_config(dir, 1), InputError,
               "2 chunks on 4 stages (chunk 1 first at " + dir +
                   "/rank2.json: event 1): give the shape (`pp`, `vpp`; `tp` 2 where each "
                   "stage's 2 tensor-parallel ranks have a file each), or mend the trace");
  const PipelineConfig c = infer_trace_config(dir, 2);
  EXPECT_EQ(c.pp, 2);
  EXPECT_EQ(c.microbatches, 1);
  std::filesystem::remove_all(dir);
  // The reverse: two stages' files read at `tp` 2 were one stage whose ranks each lacked the
  // other's chunk ("lacks tasks ... (tp rank 1)").
  Files two = {files[0], files[2]};
  two[1].first = "rank1.json";
  const std::string dir2 = folder_of(two, "rrfp_tp_stages");
  EXPECT_ERROR(infer_trace_config(dir2, 2), InputError,
               dir2 + "/rank1.json: tp rank 1 of stage 0 runs chunks 1, where tp rank 0 (" + dir2 +
                   "/rank0.json) runs 0: the tensor-parallel ranks of a stage run the same "
                   "chunks; were the files stages of their own (leave out `tp`)?");
  EXPECT_EQ(infer_trace_config(dir2, 1).pp, 2);
  std::filesystem::remove_all(dir2);
}

// Each file's events that `keep` (which may edit them) keeps.
template <class Keep>
Files edited(Files files, Keep keep) {
  for (auto& [name, text] : files) {
    json doc = json::parse(text), kept = json::array();
    for (json& e : doc["traceEvents"])
      if (keep(e)) kept.push_back(e);
    doc["traceEvents"] = kept;
    text = doc.dump();
  }
  return files;
}

// A profiler's step whose microbatch 0 ran a whole backward ("B") where the others ran input
// and weight halves ("I", "W"), replayed with the backward whole: microbatch 0's B holds its W's
// work, and the others' B their I and W. It was refused, asking for microbatch 0's W.
TEST(TorchRanks, AWholeBackwardAmongSplitOnesNeedsNoW) {
  const WorkModel split(config(2, 4, 1, true)), whole(config(2, 4));
  RealizedWork w = realize(workload_preset("paper"), split, 1, 1);
  const Files files =
      edited(kineto_files(simulated(split, "bfw", Policy::Ready, w), split, false), [](json& e) {
        const std::string n = e.value("name", "");
        const bool mb0 = n.size() == 6 && n.substr(0, 3) == "PP:" && n[5] == '0';
        if (mb0 && n[4] == 'I') e["name"] = n.substr(0, 4) + "B0";
        return !(mb0 && n[4] == 'W');
      });
  const ImportedRun in = import_trace_texts(files, whole, 1);
  for (int c = 0; c < 2; ++c) {
    // Microbatch 0's B is its recorded input half alone (its W taken out of the trace).
    EXPECT_EQ(in.work.compute(0, whole.index(TaskId{Kind::B, c, 0})),
              w.compute(0, split.index(TaskId{Kind::B, c, 0})));
    EXPECT_EQ(in.work.compute(0, whole.index(TaskId{Kind::B, c, 1})),
              w.compute(0, split.index(TaskId{Kind::B, c, 1})) +
                  w.compute(0, split.index(TaskId{Kind::W, c, 1})));
  }
}

// A profiler's step with input halves ("I") and not one W (its W spans filtered out) was read
// as a whole backward of the input halves alone: a step 9% short, exit 0.
TEST(TorchRanks, InputHalvesWithoutAnyWAreRefused) {
  const WorkModel split(config(2, 4, 1, true)), whole(config(2, 4));
  RealizedWork w = realize(workload_preset("paper"), split, 1, 1);
  const Files files =
      edited(kineto_files(simulated(split, "zb-h1", Policy::Fixed, w), split, false), [](json& e) {
        const std::string n = e.value("name", "");
        return n.substr(0, 3) != "PP:" || n.find('W') == std::string::npos;
      });
  EXPECT_ERROR(import_trace_texts(files, whole, 1), InputError,
               "task B c0 m0 is the input half of a split backward (a torch 'I' span), but the "
               "step records no W task");
  EXPECT_ERROR(import_trace_texts(files, split, 1), InputError, "lacks tasks");
  // Its shape, read from the trace, is a split one, whose refusal does not say to replay it
  // with `split_backward` off.
  const std::string dir = folder_of(files, "rrfp_input_halves");
  EXPECT_TRUE(infer_trace_config(dir, 1).split_backward);
  try {
    import_trace(dir, split, 1);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find("split_backward"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A receive given twice was read as one (the first), and one ending after its consumer had
// started as a timed message: both exit 0. Each is refused naming the receive.
TEST(TorchRanks, AReceiveTwiceOrEndingAfterItsConsumerStartedIsRefused) {
  const WorkModel m(config(2, 4));
  RealizedWork w = realize(workload_preset("paper"), m, 1, 1);
  const Files files = kineto_files(simulated(m, "1f1b", Policy::Fixed, w), m, false);
  auto with = [&](auto change) {
    Files out = files;
    for (auto& [name, text] : out) {
      json doc = json::parse(text);
      json& events = doc["traceEvents"];
      for (size_t i = 0, n = events.size(); i < n; ++i)
        if (events[i].value("name", "") == "PP:1RECV_F2") change(events, i);
      text = doc.dump();
    }
    return out;
  };
  EXPECT_NO_THROW(import_trace_texts(files, m, 1));
  EXPECT_ERROR(import_trace_texts(with([](json& ev, size_t i) { ev.push_back(ev[i]); }), m, 1),
               InputError, ": receive of F c1 m2 appears twice");
  EXPECT_ERROR(import_trace_texts(with([](json& ev, size_t i) {
                                    ev[i]["dur"] = ev[i]["dur"].get<double>() + 50000;
                                  }),
                                  m, 1),
               InputError, "after its consumer started");
}

}  // namespace
}  // namespace rrfp::test
