// `fw_rdmaprobe cpu`: what the agent's RDMA thread costs at a given UD probe rate, with the fake
// delivering in memory (no loopback link, so no datagram per message). One process: an "agent"
// runner probing `targets` fake peers and answering their probes at the same rate, each peer its
// own runner on its own thread, as on a fleet. Prints the agent thread's CPU (user and system),
// wakeups, CPU per exchange end, the same less what the fake did on that thread in place of a
// NIC (FakeFabric::HwCostOfThread at unit costs measured in the same run), and the CPU of a bare
// thread waking as often (docs/rdma.md "Agent CPU"); tests/rdma/rdma_cpu_bench.py adds the
// per-function split and the syscalls.
#pragma once

#include <ostream>

namespace fw::rdma {

struct CpuBenchOptions {
  int targets = 8;
  int flows = 2;
  double rate_hz = 4;  // per flow: targets x flows x rate_hz probes/s sent (64 by default)
  bool answer = true;  // the peers probe the agent back at the same rate
  double warmup_s = 3;
  double seconds = 15;  // the measured window
  double linger_s = 0;  // kept running after the window (for strace)
  double send_window_ms = 250;  // UdMeshOptions::send_window_ns of every runner (0: off)
};

int RunCpuBench(const CpuBenchOptions& o, std::ostream& out);

// `fw_rdmaprobe linkcost`: the thread CPU of each syscall the fake's loopback link makes on the
// agent's RDMA thread in place of a NIC (a sendto of one link datagram to a loopback socket, a
// recv that takes one, a recv that finds none, a timerfd_settime), each averaged over many calls
// here and now. tests/rdma/rdma_agent_cpu.py --split multiplies them by the RDMA thread's counts
// (strace -c) to take the fake's link out of the agent's CPU. One line, `key=ns` pairs.
int RunLinkCostBench(std::ostream& out);

}  // namespace fw::rdma
