// ringfs: the chunk-store command line. Talks to the local embedded server (127.0.0.1:7600)
// unless --server HOST:PORT is given; --secret-file proves the cluster secret to it.
//   ringfs put LOCAL REMOTE | get REMOTE LOCAL | cat REMOTE | ls [PATH] | stat PATH |
//          mv FROM TO | rm [-r] PATH | mkdir PATH | fsck [--repair] | bench [--size-mib N ...]
#include <malloc.h>

#include <cstdio>
#include <fstream>

#include <CLI/CLI.hpp>

#include "base/log.h"
#include "base/net/auth.h"
#include "base/version.h"
#include "iofs/server.h"
#include "tools/ringfs/session.h"
#include "tools/tls_flags.h"

namespace {

using ringfs::Session;
using rt::Deadline;

int Fail(const rt::Status& s) {
  std::fprintf(stderr, "ringfs: %s\n", s.ToString().c_str());
  return 1;
}

void PrintStat(const rt::iofs::FileStat& s) {
  std::printf("%s\t%s\t%llu\t%s\n", s.is_dir ? "dir " : "file", s.sealed ? "sealed" : "open  ",
              static_cast<unsigned long long>(s.size), s.path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Chunk-sized buffers (4 MiB) come and go with every request: keep them in the heap rather than
  // mmap and munmap each one (the page faults and the kernel's zeroing cost more than the copy).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  CLI::App app{"ringfs: files in the ringtrain chunk store"};
  app.set_version_flag("--version", std::string(rt::kRingtrainVersion));
  app.require_subcommand(1);
  std::string server = "127.0.0.1:" + std::to_string(rt::iofs::kDefaultPort);
  int64_t timeout_s = 600;
  int parallel = 16;
  app.add_option("--server", server, "HOST:PORT of any ringfsd node");
  std::string secret_file;
  app.add_option("--secret-file", secret_file, "the cluster secret, for a cluster that has one");
  rt::tools::TlsFlags tls;
  rt::tools::AddTlsFlags(&app, &tls);
  app.add_option("--timeout", timeout_s, "seconds before a command gives up");
  app.add_option("--parallel", parallel, "requests in flight for put/get/cat")
      ->check(CLI::Range(1, 256));
  std::string a, b;
  bool repair = false;
  auto* put = app.add_subcommand("put", "copy a local file into the store (sealed)");
  put->add_option("local", a)->required();
  put->add_option("remote", b)->required();
  auto* get = app.add_subcommand("get", "copy a file out of the store");
  get->add_option("remote", a)->required();
  get->add_option("local", b)->required();
  auto* cat = app.add_subcommand("cat", "write a file to stdout");
  cat->add_option("remote", a)->required();
  auto* ls = app.add_subcommand("ls", "list a folder");
  ls->add_option("path", a)->default_val("/");
  auto* stat = app.add_subcommand("stat", "show a file or folder");
  stat->add_option("path", a)->required();
  auto* mv = app.add_subcommand("mv", "rename atomically");
  mv->add_option("from", a)->required();
  mv->add_option("to", b)->required();
  bool recursive = false;
  auto* rm = app.add_subcommand("rm", "delete a file or an empty folder");
  rm->add_option("path", a)->required();
  rm->add_flag("-r,--recursive", recursive,
               "delete a folder with everything under it (one namespace change)");
  auto* mkdir = app.add_subcommand("mkdir", "create a folder and its parents");
  mkdir->add_option("path", a)->required();
  auto* fsck = app.add_subcommand("fsck", "verify every chunk and find orphans");
  fsck->add_flag("--repair", repair, "delete orphan chunks");
  ringfs::BenchOptions bo;
  auto* bench = app.add_subcommand("bench", "sequential write/read and 64 KiB random reads");
  bench->add_option("--size-mib", bo.size_mib, "file size in MiB (default 4096)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  bench->add_option("--random-reads", bo.random_reads, "number of 64 KiB random reads")
      ->check(CLI::Range(0, 1 << 30));
  bench->add_option("--path", bo.path, "file to write");
  bench->add_flag("--tcp", bo.tcp, "send the data over TCP even when the server is on this host");
  CLI11_PARSE(app, argc, argv);
  (void)rt::InitLogging("warn", "ringfs");

  const size_t colon = server.rfind(':');
  if (colon == std::string::npos)
    return Fail(rt::InvalidArgument("--server must be HOST:PORT, got " + server));
  const std::string host = server.substr(0, colon);
  const int port = std::atoi(server.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return Fail(rt::InvalidArgument("bad port in --server " + server));
  const Deadline deadline = Deadline::After(std::chrono::seconds(timeout_s));

  rt::iofs::ClientOptions client_options;
  {
    auto secret = rt::net::ClusterSecret::LoadWithTls(secret_file, tls.Files());
    if (!secret.ok()) return Fail(secret.status());
    client_options.secret = *secret;
  }
  Session session;
  auto client = session.Run(rt::iofs::Client::Connect(host, static_cast<uint16_t>(port),
                                                      Deadline::AfterMs(5000), client_options));
  if (!client.ok()) return Fail(client.status());
  session.client = *client;
  auto& c = **client;

  if (*put) {
    std::ifstream in(a, std::ios::binary);
    if (!in) return Fail(rt::NotFound("cannot open local file " + a));
    auto created = session.Run(c.Create(b, deadline));
    if (!created.ok()) return Fail(created.status());
    const size_t window = static_cast<size_t>(c.chunk_size()) * static_cast<size_t>(parallel);
    std::vector<char> buf(window);
    uint64_t at = 0;
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const size_t n = static_cast<size_t>(in.gcount());
      if (n == 0) break;
      rt::Status s = session.Run(
          c.WriteParallel(b, at, std::as_bytes(std::span(buf.data(), n)), parallel, deadline));
      if (!s.ok()) return Fail(s);
      at += n;
    }
    rt::Status s = session.Run(c.Seal(b, deadline));
    if (!s.ok()) return Fail(s);
    std::printf("%llu bytes -> %s\n", static_cast<unsigned long long>(at), b.c_str());
    return 0;
  }
  if (*get || *cat) {
    auto st = session.Run(c.Stat(a, deadline));
    if (!st.ok()) return Fail(st.status());
    std::FILE* out = *cat ? stdout : std::fopen(b.c_str(), "wb");
    if (!out) return Fail(rt::ErrnoStatus(errno, "open " + b));
    const uint64_t window = static_cast<uint64_t>(c.chunk_size()) * static_cast<uint64_t>(parallel);
    std::vector<std::byte> data;
    for (uint64_t at = 0; at < st->size; at += window) {
      rt::Status s = session.Run(c.ReadParallel(a, at, window, parallel, &data, deadline));
      if (!s.ok()) return Fail(s);
      if (std::fwrite(data.data(), 1, data.size(), out) != data.size())
        return Fail(rt::ErrnoStatus(errno, "write " + (*cat ? std::string("stdout") : b)));
    }
    if (*get && std::fclose(out) != 0) return Fail(rt::ErrnoStatus(errno, "close " + b));
    return 0;
  }
  if (*ls) {
    auto list = session.Run(c.List(a, deadline));
    if (!list.ok()) return Fail(list.status());
    for (const auto& s : *list) PrintStat(s);
    return 0;
  }
  if (*stat) {
    auto st = session.Run(c.Stat(a, deadline));
    if (!st.ok()) return Fail(st.status());
    std::printf(
        "path:       %s\ninode:      %llu\ntype:       %s\nsize:       %llu\nsealed:     %s\nchunk "
        "size: %u\n",
        st->path.c_str(), static_cast<unsigned long long>(st->ino), st->is_dir ? "folder" : "file",
        static_cast<unsigned long long>(st->size), st->sealed ? "yes" : "no", st->chunk_size);
    return 0;
  }
  if (*mv) {
    rt::Status s = session.Run(c.Rename(a, b, deadline));
    return s.ok() ? 0 : Fail(s);
  }
  if (*rm) {
    if (recursive) {
      auto removed = session.Run(c.RemoveTrees({a}, deadline));
      if (!removed.ok()) return Fail(removed.status());
      std::printf("removed %llu files and folders\n", static_cast<unsigned long long>(*removed));
      return 0;
    }
    rt::Status s = session.Run(c.Remove(a, deadline));
    return s.ok() ? 0 : Fail(s);
  }
  if (*mkdir) {
    rt::Status s = session.Run(c.Mkdir(a, deadline));
    return s.ok() ? 0 : Fail(s);
  }
  if (*fsck) {
    auto report = session.Run(c.Fsck(repair, deadline));
    if (!report.ok()) return Fail(report.status());
    std::printf("files %llu, folders %llu, chunks %llu, orphan chunks %llu%s, problems %zu\n",
                static_cast<unsigned long long>(report->files),
                static_cast<unsigned long long>(report->dirs),
                static_cast<unsigned long long>(report->chunks),
                static_cast<unsigned long long>(report->orphan_chunks), repair ? " (removed)" : "",
                report->problems.size());
    for (const auto& p : report->problems) std::printf("problem: %s\n", p.c_str());
    const bool clean = report->problems.empty() && (repair || report->orphan_chunks == 0);
    std::printf("%s\n", clean ? "clean" : "NOT clean");
    return clean ? 0 : 3;
  }
  if (*bench) {
    bo.parallel = parallel;
    bo.timeout_s = timeout_s;
    return ringfs::RunBench(session, bo);
  }
  return 0;
}
