// Checkpoints of training (train/checkpoint.hpp): a resume is bitwise the run that did not
// stop, under another pipeline layout and at TP 2; what is corrupt, truncated, of another
// model or task is refused by name. Saving one on a full disk, through a link or under a
// signal: test_train_checkpoint_save.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "mutate.hpp"
#include "train/checkpoint.hpp"
#include "train/corpus.hpp"
#include "train/trainer.hpp"
#include "train_cases.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {
using test::fuzz_iterations;
using test::FuzzTally;
using test::mutate;

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

// The same at TP = 2, resumed under another pipeline layout: a checkpoint lists its tensors by
// chunk, then TP rank, so P = 2 and P = 4 list them in other orders; they are found by name
// (the order was required: "parameter 14 is {embed.tokens@tp1}"). Another TP size names the
// size, by the option (it named a shard it lacked, guessing at another task or TP size).
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
  EXPECT_NE(why.find("holds the shards of tensor-parallel size 2; this run's `tp` is 1: a "
                     "checkpoint resumes at the size that wrote it"),
            std::string::npos)
      << why;
}

// A checkpoint holding tensors this run's model lacks (the image-text task's encoder, resumed by
// a text run) is refused: found by name, they were dropped with only a warning. Another task's
// is refused naming the option (it named a tensor, guessing at another task), both ways.
TEST(Checkpoint, TensorsTheModelLacksAreRefused) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  TrainOptions images = options(c, 0);
  images.task = "image-text";
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-images.bin";
  Trainer(images).save(path);
  std::string why = refusal(path, options(c, 0));
  EXPECT_NE(why.find("was written by a run of `task` \"image-text\"; this run's is \"text\": a "
                     "checkpoint resumes the task that wrote it"),
            std::string::npos)
      << why;
  const std::string text = ::testing::TempDir() + "rrfp-ckpt-text.bin";
  Trainer(options(c, 0)).save(text);
  why = refusal(text, images);
  EXPECT_NE(why.find("was written by a run of `task` \"text\"; this run's is \"image-text\""),
            std::string::npos)
      << why;
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

std::string write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TrainOptions one_step_options() {
  return options(Case{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false}, 0);
}

// The bytes of the checkpoint at `path`, saved after one step.
std::string saved_after_a_step(const TrainOptions& o, const std::string& path) {
  Trainer t(o);
  t.step();
  t.save(path);
  return read_bytes(path);
}

TEST(Checkpoint, CorruptTruncatedOrMismatchedCheckpointsAreRefused) {
  const TrainOptions o = one_step_options();
  const std::string good = ::testing::TempDir() + "rrfp-good.bin";
  const std::string bytes = saved_after_a_step(o, good);
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_NE(
      refusal(write_bytes(::testing::TempDir() + "f.bin", flipped), o).find("checksum mismatch"),
      std::string::npos);
  EXPECT_NE(
      refusal(write_bytes(::testing::TempDir() + "t.bin", bytes.substr(0, bytes.size() / 3)), o)
          .find("checksum mismatch"),
      std::string::npos);
  EXPECT_NE(refusal(write_bytes(::testing::TempDir() + "n.bin", "hello"), o)
                .find("not an rrfp checkpoint"),
            std::string::npos);
  TrainOptions wider = o;
  wider.model.d_model = 48;
  // Named by the option that differs (both models' JSON in full left the reader to compare).
  EXPECT_NE(refusal(good, wider)
                .find("holds another model (this run's `d_model` 48 where the "
                      "checkpoint's has 32)"),
            std::string::npos)
      << refusal(good, wider);
  EXPECT_NE(refusal(::testing::TempDir() + "missing.bin", o).find("missing.bin"),
            std::string::npos);
  // A valid checksum over a header with wrong types or ranges: refused by name, never an
  // untyped error.
  const auto header = nlohmann::json::parse(header_of(bytes));
  auto resealed = [&](const nlohmann::json& h) {
    return write_bytes(::testing::TempDir() + "h.bin", with_header(bytes, h.dump()));
  };
  EXPECT_EQ(refusal(resealed(header), o), "accepted");  // the re-sealing itself is right
  // Each edit with what its refusal says (either, where the value decides: a tensor named
  // otherwise is missing by its own name; a list of non-entries is malformed).
  const std::vector<std::pair<std::string, std::vector<std::string>>> edits = {
      {"/step", {"header field \"step\" must be a whole number"}},
      {"/tensors/0/shape", {"has a malformed tensor entry"}},
      {"/tensors/1/name", {"has a malformed tensor entry", "has no tensor 'embed.positions'"}},
      {"/tensors", {"parameter tensors, not a list", "has a malformed tensor entry -1"}},
      {"/model", {"holds another model"}},
      {"/format", {"header field \"format\" is"}},
      {"/run", {"header field \"run\" must be an object"}}};
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
  write_bytes(good + ".tmp", bytes.substr(0, 100));
  EXPECT_EQ(refusal(good, o), "accepted");
}

