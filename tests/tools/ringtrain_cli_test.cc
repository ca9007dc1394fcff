// The real `ringtrain` binary: a short end-to-end run, and bad input giving a clear error that
// names the thing and a non-zero exit — never a crash.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "data/data_prepare.h"
#include "data/token_shard.h"
#include "kernels/tensor.h"
#include "model/safetensors.h"
#include "tests/tools/shell_run.h"

namespace rt {
namespace {

using Outcome = ::rt::testing::ShellOutcome;

// Runs ringtrain with `args`, capturing stdout and stderr.
Outcome Ringtrain(const std::string& args) {
  return ::rt::testing::RunShell(std::string(RINGTRAIN_BIN) + " " + args);
}

// Each test gets its own folder with a small text corpus, prepared shards and a tiny config
// (ctest runs the tests as separate processes, possibly at once).
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/parallel_cli_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/text");
    std::string text;
    for (int i = 0; i < 400; ++i) text += "fortune number " + std::to_string(i) + " says hi\n%\n";
    std::ofstream(dir_ + "/text/a") << text;
    config_ = dir_ + "/tiny.toml";
    std::ofstream(config_) << "[model]\nn_layer = 2\nn_embd = 32\nn_head = 2\nseq_len = 16\n"
                           << "[train]\nbatch_size = 4\nsteps = 20\n"
                           << "[eval]\nevery = 10\nbatches = 2\n"
                           << "[data]\ndir = \"" << dir_ << "/data\"\n";
  }
  std::string dir_;
  std::string config_;
};

// Expects a failed run whose output names `what`.
void ExpectError(const Outcome& run, const std::string& what) {
  EXPECT_GT(run.exit_code, 0) << run.output;  // a clean non-zero exit, not a signal
  EXPECT_NE(run.output.find(what), std::string::npos) << run.output;
}

TEST_F(CliTest, PrepareTrainEvalSample) {
  const std::string d = dir_;
  Outcome prep = Ringtrain("data prepare --input " + d + "/text --out " + d + "/data");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  Outcome train = Ringtrain("train --config " + config_ + " --set metrics.path=" + d +
                            "/m.jsonl --out " + d + "/w.safetensors");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_NE(train.output.find("step 20: val_loss"), std::string::npos) << train.output;
  std::ifstream metrics(d + "/m.jsonl");
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(metrics, line)) {
    if (line.find("\"val_loss\"") != std::string::npos) {
      ++evals;
    } else {
      ++steps;
      EXPECT_NE(line.find("\"tokens_per_s\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"lr\""), std::string::npos) << line;
    }
  }
  EXPECT_EQ(steps, 20);
  EXPECT_EQ(evals, 2);
  Outcome eval = Ringtrain("eval --weights " + d + "/w.safetensors --data " + d + "/data/val.bin");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_NE(eval.output.find("loss "), std::string::npos);
  Outcome sample = Ringtrain("--log-level warn sample --weights " + d +
                             "/w.safetensors --prompt fortune --tokens 10");
  ASSERT_EQ(sample.exit_code, 0) << sample.output;
  EXPECT_EQ(sample.output.rfind("fortune", 0), 0u) << sample.output;
  Outcome init =
      Ringtrain("train --config " + config_ + " --steps 2 --init-from " + d + "/w.safetensors");
  EXPECT_EQ(init.exit_code, 0) << init.output;
}

TEST_F(CliTest, BadConfigKeys) {
  const std::string d = dir_;
  ExpectError(Ringtrain("train --config " + config_ + " --set train.bach_size=4"),
              "train.bach_size");
  ExpectError(Ringtrain("train --config " + config_ + " --set train.steps=\\\"ten\\\""),
              "train.steps");
  ExpectError(Ringtrain("train --config " + config_ + " --set train.device=\\\"tpu\\\""),
              "train.device");
  if (!CheckDeviceAvailable(Device::kCuda).ok()) {  // no CUDA build or no GPU: named, no fallback
    ExpectError(Ringtrain("train --config " + config_ + " --set train.device=\\\"cuda\\\""),
                "train.device");
    ExpectError(Ringtrain("sample --weights x.safetensors --prompt hi --device cuda"), "--device");
  }
  std::ofstream(d + "/missing.toml") << "[model]\nn_layer = 2\nn_embd = 32\nn_head = 2\n";
  ExpectError(Ringtrain("train --config " + d + "/missing.toml"), "model.seq_len");
  ExpectError(Ringtrain("train --config " + d + "/nope.toml"), "nope.toml");
}

TEST_F(CliTest, BadShards) {
  const std::string d = dir_;
  std::filesystem::create_directories(d + "/bad");
  std::vector<uint16_t> tokens(100, 7);
  auto bytes = EncodeTokenShard(tokens, 256);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(
      WriteFileBytes(d + "/bad/train_000.bin", std::span(*bytes).first(bytes->size() - 3)).ok());
  ExpectError(Ringtrain("train --config " + config_ + " --set data.dir=" + d + "/bad"),
              "truncated");
  auto wrong = *bytes;
  wrong[1] = std::byte{'X'};
  ASSERT_TRUE(WriteFileBytes(d + "/bad/train_000.bin", wrong).ok());
  ExpectError(Ringtrain("train --config " + config_ + " --set data.dir=" + d + "/bad"), "magic");
}

TEST_F(CliTest, BadWeights) {
  const std::string d = dir_;
  ASSERT_EQ(Ringtrain("data prepare --input " + d + "/text --out " + d + "/data").exit_code, 0);
  ASSERT_EQ(Ringtrain("export --config " + config_ + " --out " + d + "/init.safetensors").exit_code,
            0);
  auto file = ReadSafetensors(d + "/init.safetensors");
  ASSERT_TRUE(file.ok());
  // Rewrite the file without one tensor, and with one tensor mis-shaped.
  const auto rewrite = [&](const std::string& path, const std::string& drop,
                           const std::string& reshape) {
    std::vector<SafetensorsInput> inputs;
    for (const auto& [name, e] : file->tensors) {
      if (name == drop) continue;
      std::vector<int64_t> shape = e.shape;
      if (name == reshape) shape = {e.shape[1], e.shape[0]};
      inputs.push_back({name, e.dtype, shape, e.data.data()});
    }
    ASSERT_TRUE(WriteSafetensors(path, inputs, file->metadata).ok());
  };
  rewrite(d + "/missing.safetensors", "h.1.mlp.c_fc.bias", "");
  rewrite(d + "/shaped.safetensors", "", "h.0.attn.c_attn.weight");
  ExpectError(Ringtrain("train --config " + config_ + " --init-from " + d + "/missing.safetensors"),
              "h.1.mlp.c_fc.bias");
  ExpectError(Ringtrain("eval --weights " + d + "/shaped.safetensors --data x"),
              "h.0.attn.c_attn.weight");
  std::ofstream(d + "/junk.safetensors") << "not a safetensors file at all";
  ExpectError(Ringtrain("sample --weights " + d + "/junk.safetensors --prompt hi"),
              "junk.safetensors");
}

TEST_F(CliTest, PromptOutsideTheVocabulary) {
  const std::string d = dir_;
  ASSERT_EQ(Ringtrain("export --config " + config_ + " --set model.vocab_size=128 --out " + d +
                      "/ascii.safetensors")
                .exit_code,
            0);
  ExpectError(Ringtrain("sample --weights " + d + "/ascii.safetensors --prompt 'caf\xc3\xa9'"),
              "0xC3");
}

}  // namespace
}  // namespace rt
