// The run config: TOML file plus --set overrides, and errors that name the file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "parallel/config.h"

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
