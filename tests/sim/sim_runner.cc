// Scenario runs: start the fleet, stream the model second by second, poll findings, score.
#include "tests/sim/sim_runner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "probes/net/probe_timeout.h"
#include "tests/sim/agent_pool.h"
#include "tests/sim/batch_builder.h"
#include "tests/sim/link_model.h"
#include "tests/sim/plan_follower.h"
#include "tests/sim/run_report.h"

namespace fw::sim {

namespace v1 = fabricwatch::v1;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

double NowUnix() { return static_cast<double>(RealClock::Get().WallNanos()) * 1e-9; }

std::vector<v1::Hello> MakeHellos(const FatTree& tree, uint64_t seed) {
  std::mt19937_64 session_rng(seed ^ static_cast<uint64_t>(RealClock::Get().WallNanos()));
  std::vector<v1::Hello> hellos;
  hellos.reserve(static_cast<size_t>(tree.hosts()));
  for (int h = 0; h < tree.hosts(); ++h) {
    v1::Hello hello;
    hello.set_node(tree.NodeName(h));
    hello.set_version("fw_sim");
    hello.set_session_id(session_rng() | 1);
    v1::Inventory* inv = hello.mutable_inventory();
    inv->set_hostname(tree.NodeName(h));
    inv->set_source("fw_sim");
    for (int r = 0; r < tree.rails(); ++r) {
      v1::Nic* nic = inv->add_nics();
      nic->set_device(tree.NicName(r));
      nic->set_fabric(true);
      nic->set_link_layer("Ethernet");
      nic->set_rate_gbps(tree.spec().host_link_gbps);
      v1::ProbeEndpoint* ep = hello.add_endpoints();
      ep->set_transport(v1::TRANSPORT_UDP);
      ep->set_address(tree.Address(h, r));
      ep->set_port(kProbePort);
      ep->set_nic(tree.NicName(r));
    }
    hellos.push_back(std::move(hello));
  }
  return hellos;
}

// Polls /api/v1/findings on its own thread so slow answers never stall the generator.
class FindingsPoller {
 public:
  FindingsPoller(const AggregatorUnderTest& agg, double period_s) : agg_(agg), period_s_(period_s) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FindingsPoller() { Stop(); }
  void Stop() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    if (thread_.joinable()) thread_.join();
  }
  // One last poll, then the result. REQUIRES: Stop() was called.
  json Result(std::vector<ObservedFinding>* all) {
    PollOnce();
    *all = tracker_.All();
    return {{"endpoint", endpoint_}, {"polls", polls_}, {"malformed", malformed_}};
  }

 private:
  void Run() {
    MutexLock lock(mu_);
    while (!stop_) {
      lock.Unlock();
      PollOnce();
      lock.Lock();
      const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(period_s_));
      const auto until = std::chrono::steady_clock::now() + period;
      while (!stop_ && cv_.WaitUntil(mu_, until)) {
      }
    }
  }
  void PollOnce() {
    auto body = agg_.Findings();
    ++polls_;
    if (!body.ok()) {
      endpoint_ = body.status().code() == StatusCode::kNotFound
                      ? "missing"
                      : "error: " + body.status().message();
      return;
    }
    auto parsed = ParseFindings(*body, NowUnix(), &malformed_);
    if (!parsed.ok()) {
      endpoint_ = "error: " + parsed.status().message();
      return;
    }
    endpoint_ = "ok";
    tracker_.Update(*parsed);
  }

  const AggregatorUnderTest& agg_;
  double period_s_;
  FindingsTracker tracker_;  // touched by the poller thread, then by Result() after Stop()
  std::string endpoint_ = "not polled";
  int polls_ = 0;
  int malformed_ = 0;
  Mutex mu_;
  CondVar cv_;
  bool stop_ FW_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Adds the trace a TTL-limited trace of `switches` would give, silent where the switch does not
