// A fake NCCL and CUDA runtime behind the NcclApi seam, for tests: a process-wide state that the
// function pointers act on, under one lock (communicators of several agents may run on several
// threads). Communicators initialised with the same unique id form one group; a collective is
// computed on host memory once every rank of its group has enqueued it, and its stop event is not
// ready before, so outputs verify across agents. Knobs make the driver missing, calls fail, init or
// a collective hang.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "probes/collective/nccl_api.h"

namespace fw::collective::testing {

struct FakeNcclState {
  // knobs
  int version = 22809;
  int device_count_error = 0;
  int devices = 2;
  int malloc_error = 0;
  int collective_result = 0;  // returned by ncclAllReduce / ncclAllGather
  int async_error = 0;        // reported by ncclCommGetAsyncError once a collective was enqueued
  bool collective_hangs = false;
  bool init_hangs = false;
  double op_ms = 2.0;  // what the stop event reads after the start event
  // observations
  int comms_created = 0, comms_finalized = 0, comms_destroyed = 0, comms_aborted = 0;
  int mallocs = 0, frees = 0, streams = 0, streams_destroyed = 0, events = 0, events_destroyed = 0;
  int collectives = 0;
  int last_stream_priority = 0;
  int unique_ids = 0;  // ncclGetUniqueId calls (each id differs)
  // internals
  struct Part {
    bool all_reduce;
    const void* send;
    void* recv;
    size_t count;
  };
  struct Op {
    std::map<int, Part> parts;  // by rank
    bool done = false;
  };
  struct Comm {
    std::string id;
    int nranks = 0, rank = 0;
    uint64_t seq = 0;  // collectives enqueued
  };
  std::map<uintptr_t, Comm> comms;
  std::map<std::pair<std::string, uint64_t>, Op> ops;               // by (id, seq)
  std::map<uintptr_t, std::pair<std::string, uint64_t>> stream_op;  // the stream's last op
  std::map<uintptr_t, bool> stream_enqueued;                        // since its start event
  std::map<uintptr_t, uintptr_t> event_stream;
  std::map<void*, std::vector<uint8_t>> memory;
  std::map<uintptr_t, double> event_ms;
  double now_ms = 0;
  bool enqueued = false;
};

// Resets the state and returns it; Api() points at functions that use it. Not thread-safe.
FakeNcclState& ResetFakeNccl();
NcclApi FakeNcclApi();

}  // namespace fw::collective::testing
