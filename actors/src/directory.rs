//! Where each actor currently lives, and the bounded way to ask it.
//!
//! Owns the directory of actor references (each actor registers itself in `pre_start` and
//! removes itself in `post_stop`; the supervisor clears a dead child's entry), waiting out an
//! actor's restart, and the bound on requests in flight per actor ([`Mailbox`]). The directory
//! is keyed by message type and name, so it names no actor: each actor's module adds the typed
//! lookups for itself (`impl Directory { pub fn registry(&self) ... }` in `registry/actor.rs`),
//! and this module sits below every actor in the import graph. Must never hold a rule or a
//! read model: those are the cores' and the [`crate::publish`] views'.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorId, ActorRef, RpcReplyPort};
use tokio::sync::Semaphore;

use crate::error::FleetError;

/// A reference to an actor with a bound on the requests in flight to it. Every request from
/// outside the actors (MCP, REST) goes through [`Mailbox::call`], so no actor's mailbox grows
/// past `limits.mailbox` because of callers; internal traffic is bounded by construction
/// (bounded channels from terminals, one timer per actor).
pub struct Mailbox<M: ractor::Message> {
    pub actor: ActorRef<M>,
    permits: Arc<Semaphore>,
    cap: usize,
    label: String,
}

impl<M: ractor::Message> Clone for Mailbox<M> {
    fn clone(&self) -> Self {
        Mailbox {
            actor: self.actor.clone(),
            permits: self.permits.clone(),
            cap: self.cap,
            label: self.label.clone(),
        }
    }
}

impl<M: ractor::Message> Mailbox<M> {
    pub fn new(actor: ActorRef<M>, cap: usize, label: impl Into<String>) -> Self {
        Mailbox {
            actor,
            permits: Arc::new(Semaphore::new(cap.max(1))),
            cap: cap.max(1),
            label: label.into(),
        }
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Ask the actor and wait (bounded) for its answer.
    pub async fn call<R: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<R>) -> M,
        timeout: Duration,
    ) -> Result<R, FleetError> {
        let _permit = self.permits.clone().try_acquire_owned().map_err(|_| {
            FleetError::overloaded(
                format!("a request to {}", self.label),
                format!(
                    "{} requests are already in flight to it (limits.mailbox = {})",
                    self.cap, self.cap
                ),
                "the same request once the daemon has caught up",
            )
        })?;
        match self.actor.call(build, Some(timeout)).await {
            Ok(CallResult::Success(r)) => Ok(r),
            Ok(CallResult::Timeout) => Err(FleetError::timeout(
                format!("a request to {}", self.label),
                format!("no answer within {} ms", timeout.as_millis()),
                "the same request again; if it keeps timing out, see the daemon log",
            )),
            Ok(CallResult::SenderError) | Err(_) => Err(FleetError::unavailable(
                format!("a request to {}", self.label),
                "the actor stopped or is restarting",
            )),
        }
    }

    /// Send without waiting (internal traffic only).
    pub fn cast(&self, msg: M) {
        if self.actor.cast(msg).is_err() {
            tracing::debug!(actor = %self.label, "cast to a stopped actor dropped");
        }
    }
}

/// One directory entry: a value of some type (a [`Mailbox`], an actor reference, a hook) and
/// the actor it belongs to, if any.
struct Entry {
    actor: Option<ActorId>,
    value: Box<dyn Any + Send + Sync>,
}

/// Where each actor currently lives. Entries change when an actor restarts.
#[derive(Default)]
pub struct Directory {
    entries: RwLock<HashMap<(TypeId, String), Entry>>,
    /// Fired on every change, so callers can wait out an actor's restart.
    changed: tokio::sync::Notify,
}

impl Directory {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<(TypeId, String), Entry>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<(TypeId, String), Entry>> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of type `T` under `key` (`""` for a singleton).
    pub fn get<T: Clone + Send + Sync + 'static>(&self, key: &str) -> Option<T> {
        self.read()
            .get(&(TypeId::of::<T>(), key.to_string()))
            .and_then(|e| e.value.downcast_ref::<T>().cloned())
    }

    /// Every key that has an entry of type `T`.
    pub fn keys<T: 'static>(&self) -> Vec<String> {
        let t = TypeId::of::<T>();
        self.read()
            .keys()
            .filter(|(ty, _)| *ty == t)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Register actor `actor`'s entry of type `T` under `key`.
    pub fn set<T: Send + Sync + 'static>(&self, key: &str, actor: Option<ActorId>, value: T) {
        self.write().insert(
            (TypeId::of::<T>(), key.to_string()),
            Entry {
                actor,
                value: Box::new(value),
            },
        );
        self.changed.notify_waiters();
    }

    /// Register an actor's mailbox under `key`.
    pub fn set_mailbox<M: ractor::Message>(&self, key: &str, m: Mailbox<M>) {
        let id = m.actor.get_id();
        self.set(key, Some(id), m);
    }

    /// Remove the entry of type `T` under `key`, whoever it belongs to.
    pub fn remove<T: 'static>(&self, key: &str) {
        self.write().remove(&(TypeId::of::<T>(), key.to_string()));
        self.changed.notify_waiters();
    }

    /// Remove the entry of type `T` under `key` if it still belongs to actor `id` (a restarted
    /// actor's new entry is kept).
    pub fn remove_if<T: 'static>(&self, key: &str, id: ActorId) {
        let mut g = self.write();
        let k = (TypeId::of::<T>(), key.to_string());
        if g.get(&k).is_some_and(|e| e.actor == Some(id)) {
            g.remove(&k);
        }
    }

    /// Remove every entry that belongs to actor `id` (it died).
    pub fn remove_actor(&self, id: ActorId) {
        self.write().retain(|_, e| e.actor != Some(id));
    }

    /// Wait (at most `timeout`) until `get` finds what it looks for: rides out an actor's
    /// restart instead of failing the caller.
    pub async fn wait_for<X>(
        &self,
        get: impl Fn(&Self) -> Option<X>,
        timeout: Duration,
    ) -> Option<X> {
        // Almost always there: no waiter registered, no clock read (a hot path: every ledger
        // append finds the writer this way).
        if let Some(v) = get(self) {
            return Some(v);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(v) = get(self) {
                return Some(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return get(self);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct A(u32);
    #[derive(Clone, Debug, PartialEq)]
    struct B(u32);

    #[test]
    fn entries_are_keyed_by_type_and_name() {
        let d = Directory::default();
        d.set("x", None, A(1));
        d.set("x", None, B(2));
        d.set("y", None, A(3));
        assert_eq!(d.get::<A>("x"), Some(A(1)));
        assert_eq!(d.get::<B>("x"), Some(B(2)));
        assert_eq!(d.get::<B>("y"), None);
        let mut keys = d.keys::<A>();
        keys.sort();
        assert_eq!(keys, vec!["x".to_string(), "y".to_string()]);
    }

    #[tokio::test]
    async fn wait_for_sees_a_later_registration() {
        let d = Arc::new(Directory::default());
        let d2 = d.clone();
        let w = tokio::spawn(async move {
            d2.wait_for(|d| d.get::<A>("late"), Duration::from_secs(10))
                .await
        });
        tokio::task::yield_now().await;
        d.set("late", None, A(9));
        assert_eq!(w.await.unwrap(), Some(A(9)));
        assert_eq!(
            d.wait_for(|d| d.get::<B>("never"), Duration::from_millis(5))
                .await,
            None
        );
    }
}