// answer TTL expiry.
void AddTrace(const FatTree& tree, const std::vector<int>& switches,
              const std::vector<bool>& silent, int64_t now_ns, v1::PathTrace* t) {
  t->set_transport(v1::TRANSPORT_UDP);
  for (size_t k = 0; k < switches.size(); ++k) {
    if (silent[static_cast<size_t>(switches[k])]) continue;  // a silent TTL is left out
    v1::TraceHop* h = t->add_hops();
    h->set_ttl(static_cast<uint32_t>(k + 1));
    h->set_address(tree.SwitchAddress(switches[k]));
  }
  t->set_finished_unix_ns(now_ns);
  // The far end listens on its port (responder, or the prober's bound socket), so it stays silent.
  t->set_status(v1::TRACE_STATUS_INCOMPLETE);
}

// The PathTraceReport of one agent: a trace of each of its flows' forward paths (`flows`), and of
// the echo it sends back for each flow it answers (`answered`: the reverse path hashes its own
// 5-tuple). Only flows toward, and echoes toward, the hosts in `only` when it is non-null.
// Each is traced on the way the model routes it now (FabricModel::Routed); with `echoes` false
// only the forward paths.
void BuildTraces(const FatTree& tree, const FabricModel& model, const std::vector<Flow>& flows,
                 const std::vector<const Flow*>& answered, const std::vector<bool>& silent,
                 bool echoes, const std::set<int>* only, int64_t now_ns, v1::PathTraceReport& out) {
  out.Clear();
  const int spines = tree.spines();
  Flow scratch;
  for (const Flow& flow : flows) {
    if (only && !only->count(static_cast<int>(flow.dst_host))) continue;
    const Flow& f = model.Routed(flow, &scratch);
    const int src = static_cast<int>(f.src_host), dst = static_cast<int>(f.dst_host);
    std::vector<int> switches = {tree.LeafSwitch(f.rail, tree.LeafGroup(src))};
    if (f.inter_leaf) {
      // links[1] is the source leaf's uplink: FabricLink(rail, leaf, spine).
      switches.push_back(tree.SpineSwitch(f.rail, f.links[1] % spines));
      switches.push_back(tree.LeafSwitch(f.rail, tree.LeafGroup(dst)));
    }
    v1::PathTrace* t = out.add_traces();
    t->set_src_address(tree.Address(src, f.rail));
    t->set_dst_address(tree.Address(dst, f.rail));
    t->set_src_port(f.src_port);
    t->set_dst_port(kProbePort);
    t->set_dst_node(tree.NodeName(dst));
    t->set_flow_id(f.flow_id);
    AddTrace(tree, switches, silent, now_ns, t);
  }
  for (const Flow* answered_flow : answered) {
    if (!echoes) break;
    if (only && !only->count(static_cast<int>(answered_flow->src_host))) continue;
    const Flow* f = &model.Routed(*answered_flow, &scratch);
    const int prober = static_cast<int>(f->src_host), self = static_cast<int>(f->dst_host);
    std::vector<int> switches = {tree.LeafSwitch(f->rail, tree.LeafGroup(self))};
    if (f->inter_leaf) {
      // The echo's first link after the access link is this leaf's uplink toward its spine.
      switches.push_back(tree.SpineSwitch(f->rail, f->links[f->forward_count + 1] % spines));
      switches.push_back(tree.LeafSwitch(f->rail, tree.LeafGroup(prober)));
    }
    v1::PathTrace* t = out.add_traces();
    t->set_src_address(tree.Address(self, f->rail));
    t->set_dst_address(tree.Address(prober, f->rail));
    t->set_src_port(kProbePort);
    t->set_dst_port(f->src_port);
    t->set_dst_node(tree.NodeName(prober));
    t->set_flow_id(f->flow_id);
    t->set_echo(true);
    AddTrace(tree, switches, silent, now_ns, t);
  }
}

