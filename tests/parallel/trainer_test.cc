// The trainer: determinism, precision modes, fp16 overflow handling, weight files, and learning
// on the real corpus (Debian's fortunes).
#include "parallel/trainer.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "data/data_loader.h"
#include "data/data_prepare.h"
#include "model/weights.h"
#include "tests/parallel/test_util.h"

namespace rt {
namespace {

using testing::PatternTokens;
using testing::TinyConfig;

std::unique_ptr<Trainer> MakeTrainer(const RunConfig& c,
                                     std::shared_ptr<const std::vector<uint16_t>> tokens,
                                     const std::string& init_from = "") {
  auto t = Trainer::Create(c, std::move(tokens), init_from);
  RT_CHECK(t.ok());
  return std::move(*t);
}

std::vector<double> Train(Trainer& t, int steps) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    auto s = t.Step();
    RT_CHECK(s.ok());
    losses.push_back(s->loss);
  }
  return losses;
}

bool SameBytes(const Arena& a, const Arena& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.All().data(), b.All().data(), a.bytes()) == 0;
}

TEST(Trainer, TwoRunsWithOneSeedAreBitwiseIdentical) {
  RunConfig c = TinyConfig();
  c.train.micro_batches = 2;
  auto tokens = PatternTokens(5000, 97, 1);
  auto a = MakeTrainer(c, tokens), b = MakeTrainer(c, tokens);
  EXPECT_EQ(Train(*a, 8), Train(*b, 8));
  EXPECT_TRUE(SameBytes(a->model().params(), b->model().params()));
  EXPECT_TRUE(SameBytes(a->optimizer().m(), b->optimizer().m()));
  EXPECT_EQ(a->state().Serialize(), b->state().Serialize());
  // Another seed gives another run.
  c.train.seed = 43;
  auto other = MakeTrainer(c, tokens);
  Train(*other, 1);
  EXPECT_FALSE(SameBytes(a->model().params(), other->model().params()));
}

// What a checkpoint will hold: the trainer state plus the master weights and Adam moments.
// Copying them into a fresh trainer and continuing must equal the uninterrupted run bitwise.
TEST(Trainer, ResumedRunMatchesTheUninterruptedOneBitwise) {
  for (const char* precision : {"fp32", "bf16"}) {
    RunConfig c = TinyConfig();
    c.train.precision = precision;
    c.data.order = "shuffled";
    auto tokens = PatternTokens(3000, 97, 5);  // 93 windows: the run crosses an epoch
    auto full = MakeTrainer(c, tokens);
    Train(*full, 6);
    auto first = MakeTrainer(c, tokens);
    Train(*first, 3);
    c.train.seed = 999;  // the resumed trainer's own seed must not matter
    auto resumed = MakeTrainer(c, tokens);
    const auto copy = [](const Arena& from, const Arena& to) {
      std::memcpy(to.All().data(), from.All().data(), from.bytes());
    };
    copy(first->optimizer().master(), resumed->optimizer().master());
    copy(first->optimizer().m(), resumed->optimizer().m());
    copy(first->optimizer().v(), resumed->optimizer().v());
    ASSERT_TRUE(resumed->optimizer().SyncParams().ok());
    auto state = TrainerState::Deserialize(first->state().Serialize());
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE(resumed->Restore(*state).ok());
    std::vector<double> tail_full;
    for (int i = 0; i < 3; ++i) tail_full.push_back(*Train(*first, 1).begin());
    EXPECT_EQ(tail_full, Train(*resumed, 3)) << precision;
    EXPECT_TRUE(SameBytes(full->model().params(), resumed->model().params())) << precision;
    EXPECT_TRUE(SameBytes(full->optimizer().master(), resumed->optimizer().master())) << precision;
  }
}

