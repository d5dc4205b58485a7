// Thresholds and periods of the analyzer; docs/analysis.md argues for every default.
#pragma once

#include <cstdint>

namespace fw::analysis {

struct AnalysisConfig {
  // --- The short window and what makes evidence sufficient ---------------------------------------
  // Distinct bad flows an element needs before it can be suspected at all.
  int min_flows = 3;
  // Probes an element needs in the short window (10 s) before its loss is judged.
  int min_probes = 20;
  // RTT samples an element needs before its latency is judged.
  int min_rtt_samples = 20;

  // --- Loss
  // ---------------------------------------------------------------------------------------
  // Estimated loss ratio of an element that makes it bad.
  double loss_ratio = 0.005;
  // ...and the lost probes must be this surprising under the fleet's background loss: -log10 of
  // the Poisson chance of at least that many (9: one in a billion per link and tick).
  double loss_significance = 9.0;
  // Floor for the fleet background loss ratio (a perfectly clean fleet still gets this).
  double background_loss_floor = 1e-4;
  // A path class (intra-leaf, inter-leaf) gives the background only with this many pairs that
  // have enough probes; the cleanest such class wins.
  int background_min_pairs = 5;
  // Loss over the most recent two seconds that makes a bad element "down"...
  double down_loss_ratio = 0.9;
  // ...or over the last complete second alone, when it holds at least this many probes (an
  // escalated link has 80 or more a second). A link losing 20 % reads 18 of 20 lost with a chance
  // of ~10^-11, so a degraded link is not called down by it; the first second of an outage is.
  double down_last_second_min_probes = 20;
  // ...or read from each flow's newest results: at least `down_run_min_flows` flows surely cross
  // the link with fresh probes, at least `down_loss_ratio` of them lost every probe since their
  // last answered one, and those runs of losses sum to at least `down_run_min_lost`. Seconds are
  // arrival seconds, so the first complete second of an outage still holds the answers of probes
  // sent before it; a flow's run is not mixed up that way. A link losing a share p of its probes
  // shows all of 8 flows on runs that sum to 30 with a chance of about p^8 · P(runs ≥ 30): for
  // p = 0.5 about 2·10^-5 a tick; a link losing 80 % reads down often, and carries little.
  int down_run_min_flows = 4;
  double down_run_min_lost = 30;

  // Links whose loss reaches this significance (weaker than `loss_significance`) are escalated
  // before they are suspect: the denser data crosses the significance of a finding sooner. Only
  // escalation acts on it; 0 turns it off.
  double escalate_loss_significance = 3.0;
  // ...from lost probes on at least this many flows (a finding asks `min_flows`): a 5 % lossy link
  // of a small fleet shows its second lost flow seconds before its third.
  int escalate_min_flows = 2;
  // ...and at this significance (or once suspect) the escalation is a suspicion, whose budget floor
  // is EscalationConfig::suspicion_budget_pps: 10^-5 per link and tick is about one evaluation in
  // a healthy 30-minute run of 64 fabric links, while a 5 % lossy link reaches it with its first 3
  // lost probes.
  double escalate_suspicion_significance = 5.0;
  // A flow with a lost probe that no loss blame (weak or not) explains and whose path is known
  // (traced, or the only one) names the fabric link of its path with the fewest probes; when its
  // lost probes are significant there at least at this level (-log10, against the background,
  // with no loss-ratio floor), the link is escalated as a *lead* (EscalationRequest::lead): a
  // short escalation served after every other request, so that a lossy link that lost one probe
  // in the fault's first second gets dense data for the next evaluation instead of waiting for
  // its second lost flow at 1 Hz. One lost probe among ~220 crossing a link in 10 s reads ~1.7 at
  // the 10^-4 background floor; a healthy fleet shows such a lead every few tens of seconds
  // (docs/analysis.md, "Where the traced suite's seconds go"). 0 turns leads off.
  double escalate_lead_significance = 1.0;

