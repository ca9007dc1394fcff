// The chunk store behind the cluster secret (docs/formats/auth.md), with real ringfsd processes:
// a client without the secret, or with another one, is refused with Unauthenticated naming the
// server, which logs the client's address; with the secret the client library and the ringfs CLI
// work (put, get, fsck); without a secret ringfsd refuses to listen beyond loopback; a 3-node RF 3
// cluster with the secret replicates every chunk to every node, while a node without it takes no
// part (the two others serve the files; it holds no chunk).
#include "base/net/auth.h"

#include <fstream>

#include <gtest/gtest.h>

#include "iofs/client.h"
#include "iofs/net/wire.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"
#include "tests/iofs/ringfsd_cluster.h"
#include "tests/tools/shell_run.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::FreePort;
using testing::GetFile;
using testing::Io;
using testing::NodeContents;
using testing::Process;
using testing::PutFile;
using testing::TempDir;
using testing::WaitConverged;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

// A new cluster secret file `path` (mode 0600), loaded.
std::shared_ptr<const net::ClusterSecret> NewSecret(const std::string& path) {
  EXPECT_TRUE(net::ClusterSecret::Create(path).ok());
  auto secret = net::ClusterSecret::Load(path);
  EXPECT_TRUE(secret.ok()) << secret.status().ToString();
  return secret.ok() ? *secret : nullptr;
}

Result<std::shared_ptr<Client>> ConnectWith(Io& io, uint16_t port,
                                            std::shared_ptr<const net::ClusterSecret> secret) {
  ClientOptions options;
  options.secret = std::move(secret);
  return io.Run(Client::Connect("127.0.0.1", port, Secs(10), options));
}

// Runs a shell command line (killed after 60 s); its exit code and output (stdout and stderr).
std::pair<int, std::string> Shell(const std::string& command) {
  const ::rt::testing::ShellOutcome run = ::rt::testing::RunShell(command, 60);
  return {run.exit_code, run.output};
}

// Expects the files DIR/f0 ... DIR/f<files - 1> to hold Content(i, version, ...) as PutFiles
// wrote them.
void ExpectFiles(Io& io, Client& client, const std::string& dir, uint64_t version, int files) {
  for (int i = 0; i < files; ++i) {
    auto got = GetFile(io, client, dir + "/f" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, Content(i, version, 200000 + 50000 * i)) << i;
  }
}

// Writes DIR/f0 ... DIR/f<files - 1>, of different lengths, through `client`.
void PutFiles(Io& io, Client& client, const std::string& dir, uint64_t version, int files,
              const std::string& logs_if_failed) {
  for (int i = 0; i < files; ++i) {
    Status s = PutFile(io, client, dir + "/f" + std::to_string(i),
                       Content(i, version, 200000 + 50000 * i));
    ASSERT_TRUE(s.ok()) << "file " << i << ": " << s.ToString() << "\n" << logs_if_failed;
  }
}

