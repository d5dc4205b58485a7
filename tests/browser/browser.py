"""Headless Chromium for the status page tests: load a URL, return the rendered DOM or save a
screenshot, and a small DOM tree (stdlib html.parser) to query what was rendered.

    dom = browser.dump_dom(url)                       # the DOM after the page's scripts ran
    browser.screenshot(url, "/tmp/page.png")
    tree = browser.parse(dom)
    row = tree.find(id="nodes").find_all("tr")[1]

Chromium runs as its own process group with a temporary profile, and is killed by that group's
id when it overruns. As root it needs --no-sandbox (tests only). `netns` runs it inside a network
namespace (ip netns exec), for pages served on the namespace fabric.
"""

import html.parser
import os
import shutil
import signal
import subprocess
import tempfile

SKIP = 77
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


class NoBrowser(Exception):
    """No headless Chromium here; the test exits 77 (ctest SKIP)."""


def chromium_path():
    env = os.environ.get("FW_CHROMIUM")
    if env:
        return env
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise NoBrowser("no chromium on PATH (scripts/setup installs Debian's chromium; or set "
                    "FW_CHROMIUM)")


def _run(url, args, netns=None, timeout=60):
    """Runs headless chromium on url with extra args; returns (stdout, stderr)."""
    profile = tempfile.mkdtemp(prefix="fw-chromium-")
    argv = [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--metrics-recording-only", "--mute-audio", "--hide-scrollbars",
            f"--user-data-dir={profile}"] + list(args) + [url]
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call created, by its id
        out, err = proc.communicate()
        raise AssertionError(f"chromium did not finish within {timeout} s on {url}:\n"
                             f"{err[-2000:]}") from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers (zygote, renderers) left behind
        except ProcessLookupError:
            pass
        shutil.rmtree(profile, ignore_errors=True)
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode} on {url}:\n{err[-2000:]}")
    return out, err


def dump_dom(url, budget_ms=4000, netns=None, timeout=60):
    """The serialized DOM once `budget_ms` of virtual time has passed (fetches complete first)."""
    out, _ = _run(url, [f"--virtual-time-budget={budget_ms}", "--dump-dom"], netns, timeout)
    return out


def screenshot(url, path, width=1280, height=900, budget_ms=4000, netns=None, timeout=60):
    """Saves a PNG of the rendered page; fails when chromium wrote none."""
    if os.path.exists(path):
        os.unlink(path)
    _run(url, [f"--virtual-time-budget={budget_ms}", f"--window-size={width},{height}",
               f"--screenshot={path}"], netns, timeout)
    if not os.path.exists(path) or os.path.getsize(path) < 1000:
        raise AssertionError(f"chromium wrote no screenshot to {path}")
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            raise AssertionError(f"{path} is not a PNG")
    return path


# ---------------------------------------------------------------------- a small DOM tree

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Element:
    def __init__(self, tag, attrs, parent=None):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parent = parent
        self.children = []  # Element or str (decoded text)

    @property
    def classes(self):
        return set((self.attrs.get("class") or "").split())

    def text(self):
        """The decoded text of this element and its descendants, as the user reads it."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Element):
                yield from c.iter()

    def find_all(self, tag=None, **attrs):
        """Descendants (and self) with this tag and these attribute values; class_ matches one
        class name."""
        cls = attrs.pop("class_", None)
        out = []
        for e in self.iter():
            if tag and e.tag != tag:
                continue
            if cls and cls not in e.classes:
                continue
            if all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(e)
        return out

    def find(self, tag=None, **attrs):
        found = self.find_all(tag, **attrs)
        return found[0] if found else None

    def __repr__(self):
        return f"<{self.tag} {self.attrs}>"


class _Builder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, self.cur)
        self.cur.children.append(e)
        if tag not in VOID:
            self.cur = e

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Element(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        e = self.cur
        while e is not self.root and e.tag != tag:
            e = e.parent
        if e is not self.root:
            self.cur = e.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(dom_text):
    b = _Builder()
    b.feed(dom_text)
    b.close()
    return b.root


def table_rows(table):
    """[[cell text, ...], ...] of a table's body rows (th/td), and the row elements."""
    body = table.find("tbody") or table
    rows = [r for r in body.find_all("tr")]
    return [[c.text().strip() for c in r.children if isinstance(c, Element)
             and c.tag in ("td", "th")] for r in rows], rows
