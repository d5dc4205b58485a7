// Shared start-up plumbing for the daemons' main(): config file, signals, port file.
#pragma once

#include <csignal>
#include <functional>
#include <string>

#include "common/config.h"

namespace fw {

// Loads the file named by --config (if any) into `binding`. On failure prints
// "<program>: <reason>" to stderr and returns false; callers exit 3 (unknown/error).
bool LoadConfigFromArgs(const ConfigBinding& binding, int argc, char** argv,
                        const char* program);

// A CLI11 option callback that parses a duration ("1s", "250ms") into `*out`; bad input throws
// CLI::ValidationError, which CLI11 reports as a usage error.
std::function<void(const std::string&)> DurationSetter(Seconds* out);

// Blocks SIGINT and SIGTERM in this thread (and every thread started afterwards) and ignores
// SIGPIPE. Call before starting threads; then WaitForTerminationSignal() on the main thread.
void BlockTerminationSignals();
int WaitForTerminationSignal();

// Writes `json` to `path` atomically (temp file + rename). False on any I/O error.
bool WritePortFile(const std::string& path, const std::string& json);

}  // namespace fw
