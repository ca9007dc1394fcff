// The daemon's RPC methods (docs/formats/control_api.md): the control API that `ringctl` calls on
// any daemon, the fan-out between daemons behind `ringctl status`, and the worker API its own
// workers call over loopback. Every request and response payload is one JSON object on the
// base/net RPC convention; errors travel as RPC error responses (a Status).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "base/net/rpc.h"
#include "base/status.h"

namespace rt::daemon {

using Json = nlohmann::json;

// Frame types (0x0E00..0x0E1F; membership uses 0x0D00..0x0D0F on the same port).
inline constexpr uint16_t kCtlStatus = 0x0E00;       // {} → the cluster's status (fan-out)
inline constexpr uint16_t kCtlLocal = 0x0E01;        // {} → this daemon's own report
inline constexpr uint16_t kCtlSubmit = 0x0E02;       // {text, source} → {job_id}
inline constexpr uint16_t kCtlStop = 0x0E03;         // {} → {}
inline constexpr uint16_t kCtlScale = 0x0E04;        // {nodes} → {}
inline constexpr uint16_t kCtlDrain = 0x0E05;        // {node, undrain} → {}
inline constexpr uint16_t kCtlCheckpoint = 0x0E06;   // {} → {step, uri}
inline constexpr uint16_t kCtlCheckpoints = 0x0E07;  // {} → {job, uri, checkpoints: [...]}
inline constexpr uint16_t kWorkerWatch = 0x0E10;     // {generation, rank, pid} → {} when told
// {generation, rank, step, loss, ..., stopped_at? | finished_at?} → {stop_at?}
inline constexpr uint16_t kWorkerReport = 0x0E11;
// {generation, rank} → {}: the worker's process runs (sent every kWorkerHeartbeatPeriod).
inline constexpr uint16_t kWorkerHeartbeat = 0x0E12;

// How often a worker tells its daemon it runs (from its link thread, whatever training does).
inline constexpr auto kWorkerHeartbeatPeriod = std::chrono::milliseconds(200);

// Largest JSON payload a request or response may have.
inline constexpr size_t kMaxControlPayload = 4 << 20;

// The payload bytes of `value`.
std::vector<std::byte> EncodeJson(const Json& value);

// Parses a payload that must be a JSON object. Errors: InvalidArgument naming `what` when it is
// larger than kMaxControlPayload, not JSON or not an object.
Result<Json> DecodeJsonObject(std::span<const std::byte> payload, std::string_view what);

// Reads an integer field in [min, max] of a decoded object, or `fallback` when it is absent.
// Errors: InvalidArgument naming `what` and the key (wrong type, out of range).
Result<int64_t> IntField(const Json& object, const char* key, int64_t min, int64_t max,
                         std::string_view what, std::optional<int64_t> fallback = std::nullopt);
// Reads a string field, or `fallback` when absent. Errors as IntField.
Result<std::string> StringField(const Json& object, const char* key, std::string_view what,
                                std::optional<std::string> fallback = std::nullopt);

// Calls `type` with `request` on a connected client and decodes the response object.
boost::asio::awaitable<Result<Json>> CallJson(net::RpcClient& client, uint16_t type,
                                              const Json& request, Deadline deadline);

// Connects to `address` ("host:port"; with `secret` when set), calls once and closes. Errors:
// those of connecting (naming the address) and of the call.
boost::asio::awaitable<Result<Json>> CallJsonOnce(std::string address,
                                                  std::shared_ptr<const net::ClusterSecret> secret,
                                                  uint16_t type, Json request, Deadline deadline);

// The same from a thread outside any io_context (ringctl): runs its own io_context until done.
Result<Json> CallJsonBlocking(const std::string& address,
                              std::shared_ptr<const net::ClusterSecret> secret, uint16_t type,
                              const Json& request, Deadline deadline);

}  // namespace rt::daemon
