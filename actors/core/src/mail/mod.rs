//! The rules of the mail (its pure core; the actor shell lives in `fleetd-actors`).

pub mod state;
pub mod view;
