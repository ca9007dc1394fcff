#include "parallel/dist/engine.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/ops.h"
#include "parallel/gpt.h"
#include "parallel/optimizer.h"

namespace rt::dist {

// A gradient reduction in flight: phase 0 is the reduction over dp_shard, phase 1 the
// all-reduce across replica groups (HSDP).
struct DistTrainer::Pending {
  int unit = 0;
  int phase = 0;
  comm::WorkHandle first;  // ZeRO-0/1: the reduce-scatter (`work` follows it in issue order)
  comm::WorkHandle work;
  Buffer scratch;          // ZeRO-0/1: the reduce-scatter output
};

namespace {

// ZeRO-2/3: unit reduce-scatters in flight during the backward (each holds a full unit gradient).
constexpr size_t kMaxReductionsInFlight = 2;

double Now() { return MonoSeconds(); }

Status WaitFor(const comm::WorkHandle& work, Deadline deadline, const std::string& what) {
  return work->Wait(deadline).WithContext(what);
}

Tensor F32(float* data, int64_t count) { return Tensor(data, DType::kF32, Shape{count}); }

}  // namespace

DistTrainer::~DistTrainer() = default;

comm::CommOptions EngineCommOptions(comm::CommOptions base) {
  base.small_message_bytes = 0;
  return base;
}

Result<std::unique_ptr<DistTrainer>> DistTrainer::Create(
    const RunConfig& config, const ParallelLayout& layout, comm::Communicator& world,
    std::shared_ptr<const std::vector<uint16_t>> train_tokens,
    std::chrono::milliseconds wait_timeout) {
  RETURN_IF_ERROR(ValidateRunConfig(config));
  if (config.model.n_head % layout.tp != 0 || config.model.vocab_size % layout.tp != 0)
    return InvalidArgument("layout tp=" + std::to_string(layout.tp) +
                           " must divide model.n_head (" + std::to_string(config.model.n_head) +
                           ") and model.vocab_size (" + std::to_string(config.model.vocab_size) + ")");
  if (layout.sequence_parallel && config.model.seq_len % layout.tp != 0)
    return InvalidArgument("layout sp=1: tp=" + std::to_string(layout.tp) +
                           " must divide model.seq_len (" + std::to_string(config.model.seq_len) + ")");
  if (layout.schedule == PipelineSchedule::kInterleaved)
    return Unimplemented("parallel engine: the interleaved pipeline schedule");
  if (config.train.precision != "fp32")
    return Unimplemented("parallel engine: precision '" + config.train.precision +
                         "' (only fp32)");
  const int dp = layout.dp(), micro = config.train.micro_batches;
  if (config.train.batch_size % (dp * micro) != 0)
    return InvalidArgument("train.batch_size (" + std::to_string(config.train.batch_size) +
                           ") must be divisible by dp (" + std::to_string(dp) +
                           ") × train.micro_batches (" + std::to_string(micro) + ")");
  if (layout.pp > config.model.n_layer + 2)
    return InvalidArgument("layout pp=" + std::to_string(layout.pp) + " exceeds model.n_layer + 2 (" +
                           std::to_string(config.model.n_layer + 2) + ")");
  std::unique_ptr<DistTrainer> t(new DistTrainer());
  t->config_ = config;
  t->layout_ = layout;
  t->wait_timeout_ = wait_timeout;
  ASSIGN_OR_RETURN(t->groups_, BuildProcessGroups(world, layout, Deadline::After(wait_timeout)));
  t->coords_ = CoordsOf(layout, world.rank());
  t->shards_ = layout.dp_shard;
  t->shard_ = t->coords_.dp_shard;
  t->micro_ = micro;
  t->micro_rows_ = config.train.batch_size / (dp * micro);
  t->stage_ = BuildStageLayout(config.model, layout.pp, t->coords_.pp, layout.dp_shard, layout.tp,
                               t->coords_.tp);
  const int stages_left = layout.pp - t->coords_.pp;
  const int slots = layout.schedule == PipelineSchedule::kGpipe ? micro : std::min(micro, stages_left);
  ASSIGN_OR_RETURN(t->runner_, StageRunner::Create(config.model, t->stage_, t->micro_rows_, slots,
                                                   TpGroup{t->groups_.tp.get(), wait_timeout},
                                                   layout.sequence_parallel, config.train.recompute));
  ASSIGN_OR_RETURN(DataOrder order, ParseDataOrder(config.data.order));
  ASSIGN_OR_RETURN(DataLoader loader,
                   DataLoader::Create(std::move(train_tokens), config.train.batch_size,
                                      config.model.seq_len, order,
                                      static_cast<uint64_t>(config.train.seed)));
  t->loader_ = std::make_unique<DataLoader>(std::move(loader));
  t->state_.loader = t->loader_->state();
  RETURN_IF_ERROR(t->Initialize());
  return t;
}

Status DistTrainer::Initialize() {
  const int zero = layout_.zero;
  const size_t units = stage_.units.size();
  own_begin_.assign(units, 0);
  own_size_.assign(units, 0);
  own_offset_.assign(units, 0);
  for (size_t u = 0; u < units; ++u) {
    const StageUnit& unit = stage_.units[u];
    const int64_t k = unit.shard_size(shards_);
    own_begin_[u] = zero == 0 ? 0 : shard_ * k;
    own_size_[u] = zero == 0 ? unit.size : k;
    own_offset_[u] = own_total_;
    own_total_ += own_size_[u];
  }
  // Pieces: the intersections of each unit's owned (update) or shard (norm) range with its tensors.
  auto pieces = [&](bool owned) {
    std::vector<Piece> out;
    for (size_t u = 0; u < units; ++u) {
      const StageUnit& unit = stage_.units[u];
      const int64_t k = unit.shard_size(shards_);
      const int64_t lo = unit.begin + (owned ? own_begin_[u] : shard_ * k);
      const int64_t hi = lo + (owned ? own_size_[u] : k);
      for (int ti : unit.tensors) {
        const StageTensor& t = stage_.tensors[ti];
        const int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.shape.numel());
        if (a >= b) continue;
        out.push_back(Piece{ti, static_cast<int>(u), a,
                            own_offset_[u] + (a - unit.begin - own_begin_[u]), b - a});
      }
    }
    return out;
  };
  update_pieces_ = pieces(true);
  norm_pieces_ = pieces(false);

