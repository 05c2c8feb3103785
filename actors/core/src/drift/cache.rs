//! A peer's last good anchor, which its puller keeps durably so that an unreadable KB (or a
//! restart) does not lose it, and the rule for when it is replaced: only from a real read of the
//! peer's log (never from the cache itself), and only when the anchor or its time changed.

use serde::{Deserialize, Serialize};

use crate::types::Millis;

/// A peer's last good anchor, kept durably by its puller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedAnchor {
    pub anchor: String,
    pub ts: String,
    pub tick: u64,
    pub pulled_at: Millis,
}

/// The anchor to keep after a pass that found `anchor` (its line, time and tick), if it must be
/// saved: `readable` says the peer's log was read this pass (a report built from the cache is
/// not a new anchor).
pub fn refreshed(
    anchor: Option<(&str, &str, u64)>,
    readable: bool,
    cached: Option<&CachedAnchor>,
    now: Millis,
) -> Option<CachedAnchor> {
    let (anchor, ts, tick) = anchor?;
    if !readable || cached.is_some_and(|c| c.anchor == anchor && c.ts == ts) {
        return None;
    }
    Some(CachedAnchor {
        anchor: anchor.to_string(),
        ts: ts.to_string(),
        tick,
        pulled_at: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_new_anchor_from_a_real_read_is_kept() {
        let r = Some(("role: reviewer", "2026-12-05T00:00:00Z", 3));
        let kept = refreshed(r, true, None, 10).expect("a first anchor is kept");
        assert_eq!((kept.tick, kept.pulled_at), (3, 10));
        assert_eq!(refreshed(r, true, Some(&kept), 20), None, "unchanged");
        assert_eq!(refreshed(r, false, None, 20), None, "not from a real read");
        assert_eq!(refreshed(None, true, Some(&kept), 20), None, "no anchor");
        let later = Some(("role: reviewer", "2026-12-05T01:00:00Z", 4));
        assert_eq!(
            refreshed(later, true, Some(&kept), 30).map(|c| c.tick),
            Some(4)
        );
    }
}