// Waits up to 10 s for `text` to appear in the file `path` (a log another process writes).
bool WaitForText(const std::string& path, const std::string& text) {
  const Deadline deadline = Secs(10);
  while (!deadline.Expired()) {
    if (testing::ReadText(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(RingfsdAuthTest, OnlyClientsWithTheSecretAreServed) {
  TempDir dir("auth-embedded");
  const auto secret = NewSecret(dir.path() + "/secret");
  const auto other = NewSecret(dir.path() + "/other");
  const uint16_t port = FreePort();
  const std::string server_name = "127.0.0.1:" + std::to_string(port);
  const std::string log = dir.path() + "/server.log";
  Process server;
  ASSERT_TRUE(server.Start({RINGFSD, "--state", dir.path() + "/state", "--port",
                            std::to_string(port), "--secret-file", dir.path() + "/secret"},
                           {}, log));
  Io io;
  // Without the secret: refused at the first request, and the server names the client.
  auto refused = ConnectWith(io, port, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find(server_name), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(WaitForText(log, "authentication failed, closing the connection from 127.0.0.1:"))
      << testing::ReadText(log);
  // The peer-to-peer messages are behind the same handshake as the file operations.
  auto keys = testing::RawCall(io, port, wire::kChunkKeys, {});
  EXPECT_EQ(keys.status().code(), StatusCode::kUnauthenticated) << keys.status().ToString();
  // Another cluster's secret: the server cannot prove it holds ours.
  auto wrong = ConnectWith(io, port, other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated) << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find(server_name), std::string::npos)
      << wrong.status().ToString();
  // With the secret everything works.
  auto client = ConnectWith(io, port, secret);
  ASSERT_TRUE(client.ok()) << client.status().ToString() << testing::ReadText(log);
  const auto data = Content(7, 1, 5 << 20);
  ASSERT_TRUE(PutFile(io, **client, "/lib/file", data).ok());
  auto got = GetFile(io, **client, "/lib/file");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data);

  // The CLI: nothing without --secret-file, put/get/fsck with it.
  const std::string cli = std::string(RINGFS) + " --server " + server_name + " ";
  {
    std::ofstream f(dir.path() + "/in.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  auto [rc, text] = Shell(cli + "ls /");
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("Unauthenticated: ringfsd at " + server_name), std::string::npos) << text;
  const std::string with = cli + "--secret-file " + dir.path() + "/secret ";
  std::tie(rc, text) = Shell(with + "put " + dir.path() + "/in.bin /cli/in.bin");
  ASSERT_EQ(rc, 0) << text;
  std::tie(rc, text) = Shell(with + "get /cli/in.bin " + dir.path() + "/back.bin && cmp " +
                             dir.path() + "/back.bin " + dir.path() + "/in.bin");
  EXPECT_EQ(rc, 0) << text;
  std::tie(rc, text) = Shell(with + "fsck");
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("files 2, folders 2, chunks 4, orphan chunks 0, problems 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("clean"), std::string::npos) << text;
  const int status = server.Stop(std::chrono::seconds(15));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(RingfsdAuthTest, WithoutASecretOnlyLoopbackIsServedAndItSaysSo) {
  TempDir dir("auth-nosecret");
  // (Were the bind accepted, the server would run until Shell's timeout kills it.)
  auto [rc, text] =
      Shell(std::string(RINGFSD) + " --state " + dir.path() + "/wide --host 0.0.0.0 --port 0");
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("refusing to listen on 0.0.0.0 without a cluster secret"), std::string::npos)
      << text;
  const std::string log = dir.path() + "/server.log";
  Process server;
  ASSERT_TRUE(server.Start({RINGFSD, "--state", dir.path() + "/state", "--port", "0"}, {}, log));
  EXPECT_TRUE(WaitForText(log, "NO CLUSTER SECRET")) << testing::ReadText(log);
  server.Stop(std::chrono::seconds(15));
}

TEST(RingfsdAuthTest, ThreeNodeRf3ClusterWithTheSecretReplicatesToEveryNode) {
  TempDir dir("auth-rf3");
  const auto secret = NewSecret(dir.path() + "/secret");
  testing::RingfsdCluster cluster(dir.path(), 3, 3);
  for (int n = 1; n <= 3; ++n) {
    cluster.UseSecret(n, dir.path() + "/secret");
    ASSERT_TRUE(cluster.Start(n));
  }
  Io io;
  auto client = ConnectWith(io, cluster.port(2), secret);  // any node will do
  ASSERT_TRUE(client.ok()) << client.status().ToString() << cluster.Logs();
  constexpr int kFiles = 6;
  ASSERT_NO_FATAL_FAILURE(PutFiles(io, **client, "/rf3", 2, kFiles, cluster.Logs()));
  // Every node holds every chunk (node 1's contents are the reference).
  EXPECT_TRUE(WaitConverged(io, cluster, 2, 60, secret)) << cluster.Logs();
  EXPECT_TRUE(WaitConverged(io, cluster, 3, 60, secret)) << cluster.Logs();
  ExpectFiles(io, **client, "/rf3", 2, kFiles);
  auto report = io.Run((*client)->Fsck(false, Secs(60)));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty()) << report->problems[0];
  EXPECT_EQ(report->files, static_cast<uint64_t>(kFiles));
}

TEST(RingfsdAuthTest, ANodeWithoutTheSecretCannotJoin) {
  TempDir dir("auth-outsider");
  const auto secret = NewSecret(dir.path() + "/secret");
  testing::RingfsdCluster cluster(dir.path(), 3, 3);
  cluster.UseSecret(1, dir.path() + "/secret");
  cluster.UseSecret(2, dir.path() + "/secret");
  for (int n = 1; n <= 3; ++n) ASSERT_TRUE(cluster.Start(n));  // node 3 has no secret
  Io io;
  auto client = ConnectWith(io, cluster.port(1), secret);
  ASSERT_TRUE(client.ok()) << client.status().ToString() << cluster.Logs();
  constexpr int kFiles = 6;
  ASSERT_NO_FATAL_FAILURE(PutFiles(io, **client, "/out", 3, kFiles, cluster.Logs()));
  EXPECT_TRUE(WaitConverged(io, cluster, 2, 60, secret)) << cluster.Logs();
  // Node 3 (no secret: asked without one) got nothing.
  auto outsider = NodeContents(io, cluster.port(3));
  ASSERT_TRUE(outsider.ok()) << outsider.status().ToString();
  EXPECT_TRUE(outsider->empty()) << outsider->size() << " chunks on node 3\n" << cluster.Logs();
  ExpectFiles(io, **client, "/out", 3, kFiles);
}

}  // namespace
}  // namespace rt::iofs