  const size_t f = sizeof(float);
  ASSIGN_OR_RETURN(params_, Buffer::Allocate(Device::kCpu, (zero < 3 ? stage_.total : own_total_) * f));
  ASSIGN_OR_RETURN(grads_, Buffer::Allocate(Device::kCpu, (zero < 2 ? stage_.total : own_total_) * f));
  ASSIGN_OR_RETURN(m_, Buffer::Allocate(Device::kCpu, own_total_ * f));
  ASSIGN_OR_RETURN(v_, Buffer::Allocate(Device::kCpu, own_total_ * f));
  gathered_.resize(units);
  gather_work_.resize(units);
  unit_grads_.resize(units);
  send_forward_.resize(static_cast<size_t>(runner_->slots()));
  send_backward_.resize(static_cast<size_t>(runner_->slots()));

  // The single-process initialisation: the whole model into a temporary f32 arena, then copy
  // this rank's part.
  Arena full;
  AddGptTensors(config_.model, DType::kF32, &full);
  RETURN_IF_ERROR(full.Allocate(Device::kCpu).WithContext("initial weights"));
  RETURN_IF_ERROR(Gpt::InitializeWeights(config_.model, static_cast<uint64_t>(config_.train.seed), full));
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
        std::memcpy(dst, src + (b.size.ndim ? b.offset.dims[0] : 0), static_cast<size_t>(b.size.numel()) * f);
        continue;
      }
      const int64_t cols = t.global_shape.dims[1];
      for (int64_t row = 0; row < b.size.dims[0]; ++row)
        std::memcpy(dst + row * b.size.dims[1], src + (b.offset.dims[0] + row) * cols + b.offset.dims[1],
                    static_cast<size_t>(b.size.dims[1]) * f);
    }
  }
  float* p = params_.View(DType::kF32, Shape{1}).data_as<float>();
  if (zero < 3) {
    std::memcpy(p, local.data(), local.size() * f);
  } else {
    for (const Piece& pc : update_pieces_)
      std::memcpy(p + pc.own, local.data() + pc.flat, static_cast<size_t>(pc.count) * f);
  }
  inputs_.resize(static_cast<size_t>(config_.train.batch_size) * config_.model.seq_len);
  targets_.resize(inputs_.size());
  return Status();
}

