//! The decision ledger: `state.rs` (format, chain, checkpoints, verifier), `commit.rs` (the pipelined group commit's rules), `actor.rs` (the writer: the file's lifecycle) with `appender.rs` (the append path: chain under a lock, answered once synced) and `writer.rs` (the disk thread), and `witness.rs` (witnessing peers' ledgers, and checking a ledger against a witness).

pub mod actor;
pub mod appender;
pub mod writer;
pub use fleetd_core::ledger::commit;
pub use fleetd_core::ledger::state;
pub use fleetd_core::ledger::witness;
