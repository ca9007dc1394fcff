// Restoring through the shard contract, without any file format: train under layout A, copy
// every replica-0 piece of every rank into full tensors, build engines under layout B with
// WeightInit::kForLoad, write the full tensors into their Shards() views, Restore the trainer
// state and train on. Same layout: bitwise the uninterrupted run. Another layout: within 1e-5
// relative of the uninterrupted single-process run. And the data position is global: after a
// change of dp every row is still trained on exactly once.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "parallel/engine.h"
#include "parallel/trainer.h"
#include "tests/parallel/harness.h"
#include "tests/parallel/parity.h"

namespace rt::parallel {
namespace {

using testing::CompareParams;
using testing::Config;
using testing::DistRun;
using testing::kSteps;
using testing::kTolerance;
using testing::Layout;
using testing::ParamDiff;
using testing::ReferenceRun;
using testing::RunLayout;
using testing::Snapshot;
using testing::Tokens;

constexpr int kHalf = kSteps / 2;

// Whole tensors per (kind, name), as fp32 values (bf16/fp16 parameters widen exactly).
using FullState = std::map<std::pair<ckpt::StateKind, std::string>, std::vector<float>>;

// The global row-major index of element `e` of piece `s`.
int64_t GlobalIndex(const ckpt::TensorShard& s, int64_t e) {
  int64_t rest = (s.has_flat_range ? s.flat_begin : 0) + e, global = 0, stride = 1;
  for (int d = s.box_size.ndim - 1; d >= 0; --d) {
    global += (rest % s.box_size.dims[d] + s.box_offset.dims[d]) * stride;
    rest /= s.box_size.dims[d];
    stride *= s.global_shape.dims[d];
  }
  return global;
}

// The replica-0 pieces of every rank put together (the step excluded: Restore carries it).
FullState Gather(const std::vector<ckpt::StateShards>& ranks) {
  FullState full;
  for (const ckpt::StateShards& shards : ranks) {
    for (const ckpt::TensorShard& s : shards.shards) {
      if (s.replica != 0 || s.kind == ckpt::StateKind::kStep) continue;
      std::vector<float>& t = full[{s.kind, s.name}];
      t.resize(static_cast<size_t>(s.global_shape.numel()));
      std::vector<std::byte> raw(s.view.nbytes());
      RT_CHECK(Copy(Tensor(raw.data(), s.dtype, Shape{s.numel()}), s.view).ok());
      std::vector<float> wide(static_cast<size_t>(s.numel()));
      RT_CHECK(Convert(Tensor(wide.data(), DType::kF32, Shape{s.numel()}),
                       Tensor(raw.data(), s.dtype, Shape{s.numel()}))
                   .ok());
      for (int64_t e = 0; e < s.numel(); ++e)
        t[static_cast<size_t>(GlobalIndex(s, e))] = wide[static_cast<size_t>(e)];
    }
  }
  return full;
}

// Writes every piece of `dest` (every replica) from `full`.
Status Fill(const ckpt::StateShards& dest, const FullState& full) {
  for (const ckpt::TensorShard& s : dest.shards) {
    if (s.kind == ckpt::StateKind::kStep) continue;
    auto it = full.find({s.kind, s.name});
    if (it == full.end())
      return NotFound(std::string("no ") + StateKindName(s.kind) + " " + s.name);
    std::vector<float> wide(static_cast<size_t>(s.numel()));
    for (int64_t e = 0; e < s.numel(); ++e)
      wide[static_cast<size_t>(e)] = it->second[static_cast<size_t>(GlobalIndex(s, e))];
    std::vector<std::byte> raw(s.view.nbytes());
    const Tensor host(raw.data(), s.dtype, Shape{s.numel()});
    RETURN_IF_ERROR(Convert(host, Tensor(wide.data(), DType::kF32, Shape{s.numel()})));
    RETURN_IF_ERROR(Copy(s.view, host));
  }
  return Status();
}

// The master weights of `full` in CompareParams' form.
std::map<std::string, testing::Assembled> MasterOf(const FullState& full) {
  std::map<std::string, testing::Assembled> out;
  for (const auto& [key, values] : full)
    if (key.first == ckpt::StateKind::kMaster) out[key.second].values = values;
  return out;
}

std::vector<ckpt::StateShards> ShardsOf(DistRun& run) {
  std::vector<ckpt::StateShards> out;
  for (auto& e : run.engines) out.push_back(e->Shards());
  return out;
}

// Runs `steps` steps under `layout` starting from `full` and `state`.
std::unique_ptr<DistRun> Resume(const RunConfig& config, const std::string& spec,
                                const FullState& full, const TrainerState& state, int steps) {
  return RunLayout(config, Layout(spec), Tokens(), steps, true, WeightInit::kForLoad,
                   [&](DistTrainer& e) -> Status {
                     RETURN_IF_ERROR(Fill(e.Shards(), full));
                     return e.Restore(state);
                   });
}

// Every rank holds the same trainer state.
void ExpectSameStates(DistRun& run, const std::string& spec) {
  for (auto& e : run.engines)
    EXPECT_EQ(e->state().Serialize(), run.engines[0]->state().Serialize()) << spec;
}

TEST(RestoreTest, SameLayoutContinuesBitwise) {
  for (const auto& [spec, precision] :
       std::vector<std::pair<std::string, std::string>>{{"dp=2,zero=1", "fp32"},
                                                        {"tp=2,pp=2", "fp32"},
                                                        {"dp=2,zero=3", "bf16"},
                                                        {"dp=2,zero=2", "fp16"},
                                                        {"dp=4,zero=2,hsdp_shard=2", "fp32"}}) {
    RunConfig config = Config(2, 2, precision);
    // fp16: the scale doubles every 3 clean steps, so the window counter restored mid-window
    // (step 10) decides when it next doubles.
    config.train.loss_scale_window = 3;
    std::unique_ptr<DistRun> whole = RunLayout(config, Layout(spec), Tokens(), kSteps);
    std::unique_ptr<DistRun> first = RunLayout(config, Layout(spec), Tokens(), kHalf);
    ASSERT_TRUE(whole->status.ok() && first->status.ok()) << spec;
    ExpectSameStates(*first, spec);
    const FullState full = Gather(ShardsOf(*first));
    std::unique_ptr<DistRun> second =
        Resume(config, spec, full, first->engines[0]->state(), kSteps - kHalf);
    ASSERT_TRUE(second->status.ok()) << spec << ": " << second->status.ToString();
    for (size_t r = 0; r < second->losses.size(); ++r)
      EXPECT_EQ(second->losses[r],
                std::vector<double>(whole->losses[r].begin() + kHalf, whole->losses[r].end()))
          << spec << " rank " << r;
    EXPECT_TRUE(Snapshot(*second) == Snapshot(*whole)) << spec << ": state differs bitwise";
    EXPECT_EQ(second->engines[0]->state().Serialize(), whole->engines[0]->state().Serialize())
        << spec;
    if (precision == "fp16") {
      EXPECT_EQ(first->engines[0]->state().clean_steps, 1) << "restored mid-window";
      EXPECT_GT(whole->engines[0]->state().loss_scale, 65536.0);
    }
    // The bf16/fp16 copies were rebuilt from the master: the parameters match too.
    std::string error;
    const auto a = testing::Assemble(*second, ckpt::StateKind::kParam, &error);
    const auto b = testing::Assemble(*whole, ckpt::StateKind::kParam, &error);
    EXPECT_EQ(error, "") << spec;
    for (const auto& [name, t] : a) EXPECT_EQ(t.values, b.at(name).values) << spec << " " << name;
  }
}

// Layout A for 10 steps, then layout B (or one process) for 10: losses and final master weights
// within 1e-5 relative of the uninterrupted single-process run.
TEST(RestoreTest, AnotherLayoutContinuesWithinTolerance) {
  const RunConfig config = Config(2);
  const testing::Reference& ref = ReferenceRun(config);
  const std::pair<std::string, std::string> moves[] = {
      {"tp=2,pp=2", "dp=4,zero=3"},
      {"dp=2,zero=1", "pp=2,tp=2"},
      {"one process", "tp=2,dp=2,zero=2"},
      {"dp=4,zero=3,hsdp_shard=2", "one process"},
  };
  for (const auto& [from, to] : moves) {
    const std::string what = from + " -> " + to;
    FullState full;
    TrainerState state;
    if (from == "one process") {
      Result<std::unique_ptr<Trainer>> t = Trainer::Create(config, Tokens(), "");
      ASSERT_TRUE(t.ok());
      for (int s = 0; s < kHalf; ++s) ASSERT_TRUE((*t)->Step().ok());
      full = Gather({(*t)->Shards()});
      state = (*t)->state();
    } else {
      std::unique_ptr<DistRun> first = RunLayout(config, Layout(from), Tokens(), kHalf);
      ASSERT_TRUE(first->status.ok()) << what;
      full = Gather(ShardsOf(*first));
      state = first->engines[0]->state();
    }
    std::vector<double> losses;
    ParamDiff diff;
    std::string error;
    if (to == "one process") {
      Result<std::unique_ptr<Trainer>> t =
          Trainer::Create(config, Tokens(), "", WeightInit::kForLoad);
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(Fill((*t)->Shards(), full).ok());
      ASSERT_TRUE((*t)->Restore(state).ok());
      for (int s = kHalf; s < kSteps; ++s) {
        Result<StepStats> st = (*t)->Step();
        ASSERT_TRUE(st.ok());
        losses.push_back(st->loss);
      }
      diff = CompareParams(MasterOf(Gather({(*t)->Shards()})), ref.trainer->optimizer().master(),
                           &error);
    } else {
      std::unique_ptr<DistRun> second = Resume(config, to, full, state, kSteps - kHalf);
      ASSERT_TRUE(second->status.ok()) << what << ": " << second->status.ToString();
      ExpectSameStates(*second, what);
      EXPECT_EQ(second->engines[0]->state().step, kSteps);
      losses = second->losses[0];
      const auto params = testing::Assemble(*second, ckpt::StateKind::kMaster, &error);
      EXPECT_EQ(error, "") << what;
      diff = CompareParams(params, ref.trainer->optimizer().master(), &error);
    }
    EXPECT_EQ(error, "") << what;
    ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps - kHalf));
    double worst = 0;
    for (int s = kHalf; s < kSteps; ++s)
      worst = std::max(worst, std::abs(losses[s - kHalf] - ref.losses[s]) / ref.losses[s]);
    EXPECT_LE(worst, kTolerance) << what;
    EXPECT_LE(diff.global, kTolerance) << what;
    std::printf("resume %-40s loss rel %.1e  params max-abs rel %.1e\n", what.c_str(), worst,
                diff.global);
  }
}