Result<Buffer> DistTrainer::Transient(size_t floats) {
  ASSIGN_OR_RETURN(Buffer b, Buffer::Allocate(Device::kCpu, floats * sizeof(float)));
  transient_bytes_ += b.size();
  peak_transient_bytes_ = std::max(peak_transient_bytes_, transient_bytes_);
  return b;
}

void DistTrainer::FreeTransient(Buffer* b) {
  transient_bytes_ -= b->size();
  *b = Buffer();
}

MemoryStats DistTrainer::memory() const {
  MemoryStats s;
  s.param_bytes = params_.size();
  s.grad_bytes = grads_.size();
  s.optimizer_bytes = m_.size() + v_.size();
  s.activation_bytes = runner_->bytes();
  s.activation_slots = runner_->slots();
  s.peak_transient_bytes = peak_transient_bytes_;
  return s;
}

Tensor DistTrainer::View(float* unit_base, int tensor) const {
  const StageTensor& t = stage_.tensors[static_cast<size_t>(tensor)];
  return Tensor(unit_base + (t.offset - stage_.units[static_cast<size_t>(t.unit)].begin),
                DType::kF32, t.shape);
}

BlockTensors DistTrainer::BlockView(float* base, int unit) const {
  const std::vector<int>& ts = stage_.units[static_cast<size_t>(unit)].tensors;
  return {View(base, ts[0]), View(base, ts[1]), View(base, ts[2]),  View(base, ts[3]),
          View(base, ts[4]), View(base, ts[5]), View(base, ts[6]),  View(base, ts[7]),
          View(base, ts[8]), View(base, ts[9]), View(base, ts[10]), View(base, ts[11])};
}

Status DistTrainer::StartGather(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 3 || gathered_[u].data() != nullptr) return Status();
  const int64_t size = stage_.units[u].size;
  ASSIGN_OR_RETURN(gathered_[u], Transient(static_cast<size_t>(size)));
  float* shard = params_.View(DType::kF32, Shape{1}).data_as<float>() + own_offset_[u];
  gather_work_[u] = groups_.dp_shard->AllGather(shard, gathered_[u].data(),
                                                static_cast<size_t>(own_size_[u]), DType::kF32);
  return Status();
}

Result<float*> DistTrainer::AcquireParams(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 3)
    return params_.View(DType::kF32, Shape{1}).data_as<float>() + stage_.units[u].begin;
  RETURN_IF_ERROR(StartGather(unit));
  if (gather_work_[u]) {
    RETURN_IF_ERROR(WaitFor(gather_work_[u], WaitDeadline(),
                            "ZeRO-3 all-gather of unit " + std::to_string(unit)));
    gather_work_[u].reset();
  }
  return static_cast<float*>(gathered_[u].data());
}

void DistTrainer::ReleaseParams(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 3 || gathered_[u].data() == nullptr) return;
  FreeTransient(&gathered_[u]);
}

Result<float*> DistTrainer::UnitGrads(int unit) {
  const size_t u = static_cast<size_t>(unit);
  if (layout_.zero < 2)
    return grads_.View(DType::kF32, Shape{1}).data_as<float>() + stage_.units[u].begin;
  if (unit_grads_[u].data() == nullptr) {
    ASSIGN_OR_RETURN(unit_grads_[u], Transient(static_cast<size_t>(stage_.units[u].size)));
  }
  return static_cast<float*>(unit_grads_[u].data());
}

