//! fleetd's rules, and nothing else: every actor's pure state machine (`*/state.rs`: events and a
//! clock in, effects out), the Authz table, the config's shape and check, the drift protocol's
//! gates, the ledger's format and witnessing, terminal text sanitising, hook meanings, spawn
//! planning.
//!
//! Pure by construction, as quinn-proto is: this crate's dependencies hold no runtime (no tokio,
//! no ractor), no database (no redb) and nothing that opens a file or a socket, which
//! `tests/house.rs` checks from `cargo tree`; `clippy.toml` here forbids the std file, network,
//! process and environment APIs, so a rule cannot reach for I/O without the lint failing. The
//! shells that perform the effects are in `fleetd-actors` (which re-exports these modules at
//! the same paths) and the program in `fleetd`. See `docs/ARCHITECTURE.md`.

#![forbid(unsafe_code)]

pub mod admission;
pub mod agents;
pub mod authz;
pub mod backoff;
pub mod clock;
pub mod config;
pub mod decision;
pub mod drift;
pub mod error;
pub mod events;
pub mod hooks;
pub mod injector;
pub mod keys;
pub mod ledger;
pub mod link;
pub mod mail;
pub mod registry;
pub mod sandbox;
pub mod sanitize;
pub mod session;
pub mod slot;
pub mod spawn;
pub mod supervisor;
pub mod term;
pub mod tickets;
pub mod types;
