#include "ckpt/reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "base/crc32c.h"
#include "base/log.h"
#include "ckpt/write_plan.h"
#include "kernels/ops.h"

namespace rt::ckpt {
namespace {

constexpr int kReadThreads = 4;
// Pieces of one file merge into one read while the bytes between them are at most
// kMergeGapBytes and the read stays within kMaxMergedReadBytes.
constexpr uint64_t kMergeGapBytes = 64 << 10;
constexpr uint64_t kMaxMergedReadBytes = 16 << 20;
// Memory for `n` bytes that a read fills, without zeroing it first (std::vector would).
std::unique_ptr<uint8_t[]> ReadBuffer(uint64_t n) {
  return std::unique_ptr<uint8_t[]>(new uint8_t[n]);
}

std::string ShardName(const TensorShard& s) {
  return std::string(StateKindName(s.kind)) + " '" + s.name + "'";
}

// Runs fn(i) for i in [0, n) on up to `threads` threads; returns the first error.
Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (first.ok()) first = std::move(s);
        next.store(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && static_cast<size_t>(t) < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(std::shared_ptr<Storage> storage,
                                                                 int64_t step) {
  const std::string path = JoinPath(StepDir(step), kManifestFile);
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, storage->ReadFile(path));
  ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, storage->uri() + "/" + path));
  if (m.step != step)
    return Corruption(storage->uri() + "/" + path + " holds step " + std::to_string(m.step));
  return std::unique_ptr<CheckpointReader>(
      new CheckpointReader(std::move(storage), std::move(m), bytes.size()));
}

std::string CheckpointReader::Where(const TensorEntry& t, const StoredPiece& p) const {
  std::string s = storage_->uri() + "/" + FilePath(p.file) + " bytes [" + std::to_string(p.offset) +
                  ", " + std::to_string(p.offset + p.length) + ") of " + StateKindName(t.kind) +
                  " '" + t.name + "' box " + p.box_offset.ToString() + "+" + p.box_size.ToString();
  if (p.has_flat_range)
    s += " flat [" + std::to_string(p.flat_begin) + ", " + std::to_string(p.flat_end) + ")";
  return s;
}

std::string CheckpointReader::FilePath(uint32_t file) const {
  return JoinPath(StepDir(manifest_.step), manifest_.files[file]);
}

Result<std::span<const uint8_t>> CheckpointReader::DecodePiece(
    const TensorEntry& t, const StoredPiece& p, std::span<const uint8_t> stored,
    std::vector<uint8_t>* scratch) const {
  const uint32_t crc = Crc32c(stored.data(), stored.size());
  if (crc != p.crc32c)
    return Corruption(Where(t, p) + ": CRC32C mismatch (stored " + std::to_string(p.crc32c) +
                      ", computed " + std::to_string(crc) + ")");
  if (p.codec == Codec::kNone) return stored;
  scratch->resize(p.raw_length);
  RETURN_IF_ERROR(Decode(p.codec, DTypeSize(t.dtype), stored, *scratch).WithContext(Where(t, p)));
  return std::span<const uint8_t>(*scratch);
}

