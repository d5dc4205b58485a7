"""Bounded traffic tools for the test fabric: echo responder, UDP blaster and sink, and clients.

The servers run as processes inside a namespace (python3 traffic.py serve|blast|sink ...); the
client functions (udp_flows, tcp_goodput, http_get) are plain socket code that the fabric calls on
a thread that has joined a host's namespace. Every loop here ends by a deadline.
"""

import argparse
import errno
import json
import selectors
import signal
import socket
import struct
import sys
import time
import urllib.request

MAX_SECONDS = 3600.0  # no server or load loop outlives this
_PROBE = struct.Struct("!IIQ")  # magic, flow index, sequence
_MAGIC = 0x46574642  # "FWFB"
_COUNT = struct.Struct("!Q")
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def _big_rcvbuf(sock, size=4 << 20):
    """Deep receive buffers so that a descheduled process does not turn into measured loss."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


# ---------------------------------------------------------------- servers (run as processes)


def serve(udp_port, tcp_port, seconds, bind="0.0.0.0"):
    """UDP echo (a reply is never larger than its request) and a TCP byte counter.

    A TCP client sends bytes, shuts down its write side, and reads back the 8-byte count.
    """
    deadline = time.monotonic() + min(seconds, MAX_SECONDS)
    sel = selectors.DefaultSelector()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _big_rcvbuf(udp)
    udp.bind((bind, udp_port))
    udp.setblocking(False)
    sel.register(udp, selectors.EVENT_READ, "udp")
    lst = None
    if tcp_port is not None:
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((bind, tcp_port))
        lst.listen(64)
        lst.setblocking(False)
        sel.register(lst, selectors.EVENT_READ, "listen")
    counts = {}
    print(f"ready udp={udp.getsockname()[1]} tcp={lst.getsockname()[1] if lst else '-'}",
          flush=True)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return 0
        for key, _ in sel.select(timeout=min(left, 1.0)):
            if key.data == "udp":
                for _ in range(256):
                    try:
                        data, peer = udp.recvfrom(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    try:
                        udp.sendto(data, peer)
                    except OSError:
                        pass  # unreachable peer or full queue: the prober counts it as loss
            elif key.data == "listen":
                try:
                    conn, _ = lst.accept()
                except OSError:
                    continue
                conn.setblocking(False)
                counts[conn] = 0
                sel.register(conn, selectors.EVENT_READ, "conn")
            else:
                conn = key.fileobj
                try:
                    chunk = conn.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = None
                if chunk:
                    counts[conn] += len(chunk)
                    continue
                sel.unregister(conn)
                if chunk is not None:
                    conn.setblocking(True)
                    conn.settimeout(5)
                    try:
                        conn.sendall(_COUNT.pack(counts[conn]))
                    except OSError:
                        pass
                del counts[conn]
                conn.close()


def blast(dst, port, rate_bps, seconds, size=1200, dev=None):
    """Sends UDP datagrams of size bytes at rate_bps until the deadline; returns a summary."""
    if rate_bps <= 0 or size < 16 or size > 65000:
        raise ValueError("blast needs rate_bps > 0 and 16 <= size <= 65000")
    seconds = min(seconds, MAX_SECONDS)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # A deep send buffer keeps a full qdisc from blocking us: the excess is dropped at the queue,
    # as traffic forwarded from elsewhere would be, instead of throttling the sender.
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    if dev:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
    s.connect((dst, port))
    payload = b"\x00" * size
    interval = size * 8.0 / rate_bps
    t0 = time.monotonic()
    deadline = t0 + seconds
    sent = errors = 0
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        due = int((now - t0) / interval) + 1
        burst = min(due - sent - errors, 256)
        for _ in range(burst):
            try:
                s.send(payload)
                sent += 1
            except OSError:
                errors += 1  # ENOBUFS or an ICMP error: the link is full or gone
        next_due = t0 + (sent + errors) * interval
        time.sleep(max(0.0, min(next_due - time.monotonic(), deadline - time.monotonic(), 0.01)))
    elapsed = time.monotonic() - t0
    return {"sent_packets": sent, "send_errors": errors, "sent_bytes": sent * size,
            "seconds": round(elapsed, 4)}


def sink(port, seconds, bind="0.0.0.0"):
    """Counts UDP datagrams until the deadline or SIGTERM; returns a summary."""
    stop = {"now": False}

    def on_term(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _big_rcvbuf(s)
    s.bind((bind, port))
    s.settimeout(0.2)
    print(f"ready udp={s.getsockname()[1]}", flush=True)
    deadline = time.monotonic() + min(seconds, MAX_SECONDS)
    packets = nbytes = 0
    first = last = None
    while not stop["now"] and time.monotonic() < deadline:
        try:
            data = s.recv(65535)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        now = time.monotonic()
        first = now if first is None else first
        last = now
        packets += 1
        nbytes += len(data)
    span = (last - first) if first is not None and last > first else 0.0
    return {"received_packets": packets, "received_bytes": nbytes, "span_seconds": round(span, 4),
            "rate_bps": round(nbytes * 8 / span) if span > 0 else 0}


# ---------------------------------------------------------------- clients (called in a namespace)


class FlowStats:
    """Outcome of the probes of one UDP flow (one source port)."""

    def __init__(self, sport):
        self.sport = sport
        self.sent = 0
        self.received = 0
        self.late = 0
        self.malformed = 0  # replies that are not an echo of a probe this flow has outstanding
        self.rtts_s = []
        self.errors = {}

    @property
    def loss(self):
        return 1.0 - self.received / self.sent if self.sent else 0.0

    def rtt_quantile(self, q):
        if not self.rtts_s:
            return None
        xs = sorted(self.rtts_s)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    def __repr__(self):
        return f"FlowStats(sport={self.sport}, sent={self.sent}, received={self.received})"


def _count_error(stats, e):
    name = errno.errorcode.get(e.errno, str(e.errno))
    stats.errors[name] = stats.errors.get(name, 0) + 1


def udp_flows(dst, port, sports, count=1, rate_pps=2000.0, timeout=0.5, payload=64):
    """Sends count echo probes on each source port (round robin, paced at rate_pps in total).

    A probe counts as received when its echo arrives within timeout. Returns {sport: FlowStats}.
    """
    if not sports or count < 1 or rate_pps <= 0 or payload < _PROBE.size:
        raise ValueError("udp_flows needs sports, count >= 1, rate_pps > 0, payload >= 16")
    socks, stats, pending, dead = [], [], [], set()
    sel = selectors.DefaultSelector()
    try:
        for i, sp in enumerate(sports):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            _big_rcvbuf(s, 1 << 20)
            s.bind(("0.0.0.0", sp))
            stats.append(FlowStats(s.getsockname()[1]))
            pending.append({})
            try:
                s.connect((dst, port))  # fails at once when there is no route at all
            except OSError as e:
                _count_error(stats[i], e)
                dead.add(i)
                continue
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
        pad = b"\x00" * (payload - _PROBE.size)

        def drain(wait):
            for key, _ in sel.select(timeout=max(0.0, wait)):
                i = key.data
                while True:
                    try:
                        data = socks[i].recv(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError as e:  # an ICMP error for an earlier probe
                        _count_error(stats[i], e)
                        continue
                    now = time.monotonic()
                    if len(data) < _PROBE.size:
                        stats[i].malformed += 1
                        continue
                    magic, flow, seq = _PROBE.unpack_from(data)
                    if magic != _MAGIC or flow != i or seq not in pending[i]:
                        stats[i].malformed += 1
                        continue
                    sent_at = pending[i].pop(seq)
                    if now - sent_at <= timeout:
                        stats[i].received += 1
                        stats[i].rtts_s.append(now - sent_at)
                    else:
                        stats[i].late += 1

        total = count * len(socks)
        interval = 1.0 / rate_pps
        t0 = time.monotonic()
        n = 0
        while n < total:
            due = t0 + n * interval
            now = time.monotonic()
            if now < due:
                drain(due - now)
                continue
            i, seq = n % len(socks), n // len(socks)
            stats[i].sent += 1
            n += 1
            if i in dead:
                continue
            pending[i][seq] = time.monotonic()
            try:
                socks[i].send(_PROBE.pack(_MAGIC, i, seq) + pad)
            except OSError as e:
                _count_error(stats[i], e)
        end = time.monotonic() + timeout
        while any(pending) and time.monotonic() < end:
            drain(end - time.monotonic())
        return {st.sport: st for st in stats}
    finally:
        sel.close()
        for s in socks:
            s.close()


def tcp_goodput(dst, port, nbytes, sport=0, timeout=30.0):
    """Sends nbytes over one TCP connection to a serve() responder; goodput counts only bytes the
    responder confirms, over the time until its confirmation arrives."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        if sport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", sport))
        t0 = time.monotonic()
        s.connect((dst, port))
        chunk = b"\x00" * (256 << 10)
        left = nbytes
        while left > 0:
            n = s.send(chunk[:min(left, len(chunk))])
            left -= n
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"TCP transfer to {dst}:{port} exceeded {timeout} s")
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while len(reply) < _COUNT.size:
            part = s.recv(_COUNT.size - len(reply))
            if not part:
                raise ConnectionError(f"{dst}:{port} closed before confirming the byte count")
            reply += part
        seconds = time.monotonic() - t0
        (confirmed,) = _COUNT.unpack(reply)
        return {"bytes": confirmed, "seconds": seconds, "bps": confirmed * 8 / seconds,
                "sport": s.getsockname()[1]}
    finally:
        s.close()


