//! The rules of the link (its pure core; the actor shell lives in `fleetd-actors`).

pub mod state;
