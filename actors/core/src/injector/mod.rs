//! The rules of the injector (its pure core; the actor shell lives in `fleetd-actors`).

pub mod state;
