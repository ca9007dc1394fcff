// The distributed training engine: one rank of a run laid out by a ParallelLayout. It trains the
// same model to the same numbers as the single-process Trainer (parallel/trainer.h):
//   - pipeline parallelism: the rank runs one stage (StageLayout) over train.micro_batches
//     micro-batches in the GPipe, 1F1B or interleaved 1F1B schedule (schedule.h; interleaved:
//     layout.virtual_stages model chunks per rank), activations and their gradients going to the
//     neighbouring (virtual) stages by Send/Recv; the tied wte's gradient is summed between the
//     first and last stages;
//   - data parallelism over dp_shard × dp_replicate ranks, each taking an equal slice of the
//     global batch: ZeRO-0 (DDP) all-reduces each unit's gradients (as reduce-scatter then
//     all-gather, the ring's two halves, so that every ZeRO stage sums each element in the same
//     order) as soon as its last micro-batch's backward is done, overlapped with the rest of the
//     backward; ZeRO-1 keeps
//     1/dp_shard of the AdamW state per rank (reduce-scatter, update, all-gather); ZeRO-2 also
//     keeps only the gradient shard (units reduce-scattered during the backward, the full unit
//     gradient freed after); ZeRO-3 also keeps only the parameter shard (units all-gathered
//     before each forward and backward, freed after use, the next one prefetched). With
//     dp_replicate > 1 (HSDP) gradient shards are then all-reduced across the replica groups.
//     Gradients are not synchronised between micro-batches (accumulation is local);
//   - tensor parallelism over tp ranks (tensor_parallel.h): heads, MLP columns and the vocabulary
//     split Megatron-style, vocabulary-parallel embedding and cross-entropy; optionally sequence
//     parallelism (the residual stream split on the sequence between the tensor-parallel parts);
//   - global-norm clipping over every parameter counted once (data-parallel replicas, the tied
//     copy and tensors replicated across tensor-parallel ranks excluded).
// train.recompute keeps only each block's input per micro-batch and recomputes the rest in the
// backward. train.precision bf16/fp16 is the single-process engine's: parameters, activations
// and each rank's gradient accumulation over its micro-batches in the compute dtype; fp32 master
// weights (the engine's fp32 parameters, sharded as ZeRO shards them), AdamW state and gradient
// reductions (each unit's low-precision gradients are converted to fp32 once its backward is
// done, then reduced); fp16 scales the loss dynamically and skips a step whose gradients hold
// inf/NaN on any rank (the norm summed over the world is then not finite everywhere).
// Device: train.device = "cpu" keeps every buffer in host memory and needs a CPU world
// communicator; "cuda" keeps every buffer (parameters, gradients, master, AdamW m/v, ZeRO
// shards, activations, pipeline buffers) on the calling thread's current CUDA device and needs
// an NCCL world communicator on that device (its Split sub-groups are NCCL too). Kernels run on
// the legacy default stream, which NCCL's blocking streams order with; host code reads device
// data only through ops that synchronise (Copy to the host, SumOfSquares).
//
// The world communicator should be built with EngineCommOptions (ring algorithms for every
// message size), for the byte formulas of the tensor-parallel collectives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ckpt/shard.h"
#include "comm/communicator.h"
#include "data/data_loader.h"
#include "kernels/tensor.h"
#include "parallel/config.h"
#include "parallel/layout.h"
#include "parallel/schedule.h"
#include "parallel/shard_plan.h"
#include "parallel/stage_layout.h"
#include "parallel/stage_runner.h"
#include "parallel/trainer.h"
#include "parallel/training_engine.h"