// Opens every stream and waits for the acknowledgements. Streams that are ready early send
// heartbeats meanwhile: opening 16,000 streams can take longer than the heartbeat timeout.
uint64_t ConnectFleet(AgentPool& pool, int agents, double timeout_s) {
  pool.StartAll();
  auto deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  for (;;) {
    pool.WaitReady(3);
    PoolStats s = pool.Stats();
    if (s.ready + s.failed >= static_cast<uint64_t>(agents) || SteadyClock::now() >= deadline) {
      return s.ready;
    }
    int64_t now = RealClock::Get().WallNanos();
    for (int i = 0; i < agents; ++i) pool.SendHeartbeat(i, now);
  }
}

// For every finding, the background micro-congestion episodes on the links it points at (a node's
// access links, a link, a switch's links) in the 30 s before it was first seen: the usual reason
// for a false positive on a healthy fabric.
json BackgroundNearFindings(const std::vector<ObservedFinding>& findings, const FatTree& tree,
                            const FabricModel& model, double run_start_unix, double scale) {
  json out = json::array();
  for (const auto& f : findings) {
    std::set<int> links;
    if (auto h = tree.FindHost(f.node.empty() ? f.loc_id : f.node)) {
      for (int r = 0; r < tree.rails(); ++r) links.insert(tree.AccessLink(*h, r));
    }
    if (auto l = tree.FindLink(f.loc_id)) links.insert(*l);
    if (auto s = tree.FindSwitch(f.loc_id)) {
      for (int l : tree.LinksOfSwitch(*s)) links.insert(l);
    }
    json episodes = json::array();
    for (const Episode& e : model.episodes()) {
      if (!links.count(e.link)) continue;
      double start = run_start_unix + e.start_s / scale, end = start + e.duration_s / scale;
      if (end < f.observed_unix_s - 30 || start > f.observed_unix_s) continue;
      episodes.push_back({{"link", tree.LinkId(e.link)},
                          {"start_s", e.start_s},
                          {"duration_s", e.duration_s},
                          {"queue_us", e.queue_us}});
    }
    out.push_back({{"finding", f.id}, {"background_episodes", episodes}});
  }
  return out;
}

}  // namespace

