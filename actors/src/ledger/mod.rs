//! The decision ledger: `state.rs` (format, chain, checkpoints, verifier), `commit.rs` (the pipelined group commit's rules), `actor.rs` (the writer: encodes, answers) with `writer.rs` (its disk thread), and `witness.rs` (witnessing peers' ledgers, and checking a ledger against a witness).

pub mod actor;
pub mod writer;
pub use fleetd_core::ledger::commit;
pub use fleetd_core::ledger::state;
pub use fleetd_core::ledger::witness;
