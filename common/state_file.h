// Moving a corrupt state file aside, so that a daemon starts fresh and keeps the evidence.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/status.h"

namespace fw {

// A state file found corrupt and moved aside at start.
struct QuarantinedFile {
  std::string file;   // the base name, e.g. "findings.db" (a metric label: a fixed set)
  std::string from;   // the path it had
  std::string to;     // the path it has now ("" when the rename failed)
  std::string error;  // why it was judged corrupt
};

// Renames `path` to `<path>.corrupt-<UTC YYYYmmddTHHMMSSZ>` (with `-N` appended if that exists),
// and each of `path + suffix` for `companions` that exist (SQLite's "-wal", "-shm") beside it.
// Logs one error line naming the path, the error and where it went. Returns the record; `to` is
// empty, and the line says so, when the rename failed (the caller then must not reuse the file).
QuarantinedFile QuarantineFile(const std::string& path, const std::string& error, int64_t wall_ns,
                               std::initializer_list<const char*> companions = {});

}  // namespace fw
