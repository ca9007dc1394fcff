#include "ckpt/writer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "base/crc32c.h"
#include "base/fault.h"
#include "base/log.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/write_plan.h"
#include "ckpt/writer_job.h"
#include "kernels/ops.h"

namespace rt::ckpt {

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(WriterOptions o) {
  if (!o.storage) return InvalidArgument("checkpoint writer: no storage");
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    return InvalidArgument("checkpoint writer: rank " + std::to_string(o.rank) + " of world " +
                           std::to_string(o.world));
  if (o.keep < 1) return InvalidArgument("checkpoint writer: keep must be >= 1");
  if (o.piece_bytes < 8) return InvalidArgument("checkpoint writer: piece_bytes must be >= 8");
  if (o.encode_threads < 1) return InvalidArgument("checkpoint writer: encode_threads < 1");
  if (o.commit_timeout_ms <= 0) return InvalidArgument("checkpoint writer: commit_timeout_ms <= 0");
  if (o.run_id.empty() || o.run_id.size() > 256)
    return InvalidArgument("checkpoint writer: run_id must be 1-256 characters");
  return std::unique_ptr<CheckpointWriter>(new CheckpointWriter(std::move(o)));
}

CheckpointWriter::CheckpointWriter(WriterOptions options) : options_(std::move(options)) {}

CheckpointWriter::~CheckpointWriter() {
  if (job_ && job_->thread.joinable()) job_->thread.join();
}

Status CheckpointWriter::Wait(Deadline deadline) {
  if (!job_) return Status();
  {
    std::unique_lock lock(job_->mu);
    if (!job_->cv.wait_until(lock, deadline.when(), [&] { return job_->done; }))
      return DeadlineExceeded("checkpoint save of step " + std::to_string(job_->step) +
                              " still running at the deadline");
  }
  if (job_->thread.joinable()) job_->thread.join();
  last_save_ = {job_->step, job_->data_bytes + job_->manifest_bytes,
                job_->finished - job_->started};
  Status s = job_->reported ? Status() : job_->status;
  job_->reported = true;
  job_.reset();
  return s;
}

Status CheckpointWriter::WaitWritten(Deadline deadline) {
  if (!job_) return Status();
  std::unique_lock lock(job_->mu);
  if (!job_->cv.wait_until(lock, deadline.when(), [&] { return job_->written; }))
    return DeadlineExceeded("checkpoint save of step " + std::to_string(job_->step) +
                            ": this rank's files still being written at the deadline");
  return job_->write_status;
}

void CheckpointWriter::Abandon() {
  if (job_) job_->abandoned = true;
}

Status CheckpointWriter::Save(int64_t step, const StateShards& shards, std::string engine_state) {
  if (step < 0) return InvalidArgument("checkpoint step " + std::to_string(step) + " < 0");
  if (job_) {
    bool running;
    {
      std::lock_guard lock(job_->mu);
      running = !job_->done;
    }
    const double start = MonoSeconds();
    // The previous save's own waits are bounded by commit_timeout_ms; this bound is a backstop.
    Status previous = Wait(Deadline::AfterMs(2 * options_.commit_timeout_ms + 60000));
    if (running)
      LOG_INFO("checkpoint step {}: waited {:.3f} s for the save of the previous checkpoint", step,
               MonoSeconds() - start);
    RETURN_IF_ERROR(previous.WithContext("the previous checkpoint save failed"));
  }
  ASSIGN_OR_RETURN(std::vector<PlannedPiece> plan, PlanWrites(shards, options_.piece_bytes));
  auto job = std::make_unique<Job>();
  job->step = step;
  job->started = MonoSeconds();
  job->engine_state = std::move(engine_state);
  // A synchronous save of shards in host memory writes them as they are: the caller waits in
  // Save until the commit, so they cannot change meanwhile. Otherwise the snapshot holds a copy.
  const bool direct = !options_.async && std::all_of(shards.shards.begin(), shards.shards.end(),
                                                     [](const TensorShard& s) {
                                                       return s.view.device() == Device::kCpu;
                                                     });
  size_t total = 0;
  std::vector<size_t> offsets;  // in the snapshot
  for (const PlannedPiece& p : plan) {
    const TensorShard& s = shards.shards[p.shard];
    const size_t esize = DTypeSize(s.dtype);
    SnapshotPiece sp;
    sp.kind = s.kind;
    sp.name = s.name;
    sp.dtype = s.dtype;
    sp.region = p.region;
    sp.bytes = static_cast<size_t>(p.end - p.begin) * esize;
    if (direct) sp.data = static_cast<const uint8_t*>(s.view.data()) + p.begin * esize;
    offsets.push_back(total);
    total += sp.bytes;
    job->pieces.push_back(std::move(sp));
  }
  if (!direct) {
    if (snapshot_bytes_ < total) {
      snapshot_.reset();
      snapshot_.reset(new uint8_t[total]);
      snapshot_bytes_ = total;
    }
    for (size_t i = 0; i < plan.size(); ++i) {
      const PlannedPiece& p = plan[i];
      const TensorShard& s = shards.shards[p.shard];
      const size_t esize = DTypeSize(s.dtype);
      const Tensor src(static_cast<std::byte*>(s.view.data()) + p.begin * esize, s.dtype,
                       Shape{p.end - p.begin}, s.view.device());
      const Tensor dst(snapshot_.get() + offsets[i], s.dtype, Shape{p.end - p.begin});
      RETURN_IF_ERROR(Copy(dst, src).WithContext("snapshot of " + s.name));
      job->pieces[i].data = snapshot_.get() + offsets[i];
    }
  }
  Job* raw = job.get();
  job_ = std::move(job);
  auto run = [this, raw] {
    Status s = Run(*raw);
    raw->finished = MonoSeconds();
    std::lock_guard lock(raw->mu);
    raw->status = std::move(s);
    raw->done = true;
    raw->cv.notify_all();
  };
  // Without a snapshot the save runs on this thread: no deadline can return from Save while a
  // background thread still reads the caller's shards.
  if (direct) {
    run();
  } else {
    raw->thread = std::thread(run);
  }
  if (!options_.async) return Wait(Deadline::AfterMs(2 * options_.commit_timeout_ms + 60000));
  return Status();
}

Status CheckpointWriter::FaultPoint([[maybe_unused]] std::string_view point) const {
  return RT_FAULT_POINT(options_.fault_prefix + "." + std::string(point));
}

Status CheckpointWriter::Run(Job& job) {
  const double start = MonoSeconds();
  Status written = WriteRankFiles(job);
  job.files_s = MonoSeconds() - start;
  if (!written.ok()) {
    // Best effort: what is left is removed by rank 0 or by the next commit's cleanup.
    const std::string dir = StepDir(job.step);
    (void)options_.storage->Remove(JoinPath(dir, FragmentFile(options_.rank)));
    (void)options_.storage->Remove(JoinPath(dir, DataFile(options_.rank)));
  }
  {
    std::lock_guard lock(job.mu);
    job.written = true;
    job.write_status = written;
    job.cv.notify_all();
  }
  // With other ranks, they may still write into the folder: Abandon or the caller removes it.
  if (options_.world == 1 && !written.ok()) return DropFailedCommit(job.step, std::move(written));
  RETURN_IF_ERROR(written);
  if (options_.rank == 0) {
    Status committed = Commit(job);
    if (!committed.ok()) RETURN_IF_ERROR(DropFailedCommit(job.step, std::move(committed)));
    LOG_INFO(
        "checkpoint step {} committed to {} in {:.3f} s (this rank's files {:.3f} s, then the "
        "other ranks' fragments {:.3f} s, manifest and latest {:.3f} s, cleanup {:.3f} s)",
        job.step, options_.storage->uri(), MonoSeconds() - start, job.files_s, job.gather_s,
        job.commit_point_s, job.cleanup_s);
  } else if (!options_.async) {
    RETURN_IF_ERROR(WaitCommitted(job.step));
  }
  return Status();
}

Status CheckpointWriter::WriteRankFiles(Job& job) {
  RETURN_IF_ERROR(FaultPoint("save.before_data"));
  Storage& storage = *options_.storage;
  // Rewriting a committed step in place could mix its files with new ones.
  ASSIGN_OR_RETURN(std::vector<int64_t> committed, ListCommitted(storage));
  if (!committed.empty() && committed.front() >= job.step)
    return FailedPrecondition("checkpoint step " + std::to_string(job.step) +
                              " is not newer than " + "the committed step " +
                              std::to_string(committed.front()) + " in " + storage.uri());
  const std::string dir = StepDir(job.step);
  const std::string data_name = DataFile(options_.rank);
  ASSIGN_OR_RETURN(std::unique_ptr<StorageFileWriter> file,
                   storage.CreateFile(JoinPath(dir, data_name)));
  Fragment fragment;
  fragment.step = job.step;
  fragment.run_id = options_.run_id;
  fragment.rank = options_.rank;
  fragment.files = {data_name};
  std::vector<StoredPiece> stored(job.pieces.size());
  uint64_t offset = 0;
  // Pieces are encoded in windows, `encode_threads` at a time, and appended in order.
  const size_t window = options_.codec == Codec::kNone ? 1 : 2 * options_.encode_threads;
  std::vector<std::vector<uint8_t>> encoded(window);
  std::vector<Status> errors(window);
  for (size_t first = 0; first < job.pieces.size(); first += window) {
    const size_t count = std::min(window, job.pieces.size() - first);
    auto encode = [&](size_t k) {
      const SnapshotPiece& p = job.pieces[first + k];
      auto out = Encode(options_.codec, DTypeSize(p.dtype), {p.data, p.bytes}, options_.zstd_level);
      if (out.ok()) encoded[k] = std::move(*out);
      errors[k] = out.status();
    };
    if (options_.codec != Codec::kNone) {
      std::atomic<size_t> next{0};
      auto worker = [&] {
        for (size_t k; (k = next.fetch_add(1)) < count;) encode(k);
      };
      std::vector<std::thread> threads;
      for (int t = 1; t < options_.encode_threads && static_cast<size_t>(t) < count; ++t)
        threads.emplace_back(worker);
      worker();
      for (auto& t : threads) t.join();
    }
    for (size_t k = 0; k < count; ++k) {
      const SnapshotPiece& p = job.pieces[first + k];
      std::span<const uint8_t> bytes(p.data, p.bytes);
      if (options_.codec != Codec::kNone) {
        RETURN_IF_ERROR(errors[k].WithContext("encode " + p.name));
        bytes = encoded[k];
      }
      StoredPiece& sp = stored[first + k];
      sp.box_offset = p.region.box_offset;
      sp.box_size = p.region.box_size;
      sp.has_flat_range = p.region.has_flat_range;
      sp.flat_begin = p.region.flat_begin;
      sp.flat_end = p.region.flat_end;
      sp.file = 0;
      sp.offset = offset;
      sp.length = bytes.size();
      sp.crc32c = Crc32c(bytes.data(), bytes.size());
      sp.codec = options_.codec;
      sp.raw_length = p.bytes;
      RETURN_IF_ERROR(file->Append(bytes));
      offset += bytes.size();
    }
  }
  RETURN_IF_ERROR(file->Commit());
  job.data_bytes = offset;
  RETURN_IF_ERROR(FaultPoint("save.after_data"));
  for (size_t i = 0; i < job.pieces.size(); ++i) {
    const SnapshotPiece& p = job.pieces[i];
    auto it =
        std::find_if(fragment.tensors.begin(), fragment.tensors.end(),
                     [&](const TensorEntry& t) { return t.kind == p.kind && t.name == p.name; });
    if (it == fragment.tensors.end()) {
      TensorEntry t;
      t.kind = p.kind;
      t.name = p.name;
      t.global_shape = p.region.global_shape;
      t.dtype = p.dtype;
      fragment.tensors.push_back(std::move(t));
      it = fragment.tensors.end() - 1;
    }
    it->pieces.push_back(stored[i]);
  }
  RETURN_IF_ERROR(
      storage.WriteFile(JoinPath(dir, FragmentFile(options_.rank)), EncodeFragment(fragment)));
  return FaultPoint("save.after_fragment");
}

bool CheckpointWriter::RemoveFailedSave(int64_t step) {
  Storage& storage = *options_.storage;
  Result<std::vector<int64_t>> committed = ListCommitted(storage);
  if (!committed.ok()) {
    LOG_WARN("checkpoint step {}: its failed save is left to the next commit's cleanup: {}", step,
             committed.status().ToString());
    return false;
  }
  if (std::find(committed->begin(), committed->end(), step) != committed->end()) return true;
  // Only a folder newer than every committed checkpoint is this save's alone (an older step is
  // refused before anything is written, and its folder is the next commit's to clean).
  if (committed->empty() || committed->front() < step) {
    const Status removed = storage.Remove(StepDir(step));
    if (!removed.ok())
      LOG_WARN(
          "checkpoint step {}: removing the folder of the failed save: {} (the next commit "
          "removes it)",
          step, removed.ToString());
  }
  return false;
}

Status CheckpointWriter::DropFailedCommit(int64_t step, Status failure) {
  if (!RemoveFailedSave(step)) return failure;
  LOG_WARN("checkpoint step {} is committed; what failed after its commit point: {}", step,
           failure.ToString());
  return Status();
}

Status CheckpointWriter::WaitCommitted(int64_t step) {
  const Deadline deadline = Deadline::AfterMs(options_.commit_timeout_ms);
  const double start = MonoSeconds();
  for (;;) {
    auto latest = ReadLatest(*options_.storage);
    if (latest.ok() && latest->has_value() && (*latest)->front() >= step) return Status();
    if (deadline.Expired())
      return DeadlineExceeded("checkpoint step " + std::to_string(step) + " on " +
                              options_.storage->uri() + " not committed by rank 0 within " +
                              std::to_string(options_.commit_timeout_ms) + " ms");
    std::this_thread::sleep_for(PollInterval(MonoSeconds() - start));
  }
}

std::string NewRunId() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(MonoClock::now().time_since_epoch().count()));
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return text;
}

}  // namespace rt::ckpt
