//! The rules of the decision (its pure core; the actor shell lives in `fleetd-actors`).

pub mod event;
pub mod state;
