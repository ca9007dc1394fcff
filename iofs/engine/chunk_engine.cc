#include "iofs/chunk_engine.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_set>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "base/fault.h"
#include "base/log.h"
#include "iofs/engine/block_crc.h"
#include "iofs/engine/chunk_record.h"
#include "iofs/engine/rocks_logger.h"
#include "iofs/engine/slot_files.h"
#include "iofs/engine/uring_executor.h"

namespace rt::iofs {
namespace {

Status RocksError(const rocksdb::Status& s, std::string_view what,
                  SourceLocation where = SourceLocation::current()) {
  return ForeignError(StatusCode::kRocksDbError, std::string(what) + ": " + s.ToString(), where);
}

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The location of an empty chunk: it takes no slot (tombstones of deleted chunks are empty).
constexpr uint32_t kNoFile = UINT32_MAX;
bool HasSlot(const ChunkLocation& loc) { return loc.file != kNoFile; }

std::string Hex(ChunkId id) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, "mkdir " + path);
  return Status();
}

// One metadata change waiting for the group commit.
struct Change {
  ChunkId id = 0;
  std::optional<ChunkRecord> record;  // nullopt = delete
  bool moved_away = false;            // a delete whose slot now belongs to another chunk
};

struct CommitRequest {
  std::vector<Change> changes;
  Status result;
  bool done = false;
};

// In-memory view of a committed chunk.
struct Entry {
  ChunkLocation loc;
  ChunkInfo info;
};

class ChunkEngineImpl final : public ChunkEngine {
 public:
  explicit ChunkEngineImpl(ChunkEngineOptions options) : options_(std::move(options)) {}

  ~ChunkEngineImpl() override {
    slots_.reset();     // closes the data files after...
    executor_.reset();  // ...the ring (declared order would be wrong: be explicit)
    if (db_) {
      (void)db_->Close();
      delete db_;
    }
  }

  Status Init();

  Status Write(std::span<const ChunkWrite> writes) override {
    bool syncing = false;
    const Status s = WriteChunks(writes, &syncing);
    if (s.ok()) {
      uint64_t bytes = 0;
      for (const ChunkWrite& w : writes) bytes += w.data.size();
      written_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    } else {
      (syncing ? sync_errors_ : write_errors_).fetch_add(1, std::memory_order_relaxed);
    }
    return s;
  }
  Status Read(ChunkId id, uint64_t offset, uint64_t length, std::vector<std::byte>* out,
              ChunkInfo* info) override {
    out->clear();
    const Status s = ReadVerified(id, offset, length, info, [out](const std::byte* data, size_t n) {
      out->assign(data, data + n);
    });
    CountRead(s, out->size());
    return s;
  }
  Result<size_t> ReadInto(ChunkId id, uint64_t offset, std::span<std::byte> out,
                          ChunkInfo* info) override {
    size_t got = 0;
    const Status s = ReadVerified(
        id, offset, out.size(), info,
        [&](const std::byte* data, size_t n) {
          if (data != out.data()) std::memcpy(out.data(), data, n);
          got = n;
        },
        out);
    CountRead(s, got);
    RETURN_IF_ERROR(s);
    return got;
  }
  Result<PlannedRead> PlanReadInto(ChunkId id, uint64_t offset, std::span<std::byte> out) override;
  Result<size_t> FinishReadInto(const PlannedRead& plan, int io_result) override {
    Result<size_t> got = VerifyPlannedRead(plan, io_result);
    CountRead(got.status(), got.ok() ? *got : 0);
    return got;
  }
  EngineCounters Counters() override {
    EngineCounters c;
    c.read_bytes = read_bytes_.load(std::memory_order_relaxed);
    c.written_bytes = written_bytes_.load(std::memory_order_relaxed);
    c.read_errors = read_errors_.load(std::memory_order_relaxed);
    c.write_errors = write_errors_.load(std::memory_order_relaxed);
    c.sync_errors = sync_errors_.load(std::memory_order_relaxed);
    return c;
  }
  Result<ChunkInfo> Stat(ChunkId id) override {
    std::lock_guard lock(alloc_mu_);
    auto it = chunks_.find(id);
    if (it == chunks_.end()) return NotFound("chunk " + Hex(id) + " not found");
    return it->second.info;
  }
  Status Remove(std::span<const ChunkId> ids) override;
  Status Move(ChunkId from, ChunkId to, uint64_t version) override;
  std::vector<ChunkInfo> List(ChunkId first, ChunkId last) override {
    std::lock_guard lock(alloc_mu_);
    std::vector<ChunkInfo> out;
    for (auto it = chunks_.lower_bound(first); it != chunks_.end() && it->first <= last; ++it)
      out.push_back(it->second.info);
    return out;
  }
  EngineUsage Usage() override {
    std::lock_guard lock(alloc_mu_);
    EngineUsage u;
    u.chunks = chunks_.size();
    u.used_slots = slots_->used_slots();
    u.total_slots = slots_->total_slots();
    u.file_bytes = slots_->file_bytes();
    for (const auto& [id, e] : chunks_) u.data_bytes += e.info.length;
    return u;
  }
  std::vector<std::string> Check() override;
  const ChunkEngineOptions& options() const override { return options_; }

