//! The ledger writer's disk thread: the I/O shell of [`Pipeline`].
//!
//! The appender chains each entry and pushes its line here (through a [`Pusher`]); this thread
//! writes and `fdatasync`s everything pushed while the previous write was in flight, once that
//! write returns (one write in flight at a time, so the file holds the lines in push order),
//! reports each synced write (the report answers their callers), and signs the checkpoints the
//! write made due, after reporting it, to go first in the next write. The next write may wait
//! for the callers just answered to append again, as [`Linger`] says (bounded by what the last
//! sync took). A failed write is reported and ends the thread: nothing pushed after it is
//! written. [`Writer::finish`] (and dropping a `Writer`) writes everything pushed, then the
//! checkpoints that cover it, and syncs the file.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;

use crate::ledger::state::sign_checkpoints;
use fleetd_core::ledger::commit::{Due, Linger, Pipeline, Written};

/// Where the writes go: the ledger file, or a fake in the tests.
pub trait Sink: Send + 'static {
    /// Write all of `buf` and make it durable (`fdatasync`).
    fn write_sync(&mut self, buf: &[u8]) -> std::io::Result<()>;
    /// Make everything durable, metadata included (at the end).
    fn sync_all(&mut self) -> std::io::Result<()>;
}

impl Sink for std::fs::File {
    fn write_sync(&mut self, buf: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(self, buf)?;
        self.sync_data()
    }
    fn sync_all(&mut self) -> std::io::Result<()> {
        std::fs::File::sync_all(self)
    }
}

/// What the thread reports, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// Entries up to `upto` are synced; the write and its `fdatasync` took `seconds`.
    Synced { upto: u64, seconds: f64 },
    /// A write failed (`why`): entries after `synced` will never be written.
    Failed { synced: u64, why: String },
}

struct Shared {
    p: Pipeline,
    /// The thread is waiting for something to write (so a push must wake it).
    idle: bool,
    /// While it lingers: wake it only once this many entries are queued.
    wake_at: Option<usize>,
    /// Write what is left and end.
    stop: bool,
}

/// The handle on the disk thread.
pub struct Writer {
    pusher: Pusher,
    thread: Option<std::thread::JoinHandle<Result<u64, (u64, String)>>>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// Start the thread on `sink`, whose last synced entry is `synced`. `report` is called from
    /// the thread, in order, for each write.
    pub fn start(
        sink: impl Sink,
        synced: u64,
        origin: String,
        key: SigningKey,
        report: impl Fn(Report) + Send + 'static,
    ) -> std::io::Result<Writer> {
        let shared = Arc::new((
            Mutex::new(Shared {
                p: Pipeline::new(synced),
                idle: false,
                wake_at: None,
                stop: false,
            }),
            Condvar::new(),
        ));
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fleetd-ledger".into())
            .spawn(move || run(&s2, sink, &origin, &key, report))?;
        Ok(Writer {
            pusher: Pusher { shared },
            thread: Some(thread),
        })
    }

    /// A handle that queues lines for this thread, for whoever encodes them.
    pub fn pusher(&self) -> Pusher {
        self.pusher.clone()
    }

    /// Write everything pushed and the checkpoints that cover it, sync the file, and end the
    /// thread: the seq of the last entry synced, or that and why a write failed.
    pub fn finish(mut self) -> Result<u64, (u64, String)> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<u64, (u64, String)> {
        let (m, cv) = &*self.pusher.shared;
        let Some(t) = self.thread.take() else {
            return Err((lock(m).p.synced(), "the ledger writer has ended".into()));
        };
        lock(m).stop = true;
        cv.notify_one();
        t.join().unwrap_or_else(|_| {
            Err((
                lock(m).p.synced(),
                "the ledger writer thread panicked".into(),
            ))
        })
    }
}

/// Queues lines for a [`Writer`]'s thread; ends with it (a push after the writer stopped is
/// refused, never left unwritten).
#[derive(Clone)]
pub struct Pusher {
    shared: Arc<(Mutex<Shared>, Condvar)>,
}

