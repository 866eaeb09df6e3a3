//! Reading te_bench.py's JSON lines (`{"te_bench": 1, "kind": ...}`):
//! `config` (versions, the MC_ variables, the namespace), one `batch` or
//! `latency` record per run, and the script's own `median` records, which
//! are ignored here ([`medians`] computes them from the runs, as the rest
//! of `bench --compare` does). The records are flat objects of strings,
//! numbers, booleans and nulls, so a small reader does instead of a JSON
//! crate (xtask builds before anything is installed and keeps its
//! dependencies few).

use std::collections::BTreeMap;

use super::super::report::median;

/// A value of a flat JSON object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Num(f64),
    Bool(bool),
    Null,
}

impl Value {
    fn num(&self) -> Option<f64> {
        match self {
            Value::Num(v) => Some(*v),
            _ => None,
        }
    }

    fn text(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Num(v) => v.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => String::new(),
        }
    }
}

/// The members of a JSON object without nesting (`None` for anything
/// else, nested arrays and objects included).
pub(crate) fn flat_object(line: &str) -> Option<BTreeMap<String, Value>> {
    let mut chars = line.trim().chars().peekable();
    let mut out = BTreeMap::new();
    let skip_ws = |c: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while c.next_if(|ch| ch.is_whitespace()).is_some() {}
    };
    (chars.next()? == '{').then_some(())?;
    skip_ws(&mut chars);
    if chars.next_if_eq(&'}').is_some() {
        return chars.next().is_none().then_some(out);
    }
    loop {
        skip_ws(&mut chars);
        (chars.next()? == '"').then_some(())?;
        let key = string(&mut chars)?;
        skip_ws(&mut chars);
        (chars.next()? == ':').then_some(())?;
        skip_ws(&mut chars);
        let value = match *chars.peek()? {
            '"' => {
                chars.next();
                Value::Str(string(&mut chars)?)
            }
            't' | 'f' | 'n' => {
                let word: String =
                    std::iter::from_fn(|| chars.next_if(char::is_ascii_alphabetic)).collect();
                match word.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "null" => Value::Null,
                    _ => return None,
                }
            }
            _ => {
                let word: String = std::iter::from_fn(|| {
                    chars.next_if(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
                })
                .collect();
                Value::Num(word.parse().ok().filter(|v: &f64| v.is_finite())?)
            }
        };
        out.insert(key, value);
        skip_ws(&mut chars);
        match chars.next()? {
            ',' => continue,
            '}' => break,
            _ => return None,
        }
    }
    skip_ws(&mut chars);
    chars.next().is_none().then_some(out)
}

/// The rest of a JSON string after its opening quote, escapes resolved
/// (Python's json.dumps writes non-ASCII as `\uXXXX`, surrogate pairs
/// included).
fn string(chars: &mut impl Iterator<Item = char>) -> Option<String> {
    let mut out = String::new();
    let mut high: Option<u32> = None;
    loop {
        let c = chars.next()?;
        let unit = match c {
            '"' => return high.is_none().then_some(out),
            '\\' => match chars.next()? {
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    u32::from_str_radix(&hex, 16)
                        .ok()
                        .filter(|_| hex.len() == 4)?
                }
                e => {
                    high.is_none().then_some(())?;
                    out.push(match e {
                        '"' | '\\' | '/' => e,
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        _ => return None,
                    });
                    continue;
                }
            },
            c => {
                high.is_none().then_some(())?;
                out.push(c);
                continue;
            }
        };
        match (high.take(), unit) {
            (None, 0xD800..=0xDBFF) => high = Some(unit),
            (Some(h), 0xDC00..=0xDFFF) => out.push(char::from_u32(
                0x10000 + ((h - 0xD800) << 10) + (unit - 0xDC00),
            )?),
            (None, u) => out.push(char::from_u32(u)?),
            (Some(_), _) => return None,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// N x S writes as one batch.
    Batch,
    /// Single writes one after the other.
    Latency,
}

/// The numbers of a run that succeeded (and whose data was verified at
/// the target): each as te_bench.py names it, `None` where the run's mode
/// has no such number.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Numbers {
    /// Whole batch, from the submit call to its completion.
    pub(crate) secs: Option<f64>,
    /// MB = 2^20 bytes, as perftest's.
    pub(crate) mb_per_s: Option<f64>,
    pub(crate) entries_per_s: Option<f64>,
    /// Time inside the submit call per entry (async: the submission only).
    pub(crate) submit_us_per_entry: Option<f64>,
    /// Time inside the one call per entry (sync: submission and transfer).
    pub(crate) call_us_per_entry: Option<f64>,
    /// notify: from the call to the target's seeing the notification.
    pub(crate) notified_secs: Option<f64>,
    /// Latency runs: per sync write, submission to completion.
    pub(crate) median_us: Option<f64>,
    pub(crate) p99_us: Option<f64>,
}

