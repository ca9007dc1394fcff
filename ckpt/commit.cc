// Rank 0's side of a save: gather the fragments, write the manifest, move `latest`, clean up.
#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "base/fault.h"
#include "base/log.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/writer_job.h"

namespace rt::ckpt {
namespace {

// Aborted: the save of `step` was abandoned because another rank failed its part.
Status AbandonedError(int64_t step) {
  return Aborted("checkpoint step " + std::to_string(step) +
                 " abandoned: another rank failed to write its part");
}

// Reads every rank's fragment of (run, step), polling (PollInterval) until `deadline` or until
// `abandoned`.
Result<std::vector<Fragment>> GatherFragments(Storage& storage, const std::string& dir,
                                              const std::string& run_id, int64_t step, int world,
                                              Deadline deadline,
                                              const std::atomic<bool>& abandoned) {
  std::vector<std::optional<Fragment>> got(static_cast<size_t>(world));
  const double start = MonoSeconds();
  for (;;) {
    // One listing per poll; only fragments that appeared are read.
    ASSIGN_OR_RETURN(std::vector<std::string> names, storage.List(dir));
    const std::set<std::string> present(names.begin(), names.end());
    std::vector<int> missing;
    for (int r = 0; r < world; ++r) {
      if (got[r]) continue;
      if (!present.contains(FragmentFile(r))) {
        missing.push_back(r);
        continue;
      }
      const std::string path = JoinPath(dir, FragmentFile(r));
      auto bytes = storage.ReadFile(path);
      if (!bytes.ok() && bytes.status().code() == StatusCode::kNotFound) {
        missing.push_back(r);
        continue;
      }
      RETURN_IF_ERROR(bytes.status());
      ASSIGN_OR_RETURN(Fragment f, DecodeFragment(*bytes, storage.uri() + "/" + path));
      if (f.run_id != run_id || f.step != step || f.rank != r) {
        missing.push_back(r);  // a leftover of an earlier run: its rank rewrites it
        continue;
      }
      got[r] = std::move(f);
    }
    if (missing.empty()) break;
    if (abandoned) return AbandonedError(step);
    if (deadline.Expired()) {
      std::string ranks;
      for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      return DeadlineExceeded("checkpoint step " + std::to_string(step) + ": no fragment of run " +
                              run_id + " from rank(s) " + ranks + " in " + storage.uri() + "/" +
                              dir + " by the deadline");
    }
    std::this_thread::sleep_for(PollInterval(MonoSeconds() - start));
  }
  std::vector<Fragment> out;
  for (auto& f : got) out.push_back(std::move(*f));
  return out;
}

// Merges the fragments into the manifest's file table and tensors, checking that every tensor's
// pieces hold as many elements as the tensor has.
Status Merge(std::vector<Fragment> fragments, Manifest& m) {
  std::map<std::pair<StateKind, std::string>, size_t> index;
  for (const Fragment& f : fragments) {
    const uint32_t file_base = static_cast<uint32_t>(m.files.size());
    m.files.insert(m.files.end(), f.files.begin(), f.files.end());
    for (const TensorEntry& t : f.tensors) {
      auto [it, fresh] = index.try_emplace({t.kind, t.name}, m.tensors.size());
      if (fresh) {
        m.tensors.push_back(TensorEntry{t.kind, t.name, t.global_shape, t.dtype, {}});
      } else if (m.tensors[it->second].global_shape != t.global_shape ||
                 m.tensors[it->second].dtype != t.dtype) {
        return FailedPrecondition(std::string(StateKindName(t.kind)) + " '" + t.name + "': rank " +
                                  std::to_string(f.rank) + " stores shape " +
                                  t.global_shape.ToString() +
                                  " or a dtype that differs from "
                                  "another rank's");
      }
      for (StoredPiece p : t.pieces) {
        p.file += file_base;
        m.tensors[it->second].pieces.push_back(p);
      }
    }
  }
  for (const TensorEntry& t : m.tensors) {
    int64_t held = 0;
    for (const StoredPiece& p : t.pieces) held += p.numel();
    if (held != t.global_shape.numel())
      return FailedPrecondition(std::string(StateKindName(t.kind)) + " '" + t.name +
                                "': the ranks store " + std::to_string(held) + " elements of its " +
                                std::to_string(t.global_shape.numel()) +
                                " (replica or replica_count of its shards wrong?)");
  }
  return Status();
}

// After the commit of `m` (whose `latest` lists `committed`): files of its folder that it does not
// name, step folders older than it that `latest` does not list (aborted saves, retired
// checkpoints), fragments and temporary files in the kept folders.
Status Cleanup(Storage& storage, const Manifest& m, const std::vector<int64_t>& committed) {
  std::vector<std::string> doomed;
  const std::string dir = StepDir(m.step);
  ASSIGN_OR_RETURN(std::vector<std::string> names, storage.List(dir));
  const std::set<std::string> wanted(m.files.begin(), m.files.end());
  for (const std::string& name : names)
    if (name != kManifestFile && !wanted.contains(name)) doomed.push_back(JoinPath(dir, name));
  const std::set<int64_t> kept(committed.begin(), committed.end());
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListStepDirs(storage));
  for (int64_t step : steps) {
    if (step >= m.step) continue;  // newer folders may be in the making
    if (!kept.contains(step)) {
      LOG_INFO("checkpoint: removing {} (retired or left by an aborted save)", StepDir(step));
      doomed.push_back(StepDir(step));
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<std::string> left, storage.List(StepDir(step)));
    for (const std::string& name : left)
      if (name.ends_with(".frag") || name.find(".tmp.") != std::string::npos)
        doomed.push_back(JoinPath(StepDir(step), name));
  }
  return storage.RemoveAll(doomed);
}

}  // namespace