Status DistTrainer::Forward(int micro) {
  const int slot = micro % runner_->slots();
  const size_t s = static_cast<size_t>(slot);
  const int stage = coords_.pp;
  if (send_forward_[s]) {
    RETURN_IF_ERROR(WaitFor(send_forward_[s], WaitDeadline(), "pipeline activation send"));
    send_forward_[s].reset();
  }
  const int T = config_.model.seq_len;
  const size_t n = static_cast<size_t>(micro_rows_) * T;
  const size_t at = (static_cast<size_t>(coords_.dp) * micro_ + micro) * n;
  if (stage_.has_embedding)
    RETURN_IF_ERROR(Copy(runner_->tokens(slot),
                         Tensor(inputs_.data() + at, DType::kI32, {micro_rows_, T})));
  if (stage_.has_head)
    RETURN_IF_ERROR(Copy(runner_->targets(slot),
                         Tensor(targets_.data() + at, DType::kI32, {micro_rows_, T})));
  if (stage > 0) {
    const Tensor in = runner_->input(slot);
    RETURN_IF_ERROR(WaitFor(groups_.pp_forward->Recv(in.data(), static_cast<size_t>(in.numel()),
                                                     DType::kF32, stage - 1, static_cast<uint32_t>(micro)),
                            WaitDeadline(), "pipeline activation receive from stage " + std::to_string(stage - 1)));
  }
  const double t0 = Now();
  const int aux = stage_.aux_units;
  for (int u = 0; u < aux; ++u) RETURN_IF_ERROR(StartGather(u));
  if (stage_.layers() > 0) RETURN_IF_ERROR(StartGather(aux));
  float* wte = nullptr;
  float* rest = nullptr;
  if (aux > 0) {
    ASSIGN_OR_RETURN(wte, AcquireParams(0));
    ASSIGN_OR_RETURN(rest, AcquireParams(1));
  }
  const std::vector<int> rest_t = aux > 0 ? stage_.units[1].tensors : std::vector<int>();
  if (stage_.has_embedding)
    RETURN_IF_ERROR(runner_->EmbeddingForward(slot, View(wte, stage_.units[0].tensors[0]),
                                              View(rest, rest_t[0])));
  for (int j = 0; j < stage_.layers(); ++j) {
    const int unit = aux + j;
    if (j + 1 < stage_.layers()) RETURN_IF_ERROR(StartGather(unit + 1));
    ASSIGN_OR_RETURN(float* p, AcquireParams(unit));
    RETURN_IF_ERROR(runner_->BlockForward(slot, j, BlockView(p, unit)));
    ReleaseParams(unit);
  }
  if (stage_.has_head) {
    const size_t lnf = stage_.has_embedding ? 1 : 0;
    ASSIGN_OR_RETURN(double loss, runner_->HeadForward(slot, View(rest, rest_t[lnf]),
                                                       View(rest, rest_t[lnf + 1]),
                                                       View(wte, stage_.units[0].tensors[0]),
                                                       evaluating_ ? 0.0f : 1.0f / static_cast<float>(static_cast<int64_t>(config_.train.batch_size) * T)));
    loss_sum_ += loss;
  }
  for (int u = 0; u < aux; ++u) ReleaseParams(u);
  timings_.compute_s += Now() - t0;
  if (stage + 1 < layout_.pp) {
    const Tensor out = runner_->output(slot);
    send_forward_[s] = groups_.pp_forward->Send(out.data(), static_cast<size_t>(out.numel()),
                                                DType::kF32, stage + 1, static_cast<uint32_t>(micro));
  }
  return Status();
}