StatusOr<json> RunScenario(const Scenario& scenario, const RunOptions& options) {
  auto tree_or = FatTree::Build(scenario.topology);
  if (!tree_or.ok()) return tree_or.status();
  const FatTree& tree = *tree_or;
  auto plan = BuildFlowPlan(tree, scenario.flows);
  size_t total_flows = 0;
  for (const auto& f : plan) total_flows += f.size();

  AggregatorTarget target = options.aggregator;
  if (!target.bin.empty()) {
    target.fabric_map = target.work_dir + "/fabric.yaml";
    std::ofstream map(target.fabric_map, std::ios::trunc);
    map << tree.FabricMapYaml(scenario.tracing.enabled);
    map.close();
    if (!map) return Status::Internal("cannot write " + target.fabric_map);
  }
  auto agg_or = AggregatorUnderTest::StartOrAttach(target);
  if (!agg_or.ok()) return agg_or.status();
  AggregatorUnderTest& agg = **agg_or;
  auto before = agg.Snapshot();
  if (!before.ok()) return before.status();

  auto self_start = ReadProc(getpid());
  PlanFollower follower(tree, tree.hosts());
  AgentPool::Options pool_options{agg.grpc(),
                                  options.agents_per_channel,
                                  options.max_unacked_batches,
                                  options.ports_per_agent,
                                  options.aggregator.tls,
                                  {}};
  pool_options.on_plan = [&follower](int agent, const v1::ProbePlan& plan) {
    follower.OnPlan(agent, plan);
  };
  auto pool = AgentPool::Create(std::move(pool_options), MakeHellos(tree, scenario.seed));
  auto connect_start = SteadyClock::now();
  uint64_t ready = ConnectFleet(*pool, tree.hosts(), std::max(30.0, tree.hosts() / 200.0));
  double connect_s = std::chrono::duration<double>(SteadyClock::now() - connect_start).count();
  spdlog::info("msg=\"fleet connected\" ready={} of={} seconds={:.1f}", ready, tree.hosts(),
               connect_s);

  FabricModel model(tree, scenario);
  BatchBuilder builder(tree, model, scenario.bandwidth_probes_per_s, options.batch_encoding);
  Rng rng(scenario.seed * 0x9E3779B97F4A7C15ULL + 1);
  const double scale = options.time_scale;
  const bool agent_delivery = options.delivery == RunOptions::Delivery::kAgent;
  // Agents send at `slots` evenly spaced instants per simulated second: each agent's regular
  // batch at its own one. With agent delivery every agent is visited at every instant (urgent
  // batches, the probes sent in the instant's window), 50 ms apart, so an urgent batch's 250 ms
  // gap is kept to the slot.
  const int slots = agent_delivery ? 20 : 10;
  if (options.start_phase_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.start_phase_s));
  }
  const auto start = SteadyClock::now();
  const double run_start_unix = NowUnix();
  const int64_t epoch_ns = RealClock::Get().WallNanos();
  // 0 turns heartbeats off during the run (batches alone keep an agent alive).
  const int hb = static_cast<int>(scenario.heartbeat_s);
  const int seconds = static_cast<int>(scenario.duration_s);
  const double warm_real_s = std::min(options.warmup_s, seconds / scale / 4);
  FindingsPoller poller(agg, options.findings_poll_s);

  std::optional<IngestSnapshot> window_start;
  auto window_start_self = self_start;
  double late_s = 0;
  // Tracing: every agent traces all its flows once, then the peers its plans ask for again.
  const bool tracing = scenario.tracing.enabled;
  std::vector<bool> silent(static_cast<size_t>(tree.switch_count()), false);
  for (int sw : scenario.tracing.silent) silent[static_cast<size_t>(sw)] = true;
  std::vector<char> trace_all(static_cast<size_t>(tree.hosts()), tracing ? 1 : 0);
  std::vector<std::set<int>> retrace(static_cast<size_t>(tree.hosts()));
  // The flows each host answers: it traces their echoes too.
  std::vector<std::vector<const Flow*>> answered(static_cast<size_t>(tree.hosts()));
  for (const auto& flows : plan) {
    for (const Flow& f : flows) answered[f.dst_host].push_back(&f);
  }
  v1::PathTraceReport traces;
  uint64_t traces_sent = 0, retraces_sent = 0;
  // Escalation: results the base plan asks for and those the raised rates add.
  // Counted as the rates' expectations (plans' rates may be fractional), rounded when reported.
  double base_results = 0, extra_results = 0, peak_extra = 0, extra_this_second = 0;
  double base_this_second = 0;
  uint64_t escalated_agent_seconds = 0, sent_results = 0;
  // Agent delivery: echoes the model drew slower than their flow's timeout, reported lost; and
  // lost probes reported on a timeout shorter than the agent's default (escalated flows').
  uint64_t late_echoes = 0, lost_on_short_timeout = 0, retracted = 0;
  // Per agent and flow: the round-trip estimate a prober keeps when its plan sets a timeout floor.
  std::vector<std::vector<net::ProbeTimeout>> rto(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) rto[i].resize(plan[i].size());
  // What the plans ask of the simulated flows per second, summed over the fleet in the last second.
  double planned_last_second = 0;
  std::shared_ptr<const FollowedRates> rates;
  std::vector<Flow> expanded;
  // Per agent: the key of the flows its batch's static fields hold (BatchBuilder::Fill).
  std::vector<uint64_t> layout(static_cast<size_t>(tree.hosts()), 0);
  // Report pacing: the seconds of results each agent holds, not yet sent.
  std::vector<int> held(static_cast<size_t>(tree.hosts()), 0);
  uint32_t report_ms = 0;
  // The seconds between an agent's regular batches: --batch-seconds, or its plan's report interval.
  auto report_every = [&] {
    return options.batch_seconds > 0 ? options.batch_seconds
                                     : std::max(1, static_cast<int>((report_ms + 500) / 1000));
  };
  // Agent delivery: what each agent holds until it may send it, and scratch.
  std::vector<Outbox> outbox(agent_delivery ? static_cast<size_t>(tree.hosts()) : 0);
  std::vector<HeldResult> taken;
  std::vector<double> instants;
  // Agent `i`'s traces, when it has flows to trace (all of them once, then the peers its plans ask
  // to trace again).
  auto send_traces = [&](int i, int64_t second_ns) {
    const auto ui = static_cast<size_t>(i);
    if (!tracing || (!trace_all[ui] && retrace[ui].empty())) return;
    BuildTraces(tree, model, plan[ui], answered[ui], silent, scenario.tracing.echoes,
                trace_all[ui] ? nullptr : &retrace[ui], second_ns, traces);
    if (pool->SendTraces(i, traces)) {
      (trace_all[ui] ? traces_sent : retraces_sent) += traces.traces_size();
      trace_all[ui] = 0;
      retrace[ui].clear();
    }
  };
  // One slot of agent `i` at simulated time `now_s` (second t, slot k): the probes its flows send
  // in [now_s, now_s + 1/slots) at its plan's rates join what it holds, ready when a real agent
  // would have them; at its own slot it also runs its bursts, traces and heartbeat, and sends its
  // regular batch; at any slot it sends when an urgent result is ready.
  auto agent_slot = [&](int i, int t, int k, double now_s, int64_t second_ns) {
    const auto ui = static_cast<size_t>(i);
    const auto& flows = plan[ui];
    const bool own = k == i % slots;
    follower.Take(i, &rates, &retrace[ui], &report_ms);
    if (own) send_traces(i, second_ns);
    if (own && t == seconds - 1) {
      for (const Flow& f : flows) planned_last_second += rates->RateOf(f);
    }
    const double window = 1.0 / slots;
    const size_t n = flows.size();
    bool raised_any = false;
    for (size_t fi = 0; fi < n; ++fi) {
      const Flow& f = flows[fi];
      const bool raised = rates->Raised(f);
      raised_any |= raised;
      instants.clear();
      // Flow fi of n sends at fi/n into each period, as the per-second model spread them.
      const int count = SendInstants(rates->RateOf(f), static_cast<double>(fi) / n, now_s,
                                     now_s + window, &instants);
      // Accounting: a raised flow's baseline share is its class's rate, the rest is escalation.
      if (raised) {
        base_this_second += rates->BaseOf(f) * window;
        extra_this_second += count - rates->BaseOf(f) * window;
      } else {
        base_this_second += count;
      }
      // The flow's timeout from the plan: an echo slower than it is a lost probe, reported then.
      // With a floor, the timeout follows the flow's round trip as the agent's prober does.
      const double cap_s = rates->TimeoutOf(f);
      net::ProbeTimeout& est = rto[ui][fi];
      for (double sent : instants) {
        const double timeout_s =
            rates->timeout_floor_s > 0
                ? 1e-9 * static_cast<double>(est.Next(std::llround(rates->timeout_floor_s * 1e9),
                                                      std::llround(cap_s * 1e9)))
                : cap_s;
        const LatencySample ls = model.SampleLatency(f, rng);
        HeldResult h = LatencyResult(&f, sent, ls.lost, ls.rtt_ns, timeout_s, raised);
        if (h.lost) est.OnLoss();
        if (!ls.lost) est.OnEcho(ls.rtt_ns);  // in time or late: either teaches the estimate
        late_echoes += !ls.lost && h.lost;
        lost_on_short_timeout += h.lost && timeout_s < kProbeTimeoutS;
        h.seq = static_cast<uint64_t>(t);
        outbox[ui].Hold(h);
        // Lost on the round-trip timeout, echoed within the fixed one: the agent reports the echo
        // late and the aggregator takes the loss back.
        if (h.lost && !ls.lost && timeout_s < cap_s && static_cast<double>(ls.rtt_ns) * 1e-9 < cap_s) {
          HeldResult back = LatencyResult(&f, sent, false, ls.rtt_ns, cap_s, raised);
          back.late = true;
          back.seq = h.seq;
          outbox[ui].Hold(back);
          ++retracted;
        }
      }
    }
    bool regular = false;
    if (own) {
      escalated_agent_seconds += raised_any;
      // Bandwidth bursts at the agent's slot, rotating over its flows, as the per-second model.
      for (int b = 0; n > 0 && b < scenario.bandwidth_probes_per_s; ++b) {
        const Flow& f = flows[static_cast<size_t>(
            (static_cast<int64_t>(t) * scenario.bandwidth_probes_per_s + b) %
            static_cast<int64_t>(n))];
        const BandwidthSample bs = model.SampleBandwidth(f, BatchBuilder::kBandwidthBytes, rng);
        HeldResult h;
        h.flow = &f;
        h.bandwidth = true;
        h.sent_s = now_s + b * 1e-6;
        h.lost = bs.lost;
        h.rtt_ns = bs.lost ? 0 : bs.duration_ns;
        h.goodput_bps = bs.goodput_bps;
        h.cpu_busy_permille = bs.cpu_busy_permille;
        h.cpu_peak_permille = bs.cpu_peak_permille;
        h.ready_s =
            h.sent_s + (bs.lost ? kProbeTimeoutS : static_cast<double>(bs.duration_ns) * 1e-9);
        h.urgent = bs.lost;
        h.seq = static_cast<uint64_t>(t);
        outbox[ui].Hold(h);
      }
      const int every = report_every();
      const int hold = ++held[ui];
      regular = (t + i) % every == every - 1 || hold >= every;
      if (hb > 0 && (t + i) % hb == 0) pool->SendHeartbeat(i, second_ns);
    }
    if (!outbox[ui].Due(now_s, regular)) return;
    outbox[ui].TakeReady(now_s, &taken);
    if (taken.empty()) return;
    if (pool->SendBatch(i, [&](v1::ProbeBatch& b) { builder.FillHeld(taken, epoch_ns, b); })) {
      outbox[ui].Sent(now_s);
      if (regular) held[ui] = 0;
      sent_results += taken.size();
    } else {
      outbox[ui].Return(taken);
    }
  };
  for (int t = 0; t < seconds; ++t) {
    model.Advance(t);
    int64_t second_ns = epoch_ns + int64_t{t} * 1'000'000'000;
    for (int k = 0; k < slots; ++k) {
      auto due = start + std::chrono::duration_cast<SteadyClock::duration>(
                             std::chrono::duration<double>((t + double(k) / slots) / scale));
      auto now = SteadyClock::now();
      if (now < due) {
        std::this_thread::sleep_until(due);
      } else {
        late_s = std::max(late_s, std::chrono::duration<double>(now - due).count());
      }
      if (agent_delivery) {
        const double now_s = t + static_cast<double>(k) / slots;
        for (int i = 0; i < tree.hosts(); ++i) agent_slot(i, t, k, now_s, second_ns);
        continue;
      }
      for (int i = k; i < tree.hosts(); i += slots) {
        const auto& flows = plan[static_cast<size_t>(i)];
        const auto ui = static_cast<size_t>(i);
        follower.Take(i, &rates, &retrace[ui], &report_ms);
        send_traces(i, second_ns);
        // Each flow probes at its plan's rate (ExpandFlows). An agent sends what it holds every
        // `every` seconds (agents spread over the phases), and at once when it holds bad news
        // (drawn with the chance that this second's probes lose one) or escalated flows' results.
        const bool raised = std::any_of(flows.begin(), flows.end(),
                                        [&](const Flow& f) { return rates->Raised(f); });
        if (t == seconds - 1) {
          for (const Flow& f : flows) planned_last_second += rates->RateOf(f);
        }
        const int every = report_every();
        const int hold = ++held[ui];
        const bool due = (t + i) % every == every - 1 || hold >= every || raised ||
                         rng.Uniform() >= model.AllAnsweredProbability(flows);
        if (due) {
          held[ui] = 0;
          double base = 0, extra = 0;
          ExpandFlows(flows, *rates, rng, expanded, &base, &extra);
          // Nothing probed (low planned rates): an agent sends no empty batch.
          if (!expanded.empty() && pool->SendBatch(i, [&](v1::ProbeBatch& b) {
                builder.Fill(expanded, t, second_ns, rng, b, hold, &layout[ui]);
              })) {
            base_this_second += base * hold;
            extra_this_second += extra * hold;
            escalated_agent_seconds += extra > 0;
            sent_results += expanded.size() * static_cast<uint64_t>(hold);
          }
        }
        if (hb > 0 && (t + i) % hb == 0) pool->SendHeartbeat(i, second_ns);
      }
    }
    base_results += base_this_second;
    extra_results += extra_this_second;
    peak_extra = std::max(peak_extra, extra_this_second);
    base_this_second = extra_this_second = 0;
    if (!window_start && (t + 1) / scale >= warm_real_s) {
      auto s = agg.Snapshot();
      if (s.ok()) window_start = *s;
      window_start_self = ReadProc(getpid());
    }
  }
  // Let the last slot's writes land before closing the window.
  std::this_thread::sleep_until(start + std::chrono::duration_cast<SteadyClock::duration>(
                                            std::chrono::duration<double>(seconds / scale)));
  auto window_end = agg.Snapshot();
  auto self_end = ReadProc(getpid());
  PoolStats streaming = pool->Stats();
  poller.Stop();
  pool->Shutdown(20);
  PoolStats final_stats = pool->Stats();
  auto after = agg.Snapshot();
  std::vector<ObservedFinding> findings;
  json findings_json = poller.Result(&findings);

  ReportInputs in;
  in.mode = "scenario";
  in.name = scenario.name;
  in.agents = tree.hosts();
  in.connect_s = connect_s;
  in.before = *before;
  in.window_start = window_start;
  in.window_end = window_end.ok() ? std::optional(*window_end) : std::nullopt;
  in.after = after.ok() ? std::optional(*after) : std::nullopt;
  in.self_start = window_start_self.ok() ? std::optional(*window_start_self) : std::nullopt;
  in.self_end = self_end.ok() ? std::optional(*self_end) : std::nullopt;
  in.streaming = streaming;
  in.final_stats = final_stats;
  json report = BuildIngestReport(in);
  report["scenario"] = {{"name", scenario.name},
                        {"description", scenario.description},
                        {"hosts", tree.hosts()},
                        {"links", tree.link_count()},
                        {"flows_per_agent", static_cast<double>(total_flows) / tree.hosts()},
                        {"bandwidth_probes_per_agent_s", scenario.bandwidth_probes_per_s},
                        {"duration_s", scenario.duration_s},
                        {"time_scale", scale},
                        {"generator_max_late_s", late_s},
                        {"faults", scenario.faults.size()}};
  Score score =
      ComputeScore(GroundTruth(scenario, tree, run_start_unix, scale), findings, options.grace_s);
  AddFindingsReport(findings_json, score, findings, scenario.faults.empty(), report);
  report["findings"]["background_near"] =
      BackgroundNearFindings(findings, tree, model, run_start_unix, scale);
  report["scenario"]["background_episodes"] = model.episodes().size();
  // Escalation traffic against the base plan's latency probes (both counted as results sent).
  const double base_per_s = seconds > 0 ? static_cast<double>(base_results) / seconds : 0;
  report["escalation"] = {
      {"base_results", std::llround(base_results)},
      {"extra_results", std::llround(extra_results)},
      {"extra_share", base_results > 0 ? extra_results / base_results : 0.0},
      {"peak_extra_per_s", std::llround(peak_extra)},
      {"peak_extra_share", base_per_s > 0 ? peak_extra / base_per_s : 0.0},
      {"escalated_agent_seconds", escalated_agent_seconds},
      {"sent_results", sent_results},
      {"sent_per_s", seconds > 0 ? static_cast<double>(sent_results) / seconds : 0.0},
      {"planned_per_s_last_second", planned_last_second},
      {"late_echoes", late_echoes},
      {"retracted", retracted},
      {"lost_on_short_timeout", lost_on_short_timeout},
      {"plans_received", final_stats.plans_received}};
  report["tracing"] = {{"enabled", tracing},
                       {"silent_switches", scenario.tracing.silent.size()},
                       {"traces_sent", traces_sent},
                       {"retraces_sent", retraces_sent},
                       {"reports_sent", final_stats.trace_reports_sent}};
  if (!agg.log_path().empty()) report["aggregator_log"] = agg.log_path();
  int exit = agg.Stop(10);
  if (agg.pid() > 0 && !options.aggregator.bin.empty()) report["aggregator_exit_status"] = exit;
  return report;
}

