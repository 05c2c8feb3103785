//! The PTY host on its own (`fleetd-pty-host`, its poll loop in `fleetd::term::host`), driven
//! through the daemon's backend and raw sockets: what the host must do whatever the daemon does.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetd::term::HostBackend;
use fleetd_actors::term::{LaunchSpec, TermBackend, TermEvent, TermHandle, TermInput};
use fleetd_actors::types::MemberName;

use crate::common::{T, bin, wait_pid_gone};

fn spec(name: &str, script: &str) -> LaunchSpec {
    LaunchSpec {
        name: MemberName::new(name).unwrap(),
        generation: 1,
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: vec![],
        unset: vec![],
        cwd: None,
        rows: 24,
        cols: 80,
    }
}

/// The next event other than output, within `T`.
async fn next_non_output(h: &mut TermHandle) -> TermEvent {
    let until = tokio::time::Instant::now() + T;
    loop {
        match tokio::time::timeout_at(until, h.events.recv()).await {
            Ok(Some(TermEvent::Output(_))) => {}
            Ok(Some(ev)) => return ev,
            Ok(None) => panic!("the terminal's events ended"),
            Err(_) => panic!("no event within {T:?}"),
        }
    }
}

/// Output until `needle` was printed (the screen so far counts), within `T`.
async fn await_output(h: &mut TermHandle, needle: &str) -> String {
    let mut seen = String::from_utf8_lossy(&h.snapshot).into_owned();
    let until = tokio::time::Instant::now() + T;
    while !seen.contains(needle) {
        match tokio::time::timeout_at(until, h.events.recv()).await {
            Ok(Some(TermEvent::Output(b))) => seen.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(ev)) => panic!("{ev:?} before {needle:?} in {seen:?}"),
            Ok(None) => panic!("the terminal's events ended before {needle:?} in {seen:?}"),
            Err(_) => panic!("{needle:?} not printed within {T:?}: {seen:?}"),
        }
    }
    seen
}

fn vm_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// For the two states no event announces (a socket's receive queue filling, an exit file
/// appearing): looked at every 20 ms, bounded by `T`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + T;
    while !done() {
        assert!(Instant::now() < until, "{what} within {T:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A program that stops reading its input: pastes are taken until the host's bounded input
/// queue is full, then refused with the reason, and the host stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paste_is_refused_once_the_input_queue_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HostBackend::new(dir.path(), bin()).unwrap();
    let mut h = backend
        .launch(spec(
            "deaf",
            "stty raw -echo; echo deaf-now; exec sleep 1000",
        ))
        .await
        .unwrap();
    await_output(&mut h, "deaf-now").await;
    // 64 KiB pastes with Enters far off: the PTY takes a few, the queue (4 MiB) the next ones.
    let paste = vec![b'x'; 64 * 1024];
    for id in 1..=120 {
        h.input
            .send(TermInput::Paste {
                id,
                bytes: paste.clone(),
                enter_delay_ms: 600_000,
            })
            .await
            .unwrap();
    }
    let TermEvent::PasteRefused { id, why } = next_non_output(&mut h).await else {
        panic!("a paste was not refused");
    };
    assert!(id > 60 && id <= 120, "refused {id}");
    assert!(why.contains("its input queue is full"), "{why}");
    // Every later one too, each said.
    for later in id + 1..=120 {
        match next_non_output(&mut h).await {
            TermEvent::PasteRefused { id, .. } => assert_eq!(id, later),
            ev => panic!("{ev:?}"),
        }
    }
    let host = h.host_pid.unwrap();
    assert!(vm_rss_kb(host) < 24 * 1024, "{} KiB", vm_rss_kb(host));
    h.input
        .send(TermInput::Terminate { grace_ms: 100 })
        .await
        .unwrap();
    assert!(matches!(
        next_non_output(&mut h).await,
        TermEvent::Exited { .. }
    ));
}

/// A daemon connection that stopped reading holds back the program's output, not the host:
/// a new connection replaces it, gets the screen and the output again, and the host's memory
/// stays bounded meanwhile. The replaced connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connection_replaces_one_that_stopped_reading() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HostBackend::new(dir.path(), bin()).unwrap();
    let mut first = backend
        .launch(spec("flood", "echo waiting; read go; exec yes flood-line"))
        .await
        .unwrap();
    await_output(&mut first, "waiting").await;
    first
        .input
        .send(TermInput::Bytes(b"go\r".to_vec()))
        .await
        .unwrap();
    await_output(&mut first, "flood-line").await;

    // A connection that never reads: the host greets it and floods it until it is full.
    let stuck = UnixStream::connect(dir.path().join("term/flood.1.sock")).unwrap();
    match next_non_output(&mut first).await {
        TermEvent::Lost(why) => assert!(why.contains("closed"), "{why}"),
        ev => panic!("the replaced connection got {ev:?}"),
    }
    let mut peek = vec![0u8; 256 * 1024];
    wait_until("the stuck connection filling up", || {
        nix::sys::socket::recv(
            stuck.as_raw_fd(),
            &mut peek,
            nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        )
        .is_ok_and(|n| n >= 128 * 1024)
    });
    let host = first.host_pid.unwrap();
    assert!(vm_rss_kb(host) < 24 * 1024, "{} KiB", vm_rss_kb(host));

    let mut second = backend
        .connect(&MemberName::new("flood").unwrap(), 1)
        .await
        .expect("a new connection is greeted while the old one is stuck");
    assert!(String::from_utf8_lossy(&second.snapshot).contains("flood-line"));
    await_output(&mut second, "flood-line").await;
    second
        .input
        .send(TermInput::Terminate { grace_ms: 100 })
        .await
        .unwrap();
    assert!(matches!(
        next_non_output(&mut second).await,
        TermEvent::Exited { .. }
    ));
    drop(stuck);
}

