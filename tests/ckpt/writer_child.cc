// A writer process for the crash tests: saves the synthetic reference state of one rank and
// waits for the save. The tests arm fault points through RINGTRAIN_FAULTS (crash = SIGKILL).
// Usage: ckpt_writer_child URI RANK TP DP STEP RUN_ID CODEC COMMIT_TIMEOUT_MS
// Exit status 0 when the save (and, on rank 0, the commit) succeeded, 1 otherwise.
#include <cstdio>
#include <string>

#include "base/log.h"
#include "ckpt/writer.h"
#include "tests/ckpt/synthetic.h"

int main(int argc, char** argv) {
  using namespace rt::ckpt;
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s URI RANK TP DP STEP RUN_ID CODEC COMMIT_TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  (void)rt::InitLogging("info", "ckpt_writer_child");
  testing::SynthLayout layout;
  const int rank = std::stoi(argv[2]);
  layout.tp = std::stoi(argv[3]);
  layout.dp = std::stoi(argv[4]);
  auto storage = OpenStorage(argv[1]);
  auto codec = ParseCodec(argv[7]);
  if (!storage.ok() || !codec.ok()) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  WriterOptions o;
  o.storage = *storage;
  o.rank = rank;
  o.world = layout.world();
  o.run_id = argv[6];
  o.layout = layout.Name();
  o.codec = *codec;
  o.piece_bytes = 256;
  o.commit_timeout_ms = std::stoll(argv[8]);
  auto writer = CheckpointWriter::Create(o);
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  testing::SynthRank state = testing::MakeRank(layout, rank, true);
  const int64_t step = std::stoll(argv[5]);
  rt::Status s = (*writer)->Save(step, state.shards, testing::EngineStateOf(step));
  if (s.ok()) s = (*writer)->Wait(rt::Deadline::AfterMs(2 * o.commit_timeout_ms + 10000));
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}
