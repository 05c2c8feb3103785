//! Read models with one writer each: the actor that owns a piece of state publishes it, and
//! everyone else reads the last published value.
//!
//! Owns the two halves of that arrangement. A [`Publisher`] is handed to the owner when the
//! daemon wires it (its spawn closure keeps it across restarts, so a restarted owner publishes
//! to the same readers); a [`View`] is cloned freely into the shared services. A keyed read
//! model (one entry per peer, say) hands each owner a [`Publisher::entry`] that can write only
//! its own key. Must never let a reader write, nor hold a read across an `.await` (readers
//! get a clone or a short borrow).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

/// The writing half. Only the owning actor (or the one operation that owns the value, like a
/// config reload) holds it.
pub struct Publisher<T> {
    tx: Arc<watch::Sender<T>>,
}

impl<T> Clone for Publisher<T> {
    /// For the owner's spawn closure, which hands the same publisher to each restart.
    fn clone(&self) -> Self {
        Publisher {
            tx: self.tx.clone(),
        }
    }
}

/// The reading half.
pub struct View<T> {
    rx: watch::Receiver<T>,
}

impl<T> Clone for View<T> {
    fn clone(&self) -> Self {
        View {
            rx: self.rx.clone(),
        }
    }
}

/// A read model starting at `init`.
pub fn channel<T>(init: T) -> (Publisher<T>, View<T>) {
    let (tx, rx) = watch::channel(init);
    (Publisher { tx: Arc::new(tx) }, View { rx })
}

impl<T> Publisher<T> {
    /// Replace the value.
    pub fn publish(&self, value: T) {
        self.tx.send_replace(value);
    }

    /// Change the value in place (readers see the change as one step).
    pub fn modify(&self, change: impl FnOnce(&mut T)) {
        self.tx.send_modify(change);
    }
}

impl<K: Ord + Clone + Send + Sync + 'static, V: Send + Sync + 'static> Publisher<BTreeMap<K, V>> {
    /// A publisher of the one entry `key`: its owner can set or clear that entry and no other.
    pub fn entry(&self, key: K) -> EntryPublisher<K, V> {
        EntryPublisher {
            all: self.clone(),
            key,
        }
    }
}

/// Writes one key of a keyed read model.
pub struct EntryPublisher<K, V> {
    all: Publisher<BTreeMap<K, V>>,
    key: K,
}

impl<K: Clone, V> Clone for EntryPublisher<K, V> {
    fn clone(&self) -> Self {
        EntryPublisher {
            all: self.all.clone(),
            key: self.key.clone(),
        }
    }
}

impl<K: Ord + Clone, V> EntryPublisher<K, V> {
    pub fn key(&self) -> &K {
        &self.key
    }

    pub fn publish(&self, value: V) {
        let key = self.key.clone();
        self.all.modify(move |m| {
            m.insert(key, value);
        });
    }

    pub fn clear(&self) {
        self.all.modify(|m| {
            m.remove(&self.key);
        });
    }
}

impl<T> View<T> {
    /// Read the current value through `f` (a short borrow; never held across an `.await`).
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.rx.borrow())
    }
}

impl<T: Clone> View<T> {
    /// A copy of the current value.
    pub fn get(&self) -> T {
        self.rx.borrow().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_what_the_owner_publishes() {
        let (p, v) = channel(1u32);
        let v2 = v.clone();
        assert_eq!(v.get(), 1);
        p.publish(2);
        assert_eq!((v.get(), v2.get()), (2, 2));
        p.modify(|x| *x += 1);
        assert_eq!(v.with(|x| *x), 3);
        // A restarted owner (a clone of the publisher) writes to the same readers.
        p.clone().publish(7);
        assert_eq!(v2.get(), 7);
    }

    #[test]
    fn an_entry_publisher_writes_only_its_key() {
        let (p, v) = channel(BTreeMap::<String, u32>::new());
        let a = p.entry("a".to_string());
        let b = p.entry("b".to_string());
        a.publish(1);
        b.publish(2);
        a.publish(11);
        assert_eq!(v.get(), BTreeMap::from([("a".into(), 11), ("b".into(), 2)]));
        b.clear();
        assert_eq!(v.get(), BTreeMap::from([("a".into(), 11)]));
    }
}
