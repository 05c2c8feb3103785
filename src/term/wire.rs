//! The PTY host's wire: the frames the host and the daemon exchange over the member's socket
//! (each through `crate::codec`), and the exit file the host leaves. Both sides of `super`
//! use these; changing them changes the protocol a running host and a restarted daemon speak.

use serde::{Deserialize, Serialize};

/// What a host tells a daemon that connects: its program, the screen and the pastes taken.
/// Encoded as its fields in order, exactly as the struct variants `Hello` and `Welcome` were.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Greeting {
    pub(super) pid: u32,
    pub(super) host_pid: u32,
    pub(super) rows: u16,
    pub(super) cols: u16,
    pub(super) snapshot: Vec<u8>,
    /// The paste ids taken, oldest first (at most `PASTES_REMEMBERED`).
    pub(super) pasted: Vec<u64>,
}

/// Host -> daemon.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum HostMsg {
    Hello(Greeting),
    Output(Vec<u8>),
    /// A paste and its Enter were written.
    Pasted {
        id: u64,
    },
    /// A paste could not be taken.
    PasteRefused {
        id: u64,
        why: String,
    },
    Exited {
        code: Option<i32>,
        signal: Option<String>,
    },
    /// The screen, as asked for by `DaemonMsg::Screen`.
    Screen(Vec<u8>),
    /// `Hello` from a host that also takes `DaemonMsg::Screen` (a variant of its own, so a
    /// daemon still tells an older host's `Hello` apart and never asks it for its screen).
    Welcome(Greeting),
}

/// Daemon -> host. New variants go at the end: an older host that reads one it does not know
/// drops the connection.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum DaemonMsg {
    Input(Vec<u8>),
    /// A paste and, `enter_delay_ms` later, its Enter; taken once per id.
    Paste {
        id: u64,
        bytes: Vec<u8>,
        enter_delay_ms: u64,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    Terminate {
        grace_ms: u64,
    },
    Detach,
    /// Send the screen as it is now (`HostMsg::Screen`).
    Screen,
}

/// What the exit file records.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ExitRecord {
    pub(super) code: Option<i32>,
    pub(super) signal: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The greetings as they were first written: struct variants (`Hello` index 0, `Welcome`
    /// index 6). A host or daemon built before `Greeting` must read the same bytes.
    #[derive(Serialize)]
    enum Before {
        Hello {
            pid: u32,
            host_pid: u32,
            rows: u16,
            cols: u16,
            snapshot: Vec<u8>,
            pasted: Vec<u64>,
        },
        _Output,
        _Pasted,
        _PasteRefused,
        _Exited,
        _Screen,
        Welcome {
            pid: u32,
            host_pid: u32,
            rows: u16,
            cols: u16,
            snapshot: Vec<u8>,
            pasted: Vec<u64>,
        },
    }

    #[test]
    fn greetings_encode_as_the_struct_variants_did() {
        let g = || Greeting {
            pid: 7,
            host_pid: 8,
            rows: 40,
            cols: 120,
            snapshot: b"screen".to_vec(),
            pasted: vec![1, 2],
        };
        let before = |welcome: bool| {
            let (pid, host_pid, rows, cols) = (7, 8, 40, 120);
            let (snapshot, pasted) = (b"screen".to_vec(), vec![1, 2]);
            if welcome {
                Before::Welcome {
                    pid,
                    host_pid,
                    rows,
                    cols,
                    snapshot,
                    pasted,
                }
            } else {
                Before::Hello {
                    pid,
                    host_pid,
                    rows,
                    cols,
                    snapshot,
                    pasted,
                }
            }
        };
        use crate::codec::encode;
        assert_eq!(
            encode(&HostMsg::Hello(g())).unwrap(),
            encode(&before(false)).unwrap()
        );
        assert_eq!(
            encode(&HostMsg::Welcome(g())).unwrap(),
            encode(&before(true)).unwrap()
        );
    }
}
