// Bisection state machine (see bisection.h for the search).
#include "daemon/aggregator/collective/bisection.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "daemon/aggregator/collective/arrivals.h"

namespace fw::aggregator::collective {
namespace {

std::vector<std::string> LeavesOf(const std::vector<Member>& ms) {
  std::vector<std::string> leaves;
  for (const Member& m : ms) {
    if (std::find(leaves.begin(), leaves.end(), m.leaf) == leaves.end()) leaves.push_back(m.leaf);
  }
  return leaves;
}

std::vector<Member> OnLeaf(const std::vector<Member>& ms, const std::string& leaf) {
  std::vector<Member> out;
  for (const Member& m : ms) {
    if (m.leaf == leaf) out.push_back(m);
  }
  return out;
}

}  // namespace

std::string Culprit::Location() const {
  if (kind == Kind::kNode) return "node " + node;
  return "link " + leaf_a + "-" + (leaf_b.empty() ? std::string("spine") : leaf_b);
}

std::string Culprit::Detail() const {
  if (late_iterations == 0) return "";
  return fmt::format("arrives {:.1f} ms late in {} of {} iterations", late_s * 1e3, late_iterations,
                     iterations);
}

Bisection::Bisection(std::vector<Member> group, double measured, double expected,
                     std::vector<Member> known_good, BisectionConfig config)
    : measured_(measured),
      expected_(expected),
      known_good_(std::move(known_good)),
      config_(config) {
  if (group.size() == 1) {
    // A group of one node (its GPUs, NVLink and PCIe): that node drags it; nothing to split.
    Culprit c;
    c.node = group.front().name;
    c.cause = "slow GPUs or GPU links inside the node";
    c.measured_busbw = measured;
    c.expected_busbw = expected;
    AddCulprit(std::move(c));
    return;
  }
  if (group.empty()) {
    inconclusive_ = true;
    return;
  }
  StartSplit(group);
}

bool Bisection::Slow(const SubgroupResult& r) const {
  return r.failed || r.busbw_bytes_per_s < config_.slow_ratio * expected_;
}

const Member* Bisection::Partner(const std::string& leaf) const {
  for (const Member& m : known_good_) {
    if (m.leaf == leaf) return &m;
  }
  return nullptr;
}

const Member* Bisection::ReferenceOutside(const std::string& leaf_a,
                                          const std::string& leaf_b) const {
  for (const Member& m : known_good_) {
    if (m.leaf != leaf_a && m.leaf != leaf_b) return &m;
  }
  return nullptr;
}

uint64_t Bisection::Ask(std::vector<Member> members) {
  if (runs_ >= config_.max_runs) {
    inconclusive_ = true;
    return 0;
  }
  ++runs_;
  pending_.push_back({next_id_, std::move(members)});
  return next_id_++;
}

void Bisection::AddTask(Task t) {
  t.results.resize(t.sides.size());
  t.late.resize(t.sides.size());
  // A side that could not be run counts as answered (and not slow).
  for (uint64_t id : t.runs) t.answered += id == 0 ? 1 : 0;
  if (t.answered == t.sides.size()) {
    Resolve(t);
    return;
  }
  tasks_.push_back(std::move(t));
}

void Bisection::StartSplit(const std::vector<Member>& slow) {
  Task t;
  t.kind = TaskKind::kSplit;
  const std::vector<std::string> leaves = LeavesOf(slow);
  std::vector<Member> a, b;
  if (leaves.size() > 1) {
    // Whole leaves to the first half until it holds about half of the members.
    for (const std::string& leaf : leaves) {
      std::vector<Member> ms = OnLeaf(slow, leaf);
      auto& half = (a.size() * 2 < slow.size() && &leaf != &leaves.back()) ? a : b;
      half.insert(half.end(), ms.begin(), ms.end());
    }
  } else {
    a.assign(slow.begin(), slow.begin() + static_cast<long>(slow.size() / 2));
    b.assign(slow.begin() + static_cast<long>(slow.size() / 2), slow.end());
  }
  for (auto* side : {&a, &b}) {
    std::vector<Member> run = *side;
    if (run.size() == 1) {
      // One member cannot run alone: pair it with a known-good member of its leaf. A partner on
      // another leaf would add the path between the leaves, and a slow run would blame the member
      // for that path. Without a leaf-mate the side is not run here (it counts as fine): if the
      // other half is fine too, the leaf-pair scan tests the member's leaf against the others.
      const Member* p = Partner(run[0].leaf);
      if (p == nullptr) {
        t.sides.push_back(*side);
        t.runs.push_back(0);
        continue;
      }
      run.push_back(*p);
    }
    t.sides.push_back(*side);
    t.runs.push_back(Ask(std::move(run)));
  }
  AddTask(std::move(t));
}

void Bisection::StartPairScan(const std::vector<Member>& a, const std::vector<Member>& b) {
  Task t;
  t.kind = TaskKind::kPairScan;
  for (const std::string& la : LeavesOf(a)) {
    for (const std::string& lb : LeavesOf(b)) {
      std::vector<Member> run = OnLeaf(a, la);
      std::vector<Member> other = OnLeaf(b, lb);
      run.insert(run.end(), other.begin(), other.end());
      t.sides.push_back(run);
      t.runs.push_back(Ask(std::move(run)));
    }
  }
  AddTask(std::move(t));
}

void Bisection::StartLeafLink(const std::vector<Member>& a, const std::vector<Member>& b) {
  const Member* ref = ReferenceOutside(a.front().leaf, b.front().leaf);
  if (ref == nullptr) {
    Culprit c;
    c.kind = Culprit::Kind::kLink;
    c.leaf_a = a.front().leaf;
    c.leaf_b = b.front().leaf;
    c.cause = "leaf pair";
    c.measured_busbw = measured_;
    c.expected_busbw = expected_;
    culprits_.push_back(std::move(c));
    return;
  }
  Task t;
  t.kind = TaskKind::kLeafLink;
  for (const auto* side : {&a, &b}) {
    std::vector<Member> run = *side;
    run.push_back(*ref);
    t.sides.push_back(*side);
    t.runs.push_back(Ask(std::move(run)));
  }
  AddTask(std::move(t));
}

Culprit Bisection::NodeCulprit(const Member& m, const SubgroupResult& r, bool late) const {
  Culprit c;
  c.node = m.name;
  c.cause = late ? "late host" : "slow host link or NIC";
  c.measured_busbw = r.busbw_bytes_per_s;
  c.expected_busbw = expected_;
  if (late) {
    const LateTally& t = tallies_.at(m.name);
    c.late_s = MedianOf(t.lateness_s);
    c.late_iterations = t.late;
    c.iterations = t.iterations;
  }
  return c;
}

std::string Bisection::TallyLate(const std::vector<Member>& run, const SubgroupResult& r) {
  const size_t iters = r.late_s.size() == run.size() ? r.late_s.front().size() : 0;
  for (const std::vector<double>& l : r.late_s) {
    if (l.size() != iters) return "";  // not one run's times
  }
  if (iters == 0) return "";
  // The run's excess over the time its busbw would take at the expected rate; a late host's
  // lateness accounts for it, a slow link's run has it with everyone on time.
  double excess = 0;
  if (!r.failed && r.busbw_bytes_per_s > 0 && expected_ > 0) {
    excess = r.group_seconds * (1 - r.busbw_bytes_per_s / expected_);
  }
  std::vector<int> late(run.size(), 0);
  for (size_t i = 0; i < iters; ++i) {
    size_t last = 0;
    for (size_t m = 1; m < run.size(); ++m) {
      if (r.late_s[m][i] > r.late_s[last][i]) last = m;
    }
    if (excess > 0 && r.late_s[last][i] >= config_.late_share * excess) {
      ++late[last];
      tallies_[run[last].name].lateness_s.push_back(r.late_s[last][i]);
    }
  }
  std::string named;
  for (size_t m = 0; m < run.size(); ++m) {
    LateTally& t = tallies_[run[m].name];
    t.late += late[m];
    t.iterations += static_cast<int>(iters);
    const bool here = late[m] >= config_.late_iterations * static_cast<double>(iters);
    const bool everywhere = t.late >= config_.late_iterations * t.iterations;
    if (here && everywhere && late[m] > 0) named = run[m].name;
  }
  return named;
}

void Bisection::AddCulprit(Culprit c) {
  // A late host shows in every run that holds it: one culprit however many named it.
  for (const Culprit& have : culprits_) {
    if (have.Location() == c.Location()) return;
  }
  culprits_.push_back(std::move(c));
}

const Member* Bisection::LateIn(const std::vector<Member>& side, const std::string& late) {
  if (late.empty()) return nullptr;
  auto it = std::find_if(side.begin(), side.end(), [&](const Member& m) { return m.name == late; });
  return it == side.end() ? nullptr : &*it;
}

void Bisection::OnResult(uint64_t run_id, const SubgroupResult& result) {
  auto p =
      std::find_if(pending_.begin(), pending_.end(), [&](const Run& r) { return r.id == run_id; });
  if (p == pending_.end()) return;
  const std::string late = TallyLate(p->members, result);
  pending_.erase(p);
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& t = tasks_[i];
    auto it = std::find(t.runs.begin(), t.runs.end(), run_id);
    if (it == t.runs.end()) continue;
    t.results[static_cast<size_t>(it - t.runs.begin())] = result;
    t.late[static_cast<size_t>(it - t.runs.begin())] = late;
    if (++t.answered < t.sides.size()) return;
    Task done = std::move(t);
    tasks_.erase(tasks_.begin() + static_cast<long>(i));
    Resolve(done);
    return;
  }
}

