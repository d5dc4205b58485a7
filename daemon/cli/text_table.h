// Left-aligned text columns sized to their widest cell, for the CLI's tables.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fw::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t body_rows() const { return rows_.size() - 1; }
  // Writes every row; columns are separated by two spaces, the last column is not padded.
  void Print(std::ostream& out, const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fw::cli