Status DistTrainer::Backward(int micro, bool last) {
  const int slot = micro % runner_->slots();
  const size_t s = static_cast<size_t>(slot);
  const int stage = coords_.pp;
  if (send_backward_[s]) {
    RETURN_IF_ERROR(WaitFor(send_backward_[s], WaitDeadline(), "pipeline gradient send"));
    send_backward_[s].reset();
  }
  if (stage + 1 < layout_.pp) {
    const Tensor d = runner_->dout(slot);
    RETURN_IF_ERROR(WaitFor(groups_.pp_backward->Recv(d.data(), static_cast<size_t>(d.numel()),
                                                      DType::kF32, stage + 1, static_cast<uint32_t>(micro)),
                            WaitDeadline(), "pipeline gradient receive from stage " + std::to_string(stage + 1)));
  }
  double busy = Now();
  const int aux = stage_.aux_units;
  for (int u = 0; u < aux; ++u) RETURN_IF_ERROR(StartGather(u));
  if (stage_.layers() > 0) RETURN_IF_ERROR(StartGather(aux + stage_.layers() - 1));
  float *wte = nullptr, *rest = nullptr, *g_wte = nullptr, *g_rest = nullptr;
  if (aux > 0) {
    ASSIGN_OR_RETURN(wte, AcquireParams(0));
    ASSIGN_OR_RETURN(rest, AcquireParams(1));
    ASSIGN_OR_RETURN(g_wte, UnitGrads(0));
    ASSIGN_OR_RETURN(g_rest, UnitGrads(1));
  }
  const std::vector<int> rest_t = aux > 0 ? stage_.units[1].tensors : std::vector<int>();
  const int wte_t = aux > 0 ? stage_.units[0].tensors[0] : -1;
  if (stage_.has_head) {
    const size_t lnf = stage_.has_embedding ? 1 : 0;
    RETURN_IF_ERROR(runner_->HeadBackward(slot, View(rest, rest_t[lnf]), View(wte, wte_t),
                                          View(g_rest, rest_t[lnf]), View(g_rest, rest_t[lnf + 1]),
                                          View(g_wte, wte_t)));
  }
  for (int j = stage_.layers() - 1; j >= 0; --j) {
    const int unit = aux + j;
    if (j > 0) RETURN_IF_ERROR(StartGather(unit - 1));
    ASSIGN_OR_RETURN(float* p, AcquireParams(unit));
    ASSIGN_OR_RETURN(float* g, UnitGrads(unit));
    RETURN_IF_ERROR(runner_->BlockBackward(slot, j, BlockView(p, unit), BlockView(g, unit)));
    ReleaseParams(unit);
    if (last) {
      timings_.compute_s += Now() - busy;
      RETURN_IF_ERROR(StartReduce(unit));
      // ZeRO-2/3 bound the full unit gradients alive at once; ZeRO-0/1 only collect finished ones.
      RETURN_IF_ERROR(AdvanceReductions(layout_.zero >= 2 ? kMaxReductionsInFlight : SIZE_MAX));
      busy = Now();
    }
  }
  if (stage_.has_embedding)
    RETURN_IF_ERROR(runner_->EmbeddingBackward(slot, View(g_wte, wte_t), View(g_rest, rest_t[0])));
  for (int u = 0; u < aux; ++u) ReleaseParams(u);
  timings_.compute_s += Now() - busy;
  // The auxiliary units' gradients are final now, except the tied wte between two stages,
  // which SyncTiedEmbedding sums first.
  if (last && layout_.pp == 1)
    for (int u = 0; u < aux; ++u) RETURN_IF_ERROR(StartReduce(u));
  if (stage > 0) {
    const Tensor d = runner_->dinput(slot);
    send_backward_[s] = groups_.pp_backward->Send(d.data(), static_cast<size_t>(d.numel()),
                                                  DType::kF32, stage - 1, static_cast<uint32_t>(micro));
  }
  return Status();
}

