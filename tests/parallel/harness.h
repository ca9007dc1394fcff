// Multi-rank test harness for the distributed engine: runs the ranks of a layout as threads of
// this process over the CPU communicator (shared memory, an in-memory rendezvous store), keeps
// every rank's engine alive for inspection, and compares the result with the single-process
// Trainer.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/ops.h"
#include "parallel/engine.h"
#include "parallel/local_ranks.h"
#include "parallel/trainer.h"

namespace rt::parallel::testing {

// The ranks of one run, alive until destroyed.
struct DistRun {
  std::vector<std::unique_ptr<comm::Communicator>> worlds;
  std::vector<std::unique_ptr<DistTrainer>> engines;
  std::vector<std::vector<double>> losses;                          // per rank, per step
  std::vector<std::vector<double>> norms;                           // per rank, per step
  std::vector<comm::CommStats> dp_shard_stats, dp_replicate_stats;  // after the last step
  Status status;

  ~DistRun() {
    engines.clear();  // before their world communicators
    worlds.clear();
  }
};

// Runs `steps` steps of `config` under `layout` with one thread per rank (with the gradient
// reductions started only after the backward when `overlap_reductions` is false). The engines
// are created with `init`; `prepare`, when given, runs on each rank's engine before its first
// step (e.g. to load a state and Restore). Every rank's first error ends up in DistRun::status
// (naming the rank).
inline std::unique_ptr<DistRun> RunLayout(const RunConfig& config, const ParallelLayout& layout,
                                          std::shared_ptr<const std::vector<uint16_t>> tokens,
                                          int steps, bool overlap_reductions = true,
                                          WeightInit init = WeightInit::kFromSeed,
                                          std::function<Status(DistTrainer&)> prepare = {}) {
  static std::atomic<int> job{0};
  const size_t n = static_cast<size_t>(layout.world());
  auto run = std::make_unique<DistRun>();
  run->engines.resize(n);
  run->losses.resize(n);
  run->norms.resize(n);
  run->dp_shard_stats.resize(n);
  run->dp_replicate_stats.resize(n);
  run->status = RunRanksAsThreads(
      layout.world(), "dist-test-" + std::to_string(job++), &run->worlds,
      [&](int r, comm::Communicator& world) -> Status {
        const size_t i = static_cast<size_t>(r);
        ASSIGN_OR_RETURN(run->engines[i], DistTrainer::Create(config, layout, world, tokens,
                                                              std::chrono::seconds(120), init));
        if (prepare) RETURN_IF_ERROR(prepare(*run->engines[i]));
        if (!overlap_reductions) RETURN_IF_ERROR(run->engines[i]->SetReductionOverlap(false));
        for (int s = 0; s < steps; ++s) {
          ASSIGN_OR_RETURN(StepStats st, run->engines[i]->Step());
          run->losses[i].push_back(st.loss);
          run->norms[i].push_back(st.grad_norm);
        }
        run->dp_shard_stats[i] = run->engines[i]->groups().dp_shard->stats();
        run->dp_replicate_stats[i] = run->engines[i]->groups().dp_replicate->stats();
        return Status();
      });
  return run;
}

// A global tensor put together from the replica-0 shards of every rank.
struct Assembled {
  std::vector<float> values;
  std::vector<int> cover;  // replica-0 pieces covering each element
};

// Assembles every tensor of `kind` from the ranks' shards. Sets *error to the first problem:
// an element covered twice or not at all by replica 0, or a replica whose values differ from
// replica 0's.
inline std::map<std::string, Assembled> Assemble(DistRun& run, ckpt::StateKind kind,
                                                 std::string* error) {
  std::map<std::string, Assembled> out;
  std::vector<ckpt::TensorShard> replicas;
  // Visits (global element index, value) of every element a shard holds.
  auto place = [&](const ckpt::TensorShard& s, auto&& visit) {
    const int64_t begin = s.has_flat_range ? s.flat_begin : 0;
    // bf16/fp16 parameters are compared as their (exact) fp32 values, read from the host (the
    // views of a CUDA engine are device memory).
    std::vector<std::byte> raw(s.view.nbytes());
    const Tensor host(raw.data(), s.dtype, Shape{s.numel()});
    RT_CHECK(Copy(host, s.view).ok());
    std::vector<float> wide(static_cast<size_t>(s.numel()));
    RT_CHECK(Convert(Tensor(wide.data(), DType::kF32, Shape{s.numel()}), host).ok());
    const float* src = wide.data();
    for (int64_t e = 0; e < s.numel(); ++e) {
      int64_t rest = begin + e, global = 0;
      for (int d = s.box_size.ndim - 1, stride = 1; d >= 0; --d) {
        const int64_t idx = rest % s.box_size.dims[d] + s.box_offset.dims[d];
        rest /= s.box_size.dims[d];
        global += idx * stride;
        stride *= static_cast<int>(s.global_shape.dims[d]);
      }
      visit(global, src[e]);
    }
  };
  for (auto& engine : run.engines) {
    for (const ckpt::TensorShard& s : engine->Shards().shards) {
      if (s.kind != kind) continue;
      if (s.replica != 0) {
        replicas.push_back(s);
        continue;
      }
      Assembled& a = out[s.name];
      if (a.values.empty()) {
        a.values.assign(static_cast<size_t>(s.global_shape.numel()), 0.0f);
        a.cover.assign(a.values.size(), 0);
      }
      place(s, [&](int64_t i, float v) {
        a.values[static_cast<size_t>(i)] = v;
        ++a.cover[static_cast<size_t>(i)];
      });
    }
  }
  for (auto& [name, a] : out)
    for (size_t i = 0; i < a.cover.size(); ++i)
      if (a.cover[i] != 1 && error->empty())
        *error = name + " element " + std::to_string(i) + " covered " + std::to_string(a.cover[i]) +
                 " times";
  for (const ckpt::TensorShard& s : replicas) {
    const Assembled& a = out[s.name];
    place(s, [&](int64_t i, float v) {
      if (a.values.empty() || a.values[static_cast<size_t>(i)] != v) {
        if (error->empty())
          *error = "replica " + std::to_string(s.replica) + " of " + s.name + " differs";
      }
    });
  }
  return out;
}

// Differences between assembled parameters and `reference` (an arena in AddGptTensors layout).
struct ParamDiff {
  double global = 0;      // max |a − b| over the whole model / max |b| over the whole model
  double per_tensor = 0;  // the largest max |a − b| / max |b| of one tensor (informational)
  std::string worst_tensor;
};

inline ParamDiff CompareParams(const std::map<std::string, Assembled>& got, const Arena& reference,
                               std::string* error) {
  ParamDiff d;
  double diff_all = 0, scale_all = 0;
  for (int i = 0; i < reference.size(); ++i) {
    auto it = got.find(reference.name(i));
    if (it == got.end()) {
      *error = "missing tensor " + reference.name(i);
      d.global = INFINITY;
      return d;
    }
    const Tensor t = reference.Get(i);
    const float* ref = t.data_as<float>();
    double diff = 0, scale = 0;
    for (int64_t e = 0; e < t.numel(); ++e) {
      diff = std::max(
          diff, std::abs(static_cast<double>(it->second.values[static_cast<size_t>(e)]) - ref[e]));
      scale = std::max(scale, std::abs(static_cast<double>(ref[e])));
    }
    const double rel = scale > 0 ? diff / scale : diff;
    if (std::getenv("RT_DIST_VERBOSE") != nullptr)
      std::printf("  %-28s max |diff| %.2e  max |ref| %.2e\n", reference.name(i).c_str(), diff,
                  scale);
    if (rel > d.per_tensor) {
      d.per_tensor = rel;
      d.worst_tensor = reference.name(i);
    }
    diff_all = std::max(diff_all, diff);
    scale_all = std::max(scale_all, scale);
  }
  d.global = diff_all / scale_all;
  return d;
}

}  // namespace rt::parallel::testing
