//! fleetd's actors. Each actor is a pure state machine (`state.rs`: events and a clock in,
//! effects out, no I/O) wrapped by a thin ractor shell (`actor.rs`) that moves messages and
//! performs the effects. See `docs/ARCHITECTURE.md` in the repository for the map.

pub mod authz;
pub mod clock;
pub mod config;
pub mod error;
pub mod injector;
pub mod registry;
pub mod slot;
pub mod supervisor;
pub mod tickets;
pub mod types;
