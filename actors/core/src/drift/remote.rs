//! Anchors of identities homed on other hosts, as pulled over the peer links, and G3 across
//! hosts: two anchors signed by the same home host for the same identity in the same UTC day
//! with different roles are an equivocation.
//!
//! Owns which pulled lines count as anchors, how long they are kept, and the equivocation rule
//! (each one reported once, with both signed lines as proof). Pure: lines arrive here already
//! verified against their home host's key (`line::check`); must never read a file or a socket.
//!
//! A drift line does not carry its identity (the schema puts it in its file's header), so which
//! identity a line anchors is what the home host said when it served the line over its
//! authenticated link; lines are only ever taken from their home host directly.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::drift::line::{Kind, Valid};
use crate::drift::role::same_role;
use crate::types::Millis;

const DAY_MS: Millis = 86_400_000;
/// Lines older than this (by their own timestamp) are forgotten, unless they are an identity's
/// latest anchor.
pub const KEEP_MS: Millis = 2 * DAY_MS;
/// At most this many anchors are kept per (home, identity).
pub const MAX_PER_IDENTITY: usize = 64;

/// Two anchors of one identity by one home host conflict: one UTC day, different roles.
fn conflict(a_ts: Millis, a_role: &str, b_ts: Millis, b_role: &str) -> bool {
    a_ts / DAY_MS == b_ts / DAY_MS && !same_role(a_role, b_role)
}

/// Check the proof of an equivocation another host reported: both `lines` verify against the
/// home host's `key`, both are anchors, and they conflict. The proof lists the earlier first.
pub fn check_proof(
    home: String,
    identity: String,
    lines: Vec<String>,
    key: &ed25519_dalek::VerifyingKey,
) -> Result<Equivocation, String> {
    crate::types::MemberName::new(&identity).map_err(|e| e.to_string())?;
    let [a, b] = <[String; 2]>::try_from(lines).map_err(|_| "a proof is two lines")?;
    if a == b {
        return Err("the two lines are the same line".into());
    }
    let mut pair = vec![];
    for (which, l) in [("first", a), ("second", b)] {
        let v = crate::drift::line::check(&l, std::slice::from_ref(key))
            .map_err(|e| format!("the {which} line: {e}"))?;
        match v.baseline.clone() {
            Some(role) if is_anchor(&v) => pair.push((v.ts_ms, role, l)),
            _ => return Err(format!("the {which} line is not an anchor")),
        }
    }
    pair.sort_by_key(|(ts, _, _)| *ts);
    let [(ta, ra, la), (tb, rb, lb)] = <[_; 2]>::try_from(pair).map_err(|_| "two lines")?;
    if !conflict(ta, &ra, tb, &rb) {
        return Err("the two anchors are not on one UTC day with different roles".into());
    }
    Ok(Equivocation {
        home,
        identity,
        day: ta / DAY_MS,
        lines: [la, lb],
        roles: [ra, rb],
    })
}

/// What a home host served, checked against its `key` before anything else looks at it: at most
/// `max` lines, each naming a valid identity, parsed (G1) and verified in one batch (one by one
/// only if the batch fails). Returns the good lines and, for each dropped one, its identity and
/// why.
#[allow(clippy::type_complexity)]
pub fn verify_served(
    served: Vec<(String, String)>,
    key: &ed25519_dalek::VerifyingKey,
    max: usize,
) -> (Vec<(String, Valid, String)>, Vec<(String, String)>) {
    let (mut named, mut dropped) = (vec![], vec![]);
    for (identity, l) in served.into_iter().take(max) {
        match crate::types::MemberName::new(&identity) {
            Ok(_) => named.push((identity, l)),
            Err(e) => dropped.push((identity, e.to_string())),
        }
    }
    let (good, bad) = crate::drift::line::check_batch(named, std::slice::from_ref(key), |_| true);
    dropped.extend(bad);
    (good, dropped)
}