StatusOr<json> RunHeartbeatBench(int agents, double seconds, const RunOptions& options) {
  auto agg_or = AggregatorUnderTest::StartOrAttach(options.aggregator);
  if (!agg_or.ok()) return agg_or.status();
  AggregatorUnderTest& agg = **agg_or;
  auto before = agg.Snapshot();
  if (!before.ok()) return before.status();
  std::vector<v1::Hello> hellos;
  std::mt19937_64 session_rng(static_cast<uint64_t>(RealClock::Get().WallNanos()));
  for (int i = 0; i < agents; ++i) {
    v1::Hello h;
    char name[32];
    std::snprintf(name, sizeof name, "hb%05d", i);
    h.set_node(name);
    h.set_version("fw_sim");
    h.set_session_id(session_rng() | 1);
    hellos.push_back(std::move(h));
  }
  auto pool = AgentPool::Create({agg.grpc(),
                                 options.agents_per_channel,
                                 options.max_unacked_batches,
                                 options.ports_per_agent,
                                 options.aggregator.tls,
                                 {}},
                                std::move(hellos));
  auto connect_start = SteadyClock::now();
  ConnectFleet(*pool, agents, 60);
  double connect_s = std::chrono::duration<double>(SteadyClock::now() - connect_start).count();
  auto window_start = agg.Snapshot();
  auto self_start = ReadProc(getpid());
  PoolStats s0 = pool->Stats();
  pool->StartClosedLoop();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto window_end = agg.Snapshot();
  auto self_end = ReadProc(getpid());
  PoolStats s1 = pool->Stats();
  pool->StopClosedLoop();
  pool->Shutdown(20);
  PoolStats final_stats = pool->Stats();
  auto after = agg.Snapshot();

  ReportInputs in;
  in.mode = "heartbeat";
  in.name = "heartbeat";
  in.agents = agents;
  in.connect_s = connect_s;
  in.before = *before;
  in.window_start = window_start.ok() ? std::optional(*window_start) : std::nullopt;
  in.window_end = window_end.ok() ? std::optional(*window_end) : std::nullopt;
  in.after = after.ok() ? std::optional(*after) : std::nullopt;
  in.self_start = self_start.ok() ? std::optional(*self_start) : std::nullopt;
  in.self_end = self_end.ok() ? std::optional(*self_end) : std::nullopt;
  in.streaming = s1;
  in.final_stats = final_stats;
  json report = BuildIngestReport(in);
  double dt =
      (window_end.ok() && window_start.ok()) ? window_end->unix_s - window_start->unix_s : seconds;
  double msgs = static_cast<double>((s1.batches_sent + s1.heartbeats_sent) -
                                    (s0.batches_sent + s0.heartbeats_sent));
  report["heartbeat"] = {{"seconds", dt},
                         {"sim_messages_per_s", msgs / dt},
                         {"sim_acks_per_s", (s1.acks_received - s0.acks_received) / dt}};
  if (window_end.ok() && window_start.ok()) {
    report["heartbeat"]["aggregator_messages_per_s"] =
        (window_end->batches + window_end->heartbeats - window_start->batches -
         window_start->heartbeats) /
        dt;
  }
  agg.Stop(10);
  return report;
}

}  // namespace fw::sim