TEST(Trainer, StateRoundTrips) {
  TrainerState s;
  s.step = 12;
  s.adam_step = 11;
  s.loss_scale = 32768;
  s.clean_steps = 3;
  s.loader = {96, 42};
  s.tokens_seen = 12 * 256;
  s.schedule_steps = 100;
  const std::vector<std::byte> bytes = s.Serialize();
  ASSERT_EQ(bytes.size(), 68u);
  auto back = TrainerState::Deserialize(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->Serialize(), bytes);
  EXPECT_EQ(back->tokens_seen, 12 * 256);
  EXPECT_EQ(back->schedule_steps, 100);
  EXPECT_EQ(back->loader, s.loader);
  EXPECT_FALSE(TrainerState::Deserialize(std::vector<std::byte>(10)).ok());
  // Every truncation and one extra byte are refused.
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(TrainerState::Deserialize(std::span(bytes).first(n)).ok()) << n;
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(TrainerState::Deserialize(longer).ok());
  // A newer version, a negative count, more updates than steps, a loss scale below 1.
  auto broken = [&](auto edit) {
    TrainerState b = s;
    edit(b);
    return TrainerState::Deserialize(b.Serialize()).status();
  };
  std::vector<std::byte> v3 = bytes;
  v3[0] = std::byte{3};
  const Status version = TrainerState::Deserialize(v3).status();
  EXPECT_NE(version.ToString().find("unknown version 3"), std::string::npos) << version.ToString();
  EXPECT_FALSE(broken([](TrainerState& b) { b.tokens_seen = -1; }).ok());
  EXPECT_NE(broken([](TrainerState& b) { b.adam_step = 13; }).ToString().find("adam_step 13"),
            std::string::npos);
  EXPECT_FALSE(broken([](TrainerState& b) { b.loss_scale = 0.5; }).ok());
  EXPECT_FALSE(broken([](TrainerState& b) { b.loss_scale = NAN; }).ok());
}

// Trainer::Shards is the one-rank layout's plan over the trainer's arenas: the views are the
// arenas' tensors, and writing a trained state through them into a trainer created with
// WeightInit::kForLoad, then Restore, continues bitwise (fp32 and bf16).
TEST(Trainer, ShardsLoadIntoAnUninitialisedTrainerAndContinueBitwise) {
  for (const char* precision : {"fp32", "bf16"}) {
    RunConfig c = TinyConfig();
    c.train.precision = precision;
    auto tokens = PatternTokens(3000, 97, 5);
    auto full = MakeTrainer(c, tokens);
    const std::vector<double> all = Train(*full, 6);
    auto first = MakeTrainer(c, tokens);
    Train(*first, 3);
    auto loaded = Trainer::Create(c, tokens, "", WeightInit::kForLoad);
    ASSERT_TRUE(loaded.ok());
    const ckpt::StateShards from = first->Shards(), to = (*loaded)->Shards();
    ASSERT_EQ(from.shards.size(), to.shards.size());
    // Parameters (bf16 only: fp32 parameters are the master), master, m, v: one whole tensor
    // each per arena entry, plus the step.
    const size_t kinds = std::string(precision) == "fp32" ? 3 : 4;
    EXPECT_EQ(from.shards.size(), kinds * static_cast<size_t>(first->model().params().size()) + 1);
    for (size_t i = 0; i < from.shards.size(); ++i) {
      ASSERT_EQ(from.shards[i].name, to.shards[i].name);
      ASSERT_EQ(from.shards[i].view.nbytes(), to.shards[i].view.nbytes());
      EXPECT_FALSE(from.shards[i].has_flat_range);
      std::memcpy(to.shards[i].view.data(), from.shards[i].view.data(),
                  from.shards[i].view.nbytes());
    }
    EXPECT_EQ((*loaded)->state().adam_step, 3);  // through the step shard
    ASSERT_TRUE((*loaded)->Restore(first->state()).ok());
    const std::vector<double> tail = Train(**loaded, 3);
    EXPECT_EQ(tail, std::vector<double>(all.begin() + 3, all.end())) << precision;
    EXPECT_TRUE(SameBytes(full->model().params(), (*loaded)->model().params())) << precision;
    EXPECT_TRUE(SameBytes(full->optimizer().v(), (*loaded)->optimizer().v())) << precision;
    EXPECT_EQ((*loaded)->state().tokens_seen, 6 * c.train.batch_size * c.model.seq_len);
  }
  auto both = Trainer::Create(TinyConfig(), PatternTokens(3000, 97, 5), "w.safetensors",
                              WeightInit::kForLoad);
  EXPECT_FALSE(both.ok());
}

TEST(Trainer, LowPrecisionModesTrain) {
  auto tokens = PatternTokens(20000, 61, 2);
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    RunConfig c = TinyConfig();
    c.train.precision = precision;
    c.optim.lr = 3e-3;
    auto t = MakeTrainer(c, tokens);
    auto losses = Train(*t, 60);
    for (double l : losses) ASSERT_TRUE(std::isfinite(l)) << precision;
    EXPECT_LT(losses.back(), losses.front() - 1.0) << precision;
    EXPECT_EQ(t->state().adam_step, 60) << precision;
    if (std::string(precision) == "fp16") {
      EXPECT_EQ(t->state().loss_scale, 65536.0);
    }
  }
}

