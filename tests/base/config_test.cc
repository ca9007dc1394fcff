#include "base/config.h"

#include <gtest/gtest.h>

namespace rt {
namespace {

struct TestConfig {
  int64_t steps = 100;
  int layers = 2;
  double lr = 3e-4;
  bool recompute = false;
  std::string dir = "data";
  std::string order = "sequential";
};

void Bind(ConfigSchema& s, TestConfig* c) {
  s.Int("train.steps", &c->steps, 1, 1000000, "optimizer steps");
  s.Int("model.n_layer", &c->layers, 1, 128, "transformer blocks");
  s.Double("optim.lr", &c->lr, 0.0, 10.0, "peak learning rate");
  s.Bool("train.recompute", &c->recompute, "recompute activations");
  s.String("data.dir", &c->dir, "token shard folder");
  s.Enum("data.order", &c->order, {"sequential", "shuffled"}, "batch order");
}

Status ReadText(const std::string& text, TestConfig* c) {
  ConfigSchema schema;
  Bind(schema, c);
  ASSIGN_OR_RETURN(ConfigFile file, ConfigFile::Parse(text, "job.toml"));
  return schema.Read(file);
}

TEST(ConfigTest, ReadsValuesAndKeepsDefaults) {
  TestConfig c;
  ASSERT_TRUE(ReadText("[train]\nsteps = 7\n[optim]\nlr = 1\n", &c).ok());
  EXPECT_EQ(c.steps, 7);
  EXPECT_DOUBLE_EQ(c.lr, 1.0);  // integer accepted for a float
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.order, "sequential");
}

// Found by tests/fuzz/run_config_fuzz.cc (corpus file crash-effective-unescaped-strings.toml):
// the effective config printed strings unescaped and doubles with 6 digits, so it did not read
// back as the same config.
TEST(ConfigTest, EffectiveReadsBackAsTheSameValues) {
  TestConfig c;
  c.dir = std::string("m\0\n\"\\\t\x7f\xc3\xa9", 9);  // NUL, line break, quote, ..., é
  c.lr = 0.1 + 0.2;
  ConfigSchema schema;
  Bind(schema, &c);
  const std::string effective = schema.Effective();
  EXPECT_NE(effective.find("data.dir = \"m\\u0000\\n\\\"\\\\\\t\\u007f\xc3\xa9\""),
            std::string::npos)
      << effective;
  TestConfig again{.steps = 1, .layers = 1, .lr = 0, .recompute = true, .dir = "", .order = ""};
  Status s = ReadText(effective, &again);
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << effective;
  EXPECT_EQ(again.dir, c.dir);
  EXPECT_EQ(again.lr, c.lr);  // bit for bit
  EXPECT_EQ(again.steps, c.steps);
  EXPECT_EQ(again.recompute, c.recompute);
}

TEST(ConfigTest, ErrorsNameFileLineKeyAndProblem) {
  TestConfig c;
  Status s = ReadText("[train]\nsteps = \"many\"\n", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job.toml:2: key 'train.steps': expected an integer, got a string");

  s = ReadText("[train]\nstepz = 3\n", &c);
  EXPECT_EQ(s.message(), "job.toml:2: unknown key 'train.stepz'");

  s = ReadText("[model]\nn_layer = 0\n", &c);
  EXPECT_EQ(s.message(), "job.toml:2: key 'model.n_layer' = 0 is out of range [1, 128]");

  s = ReadText("[data]\norder = \"random\"\n", &c);
  EXPECT_EQ(s.message(),
            "job.toml:2: key 'data.order' = \"random\" is not one of: sequential, shuffled");

  s = ReadText("[train\nsteps = 1\n", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("job.toml:1:", 0), 0u) << s.message();
}

TEST(ConfigTest, MissingRequiredKey) {
  TestConfig c;
  ConfigSchema schema;
  Bind(schema, &c);
  schema.Require("data.dir");
  Status s = schema.Read(ConfigFile::Empty("job.toml"));
  EXPECT_EQ(s.message(), "job.toml: missing required key 'data.dir'");
}

TEST(ConfigTest, OverridesAndMissingFile) {
  TestConfig c;
  ConfigSchema schema;
  Bind(schema, &c);
  ConfigFile file = ConfigFile::Empty("cli");
  ASSERT_TRUE(file.ApplyOverride("train.steps=42").ok());
  ASSERT_TRUE(file.ApplyOverride("data.dir=/tmp/tokens").ok());  // bare word → string
  ASSERT_TRUE(file.ApplyOverride("train.recompute=true").ok());
  ASSERT_TRUE(schema.Read(file).ok());
  EXPECT_EQ(c.steps, 42);
  EXPECT_EQ(c.dir, "/tmp/tokens");
  EXPECT_TRUE(c.recompute);
  EXPECT_FALSE(file.ApplyOverride("novalue").ok());
  Result<ConfigFile> missing = ConfigFile::Load("/nonexistent/job.toml");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(schema.Describe().find("train.steps = 100  # optimizer steps"), std::string::npos)
      << schema.Describe();
}

}  // namespace
}  // namespace rt
