//! The rules of the slot (its pure core; the actor shell lives in `fleetd-actors`).

pub mod state;
