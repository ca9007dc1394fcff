#include "parallel/layout.h"

#include <charconv>
#include <vector>

#include "model/gpt.h"

namespace rt::parallel {
namespace {

Result<int> ParsePositive(std::string_view key, std::string_view value, int min) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < min)
    return InvalidArgument("layout: '" + std::string(key) + "' must be an integer ≥ " +
                           std::to_string(min) + ", got '" + std::string(value) + "'");
  return v;
}

}  // namespace

std::string_view PipelineScheduleName(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGpipe:
      return "gpipe";
    case PipelineSchedule::kOneFOneB:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

Result<ParallelLayout> ParseLayout(std::string_view spec) {
  ParallelLayout l;
  int dp = 1, hsdp_shard = 0, vpp = 0;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return InvalidArgument("layout: expected key=value, got '" + std::string(item) + "'");
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "tp") {
      ASSIGN_OR_RETURN(l.tp, ParsePositive(key, value, 1));
    } else if (key == "pp") {
      ASSIGN_OR_RETURN(l.pp, ParsePositive(key, value, 1));
    } else if (key == "dp") {
      ASSIGN_OR_RETURN(dp, ParsePositive(key, value, 1));
    } else if (key == "hsdp_shard") {
      ASSIGN_OR_RETURN(hsdp_shard, ParsePositive(key, value, 1));
    } else if (key == "zero") {
      ASSIGN_OR_RETURN(l.zero, ParsePositive(key, value, 0));
      if (l.zero > 3)
        return InvalidArgument("layout: 'zero' must be 0, 1, 2 or 3, got " + std::string(value));
    } else if (key == "sp") {
      ASSIGN_OR_RETURN(int sp, ParsePositive(key, value, 0));
      if (sp > 1) return InvalidArgument("layout: 'sp' must be 0 or 1, got " + std::string(value));
      l.sequence_parallel = sp == 1;
    } else if (key == "vpp") {
      ASSIGN_OR_RETURN(vpp, ParsePositive(key, value, 1));
    } else if (key == "schedule") {
      if (value == "gpipe") {
        l.schedule = PipelineSchedule::kGpipe;
      } else if (value == "1f1b") {
        l.schedule = PipelineSchedule::kOneFOneB;
      } else if (value == "interleaved") {
        l.schedule = PipelineSchedule::kInterleaved;
      } else {
        return InvalidArgument("layout: unknown schedule '" + std::string(value) +
                               "' (expected gpipe, 1f1b or interleaved)");
      }
    } else {
      return InvalidArgument("layout: unknown key '" + std::string(key) +
                             "' (expected tp, pp, dp, zero, hsdp_shard, sp, schedule, vpp)");
    }
  }
  if (l.schedule == PipelineSchedule::kInterleaved) {
    if (l.pp < 2) return InvalidArgument("layout: schedule=interleaved needs pp ≥ 2");
    l.virtual_stages = vpp == 0 ? 2 : vpp;
  } else if (vpp > 1) {
    return InvalidArgument("layout: 'vpp' (" + std::to_string(vpp) +
                           ") needs schedule=interleaved");
  }
  if (hsdp_shard == 0) {
    l.dp_shard = dp;
  } else {
    if (l.zero == 0) return InvalidArgument("layout: 'hsdp_shard' needs zero ≥ 1");
    if (dp % hsdp_shard != 0)
      return InvalidArgument("layout: 'hsdp_shard' (" + std::to_string(hsdp_shard) +
                             ") must divide 'dp' (" + std::to_string(dp) + ")");
    l.dp_shard = hsdp_shard;
    l.dp_replicate = dp / hsdp_shard;
  }
  return l;
}

std::string DescribeLayout(const ParallelLayout& l) {
  std::string s = "tp=" + std::to_string(l.tp) + ",pp=" + std::to_string(l.pp) +
                  ",dp=" + std::to_string(l.dp()) + ",zero=" + std::to_string(l.zero);
  if (l.dp_replicate > 1) s += ",hsdp_shard=" + std::to_string(l.dp_shard);
  s += ",sp=" + std::string(l.sequence_parallel ? "1" : "0");
  s += ",schedule=" + std::string(PipelineScheduleName(l.schedule));
  if (l.schedule == PipelineSchedule::kInterleaved) s += ",vpp=" + std::to_string(l.virtual_stages);
  return s;
}

