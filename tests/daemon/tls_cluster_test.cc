// A cluster of real daemons over mutual TLS (docs/formats/auth.md, "TLS"): two ringtraind with
// the cluster secret and [tls] join one view (their membership links run over TLS), ringctl with
// --tls-dir submits a job, and its workers (given the TLS files by path) reach their daemon, the
// job's store and the memory tier over TLS and train; ringctl without TLS is refused.
#include <gtest/gtest.h>

#include "base/net/auth.h"
#include "base/net/tls_certs.h"
#include "tests/daemon/local_cluster.h"

namespace rt::daemon {
namespace {

class TlsClusterTest : public LocalCluster {
 protected:
  // node.toml lines giving node `id` the secret and its TLS identity.
  std::string AuthConfig(int id) const {
    const std::string tls = (dir_ / "tls").string();
    const std::string name = tls + "/node-" + std::to_string(id);
    return "[auth]\nsecret_file = \"" + (dir_ / "secret").string() + "\"\n[tls]\ncert_file = \"" +
           name + ".pem\"\nkey_file = \"" + name + ".key\"\nca_file = \"" + tls + "/ca.pem\"\n";
  }
};

TEST_F(TlsClusterTest, DaemonsWorkersAndRingctlOverTls) {
  const std::string tls = (dir_ / "tls").string();
  ASSERT_TRUE(net::CreateTlsFiles(tls, {"node-1", "node-2", "client"}, 30).ok());
  ASSERT_TRUE(net::ClusterSecret::Create((dir_ / "secret").string()).ok());
  auto secret =
      net::ClusterSecret::LoadWithTls((dir_ / "secret").string(), net::TlsFilesIn(tls, "client"));
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  StartNode(1, 2, AuthConfig(1));
  StartNode(2, 0, AuthConfig(2));  // a witness: a member over TLS that runs no rank
  const std::vector<std::string> creds = {"--secret-file", (dir_ / "secret").string(), "--tls-dir",
                                          tls};
  auto status = [&]() -> Result<Json> {
    return CallJsonBlocking(Address(1), *secret, kCtlStatus, Json::object(),
                            Deadline::AfterMs(5'000));
  };
  auto wait_for = [&](const std::string& what, std::function<bool(const Json&)> done) {
    const Deadline deadline = Deadline::AfterMs(180'000);
    Json last;
    while (!deadline.Expired()) {
      if (Result<Json> s = status(); s.ok()) {
        last = *s;
        if (done(last)) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; last: " << last.dump(2) << "\n"
                  << Logs();
    return false;
  };
  ASSERT_TRUE(wait_for("two members", [](const Json& s) { return Members(s) == 2; }));

  std::vector<std::string> submit = creds;
  submit.insert(submit.end(), {"submit", TinyJobFile()});
  ProcessOutcome submitted = Ctl(submit);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output << Logs();
  EXPECT_TRUE(wait_for("step 3", [](const Json& s) { return Step(s) >= 3; }));

  std::vector<std::string> ask = creds;
  ask.push_back("status");
  ProcessOutcome asked = Ctl(ask);
  EXPECT_EQ(asked.exit_code, 0) << asked.output;
  // The secret alone (plain TCP) is refused, and says why.
  ProcessOutcome plain = Ctl({"--secret-file", (dir_ / "secret").string(), "status"});
  EXPECT_EQ(plain.exit_code, 1) << plain.output;
  EXPECT_NE(plain.output.find("requires TLS"), std::string::npos) << plain.output;
}

}  // namespace
}  // namespace rt::daemon
