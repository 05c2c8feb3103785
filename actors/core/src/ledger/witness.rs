//! Witnessing peers' ledgers, after C2SP tlog-witness adapted to a hash chain: a witness keeps
//! the latest checkpoint it cosigned per origin, and cosigns a new one only if the entries sent
//! with it extend the old one (each entry's `prev` is the hash of the one before, starting from
//! the witnessed head, and the last one hashes to the new head). Two validly signed checkpoints
//! of one origin and size with different heads are an equivocation.
//!
//! Also the offline check: a ledger against what a witness holds. Pure: the shell persists a
//! [`Witnessed`] before it answers with the cosignature. Must never cosign what it did not
//! re-hash.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::ledger::state::{Entry, Header, entry_line, hash, hex, line_of};

/// At most this many entries in one witness request.
pub const MAX_LINES: usize = 2_000;

/// What a witness holds for one origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Witnessed {
    /// The peer that submitted it (whose key signed it).
    pub peer: String,
    pub origin: String,
    pub size: u64,
    /// Hex SHA-256 of entry `size` (of the header for size 0).
    pub head: String,
    /// The checkpoint note as the peer signed it.
    pub note: String,
    /// Set once the peer equivocated: it is refused from then on, and this is the proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equivocation: Option<[String; 2]>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Persist this, then answer with a cosignature of its note.
    Cosign(Witnessed),
    /// The submitter's idea of the witnessed size is wrong: it is this.
    Conflict { size: u64 },
    /// The request is malformed or not acceptable: refuse, saying why.
    Refuse(String),
    /// The entries do not extend what was witnessed: the history before it was changed. Refuse
    /// and alert.
    Diverged(String),
    /// Two signed checkpoints of one origin and size, different heads: keep both (persist the
    /// updated `Witnessed`, which now refuses the peer), alert.
    Equivocation(Witnessed),
}

