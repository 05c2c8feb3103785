//! Peer links: fleetd instances on different hosts, over QUIC (quinn) with mutual TLS 1.3
//! pinned to the hosts' ed25519 keys (rustls).
//!
//! Owns the wire between hosts: the endpoint, the handshake and the hello exchange. Must never
//! read a frame from a peer that has not passed both the TLS pin and the hello, and never let
//! a peer's bytes panic the daemon (every frame goes through `codec`, bounded).

pub mod actor;
pub mod anchors;
pub mod endpoint;
pub mod tls;
pub mod wire;
pub mod witness;
