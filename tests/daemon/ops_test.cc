// The daemon as operators see it, against real ringtraind processes: the systemd notifications
// on a NOTIFY_SOCKET the test owns (READY after joining a view, STATUS lines, WATCHDOG keep-alives
// from the event loop, STOPPING on SIGTERM, in that order and in time), and a two-node cluster
// training config tiny whose /metrics pass `promtool check metrics` and say what the cluster
// does, whose status page works in a headless Chromium, and whose `ringctl top --once` prints
// the table; and the workers' checkpoint and comm counters of a DDP job against the checkpoints
// on disk and the all-reduce formula.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <optional>
#include <set>
#include <sstream>

#include "base/net/http_client.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/storage.h"
#include "parallel/stage_layout.h"
#include "tests/base/net/loop.h"
#include "tests/base/tool_path.h"
#include "tests/daemon/local_cluster.h"
#include "tests/daemon/web/promtool.h"
#include "tests/daemon/web/webdriver.h"

namespace rt::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A datagram socket bound to a path: the service manager's end of NOTIFY_SOCKET.
class NotifySocket {
 public:
  // One datagram and when it arrived.
  struct Message {
    std::string text;
    Clock::time_point at;
  };

  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path_.c_str());
    ::unlink(path_.c_str());
    bound_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return bound_; }

  // The next datagram within `timeout`, or nullopt.
  std::optional<Message> Receive(milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0) return std::nullopt;
    return Message{std::string(buffer, static_cast<size_t>(n)), Clock::now()};
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The local cluster with config tiny's job file (tp=2, a checkpoint every 5 steps).
using OpsTest = LocalCluster;

