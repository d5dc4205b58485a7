// libgrpc's own threads in the agent: its two timer threads (`grpc_global_timer`) and its resolver
// executor (`resolver-executor`) stopped, the timers driven from the agent's EventEngine thread
// (`fw-grpc-ee`, daemon/agent/event_engine.h) instead. Process-wide; for the agent's main() only.
//
// Contract (gRPC 1.51, Debian's libgrpc.so.29; grpc_threads.cc says why each step is safe):
// - StopGrpcOwnThreads() is called in main() after UseOneThreadEventEngine() and before any other
//   gRPC object exists. It takes a gRPC library reference for the rest of the process (so that
//   gRPC never shuts down and restarts its threads between two sessions) and, unless the
//   environment says FW_GRPC_OWN_THREADS=1 or the library lacks the internal switches, stops
//   those threads. It returns true when it did: from then on TickGrpcTimers() must run at least
//   every kGrpcTimerTickPeriod, or keepalive pings, connect timeouts and call deadlines never fire.
// - TickGrpcTimers() runs every gRPC timer that is due, on the calling thread (which must not
//   hold a lock any gRPC callback takes). A timer fires up to one period late.
// - The default executor (`default-executor`) keeps its thread: see grpc_threads.cc.
#pragma once

#include <chrono>

namespace fw::agent {

inline constexpr std::chrono::milliseconds kGrpcTimerTickPeriod{1000};

bool StopGrpcOwnThreads();

void TickGrpcTimers();

}  // namespace fw::agent
