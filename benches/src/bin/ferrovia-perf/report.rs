//! perftest's output columns, as text tables or (`--json`) one JSON
//! object per result on stdout, every other line then on stderr.

use std::sync::OnceLock;

/// MB as perftest counts it.
pub(crate) const MB: f64 = (1 << 20) as f64;

/// The test's name, when results go out as JSON.
static JSON: OnceLock<String> = OnceLock::new();

/// Results as JSON lines from now on, each naming `test`.
pub(crate) fn json_for(test: &str) {
    let _ = JSON.set(test.to_owned());
}

/// A line about the run (what runs where): stdout in text mode, stderr
/// with `--json`, so stdout holds records only.
pub(crate) fn note(line: std::fmt::Arguments<'_>) {
    if JSON.get().is_some() {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// One JSON record of `fields` (name, value), named by the test; `false`
/// in text mode.
fn record(fields: &[(&str, f64)]) -> bool {
    let Some(test) = JSON.get() else {
        return false;
    };
    let mut line = format!("{{\"test\": \"{test}\"");
    for (name, value) in fields {
        // JSON has no NaN or infinity.
        if value.is_finite() {
            line.push_str(&format!(", \"{name}\": {value}"));
        } else {
            line.push_str(&format!(", \"{name}\": null"));
        }
    }
    line.push('}');
    println!("{line}");
    true
}

/// One batch_bw result.
pub(crate) fn batch_record(
    entries: usize,
    size: usize,
    rails: usize,
    batches: usize,
    bw: f64,
    per_sec: f64,
    submit_ns: f64,
) -> bool {
    record(&[
        ("entries", entries as f64),
        ("bytes", size as f64),
        ("rails", rails as f64),
        ("batches", batches as f64),
        ("bw_average_mb_s", bw),
        ("entries_per_s", per_sec),
        ("submit_ns_per_entry", submit_ns),
    ])
}

/// Whether results go out as JSON.
pub(crate) fn json() -> bool {
    JSON.get().is_some()
}

pub(crate) fn bw_header() {
    if json() {
        return;
    }
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
}

pub(crate) fn bw_row(size: usize, iters: usize, peak: f64, avg: f64) {
    let mpps = avg * MB / size as f64 / 1e6;
    if record(&[
        ("bytes", size as f64),
        ("iterations", iters as f64),
        ("bw_peak_mb_s", peak),
        ("bw_average_mb_s", avg),
        ("msg_rate_mpps", mpps),
    ]) {
        return;
    }
    println!(" {size:<10} {iters:<14} {peak:<18.2} {avg:<20.2} {mpps:.6}");
}

pub(crate) fn lat_header() {
    if json() {
        return;
    }
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
    );
}

/// One latency row from samples in µs.
pub(crate) fn lat_row(size: usize, mut t: Vec<f64>) {
    if t.is_empty() {
        return;
    }
    t.sort_by(f64::total_cmp);
    let avg = t.iter().sum::<f64>() / t.len() as f64;
    let sd = (t.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / t.len() as f64).sqrt();
    if record(&[
        ("bytes", size as f64),
        ("iterations", t.len() as f64),
        ("t_min_us", t[0]),
        ("t_max_us", t[t.len() - 1]),
        ("t_typical_us", percentile(&t, 0.5)),
        ("t_avg_us", avg),
        ("t_stdev_us", sd),
        ("p99_us", percentile(&t, 0.99)),
        ("p999_us", percentile(&t, 0.999)),
    ]) {
        return;
    }
    println!(
        " {size:<6} {:<14} {:<14.2} {:<12.2} {:<16.2} {avg:<14.2} {sd:<15.2} {:<22.2} {:.2}",
        t.len(),
        t[0],
        t[t.len() - 1],
        percentile(&t, 0.5),
        percentile(&t, 0.99),
        percentile(&t, 0.999)
    );
}

/// The `p` quantile of sorted samples (nearest rank).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.999), 100.0);
        assert_eq!(percentile(&[7.0], 0.5), 7.0);
    }
}