Status CheckpointReader::ReadPieces(
    const std::vector<PieceRef>& pieces,
    const std::function<Status(size_t k, std::span<const uint8_t> raw)>& use,
    const std::function<void(Status)>& on_error, const std::function<uint8_t*(size_t k)>& direct) {
  auto stored_of = [&](size_t k) -> const StoredPiece& {
    return pieces[k].tensor->pieces[pieces[k].piece];
  };
  // Where each piece read straight into its destination goes (nullptr: through a buffer).
  std::vector<uint8_t*> direct_to(pieces.size(), nullptr);
  if (direct)
    for (size_t k = 0; k < pieces.size(); ++k)
      if (stored_of(k).codec == Codec::kNone && stored_of(k).length >= direct_read_bytes_)
        direct_to[k] = direct(k);
  // In file order, so that neighbours merge and consecutive reads are near each other.
  std::vector<size_t> order(pieces.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(stored_of(a).file, stored_of(a).offset) <
           std::tie(stored_of(b).file, stored_of(b).offset);
  });
  struct MergedRead {
    uint32_t file;
    uint64_t begin, end;     // bytes [begin, end) of the file
    std::vector<size_t> ks;  // the pieces it holds
  };
  std::vector<MergedRead> reads;
  for (size_t k : order) {
    const StoredPiece& p = stored_of(k);
    const uint64_t end = p.offset + p.length;
    if (direct_to[k] != nullptr) {  // a read of its own, never merged
      reads.push_back(MergedRead{p.file, p.offset, end, {k}});
      continue;
    }
    if (!reads.empty() && !(reads.back().ks.size() == 1 && direct_to[reads.back().ks[0]])) {
      MergedRead& r = reads.back();
      const uint64_t merged_end = std::max(r.end, end);
      if (r.file == p.file && (p.offset <= r.end || p.offset - r.end <= kMergeGapBytes) &&
          merged_end - r.begin <= kMaxMergedReadBytes) {
        r.end = merged_end;
        r.ks.push_back(k);
        continue;
      }
    }
    reads.push_back(MergedRead{p.file, p.offset, end, {k}});
  }
  // Decodes and uses piece k from `stored` (its bytes).
  auto finish = [&](size_t k, std::span<const uint8_t> stored) -> Status {
    std::vector<uint8_t> scratch;
    ASSIGN_OR_RETURN(std::span<const uint8_t> raw,
                     DecodePiece(*pieces[k].tensor, stored_of(k), stored, &scratch));
    return use(k, raw);
  };
  std::mutex mu;  // serializes on_error
  return ParallelFor(reads.size(), kReadThreads, [&](size_t i) -> Status {
    const MergedRead& r = reads[i];
    // A lone piece, or the pieces of a merged read that failed, are read one by one — unless
    // the storage is out of reach or too slow now: every piece would wait for it again.
    std::unique_ptr<uint8_t[]> buffer;
    std::span<uint8_t> bytes;
    bool merged = false;
    if (r.ks.size() > 1) {
      buffer = ReadBuffer(r.end - r.begin);
      bytes = std::span<uint8_t>(buffer.get(), r.end - r.begin);
      Status read = storage_->ReadRange(FilePath(r.file), r.begin, bytes);
      merged = read.ok();
      if (merged) bytes_read_.fetch_add(bytes.size(), std::memory_order_relaxed);
      if (StorageOutOfReach(read)) {
        read = read.WithContext(Where(*pieces[r.ks.front()].tensor, stored_of(r.ks.front())) +
                                " and " + std::to_string(r.ks.size() - 1) +
                                " more pieces read with it");
        if (!on_error) return read;
        std::lock_guard lock(mu);
        on_error(std::move(read));
        return Status();
      }
    }
    for (size_t k : r.ks) {
      const StoredPiece& p = stored_of(k);
      Status s;
      if (merged) {
        s = finish(k, std::span<const uint8_t>(bytes).subspan(p.offset - r.begin, p.length));
      } else {
        if (direct_to[k] == nullptr) buffer = ReadBuffer(p.length);
        const std::span<uint8_t> stored(direct_to[k] ? direct_to[k] : buffer.get(), p.length);
        s = storage_->ReadRange(FilePath(p.file), p.offset, stored)
                .WithContext(Where(*pieces[k].tensor, p));
        if (s.ok()) {
          bytes_read_.fetch_add(stored.size(), std::memory_order_relaxed);
          if (direct_to[k] == nullptr) {
            s = finish(k, stored);
          } else {  // in place already: only its check
            std::vector<uint8_t> unused;
            s = DecodePiece(*pieces[k].tensor, p, stored, &unused).status();
          }
        }
      }
      if (s.ok()) continue;
      if (!on_error) return s;
      std::lock_guard lock(mu);
      on_error(std::move(s));
    }
    return Status();
  });
}

