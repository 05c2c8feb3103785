//! The decision ledger: `state.rs` (format, chain, checkpoints, verifier) and `actor.rs` (the group-committing writer).

pub mod actor;
pub mod state;
