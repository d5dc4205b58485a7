"""Network-namespace primitives for the test fabric: commands, namespaces, per-PID processes."""

import ctypes
import ctypes.util
import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
# A prefix names one fabric run: letters, digits, '_' or '.', ending in '-' so that "fw12-"
# never matches the namespaces of run "fw123-".
PREFIX_RE = re.compile(r"^[A-Za-z0-9_.]{2,40}-$")


class FabricError(Exception):
    """A fabric operation failed; the message says what to do about it."""


class NeedRoot(FabricError):
    """The caller lacks the privileges network namespaces need."""


def check_privileges():
    """Raises NeedRoot unless this process can create network namespaces."""
    if os.geteuid() != 0:
        raise NeedRoot("the test fabric needs root (network namespaces, veth, tc, nftables); "
                       "run as root, as CI does")
    for tool in ("ip", "tc", "nft"):
        if shutil.which(tool) is None:
            raise NeedRoot(f"'{tool}' is not on PATH; install iproute2 and nftables")


def sh(argv, *, input=None, timeout=30, check=True):
    """Runs argv (no shell) and returns the CompletedProcess; raises FabricError on failure."""
    try:
        cp = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FabricError(f"'{' '.join(argv)}' did not finish within {timeout} s") from None
    except OSError as e:
        raise FabricError(f"cannot run '{argv[0]}': {e}") from None
    if check and cp.returncode != 0:
        cmd = " ".join(argv)
        if input:
            cmd += f" <<< {input.strip()[:400]!r}"
        raise FabricError(f"'{cmd}' failed (exit {cp.returncode}): {cp.stderr.strip()}")
    return cp


def ip_batch(lines, ns=None, force=False):
    """Runs iproute2 commands in one 'ip -batch' process (inside ns when given)."""
    if not lines:
        return
    argv = ["ip"] + (["-n", ns] if ns else []) + (["-force"] if force else []) + ["-batch", "-"]
    sh(argv, input="\n".join(lines) + "\n", check=not force)


# Held while namespaces are added. The first 'ip netns add' on a machine makes NETNS_RUN_DIR a
# shared bind mount of itself; two runs doing that at once (scripts/test runs two fabric tests at a
# time) can stack two mounts, and the namespace files bound under the lower one disappear from
# view. One 'ip netns add' batch at a time keeps that first step single.
CREATE_LOCK = "/run/fw-fabric-netns.lock"


