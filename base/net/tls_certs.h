// Makes the PEM files of a cluster's TLS identities (`ringctl init-tls`, and the tests) with
// OpenSSL's libcrypto: a cluster CA and certificates it signs, all with EC P-256 keys.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace rt::net {

// What CreateTlsFiles did, file by file.
struct TlsFilesReport {
  std::vector<std::string> written;  // paths of the files it created
  std::vector<std::string> kept;     // paths that existed already and were left alone
};

// Makes, in `dir` (created with mode 0700 if missing), a cluster CA (ca.pem, ca.key) unless both
// files exist already (then it signs with that CA), and for each of `names` ("node-0",
// "client") a key and a certificate signed by the CA (NAME.key, NAME.pem; see TlsFilesIn in
// base/net/tls.h), valid for `days` days, usable as TLS server and client. Keys get mode 0600,
// certificates 0644. Never replaces a file: a name whose two files exist is kept as it is.
// Errors (naming the path): FailedPrecondition for half of a pair (a key without its
// certificate, or ca.pem without ca.key); InvalidArgument for a name that is not
// [A-Za-z0-9._-]+ or is "ca"; IoError when a file cannot be written; Internal when OpenSSL fails.
Result<TlsFilesReport> CreateTlsFiles(const std::string& dir, const std::vector<std::string>& names,
                                      int days);

}  // namespace rt::net
