// The parity matrix: layouts trained for 20 steps of the tiny config against the single-process
// Trainer (per-step loss and final parameters within 1e-5 relative), ZeRO stages bitwise equal to
// each other, communication bytes and per-rank memory equal to the ZeRO formulas, and the shard
// contract reconstructing the single-process state.
#include "tests/parallel/parity.h"

#include <cmath>

#include <gtest/gtest.h>

#include "parallel/engine.h"
#include "parallel/trainer.h"
#include "tests/parallel/harness.h"
#include "tests/parallel/test_util.h"

namespace rt::parallel {
namespace {

using testing::Assemble;
using testing::CheckParity;
using testing::CompareParams;
using testing::Config;
using testing::DistRun;
using testing::kSteps;
using testing::kTolerance;
using testing::Layout;
using testing::ParamDiff;
using testing::Reference;
using testing::ReferenceRun;
using testing::RunLayout;
using testing::Snapshot;
using testing::Tokens;

TEST(ParityTest, SingleRankEngineIsBitwiseTheTrainer) {
  std::unique_ptr<DistRun> run = CheckParity("dp=1", 2);
  ASSERT_TRUE(run->status.ok());
  const Reference& ref = ReferenceRun(2);
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(run->losses[0][s], ref.losses[s]) << s;
}

TEST(ParityTest, DataParallelZeroStagesAreBitwiseEqualAndMatchOneProcess) {
  for (int dp : {2, 4}) {
    std::vector<std::vector<float>> first;
    std::vector<double> first_losses;
    for (int zero = 0; zero <= 3; ++zero) {
      const std::string spec = "dp=" + std::to_string(dp) + ",zero=" + std::to_string(zero);
      std::unique_ptr<DistRun> run = CheckParity(spec, dp == 2 ? 2 : 1);
      ASSERT_TRUE(run->status.ok());
      std::vector<std::vector<float>> snap = Snapshot(*run);
      if (zero == 0) {
        first = snap;
        first_losses = run->losses[0];
      } else {
        EXPECT_TRUE(snap == first) << spec << " differs bitwise from ZeRO-0";
        EXPECT_TRUE(run->losses[0] == first_losses) << spec;
      }
    }
  }
}

// The benchmark's baseline (reductions only after the backward) trains the same numbers as the
// overlapped engine, with and without a pipeline (whose tied units reduce after their sync).
TEST(ParityTest, ReductionsAfterTheBackwardAreBitwiseTheOverlappedOnes) {
  for (const char* spec : {"dp=2", "pp=2,dp=2,schedule=1f1b"}) {
    const ParallelLayout layout = Layout(spec);
    const RunConfig config = Config(2);
    std::unique_ptr<DistRun> overlapped = RunLayout(config, layout, Tokens(), 3);
    std::unique_ptr<DistRun> after =
        RunLayout(config, layout, Tokens(), 3, /*overlap_reductions=*/false);
    ASSERT_TRUE(overlapped->status.ok()) << overlapped->status.ToString();
    ASSERT_TRUE(after->status.ok()) << after->status.ToString();
    EXPECT_TRUE(Snapshot(*overlapped) == Snapshot(*after)) << spec;
    EXPECT_TRUE(overlapped->losses == after->losses) << spec;
  }
  EXPECT_EQ(RunLayout(Config(2), Layout("dp=2,zero=2"), Tokens(), 1, false)->status.code(),
            StatusCode::kFailedPrecondition);
}

TEST(ParityTest, HsdpMatchesOneProcess) {
  CheckParity("dp=4,zero=3,hsdp_shard=2", 1);
  CheckParity("dp=4,zero=2,hsdp_shard=2", 1);
}

}  // namespace
}  // namespace rt::parallel