/// Is this verified line an anchor (an identity statement of its own log)?
pub fn is_anchor(v: &Valid) -> bool {
    matches!(v.kind, Kind::Fencepost | Kind::Reanchor)
        && v.baseline.is_some()
        && v.subject.is_none()
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RemoteAnchor {
    pub home: String,
    pub identity: String,
    pub role: String,
    pub ts_ms: Millis,
    pub line: String,
    /// The line as verified against its home host's key (what the local gates read).
    #[serde(skip)]
    pub valid: Valid,
}

/// Two anchors of one identity by one home host in one UTC day, with different roles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Equivocation {
    pub home: String,
    pub identity: String,
    /// The UTC day (days since the epoch) both lines fall in.
    pub day: u64,
    /// Both signed lines, as served: the proof.
    pub lines: [String; 2],
    pub roles: [String; 2],
}

impl Equivocation {
    pub fn text(&self) -> String {
        format!(
            "equivocation: host `{}` signed two anchors for `{}` on the same UTC day with different roles ({:?} and {:?}); both signed lines are kept as proof: {} | {}",
            self.home, self.identity, self.roles[0], self.roles[1], self.lines[0], self.lines[1]
        )
    }
}

/// Every remote anchor held, and the equivocations already reported.
#[derive(Clone, Debug, Default)]
pub struct Remote {
    held: BTreeMap<(String, String), Vec<RemoteAnchor>>,
    reported: BTreeSet<(String, String, u64)>,
}

impl Remote {
    /// Take the anchors `home` served (each verified against `home`'s key), at `now`. Returns
    /// the equivocations not reported before.
    pub fn absorb(
        &mut self,
        home: &str,
        lines: Vec<(String, Valid, String)>,
        now: Millis,
    ) -> Vec<Equivocation> {
        let mut found = vec![];
        let mut lines = lines;
        // Oldest first, so a proof always lists the earlier anchor first.
        lines.sort_by_key(|(_, v, _)| v.ts_ms);
        for (identity, v, line) in lines {
            if !is_anchor(&v) {
                continue;
            }
            let Some(role) = v.baseline.clone() else {
                continue;
            };
            let held = self
                .held
                .entry((home.to_string(), identity.clone()))
                .or_default();
            if held.iter().any(|a| a.line == line) {
                continue;
            }
            // A line past what is kept is history: it is held only as the identity's latest
            // anchor (G2 reads that) and never checked for equivocation, or a home that still
            // serves it would have it raised again at every pull once its report was forgotten.
            let history = v.ts_ms.saturating_add(KEEP_MS) < now;
            if history && held.iter().any(|a| a.ts_ms >= v.ts_ms) {
                continue;
            }
            let day = v.ts_ms / DAY_MS;
            if !history
                && let Some(other) = held
                    .iter()
                    .find(|a| conflict(a.ts_ms, &a.role, v.ts_ms, &role))
                && self
                    .reported
                    .insert((home.to_string(), identity.clone(), day))
            {
                found.push(Equivocation {
                    home: home.to_string(),
                    identity: identity.clone(),
                    day,
                    lines: [other.line.clone(), line.clone()],
                    roles: [other.role.clone(), role.clone()],
                });
            }
            held.push(RemoteAnchor {
                home: home.to_string(),
                identity,
                role,
                ts_ms: v.ts_ms,
                line,
                valid: v,
            });
        }
        self.prune(now);
        found
    }

    /// An equivocation another host reported (its proof verified by the caller): whether it is
    /// new here.
    pub fn note(&mut self, e: &Equivocation) -> bool {
        self.reported
            .insert((e.home.clone(), e.identity.clone(), e.day))
    }

    /// Forget old anchors (keeping each identity's latest) and bound what is kept.
    pub fn prune(&mut self, now: Millis) {
        for v in self.held.values_mut() {
            v.sort_by_key(|a| a.ts_ms);
            let latest = v.last().map(|a| a.ts_ms);
            v.retain(|a| Some(a.ts_ms) == latest || a.ts_ms + KEEP_MS >= now);
            let excess = v.len().saturating_sub(MAX_PER_IDENTITY);
            v.drain(..excess);
        }
        let oldest_day = now.saturating_sub(KEEP_MS) / DAY_MS;
        self.reported.retain(|(_, _, d)| *d >= oldest_day);
    }

