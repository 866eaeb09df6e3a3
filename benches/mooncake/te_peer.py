"""One side of a Mooncake Transfer Engine measurement, started by
te_bench.py: `target` registers a buffer and answers requests on the
control socket (zero it, checksum its blocks, wait for a notification);
`initiator` registers a buffer of its own, writes into the target's and
prints one JSON event per line on stdout for te_bench.py to read.

Standard library only (besides mooncake itself): numpy wheels die of
SIGILL under the TCG VM, so buffers are anonymous mmaps and their
addresses come from ctypes.
"""

import argparse
import ctypes
import gc
import json
import mmap
import os
import socket
import sys
import time
import zlib

from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

# The source pattern: random bytes repeating with an odd period, so no two
# blocks of a shape hold the same bytes (a block landing at the wrong
# offset fails its checksum) while filling 1 GiB costs only memcpys.
PATTERN_PERIOD = (1 << 20) + 4093
# Zeroing the target happens in chunks of this many bytes.
ZERO_CHUNK = 16 << 20
# How often the target looks for a notification while it waits for one.
NOTIFY_POLL_SECS = 0.0002


def now_ns():
    # CLOCK_MONOTONIC: the same clock in both processes of one machine,
    # so the target's notification time compares with the initiator's.
    return time.monotonic_ns()


def mapped(length):
    """An anonymous, page-aligned mapping and its address."""
    m = mmap.mmap(-1, length)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def start_engine(args, length):
    """An initialized engine with one registered buffer of `length`."""
    engine = TransferEngine()
    rc = engine.initialize(args.host, "P2PHANDSHAKE", args.protocol, args.device)
    if rc != 0:
        raise SystemExit(f"TransferEngine.initialize({args.protocol!r}, "
                         f"{args.device!r}) returned {rc}")
    buf, addr = mapped(length)
    rc = engine.register_memory(addr, length)
    if rc != 0:
        raise SystemExit(f"register_memory of {length} bytes returned {rc}")
    return engine, buf, addr


class Control:
    """JSON lines over the socket te_bench.py handed both peers."""

    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)
        self.file = self.sock.makefile("rwb")

    def send(self, **message):
        self.file.write(json.dumps(message).encode() + b"\n")
        self.file.flush()

    def receive(self):
        line = self.file.readline()
        if not line:
            raise SystemExit("the other peer closed the control socket")
        return json.loads(line)

    def call(self, **message):
        self.send(**message)
        reply = self.receive()
        if "error" in reply:
            raise RuntimeError(f"target: {reply['error']}")
        return reply


def zero(buf, length):
    chunk = memoryview(bytes(min(ZERO_CHUNK, length)))
    for offset in range(0, length, ZERO_CHUNK):
        n = min(ZERO_CHUNK, length - offset)
        buf[offset:offset + n] = chunk[:n]


def block_crcs(buf, entries, size):
    view = memoryview(buf)
    return [zlib.crc32(view[i * size:(i + 1) * size]) for i in range(entries)]


