//! Peer links between hosts: the pure state of one link (the QUIC shell lives in the binary's
//! `link` module, since this crate opens no sockets).

pub use fleetd_core::link::state;
