//! Who a PTY host talks to: only the daemon that owns its state dir.
//!
//! The daemon holds an exclusive `flock` on `STATE/daemon.lock` for its whole life (taken by
//! [`super::HostBackend::new`]; the kernel drops it when the daemon dies, however it dies), and
//! tells each PTY host it launches that path (`--owner-lock`). On every connection, before it
//! sends anything, the host reads the peer's uid and pid (SO_PEERCRED) and admits it only if the
//! uid is its own and that pid holds the lock now, as `/proc/locks` shows (a `FLOCK ... WRITE PID
//! MAJ:MIN:INODE` line on the lock file's inode; for a flock the pid is the process that took
//! it, whichever of its threads did). Any other process of the user (an agent's shell, a stray
//! `socat`) is closed at once and the daemon's connection is left as it was; a daemon that
//! restarts on the same state dir holds the lock again and is admitted as before.
//!
//! The inode is matched, not the device: `/proc/locks` prints the superblock's device, which
//! is not `stat`'s on btrfs subvolumes and some overlay mounts.
//!
//! Bounded: one `stat` and one read of `/proc/locks` per connection, at most
//! [`LOCKS_READ_MAX`] bytes of it through a fixed buffer, lines longer than the kernel writes
//! skipped (on a machine holding more locks than that, a daemon whose line comes later is
//! refused and its members' links fail: said in the host's log). Hostile content (garbage, a line without end) never makes a match. Must never
//! admit on a doubt: anything unreadable refuses.

use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The daemon's lock file, in its state dir.
pub const LOCK_FILE: &str = "daemon.lock";
/// The most of `/proc/locks` read for one connection (about 18,000 locks). The kernel's cost of
/// that file grows with the square of the locks held on the machine (measured: 27 us with a
/// handful, 2 ms with 1,000, 120 ms with 10,000, whatever the read size), so the bound is also
/// the longest a connection can hold up the host's loop (under half a second).
pub const LOCKS_READ_MAX: u64 = 1 << 20;
/// A `/proc/locks` line is under 100 bytes; a longer one is skipped unread.
const LINE_MAX: usize = 256;

/// Why a connection was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("its credentials could not be read ({0})")]
    Credentials(nix::Error),
    #[error("it runs as uid {peer}, not as this host's uid {own}")]
    OtherUser { peer: u32, own: u32 },
    #[error("the daemon's lock {path} cannot be read ({source})")]
    LockFile { path: PathBuf, source: io::Error },
    #[error("/proc/locks cannot be read ({0})")]
    Locks(io::Error),
    #[error("pid {pid} does not hold the daemon's lock {path}")]
    NotOwner { pid: i32, path: PathBuf },
    #[error(
        "pid {pid} was not found holding the daemon's lock in the first {LOCKS_READ_MAX} bytes of /proc/locks"
    )]
    TooManyLocks { pid: i32 },
}

/// What `/proc/locks` says about one pid and one inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    Yes,
    No,
    /// The read stopped at its bound before the end.
    NotWithin,
}

/// Admit the peer of `stream` if it runs as this process's user and, when `owner_lock` is
/// given, holds the exclusive flock on it. A host started without `--owner-lock` (by hand, or by
/// a test) checks the user only.
pub fn admit(stream: &impl AsFd, owner_lock: Option<&Path>) -> Result<(), Refused> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(stream, PeerCredentials).map_err(Refused::Credentials)?;
    let own = nix::unistd::getuid().as_raw();
    if cred.uid() != own {
        return Err(Refused::OtherUser {
            peer: cred.uid(),
            own,
        });
    }
    let Some(path) = owner_lock else {
        return Ok(());
    };
    let ino = std::fs::metadata(path)
        .map_err(|source| Refused::LockFile {
            path: path.to_path_buf(),
            source,
        })?
        .ino();
    let locks = std::fs::File::open("/proc/locks").map_err(Refused::Locks)?;
    match holds_flock(locks, cred.pid(), ino, LOCKS_READ_MAX).map_err(Refused::Locks)? {
        Holds::Yes => Ok(()),
        Holds::No => Err(Refused::NotOwner {
            pid: cred.pid(),
            path: path.to_path_buf(),
        }),
        Holds::NotWithin => Err(Refused::TooManyLocks { pid: cred.pid() }),
    }
}

