//! The one error type every refusal travels in.
//!
//! Owns the shape of a refusal: what was refused, why, and what would be accepted, plus the
//! Authz rule when one applied. Every user- or agent-visible error is built here so none of them
//! can leave out the "what would be accepted" part. Must never carry secrets or raw input longer
//! than a short excerpt.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The class of a refusal; maps onto HTTP status codes at the REST edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The caller's role or identity does not allow it (an Authz rule).
    Forbidden,
    /// The request itself is malformed or out of bounds.
    Invalid,
    /// The thing named does not exist.
    NotFound,
    /// The request is over a size limit (refused before it was read in full).
    TooLarge,
    /// It conflicts with current state (a name in use, a busy slot, an already answered ticket).
    Conflict,
    /// A bounded queue or mailbox is full.
    Overloaded,
    /// A bounded wait ran out.
    Timeout,
    /// Too late: the ticket expired before the reply.
    Late,
    /// A part of the daemon is restarting or shutting down.
    Unavailable,
    /// A bug or an I/O failure inside the daemon.
    Internal,
}

impl ErrorKind {
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::Forbidden => 403,
            ErrorKind::Invalid => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::TooLarge => 413,
            ErrorKind::Conflict => 409,
            ErrorKind::Overloaded => 429,
            ErrorKind::Timeout => 504,
            ErrorKind::Late => 410,
            ErrorKind::Unavailable => 503,
            ErrorKind::Internal => 500,
        }
    }
}

/// A refusal: `refused` names what was refused, `why` says why, `accepted` says what would be
/// accepted instead; `rule` names the Authz rule (SPAWN, SEND, ...) when one applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct FleetError {
    pub kind: ErrorKind,
    pub refused: String,
    pub why: String,
    pub accepted: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} refused: {}", self.refused, self.why)?;
        if let Some(rule) = &self.rule {
            write!(f, " (rule {rule})")?;
        }
        if !self.accepted.is_empty() {
            write!(f, ". Accepted: {}", self.accepted)?;
        }
        Ok(())
    }
}

impl FleetError {
    pub fn new(
        kind: ErrorKind,
        refused: impl Into<String>,
        why: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Self {
        FleetError {
            kind,
            refused: refused.into(),
            why: why.into(),
            accepted: accepted.into(),
            rule: None,
        }
    }

    pub fn with_rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    pub fn invalid(
        refused: impl Into<String>,
        why: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::Invalid, refused, why, accepted)
    }

    pub fn not_found(
        refused: impl Into<String>,
        why: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::NotFound, refused, why, accepted)
    }

    pub fn conflict(
        refused: impl Into<String>,
        why: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::Conflict, refused, why, accepted)
    }

    pub fn overloaded(
        refused: impl Into<String>,
        why: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::Overloaded, refused, why, accepted)
    }

    pub fn timeout(
        refused: impl Into<String>,
        why: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::Timeout, refused, why, accepted)
    }

    pub fn unavailable(refused: impl Into<String>, why: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::Unavailable,
            refused,
            why,
            "the same call again in a moment",
        )
    }

    pub fn internal(refused: impl Into<String>, why: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::Internal,
            refused,
            why,
            "nothing: this is a fleetd bug or an I/O failure; see the daemon log",
        )
    }
}

/// Result alias used across the actors crate.
pub type FleetResult<T> = Result<T, FleetError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_all_three_parts() {
        let e = FleetError::new(
            ErrorKind::Forbidden,
            "fleet_spawn",
            "a worker may not spawn",
            "a call from the primary",
        )
        .with_rule("SPAWN");
        let s = e.to_string();
        assert!(s.contains("fleet_spawn refused"));
        assert!(s.contains("a worker may not spawn"));
        assert!(s.contains("rule SPAWN"));
        assert!(s.contains("Accepted: a call from the primary"));
    }
}