TEST_F(OpsTest, NotifiesSystemdReadyStatusWatchdogAndStopping) {
  NotifySocket socket((dir_ / "notify.sock").string());
  ASSERT_TRUE(socket.ok()) << "bind " << (dir_ / "notify.sock");
  // A 10 s watchdog: keep-alives every 5 s. (The gaps are checked against the watchdog, so a
  // machine under heavy load may stall the daemon's loop for up to 5 s without a failure.)
  const auto watchdog = milliseconds(10'000);
  StartNode(1, 2, "",
            {"NOTIFY_SOCKET=" + (dir_ / "notify.sock").string(),
             "WATCHDOG_USEC=" + std::to_string(watchdog.count() * 1000)});
  std::vector<NotifySocket::Message> messages;
  auto receive_until = [&](const std::function<bool(const std::string&)>& done,
                           milliseconds timeout) {
    const Deadline deadline = Deadline::After(timeout);
    while (!deadline.Expired()) {
      auto m = socket.Receive(milliseconds(200));
      if (!m) continue;
      messages.push_back(*m);
      if (done(m->text)) return true;
    }
    return false;
  };
  // READY=1 comes once the daemon is a member of a view, with a STATUS line saying so; only
  // keep-alives come before it.
  ASSERT_TRUE(
      receive_until([](const std::string& t) { return Has(t, "READY=1"); }, milliseconds(60'000)))
      << Logs();
  for (size_t i = 0; i + 1 < messages.size(); ++i)
    EXPECT_EQ(messages[i].text, "WATCHDOG=1") << "before READY=1";
  const std::string ready = messages.back().text;
  EXPECT_TRUE(Has(ready, "STATUS=generation ")) << ready;
  EXPECT_TRUE(Has(ready, "1 member(s), no job")) << ready;
  Result<Json> status = Status(1);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(Members(*status), 1u);

  // A job: the STATUS lines follow its steps.
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile()});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  ASSERT_TRUE(receive_until([](const std::string& t) { return Has(t, "at step 3"); },
                            milliseconds(120'000)))
      << Logs();
  // Within one training generation the steps only grow (a restart under load may begin a new
  // generation, which starts again from its checkpoint).
  int64_t last_step = 0;
  std::string last_generation;
  int with_steps = 0;
  for (const auto& m : messages) {
    const size_t at = m.text.find(" at step "), named = m.text.find("training generation ");
    if (at == std::string::npos || named == std::string::npos) continue;
    const std::string generation = m.text.substr(named + 20, at - named - 20);
    if (generation != last_generation) last_step = 0;
    last_generation = generation;
    const int64_t step = std::atoll(m.text.c_str() + at + 9);
    EXPECT_GT(step, last_step) << "a STATUS line per change: " << m.text;
    last_step = step;
    ++with_steps;
  }
  EXPECT_GE(with_steps, 1) << "no STATUS line names a training generation and its step";
  EXPECT_TRUE(Has(messages.back().text, "STATUS=generation ")) << messages.back().text;
  EXPECT_TRUE(Has(messages.back().text, "job tiny run")) << messages.back().text;

  // A few keep-alives more (one every 5 s), while it trains.
  int pinged = 0;
  ASSERT_TRUE(
      receive_until([&](const std::string& t) { return t == "WATCHDOG=1" && ++pinged == 3; },
                    milliseconds(60'000)));

  // SIGTERM: STOPPING=1, no keep-alive after it, and a clean exit.
  ASSERT_TRUE(nodes_[1]->Signal(SIGTERM).ok());
  ASSERT_TRUE(receive_until([](const std::string& t) { return Has(t, "STOPPING=1"); },
                            milliseconds(30'000)))
      << Logs();
  const size_t stopping = messages.size() - 1;
  Result<ChildExit> exit = WaitExit(1, milliseconds(30'000));
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_TRUE(exit->ok()) << exit->Describe() << "\n" << Logs();
  while (auto m = socket.Receive(milliseconds(100))) messages.push_back(*m);
  for (size_t i = stopping + 1; i < messages.size(); ++i)
    EXPECT_NE(messages[i].text, "WATCHDOG=1") << "a keep-alive after STOPPING=1";

  // The keep-alives came all along, never further apart than the watchdog allows.
  std::vector<Clock::time_point> pings;
  for (size_t i = 0; i < stopping; ++i)
    if (messages[i].text == "WATCHDOG=1") pings.push_back(messages[i].at);
  ASSERT_GE(pings.size(), 3u);
  for (size_t i = 1; i < pings.size(); ++i)
    EXPECT_LT(pings[i] - pings[i - 1], watchdog) << "keep-alive " << i << " came late";
  EXPECT_LT(messages[stopping].at - pings.back(), watchdog);
  if (HasFailure()) {  // every notification with its time, and the daemon's log
    std::string all;
    for (const auto& m : messages)
      all +=
          std::to_string(std::chrono::duration_cast<milliseconds>(m.at - messages[0].at).count()) +
          " ms: " + m.text + "\n";
    ADD_FAILURE() << "notifications:\n" << all << Logs();
  }
}

// One scrape: "name{labels}" → value, plus the text.
struct Scrape {
  std::string text;
  std::map<std::string, double> values;
  double Get(const std::string& series) const {
    auto it = values.find(series);
    return it == values.end() ? -1 : it->second;
  }
};

Scrape ParseScrape(std::string text) {
  Scrape s;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    s.values[line.substr(0, space)] = std::atof(line.c_str() + space + 1);
  }
  s.text = std::move(text);
  return s;
}

class WebClusterTest : public LocalCluster {
 protected:
  net::HttpResponse Get(int id, const std::string& target) {
    auto reply = loop_.Run<Result<net::HttpResponse>>([&]() {
      return net::HttpCall({.port = http_ports_.at(id), .target = target},
                           Deadline::AfterMs(10'000));
    });
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? *reply : net::HttpResponse::Text(0, "");
  }
  Scrape Metrics(int id) {
    net::HttpResponse r = Get(id, "/metrics");
    EXPECT_EQ(r.status, 200);
    return ParseScrape(r.body);
  }
  void StartWebNode(int id) {
    http_ports_[id] = FreePort();
    StartNode(id, 2, "[http]\nlisten = \"127.0.0.1:" + std::to_string(http_ports_[id]) + "\"\n");
  }

  // The status page of daemon `id` in a real headless Chromium: it shows the members and a
  // chart with points, follows the steps, and logs no console error. Keeps a screenshot.
  void CheckPageInChromium(int id) {
    const std::string chromedriver = FindTool("chromedriver");
    const std::string chromium = FindTool("chromium");
    if (chromedriver.empty() || chromium.empty()) {
      ADD_FAILURE() << "chromium or chromedriver not found (Debian packages chromium and "
                       "chromium-driver; `tools/run setup` installs them)";
      return;
    }
    web::ChromeDriver driver(loop_, chromedriver);
    ASSERT_TRUE(driver.ok()) << driver.error();
    Result<Json> session =
        driver.Call("POST", "/session", web::HeadlessCapabilities(chromium), 120'000);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    web::Browser browser(driver, (*session)["value"]["sessionId"].get<std::string>());
    const std::string url =
        "http://127.0.0.1:" + std::to_string(http_ports_.at(id)) + "/?refresh=200";
    ASSERT_TRUE(browser.Command("POST", "/url", {{"url", url}}).ok());
    Json shown = browser.WaitFor([](const Json& s) {
      return s["members"] == 2 && s["loss_points"].get<int>() >= 2 && s["connection"] == "live";
    });
    EXPECT_EQ(shown["members"], 2) << shown.dump();
    EXPECT_EQ(shown["ring"], 2) << shown.dump();
    EXPECT_EQ(shown["down"], Json::array()) << shown.dump();
    EXPECT_GE(shown["loss_points"].get<int>(), 2) << shown.dump();
    EXPECT_EQ(shown["tps_points"], shown["loss_points"]) << shown.dump();
    EXPECT_EQ(shown["connection"], "live") << shown.dump();
    const Json step = shown["step"];
    shown = browser.WaitFor([&](const Json& s) { return s["step"] != step; });
    EXPECT_NE(shown["step"], step) << "the page follows the steps: " << shown.dump();

    Result<Json> screenshot = browser.Command("GET", "/screenshot", nullptr);
    ASSERT_TRUE(screenshot.ok()) << screenshot.status().ToString();
    std::filesystem::create_directories("test_artifacts");
    std::ofstream("test_artifacts/status_page_daemon.png", std::ios::binary)
        << web::DecodeBase64(screenshot->get<std::string>());
    Result<Json> logs = browser.Command("POST", "/se/log", {{"type", "browser"}});
    ASSERT_TRUE(logs.ok()) << logs.status().ToString();
    for (const Json& entry : *logs) EXPECT_NE(entry["level"], "SEVERE") << entry.dump();
  }

  net::Loop loop_;
  std::map<int, uint16_t> http_ports_;
};

TEST_F(WebClusterTest, ServesMetricsStatusJsonAndTop) {
  StartWebNode(1);
  StartWebNode(2);
  WaitFor(1, "a view of 2 members", [](const Json& s) { return Members(s) == 2; });
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile()});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "step 3 on both nodes", [](const Json& s) {
    return Step(s) >= 3 && WorkerPids(s, 1).size() == 2 && WorkerPids(s, 2).size() == 2;
  });

  // Every daemon serves the job-wide values, its own workers and the view.
  std::map<int, Scrape> first;
  for (int id : {1, 2}) {
    // A daemon without rank 0 learns the progress within a second.
    const Deadline deadline = Deadline::AfterMs(30'000);
    first[id] = Metrics(id);
    while (first[id].Get("ringtrain_job_step") < 3 && !deadline.Expired()) {
      std::this_thread::sleep_for(milliseconds(200));
      first[id] = Metrics(id);
    }
    const Scrape& m = first[id];
    EXPECT_EQ(m.Get("ringtrain_membership_members"), 2) << "node " << id << "\n" << m.text;
    EXPECT_EQ(m.Get("ringtrain_membership_generation"), s["view"]["generation"].get<double>())
        << m.text;
    EXPECT_GE(m.Get("ringtrain_job_step"), 3) << m.text;
    EXPECT_GT(m.Get("ringtrain_job_loss"), 0) << m.text;
    EXPECT_GT(m.Get("ringtrain_job_tokens_per_second"), 0) << m.text;
    EXPECT_EQ(m.Get("ringtrain_workers_running"), 2) << m.text;
    EXPECT_GE(m.Get("ringtrain_worker_restarts_total"), 0) << m.text;
    EXPECT_GE(m.Get("ringtrain_recovery_duration_seconds_count"), 0) << m.text;
  }
  // The counters below are compared with these (node 2 registering after the submission may
  // have restarted the first generation already).
  auto sum = [](const std::map<int, Scrape>& scrapes, const std::string& series) {
    double total = 0;
    for (const auto& [id, m] : scrapes) total += std::max(0.0, m.Get(series));
    return total;
  };
  const std::string worker_exited = "ringtrain_recoveries_total{cause=\"worker_exited\"}";
  const double recoveries_before = sum(first, worker_exited);
  const double restarts_before = sum(first, "ringtrain_worker_restarts_total");
  const double timed_before = sum(first, "ringtrain_recovery_duration_seconds_count");
  const std::string promtool = FindTool("promtool");
  if (promtool.empty()) {
    ADD_FAILURE() << "promtool not found (Debian package prometheus; `tools/run setup`)";
  } else {
    ProcessOutcome linted = web::Promtool(promtool, first[1].text);
    EXPECT_TRUE(linted.exited && linted.exit_code == 0) << linted.Describe() << linted.output;
    EXPECT_EQ(linted.output, "");
  }

  // /api/status: the members with their ranks, the job's layout and its history.
  net::HttpResponse api = Get(2, "/api/status");
  ASSERT_EQ(api.status, 200);
  const Json page = Json::parse(api.body);
  EXPECT_EQ(page["version"], 1);
  EXPECT_EQ(page["node"]["id"], 2);
  ASSERT_EQ(page["cluster"]["members"].size(), 2u) << page.dump(2);
  std::set<int> ranks;
  for (const Json& m : page["cluster"]["members"]) {
    EXPECT_EQ(m["state"], "up") << m.dump();
    EXPECT_EQ(m["slots"], 2) << m.dump();
    for (const Json& r : m["ranks"]) ranks.insert(r.get<int>());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << page.dump(2);
  EXPECT_EQ(page["job"]["name"], "tiny");
  EXPECT_EQ(page["job"]["state"], "running") << page.dump(2);
  EXPECT_EQ(page["job"]["layout"]["world"], 4);
  EXPECT_EQ(page["job"]["layout"]["tp"], 2);
  EXPECT_FALSE(page["job"]["history"].empty());
  EXPECT_EQ(Get(1, "/").status, 200);

  // ringctl top --once prints the table.
  ProcessOutcome top = Ctl({"top", "--once"}, 2);
  EXPECT_EQ(top.exit_code, 0) << top.output;
  EXPECT_TRUE(Has(top.output, "members 2")) << top.output;
  EXPECT_TRUE(Has(top.output, "job tiny")) << top.output;
  EXPECT_TRUE(Has(top.output, "layout tp=2,pp=1,dp=2")) << top.output;
  EXPECT_TRUE(Has(top.output, "step ")) << top.output;
  EXPECT_TRUE(Has(top.output, "127.0.0.1:" + std::to_string(http_ports_[1]))) << top.output;
  std::printf("ringctl top --once:\n%s", top.output.c_str());

  CheckPageInChromium(1);

  // kill -9 a worker of node 2: one recovery (cause worker_exited) on the daemon that runs
  // rank 0 next, and every worker of both nodes restarted.
  s = WaitFor(1, "workers on node 2", [](const Json& s) { return !WorkerPids(s, 2).empty(); });
  const std::string before = Generation(s);
  ASSERT_EQ(::kill(WorkerPids(s, 2)[0], SIGKILL), 0);
  WaitFor(1, "a new generation training", [&](const Json& s) {
    return !Generation(s).empty() && Generation(s) != before && Step(s) >= 1;
  });
  const Deadline deadline = Deadline::AfterMs(30'000);
  std::map<int, Scrape> after;
  while (!deadline.Expired()) {
    for (int id : {1, 2}) after[id] = Metrics(id);
    if (sum(after, worker_exited) > recoveries_before &&
        sum(after, "ringtrain_worker_restarts_total") >= restarts_before + 4)
      break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_EQ(sum(after, worker_exited) - recoveries_before, 1);
  EXPECT_EQ(sum(after, "ringtrain_recovery_duration_seconds_count") - timed_before, 1);
  EXPECT_EQ(sum(after, "ringtrain_worker_restarts_total") - restarts_before, 4)
      << "2 nodes x 2 workers started again";
  for (int id : {1, 2}) {
    EXPECT_GE(after[id].Get("ringtrain_job_step"), 1);
    if (promtool.empty()) continue;
    ProcessOutcome linted = web::Promtool(promtool, after[id].text);
    EXPECT_EQ(linted.exit_code, 0) << linted.output;
  }

  // The newest committed checkpoint (one every 5 steps) in the status, top and the metrics.
  s = WaitFor(2, "a checkpoint listed", [](const Json& s) { return s.contains("checkpoint"); });
  const int64_t checkpoint = s["checkpoint"]["step"].get<int64_t>();
  EXPECT_EQ(checkpoint % 5, 0) << s.dump(2);
  EXPECT_TRUE(Has(s["checkpoint"]["uri"].get<std::string>(), (dir_ / "ckpt").string()));
  top = Ctl({"top", "--once"}, 1);
  EXPECT_TRUE(Has(top.output, "last checkpoint step ")) << top.output;
  const Deadline listed = Deadline::AfterMs(30'000);  // every daemon lists every 5 s
  double last_step = Metrics(2).Get("ringtrain_checkpoint_last_step");
  while (last_step < static_cast<double>(checkpoint) && !listed.Expired()) {
    std::this_thread::sleep_for(milliseconds(200));
    last_step = Metrics(2).Get("ringtrain_checkpoint_last_step");
  }
  EXPECT_GE(last_step, static_cast<double>(checkpoint));
}

// The bytes of the files in `folder`.
uint64_t FolderBytes(const std::filesystem::path& folder) {
  uint64_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(folder)) bytes += f.file_size();
  return bytes;
}

// A DDP job (tiny, dp=4 and ZeRO-0 on 2 nodes x 2 slots) that `ringctl checkpoint` stops once and
// that then resumes and finishes; the daemons' metrics once every worker has exited.
class WorkerMetricsTest : public WebClusterTest {
 protected:
  // Runs `steps` steps with `ckpt` lines added to [ckpt] (dir and keep = 100 are set), stopping
  // once for `ringctl checkpoint`; returns the step it stopped after (0 on failure).
  int64_t RunWithAPlannedStop(int64_t steps, const std::string& ckpt) {
    StartWebNode(1);
    StartWebNode(2);
    WaitFor(1, "a view of 2 members", [](const Json& s) { return Members(s) == 2; });
    const std::string job = (dir_ / "ddp.toml").string();
    std::ofstream(job) << "[job]\nname = \"ddp\"\n[elastic]\nmin_nodes = 2\n"
                       << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
                       << "[train]\nbatch_size = 12\nsteps = " << steps << "\nlog_every = 1000\n"
                       << "[data]\ndir = \"" << (dir_ / "data").string() << "\"\n"
                       << "[eval]\nevery = 0\n"
                       << "[ckpt]\ndir = \"" << (dir_ / "ckpt").string() << "\"\nkeep = 100\n"
                       << ckpt;
    ProcessOutcome submitted = Ctl({"submit", job});
    EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
    WaitFor(1, "step 3 of dp=4", [](const Json& s) {
      return Step(s) >= 3 && Plan(s, 1).find("dp=4,") != std::string::npos;
    });
    ProcessOutcome saved = Ctl({"checkpoint"}, 2);
    EXPECT_EQ(saved.exit_code, 0) << saved.output;
    const size_t at = saved.output.find("step ");
    if (saved.exit_code != 0 || at == std::string::npos) return 0;
    const int64_t stopped = std::atoll(saved.output.c_str() + at + 5);
    EXPECT_LT(stopped, steps) << "the job ended before the planned stop";
    WaitFor(
        1, "the job finished",
        [](const Json& s) { return s.contains("job") && s["job"]["desire"] == "finished"; },
        milliseconds(300'000));
    // Every worker has exited (the others' last counters come before they exit).
    const Deadline deadline = Deadline::AfterMs(30'000);
    while (true) {
      for (int id : {1, 2}) scrapes_[id] = Metrics(id);
      if (scrapes_[1].Get("ringtrain_workers_running") == 0 &&
          scrapes_[2].Get("ringtrain_workers_running") == 0)
        break;
      if (deadline.Expired()) {
        ADD_FAILURE() << "workers still run\n" << scrapes_[1].text << scrapes_[2].text;
        return 0;
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
    return stopped;
  }

  // `series` summed over the daemons' last scrapes.
  double Sum(const std::string& series) const {
    double total = 0;
    for (const auto& [id, scrape] : scrapes_) total += std::max(0.0, scrape.Get(series));
    return total;
  }

  // The bytes of the committed checkpoint of `step` in the job's ckpt.dir.
  uint64_t CheckpointBytes(int64_t step) const {
    return FolderBytes(dir_ / "ckpt" / ckpt::StepDir(step));
  }

  // The committed checkpoints in the job's ckpt.dir, newest first.
  std::vector<int64_t> Committed() const {
    auto storage = ckpt::OpenStorage((dir_ / "ckpt").string());
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (!storage.ok()) return {};
    return ckpt::ListCommitted(**storage).value();
  }

  // Both scrapes pass `promtool check metrics`.
  void Lint() {
    const std::string promtool = FindTool("promtool");
    if (promtool.empty()) {
      ADD_FAILURE() << "promtool not found (Debian package prometheus; `tools/run setup`)";
      return;
    }
    for (const auto& [id, scrape] : scrapes_) {
      ProcessOutcome linted = web::Promtool(promtool, scrape.text);
      EXPECT_TRUE(linted.exited && linted.exit_code == 0) << linted.Describe() << linted.output;
    }
  }

  std::map<int, Scrape> scrapes_;
};

const std::string kStore = "{tier=\"store\"}";
const std::string kMemory = "{tier=\"memory\"}";

// The workers' counters (docs/metrics.md "Checkpoints", "Chunk store and communication") of the
// DDP job saving every 80 of 400 steps: summed over the daemons, the saved bytes are those of the
// committed step folders, one save duration per checkpoint, the loaded bytes four times the
// folder resumed from (every DDP rank reads the whole state), the dp_shard group's bytes the
// all-reduce formula 2Φ(n−1)/n per step and rank, and every group's bytes sent equal the bytes
// received.
TEST_F(WorkerMetricsTest, CountsTheWorkersCheckpointsAndCommBytes) {
  constexpr int64_t kSteps = 400, kEvery = 80;
  const int64_t stopped = RunWithAPlannedStop(kSteps, "every = " + std::to_string(kEvery) + "\n");
  ASSERT_GT(stopped, 0);
  std::printf("%s", scrapes_[1].text.c_str());

  // Saves: the committed checkpoints' folders (every one kept), each timed once.
  const std::vector<int64_t> committed = Committed();
  std::vector<int64_t> expected;
  for (int64_t step = kEvery; step <= kSteps; step += kEvery) expected.push_back(step);
  if (stopped % kEvery != 0) expected.push_back(stopped);
  std::sort(expected.rbegin(), expected.rend());
  EXPECT_EQ(committed, expected);
  uint64_t on_disk = 0;
  for (int64_t step : committed) on_disk += CheckpointBytes(step);
  EXPECT_EQ(Sum("ringtrain_checkpoint_saved_bytes_total" + kStore), static_cast<double>(on_disk));
  EXPECT_EQ(Sum("ringtrain_checkpoint_save_duration_seconds_count" + kStore),
            static_cast<double>(committed.size()));
  EXPECT_GT(Sum("ringtrain_checkpoint_save_duration_seconds_sum" + kStore), 0);
  EXPECT_EQ(Sum("ringtrain_checkpoint_failed_saves_total" + kStore), 0);

  // The load of the resume: four ranks, each reading the whole checkpoint.
  EXPECT_EQ(Sum("ringtrain_checkpoint_loaded_bytes_total" + kStore),
            4.0 * static_cast<double>(CheckpointBytes(stopped)));
  EXPECT_EQ(Sum("ringtrain_checkpoint_load_duration_seconds_count" + kStore), 1);

  // Comm: DDP's all-reduce (reduce-scatter + all-gather) on dp_shard, 2Φ(n−1)/n fp32 elements
  // per step and rank, Φ the padded parameter count, every step trained once.
  ModelConfig model;
  model.n_layer = 2;
  model.n_embd = 64;
  model.n_head = 4;
  model.seq_len = 32;
  const uint64_t phi =
      static_cast<uint64_t>(parallel::BuildStageLayout(model, 1, 0, /*shards=*/4).total);
  const uint64_t per_step = 2 * (phi * 3 / 4) * 4;
  EXPECT_EQ(Sum("ringtrain_comm_sent_bytes_total{group=\"dp_shard\"}"),
            static_cast<double>(4 * kSteps * per_step));
  for (const char* group : {"world", "dp_shard"}) {
    const std::string labels = std::string("{group=\"") + group + "\"}";
    EXPECT_GT(Sum("ringtrain_comm_sent_bytes_total" + labels), 0) << group;
    EXPECT_EQ(Sum("ringtrain_comm_sent_bytes_total" + labels),
              Sum("ringtrain_comm_received_bytes_total" + labels))
        << group;
  }
  Lint();
}

// The memory tier's counters: the job snapshots every step (ckpt.memory_every = 1) and saves
// durably only where it stops and at its end, so it resumes from the memory snapshot of the
// step it stopped after. A snapshot holds what a durable checkpoint of the same state holds
// (uncompressed both): each of the 60 is as large as the final checkpoint's folder, the resume
// read it four times.
TEST_F(WorkerMetricsTest, CountsTheMemoryTiersSnapshotsAndItsLoad) {
  constexpr int64_t kSteps = 60;
  const int64_t stopped = RunWithAPlannedStop(kSteps, "every = 1000\nmemory_every = 1\n");
  ASSERT_GT(stopped, 0);
  EXPECT_EQ(Committed(), (std::vector<int64_t>{kSteps, stopped}));
  const double snapshot = static_cast<double>(CheckpointBytes(kSteps));
  EXPECT_EQ(Sum("ringtrain_checkpoint_save_duration_seconds_count" + kMemory), kSteps);
  EXPECT_EQ(Sum("ringtrain_checkpoint_saved_bytes_total" + kMemory), kSteps * snapshot);
  EXPECT_EQ(Sum("ringtrain_checkpoint_load_duration_seconds_count" + kMemory), 1);
  EXPECT_EQ(Sum("ringtrain_checkpoint_loaded_bytes_total" + kMemory), 4 * snapshot);
  EXPECT_EQ(Sum("ringtrain_checkpoint_loaded_bytes_total" + kStore), 0);
  EXPECT_EQ(Sum("ringtrain_checkpoint_save_duration_seconds_count" + kStore), 2);
  EXPECT_EQ(Sum("ringtrain_checkpoint_saved_bytes_total" + kStore),
            static_cast<double>(CheckpointBytes(kSteps) + CheckpointBytes(stopped)));
  Lint();
}

}  // namespace
}  // namespace rt::daemon
