//! The ledger core: the append-only decision log's format, its hash chain, its signed
//! checkpoints, and the verifier.
//!
//! Owns the canonical encoding (JSON, object keys sorted, no whitespace: the line written *is*
//! the canonical encoding, so `sha256` of a line's bytes is its hash), the chain rule (each
//! entry's `prev` is the hash of the line before it; entry 1's is the header's), the checkpoint
//! cadence (every `checkpoint_every` entries and at each close) and the C2SP tlog-checkpoint
//! body. Pure: the writer shell does the I/O. Must never judge what an entry says.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::decision::event::DecisionEvent;
use crate::keys;
use crate::types::Millis;

/// The format name in the header line.
pub const FORMAT: &str = "fleetd.ledger/1";

/// Upper bounds, in seconds, of the write-and-sync latency buckets: 25 µs doubling to ~1.6 s,
/// then +Inf.
pub fn sync_bucket_bounds() -> impl Iterator<Item = f64> {
    (0..17)
        .map(|i| 25e-6 * f64::powi(2.0, i))
        .chain(std::iter::once(f64::INFINITY))
}

/// How long the writer's `write` + `fdatasync` calls took: a histogram with fixed buckets
/// (`sync_bucket_bounds`), kept by the writer and read by `/metrics`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SyncTimes {
    /// Syncs done.
    pub count: u64,
    pub sum_seconds: f64,
    /// Per bucket (not cumulative): (upper bound in seconds, syncs that fell in it).
    #[serde(skip)]
    pub buckets: Vec<(f64, u64)>,
}

impl SyncTimes {
    pub fn observe(&mut self, seconds: f64) {
        if self.buckets.is_empty() {
            self.buckets = sync_bucket_bounds().map(|b| (b, 0)).collect();
        }
        self.count += 1;
        self.sum_seconds += seconds;
        if let Some(b) = self.buckets.iter_mut().find(|(le, _)| seconds <= *le) {
            b.1 += 1;
        } else if let Some(last) = self.buckets.last_mut() {
            // NaN: counted in +Inf, as Prometheus does.
            last.1 += 1;
        }
    }
}

/// Who wrote an entry, as the daemon resolved it from the connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Author {
    pub member: String,
    pub role: String,
    pub slot: Option<String>,
}

/// One accepted event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub seq: u64,
    /// RFC 3339, UTC, millisecond precision, from the daemon's clock.
    pub ts: String,
    pub actor: Author,
    pub event: DecisionEvent,
    /// Hex SHA-256 of the previous line (the header, for entry 1).
    pub prev: String,
}

/// The first line of every ledger file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub origin: String,
    pub checkpoint_every: u64,
}

/// Serialize any JSON value canonically: object keys sorted (by UTF-8 bytes), no whitespace,
/// strings as serde_json escapes them, numbers as integers.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                write_canonical(&m[*k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn push_str_json(out: &mut String, s: &str) {
    // serde_json's string escaping, the same as `canonical` uses (a property test holds it to
    // that), written in place: `"` and `\\` and the C0 controls, the short forms where JSON has
    // them, else `\u00xx` in lower-case hex; everything else as it is.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let mut start = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        // Escaped bytes are ASCII, so `start..i` is on character boundaries.
        out.push_str(&s[start..i]);
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(short);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn push_opt_str_json(out: &mut String, s: &Option<String>) {
    match s {
        Some(s) => push_str_json(out, s),
        None => out.push_str("null"),
    }
}

/// The canonical line of an entry, written directly in sorted-key order (the append hot path).
/// Equal to `line_of(entry)` by construction; a property test holds it to that.
pub fn entry_line(e: &Entry) -> String {
    let mut o = String::with_capacity(320);
    push_entry_body(&mut o, &e.actor, &e.event);
    push_entry_tail(&mut o, &e.prev, e.seq, &e.ts);
    o
}

