"""te_bench.py's output: one JSON line per record (`{"te_bench": 1,
...}`, to stdout unless --quiet, and to --out), a line for people after
each (`te_bench: ...`), and the medians over the repetitions."""

import json

def size_name(size):
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


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
            human = f"{head}: {record['median_us']:.1f} µs per {size_name(size)} sync write"
        else:
            per_entry = record.get("submit_us_per_entry", record.get("call_us_per_entry"))
            what = "submit" if "submit_us_per_entry" in record else "in the call"
            human = (f"{head}: {record['mb_per_s']:.1f} MB/s, "
                     f"{record['entries_per_s']:,.0f} entries/s, {per_entry:.2f} µs/entry {what}")
        emit(record, human)


