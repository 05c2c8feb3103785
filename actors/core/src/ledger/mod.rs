//! The decision ledger's rules: `state` (format, chain, checkpoints, verifier) and `witness`
//! (witnessing peers' ledgers, checking a ledger against a witness).

pub mod state;
pub mod witness;
