//! fleetd's actors: the thin ractor shells around the pure cores of `fleetd-core`. Each shell
//! moves messages, arms timers and performs its core's effects (store commits, terminal writes,
//! events); the rules are in the cores. [`fleet::Fleet`] is the handle the front ends (MCP,
//! REST, the demo) call. See `docs/ARCHITECTURE.md` in the repository for the map.
//!
//! The pure modules are re-exported at the paths they always had (`crate::types`,
//! `crate::slot::state`, ...), so a shell names a rule the same way wherever it lives.

#![forbid(unsafe_code)]

// The rules (pure, `fleetd-core`).
pub use fleetd_core::{
    admission, agents, authz, backoff, clock, config, error, hooks, sanitize, session, spawn, types,
};

// Shells, and the modules that do I/O. Where a concept has a pure part, its `mod.rs` or the
// module itself re-exports it from `fleetd-core`.
pub mod ctx;
pub mod decision;
pub mod directory;
pub mod drift;
pub mod events;
pub mod files;
pub mod fleet;
pub mod injector;
pub mod keys;
pub mod ledger;
pub mod link;
pub mod mail;
pub mod memory;
pub mod publish;
pub mod quiet;
pub mod registry;
pub mod sandbox;
pub mod slot;
pub mod store;
pub mod supervisor;
pub mod term;
pub mod tickets;
pub mod timer;
pub mod worktree;
