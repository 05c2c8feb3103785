//! Config: checking (charter text against the registered tools), the MCP contract document,
//! SIGHUP reload, charter fingerprints.

use std::collections::BTreeSet;

use fleetd_actors::events::EventKind;

use crate::common::*;

#[test]
fn config_check_fails_when_a_charter_names_an_unregistered_tool() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = test_config();
    c.charters.worker = "Answer with fleet_reply, or call bridge_send when stuck.".into();
    let f = dir.path().join("c.toml");
    std::fs::write(&f, toml::to_string(&c).unwrap()).unwrap();
    let o = std::process::Command::new(bin())
        .args(["config", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("charters.worker names `bridge_send`"), "{err}");
    // The default config prints, parses and checks clean.
    let o = std::process::Command::new(bin())
        .args(["config", "default"])
        .output()
        .unwrap();
    std::fs::write(&f, &o.stdout).unwrap();
    let o = std::process::Command::new(bin())
        .args(["config", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_mcp_contract_document_names_exactly_the_registered_tools() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/MCP-Contract.md"))
        .unwrap();
    let named: BTreeSet<String> = fleetd_actors::config::tool_names_in(&doc)
        .into_iter()
        .collect();
    let registered: BTreeSet<String> = fleetd::mcp::tool_names().into_iter().collect();
    let extra: Vec<_> = named.difference(&registered).collect();
    let missing: Vec<_> = registered.difference(&named).collect();
    assert!(
        extra.is_empty(),
        "docs/MCP-Contract.md names tools the server does not register: {extra:?}"
    );
    assert!(
        missing.is_empty(),
        "docs/MCP-Contract.md omits registered tools: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_and_new_spawns_get_the_new_charter() {
    let mut c = test_config();
    let d = D::with(c.clone()).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    let before = d.member("w1").await["charter_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    c.charters.worker = "You are a careful worker.".into();
    d.write_config(&c);
    d.signal(libc::SIGHUP);
    ev.until("reload", |e| {
        matches!(&e.kind, EventKind::ConfigReloaded { ok: true, .. })
    })
    .await;
    d.spawn("w2", "worker", sim(&[])).await;
    let after = d.member("w2").await["charter_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(before, after);
    assert_eq!(
        d.member("w1").await["charter_sha256"],
        before.as_str(),
        "a running member keeps what it received"
    );
    let charter = std::fs::read_to_string(d.state.join("charters/w2.md")).unwrap();
    assert!(charter.starts_with("You are a careful worker."));
    assert!(
        charter.contains("fleet_reply"),
        "composed with the reply charter"
    );
    // A broken config is refused and the running one kept.
    std::fs::write(&d.config_path, "[lifecycle]\nidle_ttl = 3\n").unwrap();
    d.signal(libc::SIGHUP);
    let e = ev
        .until("refused reload", |e| {
            matches!(&e.kind, EventKind::ConfigReloaded { ok: false, .. })
        })
        .await;
    let EventKind::ConfigReloaded { detail, .. } = &e.kind else {
        unreachable!()
    };
    assert!(detail.contains("idle_ttl"), "{detail}");
    assert_eq!(
        d.ask("w2", "sum: 1").await["reply"]["text"],
        "sum of 1 numbers = 1"
    );
    // `fleetd reload` says what was refused and, once, what would be accepted.
    let o = d.cli(&["reload"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("idle_ttl"), "{err}");
    assert_eq!(err.matches("Accepted:").count(), 1, "{err}");
    // The daemon's log is a file here: plain text, no colour codes.
    assert!(!d.log().contains('\x1b'), "ANSI codes in the log file");
}

#[test]
fn the_three_host_example_configs_check_once_their_keys_are_filled_in() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/examples");
    let mut seen = 0;
    let placeholder = regex::Regex::new(r"REPLACE-with-[a-z0-9-]+-public-key=").unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let key =
            fleetd_actors::keys::public_text(&fleetd_actors::keys::generate().verifying_key());
        let filled = placeholder.replace_all(&text, key.as_str()).into_owned();
        assert_ne!(filled, text, "{} has no key placeholders", p.display());
        let c = fleetd_actors::config::Config::parse(&filled).unwrap();
        let problems = c.check(
            &fleetd::mcp::tool_names()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert!(problems.is_empty(), "{}: {problems:?}", p.display());
        assert_eq!(c.peers.len(), 2, "{}", p.display());
        seen += 1;
    }
    assert_eq!(seen, 3);
}

/// `fleetd agents` reports, per profile, whether its CLI is installed where the daemon looks,
/// its version, and whether that version is one the profile was verified against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetd_agents_reports_installed_versions_and_whether_they_were_verified() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fake = |name: &str, out: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho '{out}'\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    };
    let mut c = crate::common::test_config();
    let mut good = c.profiles["claude"].clone();
    good.command = vec![fake("claude-ok", "2.1.332 (Claude Code)")];
    c.profiles.insert("claude".into(), good);
    let mut old = c.profiles["codex"].clone();
    old.command = vec![fake("codex-old", "codex-cli 0.99.0")];
    c.profiles.insert("codex".into(), old);
    let mut missing = c.profiles["gemini"].clone();
    missing.command = vec![dir.path().join("no-such-gemini").display().to_string()];
    c.profiles.insert("gemini".into(), missing);
    let d = crate::common::D::with(c).await;
    let o = d.cli(&["agents", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let row = |p: &str| rows.iter().find(|r| r["profile"] == p).cloned().unwrap();
    assert_eq!(row("claude")["version"], "2.1.332");
    assert_eq!(row("claude")["verified"], true);
    assert_eq!(row("codex")["version"], "0.99.0");
    assert_eq!(row("codex")["verified"], false);
    assert_eq!(row("gemini")["path"], serde_json::Value::Null);
    assert_eq!(row("generic")["agent"], serde_json::Value::Null);
    let table = String::from_utf8_lossy(&d.cli(&["agents"]).stdout).to_string();
    assert!(table.contains("not installed"), "{table}");
    assert!(table.contains("no (verified: "), "{table}");
}

/// A closed stdout ends a command quietly (it panicked with a backtrace and exit 101).
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0i32; 2];
    // SAFETY: a fresh pipe; both ends are owned below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The reader is gone before the command writes anything: its first print fails with EPIPE.
    drop(read);
    let out = std::process::Command::new(crate::common::bin())
        .args(["config", "default"])
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A peer that carries this host's own key is refused by `config check` (with a key file named)
/// and by the daemon at start.
#[test]
fn a_peer_with_the_hosts_own_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("host.key");
    let out = std::process::Command::new(bin())
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = std::fs::read_to_string(dir.path().join("host.key.pub")).unwrap();
    let mut c = test_config();
    c.daemon.key_file = Some(key.display().to_string());
    c.link.listen = Some("127.0.0.1:0".into());
    c.peers.insert(
        "twin".into(),
        fleetd_actors::config::PeerConfig {
            addr: "127.0.0.1:9".into(),
            public_key: public.trim().to_string(),
        },
    );
    let cfg = dir.path().join("fleetd.toml");
    std::fs::write(&cfg, toml::to_string(&c).unwrap()).unwrap();
    let out = std::process::Command::new(bin())
        .args(["config", "check"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("peers.twin.public_key is this host's own key"),
        "{err}"
    );
    let out = std::process::Command::new(bin())
        .args(["serve", "--state-dir"])
        .arg(dir.path().join("s"))
        .arg("--config")
        .arg(&cfg)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot be its own peer"), "{err}");
}

/// A config file holds only what differs from the built-in default (as the deploy examples do):
/// a daemon reloaded onto one still has the built-in charters, architect slots and profiles, so
/// spawns work and members get their charter; `config show` prints the effective config.
#[tokio::test(flavor = "multi_thread")]
async fn a_partial_config_is_layered_over_the_default() {
    let d = D::start().await;
    let mut ev = d.events().await;
    let partial =
        "[daemon]\nhost = \"build-z\"\n\n[charters]\nworker = \"You are a terse worker.\"\n";
    std::fs::write(&d.config_path, partial).unwrap();
    let shown = d.cli(&["config", "show", d.config_path.to_str().unwrap()]);
    assert!(shown.status.success(), "{shown:?}");
    let shown = String::from_utf8_lossy(&shown.stdout);
    let effective = fleetd_actors::config::Config::parse(&shown).expect("show prints a config");
    let default = fleetd_actors::config::Config::default();
    assert_eq!(effective.daemon.host, "build-z");
    assert_eq!(effective.charters.worker, "You are a terse worker.");
    assert_eq!(effective.charters.primary, default.charters.primary);
    assert_eq!(effective.architects, default.architects);
    d.signal(libc::SIGHUP);
    ev.until("reload", |e| {
        matches!(&e.kind, EventKind::ConfigReloaded { ok: true, .. })
    })
    .await;
    d.spawn("w1", "worker", sim(&[])).await;
    let charter = std::fs::read_to_string(d.state.join("charters/w1.md")).unwrap();
    assert!(charter.starts_with("You are a terse worker."), "{charter}");
    assert!(
        charter.contains("fleet_reply"),
        "the default reply charter: {charter}"
    );
    // The built-in architect slots are there: an architect spawn binds one.
    let a: serde_json::Value = d
        .client
        .post(
            "/members",
            &serde_json::json!({"role": "architect", "name": "a1", "slot": "opus", "command": sim(&[]), "profile": "sim"}),
        )
        .await
        .expect("an architect on a built-in slot");
    assert!(a["slot"].is_string(), "{a}");
}

/// `GET /openapi.json` is an OpenAPI 3.1 document generated from the route definitions, and it
/// lists exactly the routes docs/REST.md documents (the debug-only fault route aside).
#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_and_rest_md_list_the_same_routes() {
    let d = D::start().await;
    let text = d.client.get_text("/openapi.json").await.unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    let mut served = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            served.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/REST.md")).unwrap();
    let row = regex::Regex::new(r"(?m)^\| `(GET|POST|DELETE|PUT|PATCH) ([^`?\[ ]+)").unwrap();
    let documented: std::collections::BTreeSet<String> = row
        .captures_iter(&md)
        .map(|c| format!("{} {}", &c[1], c[2].trim_end_matches('/')))
        .filter(|r| r != "POST /debug/fault")
        .collect();
    assert_eq!(
        served, documented,
        "left: in /openapi.json, right: in docs/REST.md"
    );
    // Each path parameter is declared, as OpenAPI requires.
    let param = regex::Regex::new(r"\{([a-z_]+)\}").unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for cap in param.captures_iter(path) {
                let declared = op["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == cap[1] && p["in"] == "path"));
                assert!(
                    declared,
                    "{method} {path}: path parameter {} undeclared",
                    &cap[1]
                );
            }
        }
    }
}
