// Buffers for chunk values (Value::data). Values of megabytes come and go with every write, and
// a fresh std::string of n bytes costs a zero fill that its owner overwrites at once.
// NewValueBuffer hands out strings of n bytes with unspecified contents, reusing the buffers of
// values freed earlier (a bounded few), so filling one is the only pass over its memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace rt::iofs::chain {

// A string of exactly `n` bytes whose contents the caller must overwrite. Thread-safe; the
// buffer returns to a small pool (at most kPooledValueBuffers of at least 1 MiB) when the last
// reference goes.
std::shared_ptr<std::string> NewValueBuffer(size_t n);

// Buffers the pool keeps at most.
inline constexpr size_t kPooledValueBuffers = 16;

// Buffers handed out by NewValueBuffer whose last reference has not gone yet (pooled ones not
// counted): what a leak of values shows in. Thread-safe.
size_t ValueBuffersInUse();

}  // namespace rt::iofs::chain