/// An entry's line up to its `prev`: its author and event, which do not depend on the chain.
fn push_entry_body(o: &mut String, actor: &Author, event: &DecisionEvent) {
    use crate::decision::event::{Outcome, SlotResult};
    use std::fmt::Write;
    o.push_str("{\"actor\":{\"member\":");
    push_str_json(o, &actor.member);
    o.push_str(",\"role\":");
    push_str_json(o, &actor.role);
    o.push_str(",\"slot\":");
    push_opt_str_json(o, &actor.slot);
    o.push_str("},\"event\":{");
    match event {
        DecisionEvent::Open {
            decision,
            subject,
            slots,
            deadline,
            max_rounds,
        } => {
            o.push_str("\"deadline\":");
            push_str_json(o, deadline);
            let _ = write!(
                o,
                ",\"decision\":\"{decision}\",\"max_rounds\":{max_rounds},\"slots\":["
            );
            for (i, sl) in slots.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                push_str_json(o, sl);
            }
            o.push_str("],\"subject\":");
            push_str_json(o, subject);
            o.push_str(",\"type\":\"open\"");
        }
        DecisionEvent::Position {
            decision,
            slot,
            round,
            content,
        }
        | DecisionEvent::Abstain {
            decision,
            slot,
            round,
            content,
        } => {
            o.push_str("\"content\":");
            push_str_json(o, content);
            let _ = write!(
                o,
                ",\"decision\":\"{decision}\",\"round\":{round},\"slot\":"
            );
            push_str_json(o, slot);
            o.push_str(if matches!(event, DecisionEvent::Position { .. }) {
                ",\"type\":\"position\""
            } else {
                ",\"type\":\"abstain\""
            });
        }
        DecisionEvent::Close {
            decision,
            outcome,
            slots,
            verdict,
            rationale,
        } => {
            let _ = write!(
                o,
                "\"decision\":\"{decision}\",\"outcome\":\"{}\",\"rationale\":",
                match outcome {
                    Outcome::Quorate => "quorate",
                    Outcome::Degraded => "degraded",
                }
            );
            push_str_json(o, rationale);
            o.push_str(",\"slots\":[");
            for (i, so) in slots.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                let r = match so.outcome {
                    SlotResult::Position => "position",
                    SlotResult::Abstain => "abstain",
                    SlotResult::Timeout => "timeout",
                };
                let _ = write!(o, "{{\"outcome\":\"{r}\",\"round\":");
                match so.round {
                    Some(n) => o.push_str(&n.to_string()),
                    None => o.push_str("null"),
                }
                o.push_str(",\"slot\":");
                push_str_json(o, &so.slot);
                o.push('}');
            }
            o.push_str("],\"type\":\"close\",\"verdict\":");
            push_str_json(o, verdict);
        }
    }
}

/// The rest of an entry's line: what the chain gives it.
fn push_entry_tail(o: &mut String, prev: &str, seq: u64, ts: &str) {
    use std::fmt::Write;
    o.push_str("},\"prev\":");
    push_str_json(o, prev);
    let _ = write!(o, ",\"seq\":{seq},\"ts\":");
    push_str_json(o, ts);
    o.push('}');
}

/// An entry's author and event, encoded and hashed as far as they go before it is chained: its
/// line up to `prev`, and SHA-256 fed with that much. A caller prepares its entry on its own
/// time; the chain ([`LedgerCore::chain`]) then adds only what depends on its tip.
#[derive(Clone)]
pub struct Prepared {
    actor: Author,
    event: DecisionEvent,
    line: String,
    hasher: Sha256,
}

impl Prepared {
    pub fn new(actor: Author, event: DecisionEvent) -> Prepared {
        let mut line = String::with_capacity(480);
        push_entry_body(&mut line, &actor, &event);
        let mut hasher = Sha256::new();
        hasher.update(line.as_bytes());
        Prepared {
            actor,
            event,
            line,
            hasher,
        }
    }
}

/// The canonical line of a serializable value.
pub fn line_of<T: Serialize>(v: &T) -> String {
    canonical(&serde_json::to_value(v).unwrap_or(Value::Null))
}

/// SHA-256 of a line's bytes (without its newline).
pub fn hash(line: &str) -> [u8; 32] {
    Sha256::digest(line.as_bytes()).into()
}