// The loader's position is global: dp=2 for 3 steps, then dp=4 from its state — the rows that
// the data-parallel ranks train on tile the global batches with no gap and no overlap.
TEST(RestoreTest, DataPositionIsGlobalAcrossAChangeOfDp) {
  const RunConfig config = Config(1);
  std::unique_ptr<DistRun> first = RunLayout(config, Layout("dp=2"), Tokens(), 3);
  ASSERT_TRUE(first->status.ok());
  const TrainerState state = first->engines[0]->state();
  const int64_t B = config.train.batch_size;
  EXPECT_EQ(state.loader.rows, static_cast<uint64_t>(3 * B));
  EXPECT_EQ(state.tokens_seen, 3 * B * config.model.seq_len);
  // Rows the dp=2 ranks trained on (each step: the loader's previous position + the rank's slice).
  std::vector<int> seen(static_cast<size_t>(5 * B), 0);
  for (int step = 0; step < 3; ++step)
    for (auto& e : first->engines)
      for (int64_t r = 0; r < e->BatchRows(); ++r)
        ++seen[static_cast<size_t>(step * B + e->FirstBatchRow() + r)];
  const FullState full = Gather(ShardsOf(*first));
  std::unique_ptr<DistRun> second = Resume(config, "dp=4", full, state, 2);
  ASSERT_TRUE(second->status.ok()) << second->status.ToString();
  for (int step = 3; step < 5; ++step)
    for (auto& e : second->engines)
      for (int64_t r = 0; r < e->BatchRows(); ++r)
        ++seen[static_cast<size_t>(step * B + e->FirstBatchRow() + r)];
  for (size_t row = 0; row < seen.size(); ++row) EXPECT_EQ(seen[row], 1) << "row " << row;
  EXPECT_EQ(second->engines[0]->state().loader.rows, static_cast<uint64_t>(5 * B));
  // And the dp=4 continuation trains the single-process numbers on those rows.
  const testing::Reference& ref = ReferenceRun(config);
  for (int s = 0; s < 2; ++s)
    EXPECT_NEAR(second->losses[0][s], ref.losses[3 + s], kTolerance * ref.losses[3 + s]);
}

}  // namespace
}  // namespace rt::parallel