// A checkpoint that recorded no task (an older rrfp's) of the other task is refused by its
// tensors, as before the task was recorded.
TEST(Checkpoint, AnOlderCheckpointOfAnotherTaskIsRefusedByItsTensors) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  TrainOptions images = options(c, 0);
  images.task = "image-text";
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-older.bin";
  Trainer(images).save(path);
  const std::string bytes = read_bytes(path);
  auto h = nlohmann::json::parse(header_of(bytes));
  ASSERT_EQ(h["run"].erase("task"), 1u);
  const std::string why = refusal(write_bytes(::testing::TempDir() + "rrfp-ckpt-older-resealed.bin",
                                              with_header(bytes, h.dump())),
                                  options(c, 0));
  EXPECT_NE(why.find("holds tensor 'vision."), std::string::npos) << why;
  EXPECT_NE(why.find("', which this run's model does not have (another task?)"), std::string::npos)
      << why;
}

// The refusals no edit of the test above reaches, each by its message.
TEST(Checkpoint, AStepPastItsBoundATensorNamedTwiceExtraBytesAndAnotherVersionAreRefused) {
  const TrainOptions o = one_step_options();
  const std::string bytes = saved_after_a_step(o, ::testing::TempDir() + "rrfp-good-2.bin");
  const auto header = nlohmann::json::parse(header_of(bytes));
  auto resealed = [&](const nlohmann::json& h) {
    return write_bytes(::testing::TempDir() + "h2.bin", with_header(bytes, h.dump()));
  };
  auto load = [&](const std::string& path) { Trainer(o).resume(path); };
  nlohmann::json late = header, twice = header;
  late["step"] = 2'000'000'000;
  EXPECT_ERROR(load(resealed(late)), InputError,
               "header field \"step\" must be a whole number in [0, 1e9], got 2000000000");
  twice["tensors"][1]["name"] = twice["tensors"][0]["name"];
  EXPECT_ERROR(load(resealed(twice)), InputError,
               "names tensor '" + header["tensors"][0]["name"].get<std::string>() + "' twice");
  auto sealed = [&](std::string b) {  // `b` without its checksum, sealed anew
    const std::uint64_t sum = checkpoint_checksum(b);
    b.append(reinterpret_cast<const char*>(&sum), sizeof sum);
    return write_bytes(::testing::TempDir() + "s.bin", b);
  };
  const std::string body = bytes.substr(0, bytes.size() - 8);
  const size_t tensors = body.size() - 20 - header_of(bytes).size();
  EXPECT_ERROR(load(sealed(body + std::string(4, '\0'))), InputError,
               "holds " + std::to_string(tensors + 4) + " bytes of tensors; its header names " +
                   std::to_string(tensors));
  std::string v2 = body;
  v2[8] = 2;
  EXPECT_ERROR(load(sealed(v2)), InputError, "has format version 2; this rrfp reads version 1");
}

// A resume compares the corpus it reads with the one the checkpoint's run read, not the path's
// text: a file rewritten in place resumed without a word (and diverged), while the same folder
// spelled `dir/`, `./dir` or absolute warned. A checkpoint from before the corpus was recorded
// (its `data` the path) compares none.
TEST(Checkpoint, AResumeComparesTheCorpusReadNotItsPath) {
  namespace fs = std::filesystem;
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const fs::path dir = fs::path(::testing::TempDir()) / "rrfp-corpus";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write_doc = [&](int shift) {
    std::string text(2000, ' ');
    for (size_t i = 0; i < text.size(); ++i)
      text[i] = static_cast<char>('a' + (i * 7 + shift) % 26);
    std::ofstream(dir / "a.txt", std::ios::binary | std::ios::trunc) << text;
  };
  write_doc(0);
  TrainOptions o = options(c, 0);
  o.data_dir = dir.string();
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-corpus.bin";
  Trainer(o).save(path);
  auto differences = [&](const std::string& data, const std::string& ckpt) {
    TrainOptions r = o;
    r.data_dir = data;
    return Trainer(r).resume(ckpt);
  };
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.parent_path());
  for (const std::string& same : {dir.string() + "/", std::string("./rrfp-corpus"),
                                  std::string("rrfp-corpus/"), fs::canonical(dir).string()})
    EXPECT_EQ(differences(same, path), std::vector<std::string>{}) << same;
  fs::current_path(cwd);
  write_doc(1);  // the same name and size, other bytes
  const auto changed = differences(dir.string(), path);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_NE(changed[0].find("`data` holds 1 document"), std::string::npos) << changed[0];
  EXPECT_NE(changed[0].find("; the checkpoint's run read 1 document"), std::string::npos)
      << changed[0];
  // A record of an earlier build, its hash without the lengths: compared with that hash of the
  // corpus read (compared by its counts alone, a file rewritten at its length went unsaid).
  auto with_contents = [&](const std::string& contents) {
    nlohmann::json h = nlohmann::json::parse(header_of(read_bytes(path)));
    h["run"]["data_contents"] = contents;
    const std::string older = ::testing::TempDir() + "rrfp-ckpt-older-corpus.bin";
    std::ofstream(older, std::ios::binary) << with_header(read_bytes(path), h.dump());
    return differences(dir.string(), older);
  };
  const std::string earlier = Corpus(dir.string(), o.window.max_len).earlier_contents();
  ASSERT_EQ(earlier.rfind("1 document, 2000 bytes, hash ", 0), 0u) << earlier;
  EXPECT_EQ(with_contents(earlier), std::vector<std::string>{});
  EXPECT_EQ(with_contents("1 document, 2000 bytes, hash 0123456789abcdef").size(), 1u);
  // The older record: the path alone, under `data`.
  nlohmann::json header = nlohmann::json::parse(header_of(read_bytes(path)));
  header["run"].erase("data_contents");
  header["run"]["data"] = "/elsewhere";
  const std::string old = ::testing::TempDir() + "rrfp-ckpt-old-run.bin";
  std::ofstream(old, std::ios::binary) << with_header(read_bytes(path), header.dump());
  EXPECT_EQ(differences(dir.string(), old), std::vector<std::string>{});
  fs::remove_all(dir);
}

