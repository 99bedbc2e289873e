// Training correctness (semantics.md §6): after 3 optimizer steps every parameter is bitwise
// equal across a single-stage, non-pipelined reference and pipelined runs under different
// hints, policies, split backward, interleaving and random injected delays that force
// different dispatch orders.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "mutate.hpp"
#include "sim/rng.hpp"
#include "train/checkpoint.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {
using test::fuzz_iterations;
using test::FuzzTally;
using test::mutate;

struct Case {
  const char* name;
  int pp, vpp;
  std::string hint;
  Policy policy;
  bool split;
  Placement placement = Placement::Loop;
};

TrainOptions options(const Case& c, std::uint64_t delay_seed) {
  TrainOptions o;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.layers = 4;
  o.model.max_seq = 64;
  o.model.seed = 3;
  o.pipe.pp = c.pp;
  o.pipe.vpp = c.vpp;
  o.pipe.microbatches = 4;
  o.pipe.split_backward = c.split;
  o.pipe.placement = c.placement;
  o.hint = c.hint;
  o.runtime.arbiter.policy = c.policy;
  o.steps = 3;
  o.opt.warmup = 1;
  o.opt.lr = 1e-2;
  o.opt.clip = 0.5;  // small enough to clip: the global norm must agree bitwise too
  o.window = {8, 48};
  o.runtime.timeout_ms = 60'000;
  if (delay_seed)
    o.wrap = [delay_seed](std::unique_ptr<StageProgram> p, int stage,
                          int) -> std::unique_ptr<StageProgram> {
      return std::make_unique<Delayed>(std::move(p), stage, delay_seed);
    };
  return o;
}

std::vector<torch::Tensor> train(const Case& c, std::uint64_t delay_seed,
                                 std::vector<double>* losses = nullptr,
                                 const std::string& task = "text") {
  TrainOptions o = options(c, delay_seed);
  o.task = task;
  Trainer t(o);
  for (int s = 0; s < 3; ++s) {
    const StepReport r = t.step();
    if (losses) losses->push_back(r.loss);
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : t.parameters())
    out.push_back(p.detach().clone());
  return out;
}

// GPipe with the microbatches in reverse (P=2, M=4): gradients arrive last microbatch first, so
// only the reorder buffer keeps the sum in microbatch order.
std::string reversed_hint(bool split) {
  const std::string path = ::testing::TempDir() + (split ? "rev_split.txt" : "rev.txt");
  std::ofstream f(path);
  for (int s = 0; s < 2; ++s) {
    f << "stage " << s << ":";
    for (int mb = 3; mb >= 0; --mb)
      f << " F" << s << ":" << mb;
    for (int mb = 3; mb >= 0; --mb) {
      f << " B" << s << ":" << mb;
      if (split) f << " W" << s << ":" << mb;
    }
    f << "\n";
  }
  return path;
}

// Trains the single-stage reference and every case under two delay seeds; every case must end
// with the reference's losses and bitwise its parameters.
void expect_reference_bits(const std::vector<Case>& cases, const std::string& task) {
  const Case ref{"reference", 1, 1, "1f1b", Policy::Fixed, false};
  std::vector<double> ref_losses;
  const auto expect = train(ref, 0, &ref_losses, task);
  for (const Case& c : cases)
    for (std::uint64_t seed : {1, 2}) {
      std::vector<double> losses;
      const auto got = train(c, seed, &losses, task);
      ASSERT_EQ(got.size(), expect.size()) << c.name;
      EXPECT_EQ(losses, ref_losses) << c.name << " seed " << seed;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(bitwise_equal(got[i], expect[i]))
            << c.name << " seed " << seed << ": parameter " << i << " differs";
    }
}

