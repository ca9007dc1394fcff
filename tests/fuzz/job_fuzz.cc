// Fuzz target: a job file's text (what `ringctl submit` sends and every daemon parses the same
// way: the run config plus [job] and [elastic]) must be accepted or refused with an error, never
// crash; an accepted job keeps its text and parses again to the same job.
#include <cstdint>
#include <string>
#include <vector>

#include "elastic/job.h"
#include "parallel/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto job = rt::elastic::ParseJobSpec(text, "fuzz");
  if (!job.ok()) return 0;
  if (job->text != text) __builtin_trap();
  auto again = rt::elastic::ParseJobSpec(job->text, "again");
  if (!again.ok() || again->name != job->name ||
      rt::DescribeRunConfig(again->run) != rt::DescribeRunConfig(job->run) ||
      again->elastic.pp_max != job->elastic.pp_max || again->elastic.zero != job->elastic.zero)
    __builtin_trap();
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::string> texts = {
      "[job]\nname = \"demo\"\n[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n",
      "[job]\nname = \"elastic\"\n[model]\nn_layer = 4\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
      "[train]\nbatch_size = 8\n[elastic]\ntp = 2\npp = 1\npp_max = 2\nzero = 1\n"
      "hsdp_shard = 2\nmin_nodes = 2\nmax_nodes = 4\nmicro_rows = 2\n",
      "[model]\nn_layer = 4\nn_embd = 32\nn_head = 2\nseq_len = 16\n"
      "[elastic]\npp = 2\nschedule = \"interleaved\"\nvpp = 2\n",
  };
  std::vector<std::vector<uint8_t>> seeds;
  for (const std::string& t : texts) seeds.emplace_back(t.begin(), t.end());
  return seeds;
}
