//! Issue 24, door 1: a member's PTY host talks only to the daemon that owns it. A process of the
//! user that is not the daemon gets nothing from the host's socket and types nothing into the
//! agent, and the daemon's own link is left as it was; a link that does break is made again and
//! the member re-adopted, not called exited.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetd_actors::events::EventKind;

use crate::common::{D, Events, T, recorder};

/// The socket of `member`'s PTY host in state dir `state` (`term/NAME.GENERATION.sock`).
fn term_socket(state: &Path, member: &str) -> PathBuf {
    let prefix = format!("{member}.");
    let found: Vec<PathBuf> = std::fs::read_dir(state.join("term"))
        .expect("the term dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".sock"))
        })
        .collect();
    assert_eq!(found.len(), 1, "one socket for {member}: {found:?}");
    found[0].clone()
}

/// For what no event announces (a line in a host's log): looked at every 20 ms, bounded by `T`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + T;
    while !done() {
        assert!(Instant::now() < until, "{what} within {T:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A paste to `member` is taken (its turn starts) and its text reaches the program.
async fn still_served(d: &D, ev: &mut Events, member: &str, rec: &Path, text: &str) {
    let ticket = d.send(member, text).await;
    ev.receipt(&ticket, "accepted").await;
    let bytes = String::from_utf8_lossy(&std::fs::read(rec).expect("the record")).into_owned();
    assert!(
        bytes.contains(text),
        "{text:?} not typed into {member}: {bytes:?}"
    );
}

fn no_exit(ev: &Events, member: &str) {
    let exits: Vec<_> = ev
        .seen
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::Status { member: m, to, .. }
                if m.as_str() == member && to.as_str() == "exited")
        })
        .collect();
    assert!(exits.is_empty(), "{member} was called exited: {exits:?}");
}

/// The test process is a process of the user, not the daemon: it connects to a member's PTY
/// host socket and sends an Input frame exactly as the daemon would. It is closed without a
/// greeting or a screen, its input never reaches the agent, the host says why in its log, and
/// the daemon keeps its link: the member stays alive and takes the next message.
/// (Before: the host greeted it with the screen, typed its input into the agent and dropped
/// the daemon's connection, and the daemon called the member exited.)
#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_is_not_the_daemon_gets_nothing_from_a_pty_host() {
    let d = D::start().await;
    let mut ev = d.events().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("target.bytes");
    d.spawn("target", "worker", recorder(&rec, 50)).await;
    ev.status("target", "idle").await;
    let sock = term_socket(&d.state, "target");

    /// The wire's first daemon frame, `DaemonMsg::Input` (bincode encodes the variant's index).
    #[derive(serde::Serialize)]
    enum Wire {
        Input(Vec<u8>),
    }
    let frame = fleetd::codec::encode_frame(&Wire::Input(b"INTRUDED\r".to_vec())).unwrap();
    let mut s = UnixStream::connect(&sock).expect("the host's socket takes the connection");
    // The host may have closed it already: a failed write is fine, an answer is not.
    let _ = s.write_all(&frame);
    s.set_read_timeout(Some(T)).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) => panic!(
            "the host answered a process that is not the daemon ({n} bytes: {:?})",
            String::from_utf8_lossy(&buf[..n.min(200)])
        ),
        Err(e) => panic!("the host neither answered nor closed the connection: {e}"),
    }
    let log = sock.with_extension("log");
    wait_until("the host logging the refusal", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("refused a connection"))
    });
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("does not hold the daemon's lock"),
        "{logged}"
    );

    // The same from inside another member (the issue's case: an agent's shell typing into
    // another agent). A sandbox around members may hide the socket from it: that is fine too.
    let said = dir.path().join("mole.said");
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    let mole = r#"
import socket, sys, time
said = "unreachable"
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    try:
        s.sendall(bytes.fromhex(sys.argv[2]))
    except OSError:
        pass
    try:
        b = s.recv(65536)
        said = "answered %d bytes" % len(b) if b else "closed"
    except ConnectionResetError:
        said = "closed"
except OSError:
    pass
open(sys.argv[3] + ".tmp", "w").write(said)
import os
os.rename(sys.argv[3] + ".tmp", sys.argv[3])
time.sleep(600)
"#;
    let sock_arg = sock.display().to_string();
    let said_arg = said.display().to_string();
    let command: Vec<String> = ["python3", "-c", mole, &sock_arg, &hex, &said_arg]
        .iter()
        .map(|a| a.to_string())
        .collect();
    d.spawn("mole", "worker", command).await;
    wait_until("the member saying how its connection ended", || {
        said.exists()
    });
    let outcome = std::fs::read_to_string(&said).unwrap();
    assert!(
        outcome == "closed" || outcome == "unreachable",
        "another member's connection: {outcome}"
    );

    // The daemon's link was left alone: the next message is typed in, and the intruder's
    // input (which would have come first) never was.
    still_served(&d, &mut ev, "target", &rec, "after the intruder").await;
    let bytes = String::from_utf8_lossy(&std::fs::read(&rec).unwrap()).into_owned();
    assert!(!bytes.contains("INTRUDED"), "the intruder typed: {bytes:?}");
    no_exit(&ev, "target");
    let m = d.member("target").await;
    assert_ne!(m["status"], "exited", "{m}");
}

/// The daemon's own link to a PTY host breaks while the host and its agent run on (a debug
/// fault has the host drop the connection): the slot reconnects and re-adopts the member, with
/// its pid, instead of calling it exited, and the member takes the next message.
/// (Before: "exited (terminal connection lost)", with the agent still running, never adopted.)
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_terminal_link_is_made_again_not_called_an_exit() {
    let d = D::start().await;
    let mut ev = d.events().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("target.bytes");
    d.spawn("target", "worker", recorder(&rec, 50)).await;
    ev.status("target", "idle").await;
    let pid = d.member("target").await["pid"].clone();
    assert!(pid.is_u64(), "{pid}");

    d.fault("term:target").await;
    let restarted = ev
        .until(
            "the slot restarted",
            |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "slot:target"),
        )
        .await;
    let EventKind::Restarted { reason, .. } = &restarted.kind else {
        unreachable!()
    };
    assert!(reason.contains("terminal link"), "{reason}");
    ev.until(
        "re-adoption",
        |e| matches!(&e.kind, EventKind::Adopted { member, .. } if member.as_str() == "target"),
    )
    .await;
    no_exit(&ev, "target");
    let m = d.member("target").await;
    assert_eq!(m["pid"], pid, "{m}");
    assert_ne!(m["status"], "exited", "{m}");
    still_served(&d, &mut ev, "target", &rec, "after the broken link").await;
    no_exit(&ev, "target");
}
