//! fleetd's actors. Each actor is a pure state machine (`state.rs`: events and a clock in,
//! effects out, no I/O) wrapped by a thin ractor shell (`actor.rs`) that moves messages and
//! performs the effects. [`fleet::Fleet`] is the handle the front ends (MCP, REST, the demo)
//! call. See `docs/ARCHITECTURE.md` in the repository for the map.

#![forbid(unsafe_code)]

pub mod agents;
pub mod authz;
pub mod backoff;
pub mod clock;
pub mod config;
pub mod ctx;
pub mod decision;
pub mod drift;
pub mod error;
pub mod events;
pub mod fleet;
pub mod hooks;
pub mod injector;
pub mod keys;
pub mod ledger;
pub mod link;
pub mod mail;
pub mod quiet;
pub mod registry;
pub mod sanitize;
pub mod slot;
pub mod store;
pub mod supervisor;
pub mod term;
pub mod tickets;
pub mod types;
pub mod worktree;