TEST(Trainer, Fp16SkipsAStepOnOverflowAndHalvesTheScale) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points are compiled out of this build";
  RunConfig c = TinyConfig();
  c.train.precision = "fp16";
  c.train.loss_scale_window = 3;
  auto t = MakeTrainer(c, PatternTokens(5000, 61, 3));
  Train(*t, 2);
  EXPECT_EQ(t->state().loss_scale, 65536.0);
  fault::Arm("parallel.trainer.grad_overflow", {fault::Action::kError, 0, 1});
  auto before = t->optimizer().master().Get(0);
  std::vector<float> saved(before.data_as<float>(), before.data_as<float>() + before.numel());
  auto s = t->Step();
  fault::DisarmAll();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->skipped);
  EXPECT_EQ(t->state().step, 3);
  EXPECT_EQ(t->state().adam_step, 2);
  EXPECT_EQ(t->state().loss_scale, 32768.0);
  EXPECT_EQ(std::memcmp(saved.data(), before.data(), saved.size() * 4), 0);  // no update
  Train(*t, 3);  // three clean steps double the scale again
  EXPECT_EQ(t->state().loss_scale, 65536.0);
  EXPECT_EQ(t->state().adam_step, 5);
}

TEST(Trainer, SafetensorsExportImportIsBitwise) {
  const std::string dir = ::testing::TempDir() + "/parallel_weights";
  std::filesystem::create_directories(dir);
  RunConfig c = TinyConfig();
  auto tokens = PatternTokens(5000, 61, 4);
  auto a = MakeTrainer(c, tokens);
  Train(*a, 3);
  ASSERT_TRUE(a->Export(dir + "/a.safetensors", "byte").ok());
  auto b = MakeTrainer(c, tokens, dir + "/a.safetensors");
  EXPECT_TRUE(SameBytes(a->model().params(), b->model().params()));
  ASSERT_TRUE(b->Export(dir + "/b.safetensors", "byte").ok());
  auto fa = ReadSafetensors(dir + "/a.safetensors"), fb = ReadSafetensors(dir + "/b.safetensors");
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_EQ(fa->bytes, fb->bytes);
  std::string tokenizer;
  auto config = WeightsConfig(*fa, &tokenizer);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->n_head, 4);
  EXPECT_EQ(tokenizer, "byte");
  // A model of another shape names the mis-shaped tensor; a missing tensor is named too.
  RunConfig wide = c;
  wide.model.n_embd = 128;
  auto bad = Trainer::Create(wide, tokens, dir + "/a.safetensors");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'wte'"), std::string::npos) << bad.status().ToString();
  RunConfig deep = c;
  deep.model.n_layer = 3;
  auto missing = Trainer::Create(deep, tokens, dir + "/a.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("h.2.ln_1.weight"), std::string::npos);
}

TEST(Trainer, TinyLearnsTheFortunes) {
  const std::string corpus = "/usr/share/games/fortunes";
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << corpus << " missing (tools/run setup)";
  const std::string dir = ::testing::TempDir() + "/parallel_fortunes";
  auto tokenizer = MakeByteTokenizer();
  auto prepared = PrepareData({{corpus}, dir, 0.1, 100'000'000}, *tokenizer);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  RunConfig c = TinyConfig();
  c.train.steps = 300;
  c.optim.schedule = "cosine";
  c.optim.warmup_steps = 20;
  c.optim.lr = 3e-3;
  c.optim.min_lr = 3e-4;
  auto train = LoadTrainTokens(dir, 256);
  auto val = LoadShardTokens(dir + "/val.bin", 256);
  ASSERT_TRUE(train.ok() && val.ok());
  auto t = MakeTrainer(c, *train);
  auto before = t->Evaluate(*val, 20);
  ASSERT_TRUE(before.ok());
  EXPECT_NEAR(*before, std::log(256.0), 0.1);
  Train(*t, 300);
  auto after = t->Evaluate(*val, 20);
  ASSERT_TRUE(after.ok());
  std::printf("validation loss: %.4f -> %.4f after 300 steps\n", *before, *after);
  EXPECT_LT(*after, *before - 1.0);
}

}  // namespace
}  // namespace rt
