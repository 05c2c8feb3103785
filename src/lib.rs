//! fleetd: runs a fleet of AI coding agents as one team. The binary's pieces, as a library so
//! the integration tests and benchmarks can use the same client and codec.
//!
//! Map: `daemon` boots the actor tree (crate `fleetd-actors`) and serves `rest` (operator API,
//! its optional TCP listener bounded by `tcp`) and `mcp` (the agents' tools); `term` runs each
//! member's PTY in a small host process; `identity` resolves callers from the process tree;
//! `cli` and `client` are the operator's side. Apart from the product, and private to the
//! crate: `harness`, the scripted agent (`sim`), the demo and the benches, which only `entry`'s
//! dispatch and `cli::args`'s subcommands reach (a test enforces it). See
//! docs/ARCHITECTURE.md.

#![forbid(unsafe_code)]

pub mod bounded;
pub mod cli;
pub mod client;
pub mod codec;
pub mod daemon;
pub mod dashboard;
pub mod doctor;
pub mod entry;
mod harness;
pub mod identity;
pub mod link;
pub mod mcp;
pub mod metrics;
pub mod report;
pub mod rest;
pub mod shim;
pub mod tcp;
pub mod term;
