// `ringtrain bench parallel` (also the standalone ringtrain_bench_parallel): step time and
// tokens/s of the distributed engine per layout, ranks as threads over the CPU communicator on
// synthetic tokens. For pipeline layouts it prints the measured bubble — 1 − (the busiest stage's
// busy time: its forward and backward math) / (the pipeline's span: from the step's start to the
// last stage to finish its passes, before the gradient reductions and the optimizer), with the
// mean over the stages (which adds the lighter stages' idling from imbalance) in brackets — next
// to its formula as a fraction of the span: GPipe/1F1B's (p−1)/(m+p−1), and the interleaved
// schedule's (p−1)/(v·m+p−1) (Megatron's bubble is (1/v)·(p−1)/m of the ideal time t_ideal; as a
// fraction of the whole, t_bubble / (t_ideal + t_bubble), that is (p−1)/(v·m+p−1)), and between
// them the bubble the same schedule would have with no overhead given the stages' measured pass
// times (IdealBubbles): the formula assumes equal stages. For DDP the
// share of the gradient all-reduce time hidden behind the backward: (baseline step − step) /
// (the same all-reduces run alone), where baseline steps — every other measured step, same
// engine, same ranks — start the reductions only after the whole backward, and the step time
// and the per-rank figures are those of the overlapped steps. (The wait after the backward
// alone is no measure of it: ranks that drift apart wait for each other there, and the
// reductions slow the backward they overlap.) Each layout runs with max(1, cores / ranks)
// OpenBLAS threads (printed per row), whatever OPENBLAS_NUM_THREADS says: with more BLAS threads
// than that, a rank's GEMMs speed up while its neighbour idles, which hides the bubble. After
// the table, one row per rank of every pipeline or data-parallel layout says where its span
// went: busy (math), waiting for receives, waiting for its own sends, and the rest (the step's
// preamble, issuing and collecting reductions) until its last pass, and how long it then idles
// until the slowest rank's last pass.
//   ringtrain_bench_parallel [--config FILE] [--steps N] [--layouts "dp=2;pp=2,schedule=gpipe"]
//                            [--set key=value ...]
#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/parallel/parallel_bench.h"
#include "comm/communicator.h"
#include "model/rng.h"
#include "parallel/config.h"
#include "parallel/engine.h"
#include "parallel/layout.h"
#include "parallel/local_ranks.h"
#include "parallel/schedule.h"

