// `ringtrain train --config FILE [--set key=value ...] [--steps N] [--stop-after N]
// [--init-from W] [--out W] [--resume]`, or with `--layout L --ranks N` on N local worker processes
// (parallel/launch.h). [ckpt] dir and every save checkpoints as it trains
// (parallel/checkpointing.h); --resume starts from the newest committed one in ckpt.dir, whatever
// layout wrote it. The fault point "parallel.train.before_step" (test builds) is hit before each
// step.
#include <cstdio>
#include <memory>

#include "base/log.h"
#include "base/net/auth.h"
#include "data/data_loader.h"
#include "data/data_prepare.h"
#include "data/token_shard.h"
#include "parallel/checkpointing.h"
#include "parallel/launch.h"
#include "parallel/layout.h"
#include "parallel/run_metrics.h"
#include "parallel/train_loop.h"
#include "parallel/trainer.h"
#include "tools/ringtrain/commands.h"
#include "tools/ringtrain/progress.h"
#include "tools/tls_flags.h"

namespace rt::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> sets;
  int64_t steps = -1;
  int64_t stop_after = -1;
  std::string init_from;
  std::string out;
  bool resume = false;
  rt::parallel::DistTrainOptions dist;  // used when --layout is given
  tools::TlsFlags tls;                  // with --secret-file: the TLS identity it carries
};

// `train --layout ... --ranks N`: the launcher (or, with the hidden --rank, one worker).
Status RunDistributedTrain(const TrainOptions& opt) {
  if (!opt.init_from.empty() || !opt.out.empty())
    return InvalidArgument("--init-from and --out are not supported with --layout yet");
  rt::parallel::DistTrainOptions o = opt.dist;
  o.config = opt.config;
  o.sets = opt.sets;
  o.steps = opt.steps;
  o.stop_after = opt.stop_after;
  o.resume = opt.resume;
  o.command = {"train"};
  o.tls = opt.tls.Files();
  return rt::parallel::RunDistributedTrain(o, "/proc/self/exe");
}

// The tokenizer a data folder was prepared with, from its vocabulary size.
std::string TokenizerOfVocab(uint32_t vocab) { return vocab == 256 ? "byte" : "gpt2"; }

// The output of `ringtrain train` in one process: the progress (tools/ringtrain/progress.h) and
// evaluation lines as each step and evaluation ends, and the metrics file.
class ProgressReporter final : public parallel::TrainLoopReporter {
 public:
  // Reports the run of `config`, which must outlive the reporter.
  explicit ProgressReporter(const RunConfig& config)
      : config_(config), progress_(config.train.steps, config.train.log_every) {}

  // Opens the metrics file, appending on resume. Errors: RunMetrics::Open's.
  Status OpenMetrics(bool append) { return metrics_.Open(config_.metrics.path, append); }

  void StepTaken(const parallel::StepReport& r) override {
    const StepStats& s = r.stats;
    metrics_.WriteStep(s, r.tokens_per_s, config_.train.precision == "fp16", "");
    progress_.Step(s.step, s.loss, s.lr, r.tokens_per_s, r.train_seconds, s.skipped);
  }
  void Evaluated(int64_t step, double val_loss) override {
    char line[128];
    std::snprintf(line, sizeof(line), "step %lld: val_loss %.4f", static_cast<long long>(step),
                  val_loss);
    progress_.Line(line);
    metrics_.WriteEval(step, val_loss);
  }
  void Saving(int64_t step) override { metrics_.WaitWrittenBeforeCheckpoint(step); }
  void Finished() override { progress_.Finish(); }

 private:
  const RunConfig& config_;
  Progress progress_;
  parallel::RunMetrics metrics_;
};

