// ringctl: talks to any ringtraind (docs/daemon.md, docs/formats/control_api.md).
//   ringctl [--daemon HOST:PORT] [--secret-file F] status [--json]
//   ringctl top [--once] [--interval-ms MS]
//   ringctl submit job.toml | stop | scale --nodes N | drain NODE [--undo]
//   ringctl checkpoint | checkpoints [--json]
//   ringctl init-secret PATH
//   ringctl init-tls DIR --nodes N   (a cluster CA, node-0..N-1 and client keys + certificates)
// --tls-dir DIR (or --tls-cert/--tls-key/--tls-ca) with --secret-file: reach a daemon that
// runs with [tls].
// Exit status: 0 done, 1 the daemon refused or failed (its error is printed), 2 bad usage.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "base/file.h"
#include "base/net/auth.h"
#include "base/net/tls_certs.h"
#include "base/version.h"
#include "daemon/control_api.h"
#include "elastic/job.h"
#include "tools/ringctl/top.h"
#include "tools/tls_flags.h"

namespace {

using rt::daemon::Json;

int Fail(const rt::Status& s) {
  std::fprintf(stderr, "ringctl: %s\n", s.ToString().c_str());
  return 1;
}

std::string Text(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

void PrintStatus(const Json& s) {
  const Json& view = s["view"];
  std::string members;
  for (const Json& m : view["members"]) members += (members.empty() ? "" : ",") + m["id"].dump();
  std::printf("view        generation %s, members %s (answered by node %s; membership: %s)\n",
              Text(view, "generation").c_str(), members.c_str(), Text(s, "answered_by").c_str(),
              Text(s, "membership").c_str());
  if (s.contains("job")) {
    const Json& job = s["job"];
    std::printf("job         %s (id %s): %s\n", Text(job, "name").c_str(), Text(job, "id").c_str(),
                Text(job, "desire").c_str());
  } else {
    std::printf("job         none\n");
  }
  std::printf("epoch       %s (last change: %s)\n", Text(s, "epoch").c_str(),
              Text(s, "cause").c_str());
  if (s.contains("progress")) {
    const Json& p = s["progress"];
    std::printf("progress    generation %s, step %s, loss %.4f, %.0f tok/s\n",
                Text(p, "generation").c_str(), Text(p, "step").c_str(), p.value("loss", 0.0),
                p.value("tokens_per_s", 0.0));
  }
  for (const Json& n : s["nodes"]) {
    if (n.contains("error")) {
      std::printf("node %-6s unreachable: %s\n", Text(n, "node").c_str(), Text(n, "error").c_str());
      continue;
    }
    std::string ranks;
    for (const Json& w : n["workers"]) ranks += (ranks.empty() ? "" : ",") + w["rank"].dump();
    std::printf("node %-6s generation %s, ranks [%s]; %s\n", Text(n, "node").c_str(),
                Text(n, "generation").c_str(), ranks.c_str(), Text(n, "plan").c_str());
    if (!n.contains("store")) continue;
    const Json& st = n["store"];
    std::printf("            chunk store %s: %s chunks, %.1f MiB", Text(st, "address").c_str(),
                Text(st, "chunks").c_str(), st.value("data_bytes", 0.0) / (1 << 20));
    if (st.value("metadata_node", false))
      std::printf("; metadata node: %s chains, %s degraded, %s stopped", Text(st, "chains").c_str(),
                  Text(st, "chains_degraded").c_str(), Text(st, "chains_stopped").c_str());
    std::printf("\n");
  }
}

// One line per committed checkpoint, newest first: step, time (UTC), bytes, URI.
void PrintCheckpoints(const Json& reply) {
  std::printf("job %s, checkpoints in %s\n", Text(reply, "job").c_str(),
              Text(reply, "uri").c_str());
  std::printf("%10s  %-20s  %14s  %s\n", "step", "time (UTC)", "bytes", "uri");
  for (const Json& c : reply["checkpoints"]) {
    std::string when = "-";
    if (c.contains("unix_ms")) {
      const std::time_t t = static_cast<std::time_t>(c["unix_ms"].get<int64_t>() / 1000);
      std::tm utc{};
      gmtime_r(&t, &utc);
      char text[32];
      std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &utc);
      when = text;
    }
    std::printf("%10s  %-20s  %14s  %s\n", Text(c, "step").c_str(), when.c_str(),
                Text(c, "bytes").c_str(), Text(c, "uri").c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringctl: control a ringtrain cluster through any of its daemons"};
  app.set_version_flag("--version", std::string(rt::kRingtrainVersion));
  app.require_subcommand(1);
  std::string daemon = "127.0.0.1:7700", secret_file;
  int timeout_ms = 20'000;
  app.add_option("--daemon", daemon, "host:port of any daemon's control port");
  app.add_option("--secret-file", secret_file, "the cluster secret");
  rt::tools::TlsFlags tls;
  rt::tools::AddTlsFlags(&app, &tls);
  app.add_option("--timeout-ms", timeout_ms, "how long to wait for the daemon")
      ->check(CLI::Range(1, 3'600'000));
  bool json = false, undo = false;
  std::string job_file, secret_path;
  int64_t nodes = 0, node = 0;
  CLI::App* status = app.add_subcommand("status", "members, generation, layout, job progress");
  status->add_flag("--json", json, "print the status as JSON");
  rt::ctl::TopOptions top_options;
  CLI::App* top = app.add_subcommand("top", "the status as a table that refreshes");
  top->add_flag("--once", top_options.once, "print the table once and exit (for scripts)");
  top->add_option("--interval-ms", top_options.interval_ms, "refresh period")
      ->check(CLI::Range(100, 3'600'000));
  CLI::App* submit = app.add_subcommand("submit", "submit (or replace) the job");
  submit->add_option("job", job_file, "job.toml")->required();
  CLI::App* stop = app.add_subcommand("stop", "stop the job's workers");
  CLI::App* scale = app.add_subcommand("scale", "use at most N nodes (0 = the job's own limit)");
  scale->add_option("--nodes", nodes)->required()->check(CLI::Range(0, 4096));
  CLI::App* drain = app.add_subcommand("drain", "take a node out of the job's plan");
  drain->add_option("node", node)->required()->check(CLI::Range(int64_t{1}, INT64_MAX));
  drain->add_flag("--undo", undo, "put it back");
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "save a checkpoint now (the ranks stop, save, and go on from it)");
  CLI::App* checkpoints = app.add_subcommand("checkpoints", "the job's committed checkpoints");
  checkpoints->add_flag("--json", json, "print them as JSON");
  CLI::App* init = app.add_subcommand("init-secret", "create a new cluster secret file (0600)");
  init->add_option("path", secret_path)->required();
  std::string tls_dir;
  int tls_nodes = 1, tls_days = 825;
  CLI::App* init_tls = app.add_subcommand(
      "init-tls",
      "create a cluster CA and keys + certificates for N nodes and a client in DIR (keys 0600; "
      "an existing CA is reused, existing files are never replaced)");
  init_tls->add_option("dir", tls_dir)->required();
  init_tls->add_option("--nodes", tls_nodes, "node-0 .. node-(N-1)")->check(CLI::Range(0, 10000));
  init_tls->add_option("--days", tls_days, "how long the certificates are valid")
      ->check(CLI::Range(1, 36500));
  CLI11_PARSE(app, argc, argv);

  if (*init) {
    rt::Status s = rt::net::ClusterSecret::Create(secret_path);
    if (!s.ok()) return Fail(s);
    std::printf("cluster secret written to %s\n", secret_path.c_str());
    return 0;
  }
  if (*init_tls) {
    std::vector<std::string> names;
    for (int i = 0; i < tls_nodes; ++i) names.push_back("node-" + std::to_string(i));
    names.push_back("client");
    auto report = rt::net::CreateTlsFiles(tls_dir, names, tls_days);
    if (!report.ok()) return Fail(report.status());
    for (const std::string& path : report->written) std::printf("wrote %s\n", path.c_str());
    for (const std::string& path : report->kept) std::printf("kept  %s\n", path.c_str());
    std::printf(
        "node i: [tls] cert_file = \"%s/node-i.pem\", key_file = \"%s/node-i.key\", ca_file = "
        "\"%s/ca.pem\"; tools: --tls-dir %s\n",
        tls_dir.c_str(), tls_dir.c_str(), tls_dir.c_str(), tls_dir.c_str());
    return 0;
  }
  std::shared_ptr<const rt::net::ClusterSecret> secret;
  {
    auto loaded = rt::net::ClusterSecret::LoadWithTls(secret_file, tls.Files());
    if (!loaded.ok()) return Fail(loaded.status());
    secret = *loaded;
  }
  if (*top) {
    top_options.daemon = daemon;
    top_options.secret = secret;
    top_options.timeout_ms = timeout_ms;
    return rt::ctl::RunTop(top_options);
  }
  uint16_t type = 0;
  Json request = Json::object();
  if (*status) {
    type = rt::daemon::kCtlStatus;
  } else if (*submit) {
    // Checked here too, so a malformed file is refused with file, line and key before any call.
    auto spec = rt::elastic::LoadJobSpec(job_file);
    if (!spec.ok()) return Fail(spec.status());
    type = rt::daemon::kCtlSubmit;
    request = {{"text", spec->text}, {"source", job_file}};
  } else if (*stop) {
    type = rt::daemon::kCtlStop;
  } else if (*scale) {
    type = rt::daemon::kCtlScale;
    request = {{"nodes", nodes}};
  } else if (*drain) {
    type = rt::daemon::kCtlDrain;
    request = {{"node", node}, {"undrain", undo ? 1 : 0}};
  } else if (*checkpoint) {
    type = rt::daemon::kCtlCheckpoint;
  } else if (*checkpoints) {
    type = rt::daemon::kCtlCheckpoints;
  }
  rt::Result<Json> reply = rt::daemon::CallJsonBlocking(daemon, secret, type, request,
                                                        rt::Deadline::AfterMs(timeout_ms));
  if (!reply.ok()) return Fail(reply.status());
  if (*status) {
    if (json) {
      std::printf("%s\n", reply->dump(2).c_str());
    } else {
      PrintStatus(*reply);
    }
  } else if (*submit) {
    std::printf("job %s submitted (id %s)\n", Text(*reply, "name").c_str(),
                Text(*reply, "job_id").c_str());
  } else if (*checkpoint) {
    std::printf("checkpoint of step %s committed in %s\n", Text(*reply, "step").c_str(),
                Text(*reply, "uri").c_str());
  } else if (*checkpoints) {
    if (json) {
      std::printf("%s\n", reply->dump(2).c_str());
    } else {
      PrintCheckpoints(*reply);
    }
  } else {
    std::printf("done\n");
  }
  return 0;
}
