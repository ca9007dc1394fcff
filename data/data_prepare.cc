#include "data/data_prepare.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "data/token_shard.h"

namespace rt {
namespace fs = std::filesystem;
namespace {

bool Skipped(const fs::path& p) { return p.extension() == ".dat" || p.extension() == ".u8"; }

Status CollectFiles(const std::string& input, std::vector<std::string>* files) {
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (!fs::exists(st)) return NotFound("input '" + input + "' does not exist");
  if (fs::is_regular_file(st)) {
    files->push_back(input);
    return Status();
  }
  std::vector<std::string> found;
  for (auto it = fs::recursive_directory_iterator(input, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file() && !Skipped(it->path())) found.push_back(it->path().string());
  }
  if (ec) return Status(StatusCode::kIoError, "walking '" + input + "': " + ec.message());
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return Status();
}

std::string ShardName(int index) {
  char name[32];
  std::snprintf(name, sizeof(name), "train_%03d.bin", index);
  return name;
}

}  // namespace

Result<PrepareSummary> PrepareData(const PrepareOptions& options, Tokenizer& tokenizer) {
  if (options.val_fraction <= 0 || options.val_fraction >= 1)
    return InvalidArgument("val fraction " + std::to_string(options.val_fraction) +
                           " is not in (0, 1)");
  std::vector<std::string> files;
  for (const std::string& input : options.inputs) RETURN_IF_ERROR(CollectFiles(input, &files));
  if (files.empty()) return InvalidArgument("no input files found");

  std::vector<uint16_t> train, val;
  const auto append = [&](std::vector<uint16_t>* out, std::string_view text) {
    for (int32_t id : tokenizer.Encode(text)) out->push_back(static_cast<uint16_t>(id));
    if (auto eot = tokenizer.end_of_text()) out->push_back(static_cast<uint16_t>(*eot));
  };
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(file));
    std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * (1 - options.val_fraction));
    cut = std::min(text.find('\n', cut), text.size());
    if (cut < text.size()) ++cut;  // the line break stays with the head
    if (cut > 0) append(&train, text.substr(0, cut));
    if (cut < text.size()) append(&val, text.substr(cut));
  }
  if (train.size() < 2 || val.size() < 2)
    return InvalidArgument("the inputs give " + std::to_string(train.size()) + " training and " +
                           std::to_string(val.size()) + " validation tokens; need at least 2 each");

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return Status(StatusCode::kIoError, "create '" + options.out_dir + "': " + ec.message());
  // Stale shards of an earlier run would join the training stream: remove them first.
  if (auto old = ListTrainShards(options.out_dir); old.ok()) {
    for (const std::string& path : *old) fs::remove(path, ec);
  }

  PrepareSummary summary;
  summary.files = static_cast<int64_t>(files.size());
  const size_t per_shard = static_cast<size_t>(std::max<int64_t>(options.shard_tokens, 2));
  for (size_t begin = 0; begin < train.size(); begin += per_shard) {
    const size_t n = std::min(per_shard, train.size() - begin);
    RETURN_IF_ERROR(WriteTokenShard(options.out_dir + "/" + ShardName(summary.train_shards),
                                    std::span(train).subspan(begin, n), tokenizer.vocab_size()));
    ++summary.train_shards;
  }
  RETURN_IF_ERROR(WriteTokenShard(options.out_dir + "/val.bin", val, tokenizer.vocab_size()));
  summary.train_tokens = static_cast<int64_t>(train.size());
  summary.val_tokens = static_cast<int64_t>(val.size());
  return summary;
}

Result<std::vector<std::string>> ListTrainShards(const std::string& dir) {
  std::vector<std::string> shards;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("train_") && name.ends_with(".bin")) shards.push_back(it->path().string());
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty())
    return NotFound("no training shards (train_*.bin) in '" + dir +
                    "'; run `ringtrain data prepare` first");
  return shards;
}

}  // namespace rt
