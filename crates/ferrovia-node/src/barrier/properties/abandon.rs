//! Abandonment on the simulated fabric: some ranks know a connection
//! broken from the start, so every barrier listing that pair fails at the
//! rank that knows at once, and it tells the others.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::super::sim::{History, Landing};
use super::super::word;
use super::*;

/// The timeout of a barrier listing a broken pair: short, so ranks that
/// hear nothing (the broken side's partner) do not hold up the others
/// long; the rest get [`GENEROUS`].
const BAD: Duration = Duration::from_millis(200);

/// Plans without deaths where one or two connections are known broken on
/// one side from the start.
fn broken_plan() -> impl Strategy<Value = Plan> {
    plan_with(12, Just(GENEROUS).boxed(), false)
        .prop_flat_map(|plan| {
            let w = plan.world;
            let pair = (0..w, 0..w).prop_filter("two ranks", |(r, p)| r != p);
            (Just(plan), proptest::collection::vec(pair, 1..=2))
        })
        .prop_map(|(mut plan, broken)| {
            plan.broken = broken;
            // Ranks that leave would fail barriers they never listed a
            // broken pair in: not this property's world.
            plan.leave_resets = false;
            for (i, (ranks, _)) in plan.barriers.iter().enumerate() {
                if lists_broken(&plan, ranks) {
                    plan.timeouts[i].fill(BAD);
                }
            }
            plan
        })
}

fn lists_broken(plan: &Plan, ranks: &[usize]) -> bool {
    plan.broken
        .iter()
        .any(|(r, p)| ranks.contains(r) && ranks.contains(p))
}

/// The barrier in which ranks `a` and `b` have pair count `count`.
fn call_of(plan: &Plan, a: usize, b: usize, count: u64) -> Option<usize> {
    let mut k = 0;
    plan.barriers.iter().position(|(ranks, _)| {
        k += u64::from(ranks.contains(&a) && ranks.contains(&b));
        k == count
    })
}

/// The barrier an abandon word belongs to.
fn call_of_landing(plan: &Plan, l: &Landing) -> Option<usize> {
    call_of(plan, l.from, l.to, word::count_of(l.word))
}

fn check_abandonment(plan: &Plan, h: &History) -> Result<(), TestCaseError> {
    check(plan, h)?;
    let record =
        |rank: usize, call: usize| h.records.iter().find(|r| r.rank == rank && r.call == call);
    // Barriers listing a broken pair fail everywhere; the others pass
    // everywhere: an abandon never reaches beyond its own barrier.
    for rec in &h.records {
        let bad = lists_broken(plan, &plan.barriers[rec.call].0);
        prop_assert_eq!(rec.result.is_err(), bad, "{:?}", rec);
    }
    for l in &h.abandons {
        let call = call_of_landing(plan, l);
        prop_assert!(call.is_some(), "{l:?} belongs to no barrier");
        let call = call.unwrap_or_default();
        let sender = record(l.from, call);
        prop_assert!(
            sender.is_some_and(|s| s.result.is_err() && s.ended <= l.at),
            "{l:?}: its sender had not failed barrier {call}: {sender:?}"
        );
        // The rank it reached, if it had not left the barrier, fails as
        // soon as it is in it, unless it was already querying.
        let Some(rec) = record(l.to, call) else {
            continue;
        };
        if rec.ended < l.at || rec.queried.is_some_and(|q| q <= l.at) {
            continue;
        }
        prop_assert!(rec.result.is_err(), "{rec:?} passed, {l:?}");
        let heard = l.at.max(rec.started);
        // Overwritten before the rank could look: a sender four barriers
        // ahead reused the slot, and the rank finds a later barrier's word
        // there instead (it fails, by that word's rule).
        if l.until.is_some_and(|u| u <= heard + TICK) {
            continue;
        }
        prop_assert!(
            rec.ended <= heard + TICK,
            "{rec:?} failed {:?} after it heard {l:?}",
            rec.ended - heard
        );
    }
    // Every abandoned failure heard an abandon of its own barrier.
    for rec in &h.records {
        if let Err(BarrierError::Abandoned { .. }) = rec.result {
            let heard = h.abandons.iter().any(|l| {
                l.to == rec.rank && l.at <= rec.ended && call_of_landing(plan, l) == Some(rec.call)
            });
            prop_assert!(heard, "{rec:?} heard no abandon of its barrier");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A rank that knows a listed connection broken fails the barrier at
    /// once and tells the peers it can reach: each of them fails as soon
    /// as it is in the barrier and the word has landed (and passes it on),
    /// no abandon fails another barrier, and barriers on healthy pairs
    /// pass.
    #[test]
    fn an_abandoned_barrier_fails_fast_where_heard_and_nowhere_else(plan in broken_plan()) {
        check_abandonment(&plan, &plan.run())?;
    }
}

/// The plans do abandon barriers, and ranks do hear it (so the property is
/// not checked on histories where nobody abandons).
#[test]
fn the_broken_plans_abandon_barriers_and_ranks_hear_it() {
    let mut runner = TestRunner::deterministic();
    let strategy = broken_plan();
    let (mut abandons, mut abandoned) = (0, 0);
    for _ in 0..100 {
        let h = strategy.new_tree(&mut runner).unwrap().current().run();
        abandons += h.abandons.len();
        abandoned += h
            .records
            .iter()
            .filter(|r| matches!(r.result, Err(BarrierError::Abandoned { .. })))
            .count();
    }
    assert!(
        abandons > 0 && abandoned > 0,
        "{abandons} landed, {abandoned} failed by them"
    );
}
