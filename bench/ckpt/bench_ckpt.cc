// `ringtrain bench ckpt`: the checkpoint library (ckpt/) driven by the distributed engine, its
// ranks as threads of this process over the CPU communicator, on synthetic tokens.
//  (a) stall: passes of --steps training steps without saves and with an asynchronous save every
//      --every steps (the first at the pass's start, so every background write overlaps steps of
//      the same pass), alternating; stall = (mean step with saves − without) / without, the
//      median over the pass pairs of the ratio within each pair. The wait for the last save after
//      a pass is not in the step time; it is printed as "tail wait".
//  (b) save throughput: synchronous saves (codec none) to the POSIX folder --dir and, with
//      --ringfs, to a ringfsd: bytes of the step folder / the time from Save to the commit seen by
//      every rank (between barriers: the slowest rank).
//  (c) load: CheckpointReader::Open + Load into this layout's engine + Restore. Re-shard: an
//      engine of --reshard-to (kForLoad; a different layout, the same number of ranks) loads the
//      checkpoint of --layout, and, for the like-for-like baseline, a checkpoint it saved itself
//      (same destination, no re-sharding): re-shard / same-layout is the ratio of those two.
//  (d) per codec (--codecs): stored / raw bytes of weights (param, master) and Adam state (m, v)
//      from the manifest, and save and load MiB/s of raw state.
// Every timed figure is the median over --rounds rounds, each on a fresh folder. Reads follow
// the writes, so they usually come from the page cache (as do torch.load's in ckpt_torch.py).
//   ringtrain bench ckpt --config m --layout dp=2 --dir /tmp/ckpt [--ringfs ringfs://H:P/PATH]
#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/ckpt/ckpt_bench.h"
#include "ckpt/checkpoint.h"
#include "comm/communicator.h"
#include "model/rng.h"
#include "parallel/config.h"
#include "parallel/engine.h"
#include "parallel/layout.h"
#include "parallel/local_ranks.h"

namespace rt::parallel {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string config = "m";
  std::vector<std::string> sets;
  std::string layout = "dp=2";
  std::string reshard_to;  // default: pp=N for a layout without pp, dp=N otherwise
  std::string dir;         // POSIX folder (required)
  std::string ringfs;      // ringfs://HOST:PORT/PATH, optional
  int warmup = 5, steps = 20, every = 10, passes = 3, rounds = 3;
  std::string codecs = "none,zstd,bgzstd";
};

// Timings of one storage target (POSIX or ringfs), seconds per round.
struct TargetTimes {
  std::vector<double> save_s, load_s;  // saved and loaded by --layout
  // Loaded by --reshard-to: the checkpoint of --layout (re-sharded), and one it saved itself.
  std::vector<double> reshard_load_s, target_load_s;
  uint64_t bytes = 0;  // stored bytes of one checkpoint (all files of its step folder)
};

// Figures of one codec.
struct CodecFigures {
  std::vector<double> save_s, load_s;
  uint64_t weights_raw = 0, weights_stored = 0, adam_raw = 0, adam_stored = 0;
};

