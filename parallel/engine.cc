#include "parallel/engine.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/optimizer.h"
#include "parallel/step_policy.h"

namespace rt::parallel {

// A gradient reduction in flight: phase 0 is the reduction over dp_shard, phase 1 the
// all-reduce across replica groups (HSDP).
struct DistTrainer::Pending {
  int unit = 0;
  int phase = 0;
  comm::WorkHandle first;  // ZeRO-0/1: the reduce-scatter (`work` follows it in issue order)
  comm::WorkHandle work;
  Buffer scratch;  // ZeRO-0/1: the reduce-scatter output
};

namespace {

// ZeRO-2/3: unit reduce-scatters in flight during the backward (each holds a full unit gradient).
constexpr size_t kMaxReductionsInFlight = 2;

double Now() { return MonoSeconds(); }

Status WaitFor(const comm::WorkHandle& work, Deadline deadline, const std::string& what) {
  return work->Wait(deadline).WithContext(what);
}

// WaitFor that adds the seconds it waited to `*waited`.
Status WaitTimed(const comm::WorkHandle& work, Deadline deadline, const std::string& what,
                 double* waited) {
  const double t0 = Now();
  Status s = WaitFor(work, deadline, what);
  *waited += Now() - t0;
  return s;
}

}  // namespace

DistTrainer::~DistTrainer() = default;

comm::CommOptions EngineCommOptions(comm::CommOptions base) {
  base.small_message_bytes = 0;
  return base;
}

Result<std::unique_ptr<DistTrainer>> DistTrainer::Create(
    const RunConfig& config, const ParallelLayout& layout, comm::Communicator& world,
    std::shared_ptr<const std::vector<uint16_t>> train_tokens,
    std::chrono::milliseconds wait_timeout, WeightInit init) {
  RETURN_IF_ERROR(ValidateRunConfig(config));
  if (config.model.n_head % layout.tp != 0 || config.model.vocab_size % layout.tp != 0)
    return InvalidArgument("layout tp=" + std::to_string(layout.tp) +
                           " must divide model.n_head (" + std::to_string(config.model.n_head) +
                           ") and model.vocab_size (" + std::to_string(config.model.vocab_size) +
                           ")");
  if (layout.sequence_parallel && config.model.seq_len % layout.tp != 0)
    return InvalidArgument("layout sp=1: tp=" + std::to_string(layout.tp) +
                           " must divide model.seq_len (" + std::to_string(config.model.seq_len) +
                           ")");
  const int chunks = layout.virtual_stages;
  if (layout.schedule == PipelineSchedule::kInterleaved &&
      config.train.micro_batches % layout.pp != 0)
    return InvalidArgument("schedule=interleaved: train.micro_batches (" +
                           std::to_string(config.train.micro_batches) +
                           ") must be a multiple of pp (" + std::to_string(layout.pp) + ")");
  ASSIGN_OR_RETURN(const Precision precision, ParsePrecision(config.train.precision));
  ASSIGN_OR_RETURN(const Device device, TrainDevice(config.train));
  const std::string_view backend = device == Device::kCpu ? "cpu" : "nccl";
  if (world.backend() != backend)
    return InvalidArgument("train.device = \"" + config.train.device + "\" needs a " +
                           std::string(backend) + " world communicator, got " +
                           std::string(world.backend()));
  const int dp = layout.dp(), micro = config.train.micro_batches;
  if (config.train.batch_size % (dp * micro) != 0)
    return InvalidArgument("train.batch_size (" + std::to_string(config.train.batch_size) +
                           ") must be divisible by dp (" + std::to_string(dp) +
                           ") × train.micro_batches (" + std::to_string(micro) + ")");
  if (layout.pp * chunks > config.model.n_layer + 2)
    return InvalidArgument("layout pp=" + std::to_string(layout.pp) +
                           " × vpp=" + std::to_string(chunks) + " exceeds model.n_layer + 2 (" +
                           std::to_string(config.model.n_layer + 2) + ")");
  std::unique_ptr<DistTrainer> t(new DistTrainer());
  t->config_ = config;
  t->device_ = device;
  t->layout_ = layout;
  t->wait_timeout_ = wait_timeout;
  ASSIGN_OR_RETURN(t->groups_, BuildProcessGroups(world, layout, Deadline::After(wait_timeout)));
  t->coords_ = CoordsOf(layout, world.rank());
  t->shards_ = layout.dp_shard;
  t->shard_ = t->coords_.dp_shard;
  t->micro_ = micro;
  t->precision_ = precision;
  t->dt_ = ComputeDType(precision);
  t->micro_rows_ = config.train.batch_size / (dp * micro);
  t->stage_ = BuildStageLayout(config.model, layout.pp, t->coords_.pp, layout.dp_shard, layout.tp,
                               t->coords_.tp, chunks);
  t->ops_ = BuildPipelineSchedule(layout.schedule, layout.pp, t->coords_.pp, micro, chunks);
  // Each chunk holds the activations of as many micro-batches as its schedule has in flight.
  const std::vector<int> slots = MaxInFlight(t->ops_, chunks);
  for (int c = 0; c < chunks; ++c) {
    ASSIGN_OR_RETURN(std::unique_ptr<StageRunner> runner,
                     StageRunner::Create(
                         config.model, t->stage_, c, t->micro_rows_, slots[static_cast<size_t>(c)],
                         TpGroup{t->groups_.tp.get(), wait_timeout}, layout.sequence_parallel,
                         config.train.recompute, t->dt_, device));
    t->runners_.push_back(std::move(runner));
  }
  ASSIGN_OR_RETURN(t->loader_, CreateTrainLoader(config, std::move(train_tokens)));
  t->state_ = InitialTrainerState(config, precision == Precision::kFp16, *t->loader_);
  RETURN_IF_ERROR(t->Initialize(init));
  return t;
}

Status DistTrainer::Initialize(WeightInit init) {
  const int zero = layout_.zero;
  const size_t units = stage_.units.size();
  ownership_ = PlanOwnership(stage_, zero, shards_, shard_);
  norm_ranges_ = PlanNormRanges(stage_, ownership_, zero, coords_, device_ != Device::kCpu);

  const size_t f = sizeof(float);
  const int64_t owned = ownership_.total;
  ASSIGN_OR_RETURN(params_, Buffer::Allocate(device_, (zero < 3 ? stage_.total : owned) * f));
  ASSIGN_OR_RETURN(grads_, Buffer::Allocate(device_, (zero < 2 ? stage_.total : owned) * f));
  ASSIGN_OR_RETURN(m_, Buffer::Allocate(device_, ownership_.total * f));
  ASSIGN_OR_RETURN(v_, Buffer::Allocate(device_, ownership_.total * f));
  const size_t world = static_cast<size_t>(groups_.world->size());
  if (device_ != Device::kCpu && world > 1) {
    ASSIGN_OR_RETURN(sums_staging_, Buffer::Allocate(device_, (world + 1) * 2 * sizeof(int64_t)));
  }
  gathered_.resize(units);
  gather_work_.resize(units);
  unit_grads_.resize(units);
  promoted_.assign(units, false);
  timings_.chunk_forward_s.assign(runners_.size(), 0.0);
  timings_.chunk_backward_s.assign(runners_.size(), 0.0);
  for (const auto& runner : runners_) {
    send_forward_.emplace_back(static_cast<size_t>(runner->slots()));
    send_backward_.emplace_back(static_cast<size_t>(runner->slots()));
  }

  inputs_.resize(static_cast<size_t>(config_.train.batch_size) * config_.model.seq_len);
  targets_.resize(inputs_.size());
  if (init == WeightInit::kForLoad) return InitializeLowPrecision();
  // The single-process initialisation: the whole model into a temporary f32 arena, then copy
  // this rank's part.
  Arena full;
  AddGptTensors(config_.model, DType::kF32, &full);
  RETURN_IF_ERROR(full.Allocate(Device::kCpu).WithContext("initial weights"));
  RETURN_IF_ERROR(
      Gpt::InitializeWeights(config_.model, static_cast<uint64_t>(config_.train.seed), full));
  // This rank's local tensors (its tensor-parallel boxes), then its part of them.
  std::vector<float> local(static_cast<size_t>(stage_.total), 0.0f);
  for (const StageTensor& t : stage_.tensors) {
    const int index = [&] {
      for (int i = 0; i < full.size(); ++i)
        if (full.name(i) == t.name) return i;
      return -1;
    }();
    RT_CHECK(index >= 0);
    const float* src = full.Get(index).data_as<float>();
    for (const TensorBox& b : t.boxes) {
      float* dst = local.data() + t.offset + b.local_begin;
      if (b.size.ndim <= 1) {
        std::memcpy(dst, src + (b.size.ndim ? b.offset.dims[0] : 0),
                    static_cast<size_t>(b.size.numel()) * f);
        continue;
      }
      const int64_t cols = t.global_shape.dims[1];
      for (int64_t row = 0; row < b.size.dims[0]; ++row)
        std::memcpy(dst + row * b.size.dims[1],
                    src + (b.offset.dims[0] + row) * cols + b.offset.dims[1],
                    static_cast<size_t>(b.size.dims[1]) * f);
    }
  }
  float* p = params_.View(DType::kF32, Shape{1}).data_as<float>();
  auto host = [](float* data, int64_t count) { return Tensor(data, DType::kF32, Shape{count}); };
  if (zero < 3) {
    RETURN_IF_ERROR(Copy(F32(p, stage_.total), host(local.data(), stage_.total)));
  } else {
    for (const Piece& pc : ownership_.update)
      RETURN_IF_ERROR(Copy(F32(p + pc.own, pc.count), host(local.data() + pc.flat, pc.count)));
  }
  return InitializeLowPrecision();
}

Status DistTrainer::Restore(const TrainerState& state) {
  state_ = state;
  loader_->Restore(state.loader);
  if (!lp()) return Status();
  const int64_t n = static_cast<int64_t>(params_.size() / sizeof(float));
  return Convert(work_.View(dt_, Shape{n}), params_.View(DType::kF32, Shape{n}))
      .WithContext("rebuild the low-precision parameters from the master weights");
}

int64_t DistTrainer::FirstBatchRow() const {
  return static_cast<int64_t>(coords_.dp) * micro_ * micro_rows_;
}

Result<Buffer> DistTrainer::Transient(size_t count, DType dtype) {
  const size_t bytes = count * DTypeSize(dtype);
  Buffer b;
  for (Buffer& spare : spare_transients_) {
    if (spare.size() != bytes) continue;
    b = std::move(spare);
    spare = std::move(spare_transients_.back());
    spare_transients_.pop_back();
    RETURN_IF_ERROR(Zero(b.View(dtype, Shape{static_cast<int64_t>(count)})));
    break;
  }
  if (b.data() == nullptr) {
    ASSIGN_OR_RETURN(b, Buffer::Allocate(device_, bytes));
  }
  transient_bytes_ += b.size();
  peak_transient_bytes_ = std::max(peak_transient_bytes_, transient_bytes_);
  return b;
}

void DistTrainer::FreeTransient(Buffer* b) {
  transient_bytes_ -= b->size();
  if (device_ != Device::kCpu && b->data() != nullptr) spare_transients_.push_back(std::move(*b));
  *b = Buffer();
}

MemoryStats DistTrainer::memory() const {
  MemoryStats s;
  s.param_bytes = params_.size() + work_.size();
  s.grad_bytes = grads_.size() + lp_grads_.size();
  s.optimizer_bytes = m_.size() + v_.size();
  for (const auto& runner : runners_) {
    s.activation_bytes += runner->bytes();
    s.activation_slots += runner->slots();
  }
  s.peak_transient_bytes = peak_transient_bytes_;
  return s;
}

Tensor DistTrainer::View(std::byte* unit_base, int tensor) const {
  const StageTensor& t = stage_.tensors[static_cast<size_t>(tensor)];
  const int64_t at = t.offset - stage_.units[static_cast<size_t>(t.unit)].begin;
  return Tensor(unit_base + at * static_cast<int64_t>(DTypeSize(dt_)), dt_, t.shape, device_);
}

BlockTensors DistTrainer::BlockView(std::byte* base, int unit) const {
  const std::vector<int>& ts = stage_.units[static_cast<size_t>(unit)].tensors;
  return {View(base, ts[0]), View(base, ts[1]), View(base, ts[2]),  View(base, ts[3]),
          View(base, ts[4]), View(base, ts[5]), View(base, ts[6]),  View(base, ts[7]),
          View(base, ts[8]), View(base, ts[9]), View(base, ts[10]), View(base, ts[11])};
}

Status DistTrainer::StartGather(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 3 || gathered_[u].data() != nullptr) return Status();
  const int64_t size = stage_.units[u].size;
  ASSIGN_OR_RETURN(gathered_[u], Transient(static_cast<size_t>(size), dt_));
  // The compute-dtype parameters: the fp32 master itself, or its low-precision copy.
  std::byte* shard = Compute(lp() ? work_ : params_) + ownership_.offset[u] * DTypeSize(dt_);
  gather_work_[u] = groups_.dp_shard->AllGather(shard, gathered_[u].data(),
                                                static_cast<size_t>(ownership_.size[u]), dt_);
  return Status();
}

