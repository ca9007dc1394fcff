// The real `ringckpt` binary on checkpoints of a GPT's training state laid out by
// parallel/shard_plan.h (reference values, no engine needed): inspect, verify (clean and
// damaged), reshard to another layout (then every target rank loads the reference values and
// every stored piece lies inside one target shard), diff, export, a ringfs:// destination
// through a real ringfsd, and bad input.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ckpt/reader.h"
#include "ckpt/region.h"
#include "ckpt/writer.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "parallel/layout.h"
#include "parallel/shard_plan.h"
#include "tests/ckpt/synthetic.h"
#include "tests/ckpt/util.h"
#include "tests/iofs/process_util.h"
#include "tests/tools/shell_run.h"

namespace rt::ckpt {
namespace {

using Outcome = ::rt::testing::ShellOutcome;

Outcome Ringckpt(const std::string& args) {
  return ::rt::testing::RunShell(std::string(RINGCKPT_BIN) + " " + args);
}

constexpr const char* kConfig =
    "[model]\nn_layer = 2\nn_embd = 32\nn_head = 2\nseq_len = 16\nvocab_size = 64\n"
    "[train]\nprecision = \"bf16\"\n";

ModelConfig Model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_embd = 32;
  m.n_head = 2;
  m.seq_len = 16;
  m.vocab_size = 64;
  return m;
}

// Every rank's planned shards of `spec` with memory; filled with the reference values if `fill`.
struct PlannedRank {
  testing::SynthRank state;
};
PlannedRank Plan(const std::string& spec, int rank, bool fill) {
  const auto layout = parallel::ParseLayout(spec).value();
  auto planned = parallel::PlanRankShardsOf(Model(), Precision::kBf16, layout, rank).value();
  PlannedRank out;
  for (auto& p : planned) {
    TensorShard s = p.shard;
    out.state.memory.push_back(
        std::make_unique<std::vector<uint8_t>>(p.count * DTypeSize(s.dtype), 0));
    s.view = Tensor(out.state.memory.back()->data(), s.dtype, Shape{p.count});
    for (int64_t k = 0; fill && k < p.count; ++k) {
      const float v = testing::RefValue(s.kind, s.name, testing::NaiveGlobalIndex(s, k));
      if (s.dtype == DType::kBF16) {
        s.view.data_as<uint16_t>()[k] = testing::Bf16Bits(v);
      } else if (s.dtype == DType::kI64) {
        s.view.data_as<int64_t>()[k] = testing::kSynthStep;
      } else {
        s.view.data_as<float>()[k] = v;
      }
    }
    out.state.shards.shards.push_back(s);
  }
  return out;
}

Status SavePlanned(const std::string& uri, const std::string& spec, int64_t step) {
  ASSIGN_OR_RETURN(auto storage, OpenStorage(uri));
  const int world = parallel::ParseLayout(spec).value().world();
  std::vector<PlannedRank> ranks;
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(Plan(spec, r, true));
    WriterOptions o;
    o.storage = storage;
    o.rank = r;
    o.world = world;
    o.run_id = "cli";
    o.config_toml = kConfig;
    o.layout = spec;
    ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(o));
    RETURN_IF_ERROR(w->Save(step, ranks.back().state.shards, "trainer state"));
    writers.push_back(std::move(w));
  }
  for (auto& w : writers) RETURN_IF_ERROR(w->Wait(Deadline::AfterMs(120000)));
  return Status();
}

// Loads `uri`'s newest checkpoint into every rank of `spec` and checks the reference values.
void ExpectLoadsInto(const std::string& uri, const std::string& spec) {
  auto storage = OpenStorage(uri).value();
  const int world = parallel::ParseLayout(spec).value().world();
  auto reader = CheckpointReader::Open(storage, ListCommitted(*storage).value().front()).value();
  for (int r = 0; r < world; ++r) {
    PlannedRank rank = Plan(spec, r, false);
    ASSERT_TRUE(reader->Load(rank.state.shards).ok()) << spec << " rank " << r;
    EXPECT_EQ(testing::CheckRank(rank.state), "") << spec << " rank " << r;
  }
}

// Whether every stored piece of `uri`'s newest checkpoint lies whole inside a shard of `spec`.
bool PiecesFollow(const std::string& uri, const std::string& spec) {
  auto storage = OpenStorage(uri).value();
  auto reader = CheckpointReader::Open(storage, ListCommitted(*storage).value().front()).value();
  const int world = parallel::ParseLayout(spec).value().world();
  std::vector<std::pair<std::pair<StateKind, std::string>, Region>> shards;
  for (int r = 0; r < world; ++r)
    for (const TensorShard& s : Plan(spec, r, false).state.shards.shards)
      shards.push_back({{s.kind, s.name},
                        Region{s.global_shape, s.box_offset, s.box_size, s.has_flat_range,
                               s.flat_begin, s.flat_end}});
  for (const TensorEntry& t : reader->manifest().tensors)
    for (const StoredPiece& p : t.pieces) {
      const Region piece{t.global_shape,   p.box_offset, p.box_size,
                         p.has_flat_range, p.flat_begin, p.flat_end};
      bool inside = false;
      for (const auto& [key, region] : shards) {
        if (key != std::make_pair(t.kind, t.name)) continue;
        int64_t n = 0;
        ForEachOverlap(piece, region, [&](int64_t, int64_t, int64_t len) { n += len; });
        if (n == piece.numel()) inside = true;
      }
      if (!inside) return false;
    }
  return true;
}