Status DistTrainer::StartReduce(int unit) {
  const size_t u = static_cast<size_t>(unit);
  const StageUnit& su = stage_.units[u];
  if (su.size == 0) return Status();
  if (layout_.sequence_parallel && layout_.tp > 1) {
    // Sequence parallelism leaves the LayerNorm and wpe gradients as partial sums over the
    // tensor-parallel ranks' positions: complete them first.
    ASSIGN_OR_RETURN(float* g, UnitGrads(unit));
    for (int ti : su.tensors) {
      const std::string& name = stage_.tensors[static_cast<size_t>(ti)].name;
      if (name != "wpe" && name.find("ln_") == std::string::npos) continue;
      RETURN_IF_ERROR(TpAllReduce(TpGroup{groups_.tp.get(), wait_timeout_}, View(g, ti),
                                  "sequence-parallel LayerNorm/wpe gradients"));
    }
  }
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
      p.work = dp.ReduceScatter(unit_grads_[u].data(), grads + own_offset_[u], k, DType::kF32,
                                comm::ReduceOp::kSum);
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
      float* shard = layout_.zero == 1 ? grads + su.begin + shard_ * k : grads + own_offset_[u];
      if (layout_.zero == 1) {
        std::memcpy(shard, p.scratch.data(), static_cast<size_t>(k) * sizeof(float));
        FreeTransient(&p.scratch);
      } else {
        FreeTransient(&unit_grads_[u]);
      }
      if (layout_.dp_replicate > 1) {
        p.phase = 1;
        p.work = groups_.dp_replicate->AllReduce(shard, shard, static_cast<size_t>(k),
                                                 DType::kF32, comm::ReduceOp::kSum);
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
  ASSIGN_OR_RETURN(float* g, UnitGrads(0));
  const int64_t n = stage_.tensors[static_cast<size_t>(stage_.units[0].tensors[0])].shape.numel();
  return WaitFor(groups_.embedding->AllReduce(g, g, static_cast<size_t>(n), DType::kF32,
                                              comm::ReduceOp::kSum),
                 WaitDeadline(), "tied embedding gradient all-reduce between the end stages");
}

Result<StepStats> DistTrainer::Step() {
  const double step_start = Now();
  timings_ = StepTimings();
  const int B = config_.train.batch_size, T = config_.model.seq_len;
  StepStats stats;
  stats.step = state_.step + 1;
  stats.lr = LearningRate(config_.optim, state_.step, config_.train.steps);
  stats.tokens = static_cast<int64_t>(B) * T;
  loader_->Next(inputs_, targets_);
  const int32_t V = config_.model.vocab_size;
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i] < 0 || inputs_[i] >= V || targets_[i] < 0 || targets_[i] >= V)
      return InvalidArgument("token at position " + std::to_string(i) +
                             " of the batch is outside the vocabulary of " + std::to_string(V));
  if (layout_.zero < 2) RETURN_IF_ERROR(Zero(grads_.View(DType::kF32, Shape{static_cast<int64_t>(grads_.size() / 4)})));
  loss_sum_ = 0;

  // The schedule of this stage: (forward?, micro-batch) in order.
  std::vector<std::pair<bool, int>> ops;
  const int m = micro_;
  if (layout_.schedule == PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i) ops.emplace_back(true, i);
    for (int i = 0; i < m; ++i) ops.emplace_back(false, i);
  } else {
    const int warmup = std::min(layout_.pp - coords_.pp - 1, m);
    for (int i = 0; i < warmup; ++i) ops.emplace_back(true, i);
    for (int i = 0; i < m - warmup; ++i) {
      ops.emplace_back(true, warmup + i);
      ops.emplace_back(false, i);
    }
    for (int i = m - warmup; i < m; ++i) ops.emplace_back(false, i);
  }
  int backwards = 0;
  for (const auto& [forward, micro] : ops) {
    if (forward) {
      RETURN_IF_ERROR(Forward(micro));
    } else {
      RETURN_IF_ERROR(Backward(micro, ++backwards == m));
    }
  }
  for (size_t s = 0; s < send_forward_.size(); ++s) {
    for (comm::WorkHandle* w : {&send_forward_[s], &send_backward_[s]}) {
      if (!*w) continue;
      RETURN_IF_ERROR(WaitFor(*w, WaitDeadline(), "pipeline send"));
      w->reset();
    }
  }
  const double wait_start = Now();
  if (layout_.pp > 1 && stage_.aux_units > 0) {
    RETURN_IF_ERROR(SyncTiedEmbedding());
    for (int u = 0; u < stage_.aux_units; ++u) RETURN_IF_ERROR(StartReduce(u));
  }
  RETURN_IF_ERROR(AdvanceReductions(0));
  timings_.reduce_wait_s = Now() - wait_start;

  // Loss and gradient norm: every rank's partial sums, gathered over the world and added in rank
  // order (so every rank gets bitwise the same totals).
  const double opt_start = Now();
  double sumsq = 0;
  if (coords_.dp_replicate == 0) {
    const float* g = grads_.View(DType::kF32, Shape{1}).data_as<float>();
    for (const Piece& pc : norm_pieces_) {
      const StageTensor& t = stage_.tensors[static_cast<size_t>(pc.tensor)];
      // Count every element once: not the tied copy, and replicated tensors on tp rank 0 only.
      if (t.tied_copy || (!t.tp_sharded && coords_.tp != 0)) continue;
      const float* at = layout_.zero < 2 ? g + pc.flat : g + pc.own;
      ASSIGN_OR_RETURN(double s, SumOfSquares(F32(const_cast<float*>(at), pc.count)));
      sumsq += s;
    }
  }
  ASSIGN_OR_RETURN(auto totals, SumOverWorld(sumsq));
  const auto [loss_total, sumsq_total] = totals;
  stats.loss = loss_total / static_cast<double>(stats.tokens);
  RETURN_IF_ERROR(OptimizerStep(sumsq_total, &stats));
  ++state_.step;
  state_.loader = loader_->state();
  timings_.optimizer_s = Now() - opt_start;
  timings_.step_s = Now() - step_start;
  return stats;
}

