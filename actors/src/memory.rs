//! Giving freed memory back to the system: after a burst of frees (idle members' screens
//! dropped), one trim of the heap, at most one per [`COALESCE`]. Owns that coalescing; must
//! never trim per free or on a timer of its own (it runs only when something was freed).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Frees within this window of the first share one trim.
pub const COALESCE: Duration = Duration::from_secs(1);

static SCHEDULED: AtomicBool = AtomicBool::new(false);

/// Memory was freed in bulk: trim the heap soon (once for every free in the next
/// [`COALESCE`]). Outside a tokio runtime it does nothing.
pub fn release_soon() {
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        SCHEDULED.store(false, Ordering::Release);
        return;
    };
    rt.spawn(async {
        // A coalescing window, not a synchronisation: frees in it share the one trim.
        tokio::time::sleep(COALESCE).await;
        SCHEDULED.store(false, Ordering::Release);
        let released = tokio::task::spawn_blocking(fleetd_sys::release_free_memory).await;
        tracing::debug!(?released, "freed memory given back to the system");
    });
}
