//! Peer links between real daemons on 127.0.0.x: they link up with pinned keys, see a killed
//! peer go down and come back, and refuse a host whose key is not configured.
//! (The three-host runs in network namespaces are in `netns.rs`.)

use fleetd_actors::config::{Config, PeerConfig};
use fleetd_actors::events::EventKind;
use serde_json::Value;

use crate::common::*;

pub struct Host {
    pub name: &'static str,
    pub addr: String,
    pub key_file: std::path::PathBuf,
    pub public: String,
    _dir: tempfile::TempDir,
}

/// A host name, a free UDP port on 127.0.0.`ip`, and a key file.
pub fn host(name: &'static str, ip: u8) -> Host {
    host_at(name, &format!("127.0.0.{ip}"))
}

/// A host name, an address on `ip` (a free port on loopback; port 7801 elsewhere, which is a
/// network namespace of the host's own), and a key file.
pub fn host_at(name: &'static str, ip: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let key = fleetd_actors::keys::generate();
    let key_file = dir.path().join("host.key");
    fleetd_actors::keys::save(&key_file, &key).unwrap();
    let addr = if ip.starts_with("127.") {
        let sock = std::net::UdpSocket::bind(format!("{ip}:0")).unwrap();
        sock.local_addr().unwrap().to_string()
    } else {
        format!("{ip}:7801")
    };
    Host {
        name,
        addr,
        key_file,
        public: fleetd_actors::keys::public_text(&key.verifying_key()),
        _dir: dir,
    }
}

pub fn config(me: &Host, peers: &[&Host]) -> Config {
    let mut c = test_config();
    c.daemon.host = me.name.into();
    c.daemon.key_file = Some(me.key_file.display().to_string());
    c.link.listen = Some(me.addr.clone());
    c.link.keep_alive_secs = 1;
    c.link.idle_timeout_secs = 3;
    c.link.backoff_min_ms = 50;
    c.link.backoff_max_ms = 500;
    for p in peers {
        c.peers.insert(
            p.name.into(),
            PeerConfig {
                addr: p.addr.clone(),
                public_key: p.public.clone(),
            },
        );
    }
    c
}

pub fn link_event(e: &fleetd_actors::events::Event, peer: &str, up: bool) -> bool {
    matches!(&e.kind, EventKind::Link { peer: p, up: u, .. } if p == peer && *u == up)
}