  // --- Latency
  // ------------------------------------------------------------------------------------ A sample
  // is "slow" when its RTT exceeds the pair baseline median by this factor...
  double latency_inflation = 1.5;
  // ...and by this many scaled MADs (1.4826·MAD ≈ σ for a normal distribution)...
  double latency_mad_k = 6.0;
  // ...and by at least this much absolute time.
  double latency_floor_s = 20e-6;
  // The fraction of slow samples that makes an element's latency bad.
  double slow_fraction = 0.3;
  // Same significance test as for loss, against the fleet's background slow fraction.
  double slow_significance = 9.0;
  double background_slow_floor = 0.01;
  // A pair baseline needs this many RTT samples in the long window.
  int baseline_min_samples = 30;
  // Baselines of one in N source nodes are refreshed per tick (so each every N ticks).
  int baseline_refresh_ticks = 30;
  // ...one in this many while fewer than half of the pairs seen have a baseline (a fresh start),
  // from this many samples, and the class baselines every tick instead of every 10: a pair probed
  // by one flow at 1 Hz has 30 samples only after 30 s, and latency would not be judged at all
  // before then. A provisional baseline is replaced at the pair's next refresh after warm-up
  // (every 30 s, from `baseline_min_samples`); the slow threshold's 1.5x floor bounds what a
  // median of 8 samples can get wrong.
  int baseline_warmup_refresh_ticks = 3;
  int baseline_warmup_min_samples = 8;

  // --- Bandwidth
  // ---------------------------------------------------------------------------------- Bandwidth
  // samples are rare (one burst per pair every few minutes): they are kept this long.
  double bandwidth_window_s = 180.0;
  // Goodput below this fraction of the path class's median makes a sample bad.
  double bandwidth_ratio = 0.7;
  // The fraction of bad bandwidth samples that makes an element bad.
  double bad_bandwidth_fraction = 0.5;
  // Significance of the bad samples against a background share of bad samples.
  double bandwidth_significance = 3.0;
  double background_bandwidth_floor = 0.05;
  // Queueing without loss on a link whose bursts get at most `self_queue_bandwidth_ratio` of the
  // expected goodput is the link's own low capacity (link_degraded), not congestion, while fewer
  // than `standing_queue_fraction` of the probes crossing it are slow: our bursts then fill a slow
  // link and the queue comes and goes with them. Traffic that congests a link keeps a queue
  // standing, so most probes are slow.
  double self_queue_bandwidth_ratio = 0.5;
  double standing_queue_fraction = 0.6;
  // Bandwidth evidence is confirmed before it fires: a pair needs this many low bursts (from
  // different flows: the other direction, or another flow of the pair); a link's tomography
  // needs `min_flows` distinct flows with a low burst. One low burst is often the host, not the
  // path (a busy 2-core host measured 0.23 of the expected goodput on loopback).
  int bandwidth_confirm_bursts = 2;
  // A low burst during which the prober's host CPUs were at least this busy (the agent reports the
  // busy share of all its CPUs over the burst, docs/probes.md) measures the host, not the path: it
  // is set aside, not a bandwidth sample. 0 turns the rule off.
  double bandwidth_cpu_busy_limit = 0.9;
  // The same for a low burst around which runnable tasks on the prober's host waited for a CPU at
  // least this share of the time (PSI "some" over the burst and its lead, docs/probes.md): it
  // covers bursts without a busy share (RC bursts on small hosts) and hosts that are contended
  // without reaching the busy limit. 0 turns the rule off. docs/analysis.md says why 0.5.
  double bandwidth_cpu_pressure_limit = 0.5;
  // A host whose CPUs were saturated during at least this many of its bursts in the bandwidth
  // window (repeatedly: one busy moment is no finding) gets a host_network finding that says so.
  int host_cpu_saturated_bursts = 2;
  // Bursts say nothing about which equal-cost link they crossed (TCP is not traced). Where traced
  // UDP flows cross the same links, a group of candidate links blamed on bandwidth alone is
  // dropped when traced loss or latency evidence blames one of its links (that finding speaks
  // for the flows), and otherwise waits `latency_confirm_ticks` before it fires.
  bool traced_explains_bandwidth_groups = true;