namespace rt::parallel {
namespace {

TEST(PipelineParityTest, GpipeAndOneFOneBMatchOneProcess) {
  CheckParity("pp=2,schedule=gpipe", 2);
  CheckParity("pp=2,schedule=1f1b", 4);
  CheckParity("pp=4,schedule=gpipe", 4);
  CheckParity("pp=4,schedule=1f1b", 4);
  CheckParity("pp=3,schedule=1f1b", 2);
}

TEST(PipelineParityTest, PipelineWithDataParallelZeroStages) {
  std::vector<std::vector<float>> first;
  for (int zero : {0, 1, 3}) {
    const std::string spec = "pp=2,dp=2,zero=" + std::to_string(zero) + ",schedule=1f1b";
    std::unique_ptr<DistRun> run = CheckParity(spec, 2);
    ASSERT_TRUE(run->status.ok());
    if (zero == 0) {
      first = Snapshot(*run);
    } else {
      EXPECT_TRUE(Snapshot(*run) == first) << spec << " differs bitwise from ZeRO-0";
    }
  }
  CheckParity("pp=2,dp=4,zero=3,hsdp_shard=2,schedule=gpipe", 1);
}

TEST(PipelineParityTest, OneFOneBKeepsAtMostStagesLeftMicroBatchesAlive) {
  std::unique_ptr<DistRun> run = RunLayout(Config(4), Layout("pp=4,schedule=1f1b"), Tokens(), 1);
  ASSERT_TRUE(run->status.ok()) << run->status.ToString();
  std::unique_ptr<DistRun> gpipe = RunLayout(Config(4), Layout("pp=4,schedule=gpipe"), Tokens(), 1);
  ASSERT_TRUE(gpipe->status.ok()) << gpipe->status.ToString();
  for (int s = 0; s < 4; ++s) {
    // Activation sets: p − s under 1F1B (p at most), m under GPipe.
    EXPECT_EQ(run->engines[s]->memory().activation_slots, std::min(4, 4 - s));
    EXPECT_EQ(gpipe->engines[s]->memory().activation_slots, 4);
  }
}

// Communication volume per rank over `steps` steps equals the formulas, with Φ the rank's
// (padded) parameter count: DDP and ZeRO-1/2 2Φ(n−1)/n (DDP's all-reduce as reduce-scatter +
// all-gather), ZeRO-3 3Φ(n−1)/n, HSDP 3Φ(s−1)/s inside
// the shard group plus 2(Φ/s)(r−1)/r across replicas. Per-rank memory equals the ZeRO formulas.
TEST(FormulaTest, CommunicationBytesAndMemoryPerRank) {
  constexpr int kFormulaSteps = 2;
  using comm::OpKind;
  for (const char* spec : {"dp=4,zero=0", "dp=4,zero=1", "dp=4,zero=2", "dp=4,zero=3",
                           "dp=4,zero=3,hsdp_shard=2", "dp=4,zero=1,hsdp_shard=2"}) {
    const ParallelLayout layout = Layout(spec);
    std::unique_ptr<DistRun> run = RunLayout(Config(1), layout, Tokens(), kFormulaSteps);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    const int s = layout.dp_shard, r = layout.dp_replicate;
    for (int rank = 0; rank < layout.world(); ++rank) {
      const DistTrainer& e = *run->engines[rank];
      const uint64_t phi = static_cast<uint64_t>(e.stage().total);
      EXPECT_LT(phi - static_cast<uint64_t>(e.stage().num_params()), e.stage().units.size() * s);
      const comm::CommStats& sh = run->dp_shard_stats[rank];
      const comm::CommStats& rep = run->dp_replicate_stats[rank];
      const uint64_t b = 4 * kFormulaSteps;  // bytes per element, steps
      const uint64_t part = phi * (s - 1) / s * b;
      uint64_t ar = 0, rs = 0, ag = 0;
      switch (layout.zero) {
        case 0:
        case 1:
        case 2:
          rs = part;
          ag = part;
          break;
        case 3:
          rs = part;
          ag = 2 * part;
          break;
      }
      EXPECT_EQ(sh[OpKind::kAllReduce].bytes_sent, ar) << spec;
      EXPECT_EQ(sh[OpKind::kReduceScatter].bytes_sent, rs) << spec;
      EXPECT_EQ(sh[OpKind::kAllGather].bytes_sent, ag) << spec;
      EXPECT_EQ(sh.Total().bytes_sent, ar + rs + ag) << spec;
      EXPECT_EQ(rep.Total().bytes_sent, r > 1 ? 2 * (phi / s) * (r - 1) / r * b : 0) << spec;
      const MemoryStats m = e.memory();
      const size_t full = phi * 4, shard = phi / s * 4;
      EXPECT_EQ(m.param_bytes, layout.zero >= 3 ? shard : full) << spec;
      EXPECT_EQ(m.grad_bytes, layout.zero >= 2 ? shard : full) << spec;
      EXPECT_EQ(m.optimizer_bytes, 2 * (layout.zero >= 1 ? shard : full)) << spec;
      if (rank == 0)
        std::printf(
            "%-26s Φ=%llu  sent/step: shard group %.1f KiB, replicas %.1f KiB  "
            "state: params %zu, grads %zu, adam %zu bytes, peak transient %zu\n",
            spec, static_cast<unsigned long long>(phi),
            sh.Total().bytes_sent / 1024.0 / kFormulaSteps,
            rep.Total().bytes_sent / 1024.0 / kFormulaSteps, m.param_bytes, m.grad_bytes,
            m.optimizer_bytes, m.peak_transient_bytes);
    }
  }
}

// The shard contract: the union over ranks of every kind of state reconstructs the single-process
// state — exactly at initialisation for every layout, and exactly after 20 steps where the
// numerics are the single process's (one data-parallel rank) — with no overlap except replicas
// (Assemble checks coverage and replica equality).
TEST(ShardContractTest, UnionOverRanksIsTheSingleProcessState) {
  Result<std::unique_ptr<Trainer>> fresh = Trainer::Create(Config(1), Tokens(), "");
  ASSERT_TRUE(fresh.ok());
  auto check = [](DistRun& run, const Trainer& t, const std::string& spec, bool exact) {
    const AdamWOptimizer& opt = t.optimizer();
    // fp32 parameters are their own master weights: the contract describes them once, as those.
    std::string no_params;
    EXPECT_TRUE(Assemble(run, ckpt::StateKind::kParam, &no_params).empty()) << spec;
    const std::pair<ckpt::StateKind, const Arena*> kinds[] = {
        {ckpt::StateKind::kMaster, &opt.master()},
        {ckpt::StateKind::kAdamM, &opt.m()},
        {ckpt::StateKind::kAdamV, &opt.v()}};
    for (const auto& [kind, arena] : kinds) {
      std::string error;
      const auto got = Assemble(run, kind, &error);
      EXPECT_EQ(error, "") << spec << " " << ckpt::StateKindName(kind);
      EXPECT_EQ(got.size(), static_cast<size_t>(arena->size())) << spec;
      const ParamDiff d = CompareParams(got, *arena, &error);
      if (exact) {
        EXPECT_EQ(d.per_tensor, 0.0)
            << spec << " " << ckpt::StateKindName(kind) << " " << d.worst_tensor;
      }
    }
    for (auto& e : run.engines) {
      int steps = 0;
      for (const ckpt::TensorShard& s : e->Shards().shards)
        if (s.kind == ckpt::StateKind::kStep) {
          EXPECT_EQ(*s.view.data_as<int64_t>(), t.state().adam_step) << spec;
          ++steps;
        }
      EXPECT_EQ(steps, 1) << spec;
    }
  };
  for (const char* spec :
       {"dp=4,zero=3", "dp=2,zero=1", "pp=2,dp=2,zero=2", "pp=4", "pp=2,dp=4,zero=3,hsdp_shard=2",
        "tp=2,dp=2,zero=3", "tp=4", "tp=2,pp=2,dp=2,zero=1"}) {
    std::unique_ptr<DistRun> run = RunLayout(Config(1), Layout(spec), Tokens(), 0);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    check(*run, **fresh, spec, true);
  }
  std::unique_ptr<DistRun> run = RunLayout(Config(2), Layout("dp=1"), Tokens(), kSteps);
  ASSERT_TRUE(run->status.ok());
  check(*run, *ReferenceRun(2).trainer, "dp=1 after 20 steps", true);
}

}  // namespace
}  // namespace rt::parallel

