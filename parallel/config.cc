#include "parallel/config.h"

#include <vector>

namespace rt {

void BindRunConfig(RunConfig* c, ConfigSchema* s) {
  s->Int("model.n_layer", &c->model.n_layer, 1, 256, "transformer blocks L");
  s->Int("model.n_embd", &c->model.n_embd, 1, 1 << 16, "channels C (divisible by n_head)");
  s->Int("model.n_head", &c->model.n_head, 1, 1024, "attention heads H");
  s->Int("model.seq_len", &c->model.seq_len, 1, 1 << 16, "context length T in tokens");
  s->Int("model.vocab_size", &c->model.vocab_size, 1, 65536, "vocabulary size V (uint16 tokens)");

  s->Int("train.batch_size", &c->train.batch_size, 1, 1 << 16, "sequences per optimizer step");
  s->Int("train.micro_batches", &c->train.micro_batches, 1, 1 << 16,
         "gradient-accumulation splits of a batch (divides batch_size)");
  s->Int("train.steps", &c->train.steps, 0, int64_t{1} << 40, "optimizer steps");
  s->Int("train.seed", &c->train.seed, 0, INT64_MAX, "seed of initialisation and data order");
  s->Enum("train.precision", &c->train.precision, {"fp32", "bf16", "fp16"},
          "parameter and activation precision (master weights and Adam state stay fp32)");
  s->Enum("train.device", &c->train.device, {"cpu", "cuda"},
          "device of the model, optimizer and activations (cuda: a CUDA build and a GPU)");
  s->Bool("train.recompute", &c->train.recompute, "recompute block activations in backward");
  s->Int("train.log_every", &c->train.log_every, 1, 1 << 30,
         "plain progress line every N steps when not on a terminal");
  s->Double("train.loss_scale_init", &c->train.loss_scale_init, 1, 1e30,
            "fp16: initial dynamic loss scale");
  s->Int("train.loss_scale_window", &c->train.loss_scale_window, 1, 1 << 30,
         "fp16: clean steps before the loss scale doubles");

  s->Double("optim.lr", &c->optim.lr, 0, 10, "peak learning rate");
  s->Double("optim.min_lr", &c->optim.min_lr, 0, 10, "final learning rate of the cosine schedule");
  s->Int("optim.warmup_steps", &c->optim.warmup_steps, 0, int64_t{1} << 40,
         "linear warm-up steps (cosine schedule)");
  s->Enum("optim.schedule", &c->optim.schedule, {"constant", "cosine"}, "learning-rate schedule");
  s->Double("optim.weight_decay", &c->optim.weight_decay, 0, 10,
            "decoupled weight decay on 2-D weights");
  s->Double("optim.beta1", &c->optim.beta1, 0, 0.999999, "Adam beta1");
  s->Double("optim.beta2", &c->optim.beta2, 0, 0.999999999, "Adam beta2");
  s->Double("optim.eps", &c->optim.eps, 0, 1, "Adam epsilon");
  s->Double("optim.grad_clip", &c->optim.grad_clip, 0, 1e9, "global gradient-norm clip (0 = off)");

  s->String("data.dir", &c->data.dir, "folder of train_*.bin and val.bin token shards");
  s->Enum("data.order", &c->data.order, {"sequential", "shuffled"}, "order of training windows");

  s->Int("eval.every", &c->eval.every, 0, int64_t{1} << 40,
         "evaluate every N steps and after the last (0 = never)");
  s->Int("eval.batches", &c->eval.batches, 1, 1 << 20, "validation batches per evaluation");

  s->String("metrics.path", &c->metrics.path, "JSONL metrics file (empty = none)");

  s->String("ckpt.dir", &c->ckpt.dir,
            "checkpoint root: a folder, file://PATH or ringfs://HOST:PORT/PATH (empty = none)");
  s->Int("ckpt.every", &c->ckpt.every, 0, int64_t{1} << 40,
         "save a checkpoint every N steps and after the last (0 = never)");
  s->Int("ckpt.keep", &c->ckpt.keep, 1, 1 << 20, "newest committed checkpoints kept");
  s->Enum("ckpt.codec", &c->ckpt.codec, {"none", "zstd", "bgzstd"},
          "codec of stored pieces (bgzstd: byte planes of each float, then zstd)");
  s->Bool("ckpt.async", &c->ckpt.async, "write checkpoints in the background while training");
  s->Int("ckpt.memory_every", &c->ckpt.memory_every, 0, int64_t{1} << 40,
         "daemon: snapshot into the daemons' memory every N steps (0 = off)");
  s->Int("ckpt.memory_copies", &c->ckpt.memory_copies, 1, 4,
         "daemon: copies of each memory snapshot on other daemons (2 survives two lost at once)");
  s->Int("ckpt.max_failed_saves", &c->ckpt.max_failed_saves, 0, 1 << 20,
         "stop after N consecutive failed checkpoint saves (0 = never)");
}

void RequireModelKeys(ConfigSchema* schema) {
  for (const char* key : {"model.n_layer", "model.n_embd", "model.n_head", "model.seq_len"})
    schema->Require(key);
}

Status ValidateRunConfig(const RunConfig& c) {
  if (c.model.n_embd % c.model.n_head != 0)
    return InvalidArgument("model.n_embd = " + std::to_string(c.model.n_embd) +
                           " is not divisible by model.n_head = " + std::to_string(c.model.n_head));
  if (c.train.batch_size % c.train.micro_batches != 0)
    return InvalidArgument(
        "train.batch_size = " + std::to_string(c.train.batch_size) +
        " is not divisible by train.micro_batches = " + std::to_string(c.train.micro_batches));
  if (c.optim.min_lr > c.optim.lr) return InvalidArgument("optim.min_lr exceeds optim.lr");
  if (c.ckpt.every > 0 && c.ckpt.dir.empty())
    return InvalidArgument("ckpt.every = " + std::to_string(c.ckpt.every) +
                           " needs ckpt.dir (where to write the checkpoints)");
  return Status();
}

Result<RunConfig> LoadRunConfig(const std::string& path,
                                const std::vector<std::string>& overrides) {
  RunConfig config;
  ConfigSchema schema;
  BindRunConfig(&config, &schema);
  ConfigFile file = ConfigFile::Empty("<defaults>");
  if (!path.empty()) {
    ASSIGN_OR_RETURN(file, ConfigFile::Load(path));
    RequireModelKeys(&schema);
  }
  for (const std::string& o : overrides) {
    RETURN_IF_ERROR(file.ApplyOverride(o).WithContext("--set"));
  }
  RETURN_IF_ERROR(schema.Read(file));
  RETURN_IF_ERROR(ValidateRunConfig(config).WithContext(file.source()));
  return config;
}

std::string DescribeRunConfig(const RunConfig& config) {
  RunConfig copy = config;
  ConfigSchema schema;
  BindRunConfig(&copy, &schema);
  return schema.Effective();
}

Result<Device> TrainDevice(const TrainConfig& config) {
  const std::string key = "train.device = \"" + config.device + "\"";
  Result<Device> device = ParseDevice(config.device);
  if (!device.ok()) return device.status().WithContext(key);
  RETURN_IF_ERROR(CheckDeviceAvailable(*device).WithContext(key));
  return *device;
}

}  // namespace rt
