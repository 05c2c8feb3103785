//! Shared domain types: roles, statuses, names, ids and who a caller is.
//!
//! Owns the vocabulary every actor speaks. Must never do I/O or hold behaviour beyond
//! parsing and validation of these values.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::FleetError;

/// Milliseconds since the Unix epoch. All cores take time as this number, from a [`crate::clock::Clock`].
pub type Millis = u64;

/// A member's role, exactly the three of the seed's Authz table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The lead: one per host; the only role that may spawn, stop and drain.
    Primary,
    /// An advisor bound to a named slot from config.
    Architect,
    /// Does the work it is handed.
    Worker,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Primary, Role::Architect, Role::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Architect => "architect",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = FleetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "primary" | "lead" => Ok(Role::Primary),
            "architect" => Ok(Role::Architect),
            "worker" => Ok(Role::Worker),
            other => Err(FleetError::invalid(
                format!("role `{other}`"),
                "it is not a role",
                "primary, architect or worker",
            )),
        }
    }
}

/// What a member's terminal is doing, as the slot core sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Spawned; no stable screen classified yet.
    Starting,
    /// Busy: output is changing or a busy marker is on screen.
    Working,
    /// At its prompt: may take a message.
    Idle,
    /// Waiting on a question or a permission dialog.
    Blocked,
    /// The process is gone (exited, stopped, reaped, or lost).
    Exited,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Working => "working",
            Status::Idle => "idle",
            Status::Blocked => "blocked",
            Status::Exited => "exited",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = FleetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "starting" => Ok(Status::Starting),
            "working" => Ok(Status::Working),
            "idle" => Ok(Status::Idle),
            "blocked" => Ok(Status::Blocked),
            "exited" => Ok(Status::Exited),
            other => Err(FleetError::invalid(
                format!("status `{other}`"),
                "it is not a status",
                "starting, working, idle, blocked or exited",
            )),
        }
    }
}

/// A validated member name: 1-32 characters of `[A-Za-z0-9._-]`, starting with a letter or digit.
/// `operator` is reserved for the operator's own tickets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MemberName(String);

/// An identity a drift line may speak about: a local identity (a member name), or one homed on
/// another host, `IDENTITY@HOST` (both halves named like members).
pub fn is_identity_ref(s: &str) -> bool {
    match s.split_once('@') {
        Some((id, host)) => MemberName::new(id).is_ok() && MemberName::new(host).is_ok(),
        None => MemberName::new(s).is_ok(),
    }
}

impl MemberName {
    pub const MAX_LEN: usize = 32;

    pub fn new(s: &str) -> Result<Self, FleetError> {
        let accepted = "1-32 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit, not `operator` or `fleetd`";
        let ok_first = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
        let ok_rest = s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !ok_first || !ok_rest || s.len() > Self::MAX_LEN {
            return Err(FleetError::invalid(
                format!("member name `{}`", truncate(s, 40)),
                "it is not a valid name",
                accepted,
            ));
        }
        if s == "operator" {
            return Err(FleetError::invalid(
                "member name `operator`",
                "the name is reserved for the operator",
                accepted,
            ));
        }
        if s == FLEETD {
            return Err(FleetError::invalid(
                "member name `fleetd`",
                "the name is reserved for the daemon itself (what it sends, e.g. drift alerts, is from `fleetd`)",
                accepted,
            ));
        }
        Ok(MemberName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for MemberName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MemberName::new(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for MemberName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for MemberName {
    type Err = FleetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MemberName::new(s)
    }
}

/// A value's name as the API spells it (`queued`, `replied`: its serde name), not Rust's
/// (`Queued`); for enums that serialize as a string.
pub fn wire_name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "unknown".into(),
    }
}

/// Cut a string to at most `max` characters for error messages.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

macro_rules! prefixed_id {
    ($name:ident, $prefix:literal, $what:literal) => {
        #[doc = concat!("A ", $what, " id, shown as `", $prefix, "-N`.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "-{}"), self.0)
            }
        }

        impl FromStr for $name {
            type Err = FleetError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let digits = s.strip_prefix(concat!($prefix, "-")).unwrap_or(s);
                digits.parse::<u64>().map($name).map_err(|_| {
                    FleetError::invalid(
                        format!(concat!($what, " id `{}`"), truncate(s, 40)),
                        "it is not an id",
                        concat!("`", $prefix, "-N` with N a number, as returned by fleetd"),
                    )
                })
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

prefixed_id!(TicketId, "t", "ticket");
prefixed_id!(MsgId, "m", "message");
prefixed_id!(DecisionId, "d", "decision");

/// How the daemon itself is named as a sender.
pub const FLEETD: &str = "fleetd";

/// Who sent something: the operator (CLI/REST outside every member), a member, another host's
/// lead, or the daemon itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    Operator,
    Member(MemberName),
    /// A member of another host's fleet (its lead), shown as `member@host`.
    Remote {
        member: MemberName,
        host: String,
    },
    /// The daemon itself (e.g. a drift alert to the lead), shown as `fleetd`.
    Fleetd,
}

impl Party {
    /// A local member, if this is one.
    pub fn member(&self) -> Option<&MemberName> {
        match self {
            Party::Operator | Party::Remote { .. } | Party::Fleetd => None,
            Party::Member(m) => Some(m),
        }
    }