// Schedules both tasks run: list and rule hints, split backward, interleaving, zero bubble.
std::vector<Case> common_schedules() {
  return {
      {"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false},
      {"ready 1f1b", 2, 1, "1f1b", Policy::Ready, false},
      {"ready bf", 2, 1, "bf", Policy::Ready, false},
      {"ready bfw split", 2, 1, "bfw", Policy::Ready, true},
      {"fixed interleaved V=2", 2, 2, "interleaved-1f1b", Policy::Fixed, false},
      {"ready bf V=2", 2, 2, "bf", Policy::Ready, false},
      {"fixed zb-h1 split", 2, 1, "zb-h1", Policy::Fixed, true},
  };
}

TEST(TrainBitwise, EveryScheduleGivesTheReferenceParameters) {
  std::vector<Case> cases = common_schedules();
  cases.insert(
      cases.end(),
      {
          {"ready bfw P=4 split", 4, 1, "bfw", Policy::Ready, true},
          {"fixed zb-v vshape split", 2, 2, "zb-v", Policy::Fixed, true, Placement::VShape},
          {"ready bfw vshape split", 2, 2, "bfw", Policy::Ready, true, Placement::VShape},
          {"fixed reversed gpipe", 2, 1, reversed_hint(false), Policy::Fixed, false},
          {"ready reversed gpipe split", 2, 1, reversed_hint(true), Policy::Ready, true},
      });
  expect_reference_bits(cases, "text");
}

TEST(TrainBitwise, ImageTextWithVariableImageCounts) {
  expect_reference_bits(common_schedules(), "image-text");
  // The batches really vary in their image counts (including none).
  ImageText data;
  const StepBatch b = data.batch(1, 0, 16, {}, false);
  std::set<std::int64_t> counts;
  for (const auto& img : b.images)
    counts.insert(img.size(0));
  EXPECT_GE(counts.size(), 3u);
  EXPECT_TRUE(counts.count(0));
}

TEST(TrainBitwise, ParametersActuallyChange) {
  // Guards the test above against comparing untrained weights.
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  TrainOptions o = options(c, 0);
  Trainer t(o);
  std::vector<torch::Tensor> before;
  for (const auto& p : t.parameters())
    before.push_back(p.detach().clone());
  t.step();
  int changed = 0;
  const auto after = t.parameters();
  for (size_t i = 0; i < before.size(); ++i)
    changed += !bitwise_equal(before[i], after[i]);
  EXPECT_EQ(changed, static_cast<int>(before.size()));
}

TEST(TrainInput, TooFewLayersAndMissingDataAreInputErrors) {
  Case c{"x", 4, 2, "bf", Policy::Ready, false};
  TrainOptions o = options(c, 0);
  try {
    Trainer t(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than the 8 pipeline chunks"), std::string::npos)
        << e.what();
  }
  Case ok{"x", 2, 1, "bf", Policy::Ready, false};
  o = options(ok, 0);
  o.data_dir = "/nonexistent/dir";
  EXPECT_THROW(Trainer{o}, InputError);
}

std::vector<torch::Tensor> snapshot(const Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.parameters())
    out.push_back(p.detach().clone());
  return out;
}

TEST(Checkpoint, ResumingIsBitwiseTheUninterruptedRun) {
  const Case c{"ready bfw", 2, 1, "bfw", Policy::Ready, true};
  Trainer straight(options(c, 0));
  for (int s = 0; s < 3; ++s)
    straight.step();
  const std::string path = ::testing::TempDir() + "rrfp-ckpt.bin";
  {
    Trainer first(options(c, 0));
    first.step();
    first.step();
    first.save(path);
  }
  // Resumed on another pipeline layout: checkpoints do not depend on it.
  const Case other{"fixed 1f1b", 4, 1, "1f1b", Policy::Fixed, false};
  Trainer resumed(options(other, 0));
  resumed.resume(path);
  EXPECT_EQ(resumed.steps_done(), 2);
  resumed.step();
  const auto a = snapshot(straight), b = snapshot(resumed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_TRUE(bitwise_equal(a[i], b[i])) << "parameter " << i;
}

std::string refusal(const std::string& path, const TrainOptions& o) {
  Trainer t(o);
  try {
    t.resume(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// The same at TP = 2, resumed under another pipeline layout: a checkpoint lists its tensors by
// chunk, then TP rank, so P = 2 and P = 4 list them in other orders; they are found by name
// (the order was required: "parameter 14 is {embed.tokens@tp1}"). Another TP size names the
// shard it lacks.
TEST(Checkpoint, ResumesTensorParallelUnderAnotherLayout) {
  auto at_tp2 = [](const Case& c) {
    TrainOptions o = options(c, 0);
    o.runtime.tp = 2;
    return o;
  };
  const Case c{"ready bf", 2, 1, "bf", Policy::Ready, false};
  Trainer straight(at_tp2(c));
  for (int s = 0; s < 3; ++s)
    straight.step();
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-tp2.bin";
  {
    Trainer first(at_tp2(c));
    first.step();
    first.step();
    first.save(path);
  }
  const Case other{"fixed 1f1b", 4, 1, "1f1b", Policy::Fixed, false};
  Trainer resumed(at_tp2(other));
  resumed.resume(path);
  EXPECT_EQ(resumed.steps_done(), 2);
  resumed.step();
  std::map<std::string, torch::Tensor> want;
  const auto names = straight.parameter_names();
  const auto params = straight.parameters();
  for (size_t i = 0; i < names.size(); ++i)
    want[names[i]] = params[i];
  const auto got_names = resumed.parameter_names();
  const auto got = resumed.parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(bitwise_equal(got[i], want.at(got_names[i]))) << got_names[i];
  TrainOptions one = options(other, 0);
  const std::string why = refusal(path, one);
  EXPECT_NE(why.find("has no tensor 'embed.tokens' of this run's shape (another task, or another "
                     "tensor-parallel size"),
            std::string::npos)
      << why;
}

// A checkpoint holding tensors this run's model lacks (the image-text task's encoder, resumed by
// a text run) is refused by name: found by name, they were dropped with only a warning.
TEST(Checkpoint, TensorsTheModelLacksAreRefused) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  TrainOptions images = options(c, 0);
  images.task = "image-text";
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-images.bin";
  Trainer(images).save(path);
  const std::string why = refusal(path, options(c, 0));
  EXPECT_NE(why.find("', which this run's model does not have (another task?)"), std::string::npos)
      << why;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A checkpoint is an 8-byte magic and a 4-byte version, the header's length (8), the JSON header,
// the tensors and a checksum (8): its header, and the file with another header, re-sealed with
// a valid checksum so that the header's own checks are what is tested.
std::string header_of(const std::string& bytes) {
  std::uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data() + 12, sizeof hlen);
  return bytes.substr(20, hlen);
}

std::string with_header(const std::string& bytes, const std::string& text) {
  const std::uint64_t hlen = header_of(bytes).size();
  std::string out = bytes.substr(0, 12);
  const std::uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += text + bytes.substr(20 + hlen, bytes.size() - 20 - hlen - 8);
  const std::uint64_t sum = checkpoint_checksum(out);
  out.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return out;
}

TEST(Checkpoint, CorruptTruncatedOrMismatchedCheckpointsAreRefused) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const TrainOptions o = options(c, 0);
  const std::string good = ::testing::TempDir() + "rrfp-good.bin";
  Trainer t(o);
  t.step();
  t.save(good);
  const std::string bytes = read_bytes(good);
  auto write = [](const std::string& p, const std::string& b) {
    std::ofstream(p, std::ios::binary) << b;
    return p;
  };
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_NE(refusal(write(::testing::TempDir() + "f.bin", flipped), o).find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(refusal(write(::testing::TempDir() + "t.bin", bytes.substr(0, bytes.size() / 3)), o)
                .find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(
      refusal(write(::testing::TempDir() + "n.bin", "hello"), o).find("not an rrfp checkpoint"),
      std::string::npos);
  TrainOptions wider = o;
  wider.model.d_model = 48;
  EXPECT_NE(refusal(good, wider).find("holds a different model"), std::string::npos);
  EXPECT_NE(refusal(::testing::TempDir() + "missing.bin", o).find("missing.bin"),
            std::string::npos);
  // A valid checksum over a header with wrong types or ranges: refused by name, never an
  // untyped error.
  const auto header = nlohmann::json::parse(header_of(bytes));
  auto resealed = [&](const nlohmann::json& h) {
    return write(::testing::TempDir() + "h.bin", with_header(bytes, h.dump()));
  };
  EXPECT_EQ(refusal(resealed(header), o), "accepted");  // the re-sealing itself is right
  // Each edit with what its refusal says (either, where the value decides: a tensor named
  // otherwise is missing by its own name; a list of non-entries is malformed).
  const std::vector<std::pair<std::string, std::vector<std::string>>> edits = {
      {"/step", {"header field \"step\" must be a whole number"}},
      {"/tensors/0/shape", {"has a malformed tensor entry"}},
      {"/tensors/1/name", {"has a malformed tensor entry", "has no tensor 'embed.positions'"}},
      {"/tensors", {"parameter tensors, not a list", "has a malformed tensor entry -1"}},
      {"/model", {"holds a different model"}}};
  for (const auto& [at, wants] : edits)
    for (const nlohmann::json& v : {nlohmann::json(-5), nlohmann::json("x"), nlohmann::json(3.5),
                                    nlohmann::json::array({-1, "a"}), nlohmann::json(nullptr)}) {
      nlohmann::json h = header;
      h[nlohmann::json::json_pointer(at)] = v;
      const std::string got = refusal(resealed(h), o);
      EXPECT_TRUE(
          std::any_of(wants.begin(), wants.end(),
                      [&](const std::string& w) { return got.find(w) != std::string::npos; }))
          << at << " = " << v << ": " << got;
    }
  nlohmann::json no_step = header;
  no_step.erase("step");
  EXPECT_NE(refusal(resealed(no_step), o).find("has no header field \"step\""), std::string::npos);
  // A crash mid-save leaves only PATH.tmp behind: the previous checkpoint still loads.
  write(good + ".tmp", bytes.substr(0, 100));
  EXPECT_EQ(refusal(good, o), "accepted");
}

// The checkpoint header's parser under the suite's mutation fuzzer: headers edited at random
// (mutate.hpp), re-sealed with a valid checksum, are each accepted or refused with an
// InputError; never a crash, another exception or a hang.
TEST(Fuzz, CheckpointHeadersResealed) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const TrainOptions o = options(c, 0);
  const std::string good = ::testing::TempDir() + "rrfp-fuzz-good.bin";
  Trainer(o).save(good);
  const std::string bytes = read_bytes(good);
  const std::string header = header_of(bytes);
  const std::string path = ::testing::TempDir() + "rrfp-fuzz.bin";
  Trainer t(o);
  FuzzTally tally;
  const int n = fuzz_iterations(300);
  for (int i = 0; i < n; ++i) {
    const std::string h = mutate(header, 91, i);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << with_header(bytes, h);
    tally.attempt("header " + h.substr(0, 300), [&] { t.resume(path); });
  }
  EXPECT_GT(tally.refused, n / 2);
  std::printf("%d mutated headers: %d accepted, %d refused\n", n, tally.accepted, tally.refused);
}

// A full disk during a save: the write fails with ENOSPC (PATH.tmp is made a link to /dev/full,
// which refuses every write that way), the error says so, the partial file is removed and the
// previous checkpoint still loads.
TEST(Checkpoint, AFullDiskLeavesThePreviousCheckpoint) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const TrainOptions o = options(c, 0);
  const std::string path = ::testing::TempDir() + "rrfp-full.bin";
  Trainer t(o);
  t.save(path);
  const std::string before = read_bytes(path);
  t.step();
  ::unlink((path + ".tmp").c_str());
  ASSERT_EQ(::symlink("/dev/full", (path + ".tmp").c_str()), 0);
  try {
    t.save(path);
    ADD_FAILURE() << "a save onto a full disk succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  struct stat st;
  EXPECT_NE(::lstat((path + ".tmp").c_str(), &st), 0) << "the partial file was left behind";
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(refusal(path, o), "accepted");
}

// A run that diverges stops with an error naming the step, its row logged, and its last
// checkpoint is the last one with finite parameters (it trained on to "loss -nan" and printed
// "done" before; its checkpoint then held NaN). Resuming that checkpoint diverges the same way.
TEST(TrainDiverged, ANonFiniteStepStopsTheRunAndKeepsTheLastGoodCheckpoint) {
  TrainRun o;
  o.train = small_run(2, 4, 2, 3);
  o.train.steps = 30;
  o.train.opt.lr = 1000;  // AdamW moves every weight by about lr: it overflows in a few steps
  o.train.opt.warmup = 0;
  o.train.opt.clip = 0;
  o.eval_every = 0;
  o.save_every = 1;
  o.quiet = true;
  o.out = ::testing::TempDir() + "rrfp-diverged";
  std::filesystem::remove_all(o.out);
  std::string what;
  try {
    run_training(o);
  } catch (const Error& e) {
    what = e.what();
  }
  ASSERT_NE(what.find(" is not a number; training stops"), std::string::npos) << what;
  const int failed = std::stoi(what.substr(what.find("step ") + 5));
  EXPECT_NE(what.find("keeps step " + std::to_string(failed - 1)), std::string::npos) << what;
  std::ifstream log(o.out + "/loss.csv");
  std::string row, last;
  while (std::getline(log, row))
    last = row;
  EXPECT_EQ(std::stoi(last), failed);  // the failing step's row is there
  Trainer t(o.train);
  t.resume(o.out + "/checkpoint.bin");
  EXPECT_EQ(t.steps_done(), failed - 1);
  for (const auto& p : t.parameters())
    ASSERT_TRUE(torch::isfinite(p).all().item<bool>());
  TrainRun again = o;
  again.resume = o.out + "/checkpoint.bin";
  again.out = o.out + "-again";
  EXPECT_THROW(run_training(again), Error);
}

TEST(TrainDefault, LossFallsOnTheHeldOutSplit) {
  // The default configuration of `rrfp train`, shortened: 60 steps, seeded.
  TrainRun o;
  o.train.steps = 60;
  o.train.opt.warmup = 10;
  o.eval_every = 0;
  o.quiet = true;
  o.out = ::testing::TempDir() + "rrfp-train-default";
  const TrainSummary s = run_training(o);
  // Untrained, the loss is about ln(256) = 5.5 nats; after 60 steps it must be far lower.
  EXPECT_LT(s.last_loss, s.first_loss - 1.5);
  EXPECT_LT(s.val_loss, std::log(256.0) - 1.5) << "validation loss " << s.val_loss;
}

}  // namespace
}  // namespace rrfp::train
