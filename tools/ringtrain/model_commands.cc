// `ringtrain export`, `ringtrain eval` and `ringtrain sample`.
#include <cstdio>
#include <memory>

#include "data/data_loader.h"
#include "data/tokenizer.h"
#include "model/sampler.h"
#include "model/weights.h"
#include "parallel/trainer.h"
#include "tools/ringtrain/commands.h"

namespace rt::cli {
namespace {

struct ExportOptions {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  std::string tokenizer = "byte";
};

// Writes the initial weights of the model a config defines (seeded by train.seed).
Status RunExport(const ExportOptions& opt) {
  ASSIGN_OR_RETURN(RunConfig config, LoadRunConfig(opt.config, opt.sets));
  ASSIGN_OR_RETURN(auto model, Gpt::Create(config.model, Precision::kFp32, 1, false, Device::kCpu));
  RETURN_IF_ERROR(Gpt::InitializeWeights(config.model, static_cast<uint64_t>(config.train.seed),
                                         model->params()));
  RETURN_IF_ERROR(ExportWeights(opt.out, config.model, opt.tokenizer, model->params()));
  std::printf("wrote %s (%lld parameters)\n", opt.out.c_str(),
              static_cast<long long>(model->num_params()));
  return Status();
}

// An fp32 model on `device` ("cpu" or "cuda") for `max_batch` rows holding the weights of a
// safetensors file.
Result<std::unique_ptr<Gpt>> LoadModel(const std::string& path, const std::string& device_name,
                                       int max_batch, std::string* tokenizer) {
  ASSIGN_OR_RETURN(Device device, ParseDevice(device_name));
  RETURN_IF_ERROR(CheckDeviceAvailable(device).WithContext("--device " + device_name));
  ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
  ASSIGN_OR_RETURN(ModelConfig config, WeightsConfig(file, tokenizer));
  ASSIGN_OR_RETURN(auto model, Gpt::Create(config, Precision::kFp32, max_batch, false, device));
  RETURN_IF_ERROR(ImportWeights(file, model->params()));
  return model;
}

struct EvalOptions {
  std::string weights;
  std::string data;
  int batches = 20;
  int batch_size = 8;
  std::string device = "cpu";
};

Status RunEval(const EvalOptions& opt) {
  std::string tokenizer;
  ASSIGN_OR_RETURN(auto model, LoadModel(opt.weights, opt.device, opt.batch_size, &tokenizer));
  ASSIGN_OR_RETURN(auto tokens,
                   LoadShardTokens(opt.data, static_cast<uint32_t>(model->config().vocab_size)));
  ASSIGN_OR_RETURN(double loss,
                   EvaluateLoss(*model, tokens, opt.batch_size, opt.batch_size, opt.batches));
  std::printf("loss %.4f over %d sequential batches of %d x %d tokens\n", loss, opt.batches,
              opt.batch_size, model->config().seq_len);
  return Status();
}

struct SampleCliOptions {
  std::string weights;
  std::string prompt;
  std::string vocab;
  std::string device = "cpu";
  SampleOptions sample;
};

Status RunSample(const SampleCliOptions& opt) {
  std::string tokenizer_name;
  ASSIGN_OR_RETURN(auto model, LoadModel(opt.weights, opt.device, 1, &tokenizer_name));
  ASSIGN_OR_RETURN(auto tokenizer, MakeTokenizer(tokenizer_name, opt.vocab));
  const std::vector<int32_t> prompt = tokenizer->Encode(opt.prompt);
  if (prompt.empty()) return InvalidArgument("the prompt is empty");
  const int32_t vocab = model->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < vocab) continue;
    char what[160];
    if (tokenizer_name == "byte") {
      std::snprintf(what, sizeof(what), "prompt byte 0x%02X at offset %zu", prompt[i], i);
    } else {
      std::snprintf(what, sizeof(what), "prompt token %d at position %zu", prompt[i], i);
    }
    return InvalidArgument(std::string(what) + " is outside the model's vocabulary of " +
                           std::to_string(vocab) + " tokens");
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> generated, SampleTokens(*model, prompt, opt.sample));
  ASSIGN_OR_RETURN(std::string text, tokenizer->Decode(generated));
  std::printf("%s%s\n", opt.prompt.c_str(), text.c_str());
  return Status();
}

}  // namespace

void AddModelCommands(CLI::App& app, Action* action) {
  CLI::App* exp = app.add_subcommand(
      "export",
      "Write a config's initial (seeded) weights as safetensors; trained weights come "
      "from `train --out`");
  auto e = std::make_shared<ExportOptions>();
  exp->add_option("--config", e->config, "TOML config")->required();
  exp->add_option("--set", e->sets, "override a config key");
  exp->add_option("--out", e->out, "output .safetensors file")->required();
  exp->add_option("--tokenizer", e->tokenizer, "tokenizer recorded in the metadata")
      ->check(CLI::IsMember({"byte", "gpt2"}))
      ->capture_default_str();
  exp->callback([=] { *action = [=] { return RunExport(*e); }; });

  CLI::App* eval = app.add_subcommand("eval", "Mean loss of weights over sequential batches");
  auto v = std::make_shared<EvalOptions>();
  eval->add_option("--weights", v->weights, "safetensors weights")->required();
  eval->add_option("--data", v->data, "token shard (e.g. data/fortunes/val.bin)")->required();
  eval->add_option("--batches", v->batches, "batches to average")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  eval->add_option("--batch-size", v->batch_size, "rows per batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  eval->add_option("--device", v->device, "where the model runs")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  eval->callback([=] { *action = [=] { return RunEval(*v); }; });

  CLI::App* sample = app.add_subcommand("sample", "Generate text from weights");
  auto s = std::make_shared<SampleCliOptions>();
  sample->add_option("--weights", s->weights, "safetensors weights")->required();
  sample->add_option("--prompt", s->prompt, "text to continue")->required();
  sample->add_option("--tokens", s->sample.tokens, "tokens to generate")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sample->add_option("--temperature", s->sample.temperature, "softmax temperature, 0 = greedy")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sample->add_option("--top-k", s->sample.top_k, "sample among the k likeliest, 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sample->add_option("--seed", s->sample.seed, "sampling seed")->capture_default_str();
  sample->add_option("--vocab", s->vocab, "GPT-2 vocabulary folder (gpt2 models)");
  sample->add_option("--device", s->device, "where the model runs")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sample->callback([=] { *action = [=] { return RunSample(*s); }; });
}

}  // namespace rt::cli
