// Cleanup on SIGINT and SIGTERM for ringchaos: what the campaign made outside its folder
// (network namespaces, the bridge, the checkpoint tmpfs) is removed even when it is interrupted.
#pragma once

#include <functional>

namespace rt::chaos {

// Blocks SIGINT and SIGTERM in this thread and every thread started after it (call it first in
// main, before any thread) and starts a thread that waits for them: on one it runs the
// registered cleanups, newest first, and exits the process with 128 + the signal. Children
// started through base/process.h get an empty signal mask again. Call once.
void CatchTerminationSignals();

// Registers `cleanup` to run on SIGINT/SIGTERM until RemoveSignalCleanup(its id). Thread-safe.
int AddSignalCleanup(std::function<void()> cleanup);
// Unregisters a cleanup (a no-op for an unknown id). Thread-safe.
void RemoveSignalCleanup(int id);

}  // namespace rt::chaos