/// Whether `locks` (the text of `/proc/locks`) shows `pid` holding an exclusive flock on inode
/// `ino`, reading at most `max` bytes through a fixed buffer.
pub fn holds_flock(locks: impl Read, pid: i32, ino: u64, max: u64) -> io::Result<Holds> {
    if pid <= 0 {
        // 0: a peer outside this pid namespace. Never a holder.
        return Ok(Holds::No);
    }
    let mut r = BufReader::with_capacity(8 * 1024, locks.take(max));
    let mut line: Vec<u8> = Vec::with_capacity(LINE_MAX);
    let mut overlong = false;
    let mut read = 0u64;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            // The end (or the bound): a last line without its newline counts only at the end.
            if read >= max {
                return Ok(Holds::NotWithin);
            }
            return Ok(if !overlong && line_holds(&line, pid, ino) {
                Holds::Yes
            } else {
                Holds::No
            });
        }
        let (used, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let part = &buf[..if end { used - 1 } else { used }];
        if !overlong {
            if line.len() + part.len() > LINE_MAX {
                overlong = true;
                line.clear();
            } else {
                line.extend_from_slice(part);
            }
        }
        r.consume(used);
        read += used as u64;
        if end {
            if !overlong && line_holds(&line, pid, ino) {
                return Ok(Holds::Yes);
            }
            line.clear();
            overlong = false;
        }
    }
}