namespace rt::parallel {

// Bytes a rank holds for the training state (persistent buffers) and the most it held at once in
// transient ZeRO buffers (gathered parameter units, full unit gradients, reduce-scatter output).
struct MemoryStats {
  size_t param_bytes = 0;      // fp32 parameters (the master) and any bf16/fp16 copy
  size_t grad_bytes = 0;       // fp32 gradients and any bf16/fp16 accumulation buffer
  size_t optimizer_bytes = 0;  // AdamW m and v (fp32 parameters are their own master)
  size_t activation_bytes = 0;
  int activation_slots = 0;  // micro-batches whose activations can be alive at once
  size_t peak_transient_bytes = 0;
};

// Where the last step's time went on this rank.
struct StepTimings {
  double step_s = 0;     // wall time of the step
  double compute_s = 0;  // forward and backward math (the stage's busy time)
  // Per model chunk of this rank (one unless interleaved): its forward and its backward math,
  // each summed over the step's micro-batches (together compute_s).
  std::vector<double> chunk_forward_s, chunk_backward_s;
  double pipeline_s = 0;     // from the step's start to this stage's last pass (the schedule)
  double recv_wait_s = 0;    // waiting for the neighbours' activations and gradients
  double send_wait_s = 0;    // waiting for this stage's own sends to finish (buffer reuse)
  double reduce_wait_s = 0;  // waiting for gradient reductions after the backward (exposed)
  double optimizer_s = 0;    // clipping, AdamW and the ZeRO-1/2 parameter all-gather
};

// Communicator options for the engine's world: `base` with ring algorithms for every message
// size (small_message_bytes = 0).
comm::CommOptions EngineCommOptions(comm::CommOptions base);

// One rank's engine. Not thread-safe (but for Abort); `world` must outlive it.
class DistTrainer final : public TrainingEngine {
 public:
  // Builds the process groups (collective over `world`), the stage and its state, and
  // initialises the weights from train.seed exactly as the single-process Trainer does — or,
  // with WeightInit::kForLoad, leaves them zero without building the full model (a checkpoint
  // is then written into Shards() and Restore called).
  // Errors: InvalidArgument for a config that does not fit the layout (batch_size not divisible
  // by dp · micro_batches, more (virtual) stages than blocks + 2, interleaved with micro_batches
  // not a multiple of pp, an unknown precision) or a world whose backend does not serve
  // train.device (cpu: "cpu", cuda: "nccl"); TrainDevice's for an unusable device; those of
  // comm, allocation and the loader.
  static Result<std::unique_ptr<DistTrainer>> Create(
      const RunConfig& config, const ParallelLayout& layout, comm::Communicator& world,
      std::shared_ptr<const std::vector<uint16_t>> train_tokens,
      std::chrono::milliseconds wait_timeout = std::chrono::seconds(120),
      WeightInit init = WeightInit::kFromSeed);

  ~DistTrainer() override;

  // One optimizer step over the global batch (train.batch_size rows). The returned loss and
  // grad_norm are the global ones, equal on every rank, as is the skip decision (fp16). The
  // fault point "parallel.dist.grad_overflow" (test builds) sets one gradient of the rank that
  // hits it to inf. Errors: comm failures (PeerFailed,
  // DeadlineExceeded naming the op), kernel errors; Aborted (with the op and the group that
  // failed) once Abort() was called; after an error the engine is unusable.
  Result<StepStats> Step() override;

  // Fails every process group of this rank at once (world, tp, dp_shard, dp_replicate,
  // pp_forward, pp_backward, embedding): every blocked and later op fails with CommAborted
  // naming its group within ~100 ms, so a Step running on another thread returns Aborted
  // promptly, as does every later Step. For the end of a membership generation: destroy the
  // engine (before its world) and build a new one on the next generation's world. Thread-safe
  // (any thread, e.g. a worker's control thread), non-blocking, idempotent.
  void Abort();

  // Mean loss over `batches` sequential batches of train.batch_size rows from the start of
  // `tokens`, forward only (as Trainer::Evaluate; equal on every rank). Collective over the world.
  // Errors: InvalidArgument for a token outside the vocabulary or a stream shorter than one
  // window; those of comm.
  Result<double> Evaluate(std::shared_ptr<const std::vector<uint16_t>> tokens,
                          int batches) override;

  // Benchmarks (ZeRO-0 only): runs the gradient all-reduces of one step again, with nothing to
  // overlap them, and returns their wall time — the communication DDP hides behind the backward.
  // Leaves the gradients summed twice (the next Step zeroes them). Collective over the data-
  // parallel group. Errors: FailedPrecondition for zero > 0; those of comm.
  Result<double> TimeGradientSync();

