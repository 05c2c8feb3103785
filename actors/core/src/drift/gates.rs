//! The drift gates: reading a peer's anchor and deciding how far to trust it (G1-G4), cascade
//! conflicts, and bootstrapping. The seed's `drift-protocol.md`, with the looser parts fixed as
//! docs/drift-schema.md states them.
//!
//! Owns the rules only. Pure: it takes an in-memory snapshot of the KB (the files' text, or why a
//! directory could not be read), the time, the reader and the trusted keys, and returns reports.
//! Must never read a file, never write a log line, never depend on the order lines were read in
//! beyond each file's own line order.

use std::collections::{BTreeMap, BTreeSet};

use ed25519_dalek::VerifyingKey;
use serde::Serialize;

use crate::drift::line::{self, Kind, Valid};
use crate::drift::remote::RemoteAnchor;
use crate::types::Millis;

const DAY_MS: Millis = 86_400_000;
const MINUTE_MS: Millis = 60_000;

/// One `{date}.jsonl` file: its date, its path (for reports), its lines (line 1 is the header).
#[derive(Clone, Debug)]
pub struct LogFile {
    pub date: String,
    pub path: String,
    pub text: String,
}

/// One identity's directory.
#[derive(Clone, Debug)]
pub enum Logs {
    Present(Vec<LogFile>),
    /// The directory exists but could not be read; the reader keeps its cached anchor.
    Unreadable(String),
}

/// The KB as read at one instant: identity -> its logs.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub identities: BTreeMap<String, Logs>,
}

/// The rules' parameters.
#[derive(Clone, Debug)]
pub struct Params {
    pub now: Millis,
    pub ttl_ms: Millis,
    pub grace_ms: Millis,
    pub skew_ms: Millis,
    pub fleet_wide_drift: bool,
    /// identity -> roles its circle forbids.
    pub forbidden: BTreeMap<String, Vec<String>>,
    /// Identities known from config (peers even without a log).
    pub known: BTreeSet<String>,
}

impl Params {
    pub fn from_config(c: &crate::config::DriftConfig, now: Millis) -> Params {
        let forbidden = c
            .identities
            .iter()
            .filter_map(|(id, d)| {
                d.circle
                    .as_ref()
                    .and_then(|circle| c.circles.get(circle))
                    .map(|cc| (id.clone(), cc.forbidden.clone()))
            })
            .collect();
        Params {
            now,
            ttl_ms: c.ttl_hours * 3_600_000,
            grace_ms: c.grace_days * DAY_MS,
            skew_ms: c.skew_secs * 1000,
            fleet_wide_drift: c.fleet_wide_drift,
            forbidden,
            known: c.identities.keys().cloned().collect(),
        }
    }
}

/// A line that passed G1, with where it came from.
#[derive(Clone, Debug)]
pub struct At {
    pub owner: String,
    pub date: String,
    pub path: String,
    pub lineno: usize,
    pub v: Valid,
}

impl At {
    /// The identity the line speaks about.
    pub fn about(&self) -> &str {
        self.v.subject.as_deref().unwrap_or(&self.owner)
    }
    fn day(&self) -> Millis {
        self.v.ts_ms / DAY_MS
    }
    fn minute(&self) -> Millis {
        self.v.ts_ms / MINUTE_MS
    }
    fn place(&self) -> String {
        format!("{} line {}", self.path, self.lineno)
    }
}

/// One drift pass: the KB's index as read at `at` (with other hosts' anchors), and the reader
/// whose eyes the pullers evaluate it with (the live primary then). The scheduler publishes the
/// last one; a puller that restarts evaluates it at once.
#[derive(Clone, Debug)]
pub struct Pass {
    pub at: Millis,
    pub index: std::sync::Arc<Index>,
    pub reader: Option<String>,
}

/// Every log parsed and checked (G1, signatures batch-verified).
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// owner -> (valid lines in file order per date, G1 failures, unreadable?)
    pub owners: BTreeMap<String, OwnerIndex>,
    /// identity -> every valid line about it (its own and others' observations), so a pass
    /// over n peers costs O(lines), not O(n x lines).
    pub about: BTreeMap<String, Vec<At>>,
}

#[derive(Clone, Debug, Default)]
pub struct OwnerIndex {
    /// date -> valid lines of that file, in file order.
    pub files: BTreeMap<String, Vec<At>>,
    /// date -> (place, why) of every line that failed G1.
    pub bad: BTreeMap<String, Vec<String>>,
    pub unreadable: Option<String>,
}

impl OwnerIndex {
    pub fn latest_date(&self) -> Option<&String> {
        self.files.keys().chain(self.bad.keys()).max()
    }
    pub fn is_empty(&self) -> bool {
        self.files.values().all(|v| v.is_empty()) && self.bad.values().all(|v| v.is_empty())
    }
}

/// Parse and check every line of a snapshot. Signatures are verified in one batch.
pub fn index(s: &Snapshot, trusted: &[VerifyingKey]) -> Index {
    let mut out = Index::default();
    // (owner, date, path, line number) and the line, for one batch signature check.
    let mut pending = vec![];
    for (owner, logs) in &s.identities {
        let oi = out.owners.entry(owner.clone()).or_default();
        let files = match logs {
            Logs::Unreadable(why) => {
                oi.unreadable = Some(why.clone());
                continue;
            }
            Logs::Present(f) => f,
        };
        for f in files {
            oi.files.entry(f.date.clone()).or_default();
            let mut lines = f.text.lines();
            let Some(h) = lines.next() else { continue };
            if let Err(why) = line::check_header(h, owner, &f.date) {
                oi.bad.entry(f.date.clone()).or_default().push(format!(
                    "G1: {} line 1: {why}; the whole file is skipped",
                    f.path
                ));
                continue;
            }
            for (i, l) in lines.enumerate() {
                if !l.trim().is_empty() {
                    let at = (owner.clone(), f.date.clone(), f.path.clone(), i + 2);
                    pending.push((at, l));
                }
            }
        }
    }
    let (good, bad) = line::check_batch(pending, trusted, |_| true);
    for ((owner, date, path, lineno), why) in bad {
        let oi = out.owners.entry(owner).or_default();
        oi.bad
            .entry(date)
            .or_default()
            .push(format!("G1: {path} line {lineno}: {why}"));
    }
    for ((owner, date, path, lineno), v, _) in good {
        let oi = out.owners.entry(owner.clone()).or_default();
        oi.files.entry(date.clone()).or_default().push(At {
            owner,
            date,
            path,
            lineno,
            v,
        });
    }
    for oi in out.owners.values_mut() {
        for v in oi.files.values_mut() {
            v.sort_by_key(|a| a.lineno);
        }
    }
    let mut about: BTreeMap<String, Vec<At>> = BTreeMap::new();
    for a in out
        .owners
        .values()
        .flat_map(|oi| oi.files.values().flatten())
    {
        about
            .entry(a.about().to_string())
            .or_default()
            .push(a.clone());
    }
    out.about = about;
    out
}

