// `ringtrain data prepare --input PATH... --out DIR [--tokenizer byte|gpt2 --vocab DIR]`.
#include <cstdio>
#include <memory>

#include "data/data_prepare.h"
#include "tools/ringtrain/commands.h"

namespace rt::cli {

void AddDataCommand(CLI::App& app, Action* action) {
  CLI::App* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  CLI::App* prepare = data->add_subcommand(
      "prepare", "Tokenize text files into token shards (docs/formats/tokens.md)");
  auto opt = std::make_shared<PrepareOptions>();
  auto tokenizer = std::make_shared<std::string>("byte");
  auto vocab = std::make_shared<std::string>();
  prepare->add_option("--input", opt->inputs, "text files or folders (*.dat, *.u8 skipped)")
      ->required();
  prepare->add_option("--out", opt->out_dir, "output folder for train_NNN.bin and val.bin")
      ->required();
  prepare->add_option("--tokenizer", *tokenizer, "byte or gpt2")
      ->check(CLI::IsMember({"byte", "gpt2"}))
      ->capture_default_str();
  prepare->add_option(
      "--vocab", *vocab,
      "folder of encoder.json and vocab.bpe (gpt2; default " + DefaultGpt2VocabDir() + ")");
  prepare->add_option("--val-fraction", opt->val_fraction, "tail of each file held out")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  prepare->add_option("--shard-tokens", opt->shard_tokens, "tokens per training shard")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  prepare->callback([=] {
    *action = [=]() -> Status {
      ASSIGN_OR_RETURN(auto tok, MakeTokenizer(*tokenizer, *vocab));
      ASSIGN_OR_RETURN(PrepareSummary s, PrepareData(*opt, *tok));
      std::printf(
          "prepared %lld files with the %s tokenizer: %lld training tokens in %d shard(s), "
          "%lld validation tokens, in %s\n",
          static_cast<long long>(s.files), std::string(tok->name()).c_str(),
          static_cast<long long>(s.train_tokens), s.train_shards,
          static_cast<long long>(s.val_tokens), opt->out_dir.c_str());
      return Status();
    };
  });
}

}  // namespace rt::cli
