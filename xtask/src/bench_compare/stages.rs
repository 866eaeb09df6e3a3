//! The stages of `bench --compare` and their deadlines. In the VM boot
//! (or on a host's RDMA device): the verbs pairs, then `batch_bw` on the
//! device alone and on both rails, then Mooncake over rdma, then the
//! barrier sweep with what is left. On the host: the UCX pairs, then
//! `batch_bw` over UCX tcp and shared memory, then Mooncake over tcp.
//! Each stage has a share of its place's budget; the deadlines add up, so
//! a stage that ends early leaves its time to the ones after it, and one
//! that is squeezed (a short budget) squeezes the earlier stages first.

use std::path::Path;
use std::time::{Duration, Instant};

use super::mooncake::compare::{self, Job};
use super::{Sweep, batch, parse, sweep};
use crate::bench;
use crate::failure::Result;
use crate::workspace::append_line;

/// The verbs pairs' share: a full sweep of 5 repetitions takes 8-13 min
/// under TCG.
const PAIRS_SHARE: Duration = Duration::from_secs(840);
/// batch_bw on the device: 5 repetitions of 8 runs take ~7.5 min under
/// TCG (the 10,000 x 64 KiB runs ~25 s each).
const VM_BATCH_SHARE: Duration = Duration::from_secs(480);
/// Mooncake over rdma: one repetition of its 4 shapes took 50 s under
/// TCG, VM boot included.
const VM_MOONCAKE_SHARE: Duration = Duration::from_secs(210);
/// The barrier sweep runs only if this much is left at its turn (it
/// takes 70 s or more under TCG).
pub(crate) const BARRIER_MIN: Duration = Duration::from_secs(90);
/// The shares of the verbs stages, in order (the barrier's last).
const VM_SHARES: [Duration; 4] = [PAIRS_SHARE, VM_BATCH_SHARE, VM_MOONCAKE_SHARE, BARRIER_MIN];
/// The verbs stages together.
pub(crate) const VERBS_BUDGET: Duration = Duration::from_secs(840 + 480 + 210 + 90);

/// The UCX pairs (a full sweep of 5 repetitions takes about 4 min).
const UCX_SHARE: Duration = Duration::from_secs(400);
/// batch_bw over UCX: 5 repetitions of 16 runs take about 2.5 min.
const HOST_BATCH_SHARE: Duration = Duration::from_secs(240);
/// Mooncake over tcp, async only: about a minute.
const HOST_MOONCAKE_SHARE: Duration = Duration::from_secs(150);
/// The host's stages, in order.
pub(crate) const HOST_SHARES: [Duration; 3] = [UCX_SHARE, HOST_BATCH_SHARE, HOST_MOONCAKE_SHARE];
/// The host's stages together.
pub(crate) const HOST_BUDGET: Duration = Duration::from_secs(400 + 240 + 150);

/// The deadline of each stage of `shares` starting at `start`: stage i
/// ends at `start` plus the shares up to i, but early enough to leave the
/// later stages theirs before `end`; the last ends at `end`.
pub(crate) fn deadlines(start: Instant, shares: &[Duration], end: Instant) -> Vec<Instant> {
    let mut out = Vec::with_capacity(shares.len());
    let mut sum = Duration::ZERO;
    for (i, share) in shares.iter().enumerate() {
        sum += *share;
        if i + 1 == shares.len() {
            out.push(end.max(start));
            break;
        }
        let later: Duration = shares[i + 1..].iter().sum();
        let by_end = end.checked_sub(later).unwrap_or(start).max(start);
        out.push((start + sum).min(by_end));
    }
    out
}

/// The time left until `deadline`.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The verbs stages of `s` (its `deadline` is the end of them all), on
/// `s.device`: the pairs, `batch_bw`, Mooncake over rdma given `job`,
/// then the barrier sweep given `rank`. A Mooncake run that fails
/// becomes an `info mooncake_failed REASON` line of the results file.
pub(crate) fn verbs(s: &Sweep<'_>, rank: Option<&Path>, job: Option<&Job>) -> Result<()> {
    let [pairs_end, batch_end, mooncake_end, barrier_end] =
        deadlines(Instant::now(), &VM_SHARES, s.deadline)[..]
    else {
        unreachable!("four shares, four deadlines")
    };
    sweep(&Sweep {
        perftest: Path::new(super::UCX_PERFTEST),
        reps: 1..=super::plan::REPS,
        deadline: pairs_end,
        ..*s
    })?;
    let in_vm = std::env::var("SOFTROCE_VM").is_ok_and(|v| v == "1");
    say!(
        "xtask bench: batch_bw on {} and its second rail, {} s left for it",
        s.device,
        left(batch_end).as_secs()
    );
    batch::sweep(
        s.perf,
        s.device,
        s.file,
        &[super::Transport::Verbs],
        batch_end,
        if in_vm {
            batch::VM_LIMITS
        } else {
            batch::HOST_LIMITS
        },
    )?;
    if let Some(job) = job {
        say!(
            "xtask bench: Mooncake over rdma on {}, {} s left for it",
            s.device,
            left(mooncake_end).as_secs()
        );
        if let Some(reason) = compare::run_rdma(job, s.device, left(mooncake_end))? {
            say!("xtask bench: Mooncake over rdma: {reason}");
            append_line(s.file, &parse::to_info("mooncake_failed", &reason))?;
        }
    }
    let Some(rank) = rank else {
        return Ok(());
    };
    let left = left(barrier_end);
    if left < BARRIER_MIN {
        say!(
            "xtask bench: {} s of the budget left: no barrier sweep (it needs {} s)",
            left.as_secs(),
            BARRIER_MIN.as_secs()
        );
        return Ok(());
    }
    say!(
        "xtask bench: the barrier sweep of cargo xtask bench barrier, {} s left",
        left.as_secs()
    );
    bench::sweep_until(rank, s.file, Some(barrier_end))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budgets_add_up() {
        assert_eq!(VM_SHARES.iter().sum::<Duration>(), VERBS_BUDGET);
        assert_eq!(HOST_SHARES.iter().sum::<Duration>(), HOST_BUDGET);
    }

    #[test]
    fn deadlines_add_up_and_leave_later_stages_their_share() {
        let s = |n| Duration::from_secs(n);
        let t0 = Instant::now();
        let shares = [s(100), s(50), s(30)];
        // Room for all: each ends after its own share, the last at the end.
        assert_eq!(
            deadlines(t0, &shares, t0 + s(200)),
            [t0 + s(100), t0 + s(150), t0 + s(200)]
        );
        // Squeezed: the later stages keep theirs, the first gets the rest.
        assert_eq!(
            deadlines(t0, &shares, t0 + s(120)),
            [t0 + s(40), t0 + s(90), t0 + s(120)]
        );
        // Less than the later shares: nothing for the first.
        assert_eq!(
            deadlines(t0, &shares, t0 + s(60)),
            [t0, t0 + s(30), t0 + s(60)]
        );
        assert_eq!(deadlines(t0, &[s(5)], t0 + s(1)), [t0 + s(1)]);
    }
}
