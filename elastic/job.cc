#include "elastic/job.h"

#include "base/file.h"

namespace rt::elastic {

void BindJobKeys(JobSpec* job, ConfigSchema* s) {
  ElasticPolicy* e = &job->elastic;
  s->String("job.name", &job->name, "job name shown by ringctl and in metrics");
  s->Int("elastic.tp", &e->tp, 1, 1024, "tensor-parallel ranks, inside one node");
  s->Int("elastic.pp", &e->pp, 1, 1024, "pipeline stages (the fewest when pp_max is set)");
  s->Int("elastic.pp_max", &e->pp_max, 0, 1024, "most pipeline stages (0 = pp, fixed)");
  s->Int("elastic.zero", &e->zero, 0, 3, "ZeRO stage");
  s->Int("elastic.hsdp_shard", &e->hsdp_shard, 0, 1 << 20,
         "HSDP: ranks sharding ZeRO state (0 = all dp ranks)");
  s->Bool("elastic.sp", &e->sequence_parallel, "sequence parallelism (tp > 1)");
  s->Enum("elastic.schedule", &e->schedule, {"gpipe", "1f1b", "interleaved"}, "pipeline schedule");
  s->Int("elastic.vpp", &e->vpp, 1, 64, "model chunks per pipeline rank (interleaved)");
  s->Int("elastic.min_nodes", &e->min_nodes, 1, 1 << 20, "fewer live nodes: the job waits");
  s->Int("elastic.max_nodes", &e->max_nodes, 0, 1 << 20, "most nodes used (0 = all)");
  s->Int("elastic.micro_rows", &e->micro_rows, 0, 1 << 20,
         "most rows per rank per micro-batch (0 = batch_size / micro_batches)");
}

Result<JobSpec> ParseJobSpec(std::string text, const std::string& source) {
  JobSpec job;
  ConfigSchema schema;
  BindRunConfig(&job.run, &schema);
  BindJobKeys(&job, &schema);
  RequireModelKeys(&schema);
  ASSIGN_OR_RETURN(ConfigFile file, ConfigFile::Parse(text, source));
  RETURN_IF_ERROR(schema.Read(file));
  RETURN_IF_ERROR(ValidateRunConfig(job.run).WithContext(source));
  const ElasticPolicy& e = job.elastic;
  if (e.pp_max != 0 && e.pp_max < e.pp)
    return InvalidArgument(source + ": elastic.pp_max (" + std::to_string(e.pp_max) +
                           ") is below elastic.pp (" + std::to_string(e.pp) + ")");
  if (e.hsdp_shard != 0 && e.zero == 0)
    return InvalidArgument(source + ": elastic.hsdp_shard needs elastic.zero ≥ 1");
  if (e.max_nodes != 0 && e.max_nodes < e.min_nodes)
    return InvalidArgument(source + ": elastic.max_nodes (" + std::to_string(e.max_nodes) +
                           ") is below elastic.min_nodes (" + std::to_string(e.min_nodes) + ")");
  if (e.schedule == "interleaved" && e.pp < 2)
    return InvalidArgument(source + ": elastic.schedule = \"interleaved\" needs elastic.pp ≥ 2");
  job.text = std::move(text);
  return job;
}

Result<JobSpec> LoadJobSpec(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
  return ParseJobSpec(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace rt::elastic
