// The trainer's checkpoints: what one holds of it, its writing by rank 0 of a job (with the
// others' chunks gathered), and a resume's reading (each process its own tensors).
#include "train/trainer.hpp"

#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <cmath>
#include <set>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/printable.hpp"
#include "train/checkpoint.hpp"
#include "train/checkpoint_parts.hpp"

namespace rrfp::train {

namespace {

// The vector instructions LibTorch's CPU kernels were picked for (AVX2, AVX512, DEFAULT...):
// ATEN_CPU_CAPABILITY or the processor decides, and other kernels round otherwise, so a
// resume on another machine went on bitwise-different without a word. LibTorch exports no
// getter for it but its configuration text, which names it on one line.
std::string cpu_kernels() {
  const std::string config = at::show_config();
  const std::string key = "CPU capability usage: ";
  const auto at = config.find(key);
  if (at == std::string::npos) return "unknown";
  const auto begin = at + key.size();
  return config.substr(begin, config.find('\n', begin) - begin);
}

}  // namespace

// What a checkpoint holds of this trainer; the tensors share this trainer's storage.
CheckpointState Trainer::checkpoint_state() const {
  CheckpointState s;
  s.model = o_.model;
  s.step = step_;
  s.names = parameter_names();
  s.params = parameters();
  s.exp_avg = exp_avg_;
  s.exp_avg_sq = exp_avg_sq_;
  s.loss = last_loss_;
  // The options besides the model that decide the numbers: a resume under others diverges.
  s.run = {{"seed", o_.data_seed},
           {"task", o_.task},
           {"microbatches", m_.microbatches()},
           {"dp", o_.dp},
           {"steps", o_.steps},
           {"lr", o_.opt.lr},
           {"warmup", o_.opt.warmup},
           {"weight_decay", o_.opt.weight_decay},
           {"clip", o_.opt.clip},
           // LibTorch splits a kernel's reductions by it: another count changes the last bits.
           {"intra_op_threads", at::get_num_threads()},
           // Other kernels, other numbers: a CPU run resumed on a GPU, or in bf16, went on
           // without a word. The device's kind only: another GPU of the same kind computes alike.
           {"device", o_.device == "cpu" ? "cpu" : "cuda"},
           {"dtype", o_.dtype}};
  if (o_.device != "cpu") s.run["deterministic"] = o_.deterministic;
  if (o_.device == "cpu") s.run["cpu_kernels"] = cpu_kernels();
  // The corpus as read, not its path: a path spelled otherwise reads the same bytes, and a file
  // rewritten in place does not. (Older checkpoints recorded the path as `data`, which is no
  // longer compared.)
  // Each task's own options only: an image-text resume warned about `min_len`, which its
  // synthetic samples never read.
  if (o_.task == "text") {
    s.run["data_contents"] = data_->contents();
    s.earlier_data_contents = data_->earlier_contents();
    s.run["min_len"] = o_.window.min_len;
    s.run["max_len"] = o_.window.max_len;
  }
  if (o_.task == "image-text") s.run["max_images"] = o_.max_images;
  s.run.update(recorded_);
  return s;
}

// This process's chunks with their AdamW moments (which follow parameters()' order).
std::vector<ChunkTensors> Trainer::local_chunks() const {
  std::vector<ChunkTensors> out;
  const int t = o_.runtime.tp;
  size_t k = 0;
  for (int c = 0; c < m_.chunks(); ++c)
    for (int r = 0; r < t; ++r) {
      Chunk* ch = chunk(r, c);
      if (!ch) continue;
      ChunkTensors e;
      e.chunk = c;
      e.tp_rank = r;
      for (size_t i = 0; i < ch->params().size(); ++i, ++k) {
        e.names.push_back(t > 1 ? ch->names()[i] + "@tp" + std::to_string(r) : ch->names()[i]);
        e.params.push_back(ch->params()[i]);
        e.exp_avg.push_back(exp_avg_[k]);
        e.exp_avg_sq.push_back(exp_avg_sq_[k]);
      }
      out.push_back(std::move(e));
    }
  return out;
}

// The whole model's tensors in a checkpoint, with every TP rank's copies of replicated ones:
// the estimate validate() sizes memory by, with room for the image encoder's layers.
double Trainer::checkpoint_bytes() const {
  const double d = o_.model.d_model, t = o_.runtime.tp;
  return 3 * 4 * t * (approx_parameters(o_.model) + 8 * d * d + 64 * d);
}

// One process writes the whole model; in a multi-process run replica 0's processes send their
// chunks to rank 0, which writes the file a one-process run would, and every process returns
// once it is written (or throws what stopped rank 0).
void Trainer::save(const std::string& path) const {
  if (!o_.job) return save_checkpoint(path, checkpoint_state());
  Job& job = *o_.job;
  // The others wait for rank 0 to gather, checksum, write and fsync the whole model: the
  // job's deadline, sized for a step, cut a healthy run short at its first save (a 306 MB
  // checkpoint under --timeout 1). The waits get --timeout plus 1 s per kSaveBytesPerSecond.
  const double bytes = checkpoint_bytes();
  const auto longer = job.allow_longer_waits(
      static_cast<std::int64_t>(std::ceil(bytes / kSaveBytesPerSecond)) * 1000,
      "while rank 0 writes the checkpoint (about " + gigabytes(bytes) +
          ": --timeout plus 1 s per " + gigabytes(kSaveBytesPerSecond) + ")");
  const std::string mine = job.replica() == 0 ? pack_chunks(local_chunks()) : std::string();
  const auto packs = job.gather_to_root(std::as_bytes(std::span(mine.data(), mine.size())));
  std::exception_ptr failed;
  if (job.rank() == 0) {
    try {
      CheckpointState s = checkpoint_state();
      unpack_chunks(packs, m_.chunks(), o_.runtime.tp, s);
      save_checkpoint(path, s);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  const double flag = failed ? 1 : 0;
  if (job.all_gather(std::span(&flag, 1))[0].at(0) == 0) return;
  // Every process stops here, rank 0 with its own error, which it alone prints.
  if (!failed)
    throw JobError("checkpoint '" + path + "': rank 0 could not write it (its error says why)");
  try {
    std::rethrow_exception(failed);
  } catch (const std::exception& e) {
    throw JobError(e.what());
  }
}

// Every process's parameter names, each once (a collective over the job).
std::vector<std::string> Trainer::job_parameter_names() const {
  std::string mine;
  for (const std::string& n : parameter_names())
    mine += n + '\n';
  std::set<std::string> all;
  for (const auto& got :
       o_.job->all_gather_bytes(std::as_bytes(std::span(mine.data(), mine.size())))) {
    const std::string text(reinterpret_cast<const char*>(got.data()), got.size());
    for (std::size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
      all.insert(text.substr(at, end - at));
  }
  return {all.begin(), all.end()};
}

// One path may hold another checkpoint on each node (a stale copy): the processes resumed at
// different steps and failed inside the run, or trained a model of two checkpoints.
void Trainer::refuse_other_checkpoint(const std::string& path, const CheckpointState& s) const {
  // Every process read it (agree_on_input): rank 0 is the first, and the others' steps name them.
  const double mine[] = {job_digest(s.checksum), static_cast<double>(s.step)};
  const std::vector<Differing> d = differing_over_job(*o_.job, mine);
  const std::vector<int>& other = d[0].other;
  if (other.empty()) return;
  auto step = [&](int r) { return std::to_string(static_cast<long long>(d[1].by_rank[r])); };
  throw InputError("`resume`: every process must resume from the same checkpoint; '" +
                   printable(path, 100) + "' holds another on rank(s) " + rank_list(other) +
                   " (step " + step(other.front()) + ") than on rank 0 (step " + step(0) +
                   "; each process reads its own copy, from its node)");
}

std::vector<std::string> Trainer::resume(const std::string& path) {
  CheckpointState s = checkpoint_state();
  std::vector<std::string> differences;
  if (o_.job) {
    // Every process reads the file and takes its own tensors by name. The whole model's
    // tensors (with every TP rank's copies of replicated ones) bound what is read. The file
    // is this process's to read (a relative path, a node's own disk): its refusal is agreed.
    const std::vector<std::string> model = job_parameter_names();
    agree_on_input(o_.job, [&] {
      differences =
          load_checkpoint_part(path, s, static_cast<std::uint64_t>(checkpoint_bytes()), model);
    });
    refuse_other_checkpoint(path, s);
  } else {
    differences = load_checkpoint(path, s);  // fills the tensors in place
  }
  step_ = s.step;
  last_loss_ = s.loss;
  checkpoint_run_ = s.run_written;
  runs_ = std::max(runs_, step_);  // a resumed run numbers its runtime steps from its own
  return differences;
}

}  // namespace rrfp::train