Status CheckpointReader::Load(const StateShards& dest) {
  // Destination memory: the view itself on the CPU, a host staging copy otherwise.
  std::vector<std::vector<uint8_t>> staging(dest.shards.size());
  std::vector<uint8_t*> target(dest.shards.size());
  std::vector<const TensorEntry*> tensor_of(dest.shards.size());
  // For every stored piece that some destination needs: the destinations it overlaps.
  std::map<std::pair<const TensorEntry*, size_t>, std::vector<size_t>> work;
  std::vector<int64_t> covered(dest.shards.size(), 0);
  for (size_t i = 0; i < dest.shards.size(); ++i) {
    const TensorShard& s = dest.shards[i];
    const Region region = ckpt::RegionOf(s);
    RETURN_IF_ERROR(CheckRegion(region).WithContext("destination " + ShardName(s)));
    if (s.view.numel() != region.numel() || s.view.dtype() != s.dtype)
      return InvalidArgument("destination " + ShardName(s) + ": view " + s.view.Describe() +
                             " does not hold its " + std::to_string(region.numel()) + " elements");
    const TensorEntry* t = manifest_.Find(s.kind, s.name);
    if (t == nullptr)
      return NotFound("checkpoint step " + std::to_string(manifest_.step) + " in " +
                      storage_->uri() + " has no " + ShardName(s));
    if (t->global_shape != s.global_shape || t->dtype != s.dtype)
      return FailedPrecondition(ShardName(s) + ": the checkpoint holds shape " +
                                t->global_shape.ToString() + " " +
                                std::string(DTypeName(t->dtype)) + ", the destination wants " +
                                s.global_shape.ToString() + " " + std::string(DTypeName(s.dtype)));
    tensor_of[i] = t;
    if (s.view.device() == Device::kCpu) {
      target[i] = static_cast<uint8_t*>(s.view.data());
    } else {
      staging[i].resize(s.view.nbytes());
      target[i] = staging[i].data();
    }
    for (size_t pi = 0; pi < t->pieces.size(); ++pi) {
      int64_t overlap = 0;
      ForEachOverlap(RegionOf(*t, t->pieces[pi]), region,
                     [&](int64_t, int64_t, int64_t n) { overlap += n; });
      if (overlap == 0) continue;
      covered[i] += overlap;
      work[{t, pi}].push_back(i);
    }
    if (covered[i] != region.numel())
      return Corruption("checkpoint step " + std::to_string(manifest_.step) + ": the pieces of " +
                        ShardName(s) + " cover " + std::to_string(covered[i]) + " of the " +
                        std::to_string(region.numel()) + " elements of destination box " +
                        s.box_offset.ToString() + "+" + s.box_size.ToString());
  }
  std::vector<PieceRef> refs;
  std::vector<const std::vector<size_t>*> users;  // per ref: the destinations it fills
  for (const auto& [piece, destinations] : work) {
    refs.push_back(PieceRef{piece.first, piece.second});
    users.push_back(&destinations);
  }
  // A piece that lands whole and contiguous in one destination is read straight into it.
  auto direct = [&](size_t k) -> uint8_t* {
    const TensorEntry& t = *refs[k].tensor;
    const StoredPiece& p = t.pieces[refs[k].piece];
    if (users[k]->size() != 1) return nullptr;
    const size_t i = users[k]->front();
    // The overlap as runs that continue one another on both sides must start at the piece's
    // first element, at some `at` of the destination, and hold all of the piece.
    const int64_t elements = static_cast<int64_t>(p.raw_length / DTypeSize(t.dtype));
    bool contiguous = true;
    int64_t at = -1, next_a = 0, next_b = -1;
    ForEachOverlap(RegionOf(t, p), ckpt::RegionOf(dest.shards[i]),
                   [&](int64_t a, int64_t b, int64_t n) {
                     if (at < 0)
                       at = b;
                     else if (b != next_b)
                       contiguous = false;
                     if (a != next_a) contiguous = false;
                     next_a = a + n;
                     next_b = b + n;
                   });
    return contiguous && at >= 0 && next_a == elements ? target[i] + at * DTypeSize(t.dtype)
                                                       : nullptr;
  };
  RETURN_IF_ERROR(ReadPieces(
      refs,
      [&](size_t k, std::span<const uint8_t> raw) -> Status {
        const TensorEntry& t = *refs[k].tensor;
        const StoredPiece& p = t.pieces[refs[k].piece];
        const size_t esize = DTypeSize(t.dtype);
        for (size_t i : *users[k]) {
          uint8_t* out = target[i];
          ForEachOverlap(RegionOf(t, p), ckpt::RegionOf(dest.shards[i]),
                         [&](int64_t a, int64_t b, int64_t n) {
                           std::memcpy(out + b * esize, raw.data() + a * esize, n * esize);
                         });
        }
        return Status();
      },
      {}, direct));
  for (size_t i = 0; i < dest.shards.size(); ++i) {
    if (staging[i].empty()) continue;
    const TensorShard& s = dest.shards[i];
    const Tensor host(staging[i].data(), s.dtype, Shape{s.view.numel()});
    const Tensor device(s.view.data(), s.dtype, Shape{s.view.numel()}, s.view.device());
    RETURN_IF_ERROR(Copy(device, host).WithContext("load of " + ShardName(s)));
  }
  return Status();
}