/// One run of te_bench.py.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measurement {
    pub(crate) protocol: String,
    pub(crate) kind: Kind,
    /// `sync`, `async`, `notify` (batches), `sync_write` (latency).
    pub(crate) mode: String,
    pub(crate) entries: usize,
    pub(crate) size: usize,
    /// From 1.
    pub(crate) rep: usize,
    /// The numbers, or why there are none.
    pub(crate) outcome: Result<Numbers, String>,
}

/// A run record, `None` for any other line.
pub(crate) fn measurement(line: &str) -> Option<Measurement> {
    let obj = flat_object(line)?;
    (obj.get("te_bench")?.num()? == 1.0).then_some(())?;
    let kind = match obj.get("kind")? {
        Value::Str(k) if k == "batch" => Kind::Batch,
        Value::Str(k) if k == "latency" => Kind::Latency,
        _ => return None,
    };
    let count = |key: &str| {
        let v = obj.get(key)?.num()?;
        (v >= 0.0 && v.fract() == 0.0).then_some(v as usize)
    };
    let num = |key: &str| obj.get(key).and_then(Value::num);
    let ok = obj.get("ok") == Some(&Value::Bool(true));
    let outcome = if ok {
        Ok(Numbers {
            secs: num("secs"),
            mb_per_s: num("mb_per_s"),
            entries_per_s: num("entries_per_s"),
            submit_us_per_entry: num("submit_us_per_entry"),
            call_us_per_entry: num("call_us_per_entry"),
            notified_secs: num("notified_secs"),
            median_us: num("median_us"),
            p99_us: num("p99_us"),
        })
    } else {
        Err(obj.get("reason").map_or_else(
            || "no reason given".to_string(),
            |r| r.text().split_whitespace().collect::<Vec<_>>().join(" "),
        ))
    };
    Some(Measurement {
        protocol: obj.get("protocol")?.text(),
        kind,
        mode: obj.get("mode")?.text(),
        entries: count("entries")?,
        size: count("size")?,
        rep: count("rep")?,
        outcome,
    })
}

/// The `config` record's members as text (`mooncake`, `python`, `env`,
/// `netns`, `kernel`, ...); empty without one.
pub(crate) fn config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(flat_object)
        .find(|o| o.get("kind") == Some(&Value::Str("config".into())))
        .map(|o| o.into_iter().map(|(k, v)| (k, v.text())).collect())
        .unwrap_or_default()
}

/// The packets the RDMA device sent over the whole run, from te_bench.py's
/// `device` record (rdma only): 0 means the engine wrote over something
/// else.
pub(crate) fn device_packets(text: &str) -> Option<f64> {
    text.lines()
        .filter_map(flat_object)
        .find(|o| o.get("kind") == Some(&Value::Str("device".into())))
        .and_then(|o| o.get("sent_pkts").and_then(Value::num))
}

/// The medians of one mode and shape over its repetitions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Median {
    pub(crate) protocol: String,
    pub(crate) kind: Kind,
    pub(crate) mode: String,
    pub(crate) entries: usize,
    pub(crate) size: usize,
    /// Runs that gave numbers, and runs tried.
    pub(crate) runs: usize,
    pub(crate) attempted: usize,
    /// The median of each number over the runs that have it.
    pub(crate) numbers: Numbers,
    /// Why the last failed run failed (every run, where `runs` is 0).
    pub(crate) failure: Option<String>,
}