Result<double> DistTrainer::TimeGradientSync() {
  if (layout_.zero != 0) return FailedPrecondition("TimeGradientSync: only for ZeRO-0 (DDP)");
  const double start = Now();
  for (int u = static_cast<int>(stage_.units.size()) - 1; u >= 0; --u) RETURN_IF_ERROR(StartReduce(u));
  RETURN_IF_ERROR(AdvanceReductions(0));
  return Now() - start;
}

Result<std::pair<double, double>> DistTrainer::SumOverWorld(double sumsq) {
  // Each data-parallel rank's head stage summed the losses of its own rows (the same on every
  // tensor-parallel rank: counted on rank 0). Gathered and added in rank order, so every rank
  // gets bitwise the same totals.
  const double loss_part = coords_.tp == 0 ? loss_sum_ : 0.0;
  const int64_t mine[2] = {std::bit_cast<int64_t>(loss_part), std::bit_cast<int64_t>(sumsq)};
  comm::Communicator& world = *groups_.world;
  std::vector<int64_t> all(static_cast<size_t>(world.size()) * 2);
  RETURN_IF_ERROR(WaitFor(world.AllGather(mine, all.data(), 2, DType::kI64), WaitDeadline(),
                          "loss and gradient-norm all-gather"));
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
    const int32_t V = config_.model.vocab_size;
    for (size_t i = 0; i < inputs_.size() && status.ok(); ++i)
      if (inputs_[i] < 0 || inputs_[i] >= V || targets_[i] < 0 || targets_[i] >= V)
        status = InvalidArgument("evaluation token outside the vocabulary of " + std::to_string(V));
    loss_sum_ = 0;
    for (int m = 0; m < micro_ && status.ok(); ++m) status = Forward(m);
    for (size_t s = 0; s < send_forward_.size() && status.ok(); ++s) {
      if (!send_forward_[s]) continue;
      status = WaitFor(send_forward_[s], WaitDeadline(), "pipeline send");
      send_forward_[s].reset();
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
  if (!std::isfinite(sumsq)) {
    stats->skipped = true;
    stats->grad_norm = INFINITY;
    return Status();
  }
  stats->grad_norm = std::sqrt(sumsq);
  double clip = 1.0;
  if (config_.optim.grad_clip > 0 && stats->grad_norm > config_.optim.grad_clip)
    clip = config_.optim.grad_clip / stats->grad_norm;
  ++state_.adam_step;
  AdamWParams hp;
  hp.lr = static_cast<float>(stats->lr);
  hp.beta1 = static_cast<float>(config_.optim.beta1);
  hp.beta2 = static_cast<float>(config_.optim.beta2);
  hp.eps = static_cast<float>(config_.optim.eps);
  hp.grad_scale = static_cast<float>(clip);
  hp.step = state_.adam_step;
  float* p = params_.View(DType::kF32, Shape{1}).data_as<float>();
  float* g = grads_.View(DType::kF32, Shape{1}).data_as<float>();
  float* m = m_.View(DType::kF32, Shape{1}).data_as<float>();
  float* v = v_.View(DType::kF32, Shape{1}).data_as<float>();
  const int zero = layout_.zero;
  for (const Piece& pc : update_pieces_) {
    const StageTensor& t = stage_.tensors[static_cast<size_t>(pc.tensor)];
    hp.weight_decay = t.decayed ? static_cast<float>(config_.optim.weight_decay) : 0.0f;
    RETURN_IF_ERROR(rt::AdamW(F32((zero < 3 ? p + pc.flat : p + pc.own), pc.count),
                              F32((zero < 2 ? g + pc.flat : g + pc.own), pc.count),
                              F32(m + pc.own, pc.count), F32(v + pc.own, pc.count), Tensor(), hp)
                        .WithContext("AdamW on '" + t.name + "'"));
  }
  if (zero == 1 || zero == 2) {
    // Every rank updated its shard of each unit; gather the units back.
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
  }
  return Status();
}

}  // namespace rt::dist
