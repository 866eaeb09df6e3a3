//! `deadline_after`: the instant a wait of a caller's timeout ends.

use std::time::{Duration, Instant};

/// A century: the deadline of a wait whose timeout does not fit an
/// `Instant` (`Duration::MAX`, "wait for ever"), in effect never.
const FOR_EVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `Instant::now() + timeout`, without its panic when `timeout` is too
/// large for an `Instant` (`Duration::MAX`): such a wait ends a century
/// from now instead.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FOR_EVER))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_too_large_for_an_instant_is_a_far_deadline_not_a_panic() {
        let far = deadline_after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(50 * 365 * 24 * 3600));
        let near = deadline_after(Duration::from_millis(5));
        assert!(near <= Instant::now() + Duration::from_millis(5));
    }
}
