//! Abandonment: a rank that leaves a barrier without passing it tells the
//! listed peers it can reach, and a rank that hears it fails at once (see
//! the `barrier` module docs).

use super::{Fabric, RankState, Run};
use crate::barrier::word;
use crate::error::{AbandonCause, BarrierError};

/// Who gave up first on a barrier this rank failed with `e`, and why: the
/// rank whose abandon it heard passes on, else this rank (`me`) did. Of
/// the ranks a timeout names, one whose connection is broken now (it did
/// not answer and was given up on) is blamed before one that answered it
/// had not arrived yet: the reason has room for one.
pub(super) fn blame(
    me: usize,
    e: &BarrierError,
    broken: impl Fn(usize) -> bool,
) -> (usize, AbandonCause) {
    match e {
        BarrierError::Abandoned { rank, because, .. } => (*rank, *because),
        BarrierError::Unreachable { missing, .. } => (
            me,
            missing
                .first()
                .map_or(AbandonCause::Other, |&p| AbandonCause::Unreachable(p)),
        ),
        BarrierError::Timeout { missing, .. } => (
            me,
            missing
                .iter()
                .find(|&&p| broken(p))
                .or(missing.first())
                .map_or(AbandonCause::Other, |&p| AbandonCause::Missing(p)),
        ),
        _ => (me, AbandonCause::Other),
    }
}

impl Run {
    /// Gives up on this barrier without a result (an async barrier
    /// dropped before it resolved): tells the listed peers, as a failure
    /// does.
    pub(crate) fn cancel(&mut self, st: &RankState, f: &mut impl Fabric) {
        if !self.over {
            self.over = true;
            self.abandon(st, f, st.me, AbandonCause::Other);
        }
    }

    /// Writes this barrier's abandon word, with the reason (`origin` gave
    /// up first, for `cause`), to every listed peer still reachable. Counts
    /// stay as they are: they moved on entry.
    pub(super) fn abandon(
        &self,
        st: &RankState,
        f: &mut impl Fabric,
        origin: usize,
        cause: AbandonCause,
    ) {
        for p in self.others(st.me) {
            if !f.is_broken(p) {
                let k = st.pair_count(p);
                f.abandon(
                    p,
                    word::slot(k),
                    word::abandon(k, self.fp),
                    word::reason(k, origin, cause),
                );
            }
        }
    }

    /// A listed peer's abandon of this barrier waiting in its slot, as the
    /// error naming who gave up first.
    pub(super) fn heard(&self, st: &RankState, f: &impl Fabric) -> Option<BarrierError> {
        self.others(st.me).find_map(|p| {
            let k = st.pair_count(p);
            (f.signal_slot(p, word::slot(k)) == word::abandon(k, self.fp))
                .then(|| self.abandoned_by(st, f, p))
        })
    }

    /// The error for `p`'s abandon of this barrier: the origin and cause
    /// its reason names if the reason goes with it (listed ranks only),
    /// else `p` itself.
    pub(super) fn abandoned_by(&self, st: &RankState, f: &impl Fabric, p: usize) -> BarrierError {
        let listed = |r: usize| self.peers.binary_search(&r).is_ok();
        let (rank, because) = match word::read_reason(f.reason_slot(p), st.pair_count(p)) {
            Some((origin, cause)) if origin != st.me && listed(origin) => match cause {
                AbandonCause::Unreachable(b) | AbandonCause::Missing(b) if !listed(b) => {
                    (origin, AbandonCause::Other)
                }
                cause => (origin, cause),
            },
            _ => (p, AbandonCause::Other),
        };
        BarrierError::Abandoned {
            rank,
            because,
            after: self.after(f),
        }
    }
}
