//! One pending wake-up per actor: the shell arms it to its core's next deadline after every
//! event, and the wake-up arrives as an ordinary message. Must never run actor code itself (it
//! only sends the message), nor leave a wake-up behind when the actor stops.

use std::time::Duration;

use ractor::ActorRef;
use tokio::task::JoinHandle;

use crate::types::Millis;

/// One pending wake-up for an actor, re-armed to the core's next deadline after every event.
pub struct Timer {
    armed: Option<(Millis, JoinHandle<()>)>,
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

impl Timer {
    pub fn new() -> Self {
        Timer { armed: None }
    }

    /// Arrange for `make()` to be sent to `actor` at `at` (or never, for `None`). The actor
    /// must call [`Timer::fired`] when that message arrives, so the next `arm` always arms
    /// anew (even for the same instant: a wake-up that came a millisecond early must come again).
    pub fn arm<M: ractor::Message>(
        &mut self,
        actor: &ActorRef<M>,
        at: Option<Millis>,
        now: Millis,
        make: fn() -> M,
    ) {
        if let (Some((cur, _)), Some(at)) = (&self.armed, at)
            && *cur == at
        {
            return;
        }
        if let Some((_, h)) = self.armed.take() {
            h.abort();
        }
        if let Some(at) = at {
            let actor = actor.clone();
            // One millisecond past the instant, so the wake-up never reads a clock just short of it.
            let delay = Duration::from_millis(at.saturating_sub(now) + 1);
            let h = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = actor.cast(make());
            });
            self.armed = Some((at, h));
        }
    }

    /// The armed wake-up has been delivered.
    pub fn fired(&mut self) {
        self.armed = None;
    }

    pub fn cancel(&mut self) {
        if let Some((_, h)) = self.armed.take() {
            h.abort();
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.cancel();
    }
}
