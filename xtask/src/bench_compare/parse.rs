//! Reading the tools' output and the results file.
//!
//! perftest and `ferrovia-perf` print a header line starting with
//! ` #bytes` and then one line of numbers per message size: bandwidth
//! tests `SIZE ITERS BW_PEAK BW_AVG MSGRATE` (MB/s, MB = 2^20 bytes),
//! latency tests `SIZE ITERS T_MIN T_MAX T_TYPICAL T_AVG T_STDEV P99 P999`
//! (µs, one-way). `ucx_perftest -f` prints one line of eight numbers:
//! iterations; latency percentile (50 % by default), average and overall
//! (µs, one-way: half the round trip of the ping-pong tests; the time per
//! message for the bandwidth tests); bandwidth average and overall (MB/s,
//! MB = 2^20 bytes); message rate average and overall.

use super::plan::{Case, Kind, Tool, Transport};

/// The numbers of the line for message size `size` after perftest's
/// ` #bytes` header; `None` without a header or such a line.
pub(crate) fn perftest_row(lines: &[String], size: usize) -> Option<Vec<f64>> {
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("#bytes"))?;
    lines[header + 1..].iter().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()?.parse::<usize>().ok()? != size {
            return None;
        }
        let rest: Option<Vec<f64>> = words.map(number).collect();
        let mut row = vec![size as f64];
        row.extend(rest?);
        Some(row)
    })
}

/// The number that counts in perftest-style output: the average
/// bandwidth, or the typical latency.
pub(crate) fn perftest_value(lines: &[String], size: usize, kind: Kind) -> Option<f64> {
    let row = perftest_row(lines, size)?;
    match kind {
        Kind::Bandwidth if row.len() >= 5 => Some(row[3]),
        Kind::Latency if row.len() >= 9 => Some(row[4]),
        _ => None,
    }
}

/// The last line of eight numbers in `ucx_perftest -f` output (a `Final:`
/// in front is allowed).
pub(crate) fn ucx_perftest_row(lines: &[String]) -> Option<[f64; 8]> {
    lines.iter().rev().find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("Final:").unwrap_or(line);
        let numbers: Vec<f64> = line.split_whitespace().map(number).collect::<Option<_>>()?;
        numbers.try_into().ok()
    })
}

/// The number that counts in `ucx_perftest -f` output: the overall
/// bandwidth, or the latency percentile (the median).
pub(crate) fn ucx_perftest_value(lines: &[String], kind: Kind) -> Option<f64> {
    let row = ucx_perftest_row(lines)?;
    Some(match kind {
        Kind::Bandwidth => row[5],
        Kind::Latency => row[1],
    })
}

/// The number that counts in the client's output of `tool`.
/// (`ferrovia-perf` prints perftest's columns; it is the reference of
/// the async pairs.)
pub(crate) fn value(case: &Case, tool: Tool, lines: &[String]) -> Option<f64> {
    let kind = case.pair.kind;
    match (tool, case.transport) {
        (Tool::Reference, Transport::UcxTcp | Transport::UcxSm) if !case.pair.scoped_reference => {
            ucx_perftest_value(lines, kind)
        }
        _ => perftest_value(lines, case.size, kind),
    }
}

/// A finite number (perftest never prints NaN or inf on purpose).
fn number(word: &str) -> Option<f64> {
    word.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// How one run ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The number that counts, and how long the client ran (seconds).
    Measured { value: f64, secs: f64 },
    /// Why there is no number.
    Failed(String),
}

/// One run, as the results file keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub(crate) transport: Transport,
    pub(crate) test: String,
    pub(crate) size: usize,
    pub(crate) qps: usize,
    pub(crate) tool: Tool,
    /// Repetition, from 1.
    pub(crate) rep: usize,
    pub(crate) outcome: Outcome,
}

