//! Injected time. Every TTL, deadline and recency rule reads the clock passed to it, so tests
//! drive time by hand instead of sleeping. Owns nothing else; must never sleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::types::Millis;

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Millis;
}

/// The real clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one wall-clock read in the rules' crate: the shells hand this clock to the cores.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Millis {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock tests move by hand.
///
/// ```
/// use fleetd_actors::clock::{Clock, ManualClock};
/// let c = ManualClock::new(1_000);
/// c.advance(500);
/// assert_eq!(c.now(), 1_500);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start)))
    }
    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    pub fn set(&self, ms: Millis) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// Shared handle to whichever clock the daemon runs on.
pub type SharedClock = Arc<dyn Clock>;

/// Format milliseconds since the epoch as RFC 3339 (UTC, millisecond precision).
pub fn rfc3339(ms: Millis) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms as i64)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The UTC date of a time, as the file name uses it.
pub fn date_of(ms: Millis) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| "1970-01-01".into())
}