Result<std::vector<std::string>> CheckpointReader::Verify() {
  std::vector<std::string> problems;
  std::vector<PieceRef> pieces;
  for (const TensorEntry& t : manifest_.tensors)
    for (size_t p = 0; p < t.pieces.size(); ++p) pieces.push_back(PieceRef{&t, p});
  (void)ReadPieces(
      pieces, [](size_t, std::span<const uint8_t>) { return Status(); },
      [&](Status s) { problems.push_back(s.ToString()); });
  for (const TensorEntry& t : manifest_.tensors) {
    const int64_t n = t.global_shape.numel();
    std::vector<uint8_t> count(static_cast<size_t>(n), 0);
    Region whole;
    whole.global_shape = t.global_shape;
    whole.box_offset.ndim = whole.box_size.ndim = t.global_shape.ndim;
    for (int d = 0; d < t.global_shape.ndim; ++d) whole.box_size.dims[d] = t.global_shape.dims[d];
    for (const StoredPiece& p : t.pieces)
      ForEachOverlap(RegionOf(t, p), whole, [&](int64_t, int64_t g, int64_t len) {
        for (int64_t e = g; e < g + len; ++e) count[e] = count[e] < 2 ? count[e] + 1 : 2;
      });
    int64_t missing = 0, doubled = 0, first_bad = -1;
    for (int64_t e = 0; e < n; ++e) {
      if (count[e] == 1) continue;
      (count[e] == 0 ? missing : doubled)++;
      if (first_bad < 0) first_bad = e;
    }
    if (missing || doubled)
      problems.push_back(std::string(StateKindName(t.kind)) + " '" + t.name +
                         "': " + std::to_string(missing) + " elements not stored, " +
                         std::to_string(doubled) + " stored more than once (first at flat index " +
                         std::to_string(first_bad) + ")");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> names, storage_->List(StepDir(manifest_.step)));
  const std::set<std::string> wanted(manifest_.files.begin(), manifest_.files.end());
  for (const std::string& name : names)
    if (name != kManifestFile && !wanted.contains(name) && !name.ends_with(".frag"))
      problems.push_back(storage_->uri() + "/" + JoinPath(StepDir(manifest_.step), name) +
                         ": file not named by the manifest");
  for (const std::string& file : manifest_.files)
    if (std::find(names.begin(), names.end(), file) == names.end())
      problems.push_back(storage_->uri() + "/" + JoinPath(StepDir(manifest_.step), file) +
                         ": data file missing");
  return problems;
}

Result<int64_t> LoadNewest(std::shared_ptr<Storage> storage, const StateShards& dest,
                           std::string* engine_state) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommitted(*storage));
  if (steps.empty()) return NotFound("no committed checkpoint in " + storage->uri());
  Status last;
  for (int64_t step : steps) {
    auto reader = CheckpointReader::Open(storage, step);
    Status s = reader.status();
    if (s.ok()) s = (*reader)->Load(dest);
    if (s.ok()) {
      if (engine_state) *engine_state = (*reader)->manifest().engine_state;
      return step;
    }
    LOG_WARN("checkpoint step {} in {} cannot be loaded ({}); trying an older one", step,
             storage->uri(), s.ToString());
    last = s;
  }
  return last.WithContext("no committed checkpoint in " + storage->uri() + " loads");
}

}  // namespace rt::ckpt
