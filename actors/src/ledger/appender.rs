//! The ledger's append path: a caller chains its entry under a short lock and hands the line to
//! the disk thread itself, and the disk thread answers it once the write holding it is synced.
//!
//! Owns the chain's tip ([`LedgerCore`]), the callers waiting for their sync ([`Waiting`]), and
//! whether the ledger is broken. Appends do not pass through the writer actor's mailbox: with
//! many appenders the writer's throughput is set by how fast the callers a sync just answered
//! come back (the next write waits for them, see [`Linger`](super::commit::Linger)), and a
//! mailbox round trip per append, served by one task, made that return take as long as the sync.
//! Here the lock is held only to chain (seq, previous hash, canonical line, its hash) and queue
//! the line, so lines reach the file in chain order; the disk thread applies each synced entry
//! to the board and answers its caller ([`Appender::report`]). The writer actor owns the
//! lifecycle (opening and recovering the file, starting and finishing the disk thread) and
//! publishes this handle in the directory while it runs. Must never answer a caller before the
//! sync of the write holding its entry returned, never queue a line out of chain order, and
//! never hold the lock across I/O or an `.await`.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::clock::SharedClock;
use crate::decision::state::{Board, DecisionEvent};
use crate::error::FleetError;
use crate::ledger::commit::Waiting;
use crate::ledger::state::{Author, Entry, LedgerCore, Prepared, SyncTimes};
use crate::ledger::writer::{Pusher, Report};
use crate::publish::Publisher;
use crate::types::DecisionId;

/// A decision to open, before the ledger gives it its id.
#[derive(Debug)]
pub struct NewDecision {
    pub subject: String,
    pub slots: Vec<String>,
    /// RFC 3339.
    pub deadline: String,
    pub max_rounds: u32,
}

/// A caller waiting for its entry's sync: the entry, and where to answer.
type Caller = (Entry, oneshot::Sender<Result<Entry, FleetError>>);

/// An append's answer, once its entry is synced (or refused).
pub type Answer = oneshot::Receiver<Result<Entry, FleetError>>;

struct Chain {
    core: Option<LedgerCore>,
    /// The disk thread's queue (none once the writer stopped, or if the file never opened).
    pusher: Option<Pusher>,
    broken: Option<String>,
    waiting: Waiting<Caller>,
    syncs: SyncTimes,
}

/// What `status` shows of the chain.
pub struct Tip {
    pub origin: Option<String>,
    pub entries: u64,
    pub head: String,
    pub broken: Option<String>,
    pub syncs: SyncTimes,
}

/// The shared append handle of one run of the ledger writer.
pub struct Appender {
    chain: Mutex<Chain>,
    decisions: Publisher<Board>,
    /// Each entry's time is read under the lock, so times follow the chain's order.
    clock: SharedClock,
    /// The most appends waiting for their sync at once (`limits.mailbox`).
    cap: usize,
    /// The ledger file, for messages.
    path: String,
}

