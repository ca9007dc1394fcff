// daemon/web/node_metrics: the catalogue served on a real /metrics, scraped over HTTP and checked
// by Prometheus' own linter (`promtool check metrics`, Debian's prometheus package).
#include "daemon/web/node_metrics.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/net/http_client.h"
#include "base/subprocess.h"
#include "base/version.h"
#include "tests/base/net/loop.h"
#include "tests/base/tool_path.h"
#include "tests/daemon/web/promtool.h"

namespace rt::web {
namespace {

using net::HttpCall;
using net::HttpResponse;

TEST(NodeMetrics, ServedCataloguePassesPromtool) {
  net::Loop loop;
  MetricsRegistry registry;
  auto metrics = RegisterNodeMetrics(registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  metrics->job_step->Get().Set(120);
  metrics->job_loss->Get().Set(2.75);
  metrics->membership_members->Get().Set(4);
  metrics->recoveries->With({kCauseNodeLost}).Increment();
  metrics->recovery_seconds->Get().Observe(1.7);
  metrics->checkpoint_save_seconds->With({kTierMemory}).Observe(0.04);
  metrics->checkpoint_saved_bytes->With({kTierStore}).Increment(3 << 20);
  metrics->chunkstore_errors->With({"read"}).Increment();
  // Registering the catalogue twice is refused, naming the metric.
  Status again = RegisterNodeMetrics(registry).status();
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);

  auto server = net::HttpServer::Create(loop.io().get_executor(), {.name = "metrics"});
  ServeMetrics(*server, registry);
  ASSERT_TRUE(server->Start().ok());
  auto scrape = loop.Run<Result<HttpResponse>>([&]() {
    return HttpCall({.port = server->port(), .target = "/metrics"}, Deadline::AfterMs(10'000));
  });
  ASSERT_TRUE(scrape.ok()) << scrape.status().ToString();
  EXPECT_EQ(scrape->status, 200);
  EXPECT_EQ(scrape->content_type, kPrometheusContentType);
  const std::string& text = scrape->body;
  EXPECT_EQ(text, registry.Exposition());
  for (const char* line : {"ringtrain_job_step 120\n", "ringtrain_job_loss 2.75\n",
                           "ringtrain_recoveries_total{cause=\"node_lost\"} 1\n",
                           "ringtrain_recovery_duration_seconds_count 1\n",
                           "ringtrain_checkpoint_saved_bytes_total{tier=\"store\"} 3145728\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  EXPECT_NE(
      text.find(std::string("ringtrain_build_info{version=\"") + kRingtrainVersion + "\"} 1\n"),
      std::string::npos);
  server->Abort();

  const std::string promtool = FindTool("promtool");
  if (promtool.empty())
    GTEST_SKIP() << "promtool not found (Debian package prometheus; `tools/run setup` installs "
                    "it): the scrape was not linted";
  ProcessOutcome linted = Promtool(promtool, text);
  EXPECT_TRUE(linted.exited && linted.exit_code == 0) << linted.Describe() << "\n" << linted.output;
  // The linter does catch a broken exposition (so the check above can fail).
  ProcessOutcome broken = Promtool(promtool, "# HELP bad A counter.\n# TYPE bad counter\nbad 1\n");
  EXPECT_FALSE(broken.exited && broken.exit_code == 0) << broken.output;
}

}  // namespace
}  // namespace rt::web
