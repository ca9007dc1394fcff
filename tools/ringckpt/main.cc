// ringckpt: look into, check, convert and compare ringtrain checkpoints (docs/formats/
// checkpoint.md) on any storage: a folder, file://, ringfs://HOST:PORT/PATH.
//   ringckpt inspect URI [--step N] [--json]
//   ringckpt verify URI [--step N]   (exit 1: damaged; 2: could not be checked)
//   ringckpt reshard URI --to LAYOUT --out DEST [--step N] [--config FILE] [--codec C]
//   ringckpt export URI --out W.safetensors [--step N]
//   ringckpt diff A B [--step-a N] [--step-b N]
// --secret-file FILE (before the subcommand) proves the cluster secret to the ringfsd of a
// ringfs:// storage.
#include <CLI/CLI.hpp>

#include "base/log.h"
#include "base/net/auth.h"
#include "tools/ringckpt/commands.h"
#include "tools/tls_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"ringckpt: inspect, verify, reshard, export and diff ringtrain checkpoints"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  std::string secret_file;
  app.add_option("--secret-file", secret_file,
                 "the cluster secret, for ringfs:// storage on a cluster that has one");
  rt::tools::TlsFlags tls;
  rt::tools::AddTlsFlags(&app, &tls);
  ringckpt::Source source, other;
  bool json = false;
  std::string out;
  ringckpt::ReshardOptions reshard;

  auto* inspect = app.add_subcommand("inspect", "step, layout, tensors, pieces, sizes, codecs");
  inspect->add_option("uri", source.uri, "checkpoint storage")->required();
  inspect->add_option("--step", source.step, "step (default: newest committed)");
  inspect->add_flag("--json", json, "the whole manifest as JSON");

  auto* verify = app.add_subcommand(
      "verify", "every checksum and element; exit 1 if bad, 2 if it could not be checked");
  verify->add_option("uri", source.uri, "checkpoint storage")->required();
  verify->add_option("--step", source.step, "step (default: newest committed)");

  auto* resh = app.add_subcommand("reshard", "rewrite laid out for another layout");
  resh->add_option("uri", source.uri, "checkpoint storage")->required();
  resh->add_option("--step", source.step, "step (default: newest committed)");
  resh->add_option("--to", reshard.to, "target layout, e.g. tp=2,dp=2,zero=1")->required();
  resh->add_option("--out", reshard.out, "destination storage")->required();
  resh->add_option("--config", reshard.config, "run config (default: the recorded one)");
  resh->add_option("--codec", reshard.codec, "none, zstd or bgzstd");

  auto* exp = app.add_subcommand("export", "fp32 weights as safetensors");
  exp->add_option("uri", source.uri, "checkpoint storage")->required();
  exp->add_option("--step", source.step, "step (default: newest committed)");
  exp->add_option("--out", out, "safetensors file to write")->required();

  auto* diff = app.add_subcommand("diff", "max abs/rel difference per tensor");
  diff->add_option("a", source.uri, "first checkpoint storage")->required();
  diff->add_option("b", other.uri, "second checkpoint storage")->required();
  diff->add_option("--step-a", source.step, "step of A (default: newest committed)");
  diff->add_option("--step-b", other.step, "step of B (default: newest committed)");

  CLI11_PARSE(app, argc, argv);
  if (rt::Status s = rt::InitLogging(log_level, "ringckpt"); !s.ok()) return ringckpt::Fail(s);
  if (!secret_file.empty() || !tls.Files().empty()) {
    auto secret = rt::net::ClusterSecret::LoadWithTls(secret_file, tls.Files());
    if (!secret.ok()) return ringckpt::Fail(secret.status());
    source.storage.secret = other.storage.secret = reshard.storage.secret = *secret;
  }
  if (*inspect) return ringckpt::Inspect(source, json);
  if (*verify) return ringckpt::Verify(source);
  if (*resh) return ringckpt::Reshard(source, reshard);
  if (*exp) return ringckpt::Export(source, out);
  return ringckpt::Diff(source, other);
}