 private:
  // Reads and verifies [offset, offset + length) of a chunk (clamped to its length) and hands
  // the verified bytes to `deliver` (not called for an empty range). When the read can go
  // straight into `direct` (a block-aligned offset, 4096-byte aligned memory with room for the
  // whole rounded-up read) it does, is verified there, and `deliver` gets direct.data().
  Status ReadVerified(ChunkId id, uint64_t offset, uint64_t length, ChunkInfo* info,
                      const std::function<void(const std::byte*, size_t)>& deliver,
                      std::span<std::byte> direct = {});
  // Write's work; sets *syncing once the data is written and its fdatasync starts.
  Status WriteChunks(std::span<const ChunkWrite> writes, bool* syncing);
  // FinishReadInto's work: checks the transfer and the checksums of what landed.
  Result<size_t> VerifyPlannedRead(const PlannedRead& plan, int io_result);
  // Counts a read's outcome: its bytes, or a failure other than NotFound and OutOfRange.
  void CountRead(const Status& s, uint64_t bytes);
  Status Commit(CommitRequest* request);
  void Apply(const CommitRequest& request);  // REQUIRES alloc_mu_
  Result<ChunkLocation> AllocateLocked(SizeClass size_class);
  std::string DataPath(const ChunkLocation& loc) const {
    return options_.dir + "/data/" + std::to_string(loc.file) + "." +
           std::to_string(static_cast<int>(loc.size_class)) + ".dat";
  }
  Deadline IoDeadline() const { return Deadline::AfterMs(options_.io_timeout_ms); }

  const ChunkEngineOptions options_;
  rocksdb::DB* db_ = nullptr;
  std::unique_ptr<UringExecutor> executor_;

  std::mutex alloc_mu_;
  std::unique_ptr<SlotFiles> slots_;  // GUARDED_BY(alloc_mu_)
  std::map<ChunkId, Entry> chunks_;   // GUARDED_BY(alloc_mu_)

  // Readers hold it shared while they read a slot; recycling freed slots takes it exclusive and
  // also needs no planned read pinning a slot (planned reads pin under the shared lock).
  std::shared_timed_mutex reuse_mu_;
  std::atomic<int64_t> planned_reads_{0};

  std::atomic<uint64_t> read_bytes_{0};  // Counters()
  std::atomic<uint64_t> written_bytes_{0};
  std::atomic<uint64_t> read_errors_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> sync_errors_{0};

  std::mutex commit_mu_;
  std::condition_variable commit_cv_;
  std::deque<CommitRequest*> commit_queue_;  // GUARDED_BY(commit_mu_)
  bool committing_ = false;                  // GUARDED_BY(commit_mu_)
};

