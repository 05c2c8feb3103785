//! Three daemons in Linux network namespaces made by the test (a bridge in its own namespace, a
//! veth pair per host), the multi-host acceptance bar:
//! - they link up; a partitioned host is seen down by the other two while they stay linked, and
//!   relinks when healed; 100 lead-to-lead messages sent to it while it is cut off arrive once
//!   each, in order, and each one's answer comes back;
//! - a host that signs two anchors for one identity on one day with different roles alerts both
//!   other leads;
//! - a host killed (-9) while two others' mail is on its way loses none and duplicates none;
//! - from a fourth namespace, the test's own endpoint: an unknown key is refused in the
//!   handshake, and a configured peer's garbage and oversized frames are refused per stream
//!   while the daemon goes on serving.
//!
//! Without root (no namespaces) the same tests run on 127.0.0.x, saying so, and the partition
//! is made by stopping the host's process (SIGSTOP).

use std::process::Command;

use fleetd_actors::config::Config;
use fleetd_actors::events::{Event, EventKind};

use crate::common::*;
use crate::link::{Host, host_at as host};

/// The namespaces of one test run; removed on drop, whatever happened.
struct Net {
    prefix: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

impl Net {
    /// Build `sw` (a bridge) and one namespace per host with 10.78.N.x addresses; None if this
    /// machine cannot (not root, no `ip`).
    fn make(hosts: &[&str]) -> Option<Net> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || std::env::var_os("FLEETD_TEST_NO_NETNS").is_some() {
            return None;
        }
        let prefix = format!("fdt{}", std::process::id() % 100_000);
        let net = Net {
            prefix: prefix.clone(),
        };
        let sw = format!("{prefix}-sw");
        if !ip(&["netns", "add", &sw]) {
            return None;
        }
        let ok = ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])
            && ip(&["-n", &sw, "link", "set", "dev", "br0", "up"]);
        if !ok {
            return None;
        }
        for (i, h) in hosts.iter().enumerate() {
            let ns = format!("{prefix}-{h}");
            let addr = format!("10.78.0.{}/24", i + 1);
            let ok = ip(&["netns", "add", &ns])
                && ip(&[
                    "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", h,
                    "netns", &sw,
                ])
                && ip(&["-n", &sw, "link", "set", "dev", h, "master", "br0", "up"])
                && ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])
                && ip(&["-n", &ns, "link", "set", "dev", "eth0", "up"])
                && ip(&["-n", &ns, "link", "set", "dev", "lo", "up"]);
            if !ok {
                return None;
            }
        }
        Some(net)
    }

    fn ns(&self, h: &str) -> String {
        format!("{}-{h}", self.prefix)
    }

    /// Cut (or heal) host `h`'s wire to the bridge.
    fn set(&self, h: &str, up: bool) {
        assert!(ip(&[
            "-n",
            &format!("{}-sw", self.prefix),
            "link",
            "set",
            "dev",
            h,
            if up { "up" } else { "down" }
        ]));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let out = Command::new("ip").args(["netns", "list"]).output();
        if let Ok(o) = out {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if name.starts_with(&format!("{}-", self.prefix)) {
                    ip(&["netns", "del", name]);
                }
            }
        }
    }
}

/// Each host knows all the others (not itself); links and drift beat fast.
fn config(me: &Host, all: &[&Host]) -> Config {
    let others: Vec<&Host> = all.iter().copied().filter(|p| p.name != me.name).collect();
    let mut c = crate::link::config(me, &others);
    c.link.backoff_min_ms = 100;
    c.link.backoff_max_ms = 1_000;
    c.drift.heartbeat_secs = 1;
    c
}

fn link(e: &Event, peer: &str, up: bool) -> bool {
    matches!(&e.kind, EventKind::Link { peer: p, up: u, .. } if p == peer && *u == up)
}

