// The status page every daemon serves (issue 14): GET / is a plain HTML/JS page, embedded in the
// binary, that polls GET /api/status (docs/formats/status_api.md) and draws the ring with each
// node's state, the job's layout, a live loss and tokens/s chart, recent recoveries and
// checkpoints. Nothing is loaded from outside the daemon (a Content-Security-Policy says so).
#pragma once

#include <functional>

#include <nlohmann/json.hpp>

#include "base/net/http_server.h"

namespace rt::web {

// Builds the /api/status object. Called on the HTTP server's executor for every request, so it
// must be quick and must not block (copy a snapshot under a mutex). An exception it throws
// becomes a 500 answer.
using StatusProvider = std::function<nlohmann::json()>;

// Registers GET /, /index.html, /status.js, /status.css and /api/status on `server` (call before
// server.Start()). `status` is kept and called per request.
void RegisterStatusPage(net::HttpServer& server, StatusProvider status);

}  // namespace rt::web
