//! Test harness: a real `fleetd serve` process on a temporary state dir, readiness by the
//! sd_notify protocol (no polling), an event stream to await what happens, and clean-up that
//! leaves no agent behind.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use fleetd::client::{Client, ClientError, EventStream};
use fleetd_actors::config::{Config, OnShutdown};
use fleetd_actors::events::{Event, EventKind};
use serde_json::{Value, json};

pub const T: Duration = Duration::from_secs(30);

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fleetd"))
}

pub fn bin_str() -> String {
    bin().display().to_string()
}

/// The default config, tuned for tests: members stop with the daemon, screens settle fast.
pub fn test_config() -> Config {
    let mut c = Config::default();
    c.daemon.on_shutdown = OnShutdown::Stop;
    c.daemon.shutdown_deadline_secs = 10;
    if let Some(p) = c.profiles.get_mut("sim") {
        p.stable_ms = 80;
    }
    c
}

/// Whether members can be confined here (bubblewrap runs with a member's namespaces). With
/// `FLEETD_SANDBOX=1` (set by .ci/run, which installs bubblewrap) it must; without it, a test
/// that needs the sandbox says it skipped that part.
#[allow(dead_code)] // the probes' and the real-agent tests'
pub fn sandbox_here() -> bool {
    let probe = fleetd_actors::sandbox::Sandbox::default()
        .probe(&fleetd_actors::sandbox::SandboxConfig::default());
    match (probe, std::env::var("FLEETD_SANDBOX").as_deref() == Ok("1")) {
        (fleetd_actors::sandbox::Probe::Works { .. }, _) => true,
        (fleetd_actors::sandbox::Probe::Unavailable { why }, true) => {
            panic!("FLEETD_SANDBOX=1 but members cannot be confined here: {why}")
        }
        (fleetd_actors::sandbox::Probe::Unavailable { why }, false) => {
            eprintln!(
                "skipped the confined part: {why} (FLEETD_SANDBOX=1, set by .ci/run, requires it)"
            );
            false
        }
    }
}