def add_namespaces(names):
    """Creates the named network namespaces in one 'ip -batch', one creator at a time."""
    try:
        lock = os.open(CREATE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise FabricError(f"cannot open {CREATE_LOCK}: {e}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ip_batch([f"netns add {n}" for n in names])
    finally:
        os.close(lock)  # releases the lock


def list_namespaces(prefix=""):
    """Names of the named network namespaces that start with prefix."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def namespace_pids(ns):
    """PIDs of the processes whose network namespace is ns."""
    cp = sh(["ip", "netns", "pids", ns], check=False)
    if cp.returncode != 0:
        return []
    return [int(p) for p in cp.stdout.split() if p.isdigit()]


def _pid_alive(pid):
    """True while pid runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def terminate_pid(pid, grace=3.0, popen=None):
    """SIGTERM, then SIGKILL after grace seconds, for one PID. Returns True when it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return True
        elif not _pid_alive(pid):
            return True
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    if popen is not None:
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.02)
    return not _pid_alive(pid)


def delete_namespaces(names):
    """Ends the processes inside each namespace by PID, then deletes the namespaces.

    Only namespaces this harness created (by prefix) may be passed here: the processes in them were
    started by the harness or by processes it started. Returns the names that could not be deleted.
    """
    for ns in names:
        for pid in namespace_pids(ns):
            if pid != os.getpid():
                terminate_pid(pid, grace=2.0)
    ip_batch([f"netns del {ns}" for ns in names], force=True)
    return [n for n in names if os.path.exists(os.path.join(NETNS_DIR, n))]


def cleanup_prefix(prefix, remove_logs=True):
    """Deletes every namespace whose name starts with prefix, and that run's temporary log
    directory. Returns (deleted namespaces, namespaces left)."""
    if not PREFIX_RE.match(prefix):
        raise FabricError(f"refusing prefix {prefix!r}: it must look like 'fw1234-' "
                          "(2-40 letters, digits, '_' or '.', then '-')")
    names = list_namespaces(prefix)
    left = delete_namespaces(names)
    # The default log directory of that run (tempfile.mkdtemp(prefix=prefix + "logs-")).
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp) if remove_logs else []:
        if d.startswith(prefix + "logs-") and os.path.isdir(os.path.join(tmp, d)):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
    return [n for n in names if n not in left], left


AUTO_PREFIX_RE = re.compile(r"^(fw(\d+)(?:x\d+)?-)")


def stale_prefixes():
    """Automatic prefixes (fw<pid>- or fw<pid>x<n>-) whose creating process no longer runs: what a
    run killed by SIGKILL (e.g. a ctest timeout) left behind."""
    out = set()
    for n in list_namespaces("fw"):
        m = AUTO_PREFIX_RE.match(n)
        if m and not _pid_alive(int(m.group(2))):
            out.add(m.group(1))
    return sorted(out)


_libc = None


def _setns_current_thread(ns):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise FabricError(f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def call_in_namespace(ns, fn, *args, timeout=120, **kwargs):
    """Calls fn(*args, **kwargs) on a fresh thread that has joined network namespace ns.

    setns(CLONE_NEWNET) moves only the calling thread, so sockets fn opens live in ns while the rest
    of the process stays where it was. The thread ends with fn, so no other code runs in ns.
    """
    box = {}

    def body():
        try:
            _setns_current_thread(ns)
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    t = threading.Thread(target=body, name=f"netns-{ns}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise FabricError(f"call in namespace {ns} did not finish within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class Proc:
    """A process started inside a namespace; pid is the process itself ('ip netns exec' execs)."""

    def __init__(self, node, ns, argv, popen, log_path):
        self.node = node
        self.ns = ns
        self.argv = argv
        self.popen = popen
        self.pid = popen.pid
        self.log_path = log_path

    def running(self):
        return self.popen.poll() is None

    def log(self):
        """The process's stdout and stderr so far."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def __repr__(self):
        return f"Proc(node={self.node}, pid={self.pid}, argv={self.argv[:3]}...)"


class ProcessTable:
    """Processes started in namespaces, tracked by PID and stopped by PID."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self._procs = []
        self._lock = threading.Lock()
        self._seq = 0

    def spawn(self, node, ns, argv, env=None, name=None):
        with self._lock:
            self._seq += 1
            seq = self._seq
        base = os.path.basename(str(argv[0]))
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", name or base)
        log_path = os.path.join(self.log_dir, f"{node}-{label}-{seq}.log")
        try:
            log = open(log_path, "wb")
        except OSError as e:
            raise FabricError(f"cannot create log {log_path}: {e}") from None
        try:
            popen = subprocess.Popen(["ip", "netns", "exec", ns] + [str(a) for a in argv],
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as e:
            raise FabricError(f"cannot start {argv[0]} in {ns}: {e}") from None
        finally:
            log.close()
        proc = Proc(node, ns, list(argv), popen, log_path)
        with self._lock:
            self._procs.append(proc)
        return proc

    def stop(self, proc, grace=3.0):
        """Stops one process by PID (SIGTERM, then SIGKILL). Returns its exit code."""
        if proc.running():
            terminate_pid(proc.pid, grace=grace, popen=proc.popen)
        with self._lock:
            if proc in self._procs:
                self._procs.remove(proc)
        return proc.popen.returncode

    def stop_all(self, grace=3.0):
        """Stops every process by PID: SIGTERM to all of them (newest first), then SIGKILL to any
        still running after grace seconds. They shut down together, so a teardown costs the
        slowest exit once instead of the sum of every exit (a fabric's agents take 0.1-2 s each
        under load)."""
        with self._lock:
            procs = list(reversed(self._procs))
        for p in procs:
            if p.running():
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.running() for p in procs):
            time.sleep(0.02)
        for p in procs:
            self.stop(p, grace=0.0)  # SIGKILL for what is left; forgets the rest

    def all(self):
        with self._lock:
            return list(self._procs)