Status CheckLayoutFits(const RunConfig& config, const ParallelLayout& layout) {
  const ModelConfig& m = config.model;
  if (m.n_head % layout.tp != 0 || m.vocab_size % layout.tp != 0)
    return InvalidArgument("layout tp=" + std::to_string(layout.tp) +
                           " must divide model.n_head (" + std::to_string(m.n_head) +
                           ") and model.vocab_size (" + std::to_string(m.vocab_size) + ")");
  if (layout.sequence_parallel && m.seq_len % layout.tp != 0)
    return InvalidArgument("layout sp=1: tp=" + std::to_string(layout.tp) +
                           " must divide model.seq_len (" + std::to_string(m.seq_len) + ")");
  const int micro = config.train.micro_batches;
  if (layout.schedule == PipelineSchedule::kInterleaved && micro % layout.pp != 0)
    return InvalidArgument("schedule=interleaved: train.micro_batches (" + std::to_string(micro) +
                           ") must be a multiple of pp (" + std::to_string(layout.pp) + ")");
  RETURN_IF_ERROR(ParsePrecision(config.train.precision).status());
  const int dp = layout.dp();
  if (config.train.batch_size % (dp * micro) != 0)
    return InvalidArgument("train.batch_size (" + std::to_string(config.train.batch_size) +
                           ") must be divisible by dp (" + std::to_string(dp) +
                           ") × train.micro_batches (" + std::to_string(micro) + ")");
  if (layout.pp * layout.virtual_stages > m.n_layer + 2)
    return InvalidArgument("layout pp=" + std::to_string(layout.pp) +
                           " × vpp=" + std::to_string(layout.virtual_stages) +
                           " exceeds model.n_layer + 2 (" + std::to_string(m.n_layer + 2) + ")");
  return Status();
}

RankCoords CoordsOf(const ParallelLayout& l, int rank) {
  RankCoords c;
  c.tp = rank % l.tp;
  rank /= l.tp;
  c.dp_shard = rank % l.dp_shard;
  rank /= l.dp_shard;
  c.dp_replicate = rank % l.dp_replicate;
  c.pp = rank / l.dp_replicate;
  c.dp = c.dp_replicate * l.dp_shard + c.dp_shard;
  return c;
}

int RankOf(const ParallelLayout& l, const RankCoords& c) {
  return ((c.pp * l.dp_replicate + c.dp_replicate) * l.dp_shard + c.dp_shard) * l.tp + c.tp;
}

Result<ProcessGroups> BuildProcessGroups(comm::Communicator& world, const ParallelLayout& l,
                                         Deadline deadline) {
  if (world.size() != l.world())
    return InvalidArgument("layout " + DescribeLayout(l) + " needs " + std::to_string(l.world()) +
                           " ranks, the world has " + std::to_string(world.size()));
  const RankCoords c = CoordsOf(l, world.rank());
  ProcessGroups g;
  g.world = &world;
  // A color is the rank with the group's own coordinate set to 0: unique per group.
  auto color_without = [&](RankCoords k) { return RankOf(l, k); };
  RankCoords k = c;
  k.tp = 0;
  ASSIGN_OR_RETURN(g.tp, world.Split(color_without(k), c.tp, deadline, "tp"));
  k = c;
  k.dp_shard = 0;
  ASSIGN_OR_RETURN(g.dp_shard, world.Split(color_without(k), c.dp_shard, deadline, "dp_shard"));
  k = c;
  k.dp_replicate = 0;
  ASSIGN_OR_RETURN(g.dp_replicate,
                   world.Split(color_without(k), c.dp_replicate, deadline, "dp_replicate"));
  k = c;
  k.pp = 0;
  ASSIGN_OR_RETURN(g.pp_forward, world.Split(color_without(k), c.pp, deadline, "pp_forward"));
  ASSIGN_OR_RETURN(g.pp_backward, world.Split(color_without(k), c.pp, deadline, "pp_backward"));
  const bool end_stage = l.pp > 1 && (c.pp == 0 || c.pp == l.pp - 1);
  ASSIGN_OR_RETURN(g.embedding,
                   world.Split(end_stage ? color_without(k) : -1, c.pp, deadline, "embedding"));
  const std::pair<const char*, comm::Communicator*> groups[] = {
      {"tp", g.tp.get()},
      {"dp_shard", g.dp_shard.get()},
      {"dp_replicate", g.dp_replicate.get()},
      {"pp_forward", g.pp_forward.get()},
      {"pp_backward", g.pp_backward.get()},
      {"embedding", g.embedding.get()}};
  for (const auto& [name, group] : groups) {
    if (group == nullptr) continue;
    RETURN_IF_ERROR(group->WaitReady(deadline).WithContext(std::string("process group ") + name));
  }
  return g;
}

}  // namespace rt::parallel
