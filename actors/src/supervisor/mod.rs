//! Supervision: the restart policy core and the supervisor shell.

pub mod actor;
pub use fleetd_core::supervisor::policy;