// The device's kind, the dtype, (on a GPU) the deterministic algorithms and (on the CPU) the
// vector instructions LibTorch's kernels use decide the kernels, so the numbers: a checkpoint of a
// GPU run in bf16 resumed on the CPU in f32 (its header says so, as such a run writes it) is told
// each. They were not recorded, and a run went on under other kernels without a word.
TEST(Checkpoint, AResumeOnAnotherDeviceOrDtypeIsSaid) {
  const TrainOptions o = one_step_options();
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-device.bin";
  Trainer(o).save(path);
  nlohmann::json header = nlohmann::json::parse(header_of(read_bytes(path)));
  EXPECT_EQ(header["run"]["device"], "cpu");
  EXPECT_EQ(header["run"]["dtype"], "f32");
  EXPECT_FALSE(header["run"].contains("deterministic"));  // a CPU run has no such choice
  // LibTorch's CPU kernels, picked by the processor's vector instructions (or
  // ATEN_CPU_CAPABILITY), round otherwise: a resume under others is told.
  ASSERT_TRUE(header["run"]["cpu_kernels"].is_string());
  const std::string kernels = header["run"]["cpu_kernels"];
  EXPECT_NE(kernels, "unknown");
  nlohmann::json other = header;
  other["run"]["cpu_kernels"] = "DEFAULT-other";
  const std::string elsewhere = ::testing::TempDir() + "rrfp-ckpt-device-kernels.bin";
  write_bytes(elsewhere, with_header(read_bytes(path), other.dump()));
  EXPECT_EQ(Trainer(o).resume(elsewhere),
            std::vector<std::string>{"LibTorch's CPU kernels (ATEN_CPU_CAPABILITY) are \"" +
                                     kernels + "\"; the checkpoint's run had \"DEFAULT-other\""});
  header["run"]["device"] = "cuda";
  header["run"]["dtype"] = "bf16";
  header["run"]["deterministic"] = false;
  const std::string gpu = ::testing::TempDir() + "rrfp-ckpt-device-gpu.bin";
  write_bytes(gpu, with_header(read_bytes(path), header.dump()));
  EXPECT_EQ(Trainer(o).resume(gpu),
            (std::vector<std::string>{"`device` is \"cpu\"; the checkpoint's run had \"cuda\"",
                                      "`dtype` is \"f32\"; the checkpoint's run had \"bf16\""}));
}

// The image-text task is held to its own options: `max_seq` 64 was refused over the text
// task's default `max_len` 128, which it never reads, and a resume with another `min_len`
// warned that the run would not continue as before.
TEST(Checkpoint, AnImageTextRunIsHeldToItsOwnOptionsOnly) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  TrainOptions images = options(c, 0);
  images.task = "image-text";
  images.window = WindowOptions{};  // 32..128 bytes, past `max_seq` 64
  ASSERT_EQ(images.model.max_seq, 64);
  const std::string path = ::testing::TempDir() + "rrfp-ckpt-image-options.bin";
  Trainer(images).save(path);
  TrainOptions other = images;
  other.window = {60, 64};
  EXPECT_EQ(Trainer(other).resume(path), std::vector<std::string>{});
  other.max_images = 3;
  EXPECT_EQ(Trainer(other).resume(path),
            std::vector<std::string>{"`max_images` is 3; the checkpoint's run had 4"});
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

}  // namespace
}  // namespace rrfp::train