// Everything measured; written by rank 0 only (the ranks are threads sharing it).
struct Figures {
  std::vector<double> step_without_s, step_with_s, stall, save_call_s, tail_wait_s;
  std::map<std::string, TargetTimes> targets;  // "posix", "ringfs"; through Target() only
  std::map<std::string, CodecFigures> codecs;  // through Codec() only
  std::mutex maps_mu;  // every rank looks entries up: an insertion must not race another
  // The entry of target `name` (created on first use); references stay valid.
  TargetTimes& Target(const std::string& name) {
    std::lock_guard lock(maps_mu);
    return targets[name];
  }
  // The entry of codec `name` (created on first use); references stay valid.
  CodecFigures& Codec(const std::string& name) {
    std::lock_guard lock(maps_mu);
    return codecs[name];
  }
  uint64_t raw_bytes = 0;  // raw bytes of the stored state (replica 0, every kind)
  int64_t step = 0;        // the step of the checkpoints loaded in (c)
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

int UsableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    if (end > at) out.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// The folder `name` under a target root (a path or a ringfs:// URI).
std::string Under(const std::string& root, const std::string& name) { return root + "/" + name; }

std::string StateBytes(const TrainerState& state) {
  const std::vector<std::byte> b = state.Serialize();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Sum of the sizes of the files in checkpoint `step`'s folder.
Result<uint64_t> StoredBytes(ckpt::Storage& storage, int64_t step) {
  const std::string dir = ckpt::StepDir(step);
  ASSIGN_OR_RETURN(std::vector<std::string> names, storage.List(dir));
  uint64_t total = 0;
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(uint64_t size, storage.FileSize(ckpt::JoinPath(dir, n)));
    total += size;
  }
  return total;
}

// Raw and stored bytes of weights and Adam state, from the manifest.
void CountCodecBytes(const ckpt::Manifest& manifest, CodecFigures* out) {
  for (const ckpt::TensorEntry& t : manifest.tensors) {
    const bool weights = t.kind == ckpt::StateKind::kParam || t.kind == ckpt::StateKind::kMaster;
    const bool adam = t.kind == ckpt::StateKind::kAdamM || t.kind == ckpt::StateKind::kAdamV;
    for (const ckpt::StoredPiece& p : t.pieces) {
      if (weights) out->weights_raw += p.raw_length, out->weights_stored += p.length;
      if (adam) out->adam_raw += p.raw_length, out->adam_stored += p.length;
    }
  }
}

// One rank's view of the shared run: its world, and a timer that measures between barriers.
struct RankContext {
  int rank;
  comm::Communicator& world;
  Status Sync() { return world.Barrier()->Wait(Deadline::AfterMs(600'000)); }
};

// Times `body` between barriers (the slowest rank); rank 0 appends to `out`.
template <typename Body>
Status Timed(RankContext& ctx, std::vector<double>* out, Body body) {
  RETURN_IF_ERROR(ctx.Sync());
  const auto start = Clock::now();
  RETURN_IF_ERROR(body());
  RETURN_IF_ERROR(ctx.Sync());
  if (ctx.rank == 0) out->push_back(Seconds(start));
  return Status();
}

// A checkpoint writer of this rank on `uri`.
Result<std::unique_ptr<ckpt::CheckpointWriter>> Writer(RankContext& ctx, const std::string& uri,
                                                       const std::string& run_id,
                                                       const std::string& layout, ckpt::Codec codec,
                                                       bool async) {
  ckpt::WriterOptions o;
  ASSIGN_OR_RETURN(o.storage, ckpt::OpenStorage(uri));
  o.rank = ctx.rank;
  o.world = ctx.world.size();
  o.run_id = run_id;
  o.layout = layout;
  o.keep = 2;
  o.codec = codec;
  o.async = async;
  return ckpt::CheckpointWriter::Create(std::move(o));
}

// Loads checkpoint `step` of `uri` into `engine` and restores its trainer state.
Status Load(DistTrainer& engine, const std::string& uri, int64_t step) {
  ASSIGN_OR_RETURN(auto storage, ckpt::OpenStorage(uri));
  ASSIGN_OR_RETURN(auto reader, ckpt::CheckpointReader::Open(storage, step));
  RETURN_IF_ERROR(reader->Load(engine.Shards()));
  const std::string& s = reader->manifest().engine_state;
  ASSIGN_OR_RETURN(TrainerState state,
                   TrainerState::Deserialize(std::span<const std::byte>(
                       reinterpret_cast<const std::byte*>(s.data()), s.size())));
  return engine.Restore(state);
}

// (a): passes without and with asynchronous saves, alternating.
Status MeasureStall(RankContext& ctx, DistTrainer& engine, const Options& opt,
                    const std::string& run_id, Figures* fig) {
  for (int pass = 0; pass < 2 * opt.passes; ++pass) {
    const bool with_saves = (pass % 2 == 1) != (pass / 2 % 2 == 1);  // order flips every pair
    std::unique_ptr<ckpt::CheckpointWriter> writer;
    if (with_saves) {
      ASSIGN_OR_RETURN(writer, Writer(ctx, Under(opt.dir, "stall"), run_id, opt.layout,
                                      ckpt::Codec::kNone, /*async=*/true));
    }
    double save_calls = 0;
    RETURN_IF_ERROR(ctx.Sync());
    const auto start = Clock::now();
    for (int s = 0; s < opt.steps; ++s) {
      if (writer && s % opt.every == 0) {
        const auto call = Clock::now();
        RETURN_IF_ERROR(
            writer->Save(engine.state().step, engine.Shards(), StateBytes(engine.state())));
        save_calls += Seconds(call);
      }
      RETURN_IF_ERROR(engine.Step().status());
    }
    const double step_s = Seconds(start) / opt.steps;
    const auto tail = Clock::now();
    if (writer) RETURN_IF_ERROR(writer->Wait(Deadline::AfterMs(600'000)));
    RETURN_IF_ERROR(ctx.Sync());
    if (ctx.rank != 0) continue;
    if (!with_saves) {
      fig->step_without_s.push_back(step_s);
      continue;
    }
    fig->step_with_s.push_back(step_s);
    fig->save_call_s.push_back(save_calls / ((opt.steps + opt.every - 1) / opt.every));
    fig->tail_wait_s.push_back(Seconds(tail));
  }
  if (ctx.rank == 0) {
    for (int p = 0; p < opt.passes; ++p) {
      fig->stall.push_back(fig->step_with_s[p] / fig->step_without_s[p] - 1.0);
    }
  }
  return ctx.Sync();
}

// (b), (d) and the same-layout loads of (c): synchronous saves, each round on fresh folders.
Status MeasureSaves(RankContext& ctx, DistTrainer& engine, const Options& opt,
                    const std::vector<std::string>& run_ids, Figures* fig) {
  std::vector<std::pair<std::string, std::string>> targets = {{"posix", opt.dir}};
  if (!opt.ringfs.empty()) targets.emplace_back("ringfs", opt.ringfs);
  const int64_t step = engine.state().step;
  size_t next_id = 0;
  for (int r = 0; r < opt.rounds; ++r) {
    for (const auto& [name, root] : targets) {
      const std::string uri = Under(root, "save-" + std::to_string(r));
      TargetTimes& t = fig->Target(name);
      ASSIGN_OR_RETURN(auto writer, Writer(ctx, uri, run_ids[next_id++], opt.layout,
                                           ckpt::Codec::kNone, /*async=*/false));
      RETURN_IF_ERROR(Timed(ctx, &t.save_s, [&] {
        return writer->Save(step, engine.Shards(), StateBytes(engine.state()));
      }));
      RETURN_IF_ERROR(Timed(ctx, &t.load_s, [&] { return Load(engine, uri, step); }));
      if (ctx.rank == 0) {
        ASSIGN_OR_RETURN(auto storage, ckpt::OpenStorage(uri));
        ASSIGN_OR_RETURN(t.bytes, StoredBytes(*storage, step));
      }
    }
    for (const std::string& codec_name : Split(opt.codecs)) {
      ASSIGN_OR_RETURN(ckpt::Codec codec, ckpt::ParseCodec(codec_name));
      const std::string uri = Under(opt.dir, "codec-" + codec_name + "-" + std::to_string(r));
      CodecFigures& c = fig->Codec(codec_name);
      ASSIGN_OR_RETURN(auto writer,
                       Writer(ctx, uri, run_ids[next_id++], opt.layout, codec, /*async=*/false));
      RETURN_IF_ERROR(Timed(ctx, &c.save_s, [&] {
        return writer->Save(step, engine.Shards(), StateBytes(engine.state()));
      }));
      RETURN_IF_ERROR(Timed(ctx, &c.load_s, [&] { return Load(engine, uri, step); }));
      if (ctx.rank == 0 && r == 0) {
        ASSIGN_OR_RETURN(auto storage, ckpt::OpenStorage(uri));
        ASSIGN_OR_RETURN(auto reader, ckpt::CheckpointReader::Open(storage, step));
        CountCodecBytes(reader->manifest(), &c);
      }
    }
  }
  if (ctx.rank == 0) fig->step = step;
  return ctx.Sync();
}

// (c) with re-sharding: an engine of another layout loads each round's checkpoints of --layout,
// and checkpoints it saved itself in its own layout (after loading the state).
Status MeasureReshardLoads(RankContext& ctx, DistTrainer& engine, const Options& opt,
                           const std::string& layout, const std::vector<std::string>& run_ids,
                           Figures* fig) {
  std::vector<std::pair<std::string, std::string>> targets = {{"posix", opt.dir}};
  if (!opt.ringfs.empty()) targets.emplace_back("ringfs", opt.ringfs);
  RETURN_IF_ERROR(Load(engine, Under(opt.dir, "save-0"), fig->step));
  size_t next_id = 0;
  for (int r = 0; r < opt.rounds; ++r) {
    for (const auto& [name, root] : targets) {
      const std::string uri = Under(root, "save-" + std::to_string(r));
      const std::string own = Under(root, "own-" + std::to_string(r));
      ASSIGN_OR_RETURN(auto writer, Writer(ctx, own, run_ids[next_id++], layout, ckpt::Codec::kNone,
                                           /*async=*/false));
      RETURN_IF_ERROR(writer->Save(fig->step, engine.Shards(), StateBytes(engine.state())));
      TargetTimes& t = fig->Target(name);
      RETURN_IF_ERROR(Timed(ctx, &t.reshard_load_s, [&] { return Load(engine, uri, fig->step); }));
      RETURN_IF_ERROR(Timed(ctx, &t.target_load_s, [&] { return Load(engine, own, fig->step); }));
    }
  }
  return ctx.Sync();
}

// Runs `body` on the ranks of `layout`, each with its own engine.
template <typename Body>
Status OnRanks(const RunConfig& config, const ParallelLayout& layout, const std::string& job,
               std::shared_ptr<const std::vector<uint16_t>> tokens, WeightInit init, Body body) {
  openblas_set_num_threads(std::max(1, UsableCores() / layout.world()));
  std::vector<std::unique_ptr<comm::Communicator>> worlds;
  return RunRanksAsThreads(
      layout.world(), job, &worlds, [&](int r, comm::Communicator& world) -> Status {
        ASSIGN_OR_RETURN(auto engine, DistTrainer::Create(config, layout, world, tokens,
                                                          std::chrono::seconds(600), init));
        RankContext ctx{r, world};
        return body(ctx, *engine);
      });
}

double LoadAverage() {
  std::ifstream f("/proc/loadavg");
  double load = -1;
  f >> load;
  return load;
}

// Prints the tables and the JSON line.
void Report(const Options& opt, const std::string& reshard_to, int ranks, const Figures& fig,
            double load_start) {
  const double mib = 1024.0 * 1024.0;
  std::printf(
      "\nconfig %s, layout %s (%d ranks as threads), re-shard to %s, load avg %.2f → "
      "%.2f, medians of %d passes / %d rounds\n\n",
      opt.config.c_str(), opt.layout.c_str(), ranks, reshard_to.c_str(), load_start, LoadAverage(),
      opt.passes, opt.rounds);
  const double without = Median(fig.step_without_s), with = Median(fig.step_with_s);
  std::printf(
      "stall: step %.1f ms without saves, %.1f ms with a save every %d steps → %+.1f%% "
      "(Save call %.1f ms, tail wait %.1f ms)\n\n",
      1e3 * without, 1e3 * with, opt.every, 100 * Median(fig.stall), 1e3 * Median(fig.save_call_s),
      1e3 * Median(fig.tail_wait_s));
  nlohmann::json targets = nlohmann::json::object();
  std::printf(
      "| target | MiB stored | save s | save MiB/s | load s | load MiB/s | into %s: "
      "re-shard load s | same-layout load s | re-shard / same |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      reshard_to.c_str());
  for (const auto& [name, t] : fig.targets) {
    const double save = Median(t.save_s), load = Median(t.load_s),
                 reshard = Median(t.reshard_load_s), same = Median(t.target_load_s),
                 m = static_cast<double>(t.bytes) / mib;
    std::vector<double> ratios;
    for (size_t i = 0; i < t.reshard_load_s.size(); ++i) {
      ratios.push_back(t.reshard_load_s[i] / t.target_load_s[i]);
    }
    std::printf("| %s | %.1f | %.3f | %.0f | %.3f | %.0f | %.3f | %.3f | %.2f |\n", name.c_str(), m,
                save, m / save, load, m / load, reshard, same, Median(ratios));
    targets[name] = {{"bytes", t.bytes},
                     {"save_s", save},
                     {"save_mib_s", m / save},
                     {"load_s", load},
                     {"reshard_load_s", reshard},
                     {"target_same_layout_load_s", same},
                     {"reshard_over_same", Median(ratios)}};
  }
  nlohmann::json codecs = nlohmann::json::array();
  std::printf(
      "\n| codec | weights ratio | Adam ratio | save MiB/s (raw) | load MiB/s (raw) |\n"
      "|---|---|---|---|---|\n");
  for (const auto& [name, c] : fig.codecs) {
    const double raw = static_cast<double>(c.weights_raw + c.adam_raw) / mib;
    const double wr = static_cast<double>(c.weights_raw) / std::max<uint64_t>(1, c.weights_stored);
    const double ar = static_cast<double>(c.adam_raw) / std::max<uint64_t>(1, c.adam_stored);
    const double save = Median(c.save_s), load = Median(c.load_s);
    std::printf("| %s | %.3f | %.3f | %.0f | %.0f |\n", name.c_str(), wr, ar, raw / save,
                raw / load);
    codecs.push_back({{"codec", name},
                      {"weights_raw", c.weights_raw},
                      {"weights_stored", c.weights_stored},
                      {"adam_raw", c.adam_raw},
                      {"adam_stored", c.adam_stored},
                      {"weights_ratio", wr},
                      {"adam_ratio", ar},
                      {"save_s", save},
                      {"save_mib_s", raw / save},
                      {"load_s", load},
                      {"load_mib_s", raw / load}});
  }
  const nlohmann::json line = {{"config", opt.config},
                               {"layout", opt.layout},
                               {"reshard_to", reshard_to},
                               {"ranks", ranks},
                               {"every", opt.every},
                               {"step_s_without", without},
                               {"step_s_with", with},
                               {"stall_pct", 100 * Median(fig.stall)},
                               {"save_call_s", Median(fig.save_call_s)},
                               {"tail_wait_s", Median(fig.tail_wait_s)},
                               {"targets", targets},
                               {"codecs", codecs},
                               {"load_avg_start", load_start},
                               {"load_avg_end", LoadAverage()}};
  std::printf("\nJSON %s\n", line.dump().c_str());
}

Status Run(const Options& opt) {
  if (opt.dir.empty()) return InvalidArgument("--dir is required (a POSIX folder)");
  if (opt.every <= 0 || opt.steps < opt.every) {
    return InvalidArgument("need 0 < --every <= --steps");
  }
  const std::string path =
      std::ifstream(opt.config).good()
          ? opt.config
          : std::string(RINGTRAIN_SOURCE_DIR) + "/configs/" + opt.config + ".toml";
  ASSIGN_OR_RETURN(RunConfig config, LoadRunConfig(path, opt.sets));
  config.eval.every = 0;
  config.train.steps = opt.warmup + 2 * opt.passes * opt.steps + 1;
  ASSIGN_OR_RETURN(ParallelLayout layout, ParseLayout(opt.layout));
  const int n = layout.world();
  std::string reshard_to = opt.reshard_to;
  if (reshard_to.empty()) reshard_to = (layout.pp > 1 ? "dp=" : "pp=") + std::to_string(n);
  ASSIGN_OR_RETURN(ParallelLayout reshard_layout, ParseLayout(reshard_to));
  if (reshard_layout.world() != n) {
    return InvalidArgument("--reshard-to " + reshard_to + " has " +
                           std::to_string(reshard_layout.world()) + " ranks, --layout " +
                           std::to_string(n));
  }
  Rng rng(1);
  auto tokens = std::make_shared<std::vector<uint16_t>>(1 << 20);
  for (auto& t : *tokens) t = static_cast<uint16_t>(rng.Below(config.model.vocab_size));
  // One run id per writer: the stall writer, then per round one per target and one per codec.
  std::vector<std::string> run_ids(1 + static_cast<size_t>(opt.rounds) *
                                           (2 + Split(opt.codecs).size()));
  for (std::string& id : run_ids) id = ckpt::NewRunId();
  std::vector<std::string> reshard_ids(static_cast<size_t>(opt.rounds) * 2);
  for (std::string& id : reshard_ids) id = ckpt::NewRunId();
  const double load_start = LoadAverage();
  Figures fig;
  RETURN_IF_ERROR(OnRanks(config, layout, "ckpt-bench", tokens, WeightInit::kFromSeed,
                          [&](RankContext& ctx, DistTrainer& engine) -> Status {
                            for (int s = 0; s < opt.warmup; ++s) {
                              RETURN_IF_ERROR(engine.Step().status());
                            }
                            RETURN_IF_ERROR(MeasureStall(ctx, engine, opt, run_ids[0], &fig));
                            const std::vector<std::string> rest(run_ids.begin() + 1, run_ids.end());
                            return MeasureSaves(ctx, engine, opt, rest, &fig);
                          }));
  RETURN_IF_ERROR(
      OnRanks(config, reshard_layout, "ckpt-bench-reshard", tokens, WeightInit::kForLoad,
              [&](RankContext& ctx, DistTrainer& engine) -> Status {
                return MeasureReshardLoads(ctx, engine, opt, reshard_to, reshard_ids, &fig);
              }));
  Report(opt, reshard_to, n, fig, load_start);
  // The benchmark's folders go; the caller's --dir and ringfs root stay.
  std::vector<std::string> roots = {opt.dir};
  if (!opt.ringfs.empty()) roots.push_back(opt.ringfs);
  for (const std::string& root : roots) {
    ASSIGN_OR_RETURN(auto storage, ckpt::OpenStorage(root));
    ASSIGN_OR_RETURN(std::vector<std::string> names, storage->List(""));
    for (const std::string& name : names) {
      if (name == "stall" || name.rfind("save-", 0) == 0 || name.rfind("codec-", 0) == 0 ||
          name.rfind("own-", 0) == 0) {
        RETURN_IF_ERROR(storage->Remove(name));
      }
    }
  }
  return Status();
}

int Main(int argc, char** argv) {
  CLI::App app{"ringtrain bench ckpt: checkpoint save stall, throughput, load, codecs"};
  Options opt;
  app.add_option("--config", opt.config, "s, m, tiny or a TOML file")->capture_default_str();
  app.add_option("--set", opt.sets, "override a config key: key=value (repeatable)");
  app.add_option("--layout", opt.layout, "the saving layout")->capture_default_str();
  app.add_option("--reshard-to", opt.reshard_to,
                 "layout loading the checkpoints, same rank count (default pp=N, or dp=N when "
                 "--layout has pp)");
  app.add_option("--dir", opt.dir, "POSIX folder for the checkpoints")->required();
  app.add_option("--ringfs", opt.ringfs, "ringfs://HOST:PORT/PATH: also save to a ringfsd");
  app.add_option("--warmup", opt.warmup, "training steps before measuring")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--steps", opt.steps, "steps per stall pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--every", opt.every, "a save every N steps in the stall passes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--passes", opt.passes, "pairs of stall passes (without, with saves)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--rounds", opt.rounds, "rounds of saves and loads per target and codec")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--codecs", opt.codecs, "codecs compared, comma-separated")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const Status s = Run(opt);
  if (!s.ok()) {
    std::fprintf(stderr, "ringtrain bench ckpt: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rt::parallel

int RunCkptBench(int argc, char** argv) { return rt::parallel::Main(argc, argv); }
