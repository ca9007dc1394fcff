// The chunk store over mutual TLS (docs/formats/auth.md, "TLS"), with real ringfsd processes: a
// 3-node RF 3 cluster whose nodes have the cluster secret and [tls] replicates every chunk to
// every node (their peer links run over TLS too), serves the client library and the ringfs CLI
// (--tls-dir) over TLS, and refuses a client that has the secret but no TLS.
#include "base/net/tls.h"

#include <fstream>

#include <gtest/gtest.h>

#include "base/net/auth.h"
#include "base/net/tls_certs.h"
#include "iofs/client.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"
#include "tests/iofs/ringfsd_cluster.h"
#include "tests/tools/shell_run.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::GetFile;
using testing::Io;
using testing::PutFile;
using testing::TempDir;
using testing::WaitConverged;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

TEST(RingfsdTlsTest, ThreeNodeClusterOverTlsServesTlsClientsOnly) {
  TempDir dir("tls-rf3");
  const std::string tls_dir = dir.path() + "/tls";
  auto made = net::CreateTlsFiles(tls_dir, {"node-1", "node-2", "node-3", "client"}, 30);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string secret_file = dir.path() + "/secret";
  ASSERT_TRUE(net::ClusterSecret::Create(secret_file).ok());
  testing::RingfsdCluster cluster(dir.path(), 3, 3);
  for (int n = 1; n <= 3; ++n) {
    cluster.UseSecret(n, secret_file);
    cluster.UseTls(n, tls_dir, "node-" + std::to_string(n));
    ASSERT_TRUE(cluster.Start(n));
  }
  auto secret = net::ClusterSecret::LoadWithTls(secret_file, net::TlsFilesIn(tls_dir, "client"));
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  Io io;
  ClientOptions options;
  options.secret = *secret;
  auto client = io.Run(Client::Connect("127.0.0.1", cluster.port(2), Secs(10), options));
  ASSERT_TRUE(client.ok()) << client.status().ToString() << cluster.Logs();
  for (int i = 0; i < 4; ++i) {
    Status s = PutFile(io, **client, "/tls/f" + std::to_string(i), Content(i, 1, 300000 * (i + 1)));
    ASSERT_TRUE(s.ok()) << s.ToString() << cluster.Logs();
  }
  // Every node holds every chunk: the chain forwards between nodes ran over TLS.
  EXPECT_TRUE(WaitConverged(io, cluster, 2, 60, *secret)) << cluster.Logs();
  EXPECT_TRUE(WaitConverged(io, cluster, 3, 60, *secret)) << cluster.Logs();
  for (int i = 0; i < 4; ++i) {
    auto got = GetFile(io, **client, "/tls/f" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, Content(i, 1, 300000 * (i + 1)));
  }

  // The secret alone (plain TCP) is not enough.
  auto plain_secret = net::ClusterSecret::Load(secret_file);
  ASSERT_TRUE(plain_secret.ok());
  ClientOptions plain;
  plain.secret = *plain_secret;
  auto refused = io.Run(Client::Connect("127.0.0.1", cluster.port(1), Secs(10), plain));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("requires TLS"), std::string::npos)
      << refused.status().ToString();

  // The CLI with --tls-dir (its "client" identity), and without.
  const std::string server = "127.0.0.1:" + std::to_string(cluster.port(3));
  const std::string cli =
      std::string(RINGFS) + " --server " + server + " --secret-file " + secret_file + " ";
  auto run = ::rt::testing::RunShell(cli + "--tls-dir " + tls_dir + " ls /tls", 60);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("f3"), std::string::npos) << run.output;
  run = ::rt::testing::RunShell(cli + "ls /tls", 60);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("requires TLS"), std::string::npos) << run.output;
  for (int n = 1; n <= 3; ++n) cluster.proc(n).Stop(std::chrono::seconds(15));
}

}  // namespace
}  // namespace rt::iofs
