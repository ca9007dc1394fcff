#include "daemon/web/status_page.h"

#include "daemon/web/status_assets.h"

namespace rt::web {
namespace {

// Only the daemon's own files and API: no CDN, no inline script.
constexpr char kContentSecurityPolicy[] =
    "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'";

std::string ContentType(std::string_view path) {
  auto ends = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

net::HttpHandler ServeAsset(const EmbeddedAsset& asset) {
  return [&asset](net::HttpRequest) -> boost::asio::awaitable<net::HttpResponse> {
    net::HttpResponse response =
        net::HttpResponse::Of(200, ContentType(asset.path), std::string(asset.content));
    response.headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
    response.headers.emplace_back("X-Content-Type-Options", "nosniff");
    co_return response;
  };
}

}  // namespace

void RegisterStatusPage(net::HttpServer& server, StatusProvider status) {
  for (const EmbeddedAsset& asset : StatusAssets()) {
    server.Route("GET", std::string(asset.path), ServeAsset(asset));
    if (asset.path == "/index.html") server.Route("GET", "/", ServeAsset(asset));
  }
  server.Route(
      "GET", "/api/status",
      [status = std::move(status)](net::HttpRequest) -> boost::asio::awaitable<net::HttpResponse> {
        net::HttpResponse response =
            net::HttpResponse::Of(200, "application/json", status().dump());
        response.headers.emplace_back("Cache-Control", "no-store");
        co_return response;
      });
}

}  // namespace rt::web