/// Terminate signals the program's group, and a group that ignores it is killed when the grace
/// ends, the program's children too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_kills_the_group_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HostBackend::new(dir.path(), bin()).unwrap();
    let mut h = backend
        .launch(spec(
            "stubborn",
            "trap '' TERM HUP; sleep 1000 & echo child=$!=end; wait; wait",
        ))
        .await
        .unwrap();
    let seen = await_output(&mut h, "=end").await;
    let child: u32 = seen
        .split("child=")
        .nth(1)
        .and_then(|s| s.split('=').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no child pid in {seen:?}"));
    let asked = Instant::now();
    h.input
        .send(TermInput::Terminate { grace_ms: 400 })
        .await
        .unwrap();
    let signal = match next_non_output(&mut h).await {
        TermEvent::Exited { code: None, signal } => signal.expect("killed by a signal"),
        ev => panic!("{ev:?}"),
    };
    assert!(
        asked.elapsed() >= Duration::from_millis(400),
        "killed before the grace ended: {:?}",
        asked.elapsed()
    );
    assert!(
        wait_pid_gone(child as i32, T),
        "the program's child was not killed with it within {T:?}"
    );
    assert_eq!(
        backend.recorded_exit(&MemberName::new("stubborn").unwrap(), 1),
        Some((None, Some(signal)))
    );
}

/// A program that ends before any daemon connects: the host records the exit, waits for the
/// daemon that launched it, and tells it the output and the exit when it comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exit_is_told_to_a_daemon_that_connects_late() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HostBackend::new(dir.path(), bin()).unwrap();
    let term = dir.path().join("term");
    let small = bin().with_file_name("fleetd-pty-host");
    let mut host = Command::new(&small)
        .arg("--socket")
        .arg(term.join("late.1.sock"))
        .arg("--exit-file")
        .arg(term.join("late.1.exit"))
        .args(["--", "sh", "-c", "echo bye-now; exit 3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(host.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ready "), "{line:?}");
    let exit_file = term.join("late.1.exit");
    wait_until("the exit recorded", || exit_file.exists());
    let name = MemberName::new("late").unwrap();
    assert_eq!(backend.recorded_exit(&name, 1), Some((Some(3), None)));

    let mut h = backend.connect(&name, 1).await.expect("the host waited");
    assert!(
        String::from_utf8_lossy(&h.snapshot).contains("bye-now"),
        "{:?}",
        String::from_utf8_lossy(&h.snapshot)
    );
    match next_non_output(&mut h).await {
        TermEvent::Exited { code, signal } => assert_eq!((code, signal), (Some(3), None)),
        ev => panic!("{ev:?}"),
    }
    let status = crate::common::wait_child(host, T).expect("the host ends");
    assert!(status.success(), "{status:?}");
    assert!(!Path::new(&term.join("late.1.sock")).exists());
}
