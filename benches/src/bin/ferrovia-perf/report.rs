//! perftest's output columns.

/// MB as perftest counts it.
pub(crate) const MB: f64 = (1 << 20) as f64;

pub(crate) fn bw_header() {
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
}

pub(crate) fn bw_row(size: usize, iters: usize, peak: f64, avg: f64) {
    let mpps = avg * MB / size as f64 / 1e6;
    println!(" {size:<10} {iters:<14} {peak:<18.2} {avg:<20.2} {mpps:.6}");
}

pub(crate) fn lat_header() {
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