def udp_trace(dst, sport, dport, max_ttl=8, timeout=0.5):
    """A Paris-style trace of one UDP 5-tuple: a datagram from `sport` to dst:dport per TTL
    1..max_ttl, and the ICMP answers (time exceeded from routers, port unreachable from dst).
    Returns [address or None per TTL], cut after the first answer from dst itself. Runs in a
    namespace (fabric.run_in); needs CAP_NET_RAW for the ICMP socket."""
    icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hops = []
    try:
        udp.bind(("0.0.0.0", sport))
        icmp.settimeout(timeout)
        for ttl in range(1, max_ttl + 1):
            udp.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
            udp.sendto(b"fwtrace" + bytes([ttl]), (dst, dport))
            deadline = time.monotonic() + timeout
            got = None
            while got is None and time.monotonic() < deadline:
                icmp.settimeout(max(0.001, deadline - time.monotonic()))
                try:
                    pkt, (src, _) = icmp.recvfrom(1500)
                except socket.timeout:
                    break
                ihl = (pkt[0] & 0x0F) * 4
                if len(pkt) < ihl + 8 + 20 + 8 or pkt[ihl] not in (3, 11):
                    continue
                q = pkt[ihl + 8:]
                qihl = (q[0] & 0x0F) * 4
                if len(q) < qihl + 8 or q[9] != socket.IPPROTO_UDP:
                    continue
                qs, qd = struct.unpack("!HH", q[qihl:qihl + 4])
                if (qs, qd) == (sport, dport) and socket.inet_ntoa(q[16:20]) == dst:
                    got = src
            hops.append(got)
            if got == dst:
                break
    finally:
        icmp.close()
        udp.close()
    return hops


