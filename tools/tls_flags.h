// The TLS options every ringtrain tool takes (CLI11): --tls-dir DIR [--tls-name NAME], or the
// three files one by one (--tls-cert, --tls-key, --tls-ca), which override the folder's.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/net/tls_files.h"

namespace rt::tools {

// The values of the TLS options of one command line.
struct TlsFlags {
  std::string dir;              // a folder made by `ringctl init-tls`; "" = none
  std::string name = "client";  // whose files in `dir` (NAME.pem, NAME.key)
  net::TlsFiles files;          // files named one by one

  // The files to use: those of `dir`/`name`, each overridden by one named explicitly; empty when
  // no option was given (TLS off).
  net::TlsFiles Files() const {
    net::TlsFiles out = dir.empty() ? net::TlsFiles{} : net::TlsFilesIn(dir, name);
    if (!files.cert_file.empty()) out.cert_file = files.cert_file;
    if (!files.key_file.empty()) out.key_file = files.key_file;
    if (!files.ca_file.empty()) out.ca_file = files.ca_file;
    return out;
  }
};

// Adds the TLS options to `app`, storing into `flags` (which must outlive parsing). `name` is
// the default identity in --tls-dir ("client" for the tools that call a cluster).
inline void AddTlsFlags(CLI::App* app, TlsFlags* flags, const std::string& name = "client") {
  flags->name = name;
  app->add_option("--tls-dir", flags->dir,
                  "mutual TLS with the files of `ringctl init-tls`: DIR/ca.pem and the identity "
                  "of --tls-name (needs the cluster secret too)");
  app->add_option("--tls-name", flags->name,
                  "whose certificate in --tls-dir (default " + name + ": NAME.pem, NAME.key)");
  app->add_option("--tls-cert", flags->files.cert_file, "TLS certificate (PEM)");
  app->add_option("--tls-key", flags->files.key_file, "TLS private key (PEM, mode 0600)");
  app->add_option("--tls-ca", flags->files.ca_file, "the cluster CA's certificate (PEM)");
}

}  // namespace rt::tools
