// gRPC's default EventEngine for the agent: one thread of ours (fw-grpc-ee) runs every closure
// and timer gRPC hands to its EventEngine, instead of libgrpc 1.51's built-in one (a thread pool of
// 2-3 `event_engine` threads and a `timer_manager` thread, started at the first channel).
//
// libgrpc 1.51 uses its EventEngine for closures and timers only (alarms, promise sleeps); the
// client's connects, DNS and listeners still go through its iomgr. So this engine implements Run,
// RunAfter and Cancel, and answers Connect, CreateListener and DNS lookups with Unimplemented:
// a libgrpc that starts using them fails the uplink's tests loudly instead of hanging.
//
// Closures run one at a time, in order (timers by deadline, then by scheduling order); a closure
// must not block waiting for another closure of the engine (none of libgrpc 1.51's do).
#pragma once

#include <grpc/event_engine/event_engine.h>

#include <chrono>
#include <memory>

namespace fw::agent {

std::unique_ptr<grpc_event_engine::experimental::EventEngine> MakeOneThreadEventEngine();

// Makes MakeOneThreadEventEngine gRPC's EventEngine factory. Call first in main(), before any gRPC
// object exists (libgrpc creates its default engine when the first channel is made).
void UseOneThreadEventEngine();

// Engines made after this call also run `tick` on their thread: at least every `period`, and from
// half a period on whenever the thread is awake anyway, so that the tick shares its wakeups. For
// work that must run periodically on a thread that may run gRPC callbacks (TickGrpcTimers,
// grpc_threads.h). Call before the first channel, like UseOneThreadEventEngine.
void RunPeriodicallyOnEngineThread(void (*tick)(), std::chrono::milliseconds period);

}  // namespace fw::agent