/// `run TRANSPORT TEST SIZE QPS TOOL REP ok VALUE SECS` or
/// `run TRANSPORT TEST SIZE QPS TOOL REP failed REASON...`.
pub(crate) fn to_record(r: &Record) -> String {
    let head = format!(
        "run {} {} {} {} {} {}",
        r.transport.key(),
        r.test,
        r.size,
        r.qps,
        r.tool.key(),
        r.rep
    );
    match &r.outcome {
        Outcome::Measured { value, secs } => format!("{head} ok {value} {secs:.3}"),
        Outcome::Failed(reason) => {
            let reason: Vec<&str> = reason.split_whitespace().collect();
            format!("{head} failed {}", reason.join(" "))
        }
    }
}

/// Inverse of [`to_record`]; `None` for any other line.
pub(crate) fn parse_record(line: &str) -> Option<Record> {
    let mut words = line.split_whitespace();
    if words.next()? != "run" {
        return None;
    }
    let transport = Transport::from_key(words.next()?)?;
    let test = words.next()?.to_string();
    let size = words.next()?.parse().ok()?;
    let qps = words.next()?.parse().ok()?;
    let tool = Tool::from_key(words.next()?)?;
    let rep = words.next()?.parse().ok()?;
    let outcome = match words.next()? {
        "ok" => {
            let value = number(words.next()?)?;
            let secs = number(words.next()?)?;
            Outcome::Measured { value, secs }
        }
        "failed" => Outcome::Failed(words.collect::<Vec<_>>().join(" ")),
        _ => return None,
    };
    Some(Record {
        transport,
        test,
        size,
        qps,
        tool,
        rep,
        outcome,
    })
}

/// `info KEY VALUE...`: a fact about the machine a sweep ran on.
pub(crate) fn to_info(key: &str, value: &str) -> String {
    let value: Vec<&str> = value.split_whitespace().collect();
    format!("info {key} {}", value.join(" "))
}

