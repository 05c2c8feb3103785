//! See `state.rs` for the rules and `actor.rs` for the shell.

pub mod actor;
pub use fleetd_core::decision::{event, state};