namespace rt::parallel {
namespace {

TEST(TensorParallelParityTest, TensorParallelAloneAndMixed) {
  CheckParity("tp=2", 2);
  CheckParity("tp=4", 1);
  std::vector<std::vector<float>> first;
  for (int zero : {0, 1, 3}) {
    const std::string spec = "tp=2,dp=2,zero=" + std::to_string(zero);
    std::unique_ptr<DistRun> run = CheckParity(spec, 1);
    ASSERT_TRUE(run->status.ok());
    if (zero == 0) {
      first = Snapshot(*run);
    } else {
      EXPECT_TRUE(Snapshot(*run) == first) << spec << " differs bitwise from ZeRO-0";
    }
  }
  CheckParity("tp=2,pp=2,schedule=1f1b", 4);
  CheckParity("tp=2,pp=2,dp=2,zero=1,schedule=1f1b", 2);
  CheckParity("tp=2,pp=2,dp=2,zero=3,schedule=gpipe", 2);
  CheckParity("tp=2,dp=4,zero=3,hsdp_shard=2", 1);
}

TEST(TensorParallelParityTest, SequenceParallel) {
  CheckParity("tp=2,sp=1", 2);
  CheckParity("tp=4,sp=1", 1);
  CheckParity("tp=2,sp=1,pp=2,dp=2,zero=1,schedule=1f1b", 2);
  CheckParity("tp=2,sp=1,dp=2,zero=3", 1);
}

// Gradient accumulation does not synchronise: 4 micro-batches per rank send the same bytes as 1.
TEST(FormulaTest, NoSyncDuringGradientAccumulation) {
  for (const char* spec : {"dp=2,zero=0", "dp=2,zero=3"}) {
    std::unique_ptr<DistRun> one = RunLayout(Config(1), Layout(spec), Tokens(), 1);
    std::unique_ptr<DistRun> four = RunLayout(Config(4), Layout(spec), Tokens(), 1);
    ASSERT_TRUE(one->status.ok() && four->status.ok()) << spec;
    const comm::OpKind rs = comm::OpKind::kReduceScatter;
    EXPECT_EQ(four->dp_shard_stats[0][rs].bytes_sent, one->dp_shard_stats[0][rs].bytes_sent)
        << spec;
    EXPECT_EQ(four->dp_shard_stats[0][rs].ops, one->dp_shard_stats[0][rs].ops) << spec;
  }
}

// A one-rank layout at ZeRO-0/1 has nothing to communicate: its steps issue no collective on
// any of its groups (on a device each would cost a host synchronisation), the world's loss and
// gradient-norm all-gather and ZeRO-1's parameter all-gather included: the groups count as many
// ops after two steps as after none (those that built them). ZeRO-2/3 keep their one-rank unit
// collectives (the reduce-scatter moves the unit gradients into the owned buffer).
TEST(FormulaTest, OneRankIssuesNoCollectivePerStep) {
  // Each group's op count, in the order of ProcessGroups' members.
  auto ops = [](const DistRun& run) {
    const ProcessGroups& g = run.engines[0]->groups();
    std::vector<uint64_t> out;
    for (const comm::Communicator* group :
         {g.world, g.tp.get(), g.dp_shard.get(), g.dp_replicate.get(), g.pp_forward.get(),
          g.pp_backward.get()})
      out.push_back(group->stats().Total().ops);
    return out;
  };
  for (const char* spec : {"", "zero=1"}) {
    std::unique_ptr<DistRun> none = RunLayout(Config(2), Layout(spec), Tokens(), 0);
    std::unique_ptr<DistRun> two = RunLayout(Config(2), Layout(spec), Tokens(), 2);
    ASSERT_TRUE(none->status.ok()) << spec << ": " << none->status.ToString();
    ASSERT_TRUE(two->status.ok()) << spec << ": " << two->status.ToString();
    EXPECT_EQ(ops(*two), ops(*none))
        << spec << ": ops per group (world, tp, dp_shard, dp_replicate, pp_forward, pp_backward)";
  }
}

// Tensor parallel's per-layer collectives: per micro-batch of N = rows·T tokens, forward one
// all-reduce of N·C for the embedding and two per block, backward two per block and one for the
// head; the vocabulary-parallel cross-entropy adds N (row maxima) and 2N (sums) — each a ring
// all-reduce sending 2(t−1)/t of its elements.
TEST(FormulaTest, TensorParallelCollectivesPerLayer) {
  const ParallelLayout layout = Layout("tp=2");
  const RunConfig config = Config(2);
  std::unique_ptr<DistRun> run = RunLayout(config, layout, Tokens(), 1);
  ASSERT_TRUE(run->status.ok()) << run->status.ToString();
  const uint64_t t = 2, L = static_cast<uint64_t>(config.model.n_layer),
                 C = static_cast<uint64_t>(config.model.n_embd);
  const uint64_t n = static_cast<uint64_t>(config.train.batch_size) * config.model.seq_len;
  const uint64_t elements = (4 * L + 2) * n * C + 3 * n;
  for (auto& e : run->engines) {
    const comm::CommStats s = e->groups().tp->stats();
    EXPECT_EQ(s[comm::OpKind::kAllReduce].bytes_sent, 2 * (t - 1) * elements * 4 / t);
    EXPECT_EQ(s.Total().bytes_sent, s[comm::OpKind::kAllReduce].bytes_sent);
  }
  // Sequence parallel: each f/g all-reduce becomes an all-gather and a reduce-scatter of the
  // same total volume ((8L+4)·N·C elements, each sending (t−1)/t); the cross-entropy's 3N
  // elements and, once per step, the LayerNorm and wpe gradients (4C per block, 2C for ln_f,
  // T·C for wpe) stay all-reduces.
  std::unique_ptr<DistRun> sp = RunLayout(config, Layout("tp=2,sp=1"), Tokens(), 1);
  ASSERT_TRUE(sp->status.ok()) << sp->status.ToString();
  const uint64_t T = static_cast<uint64_t>(config.model.seq_len);
  for (auto& e : sp->engines) {
    const comm::CommStats s = e->groups().tp->stats();
    const uint64_t gathered =
        s[comm::OpKind::kAllGather].bytes_sent + s[comm::OpKind::kReduceScatter].bytes_sent;
    EXPECT_EQ(gathered, (t - 1) * (8 * L + 4) * n * C * 4 / t);
    EXPECT_EQ(s[comm::OpKind::kAllReduce].bytes_sent,
              2 * (t - 1) * (3 * n + 4 * C * L + 2 * C + T * C) * 4 / t);
  }
}

}  // namespace
}  // namespace rt::parallel