/// One line: `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`. A waiter's line
/// (`N: -> FLOCK ...`), a shared or POSIX lock, or anything malformed is not a hold.
fn line_holds(line: &[u8], pid: i32, ino: u64) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    let mut f = text.split_ascii_whitespace();
    let (Some(n), Some(kind), Some(_advisory), Some(mode), Some(p), Some(id)) =
        (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
    else {
        return false;
    };
    if !n.ends_with(':') || kind != "FLOCK" || mode != "WRITE" {
        return false;
    }
    if p.parse::<i32>().ok() != Some(pid) {
        return false;
    }
    let mut parts = id.split(':');
    let (Some(maj), Some(min), Some(i), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    hex(maj) && hex(min) && i.parse::<u64>().ok() == Some(ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCKS: &str = "\
1: POSIX  ADVISORY  WRITE 500 fe:00:77 0 EOF
2: FLOCK  ADVISORY  READ 501 fe:00:77 0 EOF
3: OFDLCK ADVISORY  WRITE -1 fe:00:77 0 EOF
4: FLOCK  ADVISORY  WRITE 9432 fe:00:10011336 0 EOF
4: -> FLOCK  ADVISORY  WRITE 777 fe:00:10011336 0 EOF
5: FLOCK  ADVISORY  WRITE 8541 00:2d:5318406 0 EOF
";

    fn holds(text: &[u8], pid: i32, ino: u64) -> Holds {
        holds_flock(text, pid, ino, LOCKS_READ_MAX).unwrap()
    }

    #[test]
    fn only_the_holder_of_an_exclusive_flock_on_the_inode_holds_it() {
        let t = LOCKS.as_bytes();
        assert_eq!(holds(t, 9432, 10011336), Holds::Yes);
        assert_eq!(
            holds(t, 8541, 5318406),
            Holds::Yes,
            "a device with a 00 major"
        );
        // The wrong inode, another pid, a waiter, a shared flock, a POSIX lock.
        assert_eq!(holds(t, 9432, 5318406), Holds::No);
        assert_eq!(holds(t, 9433, 10011336), Holds::No);
        assert_eq!(holds(t, 777, 10011336), Holds::No);
        assert_eq!(holds(t, 501, 77), Holds::No);
        assert_eq!(holds(t, 500, 77), Holds::No);
        // Pid 0 (outside this namespace) and negative pids never hold.
        assert_eq!(
            holds(b"1: FLOCK ADVISORY WRITE 0 fe:00:1 0 EOF\n", 0, 1),
            Holds::No
        );
        assert_eq!(holds(t, -1, 77), Holds::No);
        // The last line counts without its newline.
        assert_eq!(
            holds(b"1: FLOCK  ADVISORY  WRITE 42 fe:00:9 0 EOF", 42, 9),
            Holds::Yes
        );
    }

    #[test]
    fn garbage_and_long_lines_never_match() {
        let garbage: &[&[u8]] = &[
            b"",
            b"\n\n\n",
            b"FLOCK ADVISORY WRITE 42 fe:00:9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42\n",
            b"1: FLOCK ADVISORY WRITE 42 9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42 fe:9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42 fe:00:9:9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42 zz:00:9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42 fe:00:09x 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE +42x fe:00:9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42 fe:00:99999999999999999999999 0 EOF\n",
            b"1: FLOCK\xff ADVISORY WRITE 42 fe:00:9 0 EOF\n",
            b"1: FLOCK ADVISORY WRITE 42\0 fe:00:9 0 EOF\n",
        ];
        for g in garbage {
            assert_eq!(
                holds(g, 42, 9),
                Holds::No,
                "{:?}",
                String::from_utf8_lossy(g)
            );
        }
        // A holder's line hidden at the end of an overlong line is not read as one...
        let mut long = vec![b'x'; 100_000];
        long.extend_from_slice(b" 1: FLOCK ADVISORY WRITE 42 fe:00:9 0 EOF\n");
        assert_eq!(holds(&long, 42, 9), Holds::No);
        // ...nor one without end, however long; the next real line after it still counts.
        let mut unended = vec![b'y'; 3 * LINE_MAX];
        assert_eq!(holds(&unended, 42, 9), Holds::No);
        unended.extend_from_slice(b"\n2: FLOCK ADVISORY WRITE 42 fe:00:9 0 EOF\n");
        assert_eq!(holds(&unended, 42, 9), Holds::Yes);
        // A line just within the limit is read.
        let mut padded = b"1: FLOCK ADVISORY WRITE 42 fe:00:9 0 EOF".to_vec();
        padded.resize(LINE_MAX, b' ');
        padded.push(b'\n');
        assert_eq!(holds(&padded, 42, 9), Holds::Yes);
    }

    #[test]
    fn the_read_is_bounded() {
        // Past the bound the answer is "not within", never a match read beyond it.
        let filler = "1: FLOCK  ADVISORY  WRITE 7 fe:00:1 0 EOF\n".repeat(1000);
        let text = format!("{filler}2: FLOCK  ADVISORY  WRITE 42 fe:00:9 0 EOF\n");
        assert_eq!(holds(text.as_bytes(), 42, 9), Holds::Yes);
        let bound = filler.len() as u64;
        assert_eq!(
            holds_flock(text.as_bytes(), 42, 9, bound).unwrap(),
            Holds::NotWithin
        );
        // An endless source stops at the bound.
        let endless = std::io::repeat(b'z');
        assert_eq!(
            holds_flock(endless, 42, 9, 1 << 20).unwrap(),
            Holds::NotWithin
        );
    }

    /// The whole check on a real connection (a socket pair: its peer is this process): refused
    /// while nobody holds the lock, admitted while this process does, refused once it let go.
    #[test]
    fn admit_takes_only_the_holder_of_the_lock() {
        use nix::fcntl::{Flock, FlockArg};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(
            matches!(admit(&a, Some(&path)), Err(Refused::LockFile { .. })),
            "no lock file"
        );
        let file = std::fs::File::create(&path).unwrap();
        assert!(
            matches!(admit(&a, Some(&path)), Err(Refused::NotOwner { .. })),
            "nobody holds it"
        );
        assert!(
            admit(&a, None).is_ok(),
            "without a lock, the user is checked only"
        );
        let held = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        admit(&a, Some(&path)).expect("the holder is admitted");
        drop(held);
        let why = admit(&a, Some(&path)).unwrap_err();
        assert!(why.to_string().contains("does not hold"), "{why}");
    }

    /// The kernel shows a flock's taker as the process, whichever thread took it, and this
    /// reads it: a lock taken on another thread of this (multi-threaded) test process.
    #[test]
    fn a_lock_taken_on_another_thread_is_the_process_s() {
        use nix::fcntl::{Flock, FlockArg};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        let file = std::fs::File::create(&path).unwrap();
        let held = std::thread::spawn(move || {
            Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e)
        })
        .join()
        .unwrap()
        .unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        let me = std::process::id() as i32;
        let locks = std::fs::File::open("/proc/locks").unwrap();
        assert_eq!(
            holds_flock(locks, me, ino, LOCKS_READ_MAX).unwrap(),
            Holds::Yes
        );
        drop(held);
        let locks = std::fs::File::open("/proc/locks").unwrap();
        assert_eq!(
            holds_flock(locks, me, ino, LOCKS_READ_MAX).unwrap(),
            Holds::No
        );
    }
}