    /// Each remote identity's latest anchor.
    pub fn latest(&self) -> Vec<RemoteAnchor> {
        latest_of(&self.all())
    }

    /// Every anchor held, by home, identity and time.
    pub fn all(&self) -> Vec<RemoteAnchor> {
        self.held.values().flatten().cloned().collect()
    }
}

/// The latest of each (home, identity)'s anchors among `all`.
pub fn latest_of(all: &[RemoteAnchor]) -> Vec<RemoteAnchor> {
    let mut by: BTreeMap<(&str, &str), &RemoteAnchor> = BTreeMap::new();
    for a in all {
        let e = by.entry((&a.home, &a.identity)).or_insert(a);
        if a.ts_ms > e.ts_ms {
            *e = a;
        }
    }
    by.into_values().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(ts_ms: Millis, role: &str) -> Valid {
        Valid {
            ts_ms,
            ts: String::new(),
            tick: 1,
            kind: Kind::Fencepost,
            baseline: Some(role.into()),
            clean: true,
            subject: None,
            signer: "k".into(),
        }
    }

    fn l(id: &str, ts: Millis, role: &str) -> (String, Valid, String) {
        (id.into(), anchor(ts, role), format!("{id}|{ts}|{role}"))
    }

    #[test]
    fn two_roles_in_one_day_are_one_equivocation_with_both_lines() {
        let mut r = Remote::default();
        let t = 10 * DAY_MS + 1000;
        assert!(
            r.absorb("c", vec![l("x", t, "code reviewer")], t)
                .is_empty()
        );
        // The same line again, and the same role restated, are not equivocations.
        assert!(
            r.absorb("c", vec![l("x", t, "code reviewer")], t)
                .is_empty()
        );
        assert!(
            r.absorb("c", vec![l("x", t + 5, "code reviewers")], t)
                .is_empty()
        );
        let e = r.absorb("c", vec![l("x", t + 9, "release manager")], t);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].home, "c");
        assert_eq!(e[0].identity, "x");
        assert_eq!(e[0].lines[1], format!("x|{}|release manager", t + 9));
        // Reported once.
        assert!(r.absorb("c", vec![l("x", t + 20, "janitor")], t).is_empty());
    }

    #[test]
    fn served_lines_are_verified_against_the_home_key_in_one_batch() {
        use crate::drift::line::{NewLine, sign};
        let home = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
        let other = ed25519_dalek::SigningKey::from_bytes(&[4u8; 32]);
        let line = |k: &ed25519_dalek::SigningKey, role: &str| {
            sign(&NewLine::anchor(1_796_212_800_000, 1, role), k)
        };
        let good = line(&home, "reviewer");
        let tampered = good.replace("reviewer", "deployer");
        let served = vec![
            ("x".to_string(), good.clone()),
            ("y".to_string(), line(&other, "architect")),
            ("z".to_string(), tampered),
            ("bad name!".to_string(), good.clone()),
            ("w".to_string(), "not json".to_string()),
            ("v".to_string(), good.clone()),
        ];
        let (ok, dropped) = verify_served(served.clone(), &home.verifying_key(), 100);
        let names: Vec<&str> = ok.iter().map(|(i, _, _)| i.as_str()).collect();
        assert_eq!(names, ["x", "v"]);
        assert_eq!(ok[0].1.baseline.as_deref(), Some("reviewer"));
        let why: BTreeMap<&str, &str> = dropped
            .iter()
            .map(|(i, w)| (i.as_str(), w.as_str()))
            .collect();
        assert_eq!(why.len(), 4, "{why:?}");
        assert!(why["z"].contains("does not verify"), "{why:?}");
        assert!(why["y"].contains("does not trust"), "{why:?}");
        // At most `max` lines are looked at.
        assert_eq!(verify_served(served, &home.verifying_key(), 1).0.len(), 1);
    }

    #[test]
    fn old_lines_still_served_are_never_raised_again() {
        let mut r = Remote::default();
        let t = 10 * DAY_MS + 1000;
        let both = vec![l("x", t, "code reviewer"), l("x", t + 9, "release manager")];
        assert_eq!(r.absorb("c", both.clone(), t + 10).len(), 1);
        // Three days on, the home still serves both lines (its newest three date files): the
        // report was forgotten with the lines, and nothing is raised again, pull after pull.
        let later = t + 3 * DAY_MS;
        for _ in 0..3 {
            assert!(r.absorb("c", both.clone(), later).is_empty());
        }
        // The latest of them is still held (G2 reads it), nothing older.
        let held = r.all();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].ts_ms, t + 9);
        // A fresh host that first pulls them then does not raise them either.
        let mut fresh = Remote::default();
        assert!(fresh.absorb("c", both, later).is_empty());
        assert_eq!(fresh.latest()[0].ts_ms, t + 9);
    }

    #[test]
    fn an_equivocation_noted_before_is_not_raised_again() {
        let mut r = Remote::default();
        let t = 10 * DAY_MS + 1000;
        let both = vec![l("x", t, "code reviewer"), l("x", t + 9, "release manager")];
        let e = Remote::default().absorb("c", both.clone(), t + 10);
        // E.g. loaded from its kept proof after a restart.
        assert!(r.note(&e[0]));
        assert!(r.absorb("c", both, t + 10).is_empty());
    }

    #[test]
    fn other_days_other_homes_and_other_identities_do_not_conflict() {
        let mut r = Remote::default();
        let t = 10 * DAY_MS;
        let mut lines = vec![l("x", t + 1, "reviewer")];
        lines.push(l("x", t + DAY_MS + 1, "architect"));
        lines.push(l("y", t + 2, "architect"));
        assert!(r.absorb("c", lines, t).is_empty());
        assert!(
            r.absorb("b", vec![l("x", t + 3, "architect")], t)
                .is_empty()
        );
        assert_eq!(r.latest().len(), 3);
    }

    #[test]
    fn a_reported_proof_must_verify_and_conflict() {
        let k = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        let line = |ts, role: &str| {
            crate::drift::line::sign(&crate::drift::line::NewLine::anchor(ts, 1, role), &k)
        };
        let t = 20 * DAY_MS;
        let (a, b) = (line(t + 1, "reviewer"), line(t + 2, "release manager"));
        let vk = k.verifying_key();
        let e = check_proof("c".into(), "x".into(), vec![b.clone(), a.clone()], &vk).unwrap();
        assert_eq!(e.lines, [a.clone(), b.clone()], "the earlier line first");
        let other = ed25519_dalek::SigningKey::from_bytes(&[8; 32]).verifying_key();
        assert!(check_proof("c".into(), "x".into(), vec![a.clone(), b.clone()], &other).is_err());
        let next_day = line(t + DAY_MS, "release manager");
        assert!(check_proof("c".into(), "x".into(), vec![a.clone(), next_day], &vk).is_err());
        let same = line(t + 3, "reviewers");
        assert!(check_proof("c".into(), "x".into(), vec![a.clone(), same], &vk).is_err());
        assert!(check_proof("c".into(), "x".into(), vec![a], &vk).is_err());
    }

    #[test]
    fn only_anchors_count_and_old_ones_are_forgotten_but_the_latest_is_kept() {
        let mut r = Remote::default();
        let mut drift = anchor(5, "other");
        drift.kind = Kind::Drift;
        let mut about = anchor(6, "other");
        about.subject = Some("y".into());
        assert!(
            r.absorb(
                "c",
                vec![
                    ("x".into(), drift, "d".into()),
                    ("x".into(), about, "a".into())
                ],
                10
            )
            .is_empty()
        );
        assert!(r.latest().is_empty());
        r.absorb("c", vec![l("x", 1, "a"), l("x", 2, "a")], 10 * DAY_MS);
        assert_eq!(r.latest().len(), 1);
        assert_eq!(
            r.held.values().next().unwrap().len(),
            1,
            "only the latest is kept"
        );
    }
}