TEST(RingckptCliTest, InspectVerifyReshardDiffExport) {
  testing::TempDir dir("ringckpt-cli");
  const std::string src = dir.path() + "/src", dest = dir.path() + "/dest";
  ASSERT_TRUE(SavePlanned(src, "tp=2,dp=2", 5).ok());

  Outcome out = Ringckpt("inspect " + src);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("step       5"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("layout     tp=2,dp=2"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("h.1.attn.c_attn.weight"), std::string::npos) << out.output;
  out = Ringckpt("inspect --json file://" + src);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const auto json = nlohmann::json::parse(out.output);
  auto reader = CheckpointReader::Open(OpenStorage(src).value(), 5).value();
  EXPECT_EQ(json["tensors"].size(), reader->manifest().tensors.size());
  EXPECT_EQ(json["step"], 5);

  out = Ringckpt("verify " + src);
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("OK"), std::string::npos) << out.output;

  out = Ringckpt("reshard " + src + " --to pp=2,dp=2,zero=3 --codec bgzstd --out " + dest);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  ExpectLoadsInto(dest, "pp=2,dp=2,zero=3");
  ExpectLoadsInto(src, "pp=2,dp=2,zero=3");
  EXPECT_TRUE(PiecesFollow(dest, "pp=2,dp=2,zero=3"));
  EXPECT_FALSE(PiecesFollow(src, "pp=2,dp=2,zero=3"));  // the check can fail
  out = Ringckpt("verify " + dest);
  EXPECT_EQ(out.exit_code, 0) << out.output;

  out = Ringckpt("diff " + src + " " + dest);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("largest absolute difference 0\n"), std::string::npos) << out.output;

  const std::string weights = dir.path() + "/w.safetensors";
  out = Ringckpt("export " + dest + " --out " + weights);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  auto file = ReadSafetensors(weights).value();
  auto wte = file.Find("wte", {64, 32}).value();
  ASSERT_EQ(wte->dtype, DType::kF32);
  for (int64_t i = 0; i < 64 * 32; ++i) {
    float v;
    std::memcpy(&v, wte->data.data() + 4 * i, 4);
    ASSERT_EQ(v, testing::RefValue(StateKind::kMaster, "wte", i)) << i;
  }
  // The architecture of the recorded run config, so `ringtrain eval` and `sample` can load it.
  std::string tokenizer;
  auto architecture = WeightsConfig(file, &tokenizer);
  ASSERT_TRUE(architecture.ok()) << architecture.status().ToString();
  EXPECT_EQ(architecture->n_layer, 2);
  EXPECT_EQ(architecture->n_embd, 32);
  EXPECT_EQ(architecture->n_head, 2);
  EXPECT_EQ(architecture->seq_len, 16);
  EXPECT_EQ(architecture->vocab_size, 64);
  EXPECT_EQ(tokenizer, "gpt2");  // not the byte tokenizer's 256

  // Damage: verify names the file and exits 1; diff still runs but load fails clearly.
  testing::FlipByte(src + "/" + StepDir(5) + "/" + DataFile(3), 100);
  out = Ringckpt("verify " + src);
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_NE(out.output.find("BAD"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find(DataFile(3)), std::string::npos) << out.output;
}

TEST(RingckptCliTest, RingfsDestination) {
  testing::TempDir dir("ringckpt-ringfs");
  const uint16_t port = iofs::testing::FreePort();
  iofs::testing::Process server;
  ASSERT_TRUE(
      server.Start({RINGFSD, "--state", dir.path() + "/state", "--port", std::to_string(port)}, {},
                   dir.path() + "/server.log"));
  const std::string src = dir.path() + "/src";
  const std::string remote = "ringfs://127.0.0.1:" + std::to_string(port) + "/ck";
  ASSERT_TRUE(SavePlanned(src, "dp=2,zero=1", 9).ok());
  Outcome out = Ringckpt("reshard " + src + " --to tp=2 --out " + remote);
  ASSERT_EQ(out.exit_code, 0) << out.output << testing::ReadText(dir.path() + "/server.log");
  out = Ringckpt("verify " + remote);
  EXPECT_EQ(out.exit_code, 0) << out.output;
  out = Ringckpt("inspect " + remote);
  EXPECT_NE(out.output.find("step       9"), std::string::npos) << out.output;
  out = Ringckpt("diff " + remote + " " + src);
  EXPECT_NE(out.output.find("largest absolute difference 0\n"), std::string::npos) << out.output;
  ExpectLoadsInto(remote, "tp=2");
  (void)server.Stop(std::chrono::seconds(15));
  // With the server gone the checkpoint cannot be checked: exit 2, not 1 (damaged).
  out = Ringckpt("verify " + remote);
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("Unavailable"), std::string::npos) << out.output;
}

TEST(RingckptCliTest, BadInput) {
  testing::TempDir dir("ringckpt-bad");
  Outcome out = Ringckpt("inspect " + dir.path() + "/empty");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_NE(out.output.find("no committed checkpoint"), std::string::npos) << out.output;
  ASSERT_TRUE(SavePlanned(dir.path() + "/src", "", 1).ok());
  out = Ringckpt("reshard " + dir.path() + "/src --to tp=3 --out " + dir.path() + "/x");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  out = Ringckpt("reshard " + dir.path() + "/src --to bogus=2 --out " + dir.path() + "/x");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_NE(out.output.find("bogus"), std::string::npos) << out.output;
  out = Ringckpt("inspect " + dir.path() + "/src --step 7");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_NE(out.output.find("NotFound"), std::string::npos) << out.output;
  out = Ringckpt("inspect s3://bucket");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_NE(out.output.find("unknown scheme"), std::string::npos) << out.output;
}

}  // namespace
}  // namespace rt::ckpt