Status CheckpointWriter::Commit(Job& job) {
  Storage& storage = *options_.storage;
  const std::string dir = StepDir(job.step);
  double phase = MonoSeconds();
  ASSIGN_OR_RETURN(std::vector<Fragment> fragments,
                   GatherFragments(storage, dir, options_.run_id, job.step, options_.world,
                                   Deadline::AfterMs(options_.commit_timeout_ms), job.abandoned));
  job.gather_s = MonoSeconds() - phase;
  phase = MonoSeconds();
  RETURN_IF_ERROR(FaultPoint("commit.after_fragments"));
  if (job.abandoned) return AbandonedError(job.step);
  Manifest m;
  m.step = job.step;
  m.run_id = options_.run_id;
  m.config_toml = options_.config_toml;
  m.layout = options_.layout;
  m.engine_state = std::move(job.engine_state);
  m.world = options_.world;
  RETURN_IF_ERROR(
      Merge(std::move(fragments), m).WithContext("checkpoint step " + std::to_string(job.step)));
  const std::vector<uint8_t> manifest = EncodeManifest(m);
  RETURN_IF_ERROR(storage.WriteFile(JoinPath(dir, kManifestFile), manifest));
  job.manifest_bytes = manifest.size();
  RETURN_IF_ERROR(FaultPoint("commit.after_manifest"));
  // The commit point: `latest` lists this step first, then the newest older committed ones.
  ASSIGN_OR_RETURN(std::vector<int64_t> committed, ListCommitted(storage));
  std::erase_if(committed, [&](int64_t step) { return step >= job.step; });
  committed.insert(committed.begin(), job.step);
  if (committed.size() > static_cast<size_t>(options_.keep)) committed.resize(options_.keep);
  const std::string latest = EncodeLatest(committed);
  RETURN_IF_ERROR(storage.WriteFile(
      kLatestFile, {reinterpret_cast<const uint8_t*>(latest.data()), latest.size()}));
  RETURN_IF_ERROR(FaultPoint("commit.after_latest"));
  job.commit_point_s = MonoSeconds() - phase;
  phase = MonoSeconds();
  Status cleaned = Cleanup(storage, m, committed);
  job.cleanup_s = MonoSeconds() - phase;
  if (!cleaned.ok())
    LOG_WARN("checkpoint step {} committed; cleanup incomplete (the next save retries): {}",
             job.step, cleaned.ToString());
  return Status();
}

}  // namespace rt::ckpt
