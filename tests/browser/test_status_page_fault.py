#!/usr/bin/env python3
"""The status page shows a real fault (issue 17 part 4): headless Chromium loads GET / from a live
aggregator on the namespace fabric while leaf1~spine1 is down.

The fleet is test_findings.py's (2 spines x 3 leaves x 2 hosts, flows pinned, the harness of
tests/fabric_e2e imported, not copied): every agent connected and probing, the link set down, the
link_down finding on it awaited through the API. Then Chromium runs inside the management
namespace (where the aggregator listens) and the test asserts on the rendered DOM:
  - the findings table has a row of kind link_down located at "link leaf1~spine1";
  - the matrix cell of leaf1 x spine1 carries the link id and the class state-down, and no other
    leaf x spine cell is red;
  - every host of the fabric is in the node table, and the summary line counts the finding.
The screenshot (1280x900) is saved as FW_ARTIFACT_DIR/status_page_fault.png.

Needs root (exits 77 without it, or without chromium). Run: python3 test_status_page_fault.py -v
"""

import os
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "fabric_e2e"))
import browser  # noqa: E402
import fwe2e  # noqa: E402
import test_findings  # noqa: E402

LINK = test_findings.LINK
LEAF, SPINE = LINK.split("~")
# Link down needs loss only, no RTT baseline (test_findings.LinkDownTest waits 40 s for the
# pinned plan to settle and the analyzer to see every flow once); 25 s is the shortest that
# keeps the rest of the fabric clear of findings before the fault.
BASELINE_S = 25


class StatusPageChecks:
    """The page's checks, for a FindingsCase while LINK is down and its link_down finding active."""

    def browser_missing(self):
        """None when Chromium is here (and sets the artifact folder), else why not."""
        try:
            browser.chromium_path()
        except browser.NoBrowser as e:
            return str(e)
        self.artifacts = os.environ.get("FW_ARTIFACT_DIR") or tempfile.gettempdir()
        os.makedirs(self.artifacts, exist_ok=True)
        return None

    def load(self, run, url, what):
        """The page's DOM once its script rendered from the API (retried once on a slow load)."""
        ns = run.fab.ns("mgmt")
        for attempt in range(2):
            t0 = time.monotonic()
            dom = browser.dump_dom(url, budget_ms=5000, netns=ns, timeout=90)
            tree = browser.parse(dom)
            root = tree.find("html")
            if root is not None and int(root.attrs.get("data-fw-refreshes", "0")) >= 1:
                print(f"  {what}: DOM of {len(dom)} bytes in {time.monotonic() - t0:.1f} s",
                      file=sys.stderr)
                return dom, tree
        self.fail(f"status_page.js did not render at {url}:\n{dom[:2000]}")

    def check_page(self, run, finding):
        url = run.base + "/"
        dom, tree = self.load(run, url, "status page")
        root = tree.find("html")
        self.assertEqual(root.attrs.get("data-fw-errors"), "0",
                         "the page reported API errors: " + tree.find(id="error").text())

        # The finding, in the findings table, with its kind and the link id.
        rows = [r for r in tree.find(id="findings").find("tbody").find_all("tr")
                if r.attrs.get("data-kind") == "link_down"]
        locations = [r.find("td", class_="location").text() for r in rows]
        self.assertIn(f"link {LINK}", locations,
                      f"no link_down row at link {LINK}; findings rows: "
                      + repr([(r.attrs.get("data-kind"), r.find("td", class_="location").text())
                              for r in tree.find(id="findings").find_all("tr")
                              if r.find("td", class_="location")][:12]))
        row = rows[locations.index(f"link {LINK}")]
        self.assertEqual(row.attrs.get("data-id"), finding["id"])
        self.assertIn("sev-" + finding["severity"], row.classes)
        # The summary is live (its loss figures move every tick): it names the link, as the API's.
        summary = row.find("td", class_="summary").children[0]
        self.assertIn(LINK, summary)
        self.assertEqual(summary.split(":")[0], finding["summary"].split(":")[0])

        # The matrix: the faulty link's cell is red (state-down), the others are not.
        matrix = tree.find(id="matrix")
        cells = {c.attrs["data-link"]: c for c in matrix.find_all("td", class_="cell")
                 if "data-link" in c.attrs}
        fabric_links = {lk.id for lk in run.fab.links.values() if lk.kind == "fabric"}
        self.assertEqual(set(cells), fabric_links, "matrix cells vs the fabric's leaf~spine links")
        cell = cells[LINK]
        self.assertIn("state-down", cell.classes, f"{LINK} cell: {cell.attrs}")
        self.assertEqual(cell.text(), "down")
        self.assertTrue(cell.attrs.get("title", "").startswith(f"{LINK}: down"), cell.attrs)
        # Its row is leaf1 and its column spine1.
        tr = cell.parent
        self.assertEqual(tr.find("th").text(), LEAF)
        header = [th.text() for th in matrix.find("thead").find_all("th")]
        self.assertEqual(header[[c for c in tr.children if hasattr(c, "tag")].index(cell)], SPINE)
        red = sorted(k for k, c in cells.items() if c.classes & {"state-down", "state-flapping"})
        self.assertEqual(red, [LINK], "red cells in the matrix")

        # Every host is listed, and the summary counts active findings.
        names = {r.attrs.get("data-node") for r in tree.find(id="nodes").find("tbody")
                 .find_all("tr")}
        self.assertEqual(names, set(run.fab.hosts))
        self.assertRegex(tree.find(id="summary").text(), r"\d+ active findings? \(\d+ critical\)"
                         if finding["severity"] == "critical" else r"\d+ active finding")

        shot = browser.screenshot(url, os.path.join(self.artifacts, "status_page_fault.png"),
                                  netns=run.fab.ns("mgmt"), budget_ms=5000, timeout=90)
        print(f"  {LINK} cell {sorted(cell.classes)}, finding {finding['kind']} "
              f"({finding['severity']}); screenshot {shot}", file=sys.stderr)


class StatusPageFaultTest(StatusPageChecks, test_findings.FindingsCase):
    """The page on a fabric of its own (direct runs; ctest runs DropLinkDownFlapPageTest)."""

    def setUp(self):
        missing = self.browser_missing()
        if missing:
            self.skipTest(missing)

    def test_link_down_shows_in_the_findings_and_the_matrix(self):
        with self.fabric() as run:
            self.start(run, baseline_s=BASELINE_S)
            fault = run.fab.link_down(LINK)
            try:
                finding, took = self.wait_finding(run, {"link_down"})
                self.assert_link_state(run, LINK, {"down"})
                self.check_page(run, finding)
            finally:
                fault.undo()
                run.pinning.refresh()


class DropLinkDownFlapPageTest(StatusPageChecks, test_findings.DropLinkDownFlapTest):
    """ctest fabric_e2e_findings_drop_down_flap: test_findings' drop, link down and flap on one
    fabric, and while the link is down (after the drop resolved) the page checks above, as
    StatusPageFaultTest makes them. That saves the page test's own fabric, warm-up (25 s, the same
    as this fabric's) and resolution. Without Chromium the page is left out with a note and the
    findings are still checked."""

    def setUp(self):
        self.no_browser = self.browser_missing()

    def while_link_down(self, run, finding):
        if self.no_browser:
            print(f"  status page not checked: {self.no_browser}", file=sys.stderr)
            return
        self.check_page(run, finding)


if __name__ == "__main__":
    fwe2e.main()
