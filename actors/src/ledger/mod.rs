//! The decision ledger: `state.rs` (format, chain, checkpoints, verifier) `actor.rs` (the group-committing writer) and `witness.rs` (witnessing peers' ledgers, and checking a ledger against a witness).

pub mod actor;
pub use fleetd_core::ledger::state;
pub use fleetd_core::ledger::witness;
