"""Mooncake Transfer Engine next to ferrovia-transfer: batches of N x S
one-sided writes from one registered buffer into another, between two
processes on this machine (P2PHANDSHAKE, no metadata server).

This process only supervises: it starts a target and an initiator
(te_peer.py, with --python, the interpreter that has mooncake), relays
nothing but their results, and holds every measurement to a deadline:
a peer that crashes or hangs costs one cell (its reason is printed), and
a fresh pair runs the cells after it. Each measurement prints one JSON
line (`{"te_bench": 1, ...}`) and one line for people (`te_bench: ...`);
the medians over the repetitions follow. Standard library only: it also
runs inside the TCG VM, where numpy dies of SIGILL.

Over tcp it runs in a network namespace of its own that has only `lo`
(`--netns auto`): Mooncake's listeners bind every address
(MC_TCP_BIND_ADDRESS does not change that in 0.3.13.post1).

    python3 te_bench.py --python VENV/bin/python --protocol tcp
    python3 te_bench.py --python VENV/bin/python --protocol rdma --device rxe0
"""

import argparse
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "te_peer.py")
# Set in the environment of the copy of this script that runs in the
# network namespace it made.
IN_NETNS = "TE_BENCH_IN_NETNS"
DEFAULT_SHAPES = "10000x4K,10000x64K,1000x64K,1000x1M"
# Environment both peers get unless the caller set it already.
ENV_DEFAULTS = {
    # Quieter: glog's INFO lines are one per connection and slice.
    "MC_LOG_LEVEL": "WARNING",
}
ENV_TCP = {
    # Where an RDMA device exists, "tcp" silently runs over it otherwise.
    "MC_FORCE_TCP": "1",
    # A batch of 10,000 fails with the defaults ("TCP lane queue-full
    # rejection", the batch returns -1).
    "MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER": "16384",
    "MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER": "16384",
}
ENV_TCG = {
    # Under TCG the default worker threads spin on 2 vCPUs: a single 8 B
    # write took ~16 ms with them.
    "MC_WORKERS_PER_CTX": "1",
}


def size_bytes(word):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    word = word.strip().upper().removesuffix("IB").removesuffix("B")
    if word and word[-1] in units:
        return int(word[:-1]) * units[word[-1]]
    return int(word)


def size_name(size):
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def shapes(text):
    """`10000x4K,1000x1M` as [(10000, 4096), (1000, 1048576)]."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        n, _, s = item.lower().partition("x")
        out.append((int(n), size_bytes(s)))
    return out


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def load1():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return None


# --out: every JSON line goes to this file too (the VM shares the
# workspace, so the host reads it once the guest is gone); with --quiet
# only there.
OUT = []
QUIET = []


def emit(record, human=None):
    record = {"te_bench": 1, **record}
    line = json.dumps(record)
    if not QUIET:
        print(line, flush=True)
    for path in OUT:
        with open(path, "a") as f:
            f.write(line + "\n")
    if human:
        print(f"te_bench: {human}", flush=True)


def describe(cell, protocol):
    if cell["kind"] == "latency":
        return f"{protocol} latency {size_name(cell['size'])} rep {cell['rep']}"
    return (f"{protocol} {cell['mode']} {cell['entries']} x {size_name(cell['size'])} "
            f"rep {cell['rep']}")


def human_result(cell, r, protocol):
    head = describe(cell, protocol)
    r = {**cell, **r}
    if not r["ok"]:
        return f"{head}: FAILED: {r['reason']}"
    if cell["kind"] == "latency":
        return (f"{head}: median {r['median_us']:.1f} µs, p99 {r['p99_us']:.1f} µs "
                f"per sync write, {r['iters']} writes, verified")
    parts = [f"{r['mb_per_s']:.1f} MB/s", f"{r['entries_per_s']:,.0f} entries/s"]
    if "submit_us_per_entry" in r:
        parts.append(f"submit {r['submit_us_per_entry']:.2f} µs/entry")
    else:
        parts.append(f"{r['call_us_per_entry']:.2f} µs/entry in the call")
    if "notified_secs" in r:
        parts.append(f"notified after {r['notified_secs'] * 1e3:.1f} ms")
    return f"{head}: {', '.join(parts)}, verified"


def derive(cell, result):
    """The rates of a batch result: MB = 2^20 bytes, as perftest's."""
    if cell["kind"] == "batch" and result.get("ok") and result.get("secs"):
        total = cell["entries"] * cell["size"]
        result["mb_per_s"] = total / result["secs"] / (1 << 20)
        result["entries_per_s"] = cell["entries"] / result["secs"]
    return result