async fn link_view(d: &D, peer: &str) -> Value {
    let v: Value = d.client.get("/peers").await.unwrap();
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["peer"] == peer)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_link_up_notice_a_killed_peer_and_relink() {
    let (a, b) = (host("alpha", 2), host("beta", 3));
    let da = D::with(config(&a, &[&b])).await;
    let mut ea = da.events().await;
    let mut db = D::with(config(&b, &[&a])).await;
    let mut eb = db.events().await;
    ea.until("alpha sees beta up", |e| link_event(e, "beta", true))
        .await;
    eb.until("beta sees alpha up", |e| link_event(e, "alpha", true))
        .await;
    let v = link_view(&da, "beta").await;
    assert_eq!(v["phase"], "up", "{v}");
    assert!(v["rtt_us"].as_u64().is_some(), "{v}");
    // Both hosts use one connection: exactly one of them dialled it.
    let (ab, ba) = (
        v["dialled"].as_bool().unwrap(),
        link_view(&db, "alpha").await["dialled"].as_bool().unwrap(),
    );
    assert_ne!(ab, ba, "alpha dialled: {ab}, beta dialled: {ba}");
    let p: Value = da.client.get("/peers").await.unwrap();
    assert_eq!(p["host"], "alpha");
    assert_eq!(p["public_key"], a.public.as_str());
    // The lead's coordinator row shows reachability too.
    let list: Value = da.client.get("/members").await.unwrap();
    assert_eq!(list["coordinator"]["peers"][0]["peer"], "beta", "{list}");
    // Kill beta hard: alpha notices, then relinks when beta is back.
    let mark = ea.seen.last().map_or(0, |e| e.seq);
    db.kill9();
    let down = ea
        .after(mark, "alpha sees beta down", |e| {
            link_event(e, "beta", false)
        })
        .await;
    let v = link_view(&da, "beta").await;
    assert_ne!(v["phase"], "up", "{v}");
    assert!(v["reason"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    db.boot().await;
    let up = ea
        .after(down.seq, "alpha sees beta up again", |e| {
            link_event(e, "beta", true)
        })
        .await;
    assert_eq!(link_view(&da, "beta").await["phase"], "up");
    // A panic in alpha's link actor restarts that actor alone; the new one links up again and
    // announces it afresh.
    da.fault("link:beta").await;
    let restarted = ea
        .after(
            up.seq,
            "link:beta restarted",
            |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "link:beta"),
        )
        .await;
    ea.after(restarted.seq, "the restarted link comes up", |e| {
        link_event(e, "beta", true)
    })
    .await;
    assert_eq!(link_view(&da, "beta").await["phase"], "up");
    let st: Value = da.client.get("/status").await.unwrap();
    let child = st["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "link:beta")
        .cloned()
        .unwrap();
    assert_eq!(
        (child["running"].as_bool(), child["restarts_total"].as_u64()),
        (Some(true), Some(1)),
        "{child}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_an_unknown_key_is_refused() {
    let (b, c) = (host("beta", 4), host("gamma", 5));
    // Beta knows no peers but listens; gamma knows beta's real key and address.
    let mut bc = config(&b, &[]);
    bc.peers.clear();
    let db = D::with(bc).await;
    let mut eb = db.events().await;
    let dc = D::with(config(&c, &[&b])).await;
    let mut ec = dc.events().await;
    // Beta refuses in the handshake and says so; gamma's link is announced down, never up.
    let refused = eb
        .until("beta refuses gamma", |e| {
            matches!(&e.kind, EventKind::LinkRefused { .. })
        })
        .await;
    let EventKind::LinkRefused { detail } = &refused.kind else {
        unreachable!()
    };
    assert!(detail.contains("127.0.0.5"), "{detail}");
    ec.until("gamma sees beta down", |e| link_event(e, "beta", false))
        .await;
    assert!(!ec.seen.iter().any(|e| link_event(e, "beta", true)));
    let v = link_view(&dc, "beta").await;
    assert_ne!(v["phase"], "up", "{v}");
    assert!(v["reason"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    assert!(v["attempts"].as_u64().unwrap() >= 1, "{v}");
    assert!(db.log().contains("incoming link refused"));
    let p: Value = db.client.get("/peers").await.unwrap();
    assert_eq!(p["links"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_peer_is_noticed_by_its_stateless_reset() {
    let (a, b) = (host("alpha", 6), host("beta", 7));
    let mut ca = config(&a, &[&b]);
    // A long idle timeout: only the reset can take the old connection down quickly.
    ca.link.idle_timeout_secs = 60;
    let da = D::with(ca).await;
    let mut ea = da.events().await;
    let mut cb = config(&b, &[&a]);
    cb.link.idle_timeout_secs = 60;
    // Beta never dials (alpha's address is unreachable for it), so the old connection is the
    // one alpha holds; a dial from the restarted beta cannot be what took it down.
    cb.peers.get_mut("alpha").unwrap().addr = "127.0.0.1:9".into();
    let mut db = D::with(cb).await;
    let up = ea
        .until("alpha sees beta up", |e| link_event(e, "beta", true))
        .await;
    db.kill9();
    db.boot().await;
    let down = ea
        .after(up.seq, "alpha sees beta down", |e| {
            link_event(e, "beta", false)
        })
        .await;
    let EventKind::Link { detail, .. } = &down.kind else {
        unreachable!()
    };
    assert!(detail.contains("reset"), "{detail}");
}
