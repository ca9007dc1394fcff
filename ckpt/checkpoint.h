// The checkpoint library in one include: storage backends, codecs, the asynchronous two-phase
// writer and the re-sharding reader (docs/formats/checkpoint.md).
//
// Where this differs from the API agreed in /work/briefs/ckpt_api.md (names are as agreed):
// - Storage (storage.h): files are written through CreateFile → StorageFileWriter::Append →
//   Commit (WriteFile is that in one call); FileSize is added. Calls take no deadline argument:
//   the ringfs backend bounds every call with its own 120 s deadline, POSIX and memory calls do
//   not wait on anything but the local disk.
// - WriterOptions (writer.h) adds piece_bytes, zstd_level, encode_threads and
//   commit_timeout_ms (rank 0's wait for fragments, and a synchronous save's wait for the
//   commit). TensorShard (shard.h) gains replica_count, which the engine must set for replicated
//   writes to be spread (left at 1, replica 0 writes everything, which is also correct).
// - CheckpointWriter::Save returns the previous save's failure (once) instead of starting a new
//   save; Wait returns the running save's status (once).
// - ListCommitted lives in catalog.h (included by reader.h); `latest` lists every committed
//   checkpoint, newest first. CheckpointReader adds ReadPiece and Verify.
#pragma once

#include "ckpt/catalog.h"
#include "ckpt/codec.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "ckpt/shard.h"
#include "ckpt/storage.h"
#include "ckpt/writer.h"