/// A sim agent command line.
pub fn sim(args: &[&str]) -> Vec<String> {
    let mut v = vec![bin_str(), "sim-agent".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

/// A terminal agent that records every byte it reads (`sim-agent --record`) and takes each
/// paste as one turn of `work_ms` (the busy line, then the prompt), ending it without
/// fleet_reply (the ticket gets its tail).
#[allow(dead_code)] // the hostile-text and crash tests'
pub fn recorder(file: &Path, work_ms: u64) -> Vec<String> {
    sim(&[
        "--script",
        "worker",
        "--no-reply",
        "--work-ms",
        &work_ms.to_string(),
        "--record",
        &file.display().to_string(),
    ])
}

pub struct D {
    _root: tempfile::TempDir,
    pub state: PathBuf,
    pub config_path: PathBuf,
    notify: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    pub client: Client,
    /// Run the daemon inside this network namespace (`ip netns exec`).
    netns: Option<String>,
    /// Extra environment for the daemon (and so for its members): e.g. a throwaway HOME and a
    /// mock model's base URL for real agent CLIs.
    env: Vec<(String, String)>,
}

impl D {
    pub async fn start() -> D {
        Self::with(test_config()).await
    }

    pub async fn with(config: Config) -> D {
        Self::with_in(config, None).await
    }

    /// A daemon inside network namespace `netns` (which the caller made).
    pub async fn with_in(config: Config, netns: Option<String>) -> D {
        Self::with_env_in(config, netns, vec![]).await
    }

    /// A daemon (and its members) with extra environment variables.
    #[allow(dead_code)] // the real-agent tests' (tests/it/agents.rs)
    pub async fn with_env(config: Config, env: Vec<(String, String)>) -> D {
        Self::with_env_in(config, None, env).await
    }

    async fn with_env_in(config: Config, netns: Option<String>, env: Vec<(String, String)>) -> D {
        let root = tempfile::Builder::new()
            .prefix("fd")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let state = root.path().join("s");
        let config_path = root.path().join("fleetd.toml");
        std::fs::write(
            &config_path,
            toml::to_string(&config).expect("config to toml"),
        )
        .expect("write config");
        let mut d = D {
            notify: root.path().join("notify.sock"),
            log: root.path().join("daemon.log"),
            client: Client::new(&state),
            state,
            config_path,
            _root: root,
            child: None,
            netns,
            env,
        };
        d.boot().await;
        d
    }

    pub fn write_config(&self, config: &Config) {
        std::fs::write(&self.config_path, toml::to_string(config).expect("toml"))
            .expect("write config");
    }

    /// Start the daemon and wait for its READY=1.
    pub async fn boot(&mut self) {
        let _ = std::fs::remove_file(&self.notify);
        let sock = tokio::net::UnixDatagram::bind(&self.notify).expect("notify socket");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns.as_str()]).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let child = cmd
            .args(["serve", "--state-dir"])
            .arg(&self.state)
            .arg("--config")
            .arg(&self.config_path)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("NOTIFY_SOCKET", &self.notify)
            .env("RUST_LOG", "info,fleetd=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn fleetd serve");
        self.child = Some(child);
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(T, sock.recv(&mut buf)).await {
                Ok(Ok(n)) if buf[..n].starts_with(b"READY=1") => break,
                Ok(Ok(_)) => continue,
                _ => panic!("daemon did not become ready; log:\n{}", self.log()),
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9` the daemon.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send a signal to the daemon.
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// Wait (bounded) for the daemon to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let c = self.child.take().expect("daemon running");
        match wait_child(c, timeout) {
            Ok(st) => st,
            Err(mut c) => {
                let _ = c.kill();
                panic!(
                    "daemon did not exit within {timeout:?}; log:\n{}",
                    self.log()
                )
            }
        }
    }

    pub async fn events(&self) -> Events {
        Events {
            stream: self.client.events(0).await.expect("event stream"),
            seen: vec![],
        }
    }

    /// Run the CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin())
            .args(args)
            .env("FLEETD_STATE_DIR", &self.state)
            .env_remove("RUST_LOG")
            .output()
            .expect("run fleetd")
    }

    pub async fn spawn(&self, name: &str, role: &str, command: Vec<String>) -> Value {
        self.client
            .post(
                "/members",
                &json!({"role": role, "name": name, "command": command, "profile": "sim"}),
            )
            .await
            .unwrap_or_else(|e| panic!("spawn {name}: {e}\n{}", self.log()))
    }

    pub async fn try_spawn(&self, body: Value) -> Result<Value, ClientError> {
        self.client.post("/members", &body).await
    }

    /// Send as the operator; returns the ticket id.
    pub async fn send(&self, to: &str, message: &str) -> String {
        let v: Value = self
            .client
            .post(
                &format!("/members/{to}/messages"),
                &json!({"message": message}),
            )
            .await
            .unwrap_or_else(|e| panic!("send to {to}: {e}"));
        v["ticket"]["id"].as_str().expect("ticket id").to_string()
    }

    /// Send and wait for the reply (bounded).
    pub async fn ask(&self, to: &str, message: &str) -> Value {
        let v: Value = self
            .client
            .post(
                &format!("/members/{to}/messages"),
                &json!({"message": message, "wait": true, "wait_secs": 30}),
            )
            .await
            .unwrap_or_else(|e| panic!("send to {to}: {e}"));
        assert_eq!(v["resolved"], true, "no answer from {to}: {v}");
        v["ticket"].clone()
    }

    /// Have member `name` (running the exec script) make these calls; returns the results.
    pub async fn calls_as(&self, name: &str, calls: Value) -> Vec<Value> {
        let t = self.ask(name, &calls.to_string()).await;
        let text = t["reply"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no reply: {t}"));
        serde_json::from_str::<Value>(text)
            .unwrap_or_else(|e| panic!("the reply is not the calls' results ({e}): {t}"))
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub async fn ticket(&self, id: &str) -> Value {
        self.client
            .get(&format!("/tickets/{id}"))
            .await
            .expect("ticket")
    }

    pub async fn member(&self, name: &str) -> Value {
        self.client
            .get(&format!("/members/{name}"))
            .await
            .expect("member")
    }

    pub async fn fault(&self, target: &str) {
        let _: Value = self
            .client
            .post("/debug/fault", &json!({"target": target}))
            .await
            .expect("fault");
    }
}

impl Drop for D {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            if let Err(mut c) = wait_child(c, Duration::from_secs(15)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        kill_leftovers(&self.state);
    }
}

/// Wait for a child to exit, at most `timeout`; gives the child back if it did not.
pub fn wait_child(mut c: Child, timeout: Duration) -> Result<ExitStatus, Child> {
    let pid = c.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    // waitid(WNOWAIT) blocks until the child exits without reaping it, so `c` can still reap.
    std::thread::spawn(move || {
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waiting on our own child with a zeroed siginfo we own.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        let _ = tx.send(r);
    });
    match rx.recv_timeout(timeout) {
        Ok(_) => Ok(c.wait().expect("reap")),
        Err(_) => Err(c),
    }
}

/// Kill every process whose environment names this state dir (agents, PTY hosts, shims).
pub fn kill_leftovers(state: &Path) {
    for pid in processes_of(state) {
        // SAFETY: killing a process this test started (it carries our state dir).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The processes carrying `FLEETD_STATE_DIR=state` (members and their PTY hosts do).
pub fn processes_of(state: &Path) -> Vec<i32> {
    let needle = format!("FLEETD_STATE_DIR={}", state.display());
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .collect()
}

/// The event stream, with everything seen kept for ordering checks.
pub struct Events {
    stream: EventStream,
    pub seen: Vec<Event>,
}

impl Events {
    /// The next event (None when the stream ends).
    #[allow(dead_code)] // the crash trials'
    pub async fn next(&mut self) -> Option<Event> {
        let e = self.stream.next().await?.ok()?;
        self.seen.push(e.clone());
        Some(e)
    }

    /// Wait (bounded) for the first event (seen or new) matching `pred`.
    /// Wait for a drift alert about `peer` under `rule` whose text `text` accepts; its text.
    pub async fn alert(
        &mut self,
        what: &str,
        peer: &str,
        rule: &str,
        text: impl Fn(&str) -> bool,
    ) -> String {
        let e = self
            .until(what, |e| {
                matches!(&e.kind, EventKind::DriftAlert { peer: p, rule: r, text: t, .. }
                    if p == peer && r == rule && text(t))
            })
            .await;
        match e.kind {
            EventKind::DriftAlert { text, .. } => text,
            _ => unreachable!(),
        }
    }

    pub async fn until(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        if let Some(e) = self.seen.iter().find(|e| pred(e)) {
            return e.clone();
        }
        let fut = async {
            loop {
                let e = self
                    .stream
                    .next()
                    .await
                    .expect("event stream ended")
                    .expect("event");
                self.seen.push(e.clone());
                if pred(&e) {
                    return e;
                }
            }
        };
        match tokio::time::timeout(T, fut).await {
            Ok(e) => e,
            Err(_) => panic!(
                "timed out waiting for {what}; seen:\n{:#?}",
                self.seen.iter().map(|e| &e.kind).collect::<Vec<_>>()
            ),
        }
    }

    /// Wait (bounded) for the first event after `seq` matching `pred`.
    pub async fn after(&mut self, seq: u64, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        self.until(what, |e| e.seq > seq && pred(e)).await
    }

    /// The next completed drift pass after `seq`.
    pub async fn drift_pass(&mut self, seq: u64) -> Event {
        self.after(seq, "a drift pass", |e| {
            matches!(e.kind, EventKind::DriftPass { .. })
        })
        .await
    }

    pub async fn status(&mut self, member: &str, to: &str) -> Event {
        self.until(&format!("{member} {to}"), |e| {
            matches!(&e.kind, EventKind::Status { member: m, to: t, .. } if m.as_str() == member && t.as_str() == to)
        })
        .await
    }

    pub async fn ticket(&mut self, id: &str, state: &str) -> Event {
        self.until(&format!("{id} {state}"), |e| {
            matches!(&e.kind, EventKind::Ticket { ticket, state: s, .. }
                if ticket.to_string() == id && serde_json::to_value(s).ok().and_then(|v| v.as_str().map(String::from)).as_deref() == Some(state))
        })
        .await
    }

    pub async fn receipt(&mut self, msg_of_ticket: &str, state: &str) -> Event {
        self.until(&format!("receipt of {msg_of_ticket} {state}"), |e| {
            matches!(&e.kind, EventKind::Receipt { ticket: Some(t), state: s, .. }
                if t.to_string() == msg_of_ticket && serde_json::to_value(s).ok().and_then(|v| v.as_str().map(String::from)).as_deref() == Some(state))
        })
        .await
    }
}

/// Wait (bounded) until process `pid` (not our child) has exited, using a pidfd.
pub fn wait_pid_gone(pid: i32, timeout: Duration) -> bool {
    // SAFETY: pidfd_open on a pid; a negative result means it is already gone.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return true;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one pollfd we own, then closing the fd we opened.
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    unsafe { libc::close(fd) };
    r == 1
}

/// An HTTP/1.1 request over an already connected socket: (status, body).
pub fn http(mut s: UnixStream, method: &str, path: &str, body: &str) -> (u16, String) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: fleetd\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The server may answer (413) and close before a big body is all written.
    let _ = s.write_all(req.as_bytes());
    let mut out = vec![];
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// Every process in `root`'s tree (`root` included, through `/proc/PID/task/*/children`): its
/// pid and command line (NUL-separated arguments joined by spaces). What any local user can
/// read of the fleet's processes.
#[allow(dead_code)] // the argv tests' (tests/it/argv.rs, tests/it/agents.rs)
pub fn tree_cmdlines(root: u32) -> Vec<(u32, String)> {
    let mut out = vec![];
    let mut todo = vec![root];
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = todo.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let args: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            out.push((pid, args.join(" ")));
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// A sampler of `root`'s process tree on a thread of its own, recording every command line
/// that carries one of `needles` (short-lived processes such as hooks may be missed between
/// samples, never made up).
#[allow(dead_code)] // the argv tests'
pub struct ArgvWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

#[allow(dead_code)] // the argv tests'
impl ArgvWatch {
    pub fn start(root: u32, needles: Vec<String>) -> ArgvWatch {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut hits: Vec<String> = vec![];
            let mut pids = std::collections::HashSet::new();
            while !s.load(Ordering::Relaxed) {
                for (pid, cmd) in tree_cmdlines(root) {
                    pids.insert(pid);
                    if needles.iter().any(|n| cmd.contains(n.as_str())) && !hits.contains(&cmd) {
                        hits.push(cmd);
                    }
                }
                // Pacing of the samples, not a wait for anything.
                std::thread::sleep(Duration::from_millis(25));
            }
            (pids.len(), hits)
        });
        ArgvWatch { stop, thread }
    }

    /// Stop; how many distinct processes were seen, and the command lines that carried a needle.
    pub fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the argv watch thread")
    }
}