Status ChunkEngineImpl::Init() {
  const auto& o = options_;
  if (o.dir.empty()) return InvalidArgument("chunk engine: dir is empty");
  if (o.chunk_size == 0 || o.chunk_size % kBlockSize != 0)
    return InvalidArgument("chunk engine: chunk_size " + std::to_string(o.chunk_size) +
                           " is not a positive multiple of 65536");
  if (o.small_chunk_size == 0 || o.small_chunk_size % kBlockSize != 0 ||
      o.small_chunk_size > o.chunk_size)
    return InvalidArgument("chunk engine: small_chunk_size " + std::to_string(o.small_chunk_size) +
                           " must be a positive multiple of 65536 and at most chunk_size");
  if (o.slots_per_file == 0) return InvalidArgument("chunk engine: slots_per_file is 0");
  if (o.io_buffers < 1) return InvalidArgument("chunk engine: io_buffers must be at least 1");
  RETURN_IF_ERROR(MakeDir(o.dir));
  RETURN_IF_ERROR(MakeDir(o.dir + "/data"));
  RETURN_IF_ERROR(MakeDir(o.dir + "/meta"));  // RocksDB logs an error when it has to make it

  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.max_background_jobs = 2;
  // Chunk records are small: a 4 MiB memtable holds thousands. It also bounds the WAL's
  // preallocation (1.1 x write_buffer_size), which at the default 64 MiB takes a nearly full
  // disk's last space away from the chunk data.
  db_options.write_buffer_size = 4 << 20;
  // RocksDB's messages go to our log, not to a LOG file on the (possibly full) data disk.
  db_options.info_log = NewRocksLogger(o.dir + "/meta");
  rocksdb::Status rs = rocksdb::DB::Open(db_options, o.dir + "/meta", &db_);
  if (!rs.ok()) return RocksError(rs, "open chunk metadata " + o.dir + "/meta");

  EngineHeader want{o.chunk_size, o.small_chunk_size, o.slots_per_file};
  std::string stored;
  rs = db_->Get(rocksdb::ReadOptions(), std::string(kHeaderKey), &stored);
  if (rs.IsNotFound()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rs = db_->Put(wo, std::string(kHeaderKey), EncodeEngineHeader(want));
    if (!rs.ok()) return RocksError(rs, "write chunk engine header");
  } else if (!rs.ok()) {
    return RocksError(rs, "read chunk engine header");
  } else {
    ASSIGN_OR_RETURN(EngineHeader have, DecodeEngineHeader(stored));
    if (have.chunk_size != want.chunk_size || have.small_chunk_size != want.small_chunk_size ||
        have.slots_per_file != want.slots_per_file)
      return InvalidArgument("chunk engine in " + o.dir +
                             " was created with chunk_size=" + std::to_string(have.chunk_size) +
                             " small_chunk_size=" + std::to_string(have.small_chunk_size) +
                             " slots_per_file=" + std::to_string(have.slots_per_file) +
                             "; the options ask for " + std::to_string(want.chunk_size) + "/" +
                             std::to_string(want.small_chunk_size) + "/" +
                             std::to_string(want.slots_per_file));
  }

  UringOptions uo;
  uo.queue_depth = o.queue_depth;
  uo.buffer_count = o.io_buffers;
  uo.buffer_size = o.chunk_size;
  ASSIGN_OR_RETURN(executor_, UringExecutor::Create(uo));

  slots_ = std::make_unique<SlotFiles>(o.dir + "/data", o.small_chunk_size, o.chunk_size,
                                       o.slots_per_file, o.capacity_bytes, executor_.get());
  RETURN_IF_ERROR(slots_->OpenExisting());
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("C"); it->Valid(); it->Next()) {
    ChunkId id = 0;
    if (!ParseChunkKey(it->key().ToStringView(), &id)) break;
    ASSIGN_OR_RETURN(ChunkRecord r, DecodeChunkRecord(it->value().ToStringView(), Hex(id)));
    if (HasSlot(r.loc)) RETURN_IF_ERROR(slots_->MarkUsed(r.loc, "chunk " + Hex(id)));
    chunks_[id] = Entry{r.loc, ChunkInfo{id, r.version, r.length, r.chunk_crc,
                                         r.loc.size_class == SizeClass::kSmall}};
  }
  if (!it->status().ok()) return RocksError(it->status(), "scan chunk metadata");
  slots_->FinishRebuild();
  LOG_INFO("chunk engine {}: {} chunks, {} of {} slots used, {} bytes of data files", o.dir,
           chunks_.size(), slots_->used_slots(), slots_->total_slots(), slots_->file_bytes());
  return Status();
}