void Bisection::Resolve(const Task& t) {
  std::vector<bool> slow(t.sides.size(), false);
  for (size_t i = 0; i < t.sides.size(); ++i) slow[i] = t.runs[i] != 0 && Slow(t.results[i]);
  const size_t slow_count = static_cast<size_t>(std::count(slow.begin(), slow.end(), true));
  switch (t.kind) {
    case TaskKind::kSplit: {
      for (size_t i = 0; i < t.sides.size(); ++i) {
        if (!slow[i]) continue;
        if (const Member* late = LateIn(t.sides[i], t.late[i])) {
          AddCulprit(NodeCulprit(*late, t.results[i], true));
        } else if (t.sides[i].size() == 1) {
          culprits_.push_back(NodeCulprit(t.sides[i][0], t.results[i], false));
        } else {
          StartSplit(t.sides[i]);
        }
      }
      if (slow_count > 0 || t.sides.size() != 2) return;
      // Both halves fine: what is slow lies between them.
      const auto la = LeavesOf(t.sides[0]);
      const auto lb = LeavesOf(t.sides[1]);
      if (la.size() == 1 && lb.size() == 1 && la[0] != lb[0]) {
        StartLeafLink(t.sides[0], t.sides[1]);
      } else if (la != lb) {
        StartPairScan(t.sides[0], t.sides[1]);
      } else {
        inconclusive_ = true;  // two fine halves of one leaf: nothing narrower to test
      }
      return;
    }
    case TaskKind::kPairScan:
      for (size_t i = 0; i < t.sides.size(); ++i) {
        if (!slow[i]) continue;
        if (const Member* late = LateIn(t.sides[i], t.late[i])) {
          AddCulprit(NodeCulprit(*late, t.results[i], true));
          continue;
        }
        const auto leaves = LeavesOf(t.sides[i]);
        StartLeafLink(OnLeaf(t.sides[i], leaves[0]), OnLeaf(t.sides[i], leaves[1]));
      }
      if (slow_count == 0) inconclusive_ = true;
      return;
    case TaskKind::kLeafLink: {
      bool named = false;
      for (size_t i = 0; i < t.sides.size(); ++i) {
        const Member* late = slow[i] ? LateIn(t.sides[i], t.late[i]) : nullptr;
        if (late != nullptr) AddCulprit(NodeCulprit(*late, t.results[i], true));
        named |= late != nullptr;
      }
      if (named) return;
      Culprit c;
      c.kind = Culprit::Kind::kLink;
      c.expected_busbw = expected_;
      if (slow_count == 1) {
        const size_t i = slow[0] ? 0 : 1;
        c.leaf_a = t.sides[i].front().leaf;
        c.cause = "leaf uplink";
        c.measured_busbw = t.results[i].busbw_bytes_per_s;
      } else {
        c.leaf_a = t.sides[0].front().leaf;
        c.leaf_b = t.sides[1].front().leaf;
        c.cause = "leaf pair";
        c.measured_busbw = measured_;
      }
      culprits_.push_back(std::move(c));
      return;
    }
  }
}

}  // namespace fw::aggregator::collective
