//! See `state.rs` for the rules and `actor.rs` for the shell.

pub mod actor;
pub mod msg;
pub use fleetd_core::injector::state;