def median(values):
    v = sorted(values)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def die_with_parent():
    # PR_SET_PDEATHSIG: a peer never outlives this supervisor (a killed
    # xtask, a timeout) to hold its listeners and its memory.
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def device_packets(device):
    """Packets the RDMA device has sent (soft-RoCE counts them): that a
    cell's writes went over it, not over a TCP fallback."""
    path = f"/sys/class/infiniband/{device}/ports/1/hw_counters/sent_pkts"
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


# What the engine logs on every good start, error level or not.
NOISE = ("Local segment descriptor not found",
         "Logging before InitGoogleLogging",
         "Using default malloc/free")


def log_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def last_words(path, since=0, levels="EF", fallback=True):
    """The last line of a peer's stderr (from byte `since`) worth quoting:
    glog's errors are the most telling; else the last line (a Python
    traceback ends with its exception)."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [l.strip() for l in text.splitlines()
             if l.strip() and not any(n in l for n in NOISE)]
    for line in reversed(lines):
        if line[:1] in levels and line[1:5].isdigit():
            return line[:240]
    return lines[-1][:240] if lines and fallback else ""


def exit_reason(status):
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


class Pair:
    """A target and an initiator sharing a control socket."""

    def __init__(self, args, env, cells, buffer, logdir, serial):
        ours, theirs = socket.socketpair()
        common = ["--protocol", args.protocol, "--device", args.device,
                  "--host", args.host, "--buffer", str(buffer),
                  "--cell-timeout", str(args.cell_timeout)]
        self.logs = [os.path.join(logdir, f"{role}-{serial}.log")
                     for role in ("target", "initiator")]
        self.procs = []
        for role, sock, log, extra in (
                ("target", ours, self.logs[0], []),
                ("initiator", theirs, self.logs[1], ["--cells", json.dumps(cells)])):
            with open(log, "wb") as err:
                self.procs.append(subprocess.Popen(
                    [args.python, PEER, role, "--ctl-fd", str(sock.fileno()),
                     *common, *extra],
                    pass_fds=[sock.fileno()], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE if role == "initiator" else subprocess.DEVNULL,
                    stderr=err, start_new_session=True, preexec_fn=die_with_parent))
        ours.close()
        theirs.close()
        self.target, self.initiator = self.procs
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.initiator.stdout, selectors.EVENT_READ)
        self.pending = b""
        self.closed = False

    def event(self, timeout):
        """The initiator's next event; None at its end; "timeout"."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                return "timeout"
            chunk = os.read(self.initiator.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return {"event": "noise", "line": line.decode(errors="replace")}

    def why(self, marks):
        """Why the pair stopped: exit statuses and the last words each
        peer logged after `marks`."""
        parts = []
        for role, proc, log, mark in zip(("initiator", "target"),
                                         (self.initiator, self.target),
                                         self.logs[::-1], marks[::-1]):
            status = proc.poll()
            if status not in (0, None):
                words = last_words(log, mark)
                parts.append(f"{role} {exit_reason(status)}" + (f": {words}" if words else ""))
        if not parts:
            words = last_words(self.logs[1], marks[1]) or last_words(self.logs[0], marks[0])
            parts.append(words or "no reason given")
        return "; ".join(parts)

    def close(self, grace):
        if self.closed:
            return
        self.closed = True
        deadline = time.monotonic() + grace
        for proc in (self.initiator, self.target):
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.initiator.stdout.close()
        self.selector.close()


def run_cells(args, env, cells, buffer, logdir, budget_end):
    """Runs `cells`, a fresh pair after each failure; yields (cell, result)."""
    serial = 0
    while cells:
        if time.monotonic() >= budget_end:
            for cell in cells:
                yield cell, dict(ok=False, reason=f"not run: the budget of "
                                 f"{args.budget:.0f} s was used up")
            return
        serial += 1
        pair = Pair(args, env, cells, buffer, logdir, serial)
        index, timeout, finished = None, args.start_timeout, 0
        marks, packets = [0, 0], None
        try:
            while True:
                event = pair.event(timeout)
                if event is None or event == "timeout":
                    break
                if event.get("event") == "start":
                    index, timeout = event["index"], args.cell_timeout
                    marks = [log_size(log) for log in pair.logs]
                    packets = device_packets(args.device) if args.device else None
                elif event.get("event") == "result":
                    if not event.get("ok"):
                        # What the engine logged meanwhile says why.
                        words = [last_words(log, mark, "EFW", False)
                                 for log, mark in zip(pair.logs, marks)]
                        for role, said in zip(("target", "initiator"), words):
                            if said:
                                event["reason"] += f" ({role}'s log: {said})"
                    after = device_packets(args.device) if packets is not None else None
                    if after is not None:
                        event["device_pkts"] = after - packets
                        if event["device_pkts"] == 0 and event.get("ok"):
                            event.update(ok=False, reason=(
                                f"{args.device} sent no packets: the engine did not "
                                "write over RDMA"))
                    yield cells[event["index"]], event
                    index, timeout, finished = None, args.start_timeout, finished + 1
                    if not event.get("ok"):
                        # A batch the binding gave up on is freed with its
                        # writes still queued (its own TODO says so): the
                        # cell after it hung until killed. A fresh pair
                        # runs the rest.
                        event = "failed"
                        break
            if event == "failed":
                reason = None
                pair.close(0)
            elif event == "timeout":
                stage = (f"after {args.cell_timeout:.0f} s" if index is not None
                         else f"within {args.start_timeout:.0f} s")
                reason = f"timed out {stage} (both peers killed)"
                pair.close(0)
            else:
                pair.close(10)
                reason = pair.why(marks)
        finally:
            pair.close(0)
        if index is not None:
            yield cells[index], dict(ok=False, reason=reason)
            cells = cells[index + 1:]
        elif event == "failed":
            cells = cells[finished:]
        elif finished == len(cells):
            return
        elif finished == 0:
            # Not one cell began: another pair would fail the same way.
            for cell in cells:
                yield cell, dict(ok=False, reason=f"the peers failed to start: {reason}")
            return
        else:
            cells = cells[finished:]


def plan(args, shape_list):
    """Every cell, repetition by repetition (a budget cut still leaves
    each shape measured), in the order they run."""
    cells = []
    for rep in range(1, args.reps + 1):
        for entries, size in shape_list:
            for mode in args.modes:
                cells.append(dict(kind="batch", mode=mode, entries=entries,
                                  size=size, rep=rep))
        if args.lat_iters > 0:
            cells.append(dict(kind="latency", mode="sync_write", entries=1,
                              size=args.lat_size, iters=args.lat_iters, rep=rep))
    return cells


def enter_netns(args):
    """Re-executes this script inside `unshare --net`; returns only if it
    need not (or, with a reason, cannot)."""
    wanted = args.netns == "on" or (args.netns == "auto" and args.protocol == "tcp")
    if os.environ.get(IN_NETNS) == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        return True, None
    if not wanted:
        return False, None
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            return False, (f"no {tool} on PATH to make a network namespace, and "
                           "Mooncake's listeners bind every address (--netns off runs it anyway)")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return False, ("cannot make a network namespace (unshare --net: "
                       f"{probe.stderr.strip() or probe.returncode}), and Mooncake's "
                       "listeners bind every address (--netns off runs it anyway)")
    env = dict(os.environ, **{IN_NETNS: "1"})
    argv = ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__),
            *sys.argv[1:]]
    sys.stdout.flush()
    os.execvpe("unshare", argv, env)