/// The parsed body of a checkpoint note signed by `key` as its origin.
fn open_checkpoint(note: &str, key: &VerifyingKey) -> Result<(String, u64, [u8; 32]), String> {
    let origin = note
        .lines()
        .next()
        .ok_or("an empty checkpoint")?
        .to_string();
    let body = keys::verify_note(note, &origin, key)
        .map_err(|e| format!("the checkpoint's signature: {e}"))?;
    let mut l = body.lines();
    let _ = l.next();
    let size: u64 = l
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or("the checkpoint has no size")?;
    let head: [u8; 32] = l
        .next()
        .and_then(|s| B64.decode(s).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or("the checkpoint has no 32-byte head")?;
    Ok((origin, size, head))
}

/// Judge a submission from `peer` (signed with `key`): the checkpoint `note`, the size the peer
/// believes is witnessed, and the lines from there to the checkpoint (for a first submission,
/// the header line first).
pub fn judge(
    prev: Option<&Witnessed>,
    peer: &str,
    key: &VerifyingKey,
    note: &str,
    old_size: u64,
    lines: &[String],
) -> Verdict {
    let (origin, size, head) = match open_checkpoint(note, key) {
        Ok(x) => x,
        Err(e) => return Verdict::Refuse(e),
    };
    if lines.len() > MAX_LINES {
        return Verdict::Refuse(format!("more than {MAX_LINES} lines in one request"));
    }
    let fresh = Witnessed {
        peer: peer.to_string(),
        origin: origin.clone(),
        size,
        head: hex(&head),
        note: note.to_string(),
        equivocation: None,
    };
    // The chain is followed as hex heads, as entries name their `prev`.
    let (mut at, mut cur, rest) = match prev {
        Some(w) if w.peer != peer => {
            return Verdict::Refuse(format!(
                "origin {origin} is witnessed here for `{}`, not `{peer}`",
                w.peer
            ));
        }
        Some(w) if w.equivocation.is_some() => {
            return Verdict::Refuse(format!(
                "`{peer}` equivocated on {origin} and is refused; the proof is kept"
            ));
        }
        Some(w) if size == w.size => {
            return if hex(&head) == w.head {
                Verdict::Cosign(w.clone())
            } else {
                let mut w = w.clone();
                w.equivocation = Some([w.note.clone(), note.to_string()]);
                Verdict::Equivocation(w)
            };
        }
        Some(w) if size < w.size || old_size != w.size => {
            return Verdict::Conflict { size: w.size };
        }
        Some(w) => (w.size, w.head.clone(), lines),
        None => {
            if old_size != 0 {
                return Verdict::Conflict { size: 0 };
            }
            let Some((first, rest)) = lines.split_first() else {
                return Verdict::Refuse("a first submission starts with the header line".into());
            };
            match serde_json::from_str::<Header>(first) {
                Ok(h) if h.origin == origin && line_of(&h) == *first => {}
                _ => {
                    return Verdict::Refuse(format!(
                        "a first submission starts with the ledger's header for {origin}"
                    ));
                }
            }
            (0, hex(&hash(first)), rest)
        }
    };
    if rest.len() as u64 != size - at {
        return Verdict::Refuse(format!(
            "{} entries sent; {} extend size {at} to {size}",
            rest.len(),
            size - at
        ));
    }
    for l in rest {
        let e: Entry = match serde_json::from_str(l) {
            Ok(e) => e,
            Err(e) => return Verdict::Refuse(format!("entry {}: {e}", at + 1)),
        };
        if entry_line(&e) != *l {
            return Verdict::Refuse(format!("entry {} is not canonical", at + 1));
        }
        if e.seq != at + 1 || e.prev != cur {
            return Verdict::Diverged(format!(
                "entry {} does not extend the witnessed ledger (size {}, head {}): history before it was changed",
                at + 1,
                prev.map_or(0, |w| w.size),
                prev.map_or(String::new(), |w| w.head.clone())
            ));
        }
        cur = hex(&hash(l));
        at += 1;
    }
    if cur != hex(&head) {
        return Verdict::Refuse(format!(
            "the entries end at head {cur}, the checkpoint says {}",
            hex(&head)
        ));
    }
    Verdict::Cosign(fresh)
}

/// Check a ledger's text against what a witness holds for its origin: the entry at the
/// witnessed size must hash to the witnessed head. `Ok` names what was checked.
pub fn check_against(text: &str, w: &Witnessed) -> Result<String, String> {
    let mut entries = 0u64;
    for l in text.lines().skip(1) {
        let Ok(e) = serde_json::from_str::<Entry>(l) else {
            continue; // checkpoint lines
        };
        entries = e.seq;
        if e.seq == w.size {
            return if hex(&hash(l)) == w.head {
                Ok(format!(
                    "entry {} matches what `{}`'s witness cosigned",
                    w.size, w.peer
                ))
            } else {
                Err(format!(
                    "entry {} differs from what was witnessed (head {} there, {} here): the history up to it was rewritten",
                    w.size,
                    w.head,
                    hex(&hash(l))
                ))
            };
        }
    }
    if w.size == 0 {
        return Ok("nothing witnessed beyond the header".into());
    }
    Err(format!(
        "the ledger has {entries} entries; {} were witnessed: it was truncated",
        w.size
    ))
}

/// This host's own ledger as a submitter sends it to its witnesses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnLedger {
    pub header: String,
    pub entries: Vec<String>,
    /// (size, signed note), in file order.
    pub checkpoints: Vec<(u64, String)>,
}

/// One witness request: a checkpoint, the size the witness holds, and the lines from there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    pub size: u64,
    pub note: String,
    pub old_size: u64,
    pub lines: Vec<String>,
}