impl Median {
    /// The submission cost per entry that compares with ferrovia's: the
    /// submit call alone where the mode has one (async), else the whole
    /// call.
    pub(crate) fn per_entry_us(&self) -> Option<f64> {
        self.numbers
            .submit_us_per_entry
            .or(self.numbers.call_us_per_entry)
    }
}

/// One [`Median`] per protocol, mode and shape, in the order the runs came.
pub(crate) fn medians(runs: &[Measurement]) -> Vec<Median> {
    let mut out: Vec<Median> = Vec::new();
    for m in runs {
        let same = |o: &Median| {
            o.protocol == m.protocol
                && o.mode == m.mode
                && o.entries == m.entries
                && o.size == m.size
        };
        if out.iter().any(same) {
            continue;
        }
        let group: Vec<&Measurement> = runs
            .iter()
            .filter(|r| {
                r.protocol == m.protocol
                    && r.mode == m.mode
                    && r.entries == m.entries
                    && r.size == m.size
            })
            .collect();
        let good: Vec<&Numbers> = group
            .iter()
            .filter_map(|r| r.outcome.as_ref().ok())
            .collect();
        let of = |f: fn(&Numbers) -> Option<f64>| {
            median(&good.iter().filter_map(|n| f(n)).collect::<Vec<_>>())
        };
        out.push(Median {
            protocol: m.protocol.clone(),
            kind: m.kind,
            mode: m.mode.clone(),
            entries: m.entries,
            size: m.size,
            runs: good.len(),
            attempted: group.len(),
            numbers: Numbers {
                secs: of(|n| n.secs),
                mb_per_s: of(|n| n.mb_per_s),
                entries_per_s: of(|n| n.entries_per_s),
                submit_us_per_entry: of(|n| n.submit_us_per_entry),
                call_us_per_entry: of(|n| n.call_us_per_entry),
                notified_secs: of(|n| n.notified_secs),
                median_us: of(|n| n.median_us),
                p99_us: of(|n| n.p99_us),
            },
            failure: group.iter().rev().find_map(|r| r.outcome.clone().err()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as te_bench.py printed them over tcp on the host (abridged).
    const OUTPUT: &str = r#"{"te_bench": 1, "kind": "config", "protocol": "tcp", "device": "", "netns": true, "env": "MC_FORCE_TCP=1 MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER=16384", "mooncake": "0.3.13.post1", "python": "3.11.7", "load1": 0.5}
te_bench: tcp on no device, in a netns with only lo; MC_FORCE_TCP=1
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "async", "entries": 10000, "size": 4096, "rep": 1, "ok": true, "secs": 0.5, "call_us_per_entry": 1.25, "submit_us_per_entry": 1.25, "wait_secs": 0.4875, "verified": true, "wall_secs": 0.6, "mb_per_s": 78.125, "entries_per_s": 20000.0, "load1": 1.5}
te_bench: tcp async 10000 x 4 KiB rep 1: 78.1 MB/s, 20,000 entries/s, submit 1.25 µs/entry, verified
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "async", "entries": 10000, "size": 4096, "rep": 2, "ok": false, "reason": "the async batch returned -1 (initiator's log: W1201 tcp_transport_lane_impl.h:1330] TCP lane queue-full rejection count: 512)", "wall_secs": 0.1, "load1": 1.5}
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "async", "entries": 10000, "size": 4096, "rep": 3, "ok": true, "secs": 0.25, "call_us_per_entry": 1.5, "submit_us_per_entry": 1.5, "mb_per_s": 156.25, "entries_per_s": 40000.0}
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "sync", "entries": 1000, "size": 1048576, "rep": 1, "ok": false, "reason": "needs 2000 MiB (a buffer per side), 1850 MiB available"}
{"te_bench": 1, "protocol": "tcp", "kind": "latency", "mode": "sync_write", "entries": 1, "size": 8, "iters": 1000, "rep": 1, "ok": true, "verified": true, "median_us": 27.1, "p99_us": 120.5, "min_us": 20.0, "mean_us": 30.2}
{"te_bench": 1, "kind": "median", "of": "batch", "protocol": "tcp", "mode": "async", "entries": 10000, "size": 4096, "runs": 2, "attempted": 3, "mb_per_s": 117.1875}
te_bench: median tcp async 10000 x 4 KiB (2/3 runs): 117.2 MB/s
"#;

    #[test]
    fn flat_objects_are_read_and_anything_else_is_not() {
        let o = flat_object(
            r#" { "a" : "x\"y\\zµ\u00b5\ud83d\ude00", "b":-1.5e3,"c":true,"d":null } "#,
        )
        .unwrap();
        assert_eq!(o["a"], Value::Str("x\"y\\zµµ😀".into()));
        assert_eq!(o["b"], Value::Num(-1500.0));
        assert_eq!(o["c"], Value::Bool(true));
        assert_eq!(o["d"], Value::Null);
        assert_eq!(flat_object("{}"), Some(BTreeMap::new()));
        for bad in [
            "",
            "te_bench: tcp sync",
            r#"{"a": [1, 2]}"#,
            r#"{"a": {"b": 1}}"#,
            r#"{"a": 1,}"#,
            r#"{"a": 1} trailing"#,
            r#"{"a": "unterminated}"#,
            r#"{"a": "\ud83d alone"}"#,
            r#"{"a": nan}"#,
            r#"{"a": 1e999}"#,
        ] {
            assert_eq!(flat_object(bad), None, "{bad}");
        }
    }

    #[test]
    fn runs_are_read_with_their_numbers_or_reasons() {
        let runs: Vec<Measurement> = OUTPUT.lines().filter_map(measurement).collect();
        assert_eq!(runs.len(), 5, "config, human and median lines are no runs");
        let first = &runs[0];
        assert_eq!(
            (first.protocol.as_str(), first.kind, first.mode.as_str()),
            ("tcp", Kind::Batch, "async")
        );
        assert_eq!((first.entries, first.size, first.rep), (10000, 4096, 1));
        let numbers = first.outcome.as_ref().unwrap();
        assert_eq!(numbers.submit_us_per_entry, Some(1.25));
        assert_eq!(numbers.mb_per_s, Some(78.125));
        assert_eq!(numbers.notified_secs, None);
        let reason = runs[1].outcome.as_ref().unwrap_err();
        assert!(reason.contains("queue-full rejection"), "{reason}");
        assert!(
            runs[3]
                .outcome
                .as_ref()
                .unwrap_err()
                .starts_with("needs 2000 MiB")
        );
        assert_eq!(runs[4].kind, Kind::Latency);
        assert_eq!(runs[4].outcome.as_ref().unwrap().median_us, Some(27.1));
        assert_eq!(device_packets(OUTPUT), None);
        let rdma = r#"{"te_bench": 1, "kind": "device", "device": "rxe0", "sent_pkts": 0}"#;
        assert_eq!(device_packets(rdma), Some(0.0));
        let config = config(OUTPUT);
        assert_eq!(config["mooncake"], "0.3.13.post1");
        assert_eq!(config["netns"], "true");
        assert!(config["env"].contains("MC_FORCE_TCP=1"));
    }

    #[test]
    fn medians_cover_the_runs_that_gave_numbers() {
        let runs: Vec<Measurement> = OUTPUT.lines().filter_map(measurement).collect();
        let medians = medians(&runs);
        assert_eq!(medians.len(), 3);
        let batch = &medians[0];
        assert_eq!((batch.runs, batch.attempted), (2, 3));
        assert_eq!(batch.numbers.mb_per_s, Some(117.1875));
        assert_eq!(batch.per_entry_us(), Some(1.375));
        assert!(batch.failure.as_ref().unwrap().contains("returned -1"));
        let big = &medians[1];
        assert_eq!((big.runs, big.attempted, big.size), (0, 1, 1 << 20));
        assert_eq!(big.numbers, Numbers::default());
        assert!(big.failure.as_ref().unwrap().starts_with("needs"));
        assert_eq!(medians[2].numbers.median_us, Some(27.1));
        assert_eq!(medians[2].failure, None);
    }
}
