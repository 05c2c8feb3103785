//! Durable state in redb: the member table, every message with its receipt, every ticket.
//!
//! Owns the on-disk schema and the rule that a write is durable (fsynced by redb's immediate
//! durability) before the function returns, so an actor that awaits it may then answer its
//! caller. Values are JSON so a state dir can be read with ordinary tools and fields can be
//! added without a migration. Must never hold a transaction across an await, and never be
//! called on an async worker thread without [`Store::run`].

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::decision::state::Refused;
use crate::drift::cache::CachedAnchor;
use crate::error::FleetError;
use crate::injector::state::{Message, ReceiptState};
use crate::mail::envelope::Envelope;
use crate::registry::state::MemberRecord;
use crate::tickets::state::Ticket;
use crate::types::{DecisionId, MemberName, MsgId, TicketId};

const MEMBERS: TableDefinition<&str, &[u8]> = TableDefinition::new("members");
const MESSAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("messages");
const TICKETS: TableDefinition<u64, &[u8]> = TableDefinition::new("tickets");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REFUSALS: TableDefinition<u64, &[u8]> = TableDefinition::new("decision_refusals");
const DRIFT_CACHE: TableDefinition<&str, &[u8]> = TableDefinition::new("drift_cache");
/// Lead-to-lead mail waiting for its peer to hold it durably, by (peer, seq).
const MAIL_OUT: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("mail_out");
/// Lead-to-lead traffic received and not yet handed on, by (peer, this host's arrival number).
const MAIL_IN: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("mail_in");
/// `epoch`; `next:PEER` (the next outgoing seq); `mark:PEER` and `mark_epoch:PEER`.
const MAIL_META: TableDefinition<&str, u64> = TableDefinition::new("mail_meta");

const NEXT_TICKET: &str = "next_ticket";
/// The highest message number the desk has reserved (it may have handed out any up to it).
const MSG_RESERVED: &str = "msg_reserved";

/// Errors of the durable store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: redb::DatabaseError,
    },
    #[error("state database: {0}")]
    Db(String),
    #[error(
        "the state database {path} is damaged ({detail}). Restore the state dir from a backup (docs/OPERATIONS.md), or move the file aside to start with an empty fleet"
    )]
    Damaged { path: String, detail: String },
    #[error("state database holds a record that does not decode ({what}): {source}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Db(e.to_string()) }
        }
    )*};
}
db_err!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl From<StoreError> for FleetError {
    fn from(e: StoreError) -> Self {
        FleetError::internal("the write to the state dir", e.to_string())
    }
}

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing our own plain structs to JSON cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

fn dec<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Decode {
        what: what.to_string(),
        source,
    })
}

/// A batch of writes committed in one durable transaction.
#[derive(Default, Debug)]
pub struct Batch {
    pub members: Vec<MemberRecord>,
    pub messages: Vec<Message>,
    pub tickets: Vec<Ticket>,
    pub delete_tickets: Vec<TicketId>,
    pub next_ticket: Option<u64>,
    /// Message numbers up to this one may be handed out (the desk's reservation).
    pub msg_reserved: Option<u64>,
    /// Outgoing lead-to-lead envelopes, by peer.
    pub mail_out: Vec<(String, Envelope)>,
    /// Outgoing envelopes a peer now holds: delete this peer's up to this seq.
    pub mail_out_done: Vec<(String, u64)>,
    /// Received envelopes to keep until they are handed on: (peer, this host's arrival number,
    /// envelope). Not keyed by the sender's seq, which a sender's new epoch reuses.
    pub mail_in: Vec<(String, u64, Envelope)>,
    /// Received envelopes handed on: (peer, arrival number).
    pub mail_in_done: Vec<(String, u64)>,
    pub mail_meta: Vec<(String, u64)>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
            && self.messages.is_empty()
            && self.tickets.is_empty()
            && self.delete_tickets.is_empty()
            && self.next_ticket.is_none()
            && self.msg_reserved.is_none()
            && self.mail_out.is_empty()
            && self.mail_out_done.is_empty()
            && self.mail_in.is_empty()
            && self.mail_in_done.is_empty()
            && self.mail_meta.is_empty()
    }
}

