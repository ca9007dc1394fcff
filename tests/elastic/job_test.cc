// Job files: the run config plus [job] and [elastic], errors naming the file, line and key.
#include "elastic/job.h"

#include <gtest/gtest.h>

namespace rt::elastic {
namespace {

const char* kModel = "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n";

TEST(JobSpec, ParsesRunConfigAndPolicy) {
  const std::string text = std::string(kModel) +
                           "[job]\nname = \"tiny\"\n[train]\nbatch_size = 8\n"
                           "[elastic]\ntp = 2\npp = 1\npp_max = 2\nzero = 1\nmin_nodes = 2\n";
  Result<JobSpec> job = ParseJobSpec(text, "job.toml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->name, "tiny");
  EXPECT_EQ(job->run.model.n_embd, 64);
  EXPECT_EQ(job->run.train.batch_size, 8);
  EXPECT_EQ(job->elastic.tp, 2);
  EXPECT_EQ(job->elastic.pp_max, 2);
  EXPECT_EQ(job->elastic.zero, 1);
  EXPECT_EQ(job->elastic.min_nodes, 2);
  EXPECT_EQ(job->text, text);
}

TEST(JobSpec, BadFilesNameTheKey) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {std::string(kModel) + "[elastic]\ntp = \"two\"\n", "elastic.tp"},
      {std::string(kModel) + "[elastic]\nnodes = 3\n", "elastic.nodes"},
      {std::string(kModel) + "[elastic]\nzero = 4\n", "elastic.zero"},
      {std::string(kModel) + "[elastic]\npp = 3\npp_max = 2\n", "elastic.pp_max"},
      {std::string(kModel) + "[elastic]\nhsdp_shard = 2\n", "elastic.hsdp_shard"},
      {std::string(kModel) + "[elastic]\nmin_nodes = 3\nmax_nodes = 2\n", "elastic.max_nodes"},
      {"[model]\nn_layer = 2\n", "model.n_embd"},
      {std::string(kModel) + "[train]\nbatch_size = 8\nmicro_batches = 3\n", "micro_batches"},
      {std::string(kModel) + "[elastic\n", "job.toml"},
  };
  for (const Case& c : cases) {
    Result<JobSpec> job = ParseJobSpec(c.text, "job.toml");
    ASSERT_FALSE(job.ok()) << c.text;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << job.status().ToString();
    EXPECT_NE(job.status().message().find(c.expect), std::string::npos) << job.status().ToString();
    EXPECT_NE(job.status().message().find("job.toml"), std::string::npos)
        << job.status().ToString();
  }
  EXPECT_EQ(LoadJobSpec("/nonexistent/job.toml").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rt::elastic
