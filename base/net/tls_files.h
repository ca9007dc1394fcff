// The PEM files of a TLS identity (base/net/tls.h), in a header of their own so that config
// structs and command lines can name them without pulling in Asio.
#pragma once

#include <string>
#include <vector>

namespace rt::net {

// The PEM files of a TLS identity ([tls] in the node config; --tls-cert/--tls-key/--tls-ca or
// --tls-dir on the tools). All three empty: TLS is off.
struct TlsFiles {
  // This end's certificate (PEM; may be followed by intermediate certificates).
  std::string cert_file;
  // Its private key (PEM, unencrypted); only its owner may read it (mode 0600).
  std::string key_file;
  // The cluster CA's certificate (PEM) that peers' certificates must chain to.
  std::string ca_file;
  // True when no file is named (TLS off).
  bool empty() const { return cert_file.empty() && key_file.empty() && ca_file.empty(); }
};

// The files `ringctl init-tls DIR` writes for `name` ("node-0", "client"): DIR/NAME.pem,
// DIR/NAME.key and DIR/ca.pem.
inline TlsFiles TlsFilesIn(const std::string& dir, const std::string& name) {
  return TlsFiles{dir + "/" + name + ".pem", dir + "/" + name + ".key", dir + "/ca.pem"};
}

// The command-line arguments that hand `files` to a child process ("--tls-cert", path, ...;
// paths only, never key bytes); none when `files` is empty.
inline std::vector<std::string> TlsArguments(const TlsFiles& files) {
  if (files.empty()) return {};
  return {"--tls-cert", files.cert_file, "--tls-key", files.key_file, "--tls-ca", files.ca_file};
}

}  // namespace rt::net