def peer_env(args):
    env = dict(os.environ)
    defaults = dict(ENV_DEFAULTS)
    # The binding gives up on a batch after MC_TRANSFER_TIMEOUT seconds
    # (30 by default) plus 1 ns per byte: 1,000 x 1 MiB over soft-RoCE
    # under TCG takes longer. Let it give up a little before the cell's
    # deadline, so that a slow batch is the engine's failure, said.
    defaults["MC_TRANSFER_TIMEOUT"] = str(max(30, int(args.cell_timeout * 0.8)))
    if args.protocol == "tcp":
        defaults.update(ENV_TCP)
    if os.environ.get("SOFTROCE_VM") == "1":
        defaults.update(ENV_TCG)
    for key, value in defaults.items():
        env.setdefault(key, value)
    return env


def versions(python):
    probe = ("import importlib.metadata as m, platform; "
             "d = m.packages_distributions().get('mooncake', ['?'])[0]; "
             "print(d, m.version(d) if d != '?' else '?', platform.python_version())")
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                             timeout=60).stdout.split()
        return dict(zip(("mooncake_dist", "mooncake", "python"), out))
    except (OSError, subprocess.SubprocessError):
        return {}


def summarize(protocol, done):
    """One median record per shape and mode."""
    keys = []
    for cell, _ in done:
        key = (cell["kind"], cell["mode"], cell["entries"], cell["size"])
        if key not in keys:
            keys.append(key)
    fields = ("mb_per_s", "entries_per_s", "call_us_per_entry", "submit_us_per_entry",
              "secs", "notified_secs", "median_us", "p99_us")
    for kind, mode, entries, size in keys:
        results = [r for c, r in done
                   if (c["kind"], c["mode"], c["entries"], c["size"]) == (kind, mode, entries, size)]
        good = [r for r in results if r["ok"]]
        record = dict(kind="median", of=kind, protocol=protocol, mode=mode,
                      entries=entries, size=size, runs=len(good), attempted=len(results))
        for field in fields:
            values = [r[field] for r in good if field in r]
            if values:
                record[field] = median(values)
        if not good:
            record["reason"] = results[-1].get("reason", "")
        head = f"median {protocol} {mode} {entries} x {size_name(size)} ({len(good)}/{len(results)} runs)"
        if not good:
            human = f"{head}: no number: {record['reason']}"
        elif kind == "latency":
            human = f"{head}: {record['median_us']:.1f} µs per 8 B sync write"
        else:
            per_entry = record.get("submit_us_per_entry", record.get("call_us_per_entry"))
            what = "submit" if "submit_us_per_entry" in record else "in the call"
            human = (f"{head}: {record['mb_per_s']:.1f} MB/s, "
                     f"{record['entries_per_s']:,.0f} entries/s, {per_entry:.2f} µs/entry {what}")
        emit(record, human)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter that has mooncake (a venv's bin/python)")
    p.add_argument("--protocol", choices=["tcp", "rdma"], default="tcp")
    p.add_argument("--device", default="", help="the RDMA device (rdma: rxe0)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="ENTRIESxSIZE,...")
    p.add_argument("--modes", default="sync,async",
                   help="sync, async (submit, then wait), notify (sync with a notification)")
    p.add_argument("--lat-iters", type=int, default=1000, help="0: no latency cell")
    p.add_argument("--lat-size", type=size_bytes, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cell-timeout", type=float, default=120.0)
    p.add_argument("--start-timeout", type=float, default=60.0)
    p.add_argument("--budget", type=float, default=1800.0, help="no cell starts after it")
    p.add_argument("--netns", choices=["auto", "on", "off"], default="auto",
                   help="auto: a namespace with only lo for tcp")
    p.add_argument("--log-dir", help="keep the peers' stderr here")
    p.add_argument("--out", help="append the JSON lines to this file too")
    p.add_argument("--quiet", action="store_true",
                   help="with --out: the JSON lines go only there")
    args = p.parse_args()
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        OUT.append(args.out)
        QUIET.extend([True] if args.quiet else [])
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    started = time.monotonic()

    in_netns, problem = enter_netns(args)
    shape_list = shapes(args.shapes)
    cells = plan(args, shape_list)
    env = peer_env(args)
    mc_env = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MC_"))
    emit(dict(kind="config", protocol=args.protocol, device=args.device,
              netns=in_netns, env=mc_env, kernel=os.uname().release,
              vm=os.environ.get("SOFTROCE_VM") == "1", load1=load1(),
              interfaces=" ".join(sorted(os.listdir("/sys/class/net"))),
              **versions(args.python)),
         f"{args.protocol} on {args.device or 'no device'}, {'in a netns with only lo' if in_netns else 'in this network namespace'}; {mc_env}")
    if args.protocol == "rdma" and not os.path.isdir(f"/sys/class/infiniband/{args.device}"):
        # The engine would find no device and run over TCP without a word.
        problem = (f"no RDMA device {args.device!r} here (/sys/class/infiniband), "
                         "and the engine would fall back to TCP silently")
    if problem:
        done = [(cell, dict(ok=False, reason=problem)) for cell in cells]
        for cell, result in done:
            emit(dict(protocol=args.protocol, **cell, **result),
                 human_result(cell, result, args.protocol))
        summarize(args.protocol, done)
        return 3

    # Each side registers one buffer that holds the largest batch; a shape
    # that does not fit twice (target and initiator) in the memory free
    # now is reported, not tried.
    free = mem_available()
    room = None if free is None else int(free * 0.8) // 2
    fitting = [(n, s) for n, s in shape_list if room is None or n * s <= room]
    todo, done = [], []
    for cell in cells:
        if (cell["entries"], cell["size"]) in fitting or cell["kind"] == "latency":
            todo.append(cell)
        else:
            need = 2 * cell["entries"] * cell["size"] >> 20
            done.append((cell, dict(ok=False, reason=f"needs {need} MiB (a buffer per side), "
                                    f"{free >> 20} MiB available")))
    buffer = max([n * s for n, s in fitting] + [args.lat_size, 4096])
    budget_end = started + args.budget
    logdir = args.log_dir or tempfile.mkdtemp(prefix="te_bench-")
    os.makedirs(logdir, exist_ok=True)
    try:
        for cell, result in done:
            emit(dict(protocol=args.protocol, **cell, **result),
                 human_result(cell, result, args.protocol))
        for cell, result in run_cells(args, env, todo, buffer, logdir, budget_end):
            result = {k: v for k, v in derive(cell, result).items()
                      if k not in ("event", "index")}
            result["load1"] = load1()
            done.append((cell, result))
            emit(dict(protocol=args.protocol, **cell, **result),
                 human_result(cell, result, args.protocol))
    finally:
        if not args.log_dir:
            shutil.rmtree(logdir, ignore_errors=True)
    summarize(args.protocol, done)
    return 0 if any(r["ok"] for _, r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