/// Add the anchors of identities homed on other hosts (each verified against its home host's
/// key before it got here) as owners named `IDENTITY@HOST`, so the gates run on them as on local
/// identities: G1 was their signature check against the home key, G2 is the recency of their
/// latest anchor, G3 weighs every report about them (their home's anchors and local observations
/// of them), G4 compares the reader's own statements about them minute by minute. Local names
/// cannot contain `@`, so the two never mix.
pub fn with_remote(ix: &mut Index, anchors: &[RemoteAnchor]) {
    let mut sorted: Vec<&RemoteAnchor> = anchors.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.home, &a.identity, a.ts_ms, &a.line).cmp(&(&b.home, &b.identity, b.ts_ms, &b.line))
    });
    for a in sorted {
        let owner = format!("{}@{}", a.identity, a.home);
        let date = crate::clock::date_of(a.ts_ms);
        let file = ix
            .owners
            .entry(owner.clone())
            .or_default()
            .files
            .entry(date.clone())
            .or_default();
        let at = At {
            owner: owner.clone(),
            path: format!("{}'s anchors of {} for {date}", a.home, a.identity),
            lineno: file.len() + 1,
            date,
            v: a.valid.clone(),
        };
        file.push(at.clone());
        ix.about.entry(owner).or_default().push(at);
    }
}

/// Is `owner` an identity homed on another host (`IDENTITY@HOST`)?
fn is_remote(owner: &str) -> bool {
    owner.contains('@')
}

pub use crate::drift::role::{names_role, role_terms, same_role};

// ---- the report ----------------------------------------------------------------------

/// A gate's outcome as an enum, serialised as the protocol's word for it.
macro_rules! outcome {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        pub enum $name {
            $($(#[$vm])* #[serde(rename = $s)] $v),*
        }
        impl $name {
            /// The protocol's word for it (as JSON carries it).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s),*
                }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

outcome!(
    /// G1: do the peer's own lines verify and parse?
    G1 {
        Pass => "pass",
        /// A line of its own failed (alerts say which); an earlier clean one may still anchor.
        Fail => "fail",
    }
);
outcome!(
    /// G2: how old is the anchor?
    G2 {
        /// No anchor to date.
        NotApplicable => "n/a",
        Fresh => "fresh",
        /// Past the TTL, within the grace: usable, flagged.
        Grace => "grace",
        /// Past the grace: discarded (a fresh instance).
        Expired => "expired",
    }
);
outcome!(
    /// G3: what do the other readers say about the peer?
    G3 {
        /// No reports.
        NotApplicable => "n/a",
        Single => "single",
        Consensus => "consensus",
        /// A report contradicts the anchor (a cascade alert).
        Conflict => "conflict",
    }
);
outcome!(
    /// G4: the reader's own statements against the peer's, minute by minute.
    G4 {
        /// Nothing in the same minute to compare.
        NotApplicable => "n/a",
        Ok => "ok",
        Alert => "alert",
    }
);
outcome!(
    /// The rule an alert raised to the lead is under.
    AlertRule {
        /// A cascade alert: a report contradicts the anchor, or an equivocation.
        G3 => "G3",
        /// A self-consistency alert.
        G4 => "G4",
        /// A peer's ledger no longer extends what this host witnessed, or it equivocated.
        Witness => "WITNESS",
    }
);
outcome!(
    /// What the reader should make of the peer.
    Verdict {
        Trusted => "trusted",
        /// Anchored in the grace period.
        Stale => "stale",
        /// No anchor and nothing against it: a new identity.
        FreshInstance => "fresh_instance",
        Untrusted => "untrusted",
    }
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub peer: String,
    pub anchor: Option<String>,
    pub anchor_ts: Option<String>,
    pub anchor_tick: Option<u64>,
    pub g1: G1,
    pub g2: G2,
    pub g3: G3,
    pub g4: G4,
    pub verdict: Verdict,
    pub alerts: Vec<String>,
    /// Identities whose reports about the peer G3 weighed.
    pub reporters: Vec<String>,
    /// The alerts to raise to the lead, by rule (`G3` conflicts, `G4` alerts), each among
    /// `alerts` too. A remote identity's equivocation by its own home is not among them: the
    /// anchor puller raises that one with its proof.
    #[serde(skip)]
    pub raise: Vec<(AlertRule, String)>,
}

impl Report {
    /// A cascade alert (G3 conflict) or a self-consistency alert (G4).
    pub fn is_alarming(&self) -> bool {
        self.g3 == G3::Conflict || self.g4 == G4::Alert
    }
}

/// The peers a reader evaluates: every identity with a directory, named as a subject, or known
/// from config, except the reader itself.
pub fn peers(ix: &Index, p: &Params, reader: Option<&str>) -> Vec<String> {
    let mut out: BTreeSet<String> = ix.owners.keys().cloned().collect();
    out.extend(ix.about.keys().cloned());
    out.extend(p.known.iter().cloned());
    if let Some(r) = reader {
        out.remove(r);
    }
    out.into_iter().collect()
}

/// Every report about `peer` within the recent window (G3's and G4's evidence): its own lines
/// about itself and every other identity's lines about it, that carry a baseline.
fn reports<'a>(ix: &'a Index, peer: &str, p: &Params) -> Vec<&'a At> {
    let lo = p.now.saturating_sub(p.grace_ms);
    let hi = p.now + p.skew_ms;
    let mut out: Vec<&At> = ix
        .about
        .get(peer)
        .into_iter()
        .flatten()
        .filter(|a| {
            a.v.kind.is_report() && a.v.baseline.is_some() && a.v.ts_ms >= lo && a.v.ts_ms <= hi
        })
        .collect();
    // Deterministic whatever the read order: by time, then place.
    out.sort_by(|x, y| {
        (x.v.ts_ms, &x.owner, &x.date, x.lineno).cmp(&(y.v.ts_ms, &y.owner, &y.date, y.lineno))
    });
    out
}

/// What the gates found beyond their outcomes: the alerts to show, and those to raise to the
/// lead (each among `alerts` too).
#[derive(Default)]
struct Findings {
    alerts: Vec<String>,
    raise: Vec<(AlertRule, String)>,
}

impl Findings {
    fn raise(&mut self, rule: AlertRule, text: String) {
        self.raise.push((rule, text.clone()));
        self.alerts.push(text);
    }
}

/// What the peer's own latest-date log gives as its anchor.
struct Anchoring<'a> {
    g1: G1,
    /// The last clean fencepost/reanchor about itself, if one is usable.
    anchor: Option<&'a At>,
    /// Whether it had anchoring lines at all (used or not).
    candidates_seen: bool,
    /// Why its logs could not be read, if they could not.
    unreadable: Option<String>,
}