  // --- Host noise guard
  // --------------------------------------------------------------------------- A host whose flows
  // are bad in one role (prober or responder) for at least this fraction while its flows in the
  // other role are bad for at most `host_clean_fraction` is noisy itself.
  double host_bad_fraction = 0.5;
  double host_clean_fraction = 0.15;
  int host_min_flows = 3;
  // An access link that loses probes *and* delays them by this factor of the baseline on average
  // points at the host's stack (drops and scheduling delays of milliseconds), not at the cable or
  // the NIC port, whose queueing delay the switch's buffer bounds to tens of microseconds.
  double host_delay_inflation = 8.0;

  // --- RDMA host delays (docs/rdma.md) ----------------------------------------------------------
  // The host delays split off an rdma_ud RTT (the prober's posting and polling, the responder's
  // turnaround), per node, device and role: a median of at least rdma_host_delay_floor_s and
  // rdma_host_delay_fleet_ratio times the fleet's median over the short window names the host
  // (host_network) or, when its other RDMA devices are quick, that device (nic_degraded). A
  // polling host turns a probe around in microseconds; a millisecond is a host that is not
  // getting to its completions (CPU contention, interrupts, a driver stall).
  double rdma_host_delay_floor_s = 1e-3;
  double rdma_host_delay_fleet_ratio = 5.0;
  int rdma_host_delay_min_samples = 5;
  // Evidence that persists (HostDelayLimits): samples with an end whose agent's session began less
  // than settle_s before are not judged (start-up contention), and a series is high only once its
  // run of high evidence, tick after tick, spans persist_s (not one upload's burst).
  double rdma_host_delay_settle_s = 3.0;
  double rdma_host_delay_persist_s = 2.0;

  // --- Roll-ups
  // ----------------------------------------------------------------------------------- A switch is
  // blamed when at least this fraction of its switch-to-switch links (and at least 2) are blamed.
  double switch_fraction = 0.75;
  // Without a map, a host is blamed when this fraction of its peers (and at least 3) are bad.
  double host_peer_fraction = 0.5;

  // --- Port counters (corroboration) -------------------------------------------------------------
  double port_congestion_ratio = 0.05;  // xmit_wait share of time
  double port_cnp_rate = 1.0;           // CNPs per second
  double port_ecn_rate = 1.0;           // ECN-marked packets per second
  double port_sample_max_age_s = 30.0;