namespace rt::parallel {
namespace {

// Where one rank's pipeline span went, averaged over the measured steps (StepTimings).
struct RankTimes {
  double busy_s = 0, recv_s = 0, send_s = 0, pipeline_s = 0;
  double reduce_wait_s = 0;  // waiting for gradient reductions after the backward
  double alone_s = -1;       // DDP: the same reductions run alone (TimeGradientSync)
  std::vector<double> chunk_forward_s, chunk_backward_s;  // per model chunk of the rank
};

// Per-layout results, averaged over the measured steps.
struct Result_ {
  double step_s = 0;             // slowest rank's step
  double bubble = -1;            // pipeline: the busiest stage's idle fraction of the span
  double mean_bubble = -1;       // pipeline: the stages' mean idle fraction (imbalance included)
  std::optional<double> hidden;  // DDP: hidden share of the all-reduce time (may be < 0: noise)
  // Pipeline: the same two bubbles of the schedule run with no overhead at all (IdealBubbles).
  double ideal_bubble = -1, ideal_mean_bubble = -1;
  std::vector<RankTimes> ranks;
};

// The busiest stage's and the stages' mean bubble that `layout`'s schedule over `micro`
// micro-batches would have with no overhead: every pass of a chunk takes its measured mean
// (ranks[r].chunk_*_s / micro, from the rank with tp = dp = 0 of each stage), every message
// arrives the moment its pass ends, and a stage runs its passes back to back in schedule order
// as soon as their inputs are there. Compared with the measured bubble, it separates what the
// stages' unequal work costs (this minus the formula) from our overhead (measured minus this).
std::pair<double, double> IdealBubbles(const ParallelLayout& layout, int micro,
                                       const std::vector<RankTimes>& ranks) {
  const int p = layout.pp, v = layout.virtual_stages;
  std::vector<std::vector<PipelineOp>> ops(static_cast<size_t>(p));
  std::vector<const RankTimes*> stage(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    ops[static_cast<size_t>(s)] = BuildPipelineSchedule(layout.schedule, p, s, micro, v);
    RankCoords c;
    c.pp = s;
    stage[static_cast<size_t>(s)] = &ranks[static_cast<size_t>(RankOf(layout, c))];
  }
  // Finish times per virtual stage and micro-batch (-1: not run yet).
  const size_t cells = static_cast<size_t>(p * v * micro);
  std::vector<double> forward_done(cells, -1), backward_done(cells, -1);
  auto cell = [&](int vs, int i) { return static_cast<size_t>(vs * micro + i); };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0), busy(static_cast<size_t>(p), 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      const size_t si = static_cast<size_t>(s);
      for (; next[si] < ops[si].size(); ++next[si]) {
        const PipelineOp& op = ops[si][next[si]];
        const int vs = op.chunk * p + s;
        double ready = 0;
        if (op.forward && vs > 0) ready = forward_done[cell(vs - 1, op.micro)];
        if (!op.forward && vs + 1 < p * v) ready = backward_done[cell(vs + 1, op.micro)];
        if (ready < 0) break;
        const size_t c = static_cast<size_t>(op.chunk);
        const double pass =
            (op.forward ? stage[si]->chunk_forward_s[c] : stage[si]->chunk_backward_s[c]) / micro;
        free_at[si] = std::max(free_at[si], ready) + pass;
        busy[si] += pass;
        (op.forward ? forward_done : backward_done)[cell(vs, op.micro)] = free_at[si];
        progressed = true;
      }
    }
  }
  const double span = *std::max_element(free_at.begin(), free_at.end());
  double busiest = 0, mean = 0;
  for (double b : busy) {
    busiest = std::max(busiest, b);
    mean += (1.0 - b / span) / p;
  }
  return {1.0 - busiest / span, mean};
}

// CPUs this process may run on.
int UsableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