Status RunTrain(const TrainOptions& opt) {
  std::vector<std::string> sets = opt.sets;
  if (opt.steps >= 0) sets.push_back("train.steps=" + std::to_string(opt.steps));
  ASSIGN_OR_RETURN(RunConfig config, LoadRunConfig(opt.config, sets));
  LOG_INFO("effective config:\n{}", DescribeRunConfig(config));
  RETURN_IF_ERROR(TrainDevice(config.train).status());  // before any data is read
  const uint32_t vocab = static_cast<uint32_t>(config.model.vocab_size);
  ASSIGN_OR_RETURN(auto train_tokens, LoadTrainTokens(config.data.dir, vocab));
  const std::string val_path = config.data.dir + "/val.bin";
  std::shared_ptr<const std::vector<uint16_t>> val_tokens;
  if (config.eval.every > 0) {
    ASSIGN_OR_RETURN(val_tokens, LoadShardTokens(val_path, vocab));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> shards, ListTrainShards(config.data.dir));
  ASSIGN_OR_RETURN(TokenShard first, ReadTokenShard(shards.front()));
  const std::string tokenizer = TokenizerOfVocab(first.vocab_size);

  if (opt.resume && config.ckpt.dir.empty())
    return InvalidArgument("--resume needs ckpt.dir: the folder or URI of the checkpoints");
  if (opt.resume && !opt.init_from.empty())
    return InvalidArgument("--resume and --init-from both set the weights: choose one");
  ASSIGN_OR_RETURN(auto trainer,
                   Trainer::Create(config, train_tokens, opt.init_from,
                                   opt.resume ? WeightInit::kForLoad : WeightInit::kFromSeed));
  std::unique_ptr<parallel::RunCheckpoints> checkpoints;
  if (opt.resume || config.ckpt.every > 0) {
    ckpt::StorageOptions storage;  // the cluster secret of a ringfs:// ckpt.dir
    ASSIGN_OR_RETURN(storage.secret,
                     net::ClusterSecret::LoadWithTls(opt.dist.secret_file, opt.tls.Files()));
    ASSIGN_OR_RETURN(checkpoints,
                     parallel::RunCheckpoints::Create(config, parallel::DescribeLayout({}), nullptr,
                                                      trainer->model().device(), nullptr, storage));
  }
  parallel::TrainLoopOptions loop;
  loop.stop_after = opt.stop_after;
  if (opt.resume) RETURN_IF_ERROR(parallel::ResumeTraining(*trainer, *checkpoints, loop));
  LOG_INFO(
      "model: {} parameters, {} layers, {} channels, {} heads, context {}, vocabulary {} ({}), "
      "precision {}; {} training tokens",
      trainer->model().num_params(), config.model.n_layer, config.model.n_embd, config.model.n_head,
      config.model.seq_len, config.model.vocab_size, tokenizer, config.train.precision,
      train_tokens->size());
  ProgressReporter reporter(config);
  RETURN_IF_ERROR(reporter.OpenMetrics(opt.resume));
  RETURN_IF_ERROR(
      parallel::RunTrainLoop(config, *trainer, checkpoints.get(), val_tokens, loop, reporter));
  if (!opt.out.empty()) {
    RETURN_IF_ERROR(trainer->Export(opt.out, tokenizer));
    std::printf("wrote %s\n", opt.out.c_str());
  }
  return Status();
}

}  // namespace

void AddTrainCommand(CLI::App& app, Action* action) {
  CLI::App* train = app.add_subcommand(
      "train", "Train a GPT-2 model, in this process or with --layout on local ranks");
  auto opt = std::make_shared<TrainOptions>();
  train->add_option("--config", opt->config, "TOML config (configs/tiny.toml, s.toml, m.toml)")
      ->required();
  train->add_option("--set", opt->sets, "override a config key: --set train.steps=100");
  train->add_option("--steps", opt->steps, "optimizer steps (overrides train.steps)")
      ->check(CLI::NonNegativeNumber);
  train
      ->add_option("--stop-after", opt->stop_after,
                   "stop after this step, saving its checkpoint when ckpt.every > 0, without "
                   "changing train.steps (schedule and data order stay the full run's; "
                   "--resume continues it)")
      ->check(CLI::PositiveNumber);
  train->add_option("--init-from", opt->init_from, "start from these safetensors weights");
  train->add_option("--out", opt->out, "write the final weights to this safetensors file");
  train->add_flag("--resume", opt->resume,
                  "continue from the newest committed checkpoint in ckpt.dir (any layout wrote "
                  "it; falls back to an older one that loads)");
  train->add_option("--layout", opt->dist.layout,
                    "parallel layout on local processes: tp=,pp=,dp=,zero=,hsdp_shard=,sp=,"
                    "schedule=gpipe|1f1b|interleaved, vpp= (model chunks per rank, interleaved) "
                    "(with --ranks)");
  train->add_option("--ranks", opt->dist.ranks, "local worker processes: the layout's world size")
      ->check(CLI::PositiveNumber);
  train->add_option("--rank", opt->dist.rank, "worker mode: this worker's rank")->group("");
  train->add_option("--store", opt->dist.store, "worker mode: rendezvous store host:port")
      ->group("");
  train->add_option("--job", opt->dist.job, "worker mode: job name")->group("");
  train->add_option("--secret-file", opt->dist.secret_file,
                    "the cluster secret file: proven to the ringfsd of a ringfs:// ckpt.dir and, "
                    "with --ranks, the run's secret for its store and rank links (else a fresh "
                    "one is made for the run)");
  tools::AddTlsFlags(train, &opt->tls);
  train->callback([=] {
    const bool distributed = !opt->dist.layout.empty() || opt->dist.ranks > 1;
    *action = [=] { return distributed ? RunDistributedTrain(*opt) : RunTrain(*opt); };
  });
}

}  // namespace rt::cli
