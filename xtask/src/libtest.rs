//! Reading libtest's summary lines (`test result: ok. 3 passed; 0 failed;
//! 1 ignored; ...`), the only stable part of a test binary's output, from
//! commands whose stdout is shown live and counted at the same time. The
//! same lines count the doctests, which cargo-nextest does not run, and
//! the device tests, whose binaries run by themselves in the VM.

use std::ops::AddAssign;
use std::process::{Command, ExitStatus, Stdio};

use crate::cmd;
use crate::failure::{Failure, Result};
use crate::out::Sink;
use crate::process::read_chunks;

/// Test counts of one or more test binaries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
}

impl AddAssign for Tally {
    fn add_assign(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

impl Tally {
    /// The counts as the small text file `device-tests --totals` writes.
    pub(crate) fn to_totals_text(self) -> String {
        format!(
            "passed {}\nfailed {}\nignored {}\n",
            self.passed, self.failed, self.ignored
        )
    }

    /// Inverse of [`Tally::to_totals_text`]; `None` unless all three counts
    /// are there (a file cut short proves nothing).
    pub(crate) fn from_totals_text(text: &str) -> Option<Tally> {
        let (mut passed, mut failed, mut ignored) = (None, None, None);
        for line in text.lines() {
            let (key, value) = line.trim().split_once(' ')?;
            let value = value.trim().parse::<u64>().ok()?;
            match key {
                "passed" => passed = Some(value),
                "failed" => failed = Some(value),
                "ignored" => ignored = Some(value),
                _ => return None,
            }
        }
        Some(Tally {
            passed: passed?,
            failed: failed?,
            ignored: ignored?,
        })
    }
}

/// The sum of the `test result:` lines in `output`, and how many there were.
fn count(output: &str) -> (Tally, usize) {
    output.lines().filter_map(parse_result_line).fold(
        (Tally::default(), 0),
        |(mut sum, n), tally| {
            sum += tally;
            (sum, n + 1)
        },
    )
}

/// What [`run_counting`] saw.
#[derive(Debug)]
pub(crate) struct Counted {
    /// The sum of all `test result:` lines on stdout.
    pub(crate) tally: Tally,
    /// How many `test result:` lines there were.
    pub(crate) summaries: usize,
    pub(crate) status: ExitStatus,
}

/// Runs `cmd` with its stdout passed through to ours as it comes (chunks,
/// not lines, so a test's name shows while it runs) and counted; stderr is
/// inherited untouched (cargo's progress and colours stay). A closed stdout
/// of ours does not stop the command: its output is then only counted.
pub(crate) fn run_counting(cmd: &mut Command) -> Result<Counted> {
    run_counting_into(cmd, &mut |data| Sink::Stdout.write(data))
}

/// [`run_counting`] with the output passed to `echo` instead of stdout.
fn run_counting_into(cmd: &mut Command, echo: &mut dyn FnMut(&[u8])) -> Result<Counted> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::new(format!("cannot run `{}`: {e}", cmd::describe(cmd))))?;
    // All of it is kept and counted at the end: a test run prints
    // kilobytes, and a summary line may arrive split over two reads.
    let mut output = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        read_chunks(stdout, |chunk| {
            echo(chunk);
            output.extend_from_slice(chunk);
        });
    }
    let status = child
        .wait()
        .map_err(|e| Failure::new(format!("waiting for `{}`: {e}", cmd::describe(cmd))))?;
    let (tally, summaries) = count(&String::from_utf8_lossy(&output));
    Ok(Counted {
        tally,
        summaries,
        status,
    })
}

/// The counts of a `test result:` line, or `None` for any other line.
pub(crate) fn parse_result_line(line: &str) -> Option<Tally> {
    let line = strip_ansi(line);
    let rest = line.trim_start().strip_prefix("test result:")?;
    let words: Vec<&str> = rest
        .split(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let mut tally = Tally::default();
    let mut found = false;
    for pair in words.windows(2) {
        let Ok(count) = pair[0].parse::<u64>() else {
            continue;
        };
        let slot = match pair[1] {
            "passed" => &mut tally.passed,
            "failed" => &mut tally.failed,
            "ignored" => &mut tally.ignored,
            _ => continue,
        };
        *slot = count;
        found = true;
    }
    found.then_some(tally)
}

/// Removes terminal colour sequences (`ESC [ ... m`), which libtest emits
/// when told `--color=always`.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ok_and_failed_summaries() {
        let ok = "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s";
        assert_eq!(
            parse_result_line(ok),
            Some(Tally {
                passed: 3,
                failed: 0,
                ignored: 1
            })
        );
        let failed = "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 5 filtered out; finished in 1.20s";
        assert_eq!(
            parse_result_line(failed),
            Some(Tally {
                passed: 1,
                failed: 2,
                ignored: 0
            })
        );
    }

    #[test]
    fn parses_coloured_summary() {
        let line = "test result: \u{1b}[32mok\u{1b}[0m. 2 passed; 0 failed; 0 ignored; 0 measured";
        assert_eq!(
            parse_result_line(line),
            Some(Tally {
                passed: 2,
                failed: 0,
                ignored: 0
            })
        );
    }

    #[test]
    fn ignores_other_lines() {
        assert_eq!(parse_result_line("running 0 tests"), None);
        assert_eq!(parse_result_line("test foo ... ok"), None);
        assert_eq!(parse_result_line("test result: nonsense"), None);
    }

    /// `cargo test --workspace` output: unit tests, an integration test
    /// binary with nothing in it, a failing binary, doctests.
    const CARGO_TEST_OUTPUT: &str = "\
running 3 tests
test a ... ok
test b ... ok
test c ... ignored

test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

running 2 tests
test d ... FAILED
test e ... ok

failures:
    d

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

   Doc-tests ferrovia_mr

running 4 tests
test src/lib.rs - (line 5) ... ok
test src/lib.rs - (line 9) ... ignored

test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.30s

";

    #[test]
    fn sums_every_summary_line_including_doctests() {
        let want = Tally {
            passed: 6,
            failed: 1,
            ignored: 2,
        };
        assert_eq!(count(CARGO_TEST_OUTPUT), (want, 4));
        assert_eq!(
            count("test result: ok. 5 passed; 0 failed; 0 ignored")
                .0
                .passed,
            5
        );
    }

    #[test]
    fn totals_text_round_trips() {
        let tally = Tally {
            passed: 7,
            failed: 1,
            ignored: 2,
        };
        assert_eq!(
            Tally::from_totals_text(&tally.to_totals_text()),
            Some(tally)
        );
        assert_eq!(Tally::from_totals_text("passed 7\nfailed 1\n"), None);
        assert_eq!(Tally::from_totals_text(""), None);
        assert_eq!(
            Tally::from_totals_text("passed x\nfailed 1\nignored 0\n"),
            None
        );
    }

    #[test]
    fn runs_and_counts_a_command() {
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            "printf 'test result: ok. 2 passed; 0 failed; 1 ignored\\n'; \
             printf 'test result: FAILED. 1 passed; 3 failed; 0 ignored\\n'; exit 101",
        ]);
        // Not echoed to stdout: `cargo xtask test` counts this test's output.
        let mut echoed = Vec::new();
        let counted = run_counting_into(&mut sh, &mut |b| echoed.extend_from_slice(b)).unwrap();
        assert_eq!(echoed.iter().filter(|&&b| b == b'\n').count(), 2);
        assert_eq!(
            counted.tally,
            Tally {
                passed: 3,
                failed: 3,
                ignored: 1
            }
        );
        assert_eq!(counted.summaries, 2);
        assert_eq!(counted.status.code(), Some(101));
    }
}