/// The daemon's redb database.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
}

impl StoreError {
    /// Another daemon holds the database.
    pub fn is_in_use(&self) -> bool {
        matches!(
            self,
            StoreError::Open {
                source: redb::DatabaseError::DatabaseAlreadyOpen
                    | redb::DatabaseError::LockProtocolMismatch,
                ..
            }
        )
    }
}

impl Store {
    /// Open (or create) the database at `path`. Fails if another daemon holds it, and fails
    /// cleanly (never a panic) if the file is damaged: its checksums are checked and every
    /// record is read once before the daemon uses it.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let damaged = |detail: String| StoreError::Damaged {
            path: path.display().to_string(),
            detail,
        };
        match crate::quiet::catch(|| Self::open_checked(path)) {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(StoreError::Open { source, .. }))
                if matches!(
                    &source,
                    redb::DatabaseError::UpgradeRequired(_)
                        | redb::DatabaseError::Storage(redb::StorageError::Corrupted(_))
                ) || matches!(&source, redb::DatabaseError::Storage(redb::StorageError::Io(e))
                        if e.kind() == std::io::ErrorKind::InvalidData) =>
            {
                Err(damaged(source.to_string()))
            }
            Ok(Err(e @ (StoreError::Db(_) | StoreError::Decode { .. }))) => {
                Err(damaged(e.to_string()))
            }
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(damaged(format!("reading it failed inside redb: {panic}"))),
        }
    }

    fn open_checked(path: &Path) -> Result<Store, StoreError> {
        let mut db = Database::create(path).map_err(|source| StoreError::Open {
            path: path.display().to_string(),
            source,
        })?;
        match db.check_integrity() {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                path = %path.display(),
                "the state database was repaired (rolled back to its last intact commit)"
            ),
            Err(e) => return Err(StoreError::Db(format!("integrity check: {e}"))),
        }
        let tx = db.begin_write()?;
        {
            tx.open_table(MEMBERS)?;
            tx.open_table(MESSAGES)?;
            tx.open_table(TICKETS)?;
            tx.open_table(META)?;
            tx.open_table(REFUSALS)?;
            tx.open_table(DRIFT_CACHE)?;
            tx.open_table(MAIL_OUT)?;
            tx.open_table(MAIL_IN)?;
            tx.open_table(MAIL_META)?;
        }
        tx.commit()?;
        let store = Store { db: Arc::new(db) };
        store.read_everything()?;
        Ok(store)
    }

    /// Read every record of every table once (a damaged page panics or errors here, at start,
    /// not in the middle of serving).
    fn read_everything(&self) -> Result<(), StoreError> {
        fn all<K: redb::Key + 'static, V: redb::Value + 'static>(
            tx: &redb::ReadTransaction,
            t: TableDefinition<K, V>,
        ) -> Result<(), StoreError> {
            let table = tx.open_table(t)?;
            for row in table.iter()? {
                row?;
            }
            Ok(())
        }
        let tx = self.db.begin_read()?;
        all(&tx, MEMBERS)?;
        all(&tx, MESSAGES)?;
        all(&tx, TICKETS)?;
        all(&tx, META)?;
        all(&tx, REFUSALS)?;
        all(&tx, DRIFT_CACHE)?;
        all(&tx, MAIL_OUT)?;
        all(&tx, MAIL_IN)?;
        all(&tx, MAIL_META)?;
        Ok(())
    }

    /// Run a blocking store call off the async worker threads.
    pub async fn run<T, F>(&self, f: F) -> Result<T, FleetError>
    where
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let s = self.clone();
        match tokio::task::spawn_blocking(move || f(&s)).await {
            Ok(r) => r.map_err(FleetError::from),
            Err(e) => Err(FleetError::internal(
                "a state dir write",
                format!("the writer task failed: {e}"),
            )),
        }
    }

    /// Run a blocking store call off the async worker threads and hand its result to `then`
    /// on the thread that ran it: for an actor that learns of the result by a message of its
    /// own, this saves [`Store::run`]'s hop back through an async task. A panic in `f` is
    /// handed on as an error, as [`Store::run`] hands on a failed task.
    pub fn spawn<T, F, G>(&self, f: F, then: G)
    where
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
        G: FnOnce(Result<T, FleetError>) + Send + 'static,
        T: Send + 'static,
    {
        let s = self.clone();
        tokio::task::spawn_blocking(move || {
            let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&s))) {
                Ok(r) => r.map_err(FleetError::from),
                Err(_) => Err(FleetError::internal(
                    "a state dir write",
                    "the writer task failed: it panicked",
                )),
            };
            then(r);
        });
    }

    /// Commit a batch durably.
    pub fn commit(&self, b: &Batch) -> Result<(), StoreError> {
        if b.is_empty() {
            return Ok(());
        }
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(MEMBERS)?;
            for m in &b.members {
                t.insert(m.name.as_str(), enc(m).as_slice())?;
            }
            let mut t = tx.open_table(MESSAGES)?;
            for m in &b.messages {
                t.insert(m.id.0, enc(m).as_slice())?;
            }
            let mut t = tx.open_table(TICKETS)?;
            for tk in &b.tickets {
                t.insert(tk.id.0, enc(tk).as_slice())?;
            }
            for id in &b.delete_tickets {
                t.remove(id.0)?;
            }
            if let Some(n) = b.next_ticket {
                let mut meta = tx.open_table(META)?;
                meta.insert(NEXT_TICKET, n)?;
            }
            if let Some(n) = b.msg_reserved {
                let mut meta = tx.open_table(META)?;
                meta.insert(MSG_RESERVED, n)?;
            }
            if !(b.mail_out.is_empty() && b.mail_out_done.is_empty()) {
                let mut t = tx.open_table(MAIL_OUT)?;
                for (peer, e) in &b.mail_out {
                    t.insert((peer.as_str(), e.seq), enc(e).as_slice())?;
                }
                for (peer, upto) in &b.mail_out_done {
                    t.retain_in((peer.as_str(), 0)..=(peer.as_str(), *upto), |_, _| false)?;
                }
            }
            if !(b.mail_in.is_empty() && b.mail_in_done.is_empty()) {
                let mut t = tx.open_table(MAIL_IN)?;
                for (peer, arrival, e) in &b.mail_in {
                    t.insert((peer.as_str(), *arrival), enc(e).as_slice())?;
                }
                for (peer, arrival) in &b.mail_in_done {
                    t.remove((peer.as_str(), *arrival))?;
                }
            }
            if !b.mail_meta.is_empty() {
                let mut t = tx.open_table(MAIL_META)?;
                for (k, v) in &b.mail_meta {
                    t.insert(k.as_str(), *v)?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn save_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        self.commit(&Batch {
            members: vec![m.clone()],
            ..Default::default()
        })
    }

    pub fn load_members(&self) -> Result<Vec<MemberRecord>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MEMBERS)?;
        let mut out = vec![];
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(dec(&format!("member {}", k.value()), v.value())?);
        }
        Ok(out)
    }

    pub fn load_member(&self, name: &MemberName) -> Result<Option<MemberRecord>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MEMBERS)?;
        match t.get(name.as_str())? {
            Some(v) => Ok(Some(dec(&format!("member {name}"), v.value())?)),
            None => Ok(None),
        }
    }

    /// Every stored message, in id order.
    pub fn load_messages(&self) -> Result<Vec<Message>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MESSAGES)?;
        let mut out = vec![];
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(dec(&format!("message m-{}", k.value()), v.value())?);
        }
        Ok(out)
    }

    /// `target`'s messages that are not final, in send order.
    pub fn pending_for(&self, target: &MemberName) -> Result<Vec<Message>, StoreError> {
        Ok(self
            .load_messages()?
            .into_iter()
            .filter(|m| &m.target == target && !m.state.is_final())
            .collect())
    }

    /// The turn `target` was in when the daemon stopped, if one never ended: its latest
    /// accepted message whose ticket is still open (the turn's end, which attaches the tail,
    /// never came).
    pub fn unfinished_turn(&self, target: &MemberName) -> Result<Option<Message>, StoreError> {
        let Some(m) = self
            .load_messages()?
            .into_iter()
            .filter(|m| &m.target == target && m.state == ReceiptState::Accepted)
            .max_by_key(|m| m.id)
        else {
            return Ok(None);
        };
        let Some(ticket) = m.ticket else {
            return Ok(None);
        };
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TICKETS)?;
        let open = match t.get(ticket.0)? {
            Some(v) => {
                let t: Ticket = dec(&format!("ticket {ticket}"), v.value())?;
                t.state == crate::tickets::state::TicketState::Open
            }
            None => false,
        };
        Ok(open.then_some(m))
    }

    pub fn message(&self, id: MsgId) -> Result<Option<Message>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MESSAGES)?;
        match t.get(id.0)? {
            Some(v) => Ok(Some(dec(&format!("message {id}"), v.value())?)),
            None => Ok(None),
        }
    }

    /// How many messages are stored (a read of the table's length, not of the messages).
    pub fn message_count(&self) -> Result<u64, StoreError> {
        use redb::ReadableTableMetadata;
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MESSAGES)?;
        Ok(t.len()?)
    }

    /// The highest message id ever stored (ids are never reused).
    pub fn last_msg_id(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MESSAGES)?;
        Ok(t.last()?.map(|(k, _)| k.value()).unwrap_or(0))
    }

    /// The highest message number that may have been handed out: the larger of the highest
    /// stored message and the desk's last durable reservation.
    pub fn msg_floor(&self) -> Result<u64, StoreError> {
        let reserved = {
            let tx = self.db.begin_read()?;
            let meta = tx.open_table(META)?;
            meta.get(MSG_RESERVED)?.map(|v| v.value()).unwrap_or(0)
        };
        Ok(self.last_msg_id()?.max(reserved))
    }

    /// One look of the receipt sweep: trim to `keep` ([`Store::trim_messages`]), unless the
    /// last look (`settled`) left the table within `keep` and no message was added since (only
    /// new messages grow it), in which case only the last id is read. Returns what to hand the
    /// next look: `Some` once the table is within `keep`.
    pub fn sweep_receipts(
        &self,
        keep: usize,
        settled: Option<(u64, usize)>,
    ) -> Result<Option<(u64, usize)>, StoreError> {
        let last = self.last_msg_id()?;
        if settled == Some((last, keep)) {
            return Ok(settled);
        }
        self.trim_messages(keep)?;
        let within = self.message_count()? <= keep as u64;
        Ok(within.then_some((last, keep)))
    }

    /// Forget the oldest final messages beyond `keep` (receipts of settled messages).
    pub fn trim_messages(&self, keep: usize) -> Result<usize, StoreError> {
        let all = self.load_messages()?;
        let finals: Vec<u64> = all
            .iter()
            .filter(|m| m.state.is_final())
            .map(|m| m.id.0)
            .collect();
        let excess = all.len().saturating_sub(keep).min(finals.len());
        if excess == 0 {
            return Ok(0);
        }
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(MESSAGES)?;
            for id in finals.into_iter().take(excess) {
                t.remove(id)?;
            }
        }
        tx.commit()?;
        Ok(excess)
    }

    /// Refused late positions, per decision (they are not ledger entries: only accepted events
    /// are; these stay visible beside them).
    pub fn load_refusals(&self) -> Result<Vec<(DecisionId, Vec<Refused>)>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REFUSALS)?;
        let mut out = vec![];
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((
                DecisionId(k.value()),
                dec(&format!("refusals of d-{}", k.value()), v.value())?,
            ));
        }
        Ok(out)
    }

    pub fn save_refusals(&self, id: DecisionId, r: &[Refused]) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(REFUSALS)?;
            t.insert(id.0, enc(&r).as_slice())?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The last good anchor of each peer (the drift pullers' durable cache).
    pub fn load_drift_cache(&self) -> Result<Vec<(String, CachedAnchor)>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(DRIFT_CACHE)?;
        let mut out = vec![];
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((
                k.value().to_string(),
                dec(&format!("drift cache of {}", k.value()), v.value())?,
            ));
        }
        Ok(out)
    }

    pub fn save_drift_cache(&self, peer: &str, c: &CachedAnchor) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(DRIFT_CACHE)?;
            t.insert(peer, enc(c).as_slice())?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every stored outgoing envelope by peer, with the peer's next seq; the receiving marks
    /// (epoch, mark) by peer; this host's epoch (0 if none was chosen yet).
    #[allow(clippy::type_complexity)]
    pub fn load_mail_out(
        &self,
    ) -> Result<
        (
            std::collections::BTreeMap<String, (u64, Vec<Envelope>)>,
            std::collections::BTreeMap<String, (u64, u64)>,
            u64,
        ),
        StoreError,
    > {
        let tx = self.db.begin_read()?;
        let meta = tx.open_table(MAIL_META)?;
        let mut out: std::collections::BTreeMap<String, (u64, Vec<Envelope>)> = Default::default();
        let mut marks: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        let mut epoch = 0;
        for row in meta.iter()? {
            let (k, v) = row?;
            let (k, v) = (k.value().to_string(), v.value());
            if k == "epoch" {
                epoch = v;
            } else if let Some(p) = k.strip_prefix("next:") {
                out.entry(p.to_string()).or_default().0 = v;
            } else if let Some(p) = k.strip_prefix("mark:") {
                marks.entry(p.to_string()).or_default().1 = v;
            } else if let Some(p) = k.strip_prefix("mark_epoch:") {
                marks.entry(p.to_string()).or_default().0 = v;
            }
        }
        let t = tx.open_table(MAIL_OUT)?;
        for row in t.iter()? {
            let (k, v) = row?;
            let (peer, seq) = k.value();
            let e: Envelope = dec(&format!("outgoing mail {peer}#{seq}"), v.value())?;
            out.entry(peer.to_string()).or_default().1.push(e);
        }
        Ok((out, marks, epoch))
    }

    /// Every received envelope not yet handed on, as (peer, arrival number, envelope), in the
    /// order they arrived.
    pub fn load_mail_in(&self) -> Result<Vec<(String, u64, Envelope)>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MAIL_IN)?;
        let mut out = vec![];
        for row in t.iter()? {
            let (k, v) = row?;
            let (peer, arrival) = k.value();
            out.push((
                peer.to_string(),
                arrival,
                dec(&format!("received mail {peer}#{arrival}"), v.value())?,
            ));
        }
        out.sort_by_key(|(_, arrival, _)| *arrival);
        Ok(out)
    }

    pub fn load_tickets(&self) -> Result<(Vec<Ticket>, u64), StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TICKETS)?;
        let mut out = vec![];
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(dec(&format!("ticket t-{}", k.value()), v.value())?);
        }
        let meta = tx.open_table(META)?;
        let next = meta.get(NEXT_TICKET)?.map(|v| v.value()).unwrap_or(1);
        Ok((out, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::injector::state::ReceiptState;
    use crate::types::Party;

    #[test]
    fn received_mail_is_kept_by_arrival_so_a_reused_seq_overwrites_nothing() {
        use crate::mail::envelope::{Envelope, Item};
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("s.redb")).unwrap();
        let env = |seq, t| Envelope {
            seq,
            item: Item::Mail {
                ticket: TicketId(t),
                from: MemberName::new("lead").unwrap(),
                body: format!("m{t}"),
                sent_at: 0,
            },
        };
        // Seq 3 of the sender's old epoch, then seq 3 of its new one, then another peer's.
        s.commit(&Batch {
            mail_in: vec![
                ("b".into(), 7, env(3, 1)),
                ("b".into(), 8, env(3, 2)),
                ("a".into(), 9, env(1, 3)),
            ],
            ..Default::default()
        })
        .unwrap();
        let tickets = |s: &Store| {
            s.load_mail_in()
                .unwrap()
                .into_iter()
                .map(|(p, a, e)| match e.item {
                    Item::Mail { ticket, .. } => (p, a, ticket.0),
                    Item::Update { .. } => unreachable!(),
                })
                .collect::<Vec<_>>()
        };
        let b = |a, t| ("b".to_string(), a, t);
        assert_eq!(tickets(&s), vec![b(7, 1), b(8, 2), ("a".into(), 9, 3)]);
        s.commit(&Batch {
            mail_in_done: vec![("b".into(), 7), ("a".into(), 9)],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(tickets(&s), vec![b(8, 2)]);
    }

    #[test]
    fn the_receipt_sweep_looks_again_only_after_a_message_was_added() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("s.redb")).unwrap();
        let msg = |id, state| Message {
            id: MsgId(id),
            target: MemberName::new("w1").unwrap(),
            from: Party::Operator,
            ticket: None,
            body: "hi".into(),
            state,
            queued_at: 1,
            delivered_at: None,
            settled_at: None,
            note: None,
            screen: None,
            altered: None,
            expires_at: None,
        };
        let put = |ms: Vec<Message>| {
            s.commit(&Batch {
                messages: ms,
                ..Default::default()
            })
            .unwrap()
        };
        put((1..=3).map(|i| msg(i, ReceiptState::Queued)).collect());
        // Nothing final to trim: over `keep`, so the next look trims again.
        assert_eq!(s.sweep_receipts(1, None).unwrap(), None);
        put((1..=3).map(|i| msg(i, ReceiptState::Accepted)).collect());
        let settled = s.sweep_receipts(1, None).unwrap();
        assert_eq!(settled, Some((3, 1)));
        assert_eq!(s.message_count().unwrap(), 1);
        // Message 2 again (no new id): the look is skipped, so it stays.
        put(vec![msg(2, ReceiptState::Accepted)]);
        assert_eq!(s.sweep_receipts(1, settled).unwrap(), settled);
        assert_eq!(s.message_count().unwrap(), 2);
        // Another bound, or a new message: a full look again.
        assert_eq!(s.sweep_receipts(2, settled).unwrap(), Some((3, 2)));
        put(vec![msg(4, ReceiptState::Accepted)]);
        assert_eq!(s.sweep_receipts(1, Some((3, 1))).unwrap(), Some((4, 1)));
        assert_eq!(s.message_count().unwrap(), 1);
    }

    #[test]
    fn round_trip_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let m = Message {
            id: MsgId(3),
            target: MemberName::new("w1").unwrap(),
            from: Party::Operator,
            ticket: Some(TicketId(1)),
            body: "hi".into(),
            state: ReceiptState::Queued,
            queued_at: 1,
            delivered_at: None,
            settled_at: None,
            note: None,
            screen: None,
            altered: None,
            expires_at: None,
        };
        {
            let s = Store::open(&path).unwrap();
            s.commit(&Batch {
                messages: vec![m.clone()],
                next_ticket: Some(9),
                ..Default::default()
            })
            .unwrap();
            // A second open of the same file is refused while the first holds it.
            assert!(Store::open(&path).is_err());
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.pending_for(&m.target).unwrap(), vec![m.clone()]);
        assert_eq!(s.last_msg_id().unwrap(), 3);
        assert_eq!(s.load_tickets().unwrap().1, 9);
        let mut done = m;
        done.state = ReceiptState::Accepted;
        s.commit(&Batch {
            messages: vec![done],
            ..Default::default()
        })
        .unwrap();
        assert!(
            s.pending_for(&MemberName::new("w1").unwrap())
                .unwrap()
                .is_empty()
        );
        assert_eq!(s.message_count().unwrap(), 1);
        assert_eq!(s.trim_messages(0).unwrap(), 1);
        assert_eq!(s.message_count().unwrap(), 0);
    }
}
