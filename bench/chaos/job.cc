#include "bench/chaos/job.h"

#include <filesystem>
#include <sstream>
#include <vector>

#include "bench/chaos/observe.h"
#include "data/token_shard.h"

namespace rt::chaos {

Status WriteChaosData(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "create " + dir + ": " + ec.message());
  constexpr size_t kPeriod = 97;
  std::vector<uint16_t> sentence(kPeriod);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (uint16_t& t : sentence) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<uint16_t>('a' + (state >> 33) % 26);
  }
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = sentence[i % kPeriod];
  RETURN_IF_ERROR(WriteTokenShard(dir + "/train_000.bin", tokens, 256));
  return WriteTokenShard(dir + "/val.bin", tokens, 256);
}

std::string ChaosJob(const std::string& name, const std::string& data_dir,
                     const std::string& ckpt_dir, int64_t steps, int64_t ckpt_every,
                     int64_t memory_every, int memory_copies) {
  std::ostringstream job;
  job << "[job]\nname = \"" << name << "\"\n[elastic]\ntp = 1\nmin_nodes = 1\n"
      << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
      << "[train]\nbatch_size = 60\nsteps = " << steps << "\nlog_every = 1000\n"
      << "[data]\ndir = \"" << data_dir << "\"\n[eval]\nevery = 0\n"
      << "[ckpt]\ndir = \"" << ckpt_dir << "\"\nevery = " << ckpt_every
      << "\nmemory_every = " << memory_every << "\nmemory_copies = " << memory_copies
      << "\nasync = true\nkeep = 3\n";
  return job.str();
}

Status SubmitJob(LocalCluster& cluster, const std::string& job_text) {
  Status last = Unavailable("no daemon runs");
  for (int id : cluster.Responsive()) {
    Result<Json> r =
        cluster.Call(id, daemon::kCtlSubmit, Json{{"text", job_text}, {"source", "chaos job"}},
                     Deadline::AfterMs(30'000));
    if (r.ok()) return Status();
    last = r.status();
  }
  return last.WithContext("submit the chaos job");
}

Status StopJob(LocalCluster& cluster, Observer& observer) {
  Status last = Unavailable("no daemon runs");
  for (int id : cluster.Responsive()) {
    Result<Json> r = cluster.Call(id, daemon::kCtlStop, Json::object(), Deadline::AfterMs(30'000));
    last = r.status();
    if (r.ok()) break;
  }
  RETURN_IF_ERROR(last.WithContext("stop the job"));
  return observer.WaitNoWorkers(Deadline::AfterMs(120'000));
}

}  // namespace rt::chaos