Status RunLayout(const RunConfig& config, const ParallelLayout& layout,
                 std::shared_ptr<const std::vector<uint16_t>> tokens, int warmup, int steps,
                 Result_* out) {
  static std::atomic<int> job{0};
  const int n = layout.world();
  std::vector<double> step_s(static_cast<size_t>(n)), busy(static_cast<size_t>(n)),
      pipeline(static_cast<size_t>(n)), exposed(static_cast<size_t>(n)),
      alone(static_cast<size_t>(n));
  out->ranks.assign(static_cast<size_t>(n), RankTimes());
  const bool ddp = layout.zero == 0 && layout.dp() > 1;
  if (ddp && steps < 2) return InvalidArgument("DDP layouts need --steps of at least 2");
  // DDP alternates overlapped steps (the per-step figures below) with baseline steps.
  const int overlapped_steps = ddp ? steps - steps / 2 : steps;
  std::vector<double> baseline_step(static_cast<size_t>(n));
  std::vector<std::unique_ptr<comm::Communicator>> worlds;
  RETURN_IF_ERROR(RunRanksAsThreads(
      n, "bench-" + std::to_string(job++), &worlds,
      [&](int r, comm::Communicator& world) -> Status {
        const size_t i = static_cast<size_t>(r);
        ASSIGN_OR_RETURN(auto engine, DistTrainer::Create(config, layout, world, tokens));
        for (int s = 0; s < warmup + steps; ++s) {
          // DDP: every other measured step runs its reductions only after the backward.
          const bool baseline = ddp && s >= warmup && (s - warmup) % 2 == 1;
          if (ddp) RETURN_IF_ERROR(engine->SetReductionOverlap(!baseline));
          ASSIGN_OR_RETURN(StepStats st, engine->Step());
          (void)st;
          if (s < warmup) continue;
          const StepTimings& t = engine->timings();
          if (baseline) {
            baseline_step[i] += t.step_s / (steps / 2);
            continue;
          }
          step_s[i] += t.step_s / overlapped_steps;
          busy[i] += t.compute_s / overlapped_steps;
          pipeline[i] += t.pipeline_s / overlapped_steps;
          exposed[i] += t.reduce_wait_s / overlapped_steps;
          out->ranks[i].recv_s += t.recv_wait_s / overlapped_steps;
          out->ranks[i].send_s += t.send_wait_s / overlapped_steps;
          std::vector<double>& fwd = out->ranks[i].chunk_forward_s;
          std::vector<double>& bwd = out->ranks[i].chunk_backward_s;
          fwd.resize(t.chunk_forward_s.size(), 0.0);
          bwd.resize(t.chunk_backward_s.size(), 0.0);
          for (size_t c = 0; c < fwd.size(); ++c) {
            fwd[c] += t.chunk_forward_s[c] / overlapped_steps;
            bwd[c] += t.chunk_backward_s[c] / overlapped_steps;
          }
          if (ddp) {
            ASSIGN_OR_RETURN(double a, engine->TimeGradientSync());
            alone[i] += a / overlapped_steps;
          }
        }
        return world.Barrier()->Wait(Deadline::AfterMs(60'000));
      }));
  double slowest = 0, bubble = 0, hidden = 0, busiest = 0;
  const double span = *std::max_element(pipeline.begin(), pipeline.end());
  for (int r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    slowest = std::max(slowest, step_s[i]);
    bubble += (1.0 - busy[i] / span) / n;
    busiest = std::max(busiest, busy[i]);
    // What the overlap saved against the baseline step, as a share of the reductions alone.
    if (alone[i] > 0) hidden += (baseline_step[i] - step_s[i]) / alone[i] / n;
  }
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    out->ranks[i].busy_s = busy[i];
    out->ranks[i].pipeline_s = pipeline[i];
    out->ranks[i].reduce_wait_s = exposed[i];
    if (alone[i] > 0) out->ranks[i].alone_s = alone[i];
  }
  out->step_s = slowest;
  if (layout.pp > 1) {
    out->bubble = 1.0 - busiest / span;
    out->mean_bubble = bubble;
    std::tie(out->ideal_bubble, out->ideal_mean_bubble) =
        IdealBubbles(layout, config.train.micro_batches, out->ranks);
  }
  if (ddp) out->hidden = hidden;
  return Status();
}

int Main(int argc, char** argv) {
  CLI::App app{"ringtrain bench parallel: the distributed engine per layout"};
  std::string config_path,
      layouts =
          "dp=1;dp=2;dp=2,zero=1;dp=2,zero=3;tp=2;pp=2,schedule=gpipe;pp=2,schedule=1f1b;"
          "pp=2,vpp=2,schedule=interleaved";
  std::vector<std::string> sets;
  int steps = 10, warmup = 2;
  app.add_option("--config", config_path, "TOML config (default: built-in defaults, i.e. S)");
  app.add_option("--set", sets, "override a config key: key=value (repeatable)");
  app.add_option("--layouts", layouts, "layouts separated by ';'");
  app.add_option("--steps", steps, "measured steps per layout")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unmeasured steps first");
  CLI11_PARSE(app, argc, argv);
  Result<RunConfig> config = LoadRunConfig(config_path, sets);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  config->train.steps = warmup + steps;
  Rng rng(1);
  auto tokens = std::make_shared<std::vector<uint16_t>>(1 << 20);
  for (auto& t : *tokens)
    t = static_cast<uint16_t>(rng.Below(static_cast<uint64_t>(config->model.vocab_size)));
  const double tokens_per_step =
      static_cast<double>(config->train.batch_size) * config->model.seq_len;
  std::printf("model L=%d C=%d H=%d T=%d V=%d, batch %d, micro-batches %d, %d steps after %d\n\n",
              config->model.n_layer, config->model.n_embd, config->model.n_head,
              config->model.seq_len, config->model.vocab_size, config->train.batch_size,
              config->train.micro_batches, steps, warmup);
  const int cores = UsableCores();
  std::printf(
      "| layout | ranks | BLAS threads per rank | step ms | tokens/s | bubble measured | "
      "bubble with no overhead, these stage times | bubble formula: (p−1)/(v·m+p−1) | "
      "DDP comm hidden |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  size_t at = 0;
  int failures = 0;
  std::vector<std::pair<std::string, Result_>> breakdowns;
  while (at <= layouts.size()) {
    const size_t end = std::min(layouts.find(';', at), layouts.size());
    const std::string spec = layouts.substr(at, end - at);
    at = end + 1;
    if (spec.empty()) continue;
    Result<ParallelLayout> layout = ParseLayout(spec);
    Result_ r;
    // Ranks run as threads of this process: each gets an equal share of the cores for its GEMMs.
    const int blas_threads = layout.ok() ? std::max(1, cores / layout->world()) : 1;
    openblas_set_num_threads(blas_threads);
    Status s =
        layout.ok() ? RunLayout(*config, *layout, tokens, warmup, steps, &r) : layout.status();
    if (!s.ok()) {
      std::printf("| %s | | | failed: %s | | | | | |\n", spec.c_str(), s.ToString().c_str());
      ++failures;
      continue;
    }
    const int p = layout->pp, m = config->train.micro_batches, v = layout->virtual_stages;
    char bubble[48] = "", ideal[48] = "", formula[32] = "", hidden[32] = "";
    if (r.bubble >= 0) {
      std::snprintf(bubble, sizeof(bubble), "%.1f%% (mean %.1f%%)", 100 * r.bubble,
                    100 * r.mean_bubble);
      std::snprintf(ideal, sizeof(ideal), "%.1f%% (mean %.1f%%)", 100 * r.ideal_bubble,
                    100 * r.ideal_mean_bubble);
      std::snprintf(formula, sizeof(formula), "%.1f%%", 100.0 * (p - 1) / (v * m + p - 1));
    }
    if (r.hidden) std::snprintf(hidden, sizeof(hidden), "%.0f%%", 100 * *r.hidden);
    std::printf("| %s | %d | %d | %.1f | %.0f | %s | %s | %s | %s |\n", spec.c_str(),
                layout->world(), openblas_get_num_threads(), 1e3 * r.step_s,
                tokens_per_step / r.step_s, bubble, ideal, formula, hidden);
    std::fflush(stdout);
    if (layout->world() > 1) breakdowns.emplace_back(spec, std::move(r));
  }
  if (!breakdowns.empty()) {
    std::printf(
        "\nPer rank, ms per step: busy + recv wait + send wait + other = its pipeline span; "
        "then idle until the slowest rank's last pass; then the wait for gradient reductions "
        "(DDP: next to the same reductions run alone)\n\n");
    std::printf(
        "| layout | rank | busy | recv wait | send wait | other | span | idle after | "
        "reduce wait | reductions alone |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const auto& [spec, r] : breakdowns) {
    double span = 0;
    for (const RankTimes& t : r.ranks) span = std::max(span, t.pipeline_s);
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const RankTimes& t = r.ranks[i];
      char alone[32] = "";
      if (t.alone_s >= 0) std::snprintf(alone, sizeof(alone), "%.2f", 1e3 * t.alone_s);
      std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n",
                  spec.c_str(), i, 1e3 * t.busy_s, 1e3 * t.recv_s, 1e3 * t.send_s,
                  1e3 * (t.pipeline_s - t.busy_s - t.recv_s - t.send_s), 1e3 * t.pipeline_s,
                  1e3 * (span - t.pipeline_s), 1e3 * t.reduce_wait_s, alone);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rt::parallel

int RunParallelBench(int argc, char** argv) { return rt::parallel::Main(argc, argv); }