/// G1 and the anchor: the last clean fencepost/reanchor about itself in the peer's latest-date
/// log, not dated in the future.
fn g1_and_anchor<'a>(ix: &'a Index, peer: &str, p: &Params, f: &mut Findings) -> Anchoring<'a> {
    let mut out = Anchoring {
        g1: G1::Pass,
        anchor: None,
        candidates_seen: false,
        unreadable: None,
    };
    let Some(oi) = ix.owners.get(peer) else {
        return out;
    };
    if let Some(why) = &oi.unreadable {
        out.unreadable = Some(why.clone());
        return out;
    }
    let Some(latest) = oi.latest_date() else {
        return out;
    };
    if let Some(bad) = oi.bad.get(latest)
        && !bad.is_empty()
    {
        out.g1 = G1::Fail;
        f.alerts.extend(bad.iter().cloned());
    }
    for a in oi.files.get(latest).into_iter().flatten() {
        let anchoring =
            matches!(a.v.kind, Kind::Fencepost | Kind::Reanchor) && a.v.clean && a.about() == peer;
        if !anchoring {
            continue;
        }
        out.candidates_seen = true;
        if a.v.ts_ms > p.now + p.skew_ms {
            f.alerts.push(format!(
                "G2: {}: dated {}, more than {} s in the future; not used",
                a.place(),
                a.v.ts,
                p.skew_ms / 1000
            ));
            continue;
        }
        out.anchor = Some(a);
    }
    if out.g1 == G1::Fail && out.anchor.is_none() {
        out.candidates_seen = true;
    }
    out
}

/// G2: the anchor's age by the reader's clock.
fn g2(anchor_ms: Option<Millis>, p: &Params, f: &mut Findings) -> G2 {
    let Some(t) = anchor_ms else {
        return G2::NotApplicable;
    };
    let age = p.now.saturating_sub(t);
    if age <= p.ttl_ms {
        G2::Fresh
    } else if age <= p.grace_ms {
        f.alerts.push(format!(
            "G2: the anchor is {} h old (grace: usable, flagged)",
            age / 3_600_000
        ));
        G2::Grace
    } else {
        f.alerts.push(format!(
            "G2: the anchor is {} days old: expired, discarded (a fresh instance)",
            age / DAY_MS
        ));
        G2::Expired
    }
}

/// G3: peer consistency over every recent report about the peer (`rs`): two roles the same
/// day, clean and in drift the same minute, a role its circle forbids. Returns the outcome and
/// the reporters weighed.
fn g3(peer: &str, rs: &[&At], p: &Params, f: &mut Findings) -> (G3, BTreeSet<String>) {
    let mut conflict = false;
    let mut seen_pairs = BTreeSet::new();
    for (i, a) in rs.iter().enumerate() {
        for b in &rs[i + 1..] {
            let (ba, bb) = (
                a.v.baseline.as_deref().unwrap_or(""),
                b.v.baseline.as_deref().unwrap_or(""),
            );
            if a.day() == b.day() && !same_role(ba, bb) {
                let key = (
                    "day",
                    a.day(),
                    role_terms(ba)
                        .into_iter()
                        .chain(role_terms(bb))
                        .collect::<Vec<_>>(),
                );
                // A remote identity's own home signing both is the cross-host equivocation:
                // the anchor puller raises that with its proof, so it is listed here, not
                // raised twice.
                let equivocation = is_remote(peer) && a.owner == peer && b.owner == peer;
                let what = if equivocation {
                    "G3 equivocation (raised with its proof by the anchor puller)"
                } else {
                    "G3 conflict (same 24 h window)"
                };
                if seen_pairs.insert(key) {
                    let t = format!(
                        "{what}: {} says {ba:?}, {} says {bb:?} about {peer} on {}",
                        a.place(),
                        b.place(),
                        &a.v.ts[..10.min(a.v.ts.len())]
                    );
                    if equivocation {
                        f.alerts.push(t);
                    } else {
                        f.raise(AlertRule::G3, t);
                    }
                }
                conflict = true;
            }
            if a.minute() == b.minute() && a.v.clean != b.v.clean {
                let (clean, drift) = if a.v.clean { (a, b) } else { (b, a) };
                let t = format!(
                    "G3 conflict (same minute): {} reports {peer} clean and {} reports it in drift at {}",
                    clean.place(),
                    drift.place(),
                    &clean.v.ts[..16.min(clean.v.ts.len())]
                );
                f.raise(AlertRule::G3, t);
                conflict = true;
            }
        }
    }
    if let Some(forbidden) = p.forbidden.get(peer) {
        for a in rs {
            let b = a.v.baseline.as_deref().unwrap_or("");
            if let Some(role) = forbidden.iter().find(|f| names_role(b, f)) {
                let t = format!(
                    "G3 conflict (circle): {} says {peer} is {b:?}, which names the forbidden role {role:?}",
                    a.place()
                );
                f.raise(AlertRule::G3, t);
                conflict = true;
            }
        }
    }
    let reporters: BTreeSet<String> = rs.iter().map(|a| a.owner.clone()).collect();
    let g3 = if conflict {
        G3::Conflict
    } else {
        match reporters.len() {
            0 => G3::NotApplicable,
            1 => G3::Single,
            _ => G3::Consensus,
        }
    };
    (g3, reporters)
}

/// G4: the reader's own statements about the peer against the peer's own, minute by minute.
fn g4(
    ix: &Index,
    peer: &str,
    reader: Option<&str>,
    rs: &[&At],
    p: &Params,
    f: &mut Findings,
) -> G4 {
    let mut g4 = G4::NotApplicable;
    let Some(r) = reader.filter(|r| *r != peer) else {
        return g4;
    };
    let lo = p.now.saturating_sub(p.grace_ms);
    let hi = p.now + p.skew_ms;
    let mine: Vec<&At> = ix
        .owners
        .get(r)
        .into_iter()
        .flat_map(|oi| oi.files.values().flatten())
        .filter(|a| a.v.ts_ms >= lo && a.v.ts_ms <= hi && a.v.kind.is_report())
        .filter(|a| {
            a.v.subject.as_deref() == Some(peer) || (p.fleet_wide_drift && a.v.subject.is_none())
        })
        .collect();
    let theirs: Vec<&At> = rs.iter().copied().filter(|a| a.owner == peer).collect();
    for m in &mine {
        for t in theirs.iter().filter(|t| t.minute() == m.minute()) {
            if g4 == G4::NotApplicable {
                g4 = G4::Ok;
            }
            if t.v.clean != m.v.clean {
                g4 = G4::Alert;
                let text = format!(
                    "G4 alert: {} says {peer} is {} but {peer}'s own {} says {} in the same minute",
                    m.place(),
                    if m.v.clean { "clean" } else { "in drift" },
                    t.place(),
                    if t.v.clean { "clean" } else { "in drift" }
                );
                f.raise(AlertRule::G4, text);
            }
        }
    }
    g4
}

