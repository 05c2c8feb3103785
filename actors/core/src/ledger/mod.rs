//! The decision ledger's rules: `state` (format, chain, checkpoints, verifier), `commit` (the
//! writer's pipelined group commit) and `witness` (witnessing peers' ledgers, checking a ledger
//! against a witness).

pub mod commit;
pub mod state;
pub mod witness;
