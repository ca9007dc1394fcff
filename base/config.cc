#include "base/config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace rt {

struct ConfigFile::Impl {
  std::string source;
  toml::table table;
};

ConfigFile::ConfigFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConfigFile::ConfigFile(ConfigFile&&) noexcept = default;
ConfigFile& ConfigFile::operator=(ConfigFile&&) noexcept = default;
ConfigFile::~ConfigFile() = default;

const std::string& ConfigFile::source() const { return impl_->source; }

namespace {

// `text` as a TOML basic string: quoted, with quotes, backslashes and control characters escaped.
std::string TomlQuoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned char>(c));
          out += escape;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The shortest text that reads back as the same double (TOML also spells inf and nan so).
std::string TomlDouble(double value) {
  char text[32];
  auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

std::string LineOf(const toml::node& node) {
  const auto& src = node.source();
  return src.begin.line > 0 ? ":" + std::to_string(src.begin.line) : "";
}

std::string TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date/time";
  }
}

}  // namespace

Result<ConfigFile> ConfigFile::Parse(std::string_view text, std::string source) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::move(source);
  try {
    impl->table = toml::parse(text, std::string_view(impl->source));
  } catch (const toml::parse_error& e) {
    return InvalidArgument(impl->source + ":" + std::to_string(e.source().begin.line) + ":" +
                           std::to_string(e.source().begin.column) + ": " +
                           std::string(e.description()));
  }
  return ConfigFile(std::move(impl));
}

Result<ConfigFile> ConfigFile::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("config file '" + path + "' cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Parse(buffer.str(), path);
}

ConfigFile ConfigFile::Empty(std::string source) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::move(source);
  return ConfigFile(std::move(impl));
}

Status ConfigFile::ApplyOverride(std::string_view assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return InvalidArgument("override '" + std::string(assignment) + "': expected key=value");
  std::string key(assignment.substr(0, eq));
  std::string value(assignment.substr(eq + 1));
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};  // a bare word: take it as a string
  }
  // Walk (and create) the tables on the dotted path.
  toml::table* table = &impl_->table;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part =
        key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) return InvalidArgument("override '" + key + "': empty key part");
    if (dot == std::string::npos) {
      table->insert_or_assign(part, *parsed.get("v"));
      return Status();
    }
    toml::node* next = table->get(part);
    if (next == nullptr) {
      table->insert(part, toml::table{});
      next = table->get(part);
    }
    if (!next->is_table())
      return InvalidArgument("override '" + key + "': '" + part + "' is not a table");
    table = next->as_table();
    start = dot + 1;
  }
}

enum class FieldKind { kInt64, kInt32, kDouble, kBool, kString, kEnum };

struct ConfigSchema::Field {
  std::string key;
  FieldKind kind;
  void* field;
  double min = 0, max = 0;
  std::vector<std::string> allowed;
  std::string doc;
  std::string default_text;
  bool required = false;

  std::string ValueText() const {
    switch (kind) {
      case FieldKind::kInt64:
        return std::to_string(*static_cast<int64_t*>(field));
      case FieldKind::kInt32:
        return std::to_string(*static_cast<int*>(field));
      case FieldKind::kDouble:
        return TomlDouble(*static_cast<double*>(field));
      case FieldKind::kBool:
        return *static_cast<bool*>(field) ? "true" : "false";
      case FieldKind::kString:
      case FieldKind::kEnum:
        return TomlQuoted(*static_cast<std::string*>(field));
    }
    return "";
  }

  Status ReadFrom(const toml::node& node, const std::string& where) const {
    auto wrong = [&](std::string_view expected) {
      return InvalidArgument(where + ": key '" + key + "': expected " + std::string(expected) +
                             ", got " + TypeName(node));
    };
    auto range = [&](const std::string& value) {
      std::ostringstream out;
      out << where << ": key '" << key << "' = " << value << " is out of range [" << min << ", "
          << max << "]";
      return InvalidArgument(out.str());
    };
    switch (kind) {
      case FieldKind::kInt64:
      case FieldKind::kInt32: {
        if (!node.is_integer()) return wrong("an integer");
        int64_t v = node.as_integer()->get();
        if (static_cast<double>(v) < min || static_cast<double>(v) > max)
          return range(std::to_string(v));
        if (kind == FieldKind::kInt64)
          *static_cast<int64_t*>(field) = v;
        else
          *static_cast<int*>(field) = static_cast<int>(v);
        return Status();
      }
      case FieldKind::kDouble: {
        double v;
        if (node.is_floating_point())
          v = node.as_floating_point()->get();
        else if (node.is_integer())
          v = static_cast<double>(node.as_integer()->get());
        else
          return wrong("a number");
        if (!std::isfinite(v) || v < min || v > max) {
          std::ostringstream text;
          text << v;
          return range(text.str());
        }
        *static_cast<double*>(field) = v;
        return Status();
      }
      case FieldKind::kBool:
        if (!node.is_boolean()) return wrong("a boolean");
        *static_cast<bool*>(field) = node.as_boolean()->get();
        return Status();
      case FieldKind::kString:
        if (!node.is_string()) return wrong("a string");
        *static_cast<std::string*>(field) = node.as_string()->get();
        return Status();
      case FieldKind::kEnum: {
        if (!node.is_string()) return wrong("a string");
        const std::string& v = node.as_string()->get();
        for (const auto& a : allowed) {
          if (a == v) {
            *static_cast<std::string*>(field) = v;
            return Status();
          }
        }
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return InvalidArgument(where + ": key '" + key + "' = \"" + v +
                               "\" is not one of: " + list);
      }
    }
    return Internal("unknown field kind");
  }
};

