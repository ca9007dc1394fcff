// ringckpt reshard: the checkpoint rewritten for another layout. Every target rank's pieces come
// from parallel/shard_plan.h (the engine's own plan, from the run config and the layout alone),
// are loaded from the source with re-sharding, and are saved by one writer per target rank, so
// the stored pieces follow the target's shards and loading there reads each piece whole.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/config.h"
#include "ckpt/writer.h"
#include "parallel/config.h"
#include "parallel/layout.h"
#include "parallel/shard_plan.h"
#include "tools/ringckpt/commands.h"

namespace ringckpt {

rt::Result<rt::RunConfig> ConfigOf(const rt::ckpt::Manifest& m, const std::string& path,
                                   std::string* text) {
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) return rt::NotFound("config file " + path + " cannot be read");
    std::stringstream buffer;
    buffer << in.rdbuf();
    *text = buffer.str();
    return rt::LoadRunConfig(path, {});
  }
  *text = m.config_toml;
  ASSIGN_OR_RETURN(rt::ConfigFile file,
                   rt::ConfigFile::Parse(m.config_toml, "the config recorded in the checkpoint"));
  rt::RunConfig config;
  rt::ConfigSchema schema;
  rt::BindRunConfig(&config, &schema);
  rt::RequireModelKeys(&schema);
  RETURN_IF_ERROR(schema.Read(file).WithContext("pass --config FILE to override it"));
  RETURN_IF_ERROR(rt::ValidateRunConfig(config));
  return config;
}

namespace {

rt::Status Run(const Source& source, const ReshardOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<rt::ckpt::CheckpointReader> reader, OpenSource(source));
  const rt::ckpt::Manifest& m = reader->manifest();
  std::string config_text;
  ASSIGN_OR_RETURN(rt::RunConfig config, ConfigOf(m, o.config, &config_text));
  ASSIGN_OR_RETURN(rt::Precision precision, rt::ParsePrecision(config.train.precision));
  ASSIGN_OR_RETURN(rt::parallel::ParallelLayout layout, rt::parallel::ParseLayout(o.to));
  ASSIGN_OR_RETURN(rt::ckpt::Codec codec, rt::ckpt::ParseCodec(o.codec));
  ASSIGN_OR_RETURN(std::shared_ptr<rt::ckpt::Storage> dest,
                   rt::ckpt::OpenStorage(o.out, o.storage));
  const std::string run_id = rt::ckpt::NewRunId();
  const int world = layout.world();
  std::vector<std::unique_ptr<rt::ckpt::CheckpointWriter>> writers;
  for (int rank = 0; rank < world; ++rank) {
    ASSIGN_OR_RETURN(std::vector<rt::parallel::PlannedShard> planned,
                     rt::parallel::PlanRankShardsOf(config.model, precision, layout, rank));
    // Only the pieces this rank stores (the others' holders store them); their memory is freed
    // once the writer has its snapshot.
    rt::ckpt::StateShards shards;
    std::vector<std::vector<uint8_t>> memory;
    memory.reserve(planned.size());
    for (rt::parallel::PlannedShard& p : planned) {
      rt::ckpt::TensorShard s = std::move(p.shard);
      if (s.replica >= s.replica_count) continue;
      memory.emplace_back(static_cast<size_t>(p.count) * rt::DTypeSize(s.dtype));
      s.view = rt::Tensor(memory.back().data(), s.dtype, rt::Shape{p.count});
      shards.shards.push_back(std::move(s));
    }
    RETURN_IF_ERROR(reader->Load(shards).WithContext("target rank " + std::to_string(rank)));
    rt::ckpt::WriterOptions w;
    w.storage = dest;
    w.rank = rank;
    w.world = world;
    w.run_id = run_id;
    w.config_toml = config_text;
    w.layout = rt::parallel::DescribeLayout(layout);
    w.codec = codec;
    w.keep = 1 << 20;  // never retire checkpoints already in the destination
    ASSIGN_OR_RETURN(auto writer, rt::ckpt::CheckpointWriter::Create(w));
    RETURN_IF_ERROR(writer->Save(m.step, shards, m.engine_state));
    writers.push_back(std::move(writer));
  }
  rt::Status first;
  for (auto& writer : writers) {
    rt::Status s = writer->Wait(rt::Deadline::AfterMs(3600 * 1000));
    if (first.ok() && !s.ok()) first = s;
  }
  RETURN_IF_ERROR(first);
  std::printf("resharded step %lld from %s (%s) to %s (%s, %d ranks)\n",
              static_cast<long long>(m.step), source.uri.c_str(), m.layout.c_str(), o.out.c_str(),
              rt::parallel::DescribeLayout(layout).c_str(), world);
  return rt::Status();
}

}  // namespace

int Reshard(const Source& source, const ReshardOptions& options) {
  rt::Status s = Run(source, options);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace ringckpt