/// Namespaces (or, without root, 127.0.0.x addresses, saying so) and a host for each name.
fn hosts(names: &[&'static str]) -> (Option<Net>, Vec<Host>) {
    let net = Net::make(names);
    let hosts = match &net {
        Some(_) => names
            .iter()
            .enumerate()
            .map(|(i, n)| host(n, &format!("10.78.0.{}", i + 1)))
            .collect(),
        None => {
            eprintln!(
                "network namespaces are not available here (not root): running on 127.0.0.x instead"
            );
            names
                .iter()
                .enumerate()
                .map(|(i, n)| host(n, &format!("127.0.0.{}", i + 11)))
                .collect()
        }
    };
    (net, hosts)
}

/// A daemon for each of `daemons` (the first hosts), each in its namespace, each knowing the
/// others (and `extra` too, the hosts the test itself plays).
async fn daemons(net: &Option<Net>, daemons: &[&Host], extra: &[&Host]) -> Vec<D> {
    let all: Vec<&Host> = daemons.iter().chain(extra).copied().collect();
    let mut ds = vec![];
    for h in daemons {
        let ns = net.as_ref().map(|n| n.ns(h.name));
        ds.push(D::with_in(config(h, &all), ns).await);
    }
    ds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_host_is_seen_down_by_both_others_and_relinks_when_healed() {
    let (net, hosts) = hosts(&["a", "b", "c"]);
    if net.is_none() {
        eprintln!("without namespaces the partition is made by stopping the host (SIGSTOP)");
    }
    let ds = daemons(&net, &hosts.iter().collect::<Vec<_>>(), &[]).await;
    ds[0].spawn("lead", "primary", crate::mail::exec()).await;
    ds[1]
        .spawn("lead", "primary", sim(&["--work-ms", "0"]))
        .await;
    let mut ea = ds[0].events().await;
    let mut ec = ds[2].events().await;
    for p in ["b", "c"] {
        ea.until(&format!("a sees {p} up"), |e| link(e, p, true))
            .await;
    }
    for p in ["a", "b"] {
        ec.until(&format!("c sees {p} up"), |e| link(e, p, true))
            .await;
    }
    let (ma, mc) = (ea.seen.last().unwrap().seq, ec.seen.last().unwrap().seq);
    // Cut b off.
    match &net {
        Some(n) => n.set("b", false),
        None => ds[1].signal(libc::SIGSTOP),
    }
    let da = ea.after(ma, "a sees b down", |e| link(e, "b", false)).await;
    let dc = ec.after(mc, "c sees b down", |e| link(e, "b", false)).await;
    // a and c are still linked to each other.
    assert!(!ea.seen.iter().any(|e| e.seq > ma && link(e, "c", false)));
    let v: serde_json::Value = ds[0].client.get("/peers").await.unwrap();
    let c_link = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["peer"] == "c")
        .unwrap();
    assert_eq!(c_link["phase"], "up", "{v}");
    // a's lead writes to b's lead 100 times while b is cut off: all of it waits in a's outbox.
    let bodies: Vec<String> = (1..=100).map(|i| format!("sum: {i} 1")).collect();
    let tickets = crate::mail::send_all(&ds[0], "b", &bodies).await;
    let v: serde_json::Value = ds[0].client.get("/peers").await.unwrap();
    assert_eq!(v["mail"]["outbox"]["b"], 100, "{v}");
    // Heal: b comes back on both.
    match &net {
        Some(n) => n.set("b", true),
        None => ds[1].signal(libc::SIGCONT),
    }
    ea.after(da.seq, "a sees b up again", |e| link(e, "b", true))
        .await;
    ec.after(dc.seq, "c sees b up again", |e| link(e, "b", true))
        .await;
    // Every message reaches b's lead once, in order, and every answer comes back to a. (b's
    // stream replays from its start, so nothing before this subscription is missed.)
    let mut eb = ds[1].events().await;
    let last = tickets.last().unwrap().clone();
    eb.until("b hands a's last message to its lead", |e| {
        matches!(&e.kind, EventKind::MailHanded { peer, their_ticket, .. }
            if peer == "a" && their_ticket.to_string() == last)
    })
    .await;
    assert_eq!(crate::mail::received(&ds[1], "a").await, bodies);
    ea.until("a's last ticket answered", |e| {
        matches!(&e.kind, EventKind::Ticket { ticket, state, .. }
            if ticket.to_string() == last && state.is_resolved())
    })
    .await;
    for (i, t) in tickets.iter().enumerate() {
        let v = ds[0].ticket(t).await;
        assert_eq!(v["state"], "replied", "{v}");
        assert_eq!(
            v["reply"]["text"],
            format!("sum of 2 numbers = {}", i + 2),
            "{v}"
        );
    }
    // c signs two anchors for its identity `x` on one UTC day with different roles: the
    // leads on a and b are both alerted, with both signed lines.
    let key = fleetd_actors::keys::load(&hosts[2].key_file).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let kb = ds[2].state.join("kb");
    let mut lines = vec![];
    for (i, role) in ["code reviewer", "release manager"].iter().enumerate() {
        let l = fleetd_actors::drift::line::sign(
            &fleetd_actors::drift::line::NewLine::anchor(now + i as u64, i as u64 + 1, role),
            &key,
        );
        fleetd_actors::drift::kb::append(&kb, "x", &fleetd_actors::drift::kb::date_of(now), &l)
            .unwrap();
        lines.push(l);
    }
    for e in [&mut ea, &mut eb] {
        let text = e
            .alert("the equivocation alert", "x@c", "G3", |_| true)
            .await;
        assert!(
            text.contains(&lines[0]) && text.contains(&lines[1]),
            "{text}"
        );
    }
    drop(ds);
    drop(net);
}

/// An endpoint of the test's own, bound on `me`'s address (any port) inside namespace `ns` (a
/// thread's network namespace is its own: this thread enters it, binds, and the socket stays
/// there).
fn endpoint_in(
    ns: Option<String>,
    me: &Host,
    key: ed25519_dalek::SigningKey,
    peers: Vec<fleetd::link::endpoint::Peer>,
) -> fleetd::link::endpoint::Endpoint {
    let rt = tokio::runtime::Handle::current();
    let mut addr: std::net::SocketAddr = me.addr.parse().unwrap();
    addr.set_port(0);
    let name = me.name.to_string();
    std::thread::spawn(move || {
        if let Some(ns) = ns {
            use std::os::fd::AsRawFd;
            let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
            // SAFETY: a valid namespace fd; CLONE_NEWNET moves only this thread.
            assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
        }
        let _rt = rt.enter();
        fleetd::link::endpoint::Endpoint::bind(
            addr,
            key,
            name,
            peers,
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(3),
        )
        .unwrap()
    })
    .join()
    .unwrap()
}

fn peer_of(h: &Host) -> fleetd::link::endpoint::Peer {
    fleetd::link::endpoint::Peer {
        name: h.name.into(),
        addr: h.addr.parse().unwrap(),
        key: fleetd_actors::keys::parse_public(&h.public).unwrap(),
    }
}

fn handed_last(e: &Event, from: &str, last: &str) -> bool {
    matches!(&e.kind, EventKind::MailHanded { peer, their_ticket, .. }
        if peer == from && their_ticket.to_string() == last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_host_loses_no_mail_and_strangers_and_garbage_frames_are_refused() {
    // Three daemons, and `m`: the test's own endpoint in a fourth namespace. b knows m's key
    // (a configured peer that speaks garbage); nobody knows `stranger`'s key.
    let (net, hosts) = hosts(&["a", "b", "c", "m"]);
    let (h, m) = hosts.split_at(3);
    let m = &m[0];
    let mut ds = daemons(&net, &h.iter().collect::<Vec<_>>(), &[m]).await;
    ds[0].spawn("lead", "primary", crate::mail::exec()).await;
    ds[1]
        .spawn("lead", "primary", sim(&["--script", "sink"]))
        .await;
    ds[2].spawn("lead", "primary", crate::mail::exec()).await;
    for i in [0, 2] {
        let mut e = ds[i].events().await;
        e.until("b up", |e| link(e, "b", true)).await;
    }
    // a and c each write 100 messages to b's lead: b is killed (-9) while the first 40 are on
    // their way, 30 more wait in the senders' outboxes while it is down, and the last 30 are
    // sent after it restarted.
    let bodies =
        |from: &str| -> Vec<String> { (1..=100).map(|i| format!("{from} {i:03}")).collect() };
    let (ba, bc) = (bodies("a"), bodies("c"));
    let (mut ta, mut tc) = (vec![], vec![]);
    let (fa, fc) = tokio::join!(
        crate::mail::send_all(&ds[0], "b", &ba[..40]),
        crate::mail::send_all(&ds[2], "b", &bc[..40])
    );
    ds[1].kill9();
    ta.extend(fa);
    tc.extend(fc);
    let (sa, sc) = tokio::join!(
        crate::mail::send_all(&ds[0], "b", &ba[40..70]),
        crate::mail::send_all(&ds[2], "b", &bc[40..70])
    );
    ta.extend(sa);
    tc.extend(sc);
    ds[1].boot().await;
    let (la, lc) = tokio::join!(
        crate::mail::send_all(&ds[0], "b", &ba[70..]),
        crate::mail::send_all(&ds[2], "b", &bc[70..])
    );
    ta.extend(la);
    tc.extend(lc);
    let mut eb = ds[1].events().await;
    let (lasta, lastc) = (ta.last().unwrap().clone(), tc.last().unwrap().clone());
    eb.until("b hands a's last message", |e| handed_last(e, "a", &lasta))
        .await;
    eb.until("b hands c's last message", |e| handed_last(e, "c", &lastc))
        .await;
    // Once each, in order per sender.
    assert_eq!(crate::mail::received(&ds[1], "a").await, ba);
    assert_eq!(crate::mail::received(&ds[1], "c").await, bc);

    // A host whose key nobody configured is refused in the handshake, and b says so.
    let mark = eb.seen.last().unwrap().seq;
    let b = &h[1];
    let stranger = endpoint_in(
        net.as_ref().map(|n| n.ns("m")),
        m,
        fleetd_actors::keys::generate(),
        vec![peer_of(b)],
    );
    let refused = stranger.dial(&peer_of(b)).await;
    assert!(refused.is_err(), "a stranger linked to b");
    let ev = eb
        .after(mark, "b refuses the stranger", |e| {
            matches!(&e.kind, EventKind::LinkRefused { .. })
        })
        .await;
    let EventKind::LinkRefused { detail } = &ev.kind else {
        unreachable!()
    };
    let m_ip = m.addr.rsplit_once(':').unwrap().0;
    assert!(detail.contains(m_ip), "{detail}");
    stranger.shutdown().await;

    // m, whose key b knows, links up and sends garbage: each bad stream is refused with the
    // reason, and the daemon goes on serving m, a and c.
    let ep = endpoint_in(
        net.as_ref().map(|n| n.ns("m")),
        m,
        fleetd_actors::keys::load(&m.key_file).unwrap(),
        vec![peer_of(b)],
    );
    let l = ep.dial(&peer_of(b)).await.expect("m links to b");
    // b's own requests to m (anchor pulls, witnessing) get the basic answers.
    tokio::spawn(fleetd::link::wire::serve(
        "b".into(),
        l.conn.clone(),
        std::sync::Arc::new(fleetd::link::wire::Basic),
    ));
    use fleetd::link::wire::{MAX_FRAME, Request, Response};
    for (bytes, says) in [
        (&[0u8, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb][..], ""),
        (&[0x80, 0, 0, 0, 1, 2, 3][..], "2147483648"),
    ] {
        let (mut send, mut recv) = l.conn.open_bi().await.unwrap();
        send.write_all(bytes).await.unwrap();
        let _ = send.finish();
        match fleetd::codec::read_frame::<_, Response>(&mut recv, MAX_FRAME).await {
            Ok(Some(Response::Refused { why, accepted, .. })) => {
                assert!(why.contains(says), "{why}");
                assert!(accepted.contains(&MAX_FRAME.to_string()), "{accepted}");
            }
            other => panic!("{other:?}"),
        }
    }
    let pong = fleetd::link::wire::request(
        "b",
        &l.conn,
        &Request::Ping {
            payload: b"still serving".to_vec(),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        pong,
        Response::Pong {
            payload: b"still serving".to_vec()
        }
    );
    assert!(ds[1].log().contains("a frame from a peer was refused"));
    // And its fleet still works: a's next message is handed to b's lead.
    let next = crate::mail::send_all(&ds[0], "b", &["a 101".to_string()]).await;
    eb.until("b hands a's message after the garbage", |e| {
        handed_last(e, "a", &next[0])
    })
    .await;
    ep.shutdown().await;
    drop(ds);
    drop(net);
}
