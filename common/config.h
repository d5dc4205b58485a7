// YAML configuration files whose keys mirror command-line flags; flags override the file.
//
// Usage: bind each key to a field, load the file (if any) into the fields, then let CLI11 parse the
// command line into the same fields, so that only flags actually given override the file.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"

namespace fw {

// Durations are written as "1s", "250ms", "2m" or a bare number of seconds.
struct Seconds {
  double value = 0;
};

using ConfigField =
    std::variant<std::string*, int*, double*, bool*, Seconds*, std::vector<std::string>*>;

class ConfigBinding {
 public:
  // `key` is the flag name without dashes, e.g. "http-listen". Underscores in the file are accepted
  // as dashes ("http_listen").
  void Bind(const std::string& key, ConfigField field) { fields_[key] = field; }

  // Reads `path` and stores every key into its bound field. Unknown keys, wrong types and unreadable
  // files are errors naming the file and the key.
  Status LoadFile(const std::string& path) const;
  // Same, from YAML text; `source` names it in messages.
  Status LoadString(const std::string& yaml, const std::string& source) const;

 private:
  std::map<std::string, ConfigField> fields_;
};

// Parses "1s", "250ms", "2m", "1h", "1.5" (seconds). Fails on garbage, negatives and NaN.
StatusOr<double> ParseDurationSeconds(const std::string& text);

// Finds "--config FILE" or "--config=FILE" in argv; empty when absent.
std::string FindConfigFlag(int argc, char** argv);

}  // namespace fw
