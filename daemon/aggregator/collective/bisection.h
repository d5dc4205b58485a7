// Bisection of a slow collective group down to the member or link that drags it. A state machine:
// it names the subgroups to run next, takes their results as they arrive (the aggregator runs them
// as collective jobs), and ends at culprits. Pure logic, no I/O, so a simulated fabric tests it.
//
// The search: split the slow set in halves along leaf lines (members of one leaf stay together),
// or by members within one leaf, and rerun each half. A slow half is split again; a half of one
// member is rerun paired with a known-good member of the same leaf. When both halves are fine the
// slowness lives between them: each side's leaf is rerun with a known-good leaf, which names one
// leaf's uplink or, failing that, the leaf pair.
//
// Per-rank arrivals tell a late host from a slow link: a run is slow by its excess time over what
// the expected busbw implies; a member that arrives last, by at least late_share of that excess,
// in at least late_iterations of the run's iterations and of all the iterations of every run it
// was in ("late everywhere") is a late host. It is named at once, on any slow run (a split half,
// a leaf-pair or leaf-uplink run), instead of the half being split further or a link being
// blamed. A host that arrives on time while its runs are slow is a slow host link or NIC.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fw::aggregator::collective {

struct Member {
  std::string name;  // node, or node/gpuN for a GPU
  std::string leaf;  // from the fabric map; empty when unknown
  int rail = 0;
};

struct SubgroupResult {
  double busbw_bytes_per_s = 0;
  double group_seconds = 0;  // median group time: first arrival to last exit (AlignArrivals)
  // late_s[m][i]: how long after the first member member m arrived in iteration i, members in the
  // order of the run's members (AlignArrivals). Empty when the run reported no times.
  std::vector<std::vector<double>> late_s;
  bool failed = false;  // the run did not complete (counts as slow)
};

struct BisectionConfig {
  double slow_ratio = 0.90;  // slow: busbw below this fraction of the expected
  // Late in an iteration: the last to arrive, by at least this share of the run's excess time.
  double late_share = 0.5;
  // A late host: late in at least this fraction of a slow run's iterations, and of all the
  // iterations of the runs it was in.
  double late_iterations = 0.5;
  int max_runs = 64;  // a search that needs more ends inconclusive
};

struct Culprit {
  enum class Kind { kNode, kLink };
  Kind kind = Kind::kNode;
  std::string node;    // kNode
  std::string leaf_a;  // kLink: a leaf's uplink (leaf_b empty) or the pair leaf_a - leaf_b
  std::string leaf_b;
  // "late host", "slow host link or NIC", "leaf uplink", "leaf pair", and for a group of one
  // node's GPUs "slow GPUs or GPU links inside the node"
  std::string cause;
  double measured_busbw = 0;
  double expected_busbw = 0;
  // A late host: its median lateness over the iterations it was late in, and how many of the
  // iterations of the runs it was in those were.
  double late_s = 0;
  int late_iterations = 0;
  int iterations = 0;
  std::string Location() const;  // "node h3", "link leaf2-spine", "link leaf2-leaf3"
  // "arrives 5.0 ms late in 18 of 20 iterations" for a late host; empty otherwise.
  std::string Detail() const;
};

class Bisection {
 public:
  struct Run {
    uint64_t id = 0;
    std::vector<Member> members;
  };

  // `group` was measured slow at `measured` against `expected` busbw. `known_good` are members of
  // groups that are healthy now, used as partners and reference leaves. A group of one member
  // (all GPUs of a node) ends at once at that member.
  Bisection(std::vector<Member> group, double measured, double expected,
            std::vector<Member> known_good, BisectionConfig config = {});

  // Runs asked for and not answered yet. Empty once done().
  const std::vector<Run>& pending() const { return pending_; }
  // The result of a pending run; unknown ids are ignored.
  void OnResult(uint64_t run_id, const SubgroupResult& result);

  bool done() const { return pending_.empty(); }
  const std::vector<Culprit>& culprits() const { return culprits_; }
  // True when it ended without a culprit for some slow part (run budget, nothing to compare with).
  bool inconclusive() const { return inconclusive_; }
  int runs() const { return runs_; }

 private:
  // kSplit: two halves of a slow set. kPairScan: leaf pairs across two fine halves. kLeafLink: the
  // two leaves of a slow pair, each rerun with a known-good reference leaf.
  enum class TaskKind { kSplit, kPairScan, kLeafLink };
  struct Task {
    TaskKind kind = TaskKind::kSplit;
    std::vector<std::vector<Member>> sides;  // what each run tests (without partners)
    std::vector<uint64_t> runs;              // one per side; 0 where a side cannot be run
    std::vector<SubgroupResult> results;
    std::vector<std::string> late;  // per side: the late host of its run, or empty
    size_t answered = 0;
  };
  // Each member's late iterations over every run it was in.
  struct LateTally {
    int late = 0;
    int iterations = 0;
    std::vector<double> lateness_s;  // in its late iterations
  };

  void StartSplit(const std::vector<Member>& slow);
  void StartPairScan(const std::vector<Member>& a, const std::vector<Member>& b);
  void StartLeafLink(const std::vector<Member>& a, const std::vector<Member>& b);
  void AddTask(Task t);
  uint64_t Ask(std::vector<Member> members);
  void Resolve(const Task& t);
  bool Slow(const SubgroupResult& r) const;
  // A known-good member on `leaf`; null when there is none (see StartSplit).
  const Member* Partner(const std::string& leaf) const;
  // A known-good member on neither leaf; null when there is none.
  const Member* ReferenceOutside(const std::string& leaf_a, const std::string& leaf_b) const;
  Culprit NodeCulprit(const Member& m, const SubgroupResult& r, bool late) const;
  // Adds the run's iterations to its members' tallies; returns the member that is a late host by
  // this run and its tally (see the top of this file), or empty.
  std::string TallyLate(const std::vector<Member>& run, const SubgroupResult& r);
  void AddCulprit(Culprit c);  // once per location
  // The member of `side` named late by its run, or null.
  static const Member* LateIn(const std::vector<Member>& side, const std::string& late);

  const double measured_;
  const double expected_;
  const std::vector<Member> known_good_;
  const BisectionConfig config_;
  std::vector<Run> pending_;
  std::vector<Task> tasks_;
  std::vector<Culprit> culprits_;
  std::map<std::string, LateTally> tallies_;  // by member name
  uint64_t next_id_ = 1;
  int runs_ = 0;
  bool inconclusive_ = false;
};

}  // namespace fw::aggregator::collective