Result<ChunkLocation> ChunkEngineImpl::AllocateLocked(SizeClass c) {
  if (!slots_->HasFree(c) && slots_->HasQuarantine()) {
    // Recycle freed slots when no reader holds one; otherwise prefer a new file, and wait for
    // readers only when no file can be added.
    std::unique_lock reuse(reuse_mu_, std::try_to_lock);
    if (reuse.owns_lock() && planned_reads_.load() == 0) slots_->RecycleQuarantine();
  }
  Result<ChunkLocation> loc = slots_->Allocate(c);
  if (!loc.ok() && loc.status().code() == StatusCode::kNoSpace && slots_->HasQuarantine()) {
    const Deadline deadline = IoDeadline();
    std::unique_lock reuse(reuse_mu_, std::defer_lock);
    if (!reuse.try_lock_until(deadline.when()))
      return DeadlineExceeded("waiting for readers to release freed chunk slots");
    // Planned reads end without the lock (FinishReadInto): wait for the ones in flight.
    while (planned_reads_.load() != 0) {
      if (deadline.Expired())
        return DeadlineExceeded("waiting for planned reads to release chunk slots");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    slots_->RecycleQuarantine();
    return slots_->Allocate(c);
  }
  return loc;
}

Status ChunkEngineImpl::WriteChunks(std::span<const ChunkWrite> writes, bool* syncing) {
  if (writes.empty()) return Status();
  {
    std::unordered_set<ChunkId> ids;
    for (const ChunkWrite& w : writes) {
      if (w.data.size() > options_.chunk_size)
        return InvalidArgument("chunk " + Hex(w.id) + ": " + std::to_string(w.data.size()) +
                               " bytes exceed chunk_size " + std::to_string(options_.chunk_size));
      if (!ids.insert(w.id).second)
        return InvalidArgument("chunk " + Hex(w.id) + " appears twice in one write batch");
    }
  }
  // 1. Allocate a fresh slot per chunk (never the live one: copy-on-write).
  std::vector<ChunkLocation> locs;
  {
    std::lock_guard lock(alloc_mu_);
    for (const ChunkWrite& w : writes) {
      const SizeClass c =
          w.data.size() <= options_.small_chunk_size ? SizeClass::kSmall : SizeClass::kLarge;
      if (w.data.empty()) {
        locs.push_back(ChunkLocation{SizeClass::kSmall, kNoFile, 0});
        continue;
      }
      Result<ChunkLocation> loc = AllocateLocked(c);
      if (!loc.ok()) {
        for (const ChunkLocation& l : locs)
          if (HasSlot(l)) slots_->Free(l);
        return loc.status().WithContext("allocate a slot for chunk " + Hex(w.id));
      }
      locs.push_back(*loc);
    }
  }
  auto free_new = [&] {
    std::lock_guard lock(alloc_mu_);
    for (const ChunkLocation& l : locs)
      if (HasSlot(l)) slots_->Free(l);
  };
  CommitRequest request;
  std::vector<int> touched_files;
  // 2. Write the data through registered buffers, up to io_buffers chunks per submission.
  const size_t group = static_cast<size_t>(options_.io_buffers);
  for (size_t first = 0; first < writes.size(); first += group) {
    const size_t n = std::min(group, writes.size() - first);
    Result<std::vector<IoBuffer>> bufs =
        executor_->AcquireBuffers(static_cast<int>(n), IoDeadline());
    if (!bufs.ok()) {
      free_new();
      return bufs.status();
    }
    std::vector<IoOp> ops;
    for (size_t i = 0; i < n; ++i) {
      const ChunkWrite& w = writes[first + i];
      const ChunkLocation& loc = locs[first + i];
      IoBuffer& b = (*bufs)[i];
      ChunkRecord r;
      r.loc = loc;
      r.length = static_cast<uint32_t>(w.data.size());
      r.version = w.version;
      // One pass: copy into the registered buffer and checksum the bytes as copied.
      r.block_crcs.assign((w.data.size() + kBlockSize - 1) / kBlockSize, 0);
      if (!w.data.empty())
        CopyBlockCrcs(b.data, w.data.data(), w.data.size(), kBlockSize, r.block_crcs);
      r.chunk_crc = CombineBlockCrcs(r.block_crcs, w.data.size());
      request.changes.push_back(Change{w.id, std::move(r), false});
      const uint64_t io_len = RoundUp(w.data.size(), kIoAlign);
      if (io_len == 0) continue;
      std::memset(b.data + w.data.size(), 0, io_len - w.data.size());
      IoOp op;
      op.kind = IoOp::Kind::kWrite;
      op.file = slots_->RegisteredSlot(loc);
      op.buffer = b.index;
      op.data = b.data;
      op.length = static_cast<uint32_t>(io_len);
      op.offset = slots_->Offset(loc);
      ops.push_back(op);
      if (std::find(touched_files.begin(), touched_files.end(), op.file) == touched_files.end())
        touched_files.push_back(op.file);
    }
    Status s = executor_->Run(ops, IoDeadline());
    if (!s.ok()) {
      free_new();  // the executor releases the buffers when the abandoned ops complete
      return s.WithContext("write chunk data");
    }
    for (IoBuffer& b : *bufs) executor_->ReleaseBuffer(b);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].result != static_cast<int>(ops[i].length)) {
        free_new();
        const int err = ops[i].result < 0 ? -ops[i].result : EIO;
        return ErrnoStatus(err, "write " + std::to_string(ops[i].length) + " bytes at offset " +
                                    std::to_string(ops[i].offset) + " of data file slot " +
                                    std::to_string(ops[i].file));
      }
    }
  }
  if (Status s = RT_FAULT_POINT("iofs.chunk.after_data_write"); !s.ok()) {
    free_new();
    return s;
  }
  // 3. Make the data durable before any metadata points at it.
  *syncing = true;
  std::vector<IoOp> syncs;
  for (int f : touched_files) {
    IoOp op;
    op.kind = IoOp::Kind::kDataSync;
    op.file = f;
    syncs.push_back(op);
  }
  Status s = executor_->Run(syncs, IoDeadline());
  for (const IoOp& op : syncs)
    if (s.ok() && op.result < 0)
      s = ErrnoStatus(-op.result, "fdatasync data file slot " + std::to_string(op.file));
  if (s.ok()) s = RT_FAULT_POINT("iofs.chunk.after_data_sync");
  if (!s.ok()) {
    free_new();
    return s;
  }
  // 4. Commit the metadata (group commit), then free the replaced slots.
  s = Commit(&request);
  if (!s.ok()) free_new();
  return s;
}