  // Benchmarks (ZeRO-0/1 only): whether the gradient reductions start as soon as a unit's last
  // backward is done (on, the default) or only after the whole backward (off, the baseline that
  // shows how much of their time the overlap hides). Every rank of the data-parallel group must
  // use the same setting for a step; the results are the same either way. Errors:
  // FailedPrecondition for zero > 1.
  Status SetReductionOverlap(bool on);

  // This rank's training state as shards of the named global tensors (shard.h): parameters (the
  // compute dtype: the fp32 master itself, or its bf16/fp16 copy), fp32 master weights, AdamW m
  // and v, and the step.
  ckpt::StateShards Shards() override;

  // Continues from `state` (a checkpoint's TrainerState: step, loader position, loss scale, ...)
  // once every Shards() view of this rank was written in place: takes the position (the loader's
  // is global, so any dp reads on from the same row) and rebuilds the bf16/fp16 parameter copy
  // from the fp32 master. The views hold all of this rank's parameters (ZeRO-1/2 ranks the full
  // stage, ZeRO-3 ranks their shard), so nothing needs gathering. Local: every rank calls it
  // with the same state. Errors: those of the conversion.
  Status Restore(const TrainerState& state) override;

  // Index of the first row of the global batch this rank trains on (its data-parallel slice:
  // coords().dp · train.micro_batches · rows per micro-batch), and how many rows it takes.
  int64_t FirstBatchRow() const;
  int64_t BatchRows() const { return static_cast<int64_t>(micro_) * micro_rows_; }

  const TrainerState& state() const override { return state_; }
  const ParallelLayout& layout() const { return layout_; }
  const RankCoords& coords() const { return coords_; }
  const StageLayout& stage() const { return stage_; }
  const ProcessGroups& groups() const { return groups_; }
  MemoryStats memory() const;
  const StepTimings& timings() const { return timings_; }
  // Where the engine's buffers live (train.device).
  Device device() const { return device_; }

 private:
  // A run of elements of one tensor that this rank updates (or counts in the gradient norm).
  using Piece = OwnedPiece;
  struct Pending;
  DistTrainer() = default;
  Status Initialize(WeightInit init);
  // Step's work (engine.cc); Step adds the abort check (engine_abort.cc).
  Result<StepStats> RunStep();
  Deadline WaitDeadline() const { return Deadline::After(wait_timeout_); }

  // Parameter and gradient views of unit u in the compute dtype (ZeRO-3 gathers on Acquire).
  Status StartGather(int unit);
  Result<std::byte*> AcquireParams(int unit);
  void ReleaseParams(int unit);
  Result<std::byte*> UnitGrads(int unit);
  Tensor View(std::byte* unit_base, int tensor) const;
  // `count` fp32 elements at `data` on the engine's device.
  Tensor F32(float* data, int64_t count) const {
    return Tensor(data, DType::kF32, Shape{count}, device_);
  }
  BlockTensors BlockView(std::byte* unit_base, int unit) const;

  // Low precision (engine_precision.cc). True for bf16/fp16.
  bool lp() const { return dt_ != DType::kF32; }
  // `b`'s memory as bytes.
  static std::byte* Compute(const Buffer& b) { return static_cast<std::byte*>(b.data()); }
  // Allocates the low-precision parameter copy (from the fp32 master) and gradients.
  Status InitializeLowPrecision();
  // Unit u's gradients in fp32 for the reductions: the fp32 gradients themselves, or (once per
  // step) the low-precision ones converted into the fp32 buffer (ZeRO-0/1) or a transient one
  // that replaces them (ZeRO-2/3).
  Result<float*> ReduceGrads(int unit);
  // The fault point "parallel.dist.grad_overflow" (test builds): sets one of this rank's
  // reduced gradients to inf.
  Status InjectOverflow();

