#include "base/net/tls_certs.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <memory>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "base/file.h"
#include "base/net/tls.h"

namespace rt::net {
namespace {

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;
using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;

Status OpenSslFailure(std::string_view what) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  const char* reason = e ? ERR_reason_error_string(e) : nullptr;
  return Internal("TLS files: " + std::string(what) +
                  " failed: " + (reason ? reason : "unknown OpenSSL error"));
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

Result<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!key) return OpenSslFailure("generating an EC P-256 key");
  return key;
}

Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
  if (ext == nullptr) return OpenSslFailure(std::string("certificate extension ") + value);
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslFailure("adding a certificate extension");
  return Status();
}

// A certificate for `key` named `common_name`, signed by `issuer`/`issuer_key` (both null: self-
// signed, a CA).
Result<CertPtr> NewCertificate(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                               EVP_PKEY* issuer_key, int days) {
  const bool ca = issuer == nullptr;
  CertPtr cert(X509_new(), X509_free);
  if (!cert || X509_set_version(cert.get(), 2) != 1) return OpenSslFailure("X509_new");
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(BN_new(), BN_free);
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr)
    return OpenSslFailure("making a serial number");
  // Valid from an hour ago (clocks of a cluster differ a little).
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400);
  X509_NAME* name = X509_get_subject_name(cert.get());
  const auto* org = reinterpret_cast<const unsigned char*>("ringtrain");
  const auto* cn = reinterpret_cast<const unsigned char*>(common_name.c_str());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, org, -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, cn, -1, -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), ca ? name : X509_get_subject_name(issuer)) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1)
    return OpenSslFailure("naming the certificate");
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca ? cert.get() : issuer, cert.get(), nullptr, nullptr, 0);
  if (ca) {
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE"));
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  } else {
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature"));
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage, "serverAuth,clientAuth"));
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid"));
  }
  if (X509_sign(cert.get(), ca ? key : issuer_key, EVP_sha256()) == 0)
    return OpenSslFailure("signing the certificate");
  return cert;
}

// Writes a key (0600) and its certificate (0644).
Status WritePair(const std::string& key_path, EVP_PKEY* key, const std::string& cert_path,
                 X509* cert, TlsFilesReport* report) {
  BioPtr key_pem(BIO_new(BIO_s_mem()), BIO_free);
  BioPtr cert_pem(BIO_new(BIO_s_mem()), BIO_free);
  if (!key_pem || !cert_pem ||
      PEM_write_bio_PrivateKey(key_pem.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_X509(cert_pem.get(), cert) != 1)
    return OpenSslFailure("encoding PEM");
  RETURN_IF_ERROR(CreateNewFile(key_path, BioText(key_pem.get()), 0600));
  report->written.push_back(key_path);
  RETURN_IF_ERROR(CreateNewFile(cert_path, BioText(cert_pem.get()), 0644));
  report->written.push_back(cert_path);
  return Status();
}

Result<CertPtr> ReadCertificate(const std::string& path) {
  BioPtr bio(BIO_new_file(path.c_str(), "r"), BIO_free);
  CertPtr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr, X509_free);
  if (!cert) {
    ERR_clear_error();
    return InvalidArgument("TLS files: cannot read the PEM certificate '" + path + "'");
  }
  return cert;
}

Result<KeyPtr> ReadKey(const std::string& path) {
  BioPtr bio(BIO_new_file(path.c_str(), "r"), BIO_free);
  KeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr,
             EVP_PKEY_free);
  if (!key) {
    ERR_clear_error();
    return InvalidArgument("TLS files: cannot read the PEM private key '" + path + "'");
  }
  return key;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name == "ca") return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

}  // namespace

Result<TlsFilesReport> CreateTlsFiles(const std::string& dir, const std::vector<std::string>& names,
                                      int days) {
  for (const std::string& name : names)
    if (!ValidName(name))
      return InvalidArgument("TLS files: bad name '" + name + "' (letters, digits, . _ -; not ca)");
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus(errno, "create the TLS folder '" + dir + "'");
  TlsFilesReport report;
  const TlsFiles ca_files = TlsFilesIn(dir, "ca");
  const std::string ca_key_path = dir + "/ca.key";
  CertPtr ca(nullptr, X509_free);
  KeyPtr ca_key(nullptr, EVP_PKEY_free);
  if (Exists(ca_files.ca_file) != Exists(ca_key_path))
    return FailedPrecondition("TLS files: '" +
                              (Exists(ca_key_path) ? ca_key_path : ca_files.ca_file) +
                              "' exists without its other half (ca.pem and ca.key go together)");
  if (Exists(ca_files.ca_file)) {
    ASSIGN_OR_RETURN(ca, ReadCertificate(ca_files.ca_file));
    ASSIGN_OR_RETURN(ca_key, ReadKey(ca_key_path));
    report.kept.push_back(ca_files.ca_file);
    report.kept.push_back(ca_key_path);
  } else {
    ASSIGN_OR_RETURN(ca_key, NewKey());
    ASSIGN_OR_RETURN(ca,
                     NewCertificate(ca_key.get(), "ringtrain cluster CA", nullptr, nullptr, days));
    RETURN_IF_ERROR(WritePair(ca_key_path, ca_key.get(), ca_files.ca_file, ca.get(), &report));
  }
  for (const std::string& name : names) {
    const TlsFiles files = TlsFilesIn(dir, name);
    const bool has_cert = Exists(files.cert_file), has_key = Exists(files.key_file);
    if (has_cert && has_key) {
      report.kept.push_back(files.cert_file);
      report.kept.push_back(files.key_file);
      continue;
    }
    if (has_cert || has_key)
      return FailedPrecondition("TLS files: '" + (has_key ? files.key_file : files.cert_file) +
                                "' exists without its other half; remove it or pick another name");
    ASSIGN_OR_RETURN(KeyPtr key, NewKey());
    ASSIGN_OR_RETURN(CertPtr cert,
                     NewCertificate(key.get(), "ringtrain " + name, ca.get(), ca_key.get(), days));
    RETURN_IF_ERROR(WritePair(files.key_file, key.get(), files.cert_file, cert.get(), &report));
  }
  return report;
}

}  // namespace rt::net