pub fn hex(h: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in h {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// The checkpoint body (C2SP tlog-checkpoint): origin, size, base64 head hash.
pub fn checkpoint_body(origin: &str, size: u64, head: &[u8; 32]) -> String {
    format!("{origin}\n{size}\n{}\n", B64.encode(head))
}

/// A checkpoint line: `{"checkpoint": "<signed note>"}`.
pub fn checkpoint_line(note: &str) -> String {
    // The canonical encoding of that one-key object, written directly (the writer's hot path);
    // a test holds it to `line_of`.
    let mut o = String::with_capacity(note.len() + 24);
    o.push_str("{\"checkpoint\":");
    push_str_json(&mut o, note);
    o.push('}');
    o
}

/// The writer's state: where the chain stands and when a checkpoint is due.
#[derive(Clone, Debug)]
pub struct LedgerCore {
    pub origin: String,
    pub every: u64,
    /// Seq of the last entry (0 before the first).
    pub seq: u64,
    /// Hash of the last line of the chain (the header's, before the first entry).
    pub head: [u8; 32],
    /// Size of the last checkpoint written.
    pub checkpointed: u64,
    /// Entries that need their own checkpoint (a close, or a multiple of `every`), not yet signed.
    pub due: Vec<(u64, [u8; 32])>,
    /// The last entry's time and its RFC 3339 text (appends in the same millisecond reuse it).
    ts: (Millis, String),
}

impl LedgerCore {
    /// A new ledger: returns the core and the header line to write first.
    pub fn create(origin: &str, every: u64) -> (LedgerCore, String) {
        let header = line_of(&Header {
            format: FORMAT.into(),
            origin: origin.into(),
            checkpoint_every: every.max(1),
        });
        let core = LedgerCore {
            origin: origin.into(),
            every: every.max(1),
            seq: 0,
            head: hash(&header),
            checkpointed: 0,
            due: vec![],
            ts: (0, String::new()),
        };
        (core, header)
    }

    /// Append an event: the entry and its line. The caller must write and fsync the line
    /// before anyone is told, and before [`LedgerCore::checkpoints`] covers it.
    pub fn append(&mut self, actor: Author, event: DecisionEvent, now: Millis) -> (Entry, String) {
        self.chain(Prepared::new(actor, event), now)
    }

    /// [`LedgerCore::append`] of an entry prepared beforehand.
    pub fn chain(&mut self, p: Prepared, now: Millis) -> (Entry, String) {
        let Prepared {
            actor,
            event,
            mut line,
            mut hasher,
        } = p;
        let is_close = matches!(event, DecisionEvent::Close { .. });
        if self.ts.1.is_empty() || self.ts.0 != now {
            self.ts = (now, crate::clock::rfc3339(now));
        }
        let entry = Entry {
            seq: self.seq + 1,
            ts: self.ts.1.clone(),
            actor,
            event,
            prev: hex(&self.head),
        };
        let body = line.len();
        push_entry_tail(&mut line, &entry.prev, entry.seq, &entry.ts);
        hasher.update(&line.as_bytes()[body..]);
        self.seq = entry.seq;
        self.head = hasher.finalize().into();
        if is_close || self.seq.is_multiple_of(self.every) {
            self.due.push((self.seq, self.head));
        }
        (entry, line)
    }

    /// The checkpoints now due, signed, one per due entry (its size is that entry's seq); call
    /// only after those entries are synced.
    pub fn checkpoints(&mut self, key: &SigningKey) -> Vec<String> {
        self.checkpointed = self.seq;
        let due = std::mem::take(&mut self.due);
        sign_checkpoints(&self.origin, &due, key)
    }
}

/// The signed checkpoint lines of `due` entries ((seq, hash of its line) each); only once those
/// entries are synced.
pub fn sign_checkpoints(origin: &str, due: &[(u64, [u8; 32])], key: &SigningKey) -> Vec<String> {
    due.iter()
        .map(|(size, head)| {
            checkpoint_line(&keys::sign_note(
                &checkpoint_body(origin, *size, head),
                origin,
                key,
            ))
        })
        .collect()
}

/// What a verification found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub origin: String,
    /// The header's checkpoint cadence.
    pub checkpoint_every: u64,
    pub entries: u64,
    pub checkpoints: u64,
    /// Checkpoints whose signature was checked against the given key.
    pub signatures_checked: bool,
    /// Hex hash of the last entry (the header's if there are none).
    pub head: String,
    /// A final line without its newline (a crash during an append), by line number.
    pub torn_tail: Option<usize>,
    /// Entries whose checkpoint is due but not present yet (only at the tail: a crash between
    /// the append and its checkpoint; the writer adds them at start).
    pub pending_checkpoints: Vec<u64>,
}

/// The first thing wrong with a ledger: the 1-based line number and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bad {
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Verify a whole ledger text: the header, every entry's canonical form, sequence and chain, and
/// every checkpoint: its hash against the chain, its place in the cadence (every due entry is
/// covered by the run of checkpoint lines that follows its batch), and, with `key`, its
/// signature. Decision content is not judged: a ledger verifies without trusting what it says.
pub fn verify(text: &str, key: Option<&VerifyingKey>) -> Result<Report, Bad> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let mut torn_tail = None;
    match lines.last() {
        Some(&"") => {
            lines.pop();
        }
        Some(_) => torn_tail = Some(lines.len()),
        None => {}
    }
    let full = if torn_tail.is_some() {
        &lines[..lines.len() - 1]
    } else {
        &lines[..]
    };
    let Some(first) = full.first() else {
        return Err(Bad {
            line: 1,
            reason: "empty ledger: no header line".into(),
        });
    };
    let hv: Value = serde_json::from_str(first).map_err(|e| Bad {
        line: 1,
        reason: format!("the header is not JSON: {e}"),
    })?;
    if canonical(&hv) != *first {
        return Err(Bad {
            line: 1,
            reason: "the header is not in canonical form (edited by hand?)".into(),
        });
    }
    let header: Header = serde_json::from_value(hv).map_err(|e| Bad {
        line: 1,
        reason: format!("not a ledger header: {e}"),
    })?;
    if header.format != FORMAT {
        return Err(Bad {
            line: 1,
            reason: format!("unknown format {:?} (expected {FORMAT:?})", header.format),
        });
    }
    // hashes[seq] = hash of entry seq's line; hashes[0] = the header's.
    let mut hashes: Vec<[u8; 32]> = vec![hash(first)];
    let mut entry_line: Vec<usize> = vec![1];
    let mut due: Vec<u64> = vec![];
    let mut checkpoints = 0u64;
    let mut last_cp = 0u64;
    let mut in_run = false;
    let end_of_run = |due: &Vec<u64>, seen: u64, n: usize| -> Result<(), Bad> {
        match due.iter().find(|&&d| d <= seen) {
            Some(d) => Err(Bad {
                line: n,
                reason: format!(
                    "no checkpoint for entry {d}, which needs one (every {} entries and at each close): a checkpoint line was removed",
                    header.checkpoint_every
                ),
            }),
            None => Ok(()),
        }
    };
    for (i, line) in full.iter().enumerate().skip(1) {
        let n = i + 1;
        let bad = |reason: String| Bad { line: n, reason };
        let v: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        if canonical(&v) != *line {
            return Err(bad(
                "not in canonical form: the line was edited by hand".into()
            ));
        }
        if let Some(note) = v.get("checkpoint") {
            let note = note
                .as_str()
                .ok_or_else(|| bad("checkpoint is not a string".into()))?;
            if v.as_object().is_some_and(|o| o.len() != 1) {
                return Err(bad("a checkpoint line has extra fields".into()));
            }
            let body = match key {
                Some(k) => keys::verify_note(note, &header.origin, k)
                    .map_err(|e| bad(format!("forged checkpoint: {e}")))?,
                None => note
                    .rsplit_once("\n\n")
                    .map(|(b, _)| b)
                    .ok_or_else(|| bad("checkpoint is not a signed note".into()))?,
            };
            let mut parts = body.trim_end_matches('\n').split('\n');
            let (o, size, h) = (parts.next(), parts.next(), parts.next());
            if o != Some(header.origin.as_str()) {
                return Err(bad(format!(
                    "checkpoint origin {o:?} is not the ledger's {:?}",
                    header.origin
                )));
            }
            let size: u64 = size
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("checkpoint size is not a number".into()))?;
            let seen = hashes.len() as u64 - 1;
            if size == 0 || size > seen {
                return Err(bad(format!(
                    "checkpoint covers {size} entries but only {seen} precede it"
                )));
            }
            if size < last_cp {
                return Err(bad(format!(
                    "checkpoint size {size} goes back from {last_cp}"
                )));
            }
            let h = h
                .and_then(|h| B64.decode(h).ok())
                .ok_or_else(|| bad("checkpoint hash is not base64".into()))?;
            if h.as_slice() != hashes[size as usize] {
                return Err(bad(format!(
                    "checkpoint head hash does not match entry {size} (line {}): that entry or an earlier one was changed",
                    entry_line[size as usize]
                )));
            }
            due.retain(|&d| d != size);
            last_cp = size;
            checkpoints += 1;
            in_run = true;
            continue;
        }
        if in_run {
            // A run of checkpoint lines closed the batch before it: every due entry is covered.
            end_of_run(&due, hashes.len() as u64 - 1, n - 1)?;
            in_run = false;
        }
        let e: Entry =
            serde_json::from_value(v).map_err(|e| bad(format!("not a ledger entry: {e}")))?;
        let expected = hashes.len() as u64;
        if e.seq != expected {
            return Err(bad(format!(
                "expected entry {expected}, found entry {}: entries were removed, inserted or reordered",
                e.seq
            )));
        }
        let prev = hashes[hashes.len() - 1];
        if e.prev != hex(&prev) {
            return Err(bad(format!(
                "prev is not the hash of the entry before it (line {}): that line or an earlier one was changed",
                entry_line[entry_line.len() - 1]
            )));
        }
        hashes.push(hash(line));
        entry_line.push(n);
        if matches!(e.event, DecisionEvent::Close { .. })
            || e.seq.is_multiple_of(header.checkpoint_every)
        {
            due.push(e.seq);
        }
    }
    if in_run {
        end_of_run(&due, hashes.len() as u64 - 1, full.len())?;
    }
    Ok(Report {
        origin: header.origin,
        checkpoint_every: header.checkpoint_every,
        entries: hashes.len() as u64 - 1,
        checkpoints,
        signatures_checked: key.is_some(),
        head: hex(&hashes[hashes.len() - 1]),
        torn_tail,
        pending_checkpoints: due,
    })
}