Status ChunkEngineImpl::Move(ChunkId from, ChunkId to, uint64_t version) {
  if (from == to) return InvalidArgument("move of chunk " + Hex(from) + " onto itself");
  std::string value;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), ChunkKey(from), &value);
  if (rs.IsNotFound()) return NotFound("chunk " + Hex(from) + " not found");
  if (!rs.ok()) return RocksError(rs, "read metadata of chunk " + Hex(from));
  ASSIGN_OR_RETURN(ChunkRecord record, DecodeChunkRecord(value, Hex(from)));
  record.version = version;
  CommitRequest request;
  request.changes.push_back(Change{to, std::move(record), false});
  request.changes.push_back(Change{from, std::nullopt, true});
  return Commit(&request);
}

Status ChunkEngineImpl::Remove(std::span<const ChunkId> ids) {
  CommitRequest request;
  for (ChunkId id : ids) request.changes.push_back(Change{id, std::nullopt, false});
  return Commit(&request);
}

Status ChunkEngineImpl::Commit(CommitRequest* request) {
  std::unique_lock lock(commit_mu_);
  commit_queue_.push_back(request);
  while (!request->done) {
    if (committing_) {
      // The leader's synced write is local and bounded; it marks us done.
      commit_cv_.wait(lock);
      continue;
    }
    committing_ = true;
    std::deque<CommitRequest*> group;
    group.swap(commit_queue_);
    lock.unlock();
    rocksdb::WriteBatch batch;
    for (CommitRequest* r : group)
      for (const Change& c : r->changes) {
        if (c.record) {
          batch.Put(ChunkKey(c.id), EncodeChunkRecord(*c.record));
        } else {
          batch.Delete(ChunkKey(c.id));
        }
      }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rocksdb::Status rs = db_->Write(wo, &batch);
    Status result = rs.ok() ? Status() : RocksError(rs, "commit chunk metadata");
    if (result.ok()) result = RT_FAULT_POINT("iofs.chunk.after_meta_commit");
    if (rs.ok()) {
      // Committed: the in-memory state follows RocksDB even if a fault point fired after it.
      std::lock_guard alloc(alloc_mu_);
      for (CommitRequest* r : group) Apply(*r);
    }
    lock.lock();
    for (CommitRequest* r : group) {
      r->result = result;
      r->done = true;
    }
    committing_ = false;
    commit_cv_.notify_all();
  }
  return request->result;
}