    /// The host of a remote party.
    pub fn host(&self) -> Option<&str> {
        match self {
            Party::Remote { host, .. } => Some(host),
            _ => None,
        }
    }
}

/// A peer host's name: the same alphabet as a member name.
pub fn host_name(s: &str) -> Result<String, FleetError> {
    // A host may be called `fleetd`; only members may not.
    if s == FLEETD {
        return Ok(s.to_string());
    }
    MemberName::new(s).map(|m| m.0).map_err(|_| {
        FleetError::invalid(
            format!("host name `{}`", truncate(s, 40)),
            "it is not a valid host name",
            "1-32 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit",
        )
    })
}

impl fmt::Display for Party {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Party::Operator => f.write_str("operator"),
            Party::Fleetd => f.write_str(FLEETD),
            Party::Member(m) => f.write_str(m.as_str()),
            Party::Remote { member, host } => write!(f, "{member}@{host}"),
        }
    }
}

impl Serialize for Party {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Party {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "operator" {
            Ok(Party::Operator)
        } else if s == FLEETD {
            Ok(Party::Fleetd)
        } else if let Some((m, h)) = s.split_once('@') {
            Ok(Party::Remote {
                member: MemberName::new(m).map_err(serde::de::Error::custom)?,
                host: host_name(h).map_err(serde::de::Error::custom)?,
            })
        } else {
            MemberName::new(&s)
                .map(Party::Member)
                .map_err(serde::de::Error::custom)
        }
    }
}

/// A member as the daemon resolved it from a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberIdentity {
    pub name: MemberName,
    pub role: Role,
    pub slot: Option<String>,
}

/// Who is calling, resolved by the daemon from the connection (peer credentials and process tree),
/// never from anything the caller sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Caller {
    /// A process outside every member on the operator's REST socket (or the token-guarded TCP port).
    Operator,
    /// A process that descends from exactly one member's terminal.
    Member(MemberIdentity),
    /// On the MCP socket, a process outside every member.
    NotMember { pid: Option<u32> },
    /// A process whose identity could not be established completely (its ancestry could not
    /// be read to the end, or it contradicts the member it says it was started for): it gets
    /// nothing but `fleet_whoami`, on every socket, and `why` says what failed.
    Unresolved { pid: Option<u32>, why: String },
}

impl Caller {
    pub fn party(&self) -> Option<Party> {
        match self {
            Caller::Operator => Some(Party::Operator),
            Caller::Member(m) => Some(Party::Member(m.name.clone())),
            Caller::NotMember { .. } | Caller::Unresolved { .. } => None,
        }
    }

    pub fn role(&self) -> Option<Role> {
        match self {
            Caller::Member(m) => Some(m.role),
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Caller::Operator => "the operator".into(),
            Caller::Member(m) => format!("{} `{}`", m.role, m.name),
            Caller::NotMember { pid: Some(p) } => format!("pid {p} (not a member)"),
            Caller::NotMember { pid: None } => "a process that is not a member".into(),
            Caller::Unresolved { pid: Some(p), why } => {
                format!("pid {p}, whose identity cannot be established ({why}),")
            }
            Caller::Unresolved { pid: None, why } => {
                format!("a caller whose identity cannot be established ({why}),")
            }
        }
    }
}

/// Whether a message the store says was delivered reached the terminal, by the terminal host's
/// own record (after a daemon restart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The host took it: its paste and Enter were (or are being) written.
    Yes,
    /// The host never got it.
    No,
    /// Nobody can say (why).
    Unknown(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_validate() {
        for ok in ["lead", "w1", "worker-2", "a.b_c", "X"] {
            assert!(MemberName::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a b", "operator", "é", &"x".repeat(33), "a/b"] {
            assert!(MemberName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_round_trip() {
        let t: TicketId = "t-42".parse().unwrap();
        assert_eq!(t, TicketId(42));
        assert_eq!(t.to_string(), "t-42");
        assert_eq!("42".parse::<TicketId>().unwrap(), TicketId(42));
        assert!("m-4".parse::<TicketId>().is_err());
        let j = serde_json::to_string(&MsgId(7)).unwrap();
        assert_eq!(j, "\"m-7\"");
        assert_eq!(serde_json::from_str::<MsgId>(&j).unwrap(), MsgId(7));
    }

    #[test]
    fn party_serde() {
        let p = Party::Member(MemberName::new("w1").unwrap());
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"w1\"");
        assert_eq!(
            serde_json::from_str::<Party>("\"operator\"").unwrap(),
            Party::Operator
        );
        let r: Party = serde_json::from_str("\"lead@beta\"").unwrap();
        assert_eq!(r.to_string(), "lead@beta");
        assert_eq!(r.host(), Some("beta"));
        assert!(serde_json::from_str::<Party>("\"lead@\"").is_err());
        assert!(serde_json::from_str::<Party>("\"a@b@c\"").is_err());
        // The daemon itself: its own name, which no member may take (a host may).
        assert_eq!(serde_json::to_string(&Party::Fleetd).unwrap(), "\"fleetd\"");
        assert_eq!(
            serde_json::from_str::<Party>("\"fleetd\"").unwrap(),
            Party::Fleetd
        );
        assert!(MemberName::new("fleetd").is_err());
        assert_eq!(host_name("fleetd").unwrap(), "fleetd");
    }
}
