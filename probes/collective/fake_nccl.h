// A fake NCCL and CUDA runtime behind the NcclApi seam, for tests: a process-wide state that the
// function pointers act on. Collectives are computed on host memory at ncclGroupEnd, so outputs
// verify; knobs make the driver missing, calls fail, init or a collective hang.
#pragma once

#include <cstdint>
#include <map>
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
  // internals
  struct Pending {
    bool all_reduce;
    const void* send;
    void* recv;
    size_t count;
  };
  std::vector<Pending> pending;
  std::map<void*, std::vector<uint8_t>> memory;
  std::map<uintptr_t, double> event_ms;
  double now_ms = 0;
  bool enqueued = false;
};

// Resets the state and returns it; Api() points at functions that use it. Not thread-safe.
FakeNcclState& ResetFakeNccl();
NcclApi FakeNcclApi();

}  // namespace fw::collective::testing
