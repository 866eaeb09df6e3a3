"""The two peers of te_bench.py's runs: `Pair` starts a target and an
initiator (te_peer.py) sharing a control socket, `run_cells` feeds them
the runs and holds each to a deadline, starting a fresh pair after a
crash, a hang or a failed run."""

import json
import os
import selectors
import signal
import socket
import subprocess
import time

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_peer.py")


def die_with_parent():
    # PR_SET_PDEATHSIG: a peer never outlives this supervisor (a killed
    # xtask, a timeout) to hold its listeners and its memory.
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


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
        marks = [0, 0]
        try:
            while True:
                event = pair.event(timeout)
                if event is None or event == "timeout":
                    break
                if event.get("event") == "start":
                    index, timeout = event["index"], args.cell_timeout
                    marks = [log_size(log) for log in pair.logs]
                elif event.get("event") == "result":
                    if not event.get("ok"):
                        # What the engine logged meanwhile says why.
                        words = [last_words(log, mark, "EFW", False)
                                 for log, mark in zip(pair.logs, marks)]
                        for role, said in zip(("target", "initiator"), words):
                            if said:
                                event["reason"] += f" ({role}'s log: {said})"
                    yield cells[event["index"]], event
                    index, timeout, finished = None, args.start_timeout, finished + 1
                    if not event.get("ok"):
                        # A batch the binding gave up on is freed with its
                        # writes still queued (its own TODO says so): over
                        # tcp the 1,000-entry batches after a failed
                        # 10,000-entry one failed too, and passed in a
                        # fresh pair. A fresh pair runs the rest.
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


