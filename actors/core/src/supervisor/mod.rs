//! Supervision's rules: restart types, intensity, backoff.

pub mod policy;