namespace rt::parallel {
namespace {

// The S config (L=4, C=128, H=4, T=128) under mixed layouts, 5 steps against one process.
TEST(ParityTest, SConfigMixedLayouts) {
  RunConfig c = Config(2);
  c.model = ModelConfig();  // the defaults are DESIGN.md's S
  constexpr int kS = 5;
  auto tokens = rt::testing::PatternTokens(40000, 97, 11);
  Result<std::unique_ptr<Trainer>> ref = Trainer::Create(c, tokens, "");
  ASSERT_TRUE(ref.ok());
  std::vector<double> losses;
  for (int s = 0; s < kS; ++s) {
    Result<StepStats> st = (*ref)->Step();
    ASSERT_TRUE(st.ok());
    losses.push_back(st->loss);
  }
  for (const char* spec :
       {"tp=2,sp=1,pp=2,dp=2,zero=1,schedule=1f1b", "pp=4,schedule=gpipe", "tp=4,dp=2,zero=3"}) {
    std::unique_ptr<DistRun> run = RunLayout(c, Layout(spec), tokens, kS);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    double worst = 0;
    for (int s = 0; s < kS; ++s)
      worst = std::max(worst, std::abs(run->losses[0][s] - losses[s]) / losses[s]);
    std::string error;
    const ParamDiff d = CompareParams(Assemble(*run, ckpt::StateKind::kMaster, &error),
                                      (*ref)->optimizer().master(), &error);
    EXPECT_EQ(error, "") << spec;
    EXPECT_LE(worst, kTolerance) << spec;
    EXPECT_LE(d.global, kTolerance) << spec;
    std::printf("parity S %-36s loss rel %.1e  params max-abs rel %.1e\n", spec, worst, d.global);
  }
}

}  // namespace
}  // namespace rt::parallel