impl Pusher {
    /// Queue entry `seq`'s line for the next write; false if a write has failed or the thread
    /// is stopping (it never will be written).
    pub fn push(&self, seq: u64, line: &str, due: impl IntoIterator<Item = Due>) -> bool {
        let (m, cv) = &*self.shared;
        let mut g = lock(m);
        if g.stop {
            return false;
        }
        let queued = g.p.push(seq, line, due);
        let wake = g.idle && g.wake_at.is_none_or(|k| g.p.queued_entries() >= k);
        if wake {
            g.idle = false;
        }
        drop(g);
        if wake {
            cv.notify_one();
        }
        queued
    }
}

impl Drop for Writer {
    /// The actor ended without `finish` (a panic, a kill): still write what was pushed, and wait
    /// for it, so a restarted writer never shares the file with this one.
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop_and_join();
        }
    }
}

fn run(
    shared: &(Mutex<Shared>, Condvar),
    mut sink: impl Sink,
    origin: &str,
    key: &SigningKey,
    report: impl Fn(Report),
) -> Result<u64, (u64, String)> {
    let (m, cv) = shared;
    let mut buf = String::new();
    let epoch = Instant::now();
    let micros = || epoch.elapsed().as_micros() as u64;
    let mut linger = Linger::default();
    loop {
        let (upto, entries) = {
            let mut g = lock(m);
            loop {
                let now = micros();
                // Stopping writes at once.
                let hold = if g.stop {
                    None
                } else {
                    linger.hold(g.p.queued_entries(), now)
                };
                if hold.is_none() {
                    let entries = g.p.queued_entries();
                    if let Some(upto) = g.p.take_write(&mut buf) {
                        break (upto, entries);
                    }
                    if g.stop {
                        let synced = g.p.synced();
                        drop(g);
                        return sink
                            .sync_all()
                            .map(|_| synced)
                            .map_err(|e| (synced, format!("syncing the ledger failed: {e}")));
                    }
                }
                g.idle = true;
                g.wake_at = hold.map(|_| linger.expect());
                g = match hold {
                    Some(until) => {
                        let wait = Duration::from_micros(until.saturating_sub(now));
                        cv.wait_timeout(g, wait)
                            .map(|(g, _)| g)
                            .unwrap_or_else(|p| p.into_inner().0)
                    }
                    None => cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                };
                g.idle = false;
                g.wake_at = None;
            }
        };
        let start = Instant::now();
        let r = sink.write_sync(buf.as_bytes());
        let took = start.elapsed();
        let seconds = took.as_secs_f64();
        let written = {
            let mut g = lock(m);
            let w = g.p.written(r.is_ok());
            linger.synced(
                entries,
                g.p.queued_entries(),
                micros(),
                took.as_micros() as u64,
            );
            w
        };
        match (written, r) {
            (Written::Synced { upto: u, sign }, _) => {
                debug_assert_eq!(u, upto);
                report(Report::Synced { upto, seconds });
                // The entries are synced: their checkpoints may be signed now, after their
                // callers were told.
                let cps = if sign.is_empty() {
                    vec![]
                } else {
                    sign_checkpoints(origin, &sign, key)
                };
                lock(m).p.signed(cps);
            }
            (Written::Failed { synced }, r) => {
                let why = match r {
                    Err(e) => e.to_string(),
                    Ok(()) => "the write pipeline is out of step".into(),
                };
                report(Report::Failed {
                    synced,
                    why: why.clone(),
                });
                return Err((synced, why));
            }
        }
    }
}

/// A sink for the tests of the writer and its callers.
#[cfg(test)]
pub(crate) mod testing {
    use super::Sink;
    use std::sync::mpsc;

    /// A sink that hands each write to the test and waits for the test's verdict on it (false,
    /// or a dropped sender, fails it as "disk full").
    pub(crate) struct Gated {
        pub writes: mpsc::Sender<String>,
        pub verdicts: mpsc::Receiver<bool>,
    }