/// The verdict from the gates' outcomes: a conflict or an alert makes the peer untrusted; with
/// no anchor it is a fresh instance, unless its logs were unreadable or its anchoring lines
/// were unusable (not for age); an anchor in grace is stale.
pub fn verdict(
    g2: G2,
    g3: G3,
    g4: G4,
    anchored: bool,
    unreadable: bool,
    candidates_seen: bool,
) -> Verdict {
    if g3 == G3::Conflict || g4 == G4::Alert {
        Verdict::Untrusted
    } else if !anchored {
        if unreadable || (candidates_seen && g2 != G2::Expired) {
            Verdict::Untrusted
        } else {
            Verdict::FreshInstance
        }
    } else if g2 == G2::Grace {
        Verdict::Stale
    } else {
        Verdict::Trusted
    }
}

/// Evaluate one peer as `reader` would at `p.now`. `cached` is the last good anchor from an
/// earlier pull (text, ts, tick), used when the peer's directory cannot be read.
pub fn evaluate(
    ix: &Index,
    peer: &str,
    reader: Option<&str>,
    p: &Params,
    cached: Option<(&str, &str, u64)>,
) -> Report {
    let mut f = Findings::default();
    let a = g1_and_anchor(ix, peer, p, &mut f);
    let (mut anchor_text, mut anchor_ts, mut anchor_tick, mut anchor_ms) = (
        a.anchor.and_then(|a| a.v.baseline.clone()),
        a.anchor.map(|a| a.v.ts.clone()),
        a.anchor.map(|a| a.v.tick),
        a.anchor.map(|a| a.v.ts_ms),
    );
    if let Some(why) = &a.unreadable {
        f.alerts.push(format!("KB: {peer}'s logs could not be read ({why}); using the cached anchor, retrying next heartbeat"));
        if let Some((t, ts, tick)) = cached {
            anchor_text = Some(t.to_string());
            anchor_ts = Some(ts.to_string());
            anchor_tick = Some(tick);
            anchor_ms = chrono::DateTime::parse_from_rfc3339(ts)
                .ok()
                .map(|d| d.timestamp_millis().max(0) as Millis);
        }
    }
    let g2 = g2(anchor_ms, p, &mut f);
    if g2 == G2::Expired {
        anchor_text = None;
        anchor_ts = None;
        anchor_tick = None;
    }
    let rs = reports(ix, peer, p);
    let (g3, reporters) = g3(peer, &rs, p, &mut f);
    let g4 = g4(ix, peer, reader, &rs, p, &mut f);
    let verdict = verdict(
        g2,
        g3,
        g4,
        anchor_text.is_some(),
        a.unreadable.is_some(),
        a.candidates_seen,
    );
    Report {
        peer: peer.to_string(),
        anchor: anchor_text,
        anchor_ts,
        anchor_tick,
        g1: a.g1,
        g2,
        g3,
        g4,
        verdict,
        alerts: f.alerts,
        reporters: reporters.into_iter().collect(),
        raise: f.raise,
    }
}

/// Evaluate every peer.
pub fn evaluate_all(ix: &Index, reader: Option<&str>, p: &Params) -> Vec<Report> {
    peers(ix, p, reader)
        .iter()
        .map(|peer| evaluate(ix, peer, reader, p, None))
        .collect()
}

/// Bootstrapping an identity with no log: the most recent clean observation of it by another
/// identity that G2 accepts (fresh or grace) becomes its initial anchor (source `peer_consensus`);
/// without one, the caller uses the operator default (source `operator_default`).
pub fn bootstrap(ix: &Index, identity: &str, p: &Params) -> Option<(String, String)> {
    let lo = p.now.saturating_sub(p.grace_ms);
    ix.owners
        .iter()
        .filter(|(owner, _)| owner.as_str() != identity)
        .flat_map(|(_, oi)| oi.files.values().flatten())
        .filter(|a| a.v.subject.as_deref() == Some(identity) && a.v.clean && a.v.baseline.is_some())
        .filter(|a| a.v.ts_ms >= lo && a.v.ts_ms <= p.now + p.skew_ms)
        .max_by_key(|a| (a.v.ts_ms, a.owner.clone(), a.lineno))
        .map(|a| (a.v.baseline.clone().unwrap_or_default(), a.owner.clone()))
}

