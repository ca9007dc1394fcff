#include "bench/chaos/store_ckpt.h"

#include "base/log.h"
#include "base/net/auth.h"
#include "ckpt/catalog.h"
#include "ckpt/storage.h"

namespace rt::chaos {

std::string StoreUri(LocalCluster& cluster, const std::string& path) {
  return StoreUris(cluster, path).front();
}

std::vector<std::string> StoreUris(LocalCluster& cluster, const std::string& path) {
  std::vector<int> live = cluster.Responsive();
  if (live.empty()) live = {1};
  std::vector<std::string> uris;
  for (int id : live) uris.push_back("ringfs://" + cluster.StoreAddress(id) + "/" + path);
  return uris;
}

std::vector<int64_t> CommittedStepsInStore(LocalCluster& cluster, const std::string& path) {
  ckpt::StorageOptions options;
  if (const std::string file = cluster.SecretFile(); !file.empty()) {
    Result<std::shared_ptr<const net::ClusterSecret>> secret = net::ClusterSecret::Load(file);
    if (!secret.ok()) {
      LOG_WARN("chaos: {}", secret.status().ToString());
      return {};
    }
    options.secret = *secret;
  }
  for (int id : cluster.Responsive()) {
    const std::string uri = "ringfs://" + cluster.StoreAddress(id) + "/" + path;
    Result<std::shared_ptr<ckpt::Storage>> storage = ckpt::OpenStorage(uri, options);
    if (!storage.ok()) continue;
    Result<std::optional<std::vector<int64_t>>> latest = ckpt::ReadLatest(**storage);
    if (!latest.ok()) continue;
    return latest->value_or(std::vector<int64_t>{});
  }
  return {};
}

std::vector<std::string> RingckptSecretOptions(const LocalCluster& cluster) {
  const std::string file = cluster.SecretFile();
  if (file.empty()) return {};
  return {"--secret-file", file};
}

}  // namespace rt::chaos
