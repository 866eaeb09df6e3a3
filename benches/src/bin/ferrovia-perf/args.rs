//! perftest-style command line.

/// The tests, in perftest's vocabulary.
pub(crate) const TESTS: [&str; 7] = [
    "write_bw",
    "write_lat",
    "read_bw",
    "read_lat",
    "send_bw",
    "send_lat",
    "barrier",
];

#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) test: String,
    pub(crate) sizes: Vec<usize>,
    pub(crate) iters: usize,
    pub(crate) tx_depth: usize,
    pub(crate) qps: usize,
    /// Work requests per post list (one doorbell, the last signalled).
    pub(crate) post_list: usize,
    pub(crate) device: Option<String>,
    pub(crate) port: u16,
    pub(crate) server: Option<String>,
    /// Through `ferrovia-async` (`--async`, `--async-busy`).
    pub(crate) asynchronous: bool,
    /// Async with busy polling (`--async-busy`).
    pub(crate) busy: bool,
}

impl Args {
    pub(crate) fn is_bandwidth(&self) -> bool {
        self.test.ends_with("_bw")
    }
}

pub(crate) fn usage() -> String {
    format!(
        "usage: ferrovia-perf {} [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-q QPS] [-l POST_LIST] [-a] [-d DEVICE] [-p PORT] [--async|--async-busy] [SERVER]",
        TESTS.join("|")
    )
}

/// Parses `words` (the arguments after the program name).
pub(crate) fn parse(words: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut it = words.into_iter();
    let test = it.next().ok_or_else(usage)?;
    if !TESTS.contains(&test.as_str()) {
        return Err(format!("unknown test {test:?}\n{}", usage()));
    }
    let mut a = Args {
        iters: if test.ends_with("_bw") { 5000 } else { 1000 },
        sizes: vec![if test.ends_with("_bw") { 65536 } else { 8 }],
        test,
        tx_depth: 128,
        qps: 1,
        post_list: 16,
        device: None,
        port: 18515,
        server: None,
        asynchronous: false,
        busy: false,
    };
    let num = |flag: &str, v: Option<String>| -> Result<usize, String> {
        v.ok_or(format!("{flag} needs a value"))?
            .parse()
            .map_err(|e| format!("{flag}: {e}"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "-s" | "--size" => a.sizes = vec![num(&flag, it.next())?],
            "-n" | "--iters" => a.iters = num(&flag, it.next())?,
            "-t" | "--tx-depth" => a.tx_depth = num(&flag, it.next())?,
            "-q" | "--qp" => a.qps = num(&flag, it.next())?,
            "-l" | "--post-list" => a.post_list = num(&flag, it.next())?,
            "-a" | "--all" => a.sizes = (1..=23).map(|p| 1usize << p).collect(),
            "--async" => a.asynchronous = true,
            "--async-busy" => (a.asynchronous, a.busy) = (true, true),
            "-d" | "--ib-dev" => a.device = Some(it.next().ok_or("-d needs a device name")?),
            "-p" | "--port" => {
                a.port = u16::try_from(num(&flag, it.next())?).map_err(|e| e.to_string())?
            }
            other if !other.starts_with('-') && a.server.is_none() => {
                a.server = Some(other.to_owned())
            }
            other => return Err(format!("unknown flag {other:?}\n{}", usage())),
        }
    }
    if a.iters == 0 || a.tx_depth == 0 || a.qps == 0 || a.post_list == 0 || a.sizes.contains(&0) {
        return Err("sizes, iterations, tx depth, QPs and post lists must be positive".into());
    }
    if a.qps > 1 && a.asynchronous {
        return Err("-q is a scoped-path option (one async engine per process)".into());
    }
    if a.qps > 1 && !a.is_bandwidth() {
        return Err("-q applies to the bandwidth tests".into());
    }
    if usize::from(a.port) + a.qps > usize::from(u16::MAX) {
        return Err("port + QPs exceeds 65535".into());
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Args, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn perftest_flags_parse() {
        let a = p("read_bw -s 4096 -n 10 -t 64 -q 4 -l 4 -d rxe0 -p 9000 10.0.0.1").unwrap();
        assert_eq!(a.post_list, 4);
        assert_eq!(a.sizes, [4096]);
        assert_eq!((a.iters, a.tx_depth, a.qps, a.port), (10, 64, 4, 9000));
        assert_eq!(a.device.as_deref(), Some("rxe0"));
        assert_eq!(a.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(p("send_lat -a").unwrap().sizes.len(), 23);
        assert_eq!(p("barrier").unwrap().sizes, [8]);
        let a = p("write_lat --async-busy").unwrap();
        assert!(a.asynchronous && a.busy);
        assert!(p("write_bw --async -q 2").is_err());
    }

    #[test]
    fn bad_command_lines_are_refused() {
        for bad in [
            "",
            "atomic_bw",
            "write_bw -s",
            "write_bw -s 0",
            "write_bw -l 0",
            "write_bw -n x",
            "write_lat -q 2",
            "write_bw a b",
            "write_bw -p 65535 -q 2",
        ] {
            assert!(p(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