/// Parse every whole entry of a ledger text (for replay); stops at the first bad line.
pub fn entries(text: &str) -> Vec<Entry> {
    text.split_terminator('\n')
        .skip(1)
        .filter(|l| !l.starts_with("{\"checkpoint\""))
        .map_while(|l| serde_json::from_str::<Entry>(l).ok())
        .collect()
}

/// Resume a writer on an existing, verified ledger (without its torn tail, if it had one):
/// due checkpoints that a crash kept from being written are due again.
pub fn resume(report: &Report, text: &str) -> LedgerCore {
    let chain: Vec<&str> = text
        .split_terminator('\n')
        .filter(|l| !l.starts_with("{\"checkpoint\""))
        .collect();
    let head = chain.last().map(|l| hash(l)).unwrap_or([0; 32]);
    LedgerCore {
        origin: report.origin.clone(),
        every: report.checkpoint_every.max(1),
        seq: report.entries,
        head,
        checkpointed: report.entries,
        due: report
            .pending_checkpoints
            .iter()
            .filter_map(|&s| chain.get(s as usize).map(|l| (s, hash(l))))
            .collect(),
        ts: (0, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::event::{Outcome, SlotOutcome, SlotResult};
    use crate::types::DecisionId;
    use proptest::prelude::*;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[42u8; 32])
    }

    #[test]
    fn sync_times_put_each_sync_in_the_first_bucket_that_holds_it() {
        let mut t = SyncTimes::default();
        for s in [10e-6, 25e-6, 26e-6, 0.002, 5.0, f64::NAN] {
            t.observe(s);
        }
        assert_eq!(t.count, 6);
        let counts: Vec<u64> = t.buckets.iter().map(|b| b.1).collect();
        assert_eq!(counts.iter().sum::<u64>(), 6);
        // 10 µs and 25 µs in the first (≤ 25 µs), 26 µs in the second (≤ 50 µs).
        assert_eq!(&counts[..2], &[2, 1]);
        // 2 ms: ≤ 3.2 ms is the eighth bound (25 µs · 2^7).
        assert_eq!(counts[7], 1);
        // 5 s and NaN beyond the last finite bound (~1.6 s): +Inf.
        assert_eq!(
            t.buckets.last().map(|b| (b.0, b.1)),
            Some((f64::INFINITY, 2))
        );
    }

    fn author(m: &str, role: &str, slot: Option<&str>) -> Author {
        Author {
            member: m.into(),
            role: role.into(),
            slot: slot.map(String::from),
        }
    }

    /// A ledger of `n` entries (decisions of one open, two positions, one close each), written
    /// the way the writer writes it: entries, then the checkpoints due after each batch.
    fn build(n: usize, every: u64, batch: usize) -> String {
        let (mut core, header) = LedgerCore::create("fleetd/test/ledger", every);
        let mut out = vec![header];
        let mut pending = 0;
        for i in 0..n {
            let d = DecisionId(i as u64 / 4 + 1);
            let ev = match i % 4 {
                0 => DecisionEvent::Open {
                    decision: d,
                    subject: format!("s{i}"),
                    slots: vec!["opus".into(), "sol".into()],
                    deadline: "2026-12-02T00:00:00.000Z".into(),
                    max_rounds: 2,
                },
                1 => DecisionEvent::Position {
                    decision: d,
                    slot: "opus".into(),
                    round: 1,
                    content: "a".into(),
                },
                2 => DecisionEvent::Abstain {
                    decision: d,
                    slot: "sol".into(),
                    round: 1,
                    content: "b".into(),
                },
                _ => DecisionEvent::Close {
                    decision: d,
                    outcome: Outcome::Quorate,
                    slots: vec![SlotOutcome {
                        slot: "opus".into(),
                        outcome: SlotResult::Position,
                        round: Some(1),
                    }],
                    verdict: "v".into(),
                    rationale: "r".into(),
                },
            };
            let who = if i % 4 == 1 || i % 4 == 2 {
                author("a", "architect", Some("opus"))
            } else {
                author("lead", "primary", None)
            };
            let (_, line) = core.append(who, ev, 1_700_000_000_000 + i as u64);
            out.push(line);
            pending += 1;
            if pending == batch || i + 1 == n {
                out.extend(core.checkpoints(&key()));
                pending = 0;
            }
        }
        out.join("\n") + "\n"
    }

    fn lines(t: &str) -> Vec<String> {
        t.split_terminator('\n').map(String::from).collect()
    }

    fn join(ls: &[String]) -> String {
        ls.join("\n") + "\n"
    }

    #[test]
    fn a_clean_ledger_verifies_with_and_without_the_key() {
        let t = build(12, 4, 3);
        let vk = key().verifying_key();
        let r = verify(&t, Some(&vk)).unwrap();
        assert_eq!(r.entries, 12);
        assert!(r.checkpoints >= 3);
        assert!(r.signatures_checked);
        assert!(r.pending_checkpoints.is_empty());
        assert!(!verify(&t, None).unwrap().signatures_checked);
    }

    #[test]
    fn every_kind_of_tampering_is_caught_at_the_right_line() {
        let t = build(12, 4, 3);
        let vk = key().verifying_key();
        let ls = lines(&t);
        let entry_idx: Vec<usize> = (1..ls.len())
            .filter(|&i| !ls[i].starts_with("{\"checkpoint\""))
            .collect();
        // Edit an entry's content (kept canonical): the next entry's prev no longer matches.
        let mut e = ls.clone();
        e[entry_idx[1]] = e[entry_idx[1]].replace("\"content\":\"a\"", "\"content\":\"A\"");
        let bad = verify(&join(&e), Some(&vk)).unwrap_err();
        assert_eq!(bad.line, entry_idx[2] + 1, "{bad}");
        assert!(bad.reason.contains("prev is not the hash"), "{bad}");
        // Edit by hand with whitespace: not canonical.
        let mut e = ls.clone();
        e[entry_idx[0]] = e[entry_idx[0]].replacen(',', ", ", 1);
        assert!(
            verify(&join(&e), Some(&vk))
                .unwrap_err()
                .reason
                .contains("canonical")
        );
        // Delete an entry in the middle.
        let mut e = ls.clone();
        e.remove(entry_idx[4]);
        let bad = verify(&join(&e), Some(&vk)).unwrap_err();
        assert!(bad.reason.contains("expected entry 5"), "{bad}");
        // Reorder two entries.
        let mut e = ls.clone();
        e.swap(entry_idx[5], entry_idx[6]);
        assert!(verify(&join(&e), Some(&vk)).is_err());
        // Truncate the middle (entries 3..=6 gone).
        let mut e = ls.clone();
        e.drain(entry_idx[2]..=entry_idx[5]);
        assert!(verify(&join(&e), Some(&vk)).is_err());
        // Forge a checkpoint: re-sign a body with another key.
        let cp = (1..ls.len())
            .find(|&i| ls[i].starts_with("{\"checkpoint\""))
            .unwrap();
        let mut e = ls.clone();
        let v: Value = serde_json::from_str(&e[cp]).unwrap();
        let note = v["checkpoint"].as_str().unwrap();
        let body = &note[..note.rfind("\n\n").unwrap() + 1];
        e[cp] = checkpoint_line(&keys::sign_note(
            body,
            "fleetd/test/ledger",
            &SigningKey::from_bytes(&[1u8; 32]),
        ));
        let bad = verify(&join(&e), Some(&vk)).unwrap_err();
        assert_eq!(bad.line, cp + 1);
        assert!(bad.reason.contains("forged checkpoint"), "{bad}");
        // A checkpoint whose body was edited (a smaller size) fails its signature.
        let size = note.split('\n').nth(1).unwrap();
        let mut e = ls.clone();
        e[cp] = e[cp].replacen(
            &format!("\\n{size}\\n"),
            &format!("\\n{}\\n", size.parse::<u64>().unwrap() - 1),
            1,
        );
        assert_ne!(e[cp], ls[cp]);
        assert!(verify(&join(&e), Some(&vk)).is_err());
        // Remove a checkpoint in the middle: the cadence says one is missing.
        let mut e = ls.clone();
        e.remove(cp);
        let bad = verify(&join(&e), Some(&vk)).unwrap_err();
        assert!(bad.reason.contains("no checkpoint for entry"), "{bad}");
        // Edit the header: entry 1's prev no longer matches.
        let mut e = ls.clone();
        e[0] = e[0].replace("\"checkpoint_every\":4", "\"checkpoint_every\":400");
        assert!(verify(&join(&e), Some(&vk)).is_err());
    }

    #[test]
    fn a_torn_tail_is_reported_not_accepted() {
        let t = build(5, 4, 5);
        let torn = format!("{}{{\"seq\":6,\"ts", t);
        let r = verify(&torn, Some(&key().verifying_key())).unwrap();
        assert_eq!(r.torn_tail, Some(lines(&t).len() + 1));
        assert_eq!(r.entries, 5);
    }

    #[test]
    fn a_crash_between_append_and_checkpoint_leaves_them_pending_and_resume_writes_them() {
        let (mut core, header) = LedgerCore::create("fleetd/test/ledger", 2);
        let mut out = vec![header];
        for i in 0..2 {
            let (_, line) = core.append(
                author("lead", "primary", None),
                DecisionEvent::Position {
                    decision: DecisionId(1),
                    slot: "opus".into(),
                    round: i + 1,
                    content: "x".into(),
                },
                0,
            );
            out.push(line);
        }
        // Crash: the checkpoint for entry 2 was never written.
        let t = join(&out);
        let r = verify(&t, Some(&key().verifying_key())).unwrap();
        assert_eq!(r.pending_checkpoints, vec![2]);
        let mut resumed = resume(&r, &t);
        let cps = resumed.checkpoints(&key());
        assert_eq!(cps.len(), 1);
        out.extend(cps);
        let r = verify(&join(&out), Some(&key().verifying_key())).unwrap();
        assert!(r.pending_checkpoints.is_empty());
        assert_eq!(r.checkpoints, 1);
    }

    /// The test vectors of docs/ledger.md.
    #[test]
    fn test_vectors() {
        let (mut core, header) = LedgerCore::create("fleetd/example/ledger", 16);
        assert_eq!(
            header,
            r#"{"checkpoint_every":16,"format":"fleetd.ledger/1","origin":"fleetd/example/ledger"}"#
        );
        assert_eq!(
            hex(&hash(&header)),
            "aed41d67f322abe41b019c2c1b45aad9e1a7ae6f808a41e327e8b8088351af18"
        );
        let (_, l1) = core.append(
            author("lead", "primary", None),
            DecisionEvent::Open {
                decision: DecisionId(1),
                subject: "pick a store".into(),
                slots: vec!["opus".into(), "sol".into()],
                deadline: "2026-12-02T12:00:00.000Z".into(),
                max_rounds: 2,
            },
            1_796_210_400_000,
        );
        assert_eq!(
            l1,
            r#"{"actor":{"member":"lead","role":"primary","slot":null},"event":{"deadline":"2026-12-02T12:00:00.000Z","decision":"d-1","max_rounds":2,"slots":["opus","sol"],"subject":"pick a store","type":"open"},"prev":"aed41d67f322abe41b019c2c1b45aad9e1a7ae6f808a41e327e8b8088351af18","seq":1,"ts":"2026-12-02T11:20:00.000Z"}"#
        );
        assert_eq!(
            hex(&hash(&l1)),
            "7e5f97d05ebda141bb49b57b49cd382e7bb376ec1d714c972a8c75c8a47d7b94"
        );
        let note = keys::sign_note(
            &checkpoint_body("fleetd/example/ledger", 1, &hash(&l1)),
            "fleetd/example/ledger",
            &SigningKey::from_bytes(&[42u8; 32]),
        );
        assert_eq!(
            note,
            "fleetd/example/ledger\n1\nfl+X0F69oUG7SbV7Sc04LnuzduwdcUyXKox1yKR9e5Q=\n\n\u{2014} fleetd/example/ledger n4L5QdSW9mceeicgcpQNLmcKc63UlRSIChhU24TTbPHZfyw03RYC+0NqRE2Wwifko01monDWQOlcBB2KpQlpDGCrZA0=\n"
        );
        // The verifier key of that seed, for the docs.
        assert_eq!(
            keys::vkey(
                "fleetd/example/ledger",
                &SigningKey::from_bytes(&[42u8; 32]).verifying_key()
            ),
            "fleetd/example/ledger+9f82f941+ARl/ayPhbIUyxqvIOPrNXqeJvgx2spIDNAOb+os9No1h"
        );
    }

    fn arb_text() -> impl Strategy<Value = String> {
        proptest::string::string_regex(
            "[a-zA-Z0-9 \"\\\\é✓\n\t\r\u{1}\u{8}\u{c}\u{1f}\u{7f}-]{0,12}",
        )
        .unwrap()
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("é✓\u{2014}\u{10ffff}");
        for s in [all.as_str(), "", "plain", "\"\\", "\u{0}x\u{1f}"] {
            let mut out = String::new();
            push_str_json(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap());
        }
    }

    proptest! {
        /// The hand-written checkpoint line is exactly the canonical encoding.
        #[test]
        fn checkpoint_line_is_canonical(note in arb_text()) {
            prop_assert_eq!(checkpoint_line(&note), line_of(&serde_json::json!({ "checkpoint": note })));
        }
    }

    proptest! {
        /// The hand-written hot-path encoding is exactly the canonical encoding.
        #[test]
        fn entry_line_is_canonical(a in arb_text(), b in arb_text(), slot in proptest::option::of(arb_text()), seq in 1u64..1_000_000, round in 0u32..5, kind in 0u8..4, t in any::<bool>()) {
            let event = match kind {
                0 => DecisionEvent::Open { decision: DecisionId(seq), subject: a.clone(), slots: vec![b.clone(), a.clone()], deadline: b.clone(), max_rounds: round },
                1 => DecisionEvent::Position { decision: DecisionId(seq), slot: a.clone(), round, content: b.clone() },
                2 => DecisionEvent::Abstain { decision: DecisionId(seq), slot: a.clone(), round, content: b.clone() },
                _ => DecisionEvent::Close {
                    decision: DecisionId(seq),
                    outcome: if t { Outcome::Quorate } else { Outcome::Degraded },
                    slots: vec![SlotOutcome { slot: a.clone(), outcome: SlotResult::Timeout, round: None }, SlotOutcome { slot: b.clone(), outcome: SlotResult::Abstain, round: Some(round) }],
                    verdict: a.clone(),
                    rationale: b.clone(),
                },
            };
            let e = Entry { seq, ts: b.clone(), actor: Author { member: a.clone(), role: b.clone(), slot }, event, prev: a.clone() };
            prop_assert_eq!(entry_line(&e), line_of(&e));
        }

        /// An entry prepared by its caller and chained later gets the same line and head as one
        /// encoded whole: its hash, begun on the author and event alone, ends where
        /// `hash(line)` does.
        #[test]
        fn a_prepared_entry_chains_to_the_line_and_head_of_a_whole_encoding(a in arb_text(), b in arb_text(), slot in proptest::option::of(arb_text()), n in 1usize..4, now in 0u64..4_000_000_000_000, kind in 0u8..3) {
            let (mut core, _) = LedgerCore::create("fleetd/test/ledger", 2);
            for i in 0..n {
                let event = match kind {
                    0 => DecisionEvent::Open { decision: DecisionId(i as u64 + 1), subject: a.clone(), slots: vec![b.clone()], deadline: b.clone(), max_rounds: 2 },
                    1 => DecisionEvent::Position { decision: DecisionId(1), slot: a.clone(), round: i as u32, content: b.clone() },
                    _ => DecisionEvent::Abstain { decision: DecisionId(1), slot: b.clone(), round: 1, content: a.clone() },
                };
                let author = Author { member: a.clone(), role: b.clone(), slot: slot.clone() };
                let prev = core.head;
                let (entry, line) = core.chain(Prepared::new(author, event), now + i as u64);
                prop_assert_eq!(&line, &entry_line(&entry));
                prop_assert_eq!(core.head, hash(&line));
                prop_assert_eq!(&entry.prev, &hex(&prev));
                prop_assert_eq!(entry.seq, i as u64 + 1);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Deleting or moving any single line of a valid ledger, anywhere but its very end, is
        /// always caught.
        #[test]
        fn any_single_deletion_or_move_is_caught(n in 4usize..24, every in 1u64..6, batch in 1usize..5, a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
            let t = build(n, every, batch);
            let ls = lines(&t);
            let vk = key().verifying_key();
            // Deleting the last run of checkpoints looks exactly like a crash between an append
            // and its checkpoints (reported as pending, and rewritten by the daemon at start);
            // like cutting the end of the file, it is not detectable without a witness.
            let is_cp = |k: usize| ls[k].starts_with("{\"checkpoint\"");
            let last_cp = (1..ls.len()).rev().find(|&k| is_cp(k)).unwrap_or(0);
            let mut run_start = last_cp;
            while run_start > 1 && is_cp(run_start - 1) {
                run_start -= 1;
            }
            // Likewise entries past what the last checkpoint covers: nothing after them links to
            // them, so dropping them is cutting the end.
            let covered = verify(&t, Some(&vk)).unwrap();
            let max_cp = (1..ls.len()).filter(|&k| is_cp(k)).map(|k| {
                let v: Value = serde_json::from_str(&ls[k]).unwrap();
                v["checkpoint"].as_str().unwrap().split('\n').nth(1).unwrap().parse::<u64>().unwrap()
            }).max().unwrap_or(0);
            let tail_entry = |k: usize| !is_cp(k) && serde_json::from_str::<Entry>(&ls[k]).unwrap().seq > max_cp;
            let _ = covered;
            let i = 1 + a.index(ls.len() - 2); // not the header, not the last line
            let in_last_run = is_cp(i) && i >= run_start;
            if !in_last_run && !tail_entry(i) {
                let mut del = ls.clone();
                del.remove(i);
                prop_assert!(verify(&join(&del), Some(&vk)).is_err(), "deleting line {} went unnoticed", i + 1);
            }
            // Entries trade places: always caught.
            let entries_at: Vec<usize> = (1..ls.len()).filter(|&k| !ls[k].starts_with("{\"checkpoint\"")).collect();
            let (x, y) = (entries_at[a.index(entries_at.len())], entries_at[b.index(entries_at.len())]);
            if x != y {
                let mut mv = ls.clone();
                mv.swap(x, y);
                prop_assert!(verify(&join(&mv), Some(&vk)).is_err(), "swapping entries at lines {} and {} went unnoticed", x + 1, y + 1);
            }
            // A checkpoint moved above the entries it covers: caught. (Moving one further down is
            // what a bigger write batch looks like, so it is not tampering with the record.)
            if let Some(c) = (1..ls.len()).find(|&k| ls[k].starts_with("{\"checkpoint\"")) {
                let mut mv = ls.clone();
                let line = mv.remove(c);
                mv.insert(1, line);
                prop_assert!(verify(&join(&mv), Some(&vk)).is_err());
            }
        }
    }
}