  // Passes of `micro` through chunk `chunk`; `last`: the chunk's last backward of the step.
  Status Forward(int chunk, int micro);
  Status Backward(int chunk, int micro, bool last);
  // Counts `seconds` of chunk `chunk`'s backward math in timings_.
  void AddBackwardTime(int chunk, double seconds);
  // The pipeline rank of the previous and next virtual stage of `chunk` (-1 if none) and the
  // tag of what chunk `chunk` sends (activations or gradients) for `micro`.
  int PrevStage(int chunk) const;
  int NextStage(int chunk) const;
  uint32_t Tag(int chunk, int micro) const;
  // ZeRO-0/1: zeroes the gradients (fp32 and any low-precision ones) for a new step.
  Status ZeroGradients();
  Status StartReduce(int unit);
  // Completes finished reductions in issue order, waiting for the oldest while more than
  // `max_pending` are in flight (0: all).
  Status AdvanceReductions(size_t max_pending);
  Status SyncTiedEmbedding();
  Status OptimizerStep(double sumsq_total, StepStats* stats);
  // (Σ loss_sum_ over the ranks that count it, Σ `sumsq` over all ranks), equal on every rank.
  Result<std::pair<double, double>> SumOverWorld(double sumsq);

  // Transient buffer bookkeeping: zero-filled on return. On a device, freed buffers are kept in
  // spare_transients_ and handed out again (zeroed) for the same byte size: cudaFree would block
  // the host until the whole device is idle, in-flight NCCL ops included.
  Result<Buffer> Transient(size_t count, DType dtype = DType::kF32);
  void FreeTransient(Buffer* b);

  RunConfig config_;
  Device device_ = Device::kCpu;
  ParallelLayout layout_;
  RankCoords coords_;
  ProcessGroups groups_;
  StageLayout stage_;
  std::vector<std::unique_ptr<StageRunner>> runners_;  // per chunk
  std::vector<PipelineOp> ops_;                        // this stage's schedule
  std::unique_ptr<DataLoader> loader_;
  TrainerState state_;
  std::chrono::milliseconds wait_timeout_{120'000};

  int shards_ = 1, shard_ = 0;      // dp_shard size and this rank's index in it
  int micro_ = 1, micro_rows_ = 1;  // micro-batches per step and rows per micro-batch
  // Per unit: the range this rank's optimizer owns (relative to the unit) and where it lives in
  // the owned buffers (m, v, and the ZeRO-2/3 gradient and ZeRO-3 parameter shards); the
  // pieces it updates and counts in the gradient norm.
  Ownership ownership_;
  // The gradient norm's ranges: one per piece on the CPU (the single-process summation order),
  // merged where they touch on a device (one synchronisation instead of one per tensor).
  std::vector<NormRange> norm_ranges_;
  // Device: the loss and gradient-norm all-gather's staging (2 int64 per rank, then the rank's
  // own 2); allocated once, since cudaFree would wait for the whole device every step.
  Buffer sums_staging_;

  Buffer params_, grads_, m_, v_;  // see memory(): full or shard sized by ZeRO stage
  Precision precision_ = Precision::kFp32;
  DType dt_ = DType::kF32;  // parameters and activations
  Buffer work_;             // bf16/fp16: the low-precision parameters (params_' layout and size)
  Buffer lp_grads_;         // bf16/fp16, ZeRO-0/1: the low-precision gradients (grads_' layout)
  std::vector<bool> promoted_;    // per unit: ReduceGrads ran this step
  std::vector<Buffer> gathered_;  // ZeRO-3: gathered parameter units
  std::vector<comm::WorkHandle> gather_work_;
  std::vector<Buffer> unit_grads_;  // ZeRO-2/3: full unit gradients during backward
  std::vector<Pending> pending_;    // gradient reductions in flight, in issue order
  size_t transient_bytes_ = 0, peak_transient_bytes_ = 0;
  std::vector<Buffer> spare_transients_;  // device only: freed transients for reuse

  std::vector<int32_t> inputs_, targets_;  // the global batch
  // Per chunk, per activation slot.
  std::vector<std::vector<comm::WorkHandle>> send_forward_, send_backward_;
  double loss_sum_ = 0;
  bool evaluating_ = false;         // forward only: no loss gradient
  bool overlap_reductions_ = true;  // SetReductionOverlap
  StepTimings timings_;
  std::atomic<bool> aborted_{false};  // Abort() was called
};

}  // namespace rt::parallel
