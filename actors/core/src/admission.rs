//! Who may hold a connection to the optional loopback TCP listener of the REST API: at most
//! `max_total` at once, and at most `max_per_source` from one address, so that one local user
//! (or many) cannot use up the daemon's file descriptors and lock the operator out of
//! `api.sock`. A connection also has to prove itself in time (a correctly authenticated request
//! within the auth timeout) and is closed when idle; those clocks run in the shell
//! (`fleetd::tcp`), which counts each accepted and closed connection through [`Admission`].
//!
//! Owns the counting and the refusal's words. Pure: addresses in, a decision out; it never
//! touches a socket.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::error::FleetError;

/// The bounds, from `[api]` (`tcp_max_connections`, `tcp_max_per_source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionLimits {
    pub max_total: usize,
    pub max_per_source: usize,
}

/// The connections held now, in all and per source address.
#[derive(Clone, Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    total: usize,
    per_source: HashMap<IpAddr, usize>,
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Self {
        Admission {
            limits,
            total: 0,
            per_source: HashMap::new(),
        }
    }

    /// A connection from `from` was accepted: counted if it fits, refused (and not counted)
    /// if it would pass either bound.
    pub fn admit(&mut self, from: IpAddr) -> Result<(), FleetError> {
        let held = self.per_source.get(&from).copied().unwrap_or(0);
        if held >= self.limits.max_per_source {
            return Err(FleetError::overloaded(
                format!("a TCP connection from {from}"),
                format!(
                    "{from} already holds {held} connections (api.tcp_max_per_source = {})",
                    self.limits.max_per_source
                ),
                "fewer connections from one address (close idle ones), or the Unix socket api.sock",
            ));
        }
        if self.total >= self.limits.max_total {
            return Err(FleetError::overloaded(
                format!("a TCP connection from {from}"),
                format!(
                    "the TCP listener already holds {} connections (api.tcp_max_connections = {})",
                    self.total, self.limits.max_total
                ),
                "a connection once others have closed, or the Unix socket api.sock",
            ));
        }
        self.total += 1;
        *self.per_source.entry(from).or_insert(0) += 1;
        Ok(())
    }

    /// A connection from `from` that was admitted has closed.
    pub fn release(&mut self, from: IpAddr) {
        if let Some(n) = self.per_source.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&from);
            }
            self.total = self.total.saturating_sub(1);
        }
    }

    /// Connections held now.
    pub fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_source_and_total_bounds_hold_and_free_up() {
        let mut a = Admission::new(AdmissionLimits {
            max_total: 3,
            max_per_source: 2,
        });
        let (x, y, z): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.1".parse().unwrap(),
            "127.0.0.2".parse().unwrap(),
            "::1".parse().unwrap(),
        );
        assert!(a.admit(x).is_ok());
        assert!(a.admit(x).is_ok());
        let e = a.admit(x).unwrap_err();
        assert!(e.why.contains("api.tcp_max_per_source = 2"), "{e}");
        assert!(e.refused.contains("127.0.0.1"), "{e}");
        assert!(a.admit(y).is_ok());
        let e = a.admit(z).unwrap_err();
        assert!(e.why.contains("api.tcp_max_connections = 3"), "{e}");
        assert_eq!(a.total(), 3);
        a.release(x);
        assert!(a.admit(z).is_ok(), "a closed connection frees its place");
        // Releasing what was never admitted changes nothing.
        a.release("10.0.0.1".parse().unwrap());
        assert_eq!(a.total(), 3);
        for ip in [x, y, z] {
            a.release(ip);
        }
        assert_eq!(a.total(), 0);
        assert!(a.admit(x).is_ok() && a.admit(x).is_ok());
    }
}
