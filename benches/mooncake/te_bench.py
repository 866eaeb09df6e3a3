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
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# No __pycache__ beside the scripts, in the repository.
sys.dont_write_bytecode = True

from te_pair import run_cells  # noqa: E402 (after the line above)
from te_report import OUT, QUIET, derive, emit, human_result, summarize  # noqa: E402

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


def device_packets(device):
    """Packets the RDMA device has sent (soft-RoCE counts them): that the
    writes went over it, not over a TCP fallback. Only the whole run's
    count means anything: rxe's counters lag, one run's delta read 0 for
    1,000 writes whose data had landed, and 372 for 1,000 x 4 KiB where
    another read 5,000."""
    path = f"/sys/class/infiniband/{device}/ports/1/hw_counters/sent_pkts"
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


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
    p.add_argument("--modes", default="sync,async,notify",
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
              # if_nameindex asks this namespace; /sys/class/net shows
              # the one sysfs was mounted in.
              interfaces=" ".join(sorted(n for _, n in socket.if_nameindex())),
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
    packets = device_packets(args.device) if args.protocol == "rdma" else None
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
    after = device_packets(args.device) if packets is not None else None
    if after is not None:
        emit(dict(kind="device", device=args.device, sent_pkts=after - packets),
             f"{args.device} sent {after - packets:,} packets during the runs"
             + ("" if after > packets else ": none, so the engine did not use it"))
    return 0 if any(r["ok"] for _, r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