  // --- State machine
  // ------------------------------------------------------------------------------ Consecutive bad
  // evaluations (ticks) before a suspect element fires.
  int confirm_ticks = 3;
  // ...or this many, when the loss that made it suspect is significant again on the freshest data
  // alone: the last two complete seconds and the tick's own second so far (at least
  // `dense_confirm_min_probes` probes, most of them escalated ones once escalation is in force)
  // reach `loss_significance` and `loss_ratio` on their own. The loss is then going on now, not a
  // past burst still inside the 10 s window. Confirmations that ask for persistence (latency alone)
  // are not shortened.
  int dense_confirm_ticks = 2;
  double dense_confirm_min_probes = 40;
  // Between ticks, every this many seconds (0: never), two rules of the tick are applied to what
  // arrived since, and nothing else (Analyzer::BetweenTicks):
  // - a lost probe ingested since the last tick whose flow makes a lead by the tick's own lead rule
  //   (`escalate_lead_significance` against the last tick's link totals and background, not
  //   explained by a link the last tick blamed for loss, its link healthy) is escalated as a lead
  //   now, and its links count the lead as their weak evaluation before the next tick
  //   (ElementTracker::WeakBeforeNextTick), as a lead seen at a tick would for the tick after it;
  // - a link that has had its `dense_confirm_ticks` evaluations of loss but whose freshest data
  //   did not yet pass the dense test at the last tick is tested again (Analyzer::Recheck): the
  //   same test (the link's surely-crossing flows' freshest probes alone at `loss_significance`
  //   and `loss_ratio`, from at least `dense_confirm_min_probes`), read as the escalated probes'
  //   results arrive instead of at the next tick.
  // Suspicions, blame, counts, latency and flaps stay per tick.
  double between_ticks_s = 0.25;
  // A lossy fabric link while a link beside it under one of its switches loses probes too (its own
  // unexplained flows: a loss blame or weak loss) waits this many evaluations more, and not the
  // dense confirmation: a lossy switch's links are blamed a few at a time (escalation makes the
  // first ones dense and explain-away credits them the flows over two of its links), and the
  // switch roll-up needs `switch_fraction` of them at once. A link fault's neighbours are clean.
  int switch_wait_ticks = 2;
  // A lossy fabric link whose switches are not yet cleared is not confirmed densely either: a
  // switch is cleared when its flows that avoid the link had enough probes in the window to show,
  // at the link's loss rate, `switch_clear_expected` lost ones, and lost fewer than
  // `switch_clear_lost_share` of those. A lossy switch's first blamed link otherwise fires on its
  // own (explain-away leaves its other links' few flows under significance for several
  // evaluations). Such a link waits `switch_clear_wait_ticks` evaluations more than the usual
  // confirmation (0: the dense confirmation's head start is what it loses; 2 cost the traced
  // suite's two-rails fault up to 3 s), and for as long as it takes while the switch has a finding
  // itself.
  double switch_clear_expected = 4;
  double switch_clear_lost_share = 0.5;
  int switch_clear_wait_ticks = 0;
  // Latency alone (queueing without loss: congestion on a link, a group of links or a switch, a
  // slow host's NIC cable) fires only after this many: background queueing episodes of a few
  // seconds look the same for as long as they last; a hot spot or a slow host worth acting on
  // persists.
  int latency_confirm_ticks = 30;
  // ...unless the queueing is severe: latency inflated this many times over the baseline on
  // average (a standing queue of milliseconds, not a background episode of microseconds) fires
  // after `confirm_ticks` like loss does. Background episodes have an exponential spread: in the
  // fleet simulator a quarter of them reach 3x a 22 us RTT, 0.14 % reach 10x, 10^-6 reach 20x.
  double severe_latency_inflation = 20.0;
  // ...or when it is correlated: queueing without loss on at least `correlated_latency_links`
  // links of one switch at once (a switch roll-up, which also needs `switch_fraction` of its
  // links, or the far-end roll-up of unresolved ECMP) fires after this many. Background episodes
  // are independent per link (one per link every 20 minutes, 3 s on average, plus the window's
  // ~4 s: a link's evaluations are bad ~0.6 % of the time), so three of a leaf's four uplinks at
  // once is a chance of ~10^-6 per leaf and tick, six of a spine's eight ~10^-12.
  int correlated_latency_confirm_ticks = 5;
  int correlated_latency_links = 3;
  // ...or after this many, when at least `correlated_latency_links` of those links are slow on the
  // freshest data alone in every one of them: the last two complete seconds (at least
  // `min_rtt_samples` samples on the link) reach `slow_fraction` and `slow_significance` on their
  // own. The queueing is then going on now on several links of the switch at once, each at a
  // finding's significance; persistence adds little to a coincidence of independent episodes
  // (~10^-6 per leaf and tick for three uplinks over the 10 s window, less again for the fresh
  // two seconds).
  int correlated_fresh_latency_confirm_ticks = 3;
  // ...and such a roll-up is densely confirmed (it fires after `dense_confirm_ticks`, like loss the
  // freshest seconds show on their own) when every one of its evaluations passed that fresh test:
  // the suspicion (the 10 s window at `slow_fraction` and `slow_significance` on those links) and
  // the next evaluation's fresh two seconds, so three seconds of data in which the same links
  // queue at a finding's significance. A short self-induced queue (our own bursts, a second or
  // two) neither lifts the 10 s window over `slow_fraction` nor keeps two overlapping fresh pairs
  // of seconds slow. Off: `correlated_fresh_latency_confirm_ticks` evaluations.
  bool correlated_fresh_latency_dense = true;
  // ...and a switch at least `correlated_latency_links` (and `switch_fraction`) of whose links
  // with data queue on the freshest data alone (latency localized on the last two complete
  // seconds and the tick's own so far, Tomography::LocalizeFreshLatency, at `slow_fraction` and
  // `slow_significance`, at least `min_rtt_samples` samples a link), is a weak lead
  // (ElementTracker::Weak) even while its links' 10 s windows are still under `slow_fraction`: when
  // those windows reach it at the next evaluation and that evaluation passes the dense test, the
  // switch fires then instead of one evaluation later. A queue under ~3 s still never fires: the
  // firing evaluation needs the 10 s windows at `slow_fraction`. Off: the suspicion is the windows'
  // first evaluation.
  bool correlated_fresh_latency_lead = true;
  // Seconds an element must stay good before its finding resolves.
  double recovery_s = 30.0;
  // Flapping: at least `flap_toggles` up/down changes within `flap_window_s`. Three is down, up
  // and down again: a link that failed twice. One outage and its recovery make two.
  int flap_toggles = 3;
  double flap_window_s = 300.0;
  // ...or one outage of at most this long that came back (down, then up: one flap cycle, as
  // switch link-flap detection counts one; IP Infusion OcNOS `errdisable link-flap-setting`:
  // "an interface should change state as up-down to complete one cycle of a link flap", 5 flaps
  // in 10 s by default before it shuts the port). A link that drops for seconds and returns on
  // its own is a flap worth a finding at once; a longer outage that ends is a repair, and stays
  // link_down. 0 turns it off.
  double flap_short_outage_s = 10.0;
  // ... and "returns" means read up, on the link's own probes, in this many consecutive complete
  // seconds (each evaluation reads the last complete one, so the first reading after the return
  // already covers a whole second of it): a link held down whose flows the fabric reroutes (or
  // whose traces lag) can read up for a second between two down seconds, or not be judged at
  // all, and that is no return. Those seconds must hold `flap_return_min_probes` probes on the
  // link between them, else it takes one clean second more (a link losing 35 % reads two seconds
  // of 3 probes each clean with a chance of 7 %, three 2 %; 20 probes at most 10 % lost, < 1.2 %).
  double flap_short_outage_up_s = 2.0;
  double flap_return_min_probes = 20;
  // ... or read up (under 50 % loss) in as many, of which the last is clean from at least
  // `dense_confirm_min_probes` probes on the link: a link comes back within a second, not on
  // its boundary, so the first second it reads up in is partly down; a clean second of dense
  // probes after it shows the link carries its flows again. A link held down whose flows partly
  // reroute loses steadily and reads no clean second: at 35 % loss, 40 probes read at most 10 %
  // lost with a chance of 3·10⁻⁴ (20 probes: 1.2 %, so the count matters).
  bool flap_dense_return = true;
  // ... with at most this loss in each of those seconds: a link held down whose flows partly
  // reroute still loses those the fabric blackholes (a spine that lost its only way to a leaf).
  double flap_return_loss = 0.1;
  // A flapping element resolves only after this long without a toggle.
  double flap_quiet_s = 60.0;

  // --- History
  // ------------------------------------------------------------------------------------ Resolved
  // findings kept in memory (the store keeps more on disk).
  int history_limit = 1000;
};

}  // namespace fw::analysis