/// The `first_contact` line that bootstraps `identity`, which has no log of its own: its initial
/// anchor is the latest observation of it by a peer ([`bootstrap`], source `peer_consensus`,
/// naming the observer), else the operator's default for it, else the operator's default for
/// every identity, else its `role` (source `operator_default`). Dated `p.now`; the tick is set
/// when it is appended.
pub fn first_contact(
    ix: &Index,
    identity: &str,
    role: &str,
    drift: &crate::config::DriftConfig,
    p: &Params,
) -> line::NewLine {
    let (baseline, source, by) = match bootstrap(ix, identity, p) {
        Some((b, by)) => (b, "peer_consensus", Some(by)),
        None => {
            let d = drift
                .identities
                .get(identity)
                .and_then(|i| i.default_baseline.clone())
                .or_else(|| drift.default_baseline.clone())
                .unwrap_or_else(|| role.to_string());
            (d, "operator_default", None)
        }
    };
    let mut extra = serde_json::Map::new();
    extra.insert("source".into(), serde_json::Value::String(source.into()));
    if let Some(by) = by {
        extra.insert("observed_by".into(), serde_json::Value::String(by));
    }
    line::NewLine {
        ts_ms: p.now,
        kind: Some(Kind::FirstContact),
        baseline: Some(baseline),
        extra,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::line::{NewLine, sign};
    use ed25519_dalek::SigningKey;
    use proptest::prelude::*;
    use serde_json::json;

    const NOW: Millis = 1_796_212_800_000; // 2026-12-02T12:00:00Z
    const H: Millis = 3_600_000;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[5u8; 32])
    }

    #[derive(Default, Clone)]
    struct Kb {
        files: BTreeMap<(String, String), Vec<String>>,
    }

    impl Kb {
        fn line(
            &mut self,
            owner: &str,
            kind: Kind,
            baseline: Option<&str>,
            delta: Option<serde_json::Value>,
            subject: Option<&str>,
            ts: Millis,
        ) -> &mut Self {
            let l = sign(
                &NewLine {
                    ts_ms: ts,
                    tick: 1,
                    kind: Some(kind),
                    baseline: baseline.map(String::from),
                    delta,
                    subject: subject.map(String::from),
                    ..Default::default()
                },
                &key(),
            );
            self.raw(owner, &crate::clock::date_of(ts), &l)
        }
        fn anchor(&mut self, owner: &str, baseline: &str, ts: Millis) -> &mut Self {
            self.line(owner, Kind::Fencepost, Some(baseline), None, None, ts)
        }
        fn observe(
            &mut self,
            owner: &str,
            subject: &str,
            baseline: &str,
            drift: bool,
            ts: Millis,
        ) -> &mut Self {
            let kind = if drift { Kind::Drift } else { Kind::Fencepost };
            self.line(
                owner,
                kind,
                Some(baseline),
                drift.then(|| json!({"drift": true})),
                Some(subject),
                ts,
            )
        }
        fn raw(&mut self, owner: &str, date: &str, l: &str) -> &mut Self {
            self.files
                .entry((owner.into(), date.into()))
                .or_default()
                .push(l.to_string());
            self
        }
        fn snapshot(&self) -> Snapshot {
            let mut s = Snapshot::default();
            for ((owner, date), lines) in &self.files {
                let text = format!("{}\n{}\n", line::header(owner, date), lines.join("\n"));
                let e = s
                    .identities
                    .entry(owner.clone())
                    .or_insert(Logs::Present(vec![]));
                if let Logs::Present(v) = e {
                    v.push(LogFile {
                        date: date.clone(),
                        path: format!("fleet/drift/{owner}/{date}.jsonl"),
                        text,
                    });
                }
            }
            s
        }
    }

    /// The verdict rule alone, as a table: (g2, g3, g4, anchored, unreadable, candidates seen).
    #[test]
    fn the_verdict_table() {
        use G2::*;
        let rows = [
            (
                (Fresh, G3::Consensus, G4::Ok, true, false, true),
                Verdict::Trusted,
            ),
            (
                (Grace, G3::Single, G4::NotApplicable, true, false, true),
                Verdict::Stale,
            ),
            (
                (Fresh, G3::Conflict, G4::Ok, true, false, true),
                Verdict::Untrusted,
            ),
            (
                (Fresh, G3::Consensus, G4::Alert, true, false, true),
                Verdict::Untrusted,
            ),
            // No anchor: a new identity, unless something stands against that.
            (
                (
                    NotApplicable,
                    G3::NotApplicable,
                    G4::NotApplicable,
                    false,
                    false,
                    false,
                ),
                Verdict::FreshInstance,
            ),
            (
                (Expired, G3::Single, G4::NotApplicable, false, false, true),
                Verdict::FreshInstance,
            ),
            (
                (
                    NotApplicable,
                    G3::Single,
                    G4::NotApplicable,
                    false,
                    true,
                    false,
                ),
                Verdict::Untrusted,
            ),
            (
                (
                    NotApplicable,
                    G3::Single,
                    G4::NotApplicable,
                    false,
                    false,
                    true,
                ),
                Verdict::Untrusted,
            ),
            (
                (
                    NotApplicable,
                    G3::Conflict,
                    G4::NotApplicable,
                    false,
                    false,
                    false,
                ),
                Verdict::Untrusted,
            ),
        ];
        for ((g2, g3, g4, anchored, unreadable, seen), want) in rows {
            assert_eq!(
                verdict(g2, g3, g4, anchored, unreadable, seen),
                want,
                "{g2} {g3} {g4} anchored={anchored} unreadable={unreadable} seen={seen}"
            );
        }
    }

    /// Without a peer's observation, the operator's default for the identity, then for every
    /// identity, then the role; with one, the observer's statement.
    #[test]
    fn first_contact_falls_back_from_peers_to_the_operator_to_the_role() {
        let mut drift = crate::config::DriftConfig::default();
        let empty = Index::default();
        let source = |n: &NewLine| n.extra["source"].as_str().map(String::from);
        let n = first_contact(&empty, "libra", "worker", &drift, &params());
        assert_eq!(n.baseline.as_deref(), Some("worker"));
        assert_eq!(source(&n).as_deref(), Some("operator_default"));
        assert_eq!((n.kind, n.ts_ms), (Some(Kind::FirstContact), NOW));
        drift.default_baseline = Some("generalist".into());
        let n = first_contact(&empty, "libra", "worker", &drift, &params());
        assert_eq!(n.baseline.as_deref(), Some("generalist"));
        drift.identities.insert(
            "libra".into(),
            crate::config::DriftIdentity {
                default_baseline: Some("researcher".into()),
                ..Default::default()
            },
        );
        let n = first_contact(&empty, "libra", "worker", &drift, &params());
        assert_eq!(n.baseline.as_deref(), Some("researcher"));
        // A peer's recent clean observation wins, and names its observer.
        let mut kb = Kb::default();
        kb.observe("echo", "libra", "code reviewer", false, NOW - H);
        let ix = index(&kb.snapshot(), &[key().verifying_key()]);
        let n = first_contact(&ix, "libra", "worker", &drift, &params());
        assert_eq!(n.baseline.as_deref(), Some("code reviewer"));
        assert_eq!(source(&n).as_deref(), Some("peer_consensus"));
        assert_eq!(n.extra["observed_by"], "echo");
    }

    fn params() -> Params {
        Params {
            now: NOW,
            ttl_ms: 48 * H,
            grace_ms: 7 * 24 * H,
            skew_ms: 5 * 60_000,
            fleet_wide_drift: false,
            forbidden: BTreeMap::from([("libra".to_string(), vec!["deployer".to_string()])]),
            known: BTreeSet::new(),
        }
    }

    fn eval(kb: &Kb, peer: &str, reader: Option<&str>) -> Report {
        let ix = index(&kb.snapshot(), &[key().verifying_key()]);
        evaluate(&ix, peer, reader, &params(), None)
    }

    #[test]
    fn roles_normalise_with_a_real_stemmer() {
        assert!(same_role("researcher", "research agent"));
        assert!(same_role("Researcher", "a research assistant"));
        assert!(same_role("researcher", "senior researcher"));
        assert!(!same_role("researcher", "deployer"));
        assert!(names_role("deployment agent for prod", "deployer"));
        assert!(!names_role("researcher", "deployer"));
        assert_eq!(
            role_terms("the Research Agents"),
            BTreeSet::from(["research".to_string()])
        );
    }

    #[test]
    fn g1_bad_lines_are_skipped_and_reported_never_stopping_the_reader() {
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW - H);
        let date = crate::clock::date_of(NOW);
        for bad in [
            "{not json",
            r#"{"ts":"2026-12-02T11:30:00Z","tick":2,"type":"fencepost","baseline_pos":"","drift_delta":null}"#,
            r#"{"ts":"2026-12-02T11:31:00Z","tick":2,"type":"fencepost","baseline_pos":7,"drift_delta":null}"#,
        ] {
            kb.raw("libra", &date, bad);
        }
        // A forged line: a valid line altered after signing.
        let forged = sign(&NewLine::anchor(NOW - 60_000, 9, "researcher"), &key())
            .replace("researcher", "deployer");
        kb.raw("libra", &date, &forged);
        let r = eval(&kb, "libra", None);
        assert_eq!(r.g1.as_str(), "fail");
        assert_eq!(
            r.anchor.as_deref(),
            Some("researcher"),
            "the valid anchor still stands"
        );
        assert_eq!(r.verdict.as_str(), "trusted");
        assert_eq!(
            r.alerts.iter().filter(|a| a.starts_with("G1:")).count(),
            4,
            "{:#?}",
            r.alerts
        );
        assert!(
            r.alerts
                .iter()
                .any(|a| a.contains("signature does not verify"))
        );
        // Only bad lines: no anchor, and the evidence is bad, so untrusted (not a fresh instance).
        let mut kb = Kb::default();
        kb.raw("echo", &date, "{not json");
        let r = eval(&kb, "echo", None);
        assert_eq!(
            (r.g1.as_str(), r.anchor.clone(), r.verdict.as_str()),
            ("fail", None, "untrusted")
        );
        // An unknown schema fails the whole file.
        let mut s = Kb::default().snapshot();
        s.identities.insert(
            "echo".into(),
            Logs::Present(vec![LogFile {
                date: date.clone(),
                path: "x".into(),
                text: r#"{"schema":"fleet.drift/9","identity":"echo","date":"D"}"#
                    .replace('D', &date)
                    + "\n",
            }]),
        );
        let ix = index(&s, &[key().verifying_key()]);
        let r = evaluate(&ix, "echo", None, &params(), None);
        assert_eq!(r.g1.as_str(), "fail");
        assert!(r.alerts[0].contains("unknown schema"));
    }

    #[test]
    fn g2_edges() {
        // (age, g2, verdict)
        let cases = [
            (0, "fresh", "trusted"),
            (48 * H, "fresh", "trusted"),
            (48 * H + 1, "grace", "stale"),
            (7 * 24 * H, "grace", "stale"),
            (7 * 24 * H + 1, "expired", "fresh_instance"),
        ];
        for (age, g2, verdict) in cases {
            let mut kb = Kb::default();
            kb.anchor("libra", "researcher", NOW - age);
            let r = eval(&kb, "libra", None);
            assert_eq!(
                (r.g2.as_str(), r.verdict.as_str()),
                (g2, verdict),
                "age {age}"
            );
            assert_eq!(r.anchor.is_some(), g2 != "expired");
        }
        // More than the skew in the future: not used.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW + 5 * 60_000 + 1_000);
        let r = eval(&kb, "libra", None);
        assert_eq!((r.anchor.clone(), r.verdict.as_str()), (None, "untrusted"));
        assert!(r.alerts.iter().any(|a| a.contains("in the future")));
        // Within the skew: fine.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW + 60_000);
        assert_eq!(eval(&kb, "libra", None).verdict.as_str(), "trusted");
    }

    #[test]
    fn the_anchor_is_the_last_clean_fencepost_or_reanchor_in_the_latest_log() {
        let mut kb = Kb::default();
        kb.anchor("libra", "old role", NOW - 30 * H)
            .anchor("libra", "researcher", NOW - 2 * H)
            .line(
                "libra",
                Kind::Reanchor,
                Some("research agent"),
                None,
                None,
                NOW - H,
            )
            .line(
                "libra",
                Kind::Drift,
                Some("research agent"),
                Some(json!({"toward": "x"})),
                None,
                NOW - 30 * 60_000,
            )
            .observe("libra", "echo", "writer", false, NOW - 20 * 60_000);
        let r = eval(&kb, "libra", None);
        assert_eq!(r.anchor.as_deref(), Some("research agent"));
        // Latest-date log only: a newer file with only a drift event yields no anchor.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW - 30 * H).line(
            "libra",
            Kind::Drift,
            Some("researcher"),
            Some(json!(1)),
            None,
            NOW - H,
        );
        assert_eq!(eval(&kb, "libra", None).anchor, None);
    }

    #[test]
    fn g3_table() {
        // (description, setup, g3, verdict)
        type Setup = fn(&mut Kb);
        let cases: Vec<(&str, Setup, &str, &str)> = vec![
            (
                "a first_contact placeholder is not a report that conflicts with the first anchor",
                |k| {
                    k.line(
                        "libra",
                        Kind::FirstContact,
                        Some("worker"),
                        None,
                        None,
                        NOW - 2 * H,
                    )
                    .anchor("libra", "researcher", NOW - H);
                },
                "single",
                "trusted",
            ),
            (
                "one reporter",
                |k| {
                    k.anchor("libra", "researcher", NOW - H);
                },
                "single",
                "trusted",
            ),
            (
                "two consistent reporters",
                |k| {
                    k.anchor("libra", "researcher", NOW - H).observe(
                        "echo",
                        "libra",
                        "research agent",
                        false,
                        NOW - 2 * H,
                    );
                },
                "consensus",
                "trusted",
            ),
            (
                "same 24 h window, two roles",
                |k| {
                    k.anchor("libra", "researcher", NOW - H).observe(
                        "echo",
                        "libra",
                        "writer",
                        false,
                        NOW - 2 * H,
                    );
                },
                "conflict",
                "untrusted",
            ),
            (
                "different windows: evolution",
                |k| {
                    k.anchor("libra", "researcher", NOW - H).observe(
                        "echo",
                        "libra",
                        "writer",
                        false,
                        NOW - 30 * H,
                    );
                },
                "consensus",
                "trusted",
            ),
            (
                "clean and drift in the same minute",
                |k| {
                    k.anchor("libra", "researcher", NOW - H).observe(
                        "echo",
                        "libra",
                        "researcher",
                        true,
                        NOW - H + 10_000,
                    );
                },
                "conflict",
                "untrusted",
            ),
            (
                "clean and drift a minute apart",
                |k| {
                    k.anchor("libra", "researcher", NOW - H).observe(
                        "echo",
                        "libra",
                        "researcher",
                        true,
                        NOW - H + 61_000,
                    );
                },
                "consensus",
                "trusted",
            ),
            (
                "circle: a forbidden role",
                |k| {
                    k.anchor("libra", "deployment agent", NOW - H);
                },
                "conflict",
                "untrusted",
            ),
            (
                "presence is not evidence",
                |k| {
                    k.anchor("libra", "researcher", NOW - H)
                        .anchor("echo", "writer", NOW - H);
                },
                "single",
                "trusted",
            ),
        ];
        for (what, setup, g3, verdict) in cases {
            let mut kb = Kb::default();
            setup(&mut kb);
            let r = eval(&kb, "libra", None);
            assert_eq!(
                (r.g3.as_str(), r.verdict.as_str()),
                (g3, verdict),
                "{what}: {:#?}",
                r.alerts
            );
            if g3 == "conflict" {
                assert!(
                    r.alerts.iter().any(|a| a.starts_with("G3 conflict")),
                    "{what}"
                );
            }
        }
    }

    #[test]
    fn g4_one_minute_window() {
        // Echo (the reader) observed libra in drift; libra says clean in the same minute.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW - H + 5_000).observe(
            "echo",
            "libra",
            "researcher",
            true,
            NOW - H + 50_000,
        );
        let r = eval(&kb, "libra", Some("echo"));
        assert_eq!((r.g4.as_str(), r.verdict.as_str()), ("alert", "untrusted"));
        // A minute apart: nothing to compare.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW - H).observe(
            "echo",
            "libra",
            "researcher",
            true,
            NOW - H + 60_000,
        );
        assert_eq!(eval(&kb, "libra", Some("echo")).g4.as_str(), "n/a");
        // Agreement in the same minute.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW - H).observe(
            "echo",
            "libra",
            "researcher",
            false,
            NOW - H + 1_000,
        );
        assert_eq!(eval(&kb, "libra", Some("echo")).g4.as_str(), "ok");
        // Fleet-wide drift: the reader's own drift event speaks about every peer.
        let mut kb = Kb::default();
        kb.anchor("libra", "researcher", NOW - H).line(
            "echo",
            Kind::Drift,
            Some("writer"),
            Some(json!(1)),
            None,
            NOW - H + 1_000,
        );
        let ix = index(&kb.snapshot(), &[key().verifying_key()]);
        let mut p = params();
        assert_eq!(
            evaluate(&ix, "libra", Some("echo"), &p, None).g4.as_str(),
            "n/a"
        );
        p.fleet_wide_drift = true;
        assert_eq!(
            evaluate(&ix, "libra", Some("echo"), &p, None).g4.as_str(),
            "alert"
        );
    }

    #[test]
    fn empty_missing_and_unreadable_logs() {
        // Missing or empty log: a fresh instance, not an error.
        let ix = index(&Kb::default().snapshot(), &[key().verifying_key()]);
        let r = evaluate(&ix, "ghost", None, &params(), None);
        assert_eq!(
            (
                r.verdict.as_str(),
                r.g1.as_str(),
                r.g2.as_str(),
                r.g3.as_str(),
                r.g4.as_str()
            ),
            ("fresh_instance", "pass", "n/a", "n/a", "n/a")
        );
        let mut s = Snapshot::default();
        s.identities.insert(
            "libra".into(),
            Logs::Present(vec![LogFile {
                date: "2026-12-02".into(),
                path: "p".into(),
                text: line::header("libra", "2026-12-02") + "\n",
            }]),
        );
        let r = evaluate(
            &index(&s, &[key().verifying_key()]),
            "libra",
            None,
            &params(),
            None,
        );
        assert_eq!(r.verdict.as_str(), "fresh_instance");
        // Unreadable: the cached anchor is used, never discarded on a failure.
        let mut s = Snapshot::default();
        s.identities
            .insert("libra".into(), Logs::Unreadable("permission denied".into()));
        let ix = index(&s, &[key().verifying_key()]);
        let cached_ts = crate::clock::rfc3339(NOW - H);
        let r = evaluate(
            &ix,
            "libra",
            None,
            &params(),
            Some(("researcher", &cached_ts, 4)),
        );
        assert_eq!(
            (r.anchor.as_deref(), r.g2.as_str(), r.verdict.as_str()),
            (Some("researcher"), "fresh", "trusted")
        );
        assert!(r.alerts.iter().any(|a| a.contains("could not be read")));
        let r = evaluate(&ix, "libra", None, &params(), None);
        assert_eq!(r.verdict.as_str(), "untrusted");
    }

    #[test]
    fn bootstrap_from_peer_observations_or_none() {
        let mut kb = Kb::default();
        kb.observe("echo", "nova", "tester", false, NOW - 3 * H)
            .observe("libra", "nova", "test engineer", false, NOW - H);
        let ix = index(&kb.snapshot(), &[key().verifying_key()]);
        assert_eq!(
            bootstrap(&ix, "nova", &params()),
            Some(("test engineer".into(), "libra".into()))
        );
        let mut kb = Kb::default();
        kb.observe("echo", "nova", "tester", false, NOW - 8 * 24 * H);
        let ix = index(&kb.snapshot(), &[key().verifying_key()]);
        assert_eq!(bootstrap(&ix, "nova", &params()), None, "too old for G2");
    }

    proptest! {
        /// The verdict never depends on the order the KB was read in: files in any order,
        /// identities in any order.
        #[test]
        fn verdicts_do_not_depend_on_read_order(
            seed in proptest::collection::vec((0u8..3, 0u8..3, 0u8..4, any::<bool>(), 0u32..(72 * 60)), 1..14),
            shuffle in any::<u64>(),
        ) {
            let names = ["libra", "echo", "cairn"];
            let roles = ["researcher", "research agent", "writer", "deployer"];
            let mut kb = Kb::default();
            for (owner, subject, role, drift, minutes_ago) in seed {
                let ts = NOW - minutes_ago as u64 * 60_000;
                let (o, s) = (names[owner as usize], names[subject as usize]);
                if o == s {
                    if drift {
                        kb.line(o, Kind::Drift, Some(roles[role as usize]), Some(json!(1)), None, ts);
                    } else {
                        kb.anchor(o, roles[role as usize], ts);
                    }
                } else {
                    kb.observe(o, s, roles[role as usize], drift, ts);
                }
            }
            let snap = kb.snapshot();
            let mut shuffled = snap.clone();
            let mut rng = shuffle;
            for logs in shuffled.identities.values_mut() {
                if let Logs::Present(v) = logs {
                    // A deterministic shuffle of the file order.
                    for i in (1..v.len()).rev() {
                        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let j = (rng >> 33) as usize % (i + 1);
                        v.swap(i, j);
                    }
                }
            }
            let k = [key().verifying_key()];
            let (a, b) = (index(&snap, &k), index(&shuffled, &k));
            for reader in [None, Some("echo")] {
                for peer in names {
                    let (ra, rb) = (evaluate(&a, peer, reader, &params(), None), evaluate(&b, peer, reader, &params(), None));
                    prop_assert_eq!((ra.verdict.as_str(), ra.g1.as_str(), ra.g2.as_str(), ra.g3.as_str(), ra.g4.as_str(), ra.anchor.clone()), (rb.verdict.as_str(), rb.g1.as_str(), rb.g2.as_str(), rb.g3.as_str(), rb.g4.as_str(), rb.anchor.clone()));
                }
            }
        }
    }

    /// An anchor of `identity` homed on `home`, signed by `home`'s key, as the anchor puller
    /// holds it.
    fn remote(home: &str, identity: &str, role: &str, ts: Millis) -> RemoteAnchor {
        let k = SigningKey::from_bytes(&[6u8; 32]);
        let l = sign(&NewLine::anchor(ts, 1, role), &k);
        let v = line::check(&l, &[k.verifying_key()]).unwrap();
        RemoteAnchor {
            home: home.into(),
            identity: identity.into(),
            role: role.into(),
            ts_ms: ts,
            line: l,
            valid: v,
        }
    }

    fn eval_with(kb: &Kb, anchors: &[RemoteAnchor], peer: &str, reader: Option<&str>) -> Report {
        let mut ix = index(&kb.snapshot(), &[key().verifying_key()]);
        with_remote(&mut ix, anchors);
        evaluate(&ix, peer, reader, &params(), None)
    }

    #[test]
    fn remote_identities_go_through_g2_by_the_readers_clock() {
        let kb = Kb::default();
        let r = eval_with(
            &kb,
            &[remote("c", "x", "code reviewer", NOW - H)],
            "x@c",
            Some("lead"),
        );
        assert_eq!(
            (
                r.g1.as_str(),
                r.g2.as_str(),
                r.verdict.as_str(),
                r.anchor.as_deref()
            ),
            ("pass", "fresh", "trusted", Some("code reviewer")),
            "{r:?}"
        );
        assert!(
            peers(
                &{
                    let mut ix = index(&kb.snapshot(), &[]);
                    with_remote(&mut ix, &[remote("c", "x", "r", NOW)]);
                    ix
                },
                &params(),
                Some("lead")
            )
            .contains(&"x@c".to_string())
        );
        // The latest of several anchors is the one read.
        let r = eval_with(
            &kb,
            &[
                remote("c", "x", "code reviewer", NOW - 50 * H),
                remote("c", "x", "code reviewer, senior", NOW - 3 * 24 * H),
            ],
            "x@c",
            None,
        );
        assert_eq!(
            (r.g2.as_str(), r.verdict.as_str()),
            ("grace", "stale"),
            "{r:?}"
        );
        let r = eval_with(
            &kb,
            &[remote("c", "x", "code reviewer", NOW - 8 * 24 * H)],
            "x@c",
            None,
        );
        assert_eq!(
            (r.g2.as_str(), r.anchor.as_deref()),
            ("expired", None),
            "{r:?}"
        );
        // A host's anchor dated in the future is not used.
        let r = eval_with(
            &kb,
            &[remote("c", "x", "code reviewer", NOW + H)],
            "x@c",
            None,
        );
        assert_eq!(r.anchor, None, "{r:?}");
        assert!(r.alerts.iter().any(|a| a.starts_with("G2")), "{r:?}");
    }

    #[test]
    fn g4_compares_the_readers_statements_with_a_remote_identitys_anchors() {
        let mut kb = Kb::default();
        // The local lead saw x@c drifting in the minute x's home says it anchored clean.
        kb.observe(
            "lead",
            "x@c",
            "code reviewer",
            true,
            NOW - 10 * 60_000 + 5_000,
        );
        let anchors = [remote("c", "x", "code reviewer", NOW - 10 * 60_000)];
        let r = eval_with(&kb, &anchors, "x@c", Some("lead"));
        assert_eq!(
            (r.g4.as_str(), r.verdict.as_str()),
            ("alert", "untrusted"),
            "{r:?}"
        );
        assert!(
            r.alerts
                .iter()
                .any(|a| a.starts_with("G4 alert") && a.contains("c's anchors of x")),
            "{r:?}"
        );
        // In another minute there is nothing to compare.
        let mut kb = Kb::default();
        kb.observe("lead", "x@c", "code reviewer", true, NOW - 20 * 60_000);
        let r = eval_with(&kb, &anchors, "x@c", Some("lead"));
        assert_eq!(r.g4.as_str(), "n/a", "{r:?}");
    }

    #[test]
    fn g3_on_a_remote_identity_weighs_local_observations_and_lists_the_equivocation_once() {
        // A local observation naming another role the same day: a conflict, raised here.
        let mut kb = Kb::default();
        kb.observe("lead", "x@c", "release manager", false, NOW - 2 * H);
        let anchors = [remote("c", "x", "code reviewer", NOW - H)];
        let r = eval_with(&kb, &anchors, "x@c", Some("lead"));
        assert_eq!(
            (r.g3.as_str(), r.verdict.as_str()),
            ("conflict", "untrusted"),
            "{r:?}"
        );
        assert!(
            r.alerts.iter().any(|a| a.starts_with("G3 conflict")),
            "{r:?}"
        );
        assert_eq!(r.reporters, vec!["lead".to_string(), "x@c".to_string()]);
        // Its home signing two roles the same day: untrusted, but not raised a second time
        // (the anchor puller raises it with the proof).
        let both = [
            remote("c", "x", "code reviewer", NOW - 2 * H),
            remote("c", "x", "release manager", NOW - H),
        ];
        let r = eval_with(&Kb::default(), &both, "x@c", Some("lead"));
        assert_eq!(
            (r.g3.as_str(), r.verdict.as_str()),
            ("conflict", "untrusted"),
            "{r:?}"
        );
        assert!(
            !r.alerts.iter().any(|a| a.starts_with("G3 conflict")),
            "{r:?}"
        );
        assert!(
            r.alerts.iter().any(|a| a.starts_with("G3 equivocation")),
            "{r:?}"
        );
        // Agreeing reports: consensus.
        let mut kb = Kb::default();
        kb.observe("lead", "x@c", "code reviewer", false, NOW - 2 * H);
        let r = eval_with(&kb, &anchors, "x@c", Some("lead"));
        assert_eq!(
            (r.g3.as_str(), r.verdict.as_str()),
            ("consensus", "trusted"),
            "{r:?}"
        );
    }
}
