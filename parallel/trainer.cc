#include "parallel/trainer.h"

#include <cmath>

#include "base/bytes.h"
#include "base/fault.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "parallel/shard_plan.h"
#include "parallel/step_policy.h"

namespace rt {

namespace {
constexpr uint32_t kTrainerStateVersion = 2;
}  // namespace

std::vector<std::byte> TrainerState::Serialize() const {
  ByteWriter w;
  w.Put<uint32_t>(kTrainerStateVersion);
  w.Put<int64_t>(step);
  w.Put<int64_t>(adam_step);
  w.Put<double>(loss_scale);
  w.Put<int64_t>(clean_steps);
  w.Put<int64_t>(tokens_seen);
  w.Put<int64_t>(schedule_steps);
  const std::vector<std::byte> l = loader.Serialize();
  w.PutBytes(l.data(), l.size());
  return w.Take();
}

Result<TrainerState> TrainerState::Deserialize(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "trainer state");
  ASSIGN_OR_RETURN(uint32_t version, r.Get<uint32_t>());
  if (version != kTrainerStateVersion)
    return Corruption("trainer state: unknown version " + std::to_string(version) +
                      " (this build reads version " + std::to_string(kTrainerStateVersion) + ")");
  TrainerState s;
  ASSIGN_OR_RETURN(s.step, r.Get<int64_t>());
  ASSIGN_OR_RETURN(s.adam_step, r.Get<int64_t>());
  ASSIGN_OR_RETURN(s.loss_scale, r.Get<double>());
  ASSIGN_OR_RETURN(s.clean_steps, r.Get<int64_t>());
  ASSIGN_OR_RETURN(s.tokens_seen, r.Get<int64_t>());
  ASSIGN_OR_RETURN(s.schedule_steps, r.Get<int64_t>());
  ASSIGN_OR_RETURN(auto loader, r.GetBytes(r.remaining()));
  ASSIGN_OR_RETURN(s.loader, LoaderState::Deserialize(loader));
  if (s.step < 0 || s.adam_step < 0 || s.clean_steps < 0 || s.tokens_seen < 0 ||
      s.schedule_steps < 0)
    return Corruption("trainer state: a negative count (step " + std::to_string(s.step) +
                      ", adam_step " + std::to_string(s.adam_step) + ", clean_steps " +
                      std::to_string(s.clean_steps) + ", tokens_seen " +
                      std::to_string(s.tokens_seen) + ", schedule_steps " +
                      std::to_string(s.schedule_steps) + ")");
  if (s.adam_step > s.step)
    return Corruption("trainer state: adam_step " + std::to_string(s.adam_step) + " exceeds step " +
                      std::to_string(s.step));
  if (!std::isfinite(s.loss_scale) || s.loss_scale < 1.0)
    return Corruption("trainer state: loss_scale " + std::to_string(s.loss_scale) +
                      " is not a finite value ≥ 1");
  return s;
}

Result<std::unique_ptr<Trainer>> Trainer::Create(
    const RunConfig& config, std::shared_ptr<const std::vector<uint16_t>> train_tokens,
    const std::string& init_from, WeightInit init) {
  RETURN_IF_ERROR(ValidateRunConfig(config));
  if (init == WeightInit::kForLoad && !init_from.empty())
    return InvalidArgument("weights from '" + init_from +
                           "' and from a checkpoint to be loaded: choose one");
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  ASSIGN_OR_RETURN(Precision precision, ParsePrecision(config.train.precision));
  const int rows = config.train.batch_size / config.train.micro_batches;
  ASSIGN_OR_RETURN(Device device, TrainDevice(config.train));
  ASSIGN_OR_RETURN(t->model_,
                   Gpt::Create(config.model, precision, rows, config.train.recompute, device));
  ASSIGN_OR_RETURN(t->optimizer_, AdamWOptimizer::Create(*t->model_, config.optim));
  if (init == WeightInit::kForLoad) {
    // Left zero: the checkpoint's master weights arrive through Shards(), then Restore.
  } else if (init_from.empty()) {
    RETURN_IF_ERROR(Gpt::InitializeWeights(config.model, static_cast<uint64_t>(config.train.seed),
                                           t->optimizer_->master()));
  } else {
    ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(init_from));
    RETURN_IF_ERROR(ImportWeights(file, t->optimizer_->master()));
  }
  RETURN_IF_ERROR(t->optimizer_->SyncParams());
  ASSIGN_OR_RETURN(t->loader_, CreateTrainLoader(config, std::move(train_tokens)));
  t->state_ = InitialTrainerState(config, precision == Precision::kFp16, *t->loader_);
  const size_t n = static_cast<size_t>(config.train.batch_size) * config.model.seq_len;
  t->inputs_.resize(n);
  t->targets_.resize(n);
  return t;
}