void ChunkEngineImpl::Apply(const CommitRequest& request) {
  for (const Change& change : request.changes) {
    const ChunkId id = change.id;
    const std::optional<ChunkRecord>& record = change.record;
    auto it = chunks_.find(id);
    if (it != chunks_.end() && !change.moved_away && HasSlot(it->second.loc))
      slots_->Quarantine(it->second.loc);
    if (record) {
      chunks_[id] =
          Entry{record->loc, ChunkInfo{id, record->version, record->length, record->chunk_crc,
                                       record->loc.size_class == SizeClass::kSmall}};
    } else if (it != chunks_.end()) {
      chunks_.erase(it);
    }
  }
}

Status ChunkEngineImpl::ReadVerified(ChunkId id, uint64_t offset, uint64_t length, ChunkInfo* info,
                                     const std::function<void(const std::byte*, size_t)>& deliver,
                                     std::span<std::byte> direct) {
  std::shared_lock reuse(reuse_mu_);
  std::string value;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), ChunkKey(id), &value);
  if (rs.IsNotFound()) return NotFound("chunk " + Hex(id) + " not found");
  if (!rs.ok()) return RocksError(rs, "read metadata of chunk " + Hex(id));
  ASSIGN_OR_RETURN(ChunkRecord r, DecodeChunkRecord(value, Hex(id)));
  if (info)
    *info = ChunkInfo{id, r.version, r.length, r.chunk_crc, r.loc.size_class == SizeClass::kSmall};
  if (offset > r.length)
    return OutOfRange("read at offset " + std::to_string(offset) + " of chunk " + Hex(id) + " of " +
                      std::to_string(r.length) + " bytes");
  const uint64_t len = std::min<uint64_t>(length, r.length - offset);
  if (len == 0) return Status();
  const uint64_t b0 = offset / kBlockSize;
  const uint64_t b1 = (offset + len - 1) / kBlockSize;
  const uint64_t start = b0 * kBlockSize;
  const uint64_t end = std::min<uint64_t>((b1 + 1) * kBlockSize, r.length);
  const uint64_t io_len = RoundUp(end - start, kIoAlign);
  // Straight into the destination when it can take the whole aligned read: no bounce buffer, no
  // copy (the checksums are verified where the data landed).
  const bool straight = start == offset && io_len <= direct.size() &&
                        reinterpret_cast<uintptr_t>(direct.data()) % kIoAlign == 0;
  IoBuffer b;
  if (straight) {
    b.data = direct.data();
  } else {
    ASSIGN_OR_RETURN(std::vector<IoBuffer> bufs, executor_->AcquireBuffers(1, IoDeadline()));
    b = bufs[0];
  }
  IoOp op;
  op.kind = IoOp::Kind::kRead;
  op.file = slots_->RegisteredSlot(r.loc);
  op.buffer = b.index;
  op.data = b.data;
  op.length = static_cast<uint32_t>(io_len);
  op.offset = slots_->Offset(r.loc) + start;
  Status s = executor_->Run(std::span<IoOp>(&op, 1), IoDeadline());
  if (!s.ok()) return s.WithContext("read chunk " + Hex(id));
  auto fail = [&](Status st) {
    if (!straight) executor_->ReleaseBuffer(b);
    return st;
  };
  if (op.result != static_cast<int>(io_len))
    return fail(ErrnoStatus(op.result < 0 ? -op.result : EIO,
                            "read chunk " + Hex(id) + " from " + DataPath(r.loc)));
  std::vector<uint32_t> computed(b1 - b0 + 1);
  BlockCrcs(b.data, end - start, kBlockSize, computed);
  for (uint64_t blk = b0; blk <= b1; ++blk) {
    const uint32_t crc = computed[blk - b0];
    if (crc != r.block_crcs[blk])
      return fail(Status(StatusCode::kChecksumMismatch,
                         "chunk " + Hex(id) + " block " + std::to_string(blk) + " in " +
                             DataPath(r.loc) + " at offset " +
                             std::to_string(slots_->Offset(r.loc) + blk * kBlockSize) +
                             ": CRC32C " + std::to_string(crc) + " != stored " +
                             std::to_string(r.block_crcs[blk])));
  }
  // A whole-chunk read also checks the chunk CRC (combined from the block CRCs just computed).
  if (offset == 0 && len == r.length && CombineBlockCrcs(computed, r.length) != r.chunk_crc)
    return fail(Status(StatusCode::kChecksumMismatch,
                       "chunk " + Hex(id) + " in " + DataPath(r.loc) + ": chunk CRC32C mismatch"));
  deliver(b.data + (offset - start), len);
  if (!straight) executor_->ReleaseBuffer(b);
  return Status();
}