ConfigSchema::ConfigSchema() = default;
ConfigSchema::~ConfigSchema() = default;

namespace {
template <typename F>
std::unique_ptr<F> MakeField(std::string key, FieldKind kind, void* field, std::string doc) {
  auto f = std::make_unique<F>();
  f->key = std::move(key);
  f->kind = kind;
  f->field = field;
  f->doc = std::move(doc);
  return f;
}
}  // namespace

void ConfigSchema::Int(std::string key, int64_t* field, int64_t min, int64_t max, std::string doc) {
  auto f = MakeField<Field>(std::move(key), FieldKind::kInt64, field, std::move(doc));
  f->min = static_cast<double>(min);
  f->max = static_cast<double>(max);
  f->default_text = f->ValueText();
  fields_.push_back(std::move(f));
}

void ConfigSchema::Int(std::string key, int* field, int64_t min, int64_t max, std::string doc) {
  auto f = MakeField<Field>(std::move(key), FieldKind::kInt32, field, std::move(doc));
  f->min = static_cast<double>(min);
  f->max = static_cast<double>(max);
  f->default_text = f->ValueText();
  fields_.push_back(std::move(f));
}

void ConfigSchema::Double(std::string key, double* field, double min, double max, std::string doc) {
  auto f = MakeField<Field>(std::move(key), FieldKind::kDouble, field, std::move(doc));
  f->min = min;
  f->max = max;
  f->default_text = f->ValueText();
  fields_.push_back(std::move(f));
}

void ConfigSchema::Bool(std::string key, bool* field, std::string doc) {
  auto f = MakeField<Field>(std::move(key), FieldKind::kBool, field, std::move(doc));
  f->default_text = f->ValueText();
  fields_.push_back(std::move(f));
}

void ConfigSchema::String(std::string key, std::string* field, std::string doc) {
  auto f = MakeField<Field>(std::move(key), FieldKind::kString, field, std::move(doc));
  f->default_text = f->ValueText();
  fields_.push_back(std::move(f));
}

void ConfigSchema::Enum(std::string key, std::string* field, std::vector<std::string> allowed,
                        std::string doc) {
  auto f = MakeField<Field>(std::move(key), FieldKind::kEnum, field, std::move(doc));
  f->allowed = std::move(allowed);
  f->default_text = f->ValueText();
  fields_.push_back(std::move(f));
}

void ConfigSchema::Require(std::string_view key) {
  for (auto& f : fields_)
    if (f->key == key) f->required = true;
}

namespace {
// Collects "a.b.c" for every leaf (non-table) node, with the node.
void CollectLeaves(const toml::table& table, const std::string& prefix,
                   std::vector<std::pair<std::string, const toml::node*>>* out) {
  for (const auto& [k, v] : table) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (v.is_table())
      CollectLeaves(*v.as_table(), key, out);
    else
      out->emplace_back(key, &v);
  }
}
}  // namespace

Status ConfigSchema::Read(const ConfigFile& file) const {
  const std::string& source = file.impl_->source;
  std::vector<std::pair<std::string, const toml::node*>> leaves;
  CollectLeaves(file.impl_->table, "", &leaves);
  std::set<std::string> known;
  for (const auto& f : fields_) known.insert(f->key);
  for (const auto& [key, node] : leaves) {
    if (!known.count(key))
      return InvalidArgument(source + LineOf(*node) + ": unknown key '" + key + "'");
  }
  for (const auto& f : fields_) {
    const toml::node* node = file.impl_->table.at_path(f->key).node();
    if (node == nullptr) {
      if (f->required) return InvalidArgument(source + ": missing required key '" + f->key + "'");
      continue;
    }
    RETURN_IF_ERROR(f->ReadFrom(*node, source + LineOf(*node)));
  }
  return Status();
}

std::string ConfigSchema::Describe() const {
  std::string out;
  for (const auto& f : fields_) {
    out += f->key + " = " + (f->required ? std::string("<required>") : f->default_text);
    if (!f->allowed.empty()) {
      out += "  # one of:";
      for (const auto& a : f->allowed) out += " " + a;
      out += ";";
    } else {
      out += "  #";
    }
    out += " " + f->doc + "\n";
  }
  return out;
}

std::string ConfigSchema::Effective() const {
  std::string out;
  for (const auto& f : fields_) out += f->key + " = " + f->ValueText() + "\n";
  return out;
}

}  // namespace rt