Status Trainer::Restore(const TrainerState& state) {
  state_ = state;
  loader_->Restore(state.loader);
  return optimizer_->SyncParams().WithContext("rebuild the parameters from the master weights");
}

ckpt::StateShards Trainer::Shards() {
  Result<std::vector<parallel::PlannedShard>> planned =
      parallel::PlanRankShardsOf(config_.model, model_->precision(), parallel::ParallelLayout{}, 0);
  RT_CHECK(planned.ok());
  auto find = [](const Arena& arena, const std::string& name) {
    for (int i = 0; i < arena.size(); ++i)
      if (arena.name(i) == name) return arena.Get(i);
    RT_CHECK(false);
    return Tensor();
  };
  ckpt::StateShards out;
  for (parallel::PlannedShard& p : *planned) {
    ckpt::TensorShard s = std::move(p.shard);
    const Arena* arena = nullptr;
    switch (s.kind) {
      case ckpt::StateKind::kParam:
        arena = &model_->params();
        break;
      case ckpt::StateKind::kMaster:
        arena = &optimizer_->master();
        break;
      case ckpt::StateKind::kAdamM:
        arena = &optimizer_->m();
        break;
      case ckpt::StateKind::kAdamV:
        arena = &optimizer_->v();
        break;
      case ckpt::StateKind::kStep:
        break;
    }
    if (arena == nullptr) {
      s.view = Tensor(&state_.adam_step, DType::kI64, Shape());
    } else {
      // One rank of one process: every piece is a whole tensor.
      const Tensor t = find(*arena, s.name);
      RT_CHECK(t.dtype() == s.dtype && t.numel() == p.count);
      s.view = Tensor(t.data(), t.dtype(), Shape{t.numel()}, t.device());
    }
    out.shards.push_back(std::move(s));
  }
  return out;
}

Result<StepStats> Trainer::Step() {
  const int B = config_.train.batch_size, T = config_.model.seq_len;
  const int micro = config_.train.micro_batches, rows = B / micro;
  StepStats stats = StartStep(config_, state_);
  loader_->Next(inputs_, targets_);
  RETURN_IF_ERROR(model_->ZeroGrads());
  const float dloss = LossGradientScale(state_, B, T);
  double loss_sum = 0;
  const size_t chunk = static_cast<size_t>(rows) * T;
  for (int m = 0; m < micro; ++m) {
    ASSIGN_OR_RETURN(double loss, model_->Forward(std::span(inputs_).subspan(m * chunk, chunk),
                                                  std::span(targets_).subspan(m * chunk, chunk),
                                                  rows, T, dloss));
    RETURN_IF_ERROR(model_->Backward());
    loss_sum += loss;
  }
  stats.loss = loss_sum / micro;
  if (!RT_FAULT_POINT("parallel.trainer.grad_overflow").ok()) {
    RETURN_IF_ERROR(Scale(model_->grads().Get(0), INFINITY));  // injected overflow (tests)
  }

  ASSIGN_OR_RETURN(double sumsq, optimizer_->GradSumOfSquares());
  const std::optional<float> grad_scale =
      PlanUpdate(config_.optim, config_.train, model_->precision() == Precision::kFp16, sumsq,
                 &state_, &stats);
  if (grad_scale) RETURN_IF_ERROR(optimizer_->Update(stats.lr, *grad_scale, state_.adam_step));
  CountStep(stats, *loader_, &state_);
  return stats;
}

Result<double> Trainer::Evaluate(std::shared_ptr<const std::vector<uint16_t>> tokens, int batches) {
  return EvaluateLoss(*model_, std::move(tokens), config_.train.batch_size,
                      config_.train.batch_size / config_.train.micro_batches, batches);
}

Status Trainer::Export(const std::string& path, const std::string& tokenizer) const {
  return ExportWeights(path, config_.model, tokenizer, optimizer_->master());
}

Result<double> EvaluateLoss(Gpt& model, std::shared_ptr<const std::vector<uint16_t>> tokens,
                            int rows, int max_rows_per_forward, int batches) {
  const int T = model.config().seq_len;
  ASSIGN_OR_RETURN(DataLoader loader,
                   DataLoader::Create(std::move(tokens), rows, T, DataOrder::kSequential, 0));
  std::vector<int32_t> x(static_cast<size_t>(rows) * T), y(x.size());
  double sum = 0;
  int64_t count = 0;
  for (int b = 0; b < batches; ++b) {
    loader.Next(x, y);
    for (int r = 0; r < rows; r += max_rows_per_forward) {
      const int n = std::min(max_rows_per_forward, rows - r);
      const size_t at = static_cast<size_t>(r) * T, len = static_cast<size_t>(n) * T;
      ASSIGN_OR_RETURN(double loss, model.Forward(std::span(x).subspan(at, len),
                                                  std::span(y).subspan(at, len), n, T, 0.0f));
      sum += loss * n;
      count += n;
    }
  }
  return sum / static_cast<double>(count);
}

}  // namespace rt
