//! Supervision: the restart policy core and the supervisor shell.

pub mod actor;
pub mod policy;
