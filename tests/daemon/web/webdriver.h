// A minimal W3C WebDriver client for tests: starts chromedriver (Debian's chromium-driver) as a
// child process and drives a headless Chromium through its HTTP API with base/net's HTTP client.
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "base/net/http_client.h"
#include "base/subprocess.h"
#include "tests/base/net/loop.h"

namespace rt::web {

using nlohmann::json;

// chromedriver on a free loopback port, in its own process group (killed with its browsers).
class ChromeDriver {
 public:
  // Starts `chromedriver_path`; check ok() / error().
  ChromeDriver(net::Loop& loop, const std::string& chromedriver_path) : loop_(loop) {
    {
      net::tcp::acceptor probe(loop.io(),
                               net::tcp::endpoint(net::asio::ip::make_address("127.0.0.1"), 0));
      port_ = probe.local_endpoint().port();
    }
    SpawnOptions spawn;
    spawn.argv = {chromedriver_path, "--port=" + std::to_string(port_)};
    spawn.env = EnvironmentWithout({});
    spawn.inherit_output = true;
    Result<std::unique_ptr<SyncChild>> driver = SyncChild::Start(spawn);
    if (!driver.ok()) {
      error_ = "cannot start " + chromedriver_path + ": " + driver.status().ToString();
      return;
    }
    driver_ = std::move(*driver);
    // Ready when /status says so.
    const Deadline deadline = Deadline::AfterMs(30'000);
    while (!deadline.Expired()) {
      Result<json> status = Call("GET", "/status", nullptr);
      if (status.ok() && (*status)["value"].value("ready", false)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    error_ = "chromedriver on port " + std::to_string(port_) + " not ready within 30 s";
  }
  // SIGTERM to chromedriver's group (its browsers too), SIGKILL after 10 s.
  ~ChromeDriver() {
    if (!driver_) return;
    (void)driver_->Signal(SIGTERM);
    if (!driver_->WaitExit(Deadline::AfterMs(10'000))) driver_->Kill();
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // One WebDriver command; returns the whole answer ({"value": ...}). Errors: the HTTP call's,
  // or Internal with WebDriver's error message for a non-2xx answer.
  Result<json> Call(const std::string& method, const std::string& path, const json& body,
                    int64_t timeout_ms = 60'000) {
    net::HttpCallRequest request{
        .method = method, .port = port_, .target = path, .body = body.is_null() ? "" : body.dump()};
    auto reply = loop_.Run<Result<net::HttpResponse>>(
        [&]() { return net::HttpCall(request, Deadline::AfterMs(timeout_ms)); });
    if (!reply.ok()) return reply.status();
    json answer = json::parse(reply->body, nullptr, false);
    if (answer.is_discarded())
      return Internal("webdriver " + path + ": not JSON: " + reply->body.substr(0, 200));
    if (reply->status / 100 != 2)
      return Internal("webdriver " + method + " " + path + ": HTTP " +
                      std::to_string(reply->status) + ": " + answer.dump().substr(0, 500));
    return answer;
  }

 private:
  net::Loop& loop_;
  uint16_t port_ = 0;
  std::unique_ptr<SyncChild> driver_;
  std::string error_;
};

// Base64 text to bytes ("" when malformed): WebDriver's screenshots.
inline std::string DecodeBase64(const std::string& text) {
  std::string out(text.size() / 4 * 3 + 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return "";
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
  out.resize(n - padding);
  return out;
}

// What the status page shows now, read from its DOM (a script for /execute/sync).
inline constexpr char kReadPage[] = R"js(
  const ring = Array.from(document.querySelectorAll('#ring .ring-node'));
  return {
    members: document.querySelectorAll('#members tbody tr').length,
    ring: ring.length,
    down: ring.filter((g) => g.querySelector('circle').classList.contains('state-down'))
              .map((g) => g.dataset.id),
    loss_points: document.querySelectorAll('#chart .point-loss').length,
    tps_points: document.querySelectorAll('#chart .point-tps').length,
    step: document.getElementById('job-step').textContent,
    layout: document.getElementById('layout-detail').textContent,
    recoveries: document.querySelectorAll('#recoveries tbody tr').length,
    checkpoints: document.querySelectorAll('#checkpoints tbody tr').length,
    connection: document.getElementById('connection').textContent,
  };)js";

// One WebDriver session (deleted with the object).
class Browser {
 public:
  Browser(ChromeDriver& driver, std::string session) : driver_(driver), session_(session) {}
  ~Browser() { (void)driver_.Call("DELETE", "/session/" + session_, nullptr); }
  Result<json> Command(const std::string& method, const std::string& what, const json& body) {
    ASSIGN_OR_RETURN(json answer, driver_.Call(method, "/session/" + session_ + what, body));
    return answer["value"];
  }
  // Polls the page until `done(state)` or 60 s; returns the last state read.
  json WaitFor(const std::function<bool(const json&)>& done) {
    json state;
    const Deadline deadline = Deadline::AfterMs(60'000);
    while (!deadline.Expired()) {
      Result<json> read =
          Command("POST", "/execute/sync", {{"script", kReadPage}, {"args", json::array()}});
      EXPECT_TRUE(read.ok()) << read.status().ToString();
      if (!read.ok()) break;
      state = *read;
      if (done(state)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return state;
  }

 private:
  ChromeDriver& driver_;
  std::string session_;
};

// New-session capabilities for a headless `chromium` that keeps its console log.
inline json HeadlessCapabilities(const std::string& chromium) {
  return {{"capabilities",
           {{"alwaysMatch",
             {{"browserName", "chrome"},
              {"goog:chromeOptions",
               {{"binary", chromium},
                {"args",
                 {"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1280,1000"}}}},
              {"goog:loggingPrefs", {{"browser", "ALL"}}}}}}}};
}

}  // namespace rt::web