Result<PlannedRead> ChunkEngineImpl::PlanReadInto(ChunkId id, uint64_t offset,
                                                  std::span<std::byte> out) {
  if (offset % kBlockSize != 0 || reinterpret_cast<uintptr_t>(out.data()) % kIoAlign != 0)
    return FailedPrecondition("read of chunk " + Hex(id) + " at " + std::to_string(offset) +
                              " cannot land straight in the caller's memory (alignment)");
  // Never waits for a lock: a caller on an event loop goes elsewhere instead (FailedPrecondition).
  std::shared_lock reuse(reuse_mu_, std::try_to_lock);
  if (!reuse.owns_lock()) return FailedPrecondition("chunk slots are being recycled");
  std::string value;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), ChunkKey(id), &value);
  if (rs.IsNotFound()) return NotFound("chunk " + Hex(id) + " not found");
  if (!rs.ok()) return RocksError(rs, "read metadata of chunk " + Hex(id));
  ASSIGN_OR_RETURN(ChunkRecord r, DecodeChunkRecord(value, Hex(id)));
  if (offset > r.length)
    return OutOfRange("read at offset " + std::to_string(offset) + " of chunk " + Hex(id) + " of " +
                      std::to_string(r.length) + " bytes");
  PlannedRead plan;
  plan.info =
      ChunkInfo{id, r.version, r.length, r.chunk_crc, r.loc.size_class == SizeClass::kSmall};
  plan.offset = offset;
  plan.length = std::min<uint64_t>(out.size(), r.length - offset);
  plan.dest = out.data();
  if (plan.length == 0) return plan;
  const uint64_t b0 = offset / kBlockSize;
  const uint64_t b1 = (offset + plan.length - 1) / kBlockSize;
  const uint64_t end = std::min<uint64_t>((b1 + 1) * kBlockSize, r.length);
  const uint64_t io_len = RoundUp(end - offset, kIoAlign);
  if (io_len > out.size())
    return FailedPrecondition("read of chunk " + Hex(id) + " needs " + std::to_string(io_len) +
                              " bytes of room in the caller's memory, has " +
                              std::to_string(out.size()));
  plan.block_crcs.assign(r.block_crcs.begin() + static_cast<ptrdiff_t>(b0),
                         r.block_crcs.begin() + static_cast<ptrdiff_t>(b1 + 1));
  plan.io_length = static_cast<uint32_t>(io_len);
  {
    std::unique_lock lock(alloc_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return FailedPrecondition("the chunk allocator is busy");
    plan.fd = slots_->Fd(r.loc);
    plan.file_offset = slots_->Offset(r.loc) + offset;
  }
  if (plan.fd < 0) return Corruption("chunk " + Hex(id) + " refers to a missing data file");
  plan.file = DataPath(r.loc);
  planned_reads_.fetch_add(1);  // under the shared lock: the slot cannot be recycled from now on
  return plan;
}

