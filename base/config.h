// Configuration files (TOML) and the schemas that read them into config structs.
//
// Each component has a config struct whose fields carry their defaults (STYLE.md rule 12) and a
// function that binds those fields to keys of a ConfigSchema. A schema reads a ConfigFile and
// reports errors that name the file, the line, the key and what was wrong: a missing required
// key, a wrong type, a value out of range, or a key no component knows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rt {

// A parsed TOML document plus command-line overrides. Movable, not copyable, thread-compatible.
class ConfigFile {
 public:
  // Reads and parses `path`. Errors: NotFound if missing, InvalidArgument with the line and
  // column for a syntax error.
  static Result<ConfigFile> Load(const std::string& path);
  // Parses `text`; `source` names it in errors (e.g. "<inline>").
  static Result<ConfigFile> Parse(std::string_view text, std::string source);
  // An empty document (every key takes its default).
  static ConfigFile Empty(std::string source);

  ConfigFile(ConfigFile&&) noexcept;
  ConfigFile& operator=(ConfigFile&&) noexcept;
  ~ConfigFile();

  // Applies "dotted.key=value" on top of the file. The value is read as a TOML value
  // (42, 1e-3, true, "text"); anything that does not parse as one is taken as a string.
  Status ApplyOverride(std::string_view assignment);

  // The name used in error messages (the path, or the source given to Parse).
  const std::string& source() const;

 private:
  friend class ConfigSchema;
  struct Impl;
  explicit ConfigFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The keys a program understands, each bound to a field of a config struct. The field's value
// when bound is its default. Not thread-safe; the bound fields must outlive the schema.
class ConfigSchema {
 public:
  ConfigSchema();
  ~ConfigSchema();
  ConfigSchema(const ConfigSchema&) = delete;
  ConfigSchema& operator=(const ConfigSchema&) = delete;

  // Binds "section.key" to an integer field with an inclusive range.
  void Int(std::string key, int64_t* field, int64_t min, int64_t max, std::string doc);
  // Binds an int field (range as above).
  void Int(std::string key, int* field, int64_t min, int64_t max, std::string doc);
  // Binds a floating-point field with an inclusive range; integers in the file are accepted.
  void Double(std::string key, double* field, double min, double max, std::string doc);
  void Bool(std::string key, bool* field, std::string doc);
  void String(std::string key, std::string* field, std::string doc);
  // Binds a string field that must be one of `allowed`.
  void Enum(std::string key, std::string* field, std::vector<std::string> allowed, std::string doc);
  // Marks an already bound key as required (it has no default).
  void Require(std::string_view key);

  // Reads every bound key present in `file` into its field. Errors (InvalidArgument) name the
  // source, the line, the key and the problem; an unknown key in the file is an error. Fields of
  // keys read before an error keep their new values.
  Status Read(const ConfigFile& file) const;

  // One line per key: "key = default  # doc", in binding order, for --help and docs.
  std::string Describe() const;

  // Every bound key with its current value formatted as TOML, for logging the effective config.
  std::string Effective() const;

 private:
  struct Field;
  std::vector<std::unique_ptr<Field>> fields_;
};

}  // namespace rt