Result<std::byte*> DistTrainer::AcquireParams(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 3)
    return Compute(lp() ? work_ : params_) + stage_.units[u].begin * DTypeSize(dt_);
  RETURN_IF_ERROR(StartGather(unit));
  if (gather_work_[u]) {
    RETURN_IF_ERROR(WaitFor(gather_work_[u], WaitDeadline(),
                            "ZeRO-3 all-gather of unit " + std::to_string(unit)));
    gather_work_[u].reset();
  }
  return static_cast<std::byte*>(gathered_[u].data());
}

void DistTrainer::ReleaseParams(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 3 || gathered_[u].data() == nullptr) return;
  FreeTransient(&gathered_[u]);
}

Result<std::byte*> DistTrainer::UnitGrads(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 2)
    return Compute(lp() ? lp_grads_ : grads_) + stage_.units[u].begin * DTypeSize(dt_);
  if (unit_grads_[u].data() == nullptr) {
    ASSIGN_OR_RETURN(unit_grads_[u], Transient(static_cast<size_t>(stage_.units[u].size), dt_));
  }
  return static_cast<std::byte*>(unit_grads_[u].data());
}

int DistTrainer::PrevStage(int chunk) const {
  const int vs = stage_.chunks[static_cast<size_t>(chunk)].virtual_stage;
  return vs == 0 ? -1 : (vs - 1) % layout_.pp;
}