void ChunkEngineImpl::CountRead(const Status& s, uint64_t bytes) {
  if (s.ok()) {
    read_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  } else if (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kOutOfRange) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
  }
}

Result<size_t> ChunkEngineImpl::VerifyPlannedRead(const PlannedRead& plan, int io_result) {
  if (plan.io_length == 0) return size_t{0};
  planned_reads_.fetch_sub(1);  // the bytes are in the caller's memory now (or never will be)
  const ChunkId id = plan.info.id;
  if (io_result != static_cast<int>(plan.io_length))
    return ErrnoStatus(io_result < 0 ? -io_result : EIO,
                       "read chunk " + Hex(id) + " from " + plan.file);
  const uint64_t end =
      std::min<uint64_t>(plan.offset + plan.block_crcs.size() * kBlockSize, plan.info.length);
  std::vector<uint32_t> computed(plan.block_crcs.size());
  BlockCrcs(plan.dest, end - plan.offset, kBlockSize, computed);
  for (size_t i = 0; i < computed.size(); ++i) {
    if (computed[i] == plan.block_crcs[i]) continue;
    const uint64_t blk = plan.offset / kBlockSize + i;
    return Status(StatusCode::kChecksumMismatch,
                  "chunk " + Hex(id) + " block " + std::to_string(blk) + " in " + plan.file +
                      " at offset " + std::to_string(plan.file_offset + i * kBlockSize) +
                      ": CRC32C " + std::to_string(computed[i]) + " != stored " +
                      std::to_string(plan.block_crcs[i]));
  }
  if (plan.offset == 0 && plan.length == plan.info.length &&
      CombineBlockCrcs(computed, plan.info.length) != plan.info.crc)
    return Status(StatusCode::kChecksumMismatch,
                  "chunk " + Hex(id) + " in " + plan.file + ": chunk CRC32C mismatch");
  return static_cast<size_t>(plan.length);
}

std::vector<std::string> ChunkEngineImpl::Check() {
  std::vector<std::string> problems;
  std::vector<ChunkInfo> all = List(0, UINT64_MAX);
  std::vector<std::byte> data;
  for (const ChunkInfo& c : all) {
    Status s = ReadAll(c.id, &data);
    if (!s.ok()) problems.push_back(s.ToString());
  }
  std::lock_guard lock(alloc_mu_);
  std::set<std::pair<uint32_t, uint32_t>> held;
  for (const auto& [id, e] : chunks_)
    if (HasSlot(e.loc) && !held.insert({e.loc.file, e.loc.slot}).second)
      problems.push_back("slot " + std::to_string(e.loc.slot) + " of " + DataPath(e.loc) +
                         " is held by two chunks");
  if (slots_->used_slots() != held.size())
    problems.push_back("allocator marks " + std::to_string(slots_->used_slots()) +
                       " slots used but " + std::to_string(held.size()) + " chunks hold slots");
  return problems;
}

}  // namespace

Result<std::unique_ptr<ChunkEngine>> ChunkEngine::Open(const ChunkEngineOptions& options) {
  auto engine = std::make_unique<ChunkEngineImpl>(options);
  RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<ChunkEngine>(std::move(engine));
}

}  // namespace rt::iofs
