// Child process for the chunk-engine crash tests: opens an engine in argv[1] and writes rounds
// of chunks. Round r writes chunks 1..K, all at version r with Content(id, r, length(id, r)), as
// one batch, and prints "round r" after it returned. Fault points armed through RINGTRAIN_FAULTS
// kill it (SIGKILL) in the middle of a round; the test then checks what survived.
// Usage: iofs_engine_child DIR FIRST_ROUND ROUNDS
#include <cstdio>
#include <cstdlib>

#include "iofs/chunk_engine.h"
#include "tests/iofs/engine_crash_common.h"
#include "tests/iofs/test_util.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR FIRST_ROUND ROUNDS\n", argv[0]);
    return 2;
  }
  auto engine = rt::iofs::ChunkEngine::Open(rt::iofs::testing::CrashEngineOptions(argv[1]));
  if (!engine.ok()) {
    std::fprintf(stderr, "open: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const int first = std::atoi(argv[2]);
  const int rounds = std::atoi(argv[3]);
  for (int r = first; r < first + rounds; ++r) {
    std::vector<std::vector<std::byte>> data;
    std::vector<rt::iofs::ChunkWrite> writes;
    for (uint64_t id = 1; id <= rt::iofs::testing::kCrashChunks; ++id)
      data.push_back(rt::iofs::testing::Content(id, r, rt::iofs::testing::CrashLength(id, r)));
    for (uint64_t id = 1; id <= rt::iofs::testing::kCrashChunks; ++id)
      writes.push_back({id, static_cast<uint64_t>(r), data[id - 1]});
    rt::Status s = (*engine)->Write(writes);
    if (!s.ok()) {
      std::fprintf(stderr, "round %d: %s\n", r, s.ToString().c_str());
      return 1;
    }
    std::printf("round %d\n", r);
    std::fflush(stdout);
  }
  return 0;
}
