//! The QUIC endpoint of a host: listens for its configured peers, dials them, and runs the hello
//! exchange that opens every link.
//!
//! A connection counts as accepted only once the hello exchange completes (quinn may report a
//! client's `connect` as done before the server has refused its certificate). The hello carries
//! the protocol version and the host's name; the server checks that name against the peer the
//! TLS key belongs to, so a host cannot answer for a peer it is not. Must never block on a peer
//! without a deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::tls;
use crate::codec;

/// The link protocol version this build speaks.
pub const PROTOCOL: u32 = 1;
/// Largest hello frame.
const MAX_HELLO: usize = 4096;
/// How long a hello exchange may take.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an incoming QUIC/TLS handshake may take before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many incoming handshakes under way at once; more are refused at once.
pub const MAX_HALF_OPEN: usize = 64;

/// Application close codes.
pub mod close {
    pub const REFUSED: u32 = 0x10;
    pub const VERSION: u32 = 0x11;
    pub const DUPLICATE: u32 = 0x12;
    pub const SHUTDOWN: u32 = 0x13;
}

/// A configured peer: its name, address and key.
#[derive(Clone, Debug)]
pub struct Peer {
    pub name: String,
    pub addr: SocketAddr,
    pub key: VerifyingKey,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub host: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum HelloReply {
    Welcome { version: u32, host: String },
    Refused { why: String },
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    #[error("binding {addr}: {why}")]
    Bind { addr: SocketAddr, why: String },
    #[error("connecting to {peer}: {why}")]
    Connect { peer: String, why: String },
    #[error("{peer} refused the link: {why}")]
    Refused { peer: String, why: String },
    #[error("a link from {from} was refused: {why}")]
    RefusedIncoming { from: SocketAddr, why: String },
    #[error("the hello with {peer} failed: {why}")]
    Hello { peer: String, why: String },
}

/// An open, authenticated link.
#[derive(Clone, Debug)]
pub struct Link {
    pub peer: String,
    pub conn: quinn::Connection,
    /// Whether this side dialled it.
    pub dialled: bool,
}

pub struct Endpoint {
    ep: quinn::Endpoint,
    key: SigningKey,
    host: String,
    peers: Vec<Peer>,
    transport: Arc<quinn::TransportConfig>,
    /// The protocol version this endpoint says hello with (PROTOCOL; tests speak others).
    version: u32,
    /// Incoming links (or refusals), from the acceptor task.
    accepted: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Result<Link, LinkError>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Take incoming connections: an address that has not been validated gets a stateless Retry
/// (a spoofed or one-packet client costs nothing), then each handshake runs in its own task,
/// at most [`MAX_HALF_OPEN`] at once and each within [`HANDSHAKE_TIMEOUT`], so stalled
/// handshakes never hold up a real peer's.
async fn accept_loop(
    ep: quinn::Endpoint,
    host: String,
    peers: Arc<Vec<Peer>>,
    tx: tokio::sync::mpsc::Sender<Result<Link, LinkError>>,
) {
    let half_open = Arc::new(tokio::sync::Semaphore::new(MAX_HALF_OPEN));
    while let Some(incoming) = ep.accept().await {
        if !incoming.remote_address_validated() && incoming.may_retry() {
            let _ = incoming.retry();
            continue;
        }
        let from = incoming.remote_address();
        let Ok(permit) = half_open.clone().try_acquire_owned() else {
            incoming.refuse();
            let _ = tx.try_send(Err(LinkError::RefusedIncoming {
                from,
                why: format!("{MAX_HALF_OPEN} handshakes are already under way"),
            }));
            continue;
        };
        let (tx, host, peers) = (tx.clone(), host.clone(), peers.clone());
        tokio::spawn(async move {
            let r = welcome(incoming, from, &host, &peers).await;
            drop(permit);
            let _ = tx.send(r).await;
        });
    }
}

fn transport(keep_alive: Duration, idle: Duration) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(keep_alive));
    t.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    Arc::new(t)
}

