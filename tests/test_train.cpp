// Training correctness (semantics.md §6): after 3 optimizer steps every parameter is bitwise
// equal across a single-stage, non-pipelined reference and pipelined runs under different
// hints, policies, split backward, interleaving and random injected delays that force
// different dispatch orders.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "sim/rng.hpp"
#include "train/checkpoint.hpp"
#include "train/corpus.hpp"
#include "train/log_file.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"
#include "train_cases.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {

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
  EXPECT_ERROR(Trainer{o}, InputError, "`data`: '/nonexistent/dir' does not exist");
}

// The corpus says what it leaves out: 50 short files of a folder (39% of its text) were dropped
// without a word, the refusal named 650 bytes where 641 are read at `max_len` 64, a folder
// whose text sat in a subfolder was refused as if it held none, and the default corpus read
// GPL-3, LGPL-3 and GFDL-1.3 twice through the links GPL, LGPL and GFDL.
TEST(TrainInput, TheCorpusCountsWhatItSkips) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "rrfp-skips";
  fs::remove_all(dir);
  auto doc = [](const fs::path& p, size_t n) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << std::string(n, 'x');
  };
  doc(dir / "short" / "a.txt", 640);
  EXPECT_ERROR(Corpus((dir / "short").string(), 64), InputError,
               "holds no document of at least 641 bytes (");
  doc(dir / "short" / "b.txt", 641);
  const Corpus both((dir / "short").string(), 64);
  EXPECT_EQ(both.documents(), 1u);
  EXPECT_EQ(both.describe(),
            "1 document, 641 bytes; skipped 1 document of 640 bytes shorter than 641 bytes");
  doc(dir / "nested" / "sub" / "a.txt", 5000);
  EXPECT_ERROR(Corpus((dir / "nested").string(), 64), InputError,
               "bytes (the 90% of each that trains and the 10% held out need `max_len` + 1 bytes "
               "each); subfolders are not read (1 here)");
  doc(dir / "links" / "a.txt", 5000);
  const std::string one = Corpus((dir / "links").string(), 64).contents();
  fs::create_symlink("a.txt", dir / "links" / "0");  // before a.txt by name
  fs::create_symlink("a.txt", dir / "links" / "b");
  const Corpus linked((dir / "links").string(), 64);
  EXPECT_EQ(linked.documents(), 1u);
  EXPECT_EQ(linked.contents(), one);  // a.txt, under its own name
  EXPECT_EQ(linked.describe(),
            "1 document, 5000 bytes; skipped 2 links to a file read under its own name");
  fs::create_directories(dir / "links" / "sub");
  EXPECT_NE(Corpus((dir / "links").string(), 64).describe().find("; 1 subfolder not read"),
            std::string::npos);
  // Never opened, and said: a device, a FIFO, a broken link (skipped without a word before).
  fs::create_symlink("/dev/zero", dir / "links" / "zero");
  fs::create_symlink(dir / "nowhere", dir / "links" / "dangling");
  ASSERT_EQ(::mkfifo((dir / "links" / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(Corpus((dir / "links").string(), 64).describe(),
            "1 document, 5000 bytes; skipped 2 links to a file read under its own name; 1 "
            "subfolder not read; skipped 3 entries that are no files (devices, FIFOs, sockets, "
            "broken links)");
  // A folder of no files at all says so (it read as documents too short).
  fs::create_directories(dir / "odd");
  fs::create_symlink(dir / "nowhere", dir / "odd" / "dangling");
  ASSERT_EQ(::mkfifo((dir / "odd" / "fifo").c_str(), 0600), 0);
  EXPECT_ERROR(Corpus((dir / "odd").string(), 64), InputError,
               "need `max_len` + 1 bytes each); 2 entries are no files (devices, FIFOs, sockets, "
               "broken links)");
  // A byte moved from the end of a document to the start of the next one's name, and another
  // back (documents, bytes and the bytes in reading order all alike): two corpora read as one.
  auto text = [](size_t n, char from) {
    std::string t(n, from);
    for (size_t i = 0; i < n; ++i)
      t[i] = static_cast<char>(from + (i * 7) % 5);
    return t;
  };
  const std::string t = text(2000, 'a'), u = text(2000, 'm'), v = text(2000, 'x');
  auto write = [](const fs::path& p, const std::string& bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  };
  write(dir / "one" / "a", t + "b");
  write(dir / "one" / "c", u);
  write(dir / "one" / "de", v);
  write(dir / "two" / "a", t);
  write(dir / "two" / "bc", u + "d");
  write(dir / "two" / "e", v);
  const Corpus one_way((dir / "one").string(), 64), other_way((dir / "two").string(), 64);
  EXPECT_EQ(one_way.describe(), other_way.describe());
  EXPECT_NE(one_way.contents(), other_way.contents());
  fs::remove_all(dir);
}

// Rewrites the tensors of checkpoint `ck` in place (`edit` gets them as one array of floats:
// the parameters, then AdamW's first and second moments, each in the model's order) and seals
// it again with its checksum.
void edit_tensors(const std::string& ck, const std::function<void(float*, std::size_t)>& edit) {
  std::string bytes;
  {
    std::ifstream in(ck, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data() + 12, sizeof header);
  const std::size_t at = 20 + header, n = (bytes.size() - 8 - at) / 4;
  EXPECT_EQ(at + 4 * n + 8, bytes.size());  // whole floats between the header and the checksum
  std::vector<float> t(n);
  std::memcpy(t.data(), bytes.data() + at, 4 * n);
  edit(t.data(), n);
  std::memcpy(bytes.data() + at, t.data(), 4 * n);
  const std::uint64_t sum =
      checkpoint_checksum(std::string_view(bytes).substr(0, bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  std::ofstream(ck, std::ios::binary | std::ios::trunc) << bytes;
}

// A run of `o` for one step, checkpointed, whose checkpoint then holds AdamW first moments of
// 1e30 and second moments of 0: the next update moves every weight by about 1e31, finite, and
// the forward after it is not a number. (A large `lr` with weight decay flipped every weight
// until `lr` x `weight_decay` had to stay below 1; Adam alone moves a weight by about `lr`.)
std::string run_to_a_blow_up(TrainRun o) {
  o.train.steps = 1;
  o.save_every = 1;
  o.quiet = true;
  run_training(o);
  const std::string ck = o.out + "/checkpoint.bin";
  std::size_t floats = 0;
  for (const auto& p : Trainer(o.train).parameters())
    floats += static_cast<std::size_t>(p.numel());
  edit_tensors(ck, [&](float* t, std::size_t n) {
    EXPECT_EQ(n, 3 * floats);
    std::fill(t + floats, t + 2 * floats, 1e30f);  // the first moments
    std::fill(t + 2 * floats, t + n, 0.0f);        // the second
  });
  return ck;
}

// A run that diverges stops with an error naming the step, its row logged, and its last
// checkpoint is the last one with finite parameters (it trained on to "loss -nan" and printed
// "done" before; its checkpoint then held NaN). Resuming that checkpoint diverges the same way,
// and says which checkpoint it resumed from (it said "no checkpoint was written").
TEST(TrainDiverged, ANonFiniteStepStopsTheRunAndKeepsTheLastGoodCheckpoint) {
  TrainRun o;
  o.train = small_run(2, 4, 2, 3);
  o.eval_every = 0;
  o.out = ::testing::TempDir() + "rrfp-diverged";
  std::filesystem::remove_all(o.out);
  o.resume = run_to_a_blow_up(o);
  o.train.steps = 30;
  o.save_every = 1;
  o.quiet = true;
  std::string what;
  try {
    run_training(o);
  } catch (const Error& e) {
    what = e.what();
  }
  ASSERT_NE(what.find(" is not a number; training stops"), std::string::npos) << what;
  const int failed = std::stoi(what.substr(what.find("step ") + 5));
  EXPECT_EQ(failed, 3) << what;  // step 2 made the weights huge, step 3 is not a number
  EXPECT_NE(what.find("keeps step " + std::to_string(failed - 1)), std::string::npos) << what;
  std::ifstream log(o.out + "/loss.csv");
  std::string row, last;
  while (std::getline(log, row))
    last = row;
  EXPECT_EQ(std::stoi(last), failed);  // the failing step's row is there
  // The plot leaves that step out: "nan" is no SVG coordinate.
  std::ifstream svg(o.out + "/loss.svg");
  const std::string plot{std::istreambuf_iterator<char>(svg), {}};
  EXPECT_NE(plot.find("<svg"), std::string::npos);
  EXPECT_EQ(plot.find("nan"), std::string::npos);
  Trainer t(o.train);
  t.resume(o.out + "/checkpoint.bin");
  EXPECT_EQ(t.steps_done(), failed - 1);
  for (const auto& p : t.parameters())
    ASSERT_TRUE(torch::isfinite(p).all().item<bool>());
  TrainRun again = o;
  again.resume = o.out + "/checkpoint.bin";
  again.out = o.out + "-again";
  // A folder left by an earlier run holds another run's log, which the resume refuses (with
  // an Error too: only the message tells it from the divergence).
  std::filesystem::remove_all(again.out);
  // The same divergence: the same step, the same reason.
  EXPECT_ERROR(run_training(again), Error,
               what.substr(0, what.find("; training stops")) +
                   "; training stops (this run wrote no checkpoint; it resumed from " +
                   again.resume + " at step " + std::to_string(failed - 1) + ")");
  std::filesystem::remove_all(o.out);
  std::filesystem::remove_all(again.out);
}

// A step whose update leaves the parameters finite but so large that the held-out loss is not
// a number diverged as well: the run ended "done" (exit 0) with "validation -nan", and a
// checkpoint of that step replaced the last good one. Its own loss and gradient norm, taken
// before the update, are finite.
TEST(TrainDiverged, ANonFiniteValidationLossStopsTheRunBeforeItsCheckpoint) {
  TrainRun o;
  o.train = small_run(2, 4, 2, 3);
  o.eval_every = 0;
  o.out = ::testing::TempDir() + "rrfp-val-nan";
  std::filesystem::remove_all(o.out);
  const std::string ck = run_to_a_blow_up(o);
  const auto before = std::filesystem::last_write_time(ck);
  o.train.steps = 2;  // its last step validates
  o.save_every = 1;
  o.quiet = true;
  o.resume = ck;
  EXPECT_ERROR(run_training(o), Error,
               "step 2: the validation loss is not a number; training stops (this run wrote no "
               "checkpoint; it resumed from " +
                   ck + " at step 1)");
  EXPECT_EQ(std::filesystem::last_write_time(ck), before);  // the step-1 checkpoint stays
  std::filesystem::remove_all(o.out);
}

// A resume that validates the step its checkpoint holds (a signal had cut that validation
// short, its row's val_loss left empty) stops as a step does where that loss is not a number:
// it filled in "nan" and went on. The checkpoint's weights are made 1e30, finite.
TEST(TrainDiverged, AFilledInValidationThatIsNotANumberStopsTheResume) {
  TrainRun o;
  o.train = small_run(2, 4, 2, 3);
  o.train.steps = 1;
  o.eval_every = 1;
  o.save_every = 1;
  o.quiet = true;
  o.out = ::testing::TempDir() + "rrfp-fill-nan";
  std::filesystem::remove_all(o.out);
  run_training(o);
  const std::string ck = o.out + "/checkpoint.bin", log = o.out + "/loss.csv";
  // Every tensor, parameters and moments.
  edit_tensors(ck, [](float* t, std::size_t n) { std::fill(t, t + n, 1e30f); });
  std::ifstream in(log);
  std::string head, row;
  std::getline(in, head);
  std::getline(in, row);
  in.close();
  // val_loss, the third field, emptied: "1,5.5,5.4,..." -> "1,5.5,,...".
  const std::size_t from = row.find(',', row.find(',') + 1) + 1, to = row.find(',', from);
  ASSERT_LT(from, to) << row;
  row.erase(from, to - from);
  std::ofstream(log, std::ios::trunc) << head << "\n" << row << "\n";
  o.train.steps = 2;
  o.resume = ck;
  EXPECT_ERROR(run_training(o), Error, "step 1: the validation loss is not a number");
  std::filesystem::remove_all(o.out);
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

// loss.svg's curve of a long run: at most 2 x kMaxPoints points, thinned evenly, and ending at
// the last point added whatever the stride (thinning dropped it: a run of exactly 10,000 steps
// was drawn to step 9,999, and a final validation could be left out).
TEST(LossCurve, ALongCurveIsThinnedAndEndsAtItsLastPoint) {
  for (const int n : {1, 9'999, 10'000, 10'001, 30'001, 100'000}) {
    Curve c("loss", "#000");
    for (int i = 1; i <= n; ++i)
      c.add(i, 1.0 / i);
    const PlotSeries series = c.series();  // a copy: the last point added ends it
    const auto& pts = series.points;
    ASSERT_FALSE(pts.empty());
    EXPECT_LE(pts.size(), 2 * Curve::kMaxPoints) << n;
    EXPECT_GE(pts.size(), std::min<std::size_t>(n, Curve::kMaxPoints)) << n;
    EXPECT_EQ(pts.front().first, 1) << n;
    EXPECT_EQ(pts.back().first, n) << n;
    EXPECT_EQ(pts.back().second, 1.0 / n) << n;
    for (std::size_t i = 1; i < pts.size(); ++i)
      ASSERT_LT(pts[i - 1].first, pts[i].first) << n;
  }
}

}  // namespace
}  // namespace rrfp::train
