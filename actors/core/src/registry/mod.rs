//! The rules of the registry (its pure core; the actor shell lives in `fleetd-actors`).

pub mod state;
