// The process-memory backend: files in a map keyed by path; folders exist implicitly while they
// hold a file. Every OpenStorage("mem://NAME") of one process shares the files of NAME.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "ckpt/storage/backends.h"

namespace rt::ckpt::internal {
namespace {

using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

struct MemoryFiles {
  std::mutex mu;
  std::map<std::string, Bytes> files;  // GUARDED_BY(mu)
};

class MemoryStorage;

class MemoryFileWriter : public StorageFileWriter {
 public:
  MemoryFileWriter(std::shared_ptr<MemoryFiles> files, std::string path)
      : files_(std::move(files)), path_(std::move(path)) {}
  Status Append(std::span<const uint8_t> bytes) override {
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    return Status();
  }
  Status Commit() override {
    auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(data_));
    std::lock_guard lock(files_->mu);
    files_->files[path_] = std::move(bytes);
    return Status();
  }

 private:
  std::shared_ptr<MemoryFiles> files_;
  std::string path_;
  std::vector<uint8_t> data_;
};

class MemoryStorage : public Storage {
 public:
  MemoryStorage(std::shared_ptr<MemoryFiles> files, std::string name)
      : files_(std::move(files)), name_(std::move(name)) {}

  Result<std::unique_ptr<StorageFileWriter>> CreateFile(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    return std::unique_ptr<StorageFileWriter>(new MemoryFileWriter(files_, path));
  }

  Result<std::vector<uint8_t>> ReadFile(const std::string& path) override {
    ASSIGN_OR_RETURN(Bytes bytes, Get(path));
    return *bytes;
  }

  Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) override {
    ASSIGN_OR_RETURN(Bytes bytes, Get(path));
    if (offset > bytes->size() || out.size() > bytes->size() - offset)
      return OutOfRange("file " + Name(path) + " is " + std::to_string(bytes->size()) +
                        " bytes: range [" + std::to_string(offset) + ", " +
                        std::to_string(offset + out.size()) + ") runs past its end (truncated?)");
    std::copy_n(bytes->data() + offset, out.size(), out.data());
    return Status();
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    RETURN_IF_ERROR(CheckPath(dir, true));
    const std::string prefix = dir.empty() ? "" : dir + "/";
    std::set<std::string> names;
    std::lock_guard lock(files_->mu);
    for (auto it = files_->files.lower_bound(prefix);
         it != files_->files.end() && it->first.starts_with(prefix); ++it) {
      const std::string rest = it->first.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    }
    return std::vector<std::string>(names.begin(), names.end());
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    ASSIGN_OR_RETURN(Bytes bytes, Get(path));
    return static_cast<uint64_t>(bytes->size());
  }

  Status Remove(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    std::lock_guard lock(files_->mu);
    files_->files.erase(path);
    const std::string prefix = path + "/";
    auto it = files_->files.lower_bound(prefix);
    while (it != files_->files.end() && it->first.starts_with(prefix)) it = files_->files.erase(it);
    return Status();
  }

  Status RenameAtomic(const std::string& from, const std::string& to) override {
    RETURN_IF_ERROR(CheckPath(from, false));
    RETURN_IF_ERROR(CheckPath(to, false));
    std::lock_guard lock(files_->mu);
    auto it = files_->files.find(from);
    if (it == files_->files.end()) return NotFound("rename: " + Name(from) + " does not exist");
    Bytes bytes = it->second;
    files_->files.erase(it);
    files_->files[to] = std::move(bytes);
    return Status();
  }

  std::string uri() const override { return "mem://" + name_; }

 private:
  std::string Name(const std::string& path) const { return uri() + "/" + path; }

  Result<Bytes> Get(const std::string& path) {
    RETURN_IF_ERROR(CheckPath(path, false));
    std::lock_guard lock(files_->mu);
    auto it = files_->files.find(path);
    if (it == files_->files.end())
      return NotFound("checkpoint file " + Name(path) + " does not exist");
    return it->second;
  }

  std::shared_ptr<MemoryFiles> files_;
  std::string name_;
};

}  // namespace

std::shared_ptr<Storage> OpenMemoryStorage(const std::string& name) {
  static std::mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<MemoryFiles>>();  // never freed
  std::lock_guard lock(mu);
  auto& files = (*stores)[name];
  if (!files) files = std::make_shared<MemoryFiles>();
  return std::make_shared<MemoryStorage>(files, name);
}

}  // namespace rt::ckpt::internal