/// Inverse of [`to_info`].
pub(crate) fn parse_info(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("info ")?;
    let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
    (!key.is_empty()).then(|| (key.to_string(), value.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(String::from).collect()
    }

    /// `ib_write_bw` 6.06 client output, abridged.
    const IB_WRITE_BW: &str = "\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Number of qps   : 1		Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      2000             40.68              31.74  		   0.000508
---------------------------------------------------------------------------------------
";

    /// `ib_write_lat` 6.06 client output, abridged.
    const IB_WRITE_LAT: &str = "\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       5000          16.70          10116.16      40.26    	       306.05      	1043.16		5950.57 		8118.59
---------------------------------------------------------------------------------------
";

    /// `ucx_perftest -f` 1.13 client output.
    const UCX_PERFTEST: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|     Test     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                        2000     26.331   219.660   219.660      284.53     284.53        4552        4552
";

    #[test]
    fn perftest_bandwidth_and_latency_lines() {
        let bw = lines(IB_WRITE_BW);
        assert_eq!(perftest_value(&bw, 65536, Kind::Bandwidth), Some(31.74));
        assert_eq!(perftest_value(&bw, 4096, Kind::Bandwidth), None);
        assert_eq!(perftest_value(&bw, 65536, Kind::Latency), None);
        let lat = lines(IB_WRITE_LAT);
        assert_eq!(perftest_value(&lat, 8, Kind::Latency), Some(40.26));
        assert_eq!(perftest_row(&lat, 8).map(|r| r.len()), Some(9));
    }

    #[test]
    fn ferrovia_perf_prints_perftest_columns() {
        let out = lines(
            "ferrovia-perf write_bw x1 QP\n \
             #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
             4096       10000          60.00              55.25                0.014144\n",
        );
        assert_eq!(perftest_value(&out, 4096, Kind::Bandwidth), Some(55.25));
    }

    #[test]
    fn no_header_or_garbage_gives_nothing() {
        for text in [
            "",
            " 8 5000 1 2 3 4 5 6 7",
            " #bytes\n 8 5000 1 2 x 4 5 6 7",
            " #bytes\n 8 5000 1 2 NaN 4 5 6 7",
            " #bytes\n 8 5000 1 2",
            "Couldn't connect to 127.0.0.1:20001",
        ] {
            assert_eq!(
                perftest_value(&lines(text), 8, Kind::Latency),
                None,
                "{text:?}"
            );
        }
    }

    #[test]
    fn ucx_perftest_final_line() {
        let out = lines(UCX_PERFTEST);
        assert_eq!(ucx_perftest_value(&out, Kind::Bandwidth), Some(284.53));
        assert_eq!(ucx_perftest_value(&out, Kind::Latency), Some(26.331));
        let prefixed = lines("Final:         100 1.5 2 3 4.5 5.5 6 7");
        assert_eq!(ucx_perftest_value(&prefixed, Kind::Latency), Some(1.5));
        assert_eq!(ucx_perftest_row(&lines("Waiting for connection...")), None);
        assert_eq!(ucx_perftest_row(&lines("1 2 3 4 5 6 7")), None);
        let case = |pair| Case {
            transport: Transport::UcxTcp,
            pair,
            size: 8,
            qps: 1,
        };
        let write_bw = case(super::super::plan::UCX_PAIRS[0]);
        assert_eq!(value(&write_bw, Tool::Reference, &out), Some(284.53));
        assert_eq!(
            value(&write_bw, Tool::Ferrovia, &out),
            None,
            "ferrovia-perf prints perftest columns, even over UCX"
        );
        let scoped = super::super::plan::UCX_PAIRS
            .into_iter()
            .find(|p| p.scoped_reference)
            .unwrap();
        assert_eq!(
            value(&case(scoped), Tool::Reference, &out),
            None,
            "the scoped reference of an async pair is ferrovia-perf"
        );
    }

    #[test]
    fn records_round_trip() {
        let measured = Record {
            transport: Transport::Verbs,
            test: "read_lat".into(),
            size: 1 << 20,
            qps: 1,
            tool: Tool::Reference,
            rep: 2,
            outcome: Outcome::Measured {
                value: 812.5,
                secs: 3.25,
            },
        };
        let failed = Record {
            transport: Transport::UcxSm,
            test: "write_bw".into(),
            size: 8,
            qps: 4,
            tool: Tool::Ferrovia,
            rep: 3,
            outcome: Outcome::Failed("timed out after 60 s".into()),
        };
        for r in [&measured, &failed] {
            assert_eq!(parse_record(&to_record(r)).as_ref(), Some(r));
        }
        assert_eq!(
            to_record(&failed),
            "run ucx-sm write_bw 8 4 ferrovia 3 failed timed out after 60 s"
        );
        let multi_line = Record {
            outcome: Outcome::Failed("exit status 1:\n  no device".into()),
            ..failed.clone()
        };
        assert_eq!(
            parse_record(&to_record(&multi_line)).map(|r| r.outcome),
            Some(Outcome::Failed("exit status 1: no device".into()))
        );
        for bad in [
            "",
            "info x y",
            "run verbs write_bw 8 1 ferrovia 1",
            "run nowhere write_bw 8 1 ferrovia 1 ok 1 1",
            "run verbs write_bw 8 1 someone 1 ok 1 1",
            "run verbs write_bw 8 1 ferrovia 1 ok x 1",
            "run verbs write_bw 8 1 ferrovia 1 maybe",
        ] {
            assert_eq!(parse_record(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn info_lines_round_trip() {
        let line = to_info("guest_kernel", "6.1.0-37-amd64\n");
        assert_eq!(line, "info guest_kernel 6.1.0-37-amd64");
        assert_eq!(
            parse_info(&line),
            Some(("guest_kernel".into(), "6.1.0-37-amd64".into()))
        );
        assert_eq!(parse_info("run verbs"), None);
        assert_eq!(parse_info("info "), None);
    }
}