namespace rt::parallel {
namespace {

// train.recompute: the same numbers as one process recomputing, with fewer activation bytes.
TEST(ParityTest, RecomputeMatchesOneProcess) {
  RunConfig c = Config(2);
  c.train.recompute = true;
  Result<std::unique_ptr<Trainer>> ref = Trainer::Create(c, Tokens(), "");
  ASSERT_TRUE(ref.ok());
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    Result<StepStats> st = (*ref)->Step();
    ASSERT_TRUE(st.ok());
    losses.push_back(st->loss);
  }
  for (const char* spec : {"dp=1", "tp=2,sp=1,pp=2,schedule=1f1b", "dp=2,zero=3"}) {
    std::unique_ptr<DistRun> run = RunLayout(c, Layout(spec), Tokens(), kSteps);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    std::unique_ptr<DistRun> kept = RunLayout(Config(2), Layout(spec), Tokens(), 0);
    ASSERT_TRUE(kept->status.ok());
    EXPECT_LT(run->engines[0]->memory().activation_bytes,
              kept->engines[0]->memory().activation_bytes);
    double worst = 0;
    for (int s = 0; s < kSteps; ++s)
      worst = std::max(worst, std::abs(run->losses[0][s] - losses[s]) / losses[s]);
    std::string error;
    const ParamDiff d = CompareParams(Assemble(*run, ckpt::StateKind::kMaster, &error),
                                      (*ref)->optimizer().master(), &error);
    EXPECT_EQ(error, "") << spec;
    EXPECT_LE(worst, kTolerance) << spec;
    EXPECT_LE(d.global, kTolerance) << spec;
    if (std::string(spec) == "dp=1") {
      EXPECT_EQ(d.global, 0.0);  // bitwise the Trainer
    }
    std::printf("recompute %-30s loss rel %.1e  params max-abs rel %.1e\n", spec, worst, d.global);
  }
}

}  // namespace
}  // namespace rt::parallel

namespace rt::parallel {
namespace {

// ZeRO-2/3 free each full unit gradient once it is reduce-scattered: on S (4 blocks) the peak of
// transient gradient memory stays below the full gradients.
TEST(FormulaTest, ZeroTwoFreesUnitGradientsDuringBackward) {
  RunConfig c = Config(1);
  c.model = ModelConfig();  // S
  std::unique_ptr<DistRun> run = RunLayout(c, Layout("dp=2,zero=2"), Tokens(), 1);
  ASSERT_TRUE(run->status.ok()) << run->status.ToString();
  for (auto& e : run->engines) {
    const size_t full = static_cast<size_t>(e->stage().total) * 4;
    EXPECT_LT(e->memory().peak_transient_bytes, full);
    std::printf("ZeRO-2 on S: peak transient %zu bytes, full gradients %zu\n",
                e->memory().peak_transient_bytes, full);
  }
}

}  // namespace
}  // namespace rt::parallel
