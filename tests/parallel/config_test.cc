// The run config: TOML file plus --set overrides, and errors that name the file and key.
#include "parallel/config.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace rt {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string dir = ::testing::TempDir() + "/parallel_config_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/c.toml";
  std::ofstream(path) << text;
  return path;
}

const char* kModel = "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n";

TEST(RunConfig, ReadsFileAndOverrides) {
  const std::string path = WriteFile("ok", std::string(kModel) + "[train]\nprecision = \"bf16\"\n");
  auto c = LoadRunConfig(path, {"optim.lr=0.01", "train.steps=7"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.n_layer, 2);
  EXPECT_EQ(c->train.precision, "bf16");
  EXPECT_EQ(c->train.steps, 7);
  EXPECT_DOUBLE_EQ(c->optim.lr, 0.01);
  EXPECT_NE(DescribeRunConfig(*c).find("precision"), std::string::npos);
}

TEST(RunConfig, ReadsTheCheckpointSection) {
  auto defaults = LoadRunConfig(WriteFile("ckpt0", kModel), {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->ckpt.dir, "");
  EXPECT_EQ(defaults->ckpt.every, 0);
  EXPECT_EQ(defaults->ckpt.keep, 2);
  EXPECT_EQ(defaults->ckpt.codec, "none");
  EXPECT_TRUE(defaults->ckpt.async);
  const std::string path =
      WriteFile("ckpt", std::string(kModel) +
                            "[ckpt]\ndir = \"ringfs://127.0.0.1:9000/run\"\nevery = 50\nkeep = 3\n"
                            "codec = \"bgzstd\"\nasync = false\n");
  auto c = LoadRunConfig(path, {"ckpt.memory_every=1"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ckpt.dir, "ringfs://127.0.0.1:9000/run");
  EXPECT_EQ(c->ckpt.every, 50);
  EXPECT_EQ(c->ckpt.keep, 3);
  EXPECT_EQ(c->ckpt.codec, "bgzstd");
  EXPECT_FALSE(c->ckpt.async);
  EXPECT_EQ(c->ckpt.memory_every, 1);
}

TEST(RunConfig, BadKeysNameTheKey) {
  struct Case {
    std::string text;
    std::string expect;
  } cases[] = {
      {std::string(kModel) + "[train]\nbatch_sise = 4\n", "train.batch_sise"},
      {std::string(kModel) + "[train]\nsteps = \"many\"\n", "train.steps"},
      {std::string(kModel) + "[train]\nprecision = \"fp8\"\n", "train.precision"},
      {"[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\n", "model.seq_len"},
      {"[model]\nn_layer = 2\nn_embd = 64\nn_head = 5\nseq_len = 8\n", "n_head"},
      {std::string(kModel) + "[ckpt]\ncodec = \"lz4\"\n", "ckpt.codec"},
      {std::string(kModel) + "[ckpt]\nevery = 10\n", "ckpt.dir"},
      {std::string(kModel) + "[ckpt]\nkeep = 0\n", "ckpt.keep"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteFile("bad", c.text);
    auto r = LoadRunConfig(path, {});
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("c.toml"), std::string::npos) << r.status().ToString();
  }
  EXPECT_FALSE(LoadRunConfig(WriteFile("o", kModel), {"train.nope=1"}).ok());
  EXPECT_EQ(LoadRunConfig("/nonexistent.toml", {}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rt