impl Endpoint {
    /// Bind `addr` and accept links from `peers` only.
    pub fn bind(
        addr: SocketAddr,
        key: SigningKey,
        host: String,
        peers: Vec<Peer>,
        keep_alive: Duration,
        idle: Duration,
    ) -> Result<Endpoint, LinkError> {
        let transport = transport(keep_alive, idle);
        let rustls_server = tls::server_config(&key, peers.iter().map(|p| p.key).collect())?;
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(rustls_server)
            .map_err(|e| tls::TlsError::Config(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(transport.clone());
        // Bound what unauthenticated clients can make the endpoint hold.
        server.max_incoming(4 * MAX_HALF_OPEN);
        let mut config = quinn::EndpointConfig::new(Arc::new(tls::reset_key(&key)));
        let cid_key = tls::cid_key(&key);
        config.cid_generator(move || {
            Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
        });
        let socket = std::net::UdpSocket::bind(addr).map_err(|e| LinkError::Bind {
            addr,
            why: e.to_string(),
        })?;
        let runtime = quinn::default_runtime().ok_or_else(|| LinkError::Bind {
            addr,
            why: "no async runtime".into(),
        })?;
        let ep = quinn::Endpoint::new(config, Some(server), socket, runtime).map_err(|e| {
            LinkError::Bind {
                addr,
                why: e.to_string(),
            }
        })?;
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_HALF_OPEN);
        let acceptor = tokio::spawn(accept_loop(
            ep.clone(),
            host.clone(),
            Arc::new(peers.clone()),
            tx,
        ));
        Ok(Endpoint {
            ep,
            key,
            host,
            peers,
            transport,
            version: PROTOCOL,
            accepted: tokio::sync::Mutex::new(rx),
            acceptor,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.ep.local_addr()
    }

    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// Dial `peer` and run the hello; the link is open only when the peer welcomed us.
    pub async fn dial(&self, peer: &Peer) -> Result<Link, LinkError> {
        let err = |why: String| LinkError::Connect {
            peer: peer.name.clone(),
            why,
        };
        let rustls_client = tls::client_config(&self.key, peer.key)?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(rustls_client)
            .map_err(|e| tls::TlsError::Config(e.to_string()))?;
        let mut client = quinn::ClientConfig::new(Arc::new(crypto));
        client.transport_config(self.transport.clone());
        let conn = self
            .ep
            .connect_with(client, peer.addr, tls::SERVER_NAME)
            .map_err(|e| err(e.to_string()))?
            .await
            .map_err(|e| err(e.to_string()))?;
        let hello = async {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
            codec::write_frame(
                &mut send,
                &Hello {
                    version: self.version,
                    host: self.host.clone(),
                },
            )
            .await
            .map_err(|e| e.to_string())?;
            let _ = send.finish();
            codec::read_frame::<_, HelloReply>(&mut recv, MAX_HELLO)
                .await
                .map_err(|e| e.to_string())
        };
        let reply = tokio::time::timeout(HELLO_TIMEOUT, hello)
            .await
            .map_err(|_| LinkError::Hello {
                peer: peer.name.clone(),
                why: format!("no answer within {HELLO_TIMEOUT:?}"),
            })?;
        match reply {
            Ok(Some(HelloReply::Welcome { version, host })) if version == PROTOCOL => {
                tracing::info!(peer = %peer.name, remote_host = %host, addr = %peer.addr, "link up (dialled)");
                Ok(Link {
                    peer: peer.name.clone(),
                    conn,
                    dialled: true,
                })
            }
            Ok(Some(HelloReply::Welcome { version, .. })) => {
                conn.close(close::VERSION.into(), b"protocol version");
                Err(LinkError::Refused {
                    peer: peer.name.clone(),
                    why: format!("it speaks link protocol {version}, this host {PROTOCOL}"),
                })
            }
            Ok(Some(HelloReply::Refused { why })) => {
                tracing::warn!(peer = %peer.name, %why, "the peer refused the link");
                Err(LinkError::Refused {
                    peer: peer.name.clone(),
                    why,
                })
            }
            Ok(None) => Err(LinkError::Hello {
                peer: peer.name.clone(),
                why: "the stream ended before a reply".into(),
            }),
            // A refused certificate shows here, on the first read (not at connect).
            Err(why) => Err(LinkError::Hello {
                peer: peer.name.clone(),
                why: conn.close_reason().map(|r| r.to_string()).unwrap_or(why),
            }),
        }
    }

    /// The next incoming link (None once the endpoint is closed). Refusals are errors; the
    /// caller logs them and accepts again.
    pub async fn accept(&self) -> Option<Result<Link, LinkError>> {
        self.accepted.lock().await.recv().await
    }

    /// Close every connection and stop accepting.
    pub async fn shutdown(&self) {
        self.ep.close(close::SHUTDOWN.into(), b"shutdown");
        let _ = tokio::time::timeout(Duration::from_secs(2), self.ep.wait_idle()).await;
    }
}

/// Run one incoming connection's handshake and hello.
async fn welcome(
    incoming: quinn::Incoming,
    from: SocketAddr,
    host: &str,
    peers: &[Peer],
) -> Result<Link, LinkError> {
    let refused = |why: String| LinkError::RefusedIncoming { from, why };
    let conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
        Ok(c) => c.map_err(|e| refused(e.to_string()))?,
        Err(_) => {
            return Err(refused(format!(
                "the handshake did not finish within {HANDSHAKE_TIMEOUT:?}"
            )));
        }
    };
    // Which configured peer the TLS key (already pinned by the verifier) belongs to.
    let key = conn
        .peer_identity()
        .and_then(|i| {
            i.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|certs| certs.first().and_then(tls::cert_key))
        .ok_or_else(|| refused("no client certificate".into()))?;
    let peer = peers
        .iter()
        .find(|p| p.key == key)
        .ok_or_else(|| refused("an unknown key".into()))?
        .clone();
    let exchange = async {
        let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
        let hello = codec::read_frame::<_, Hello>(&mut recv, MAX_HELLO)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the stream ended before a hello".to_string())?;
        let verdict = if hello.version != PROTOCOL {
            Err((
                close::VERSION,
                format!(
                    "link protocol {} is not spoken here: this host speaks {PROTOCOL}",
                    hello.version
                ),
            ))
        } else if hello.host != peer.name {
            Err((
                close::REFUSED,
                format!(
                    "the key presented belongs to peer {:?}, which cannot answer as {:?}",
                    peer.name, hello.host
                ),
            ))
        } else {
            Ok(())
        };
        let reply = match &verdict {
            Ok(()) => HelloReply::Welcome {
                version: PROTOCOL,
                host: host.to_string(),
            },
            Err((_, why)) => HelloReply::Refused { why: why.clone() },
        };
        codec::write_frame(&mut send, &reply)
            .await
            .map_err(|e| e.to_string())?;
        let _ = send.finish();
        Ok::<_, String>(verdict)
    };
    match tokio::time::timeout(HELLO_TIMEOUT, exchange).await {
        Ok(Ok(Ok(()))) => {
            tracing::info!(peer = %peer.name, %from, "link up (accepted)");
            Ok(Link {
                peer: peer.name,
                conn,
                dialled: false,
            })
        }
        Ok(Ok(Err((code, why)))) => {
            // Let the refusal reach the dialler before the connection goes.
            let _ = tokio::time::timeout(Duration::from_secs(1), conn.closed()).await;
            conn.close(code.into(), why.as_bytes());
            tracing::warn!(peer = %peer.name, %from, %why, "link refused");
            Err(refused(why))
        }
        Ok(Err(why)) => {
            conn.close(close::REFUSED.into(), b"hello failed");
            Err(refused(format!("the hello failed: {why}")))
        }
        Err(_) => {
            conn.close(close::REFUSED.into(), b"hello timeout");
            Err(refused(format!("no hello within {HELLO_TIMEOUT:?}")))
        }
    }
}

/// The connection in use per peer (links that are up), for requests: each peer's link actor
/// publishes its own entry; whoever sends a request (mail, anchors, witnessing) reads it.
pub type Current =
    fleetd_actors::publish::View<std::collections::BTreeMap<String, quinn::Connection>>;

/// The connection in use to `peer`, if its link is up.
pub fn connection(current: &Current, peer: &str) -> Option<quinn::Connection> {
    current.with(|m| m.get(peer).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Host {
        name: &'static str,
        key: SigningKey,
    }

    fn host(name: &'static str, seed: u8) -> Host {
        Host {
            name,
            key: SigningKey::from_bytes(&[seed; 32]),
        }
    }

    fn peer_of(h: &Host, addr: SocketAddr) -> Peer {
        Peer {
            name: h.name.into(),
            addr,
            key: h.key.verifying_key(),
        }
    }

    fn ep(h: &Host, hello_as: &str, peers: Vec<Peer>) -> Endpoint {
        Endpoint::bind(
            "127.0.0.1:0".parse().unwrap(),
            h.key.clone(),
            hello_as.into(),
            peers,
            Duration::from_secs(2),
            Duration::from_secs(10),
        )
        .unwrap()
    }

    /// B listens, accepting `b_peers`; returns B's endpoint and its address.
    fn serve(b: &Host, b_peers: Vec<Peer>) -> (Arc<Endpoint>, SocketAddr) {
        let e = Arc::new(ep(b, b.name, b_peers));
        let addr = e.local_addr().unwrap();
        (e, addr)
    }

    /// A UDP relay between one client and `server` that passes the client's first `pass`
    /// datagrams (its Initial, and its Initial again after a Retry) and then drops everything
    /// it sends: a handshake from a validated address that never completes.
    /// `answered` gets one message when the server has answered the last datagram passed (its
    /// handshake is under way).
    async fn stalling_relay(
        server: SocketAddr,
        pass: usize,
        answered: tokio::sync::mpsc::UnboundedSender<()>,
    ) -> SocketAddr {
        let front = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut client, mut sent, mut told) = (None, 0usize, false);
            let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
            loop {
                tokio::select! {
                    r = front.recv_from(&mut a) => {
                        let Ok((n, from)) = r else { return };
                        client = Some(from);
                        if sent < pass {
                            sent += 1;
                            let _ = back.send_to(&a[..n], server).await;
                        }
                    }
                    r = back.recv_from(&mut b) => {
                        let Ok((n, _)) = r else { return };
                        if sent == pass && !told {
                            told = true;
                            let _ = answered.send(());
                        }
                        if let Some(c) = client {
                            let _ = front.send_to(&b[..n], c).await;
                        }
                    }
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn stalled_handshakes_do_not_keep_a_real_peer_out() {
        let (a, b, x) = (host("a", 1), host("b", 2), host("x", 9));
        let (eb, baddr) = serve(&b, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        // Ten clients whose handshakes stall after address validation, all started first.
        let (tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
        let mut stalled = vec![];
        for _ in 0..10 {
            let relay = stalling_relay(baddr, 2, tx.clone()).await;
            let ex = ep(&x, "x", vec![peer_of(&b, relay)]);
            let p = ex.peers()[0].clone();
            stalled.push(tokio::spawn(async move {
                let r = ex.dial(&p).await;
                (ex, r)
            }));
        }
        // And one client that only ever sends its first Initial (it never answers the Retry).
        let (tx1, _ignored) = tokio::sync::mpsc::unbounded_channel();
        let relay = stalling_relay(baddr, 1, tx1).await;
        let ey = ep(&x, "x", vec![peer_of(&b, relay)]);
        let py = ey.peers()[0].clone();
        let _one_packet = tokio::spawn(async move { ey.dial(&py).await.is_ok() });
        // The ten handshakes are under way at the server before the real peer dials.
        for _ in 0..10 {
            tokio::time::timeout(Duration::from_secs(10), answered.recv())
                .await
                .expect("the server answered a stalled client's validated Initial");
        }
        let ea = ep(&a, "a", vec![peer_of(&b, baddr)]);
        let started = std::time::Instant::now();
        let server = tokio::spawn({
            let eb = eb.clone();
            async move {
                loop {
                    match eb.accept().await {
                        Some(Ok(l)) if l.peer == "a" => return l,
                        Some(_) => continue,
                        None => panic!("the endpoint closed"),
                    }
                }
            }
        });
        let link = ea.dial(&ea.peers()[0].clone()).await.unwrap();
        assert_eq!(link.peer, "b");
        let incoming = tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the real peer was accepted within 5 s")
            .unwrap();
        assert_eq!(incoming.peer, "a");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "linking took {:?}",
            started.elapsed()
        );
        // The stalled ones are dropped by the handshake deadline, not kept.
        for t in stalled {
            let (_ex, r) = t.await.unwrap();
            assert!(r.is_err(), "a stalled handshake linked");
        }
    }

    #[tokio::test]
    async fn pinned_keys_link_up_both_ways() {
        let (a, b) = (host("a", 1), host("b", 2));
        let (eb, baddr) = serve(&b, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        let ea = ep(&a, "a", vec![peer_of(&b, baddr)]);
        let server = tokio::spawn({
            let eb = eb.clone();
            async move { eb.accept().await.unwrap() }
        });
        let link = ea.dial(&ea.peers()[0].clone()).await.unwrap();
        assert_eq!((link.peer.as_str(), link.dialled), ("b", true));
        let incoming = server.await.unwrap().unwrap();
        assert_eq!((incoming.peer.as_str(), incoming.dialled), ("a", false));
    }

    #[tokio::test]
    async fn an_unknown_key_is_refused_in_the_handshake() {
        let (a, b, c) = (host("a", 1), host("b", 2), host("c", 3));
        let (eb, baddr) = serve(&b, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        let server = tokio::spawn({
            let eb = eb.clone();
            async move { eb.accept().await.unwrap() }
        });
        // C knows B's real key, but B does not know C's.
        let ec = ep(&c, "c", vec![peer_of(&b, baddr)]);
        let r = ec.dial(&ec.peers()[0].clone()).await;
        assert!(r.is_err(), "{r:?}");
        assert!(server.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_server_with_another_key_is_refused_by_the_dialler() {
        let (a, b, c) = (host("a", 1), host("b", 2), host("c", 3));
        // C listens where A expects B, and accepts A.
        let (ec, caddr) = serve(&c, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        tokio::spawn({
            let ec = ec.clone();
            async move { ec.accept().await }
        });
        let ea = ep(&a, "a", vec![peer_of(&b, caddr)]);
        let r = ea.dial(&ea.peers()[0].clone()).await;
        assert!(matches!(r, Err(LinkError::Connect { .. })), "{r:?}");
    }

    #[tokio::test]
    async fn a_host_cannot_answer_for_a_peer_it_is_not() {
        let (a, b, c) = (host("a", 1), host("b", 2), host("c", 3));
        let (eb, baddr) = serve(
            &b,
            vec![
                peer_of(&a, "127.0.0.1:9".parse().unwrap()),
                peer_of(&c, "127.0.0.1:9".parse().unwrap()),
            ],
        );
        let server = tokio::spawn({
            let eb = eb.clone();
            async move { eb.accept().await.unwrap() }
        });
        // C holds its own (configured) key but says hello as "a".
        let ec = ep(&c, "a", vec![peer_of(&b, baddr)]);
        let r = ec.dial(&ec.peers()[0].clone()).await;
        match r {
            Err(LinkError::Refused { why, .. }) => {
                assert!(why.contains("cannot answer as"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert!(server.await.unwrap().is_err());
    }

    /// Presents `cert` (someone else's, public) but signs with `key` (its own).
    #[derive(Debug)]
    struct Replay(Arc<rustls::sign::CertifiedKey>);

    impl rustls::client::ResolvesClientCert for Replay {
        fn resolve(
            &self,
            _hints: &[&[u8]],
            _schemes: &[rustls::SignatureScheme],
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.clone())
        }
        fn has_certs(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn a_replayed_certificate_without_its_private_key_is_refused() {
        let (a, b, c) = (host("a", 1), host("b", 2), host("c", 3));
        let (eb, baddr) = serve(&b, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        let server = tokio::spawn({
            let eb = eb.clone();
            async move { eb.accept().await.unwrap() }
        });
        // C replays A's certificate (A's key is pinned at B) with C's own private key.
        let (a_cert, _) = tls::host_cert(&a.key).unwrap();
        let (_, c_private) = tls::host_cert(&c.key).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        let signer = provider.key_provider.load_private_key(c_private).unwrap();
        let replay = Replay(Arc::new(rustls::sign::CertifiedKey::new(
            vec![a_cert],
            signer,
        )));
        let mut rc = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer))
            .with_client_cert_resolver(Arc::new(replay));
        rc.alpn_protocols = vec![tls::ALPN.to_vec()];
        let client = quinn::ClientConfig::new(Arc::new(
            quinn::crypto::rustls::QuicClientConfig::try_from(rc).unwrap(),
        ));
        let ec = ep(&c, "a", vec![]);
        let attempt = async {
            let conn = ec
                .ep
                .connect_with(client, baddr, tls::SERVER_NAME)
                .ok()?
                .await
                .ok()?;
            // Even if connect looks done, nothing can be exchanged.
            let (mut send, mut recv) = conn.open_bi().await.ok()?;
            codec::write_frame(
                &mut send,
                &Hello {
                    version: PROTOCOL,
                    host: "a".into(),
                },
            )
            .await
            .ok()?;
            codec::read_frame::<_, HelloReply>(&mut recv, MAX_HELLO)
                .await
                .ok()?
        };
        let got = tokio::time::timeout(Duration::from_secs(10), attempt)
            .await
            .unwrap();
        assert!(
            got.is_none(),
            "the replayed certificate got a reply: {got:?}"
        );
        match server.await.unwrap() {
            Err(LinkError::RefusedIncoming { why, .. }) => {
                assert!(
                    why.to_lowercase().contains("signature")
                        || why.contains("handshake")
                        || why.contains("crypto"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    /// A verifier that accepts any server (only for the replay test's attacker side).
    #[derive(Debug)]
    struct AnyServer;

    impl rustls::client::danger::ServerCertVerifier for AnyServer {
        fn verify_server_cert(
            &self,
            _e: &rustls::pki_types::CertificateDer<'_>,
            _i: &[rustls::pki_types::CertificateDer<'_>],
            _n: &rustls::pki_types::ServerName<'_>,
            _o: &[u8],
            _t: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _m: &[u8],
            _c: &rustls::pki_types::CertificateDer<'_>,
            _d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _m: &[u8],
            _c: &rustls::pki_types::CertificateDer<'_>,
            _d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            vec![rustls::SignatureScheme::ED25519]
        }
    }

    #[tokio::test]
    async fn garbage_and_oversized_frames_are_refused_and_the_link_keeps_serving() {
        use super::super::wire::{self, Request, Response};
        let (a, b) = (host("a", 1), host("b", 2));
        let (eb, baddr) = serve(&b, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        tokio::spawn({
            let eb = eb.clone();
            async move {
                let l = eb.accept().await.unwrap().unwrap();
                wire::serve(l.peer, l.conn, Arc::new(wire::Basic)).await;
            }
        });
        let ea = ep(&a, "a", vec![peer_of(&b, baddr)]);
        let link = ea.dial(&ea.peers()[0].clone()).await.unwrap();
        // A frame whose payload is not a Request.
        let (mut send, mut recv) = link.conn.open_bi().await.unwrap();
        send.write_all(&[0, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb])
            .await
            .unwrap();
        let _ = send.finish();
        match codec::read_frame::<_, Response>(&mut recv, wire::MAX_FRAME).await {
            Ok(Some(Response::Refused { why, .. })) => assert!(!why.is_empty()),
            other => panic!("{other:?}"),
        }
        // A length prefix of 2 GiB: refused before any allocation.
        let (mut send, mut recv) = link.conn.open_bi().await.unwrap();
        send.write_all(&[0x80, 0, 0, 0, 1, 2, 3]).await.unwrap();
        let _ = send.finish();
        match codec::read_frame::<_, Response>(&mut recv, wire::MAX_FRAME).await {
            Ok(Some(Response::Refused { why, accepted, .. })) => {
                assert!(why.contains("2147483648"), "{why}");
                assert!(accepted.contains("1048576"), "{accepted}");
            }
            other => panic!("{other:?}"),
        }
        // Two frames on one stream: one request per stream, so refused.
        let (mut send, mut recv) = link.conn.open_bi().await.unwrap();
        for _ in 0..2 {
            codec::write_frame(&mut send, &Request::Ping { payload: vec![1] })
                .await
                .unwrap();
        }
        let _ = send.finish();
        match codec::read_frame::<_, Response>(&mut recv, wire::MAX_FRAME).await {
            Ok(Some(Response::Refused { why, .. })) => {
                assert!(why.contains("more than one frame"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        // The link still serves.
        let r = wire::request(
            "b",
            &link.conn,
            &Request::Ping {
                payload: b"still there".to_vec(),
            },
        )
        .await
        .unwrap();
        assert_eq!(
            r,
            Response::Pong {
                payload: b"still there".to_vec()
            }
        );
    }

    #[tokio::test]
    async fn an_incompatible_version_is_refused_with_a_clear_error_on_both_sides() {
        let (a, b) = (host("a", 1), host("b", 2));
        let (eb, baddr) = serve(&b, vec![peer_of(&a, "127.0.0.1:9".parse().unwrap())]);
        let server = tokio::spawn({
            let eb = eb.clone();
            async move { eb.accept().await.unwrap() }
        });
        let mut ea = ep(&a, "a", vec![peer_of(&b, baddr)]);
        ea.version = PROTOCOL + 1;
        match ea.dial(&ea.peers()[0].clone()).await {
            Err(LinkError::Refused { why, .. }) => {
                assert!(
                    why.contains(&format!(
                        "link protocol {} is not spoken here",
                        PROTOCOL + 1
                    )),
                    "{why}"
                );
                assert!(why.contains(&format!("speaks {PROTOCOL}")), "{why}");
            }
            other => panic!("{other:?}"),
        }
        match server.await.unwrap() {
            Err(LinkError::RefusedIncoming { why, .. }) => {
                assert!(why.contains("not spoken here"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