int DistTrainer::NextStage(int chunk) const {
  const int vs = stage_.chunks[static_cast<size_t>(chunk)].virtual_stage;
  return vs + 1 == layout_.pp * layout_.virtual_stages ? -1 : (vs + 1) % layout_.pp;
}

uint32_t DistTrainer::Tag(int chunk, int micro) const {
  const int vs = stage_.chunks[static_cast<size_t>(chunk)].virtual_stage;
  return static_cast<uint32_t>(vs * micro_ + micro);
}

Status DistTrainer::Forward(int chunk, int micro) {
  StageRunner* runner = runners_[static_cast<size_t>(chunk)].get();
  const StageChunk& ck = stage_.chunks[static_cast<size_t>(chunk)];
  const int slot = micro % runner->slots();
  comm::WorkHandle& sent = send_forward_[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
  if (sent) {
    RETURN_IF_ERROR(
        WaitTimed(sent, WaitDeadline(), "pipeline activation send", &timings_.send_wait_s));
    sent.reset();
  }
  const int T = config_.model.seq_len;
  const size_t at = static_cast<size_t>(FirstBatchRow() + micro * micro_rows_) * T;
  if (ck.has_embedding)
    RETURN_IF_ERROR(
        Copy(runner->tokens(slot), Tensor(inputs_.data() + at, DType::kI32, {micro_rows_, T})));
  if (ck.has_head)
    RETURN_IF_ERROR(
        Copy(runner->targets(slot), Tensor(targets_.data() + at, DType::kI32, {micro_rows_, T})));
  const int prev = PrevStage(chunk), next = NextStage(chunk);
  if (prev >= 0) {
    const Tensor in = runner->input(slot);
    RETURN_IF_ERROR(
        WaitTimed(groups_.pp_forward->Recv(in.data(), static_cast<size_t>(in.numel()), in.dtype(),
                                           prev, Tag(chunk, micro) - static_cast<uint32_t>(micro_)),
                  WaitDeadline(), "pipeline activation receive from stage " + std::to_string(prev),
                  &timings_.recv_wait_s));
  }
  const double t0 = Now();
  // The auxiliary units (wte, wpe, ln_f) serve the chunk with the embedding or the head.
  const int aux = ck.has_embedding || ck.has_head ? stage_.aux_units : 0;
  const int first = ck.first_unit, layers = ck.layers();
  for (int u = 0; u < aux; ++u) RETURN_IF_ERROR(StartGather(u));
  if (layers > 0) RETURN_IF_ERROR(StartGather(first));
  std::byte* wte = nullptr;
  std::byte* rest = nullptr;
  if (aux > 0) {
    ASSIGN_OR_RETURN(wte, AcquireParams(0));
    ASSIGN_OR_RETURN(rest, AcquireParams(1));
  }
  const std::vector<int> rest_t = aux > 0 ? stage_.units[1].tensors : std::vector<int>();
  if (ck.has_embedding)
    RETURN_IF_ERROR(runner->EmbeddingForward(slot, View(wte, stage_.units[0].tensors[0]),
                                             View(rest, rest_t[0])));
  for (int j = 0; j < layers; ++j) {
    const int unit = first + j;
    if (j + 1 < layers) RETURN_IF_ERROR(StartGather(unit + 1));
    ASSIGN_OR_RETURN(std::byte * p, AcquireParams(unit));
    RETURN_IF_ERROR(runner->BlockForward(slot, j, BlockView(p, unit)));
    ReleaseParams(unit);
  }
  if (ck.has_head) {
    const size_t lnf = stage_.has_embedding ? 1 : 0;
    const float dloss = evaluating_ ? 0.0f : LossGradientScale(state_, config_.train.batch_size, T);
    ASSIGN_OR_RETURN(double loss,
                     runner->HeadForward(slot, View(rest, rest_t[lnf]), View(rest, rest_t[lnf + 1]),
                                         View(wte, stage_.units[0].tensors[0]), dloss));
    loss_sum_ += loss;
  }
  for (int u = 0; u < aux; ++u) ReleaseParams(u);
  const double forward_s = Now() - t0;
  timings_.compute_s += forward_s;
  timings_.chunk_forward_s[static_cast<size_t>(chunk)] += forward_s;
  if (next >= 0) {
    const Tensor out = runner->output(slot);
    sent = groups_.pp_forward->Send(out.data(), static_cast<size_t>(out.numel()), out.dtype(), next,
                                    Tag(chunk, micro));
  }
  return Status();
}

Status DistTrainer::Backward(int chunk, int micro, bool last) {
  StageRunner* runner = runners_[static_cast<size_t>(chunk)].get();
  const StageChunk& ck = stage_.chunks[static_cast<size_t>(chunk)];
  const int slot = micro % runner->slots();
  comm::WorkHandle& sent = send_backward_[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
  if (sent) {
    RETURN_IF_ERROR(
        WaitTimed(sent, WaitDeadline(), "pipeline gradient send", &timings_.send_wait_s));
    sent.reset();
  }
  const int prev = PrevStage(chunk), next = NextStage(chunk);
  if (next >= 0) {
    const Tensor d = runner->dout(slot);
    RETURN_IF_ERROR(WaitTimed(
        groups_.pp_backward->Recv(d.data(), static_cast<size_t>(d.numel()), d.dtype(), next,
                                  Tag(chunk, micro) + static_cast<uint32_t>(micro_)),
        WaitDeadline(), "pipeline gradient receive from stage " + std::to_string(next),
        &timings_.recv_wait_s));
  }
  double busy = Now();
  const int aux = ck.has_embedding || ck.has_head ? stage_.aux_units : 0;
  const int first = ck.first_unit, layers = ck.layers();
  for (int u = 0; u < aux; ++u) RETURN_IF_ERROR(StartGather(u));
  if (layers > 0) RETURN_IF_ERROR(StartGather(first + layers - 1));
  std::byte *wte = nullptr, *rest = nullptr, *g_wte = nullptr, *g_rest = nullptr;
  if (aux > 0) {
    ASSIGN_OR_RETURN(wte, AcquireParams(0));
    ASSIGN_OR_RETURN(rest, AcquireParams(1));
    ASSIGN_OR_RETURN(g_wte, UnitGrads(0));
    ASSIGN_OR_RETURN(g_rest, UnitGrads(1));
  }
  const std::vector<int> rest_t = aux > 0 ? stage_.units[1].tensors : std::vector<int>();
  const int wte_t = aux > 0 ? stage_.units[0].tensors[0] : -1;
  if (ck.has_head) {
    const size_t lnf = stage_.has_embedding ? 1 : 0;
    RETURN_IF_ERROR(runner->HeadBackward(slot, View(rest, rest_t[lnf]), View(wte, wte_t),
                                         View(g_rest, rest_t[lnf]), View(g_rest, rest_t[lnf + 1]),
                                         View(g_wte, wte_t)));
  }
  for (int j = layers - 1; j >= 0; --j) {
    const int unit = first + j;
    if (j > 0) RETURN_IF_ERROR(StartGather(unit - 1));
    ASSIGN_OR_RETURN(std::byte * p, AcquireParams(unit));
    ASSIGN_OR_RETURN(std::byte * g, UnitGrads(unit));
    RETURN_IF_ERROR(runner->BlockBackward(slot, j, BlockView(p, unit), BlockView(g, unit)));
    ReleaseParams(unit);
    if (last && overlap_reductions_) {
      AddBackwardTime(chunk, Now() - busy);
      RETURN_IF_ERROR(StartReduce(unit));
      // ZeRO-2/3 bound the full unit gradients alive at once; ZeRO-0/1 only collect finished ones.
      RETURN_IF_ERROR(AdvanceReductions(layout_.zero >= 2 ? kMaxReductionsInFlight : SIZE_MAX));
      busy = Now();
    }
  }
  if (ck.has_embedding)
    RETURN_IF_ERROR(runner->EmbeddingBackward(slot, View(g_wte, wte_t), View(g_rest, rest_t[0])));
  for (int u = 0; u < aux; ++u) ReleaseParams(u);
  AddBackwardTime(chunk, Now() - busy);
  // The auxiliary units' gradients are final now, except the tied wte between two stages,
  // which SyncTiedEmbedding sums first.
  if (last && layout_.pp == 1 && overlap_reductions_)
    for (int u = 0; u < aux; ++u) RETURN_IF_ERROR(StartReduce(u));
  if (prev >= 0) {
    const Tensor d = runner->dinput(slot);
    sent = groups_.pp_backward->Send(d.data(), static_cast<size_t>(d.numel()), d.dtype(), prev,
                                     Tag(chunk, micro));
  }
  return Status();
}

void DistTrainer::AddBackwardTime(int chunk, double seconds) {
  timings_.compute_s += seconds;
  timings_.chunk_backward_s[static_cast<size_t>(chunk)] += seconds;
}

Status DistTrainer::StartReduce(int unit) {
  const size_t u = static_cast<size_t>(unit);
  const StageUnit& su = stage_.units[u];
  if (su.size == 0) return Status();
  // The reductions are in fp32: low-precision gradients are converted first.
  ASSIGN_OR_RETURN(float* g32, ReduceGrads(unit));
  if (layout_.sequence_parallel && layout_.tp > 1) {
    // Sequence parallelism leaves the LayerNorm and wpe gradients as partial sums over the
    // tensor-parallel ranks' positions: complete them first.
    for (int ti : su.tensors) {
      const StageTensor& t = stage_.tensors[static_cast<size_t>(ti)];
      if (t.name != "wpe" && t.name.find("ln_") == std::string::npos) continue;
      RETURN_IF_ERROR(
          TpAllReduce(TpGroup{groups_.tp.get(), wait_timeout_},
                      Tensor(g32 + (t.offset - su.begin), DType::kF32, t.shape, device_),
                      "sequence-parallel LayerNorm/wpe gradients"));
    }
  }
  // One data-parallel rank (pipeline or tensor parallelism alone): ZeRO-0/1 gradients are
  // complete already, and a reduce-scatter and all-gather over a group of one would only copy
  // them through transient buffers (on the pipeline's drain, which nothing overlaps).
  if (layout_.zero < 2 && shards_ == 1 && layout_.dp_replicate == 1) return Status();
  Pending p;
  p.unit = unit;
  const size_t k = static_cast<size_t>(su.shard_size(shards_));
  float* grads = grads_.View(DType::kF32, Shape{1}).data_as<float>();
  comm::Communicator& dp = *groups_.dp_shard;
  switch (layout_.zero) {
    case 0: {
      // The bucket's all-reduce as the ring does it — reduce-scatter, then all-gather — issued
      // together (ops of a communicator run in issue order). Every ZeRO stage then sums each
      // gradient element in the same order, whatever algorithm comm picks for AllReduce.
      ASSIGN_OR_RETURN(p.scratch, Transient(k));
      p.first = dp.ReduceScatter(grads + su.begin, p.scratch.data(), k, DType::kF32,
                                 comm::ReduceOp::kSum);
      p.work = dp.AllGather(p.scratch.data(), grads + su.begin, k, DType::kF32);
      break;
    }
    case 1: {
      ASSIGN_OR_RETURN(p.scratch, Transient(k));
      p.work = dp.ReduceScatter(grads + su.begin, p.scratch.data(), k, DType::kF32,
                                comm::ReduceOp::kSum);
      break;
    }
    default:
      p.work =
          dp.ReduceScatter(g32, grads + ownership_.offset[u], k, DType::kF32, comm::ReduceOp::kSum);
      break;
  }
  pending_.push_back(std::move(p));
  return Status();
}

Status DistTrainer::AdvanceReductions(size_t max_pending) {
  float* grads = grads_.View(DType::kF32, Shape{1}).data_as<float>();
  // Reductions complete in issue order (one communicator each), so the replica all-reduces are
  // issued in the same order on every rank.
  size_t done = 0;
  for (Pending& p : pending_) {
    const bool wait = pending_.size() - done > max_pending;
    if (!wait && !p.work->Done()) break;
    const std::string what = "gradient reduction of unit " + std::to_string(p.unit);
    if (p.first) RETURN_IF_ERROR(WaitFor(p.first, WaitDeadline(), what));
    RETURN_IF_ERROR(WaitFor(p.work, WaitDeadline(), what));
    const size_t u = static_cast<size_t>(p.unit);
    const StageUnit& su = stage_.units[u];
    if (layout_.zero == 0) FreeTransient(&p.scratch);
    if (p.phase == 0 && layout_.zero > 0) {
      const int64_t k = su.shard_size(shards_);
      float* shard =
          layout_.zero == 1 ? grads + su.begin + shard_ * k : grads + ownership_.offset[u];
      if (layout_.zero == 1) {
        RETURN_IF_ERROR(Copy(F32(shard, k), p.scratch.View(DType::kF32, Shape{k})));
        FreeTransient(&p.scratch);
      } else {
        FreeTransient(&unit_grads_[u]);
      }
      if (layout_.dp_replicate > 1) {
        p.phase = 1;
        p.work = groups_.dp_replicate->AllReduce(shard, shard, static_cast<size_t>(k), DType::kF32,
                                                 comm::ReduceOp::kSum);
        if (!wait) break;
        RETURN_IF_ERROR(WaitFor(p.work, WaitDeadline(), what + " across replicas"));
      }
    }
    ++done;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  return Status();
}

Status DistTrainer::SyncTiedEmbedding() {
  if (groups_.embedding == nullptr) return Status();
  ASSIGN_OR_RETURN(float* g, ReduceGrads(0));
  const int64_t n = stage_.tensors[static_cast<size_t>(stage_.units[0].tensors[0])].shape.numel();
  return WaitFor(
      groups_.embedding->AllReduce(g, g, static_cast<size_t>(n), DType::kF32, comm::ReduceOp::kSum),
      WaitDeadline(), "tied embedding gradient all-reduce between the end stages");
}

Result<StepStats> DistTrainer::RunStep() {
  const double step_start = Now();
  timings_ = StepTimings();
  timings_.chunk_forward_s.assign(runners_.size(), 0.0);
  timings_.chunk_backward_s.assign(runners_.size(), 0.0);
  StepStats stats = StartStep(config_, state_);
  loader_->Next(inputs_, targets_);
  RETURN_IF_ERROR(
      CheckTokenRange(inputs_, targets_, config_.model.vocab_size).WithContext("training batch"));
  promoted_.assign(promoted_.size(), false);
  loss_sum_ = 0;

  std::vector<int> backwards(runners_.size(), 0);
  bool zeroed = false;
  for (const PipelineOp& op : ops_) {
    if (op.forward) {
      RETURN_IF_ERROR(Forward(op.chunk, op.micro));
    } else {
      // The gradients are zeroed before the first backward, not at the step's start: the first
      // stage's forwards then start the pipeline sooner, and every stage but the last zeroes
      // while its first gradient is still on the way.
      if (!zeroed) RETURN_IF_ERROR(ZeroGradients());
      zeroed = true;
      RETURN_IF_ERROR(
          Backward(op.chunk, op.micro, ++backwards[static_cast<size_t>(op.chunk)] == micro_));
    }
  }
  timings_.pipeline_s = Now() - step_start;
  for (auto* sends : {&send_forward_, &send_backward_}) {
    for (std::vector<comm::WorkHandle>& chunk : *sends) {
      for (comm::WorkHandle& w : chunk) {
        if (!w) continue;
        RETURN_IF_ERROR(WaitFor(w, WaitDeadline(), "pipeline send"));
        w.reset();
      }
    }
  }
  const double wait_start = Now();
  if (!overlap_reductions_) {  // the backward's reductions, in its order, only now
    const int until = layout_.pp > 1 ? stage_.aux_units : 0;  // tied units: below
    for (int u = static_cast<int>(stage_.units.size()) - 1; u >= until; --u)
      RETURN_IF_ERROR(StartReduce(u));
  }
  if (layout_.pp > 1 && stage_.aux_units > 0) {
    RETURN_IF_ERROR(SyncTiedEmbedding());
    for (int u = 0; u < stage_.aux_units; ++u) RETURN_IF_ERROR(StartReduce(u));
  }
  RETURN_IF_ERROR(AdvanceReductions(0));
  timings_.reduce_wait_s = Now() - wait_start;

  // Loss and gradient norm: every rank's partial sums, gathered over the world and added in rank
  // order (so every rank gets bitwise the same totals).
  const double opt_start = Now();
  RETURN_IF_ERROR(InjectOverflow());
  double sumsq = 0;
  // fp16: every copy is checked for inf/NaN too, so an overflow anywhere skips the step
  // everywhere (the sum over the world is then not finite on every rank).
  const bool check_copies = precision_ == Precision::kFp16;
  float* g = grads_.View(DType::kF32, Shape{1}).data_as<float>();
  for (const NormRange& r : norm_ranges_) {
    if (!r.counted && !check_copies) continue;
    ASSIGN_OR_RETURN(double s, SumOfSquares(F32(g + r.begin, r.count)));
    if (r.counted) {
      sumsq += s;
    } else if (!std::isfinite(s)) {
      sumsq = INFINITY;
    }
  }
  ASSIGN_OR_RETURN(auto totals, SumOverWorld(sumsq));
  const auto [loss_total, sumsq_total] = totals;
  stats.loss = loss_total / static_cast<double>(stats.tokens);
  RETURN_IF_ERROR(OptimizerStep(sumsq_total, &stats));
  CountStep(stats, *loader_, &state_);
  timings_.optimizer_s = Now() - opt_start;
  timings_.step_s = Now() - step_start;
  return stats;
}

Status DistTrainer::ZeroGradients() {
  if (layout_.zero >= 2) return Status();
  RETURN_IF_ERROR(Zero(grads_.View(DType::kF32, Shape{static_cast<int64_t>(grads_.size() / 4)})));
  if (!lp()) return Status();
  return Zero(lp_grads_.View(dt_, Shape{static_cast<int64_t>(lp_grads_.size() / DTypeSize(dt_))}));
}

Result<double> DistTrainer::TimeGradientSync() {
  if (layout_.zero != 0) return FailedPrecondition("TimeGradientSync: only for ZeRO-0 (DDP)");
  const double start = Now();
  for (int u = static_cast<int>(stage_.units.size()) - 1; u >= 0; --u)
    RETURN_IF_ERROR(StartReduce(u));
  RETURN_IF_ERROR(AdvanceReductions(0));
  return Now() - start;
}

Status DistTrainer::SetReductionOverlap(bool on) {
  if (layout_.zero > 1) return FailedPrecondition("SetReductionOverlap: only for ZeRO-0/1");
  overlap_reductions_ = on;
  return Status();
}

Result<std::pair<double, double>> DistTrainer::SumOverWorld(double sumsq) {
  // Each data-parallel rank's head stage summed the losses of its own rows (the same on every
  // tensor-parallel rank: counted on rank 0). Gathered and added in rank order, so every rank
  // gets bitwise the same totals.
  const double loss_part = coords_.tp == 0 ? loss_sum_ : 0.0;
  int64_t mine[2] = {std::bit_cast<int64_t>(loss_part), std::bit_cast<int64_t>(sumsq)};
  comm::Communicator& world = *groups_.world;
  // One rank: the totals are its own (no collective, no copies to and from the device).
  if (world.size() == 1) return std::make_pair(loss_part, sumsq);
  const int64_t n = static_cast<int64_t>(world.size()) * 2;
  std::vector<int64_t> all(static_cast<size_t>(n));
  const std::string what = "loss and gradient-norm all-gather";
  if (device_ == Device::kCpu) {
    RETURN_IF_ERROR(
        WaitFor(world.AllGather(mine, all.data(), 2, DType::kI64), WaitDeadline(), what));
  } else {
    // NCCL takes device buffers: stage the 16 bytes per rank through one.
    const Tensor send = sums_staging_.View(DType::kI64, Shape{2});
    const Tensor recv = sums_staging_.View(DType::kI64, Shape{n}, 16);
    RETURN_IF_ERROR(Copy(send, Tensor(mine, DType::kI64, Shape{2})));
    RETURN_IF_ERROR(
        WaitFor(world.AllGather(send.data(), recv.data(), 2, DType::kI64), WaitDeadline(), what));
    RETURN_IF_ERROR(Copy(Tensor(all.data(), DType::kI64, Shape{n}), recv));
  }
  double loss_total = 0, sumsq_total = 0;
  for (int r = 0; r < world.size(); ++r) {
    loss_total += std::bit_cast<double>(all[static_cast<size_t>(r) * 2]);
    sumsq_total += std::bit_cast<double>(all[static_cast<size_t>(r) * 2 + 1]);
  }
  return std::make_pair(loss_total, sumsq_total);
}

Result<double> DistTrainer::Evaluate(std::shared_ptr<const std::vector<uint16_t>> tokens,
                                     int batches) {
  const int B = config_.train.batch_size, T = config_.model.seq_len;
  ASSIGN_OR_RETURN(DataLoader loader,
                   DataLoader::Create(std::move(tokens), B, T, DataOrder::kSequential, 0));
  const std::vector<int32_t> saved_inputs = inputs_, saved_targets = targets_;
  evaluating_ = true;
  double sum = 0;
  Status status;
  for (int b = 0; b < batches && status.ok(); ++b) {
    loader.Next(inputs_, targets_);
    status = CheckTokenRange(inputs_, targets_, config_.model.vocab_size)
                 .WithContext("evaluation batch");
    loss_sum_ = 0;
    // The schedule's forwards in its order (the order the neighbours send and receive in).
    for (const PipelineOp& op : ops_)
      if (op.forward && status.ok()) status = Forward(op.chunk, op.micro);
    for (std::vector<comm::WorkHandle>& chunk : send_forward_) {
      for (comm::WorkHandle& w : chunk) {
        if (!w || !status.ok()) continue;
        status = WaitFor(w, WaitDeadline(), "pipeline send");
        w.reset();
      }
    }
    if (!status.ok()) break;
    Result<std::pair<double, double>> totals = SumOverWorld(0.0);
    if (!totals.ok()) {
      status = totals.status();
      break;
    }
    sum += totals->first / (static_cast<double>(B) * T);
  }
  evaluating_ = false;
  inputs_ = saved_inputs;
  targets_ = saved_targets;
  RETURN_IF_ERROR(status);
  return sum / batches;
}

Status DistTrainer::OptimizerStep(double sumsq, StepStats* stats) {
  // The step policy is Trainer::Step's (step_policy.h); gradients are unscaled inside AdamW.
  const std::optional<float> grad_scale = PlanUpdate(
      config_.optim, config_.train, precision_ == Precision::kFp16, sumsq, &state_, stats);
  if (!grad_scale) return Status();
  float* p = params_.View(DType::kF32, Shape{1}).data_as<float>();
  float* g = grads_.View(DType::kF32, Shape{1}).data_as<float>();
  float* m = m_.View(DType::kF32, Shape{1}).data_as<float>();
  float* v = v_.View(DType::kF32, Shape{1}).data_as<float>();
  std::byte* work = lp() ? Compute(work_) : nullptr;
  const int zero = layout_.zero;
  for (const Piece& pc : ownership_.update) {
    const StageTensor& t = stage_.tensors[static_cast<size_t>(pc.tensor)];
    const AdamWParams hp =
        AdamWUpdateParams(config_.optim, stats->lr, *grad_scale, state_.adam_step, t.decayed);
    RETURN_IF_ERROR(rt::AdamW(F32((zero < 3 ? p + pc.flat : p + pc.own), pc.count),
                              F32((zero < 2 ? g + pc.flat : g + pc.own), pc.count),
                              F32(m + pc.own, pc.count), F32(v + pc.own, pc.count),
                              lp() ? Tensor(work + (zero < 3 ? pc.flat : pc.own) * DTypeSize(dt_),
                                            dt_, Shape{pc.count}, device_)
                                   : Tensor(),
                              hp)
                        .WithContext("AdamW on '" + t.name + "'"));
  }
  // Every rank updated its shard of each unit; gather the units back (one shard: AdamW
  // updated the whole units, parameters and any low-precision copy, in place).
  if ((zero == 1 || zero == 2) && shards_ > 1) {
    std::vector<comm::WorkHandle> works;
    for (size_t u = 0; u < stage_.units.size(); ++u) {
      const StageUnit& su = stage_.units[u];
      if (su.size == 0) continue;
      const int64_t k = su.shard_size(shards_);
      works.push_back(groups_.dp_shard->AllGather(p + su.begin + shard_ * k, p + su.begin,
                                                  static_cast<size_t>(k), DType::kF32));
    }
    for (const comm::WorkHandle& w : works)
      RETURN_IF_ERROR(WaitFor(w, WaitDeadline(), "ZeRO parameter all-gather"));
    // The other shards' low-precision copies from their fp32 masters (the same rounding AdamW
    // applies to this rank's shard).
    if (lp())
      RETURN_IF_ERROR(
          Convert(Tensor(work, dt_, Shape{stage_.total}, device_), F32(p, stage_.total)));
  }
  return Status();
}

}  // namespace rt::parallel