def wait_notify(engine, tag, timeout):
    """The time the notification `tag` arrived, or None after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for note in engine.get_notifies():
            if note.msg == tag:
                return now_ns()
        time.sleep(NOTIFY_POLL_SECS)
    return None


def serve(args):
    """The target: register, say hello, answer until told to stop."""
    engine, buf, addr = start_engine(args, args.buffer)
    ctl = Control(args.ctl_fd)
    ctl.send(rpc_port=engine.get_rpc_port(), addr=addr, length=args.buffer,
             pid=os.getpid())
    while True:
        request = ctl.receive()
        op = request.get("op")
        if op == "zero":
            zero(buf, request["length"])
            ctl.send(done=True)
        elif op == "crc":
            ctl.send(crcs=block_crcs(buf, request["entries"], request["size"]))
        elif op == "watch":
            # Answered when the notification comes (or does not): the
            # initiator sends this before the batch and reads the answer
            # after it.
            seen = wait_notify(engine, request["tag"], request["timeout"])
            ctl.send(seen_ns=seen)
        elif op == "bye":
            ctl.send(done=True)
            return
        else:
            ctl.send(error=f"unknown op {op!r}")


def emit(**event):
    print(json.dumps(event), flush=True)


class Initiator:
    def __init__(self, args):
        self.args = args
        self.engine, self.buf, self.addr = start_engine(args, args.buffer)
        self.ctl = Control(args.ctl_fd)
        hello = self.ctl.receive()
        self.peer = f"{args.host}:{hello['rpc_port']}"
        self.remote = hello["addr"]
        self.remote_length = hello["length"]
        self.fill()
        self.lists = {}
        self.expected = {}
        # The first write opens the segment (the P2P handshake): not part
        # of any measurement.
        rc = self.engine.transfer_sync_write(self.peer, self.addr, self.remote, 8)
        if rc != 0:
            raise SystemExit(f"the first write (8 B, opening the segment) returned {rc}")

    def fill(self):
        pattern = os.urandom(PATTERN_PERIOD)
        for offset in range(0, self.args.buffer, PATTERN_PERIOD):
            n = min(PATTERN_PERIOD, self.args.buffer - offset)
            self.buf[offset:offset + n] = pattern[:n]

    def shape(self, entries, size):
        """The three lists of a batch of `entries` x `size`, built once and
        outside the timed region: block i of ours to block i of theirs."""
        key = (entries, size)
        if key not in self.lists:
            self.lists[key] = (
                [self.addr + i * size for i in range(entries)],
                [self.remote + i * size for i in range(entries)],
                [size] * entries,
            )
            self.expected[key] = block_crcs(self.buf, entries, size)
        return self.lists[key]

    def verify(self, entries, size):
        """None if every block landed intact, else why not."""
        got = self.ctl.call(op="crc", entries=entries, size=size)["crcs"]
        bad = [i for i, (a, b) in enumerate(zip(got, self.expected[(entries, size)]))
               if a != b]
        if not bad:
            return None
        return (f"{len(bad)} of {entries} blocks differ at the target "
                f"(first: block {bad[0]})")

    def batch(self, cell):
        n, size, mode = cell["entries"], cell["size"], cell["mode"]
        if n * size > min(self.args.buffer, self.remote_length):
            return dict(ok=False, reason=f"{n} x {size} B exceeds the registered buffers")
        src, dst, lengths = self.shape(n, size)
        self.ctl.call(op="zero", length=n * size)
        tag = f"te_bench-{cell['rep']}-{n}x{size}-{now_ns()}"
        if mode == "notify":
            self.ctl.send(op="watch", tag=tag, timeout=self.args.cell_timeout)
        engine, peer = self.engine, self.peer
        gc.disable()
        try:
            t0 = now_ns()
            if mode == "sync":
                rc = engine.batch_transfer_sync_write(peer, src, dst, lengths)
                t1 = t2 = now_ns()
            elif mode == "async":
                batch_id = engine.batch_transfer_async_write(peer, src, dst, lengths)
                t1 = now_ns()
                # Blocks until every entry is done, and frees the batch: in
                # 0.3.13.post1 a second call on the same id crashes.
                rc = engine.get_batch_transfer_status([batch_id]) if batch_id else -1
                t2 = now_ns()
            elif mode == "notify":
                note = TransferNotify("te_bench", tag)
                rc = engine.batch_transfer_sync(peer, src, dst, lengths,
                                                TransferOpcode.Write, note)
                t1 = t2 = now_ns()
            else:
                return dict(ok=False, reason=f"unknown mode {mode!r}")
        finally:
            gc.enable()
        result = dict(ok=rc == 0, secs=(t2 - t0) / 1e9,
                      call_us_per_entry=(t1 - t0) / 1e3 / n)
        if mode == "async":
            result["submit_us_per_entry"] = (t1 - t0) / 1e3 / n
            result["wait_secs"] = (t2 - t1) / 1e9
        if rc != 0:
            # The pair ends here (te_bench.py starts a fresh one): a target
            # still waiting for a notification is not asked again.
            result["reason"] = f"the {mode} batch returned {rc}"
            return result
        if mode == "notify":
            seen = self.ctl.receive().get("seen_ns")
            if seen is None:
                result.update(ok=False, reason="the target never saw the notification")
                return result
            result["notified_secs"] = (seen - t0) / 1e9
        wrong = self.verify(n, size)
        result["verified"] = wrong is None
        if wrong:
            result.update(ok=False, reason=wrong)
        return result

    def latency(self, cell):
        size, iters = cell["size"], cell["iters"]
        self.shape(1, size)
        self.ctl.call(op="zero", length=size)
        engine, peer, src, dst = self.engine, self.peer, self.addr, self.remote
        times = []
        gc.disable()
        try:
            for i in range(iters + cell.get("warmup", 10)):
                t0 = now_ns()
                rc = engine.transfer_sync_write(peer, src, dst, size)
                t1 = now_ns()
                if rc != 0:
                    return dict(ok=False, reason=f"write {i} returned {rc}")
                times.append(t1 - t0)
        finally:
            gc.enable()
        times = sorted(times[-iters:])
        wrong = self.verify(1, size)
        result = dict(ok=wrong is None, verified=wrong is None,
                      median_us=times[iters // 2] / 1e3,
                      p99_us=times[min(iters - 1, iters * 99 // 100)] / 1e3,
                      min_us=times[0] / 1e3,
                      mean_us=sum(times) / iters / 1e3)
        if wrong:
            result["reason"] = wrong
        return result

    def run(self, cells):
        for index, cell in enumerate(cells):
            emit(event="start", index=index)
            started = time.monotonic()
            try:
                result = (self.latency(cell) if cell["kind"] == "latency"
                          else self.batch(cell))
            except RuntimeError as e:
                result = dict(ok=False, reason=str(e))
            result["wall_secs"] = round(time.monotonic() - started, 3)
            emit(event="result", index=index, **result)
            if not result["ok"]:
                # A batch the binding gave up on may still be queued in
                # this engine: te_bench.py runs the rest with a fresh pair.
                return
        self.ctl.call(op="bye")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["target", "initiator"])
    parser.add_argument("--ctl-fd", type=int, required=True)
    parser.add_argument("--protocol", required=True)
    parser.add_argument("--device", default="")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--buffer", type=int, required=True)
    parser.add_argument("--cells", default="[]", help="JSON list (initiator)")
    parser.add_argument("--cell-timeout", type=float, default=120.0)
    args = parser.parse_args()
    if args.role == "target":
        serve(args)
    else:
        initiator = Initiator(args)
        emit(event="ready", peer=initiator.peer)
        initiator.run(json.loads(args.cells))
    sys.stdout.flush()
    # The engine's teardown (its threads, the segment's removal) adds
    # nothing to the results, which are out: skip it rather than give it
    # a chance to hang.
    os._exit(0)


if __name__ == "__main__":
    main()
