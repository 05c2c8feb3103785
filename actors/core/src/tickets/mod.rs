//! The rules of the tickets (its pure core; the actor shell lives in `fleetd-actors`).

pub mod state;
