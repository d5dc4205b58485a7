// YAML config loading with clear, key-naming errors.
#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fw {

StatusOr<double> ParseDurationSeconds(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("empty duration");
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return Status::InvalidArgument("'" + text + "' is not a duration (try 1s, 250ms, 2m)");
  }
  std::string unit = text.substr(pos);
  double scale = 1;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "us") {
    scale = 1e-6;
  } else if (unit == "m") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else {
    return Status::InvalidArgument("'" + text + "' has an unknown unit '" + unit + "'");
  }
  if (!std::isfinite(v) || v < 0) {
    return Status::InvalidArgument("'" + text + "' must be a finite, non-negative duration");
  }
  return v * scale;
}

Status ConfigBinding::LoadFile(const std::string& path) const {
  std::ifstream in(path);
  if (!in) {
    return Status::NotFound("config file " + path + ": cannot read: " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadString(ss.str(), path);
}

Status ConfigBinding::LoadString(const std::string& yaml, const std::string& source) const {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config file " + source + ": invalid YAML at line " +
                                   std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return Status::Ok();  // an empty file configures nothing
  if (!root.IsMap()) {
    return Status::InvalidArgument("config file " + source + ": top level must be a mapping");
  }
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument("config file " + source + ": a key is not a string");
    }
    std::string norm = key;
    for (char& c : norm) c = c == '_' ? '-' : c;
    auto it = fields_.find(norm);
    std::string where = "config file " + source + ": key '" + key + "' (line " +
                        std::to_string(kv.first.Mark().line + 1) + ")";
    if (it == fields_.end()) return Status::InvalidArgument(where + ": unknown key");
    const YAML::Node& v = kv.second;
    try {
      Status st = std::visit(
          [&](auto* field) -> Status {
            using T = std::remove_pointer_t<decltype(field)>;
            if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              if (!v.IsSequence()) return Status::InvalidArgument(where + ": expected a list");
              field->clear();
              for (const auto& e : v) field->push_back(e.as<std::string>());
            } else {
              if (!v.IsScalar()) return Status::InvalidArgument(where + ": expected a scalar");
              if constexpr (std::is_same_v<T, Seconds>) {
                auto d = ParseDurationSeconds(v.as<std::string>());
                if (!d.ok()) return Status::InvalidArgument(where + ": " + d.status().message());
                field->value = *d;
              } else {
                *field = v.as<T>();
              }
            }
            return Status::Ok();
          },
          it->second);
      if (!st.ok()) return st;
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument(where + ": wrong type for this key");
    }
  }
  return Status::Ok();
}

std::string FindConfigFlag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  return "";
}

}  // namespace fw