    impl Sink for Gated {
        fn write_sync(&mut self, buf: &[u8]) -> std::io::Result<()> {
            let _ = self.writes.send(String::from_utf8_lossy(buf).into_owned());
            match self.verdicts.recv() {
                Ok(true) => Ok(()),
                _ => Err(std::io::Error::other("disk full")),
            }
        }
        fn sync_all(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Gated;
    use super::*;
    use std::sync::mpsc;

    fn writer() -> (
        Writer,
        mpsc::Receiver<String>,
        mpsc::Sender<bool>,
        mpsc::Receiver<Report>,
    ) {
        let (wt, wr) = mpsc::channel();
        let (vt, vr) = mpsc::channel();
        let (rt, rr) = mpsc::channel();
        let w = Writer::start(
            Gated {
                writes: wt,
                verdicts: vr,
            },
            0,
            "fleetd/test/ledger".into(),
            SigningKey::from_bytes(&[42u8; 32]),
            move |r| {
                let _ = rt.send(r);
            },
        )
        .unwrap();
        (w, wr, vt, rr)
    }

    #[test]
    fn lines_pushed_while_a_write_is_in_flight_go_out_next_in_order_and_only_synced_is_reported() {
        let (w, writes, verdicts, reports) = writer();
        assert!(w.pusher().push(1, "one", []));
        assert_eq!(writes.recv().unwrap(), "one\n");
        // Write 1 is in flight (the sink holds it): 2..=4 queue behind it.
        for (seq, l) in [(2, "two"), (3, "three"), (4, "four")] {
            assert!(w.pusher().push(seq, l, []));
        }
        assert!(reports.try_recv().is_err(), "nothing is synced yet");
        verdicts.send(true).unwrap();
        assert!(matches!(
            reports.recv().unwrap(),
            Report::Synced { upto: 1, .. }
        ));
        assert_eq!(writes.recv().unwrap(), "two\nthree\nfour\n");
        assert!(reports.try_recv().is_err(), "2..=4 are not synced yet");
        verdicts.send(true).unwrap();
        assert!(matches!(
            reports.recv().unwrap(),
            Report::Synced { upto: 4, .. }
        ));
        drop(verdicts);
        assert_eq!(w.finish(), Ok(4));
    }

    #[test]
    fn a_failed_write_is_reported_and_nothing_pushed_after_it_is_written() {
        let (w, writes, verdicts, reports) = writer();
        assert!(w.pusher().push(1, "one", []));
        assert_eq!(writes.recv().unwrap(), "one\n");
        assert!(w.pusher().push(2, "two", []));
        verdicts.send(false).unwrap();
        assert_eq!(
            reports.recv().unwrap(),
            Report::Failed {
                synced: 0,
                why: "disk full".into()
            }
        );
        assert!(
            !w.pusher().push(3, "three", []),
            "a broken pipeline refuses lines"
        );
        assert_eq!(w.finish(), Err((0, "disk full".into())));
        assert!(
            writes.try_recv().is_err(),
            "nothing written after the failure"
        );
    }

    #[test]
    fn finishing_writes_what_is_pushed_then_the_checkpoints_that_cover_it() {
        let (w, writes, verdicts, reports) = writer();
        for v in [true, true] {
            verdicts.send(v).unwrap();
        }
        assert!(w.pusher().push(1, "one", [(1, [7u8; 32])]));
        assert_eq!(w.finish(), Ok(1));
        assert_eq!(writes.recv().unwrap(), "one\n");
        let cp = writes.recv().unwrap();
        assert!(
            cp.starts_with("{\"checkpoint\":\"fleetd/test/ledger\\n1\\n"),
            "{cp}"
        );
        assert!(matches!(
            reports.recv().unwrap(),
            Report::Synced { upto: 1, .. }
        ));
        assert!(matches!(
            reports.recv().unwrap(),
            Report::Synced { upto: 1, .. }
        ));
    }
}