impl OwnLedger {
    /// Split this host's ledger file. Its checkpoints were signed by this host's writer: only
    /// their size is read. A torn tail ends it. `None` without a header.
    pub fn parse(text: &str) -> Option<OwnLedger> {
        let mut lines = text.lines();
        let mut own = OwnLedger {
            header: lines.next()?.to_string(),
            ..Default::default()
        };
        for l in lines {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
                break;
            };
            match v.get("checkpoint").and_then(|n| n.as_str()) {
                Some(n) => {
                    if let Some(size) = n.lines().nth(1).and_then(|x| x.parse().ok()) {
                        own.checkpoints.push((size, n.to_string()));
                    }
                }
                None => own.entries.push(l.to_string()),
            }
        }
        Some(own)
    }

    /// What to send a witness that holds `witnessed` entries: the smallest checkpoint past it,
    /// with the entries from there to it (the header first on a first submission). `None` when
    /// nothing is new (or the checkpoint is past the entries read, a torn tail).
    pub fn next(&self, witnessed: u64) -> Option<Submission> {
        let (size, note) = self
            .checkpoints
            .iter()
            .filter(|(s, _)| *s > witnessed)
            .min_by_key(|(s, _)| *s)?;
        let entries = self
            .entries
            .get(usize::try_from(witnessed).ok()?..usize::try_from(*size).ok()?)?;
        let mut lines = Vec::with_capacity(entries.len() + 1);
        if witnessed == 0 {
            lines.push(self.header.clone());
        }
        lines.extend(entries.iter().cloned());
        Some(Submission {
            size: *size,
            note: note.clone(),
            old_size: witnessed,
            lines,
        })
    }

    /// This host's checkpoint of `size`, if it signed one.
    pub fn checkpoint(&self, size: u64) -> Option<&str> {
        self.checkpoints
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, n)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::event::DecisionEvent;
    use crate::ledger::state::{Author, LedgerCore};
    use ed25519_dalek::SigningKey;

    fn ledger(n: u64, subject: &str) -> (Vec<String>, LedgerCore) {
        let (mut core, header) = LedgerCore::create("fleetd/a/ledger", 4);
        let mut lines = vec![header];
        for i in 0..n {
            let ev = DecisionEvent::Open {
                decision: crate::types::DecisionId(i + 1),
                subject: subject.into(),
                slots: vec!["s".into()],
                deadline: "2026-12-03T00:00:00.000Z".into(),
                max_rounds: 2,
            };
            let (_, l) = core.append(
                Author {
                    member: "lead".into(),
                    role: "primary".into(),
                    slot: None,
                },
                ev,
                1_000 + i,
            );
            lines.push(l);
        }
        (lines, core)
    }

    fn note(core: &LedgerCore, key: &SigningKey) -> String {
        keys::sign_note(
            &crate::ledger::state::checkpoint_body(&core.origin, core.seq, &core.head),
            &core.origin,
            key,
        )
    }

    #[test]
    fn a_submitter_sends_the_next_checkpoint_with_the_entries_since_the_witnessed_size() {
        let k = SigningKey::from_bytes(&[3; 32]);
        let (lines, core3) = ledger(3, "x");
        let (lines5, core5) = ledger(5, "x");
        let mut text = lines[..4].join("\n") + "\n";
        text += &(crate::ledger::state::checkpoint_line(&note(&core3, &k)) + "\n");
        text += &(lines5[4..6].join("\n") + "\n");
        text += &(crate::ledger::state::checkpoint_line(&note(&core5, &k)) + "\n");
        text += "{\"torn";
        let own = OwnLedger::parse(&text).unwrap();
        assert_eq!((own.entries.len(), own.checkpoints.len()), (5, 2));
        let first = own.next(0).unwrap();
        assert_eq!((first.size, first.old_size), (3, 0));
        assert_eq!(first.lines, lines[..4].to_vec());
        let then = own.next(3).unwrap();
        assert_eq!((then.size, &then.lines), (5, &lines5[4..6].to_vec()));
        assert_eq!(own.next(5), None);
        assert_eq!(own.checkpoint(3), Some(note(&core3, &k).as_str()));
        // What it sends is what a witness cosigns.
        let vk = k.verifying_key();
        let Verdict::Cosign(w) = judge(None, "a", &vk, &first.note, 0, &first.lines) else {
            panic!()
        };
        assert!(matches!(
            judge(Some(&w), "a", &vk, &then.note, 3, &then.lines),
            Verdict::Cosign(_)
        ));
    }

    #[test]
    fn first_then_extension_then_idempotent_then_equivocation() {
        let k = SigningKey::from_bytes(&[3; 32]);
        let vk = k.verifying_key();
        let (lines, core) = ledger(3, "x");
        let n3 = note(&core, &k);
        let Verdict::Cosign(w) = judge(None, "a", &vk, &n3, 0, &lines) else {
            panic!()
        };
        assert_eq!(w.size, 3);
        // Growing: only the new entries, from the witnessed size.
        let (lines5, core5) = ledger(5, "x");
        let n5 = note(&core5, &k);
        assert_eq!(
            judge(Some(&w), "a", &vk, &n5, 0, &lines5[4..]),
            Verdict::Conflict { size: 3 }
        );
        let Verdict::Cosign(w5) = judge(Some(&w), "a", &vk, &n5, 3, &lines5[4..]) else {
            panic!()
        };
        assert_eq!(w5.size, 5);
        assert!(matches!(
            judge(Some(&w5), "a", &vk, &n5, 5, &[]),
            Verdict::Cosign(_)
        ));
        // A rewritten history: its entries do not extend the witnessed head.
        let (other, core_o) = ledger(7, "y");
        let n7 = note(&core_o, &k);
        assert!(matches!(
            judge(Some(&w5), "a", &vk, &n7, 5, &other[6..]),
            Verdict::Diverged(r) if r.contains("does not extend")
        ));
        // A checkpoint of the same size with another head: equivocation, then refusal.
        let (_, core_o5) = ledger(5, "y");
        let e = judge(Some(&w5), "a", &vk, &note(&core_o5, &k), 5, &[]);
        let Verdict::Equivocation(we) = e else {
            panic!("{e:?}")
        };
        assert_eq!(we.equivocation.as_ref().unwrap()[0], n5);
        assert!(matches!(
            judge(Some(&we), "a", &vk, &n5, 5, &[]),
            Verdict::Refuse(_)
        ));
        // The offline check.
        let text = lines5.join("\n") + "\n";
        assert!(check_against(&text, &w5).is_ok());
        let rewritten = ledger(5, "y").0.join("\n") + "\n";
        assert!(
            check_against(&rewritten, &w5)
                .unwrap_err()
                .contains("rewritten")
        );
        let short = lines5[..3].join("\n") + "\n";
        assert!(
            check_against(&short, &w5)
                .unwrap_err()
                .contains("truncated")
        );
    }

    #[test]
    fn bad_signatures_other_peers_and_bad_lines_are_refused() {
        let k = SigningKey::from_bytes(&[3; 32]);
        let other = SigningKey::from_bytes(&[4; 32]);
        let (lines, core) = ledger(2, "x");
        let n = note(&core, &k);
        assert!(matches!(
            judge(None, "a", &other.verifying_key(), &n, 0, &lines),
            Verdict::Refuse(_)
        ));
        assert!(matches!(
            judge(None, "a", &k.verifying_key(), &n, 0, &lines[1..]),
            Verdict::Refuse(_)
        ));
        let mut tampered = lines.clone();
        tampered[2] = tampered[2].replace("\"x\"", "\"z\"");
        assert!(matches!(
            judge(None, "a", &k.verifying_key(), &n, 0, &tampered),
            Verdict::Refuse(_)
        ));
        let Verdict::Cosign(w) = judge(None, "a", &k.verifying_key(), &n, 0, &lines) else {
            panic!()
        };
        assert!(matches!(
            judge(Some(&w), "b", &k.verifying_key(), &n, 2, &[]),
            Verdict::Refuse(_)
        ));
    }
}