def http_get(url, timeout=5.0):
    """GET url without any proxy; returns (status, body text)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


# ---------------------------------------------------------------- CLI for the processes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve", help="UDP echo and TCP byte counter")
    sv.add_argument("--udp-port", type=int, required=True)
    sv.add_argument("--tcp-port", type=int)
    sv.add_argument("--seconds", type=float, default=MAX_SECONDS)
    bl = sub.add_parser("blast", help="paced UDP sender with a deadline")
    bl.add_argument("--dst", required=True)
    bl.add_argument("--port", type=int, required=True)
    bl.add_argument("--rate-bps", type=float, required=True)
    bl.add_argument("--seconds", type=float, required=True)
    bl.add_argument("--size", type=int, default=1200)
    bl.add_argument("--dev")
    sk = sub.add_parser("sink", help="UDP counter with a deadline")
    sk.add_argument("--port", type=int, required=True)
    sk.add_argument("--seconds", type=float, required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "serve":
            return serve(a.udp_port, a.tcp_port, a.seconds)
        if a.cmd == "blast":
            print(json.dumps(blast(a.dst, a.port, a.rate_bps, a.seconds, a.size, a.dev)),
                  flush=True)
            return 0
        print(json.dumps(sink(a.port, a.seconds)), flush=True)
        return 0
    except (OSError, ValueError) as e:
        print(f"error: {a.cmd}: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
