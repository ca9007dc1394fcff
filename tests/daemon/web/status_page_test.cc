// daemon/web/status_page: the embedded files and /api/status over HTTP, then the page in a real
// headless Chromium (Debian's chromium + chromium-driver, driven over WebDriver): it loads
// without console errors, shows the members and a chart with points from a test status
// provider, and updates after the provider changes. A screenshot is kept in the build folder
// (test_artifacts/status_page.png).
#include "daemon/web/status_page.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "base/net/http_client.h"
#include "tests/base/net/loop.h"
#include "tests/base/tool_path.h"
#include "tests/daemon/web/webdriver.h"

namespace rt::web {
namespace {

namespace fs = std::filesystem;

// A status provider the test changes while the page polls it. Thread-safe.
class TestStatus {
 public:
  void Set(json status) {
    std::lock_guard lock(mu_);
    status_ = std::move(status);
  }
  json Get() const {
    std::lock_guard lock(mu_);
    if (status_.is_null()) throw std::runtime_error("no status yet");
    return status_;
  }

 private:
  mutable std::mutex mu_;
  json status_;
};

// A 4-node cluster at `steps` steps with node `down_node` down (0: none) and `recoveries`
// recovery entries, with a loss that falls and a throughput that rises.
json MakeStatus(int steps, int down_node, int recoveries) {
  json members = json::array();
  for (int id = 1; id <= 4; ++id)
    members.push_back({{"id", id},
                       {"address", "127.0.0.1:" + std::to_string(7700 + 10 * id)},
                       {"state", id == down_node ? "down" : "up"},
                       {"slots", 2},
                       {"workers", id == down_node ? 0 : 2},
                       {"ranks", {2 * id - 2, 2 * id - 1}}});
  json history = json::array();
  for (int step = 1; step <= steps; ++step)
    history.push_back({{"step", step},
                       {"loss", 5.5 - 0.1 * step},
                       {"tokens_per_second", 1000.0 + 20 * step},
                       {"time", 1.7e9 + step}});
  json recovery_list = json::array();
  for (int i = 0; i < recoveries; ++i)
    recovery_list.push_back({{"time", 1.7e9 + 20},
                             {"cause", "node_lost"},
                             {"what", "node 3 (127.0.0.1:7730)"},
                             {"detected_after_s", 0.3},
                             {"generation", "2.0"},
                             {"layout", "pp1 x dp3 x tp2"},
                             {"loaded_from", "mem://j-1/20"},
                             {"steps_lost", 0},
                             {"recovery_s", 2.5}});
  return {
      {"version", 1},
      {"node", {{"id", 1}, {"address", "127.0.0.1:7710"}, {"version", "0.1.0"}}},
      {"time", 1.7e9 + steps},
      {"cluster", {{"generation", 1 + recoveries}, {"epoch", 0}, {"members", members}}},
      {"job",
       {{"id", "j-1"},
        {"name", "config S"},
        {"state", "running"},
        {"step", steps},
        {"max_steps", 100},
        {"loss", 5.5 - 0.1 * steps},
        {"tokens_per_second", 1000.0 + 20 * steps},
        {"layout",
         {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", 4}, {"tp", 2}, {"world", 8}, {"zero", 1}}},
        {"history", history}}},
      {"recoveries", recovery_list},
      {"checkpoints", json::array({{{"step", 20},
                                    {"tier", "memory"},
                                    {"uri", "mem://j-1/20"},
                                    {"bytes", 5 << 20},
                                    {"save_s", 0.05},
                                    {"time", 1.7e9 + 20}}})}};
}

std::shared_ptr<net::HttpServer> StartServer(net::Loop& loop, TestStatus& status) {
  auto server = net::HttpServer::Create(loop.io().get_executor(), {.name = "status page"});
  RegisterStatusPage(*server, [&status] { return status.Get(); });
  EXPECT_TRUE(server->Start().ok());
  return server;
}

net::HttpResponse Fetch(net::Loop& loop, uint16_t port, const std::string& target) {
  auto reply = loop.Run<Result<net::HttpResponse>>(
      [&]() { return net::HttpCall({.port = port, .target = target}, Deadline::AfterMs(10'000)); });
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  return reply.ok() ? *reply : net::HttpResponse::Text(0, "");
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string HeaderOf(const net::HttpResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers)
    if (key == name) return value;
  return "";
}

TEST(StatusPage, ServesTheEmbeddedFilesAndTheStatusJson) {
  net::Loop loop;
  TestStatus status;
  auto server = StartServer(loop, status);
  const fs::path assets = fs::path(RINGTRAIN_SOURCE_DIR) / "daemon/web/assets";
  for (const auto& [target, file, type] :
       {std::tuple{"/", "index.html", "text/html; charset=utf-8"},
        std::tuple{"/status.js", "status.js", "text/javascript; charset=utf-8"},
        std::tuple{"/status.css", "status.css", "text/css; charset=utf-8"}}) {
    net::HttpResponse page = Fetch(loop, server->port(), target);
    EXPECT_EQ(page.status, 200) << target;
    EXPECT_EQ(page.content_type, type) << target;
    EXPECT_EQ(page.body, ReadFile(assets / file)) << target << " differs from " << file;
    EXPECT_NE(HeaderOf(page, "Content-Security-Policy").find("default-src 'self'"),
              std::string::npos);
  }
  // A provider that fails answers 500, and the server keeps serving.
  EXPECT_EQ(Fetch(loop, server->port(), "/api/status").status, 500);
  status.Set(MakeStatus(3, 0, 0));
  net::HttpResponse api = Fetch(loop, server->port(), "/api/status");
  EXPECT_EQ(api.status, 200);
  EXPECT_EQ(api.content_type, "application/json");
  EXPECT_EQ(HeaderOf(api, "Cache-Control"), "no-store");
  EXPECT_EQ(json::parse(api.body), MakeStatus(3, 0, 0));
  server->Abort();
}

TEST(StatusPage, HeadlessChromiumShowsAndUpdatesTheCluster) {
  const std::string chromedriver = FindTool("chromedriver");
  const std::string chromium = FindTool("chromium");
  if (chromedriver.empty() || chromium.empty())
    GTEST_SKIP() << "chromium or chromedriver not found (Debian packages chromium and "
                    "chromium-driver; `tools/run setup` installs them): the page was not tested";
  net::Loop loop;
  TestStatus status;
  status.Set(MakeStatus(10, 3, 0));
  auto server = StartServer(loop, status);
  ChromeDriver driver(loop, chromedriver);
  ASSERT_TRUE(driver.ok()) << driver.error();

  Result<json> session = driver.Call("POST", "/session", HeadlessCapabilities(chromium), 120'000);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Browser browser(driver, (*session)["value"]["sessionId"].get<std::string>());
  const std::string url = "http://127.0.0.1:" + std::to_string(server->port()) + "/?refresh=200";
  ASSERT_TRUE(browser.Command("POST", "/url", {{"url", url}}).ok());

  json shown = browser.WaitFor([](const json& s) { return s["loss_points"] == 10; });
  EXPECT_EQ(shown["members"], 4) << shown.dump();
  EXPECT_EQ(shown["ring"], 4) << shown.dump();
  EXPECT_EQ(shown["down"], json::array({"3"})) << shown.dump();
  EXPECT_EQ(shown["loss_points"], 10) << shown.dump();
  EXPECT_EQ(shown["tps_points"], 10) << shown.dump();
  EXPECT_EQ(shown["step"], "10") << shown.dump();
  EXPECT_EQ(shown["layout"], "pp1 × dp1·4 × tp2 · ZeRO-1") << shown.dump();
  EXPECT_EQ(shown["recoveries"], 0) << shown.dump();
  EXPECT_EQ(shown["checkpoints"], 1) << shown.dump();
  EXPECT_EQ(shown["connection"], "live") << shown.dump();

  // The provider moves on (steps done, a recovery, node 3 back up): the page follows.
  status.Set(MakeStatus(25, 0, 1));
  shown = browser.WaitFor([](const json& s) { return s["step"] == "25"; });
  EXPECT_EQ(shown["step"], "25") << shown.dump();
  EXPECT_EQ(shown["loss_points"], 25) << shown.dump();
  EXPECT_EQ(shown["down"], json::array()) << shown.dump();
  EXPECT_EQ(shown["recoveries"], 1) << shown.dump();

  // A screenshot for people to look at.
  Result<json> screenshot = browser.Command("GET", "/screenshot", nullptr);
  ASSERT_TRUE(screenshot.ok()) << screenshot.status().ToString();
  const std::string png = DecodeBase64(screenshot->get<std::string>());
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  fs::create_directories("test_artifacts");
  std::ofstream("test_artifacts/status_page.png", std::ios::binary) << png;
  std::cout << "screenshot: " << fs::absolute("test_artifacts/status_page.png").string() << "\n";

  // No console errors (failed loads, exceptions, CSP violations) over the whole run...
  Result<json> logs = browser.Command("POST", "/se/log", {{"type", "browser"}});
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  for (const json& entry : *logs) EXPECT_NE(entry["level"], "SEVERE") << entry.dump();
  // ...and the log would show one: a console.error written now is there.
  ASSERT_TRUE(
      browser
          .Command("POST", "/execute/sync",
                   {{"script", "console.error('probe'); return 1;"}, {"args", json::array()}})
          .ok());
  logs = browser.Command("POST", "/se/log", {{"type", "browser"}});
  ASSERT_TRUE(logs.ok());
  EXPECT_NE(logs->dump().find("probe"), std::string::npos) << logs->dump();
  server->Abort();
}

}  // namespace
}  // namespace rt::web