impl Appender {
    pub fn new(
        core: Option<LedgerCore>,
        broken: Option<String>,
        decisions: Publisher<Board>,
        clock: SharedClock,
        cap: usize,
        path: String,
    ) -> Appender {
        Appender {
            chain: Mutex::new(Chain {
                core,
                pusher: None,
                broken,
                waiting: Waiting::default(),
                syncs: SyncTimes::default(),
            }),
            decisions,
            clock,
            cap: cap.max(1),
            path,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Chain> {
        self.chain.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The disk thread is running: appends go to it.
    pub fn started(&self, pusher: Pusher) {
        self.lock().pusher = Some(pusher);
    }

    /// Chain an entry (prepared by the caller, outside the lock) and queue its line; the answer
    /// comes once it is synced.
    pub fn append(&self, entry: Prepared) -> Answer {
        self.take(|_| entry)
    }

    /// Append the `open` of a new decision under the next decision id the board hands out (given
    /// out under the lock, so ids go into the ledger in order).
    pub fn open(&self, author: Author, open: NewDecision) -> Answer {
        self.take(|a| {
            let mut id = DecisionId(0);
            a.decisions.modify(|b| id = b.allocate());
            let event = DecisionEvent::Open {
                decision: id,
                subject: open.subject,
                slots: open.slots,
                deadline: open.deadline,
                max_rounds: open.max_rounds,
            };
            Prepared::new(author, event)
        })
    }

    /// Under the lock: if an append may be taken, make its entry (`make`) and chain and queue
    /// it; else answer the refusal at once.
    fn take(&self, make: impl FnOnce(&Self) -> Prepared) -> Answer {
        let (tx, rx) = oneshot::channel();
        let mut c = self.lock();
        match self.admit(&c) {
            Ok(()) => {
                let entry = make(self);
                self.chain_and_queue(&mut c, entry, tx);
            }
            Err(e) => {
                drop(c);
                let _ = tx.send(Err(e));
            }
        }
        rx
    }

    /// May an append be taken now? The ledger must be open and whole, and fewer than `cap`
    /// appends waiting.
    fn admit(&self, c: &Chain) -> Result<(), FleetError> {
        if let Some(why) = &c.broken {
            return Err(FleetError::unavailable("the decision ledger", why.clone()));
        }
        if c.core.is_none() || c.pusher.is_none() {
            return Err(FleetError::unavailable(
                "the decision ledger",
                "the ledger writer is not running (it is starting, restarting or stopped)",
            ));
        }
        if c.waiting.len() >= self.cap {
            return Err(FleetError::overloaded(
                "an append to the decision ledger",
                format!(
                    "{} appends are already waiting for their sync (limits.mailbox = {})",
                    c.waiting.len(),
                    self.cap
                ),
                "the same append once the ledger has caught up",
            ));
        }
        Ok(())
    }

    fn chain_and_queue(
        &self,
        c: &mut Chain,
        entry: Prepared,
        tx: oneshot::Sender<Result<Entry, FleetError>>,
    ) {
        let (Some(core), Some(pusher)) = (c.core.as_mut(), c.pusher.as_ref()) else {
            return;
        };
        let (entry, line) = core.chain(entry, self.clock.now());
        if pusher.push(entry.seq, &line, core.due.drain(..)) {
            c.waiting.push(entry.seq, (entry, tx));
        } else {
            // A write failed (its report, on its way, breaks the ledger and says why) or the
            // writer is stopping. The chain's tip is past this entry: take no more.
            c.core = None;
            let _ = tx.send(Err(FleetError::unavailable(
                "the decision ledger",
                "a write to it failed or the ledger writer is stopping",
            )));
        }
    }

    /// From the disk thread: a write is synced (its entries go on the board, then their callers
    /// are answered), or it failed (the ledger is broken; every caller still waiting is refused).
    pub fn report(&self, r: Report) {
        match r {
            Report::Synced { upto, seconds } => {
                let done: Vec<Caller> = {
                    let mut c = self.lock();
                    c.syncs.observe(seconds);
                    c.waiting.synced(upto).map(|(_, c)| c).collect()
                };
                if done.is_empty() {
                    return;
                }
                // The board shows an entry once it is synced, and before its caller hears of it.
                self.decisions.modify(|board| {
                    for (entry, _) in &done {
                        board.apply(entry);
                    }
                });
                for (entry, tx) in done {
                    let _ = tx.send(Ok(entry));
                }
            }
            Report::Failed { why, .. } => self.failed(&why),
        }
    }

    /// A write failed: the ledger is broken from now on; every caller still waiting is refused.
    pub fn failed(&self, why: &str) {
        let why = format!("writing {} failed: {why}", self.path);
        self.refuse_waiting(
            |c| {
                if c.broken.is_none() {
                    tracing::error!(%why, "ledger write failed; decisions are refused from now on");
                    c.broken = Some(why.clone());
                }
                c.core = None;
            },
            || FleetError::internal("the ledger append", why.clone()),
        );
    }

    /// The writer stopped (its disk thread finished): take no more appends, and refuse any
    /// still waiting (none are, once the thread wrote everything it was handed).
    pub fn stopped(&self) {
        self.refuse_waiting(
            |c| c.pusher = None,
            || FleetError::unavailable("the decision ledger", "the ledger writer stopped"),
        );
    }

    /// Under the lock, `change` the chain and take every caller still waiting; then, outside
    /// it, refuse each with `why`.
    fn refuse_waiting(&self, change: impl FnOnce(&mut Chain), why: impl Fn() -> FleetError) {
        let waiting: Vec<Caller> = {
            let mut c = self.lock();
            change(&mut c);
            c.waiting.all().map(|(_, c)| c).collect()
        };
        for (_, tx) in waiting {
            let _ = tx.send(Err(why()));
        }
    }

    /// The chain's tip and the writer's health, for status.
    pub fn tip(&self) -> Tip {
        let c = self.lock();
        Tip {
            origin: c.core.as_ref().map(|core| core.origin.clone()),
            entries: c.core.as_ref().map(|core| core.seq).unwrap_or(0),
            head: c
                .core
                .as_ref()
                .map(|core| crate::ledger::state::hex(&core.head))
                .unwrap_or_default(),
            broken: c.broken.clone(),
            syncs: c.syncs.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::error::ErrorKind;
    use crate::ledger::state::{LedgerCore, verify};
    use crate::ledger::writer::testing::Gated;
    use crate::ledger::writer::{Sink, Writer};
    use crate::publish::View;
    use ed25519_dalek::SigningKey;
    use std::sync::{Arc, mpsc};
    use tokio::sync::oneshot::error::TryRecvError;

    const ORIGIN: &str = "fleetd/test/ledger";

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[42u8; 32])
    }

    /// An appender on a new ledger, its disk thread writing to `sink`, and the board's view.
    fn appender(sink: impl Sink, cap: usize) -> (Arc<Appender>, Writer, View<Board>) {
        let (core, _) = LedgerCore::create(ORIGIN, 4);
        let (publisher, view) = crate::publish::channel(Board::default());
        let a = Arc::new(Appender::new(
            Some(core),
            None,
            publisher,
            Arc::new(ManualClock::new(1_700_000_000_000)),
            cap,
            "ledger.jsonl".into(),
        ));
        let me = Arc::downgrade(&a);
        let w = Writer::start(sink, 0, ORIGIN.into(), key(), move |r| {
            if let Some(a) = me.upgrade() {
                a.report(r);
            }
        })
        .unwrap();
        a.started(w.pusher());
        (a, w, view)
    }

    fn gated(
        cap: usize,
    ) -> (
        Arc<Appender>,
        Writer,
        View<Board>,
        mpsc::Receiver<String>,
        mpsc::Sender<bool>,
    ) {
        let (wt, wr) = mpsc::channel();
        let (vt, vr) = mpsc::channel();
        let (a, w, view) = appender(
            Gated {
                writes: wt,
                verdicts: vr,
            },
            cap,
        );
        (a, w, view, wr, vt)
    }

    fn author(i: usize) -> Author {
        Author {
            member: format!("arch-{i}"),
            role: "architect".into(),
            slot: Some("opus".into()),
        }
    }

    fn position(i: usize) -> Prepared {
        Prepared::new(
            author(i),
            DecisionEvent::Position {
                decision: DecisionId(1),
                slot: "opus".into(),
                round: 1,
                content: format!("position {i}"),
            },
        )
    }

    fn open() -> NewDecision {
        NewDecision {
            subject: "which database".into(),
            slots: vec!["opus".into()],
            deadline: "2026-12-05T18:00:00Z".into(),
            max_rounds: 2,
        }
    }

    #[test]
    fn an_append_is_answered_only_once_its_write_is_synced_and_the_board_shows_it_first() {
        let (a, w, view, writes, verdicts) = gated(8);
        let mut answer = a.open(author(0), open());
        let line = writes.recv().unwrap();
        assert!(line.contains("\"type\":\"open\""), "{line}");
        assert_eq!(
            answer.try_recv(),
            Err(TryRecvError::Empty),
            "not synced yet"
        );
        assert!(view.get().get(DecisionId(1)).is_none(), "nor on the board");
        verdicts.send(true).unwrap();
        let entry = answer.blocking_recv().unwrap().unwrap();
        assert_eq!(entry.seq, 1);
        assert!(
            view.get().get(DecisionId(1)).is_some(),
            "the board shows a synced entry before its caller hears of it"
        );
        drop(verdicts);
        assert_eq!(w.finish(), Ok(1));
    }

    #[test]
    fn a_failed_write_refuses_its_callers_and_every_append_after_it() {
        let (a, w, _view, writes, verdicts) = gated(8);
        let first = a.append(position(0));
        writes.recv().unwrap();
        let second = a.append(position(1));
        verdicts.send(false).unwrap();
        for answer in [first, second] {
            let e = answer.blocking_recv().unwrap().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Internal, "{e}");
            assert!(e.to_string().contains("disk full"), "{e}");
        }
        let later = a.append(position(2)).blocking_recv().unwrap().unwrap_err();
        assert_eq!(later.kind, ErrorKind::Unavailable, "{later}");
        assert!(later.to_string().contains("ledger.jsonl"), "{later}");
        assert!(a.tip().broken.is_some());
        assert_eq!(w.finish(), Err((0, "disk full".into())));
    }

    #[test]
    fn appends_past_the_bound_are_refused_as_overloaded_until_the_ledger_catches_up() {
        let (a, w, _view, writes, verdicts) = gated(2);
        let first = a.append(position(0));
        writes.recv().unwrap();
        let second = a.append(position(1));
        let third = a.append(position(2)).blocking_recv().unwrap().unwrap_err();
        assert_eq!(third.kind, ErrorKind::Overloaded, "{third}");
        assert!(third.to_string().contains("limits.mailbox = 2"), "{third}");
        verdicts.send(true).unwrap();
        assert_eq!(first.blocking_recv().unwrap().unwrap().seq, 1);
        writes.recv().unwrap();
        verdicts.send(true).unwrap();
        assert_eq!(second.blocking_recv().unwrap().unwrap().seq, 2);
        // Caught up: taken again, as the next entry of the chain.
        let fourth = a.append(position(3));
        writes.recv().unwrap();
        verdicts.send(true).unwrap();
        assert_eq!(fourth.blocking_recv().unwrap().unwrap().seq, 3);
        drop(verdicts);
        assert_eq!(w.finish(), Ok(3));
    }

    #[test]
    fn once_the_writer_stopped_appends_are_refused_not_left_waiting() {
        let (a, w, _view, _writes, verdicts) = gated(8);
        drop(verdicts);
        assert_eq!(w.finish(), Ok(0));
        a.stopped();
        let e = a.append(position(0)).blocking_recv().unwrap().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(e.to_string().contains("not running"), "{e}");
    }

    #[test]
    fn appenders_on_many_threads_leave_a_file_that_verifies_in_chain_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let (_, header) = LedgerCore::create(ORIGIN, 4);
        std::fs::write(&path, format!("{header}\n")).unwrap();
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let (a, w, _view) = appender(file, 1_000);
        let (threads, each) = (8usize, 40usize);
        let answered: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let a = &a;
                    s.spawn(move || {
                        (0..each)
                            .map(|i| {
                                a.append(position(t * each + i))
                                    .blocking_recv()
                                    .unwrap()
                                    .unwrap()
                                    .seq
                            })
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(w.finish(), Ok((threads * each) as u64));
        let mut seqs: Vec<u64> = answered.concat();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=(threads * each) as u64).collect::<Vec<_>>());
        let text = std::fs::read_to_string(&path).unwrap();
        let report = verify(&text, Some(&key().verifying_key())).unwrap();
        assert_eq!(report.entries, (threads * each) as u64);
        assert_eq!(report.checkpoints, (threads * each / 4) as u64);
    }
}
