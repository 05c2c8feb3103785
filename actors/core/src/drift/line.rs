//! Drift log lines: the schema `fleet.drift/0.2`, signing, and the G1 (syntactic) gate.
//!
//! Owns the file format (a header line, then one signed event per line), the canonical encoding a
//! signature covers (the line's JSON without `sig`, keys sorted, no whitespace, after the context
//! prefix `fleet.drift/0.2 line\n`), and every reason a line fails G1. Must never decide trust
//! beyond "this line is well formed and signed by a key the reader trusts".

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde_json::{Map, Value};

use crate::ledger::state::canonical;
use crate::types::Millis;

/// The schema name in every header.
pub const SCHEMA: &str = "fleet.drift/0.2";
/// What a signature covers, before the canonical line: keeps a drift signature from ever being
/// mistaken for one over anything else the host key signs.
pub const SIG_CONTEXT: &[u8] = b"fleet.drift/0.2 line\n";

/// The event types of the schema.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Fencepost,
    Reanchor,
    Drift,
    FirstContact,
    PeerConsistencyAlert,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "fencepost" => Kind::Fencepost,
            "reanchor" => Kind::Reanchor,
            "drift" => Kind::Drift,
            "first_contact" => Kind::FirstContact,
            "peer_consistency_alert" => Kind::PeerConsistencyAlert,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Fencepost => "fencepost",
            Kind::Reanchor => "reanchor",
            Kind::Drift => "drift",
            Kind::FirstContact => "first_contact",
            Kind::PeerConsistencyAlert => "peer_consistency_alert",
        }
    }

    /// Does a line of this kind carry an identity statement (a baseline)?
    pub fn has_baseline(self) -> bool {
        self != Kind::PeerConsistencyAlert
    }

    /// A report about an identity that G3 and G4 weigh: a fencepost, reanchor or drift line.
    /// A `first_contact` is not one: it restates a peer's observation (already weighed as
    /// that peer's report) or the operator's placeholder, so it never conflicts with the
    /// identity's own first anchor.
    pub fn is_report(self) -> bool {
        matches!(self, Kind::Fencepost | Kind::Reanchor | Kind::Drift)
    }
}

/// A line that passed G1.
#[derive(Clone, Debug, PartialEq)]
pub struct Valid {
    pub ts_ms: Millis,
    pub ts: String,
    pub tick: u64,
    pub kind: Kind,
    /// The identity statement (absent only on alert lines).
    pub baseline: Option<String>,
    /// `drift_delta` is null: a clean report.
    pub clean: bool,
    /// Who the line is about, if not the log's own identity.
    pub subject: Option<String>,
    pub signer: String,
}

/// A header line.
pub fn header(identity: &str, date: &str) -> String {
    canonical(&serde_json::json!({ "schema": SCHEMA, "identity": identity, "date": date }))
}

/// Check a header line against the file's place in the KB.
pub fn check_header(line: &str, identity: &str, date: &str) -> Result<(), String> {
    let v: Value =
        serde_json::from_str(line).map_err(|e| format!("the header is not JSON: {e}"))?;
    let o = v.as_object().ok_or("the header is not a JSON object")?;
    match o.get("schema").and_then(Value::as_str) {
        Some(SCHEMA) => {}
        Some(other) => return Err(format!("unknown schema {other:?} (expected {SCHEMA:?})")),
        None => return Err("the header has no schema".into()),
    }
    if o.get("identity").and_then(Value::as_str) != Some(identity) {
        return Err(format!(
            "the header names identity {:?}, not {identity:?} (its directory)",
            o.get("identity")
        ));
    }
    if o.get("date").and_then(Value::as_str) != Some(date) {
        return Err(format!(
            "the header's date {:?} is not the file's {date:?}",
            o.get("date")
        ));
    }
    Ok(())
}

/// The bytes a line's signature covers.
pub fn signed_bytes(obj_without_sig: &Map<String, Value>) -> Vec<u8> {
    let mut out = SIG_CONTEXT.to_vec();
    out.extend_from_slice(canonical(&Value::Object(obj_without_sig.clone())).as_bytes());
    out
}

/// What a new line says, before it is signed.
#[derive(Clone, Debug, Default)]
pub struct NewLine {
    pub ts_ms: Millis,
    pub tick: u64,
    pub kind: Option<Kind>,
    pub baseline: Option<String>,
    pub delta: Option<Value>,
    pub subject: Option<String>,
    /// Extra fields (e.g. `source` on first_contact, `peer` and `detail` on alerts).
    pub extra: Map<String, Value>,
}

impl NewLine {
    /// What a reader logs when G4 finds its own statement about `peer` contradicting the peer's
    /// own in the same minute (the seed's mechanism): a `peer_consistency_alert` about `peer`,
    /// with the alert's text as `detail`. The tick is set when it is appended.
    pub fn peer_consistency_alert(ts_ms: Millis, peer: &str, detail: &str) -> NewLine {
        let mut extra = Map::new();
        extra.insert("peer".into(), Value::String(peer.to_string()));
        extra.insert("detail".into(), Value::String(detail.to_string()));
        NewLine {
            ts_ms,
            kind: Some(Kind::PeerConsistencyAlert),
            subject: Some(peer.to_string()),
            extra,
            ..Default::default()
        }
    }

    /// An anchor: a clean fencepost of the log's own identity, stating `role`.
    pub fn anchor(ts_ms: Millis, tick: u64, role: &str) -> NewLine {
        NewLine {
            ts_ms,
            tick,
            kind: Some(Kind::Fencepost),
            baseline: Some(role.into()),
            ..Default::default()
        }
    }
}

/// Sign a line: returns its canonical text (with `signer` and `sig`).
pub fn sign(n: &NewLine, key: &SigningKey) -> String {
    let mut o = n.extra.clone();
    o.insert("ts".into(), Value::String(crate::clock::rfc3339(n.ts_ms)));
    o.insert("tick".into(), Value::from(n.tick));
    o.insert(
        "type".into(),
        Value::String(n.kind.unwrap_or(Kind::Fencepost).as_str().into()),
    );
    o.insert(
        "baseline_pos".into(),
        n.baseline.clone().map(Value::String).unwrap_or(Value::Null),
    );
    o.insert("drift_delta".into(), n.delta.clone().unwrap_or(Value::Null));
    if let Some(s) = &n.subject {
        o.insert("subject".into(), Value::String(s.clone()));
    }
    o.insert(
        "signer".into(),
        Value::String(crate::keys::public_text(&key.verifying_key())),
    );
    let sig: Signature = key.sign(&signed_bytes(&o));
    o.insert("sig".into(), Value::String(B64.encode(sig.to_bytes())));
    canonical(&Value::Object(o))
}

/// A line parsed and checked for shape, its signature not yet verified.
pub struct Parsed {
    pub valid: Valid,
    pub key: VerifyingKey,
    pub sig: Signature,
    pub message: Vec<u8>,
}

/// G1 without the signature check (so many signatures can be verified in one batch): the line
/// is a JSON object with the schema's fields of the right types, signed by a trusted key.
pub fn parse(line: &str, trusted: &[VerifyingKey]) -> Result<Parsed, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("malformed JSON: {e}"))?;
    let Value::Object(mut o) = v else {
        return Err("not a JSON object".into());
    };
    let ts = o
        .get("ts")
        .and_then(Value::as_str)
        .ok_or("`ts` is missing or not a string")?
        .to_string();
    let ts_ms = chrono::DateTime::parse_from_rfc3339(&ts)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("`ts` {ts:?} is not RFC 3339: {e}"))?;
    let ts_ms = u64::try_from(ts_ms).map_err(|_| format!("`ts` {ts:?} is before 1970"))?;
    let tick = o
        .get("tick")
        .ok_or("`tick` is missing")?
        .as_u64()
        .ok_or("`tick` is not a non-negative integer")?;
    let kind_s = o
        .get("type")
        .and_then(Value::as_str)
        .ok_or("`type` is missing or not a string")?;
    let kind = Kind::parse(kind_s).ok_or_else(|| {
        format!("`type` {kind_s:?} is not one of fencepost, reanchor, drift, first_contact, peer_consistency_alert")
    })?;
    let baseline = match o.get("baseline_pos") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(Value::String(_)) if kind.has_baseline() => {
            return Err("`baseline_pos` is an empty string".into());
        }
        Some(Value::Null) | None if kind.has_baseline() => {
            return Err("`baseline_pos` is missing".into());
        }
        Some(Value::String(_)) | Some(Value::Null) | None => None,
        Some(other) => {
            return Err(format!(
                "`baseline_pos` is not a string (it is {})",
                type_name(other)
            ));
        }
    };
    let delta = o
        .get("drift_delta")
        .ok_or("`drift_delta` is missing (null when clean)")?;
    let clean = delta.is_null();
    let subject = match o.get("subject") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if crate::types::is_identity_ref(s) => Some(s.clone()),
        Some(Value::String(s)) => return Err(format!("`subject` {s:?} is not an identity name")),
        Some(other) => {
            return Err(format!(
                "`subject` is not a string (it is {})",
                type_name(other)
            ));
        }
    };
    let signer = o
        .get("signer")
        .and_then(Value::as_str)
        .ok_or("unsigned: `signer` is missing")?
        .to_string();
    let sig_b64 = match o.remove("sig") {
        Some(Value::String(s)) => s,
        _ => return Err("unsigned: `sig` is missing".into()),
    };
    // Match the signer against the trusted keys by its bytes: no point decompression per line.
    let raw_key = B64
        .decode(signer.trim())
        .ok()
        .and_then(|r| <[u8; 32]>::try_from(r.as_slice()).ok())
        .ok_or_else(|| "`signer` is not a public key (base64 of 32 bytes)".to_string())?;
    let key = *trusted
        .iter()
        .find(|k| k.as_bytes() == &raw_key)
        .ok_or_else(|| format!("signed by {signer}, a key this reader does not trust"))?;
    let raw = B64
        .decode(&sig_b64)
        .map_err(|_| "`sig` is not base64".to_string())?;
    let sig =
        Signature::from_slice(&raw).map_err(|_| "`sig` is not an ed25519 signature".to_string())?;
    let message = signed_bytes(&o);
    Ok(Parsed {
        valid: Valid {
            ts_ms,
            ts,
            tick,
            kind,
            baseline,
            clean,
            subject,
            signer,
        },
        key,
        sig,
        message,
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Verify many parsed lines; returns, per line, whether its signature holds. One batch
/// verification first; only if it fails are the lines checked one by one.
pub fn verify_all(parsed: &[&Parsed]) -> Vec<bool> {
    if parsed.is_empty() {
        return vec![];
    }
    let msgs: Vec<&[u8]> = parsed.iter().map(|p| p.message.as_slice()).collect();
    let sigs: Vec<Signature> = parsed.iter().map(|p| p.sig).collect();
    let keys: Vec<VerifyingKey> = parsed.iter().map(|p| p.key).collect();
    if ed25519_dalek::verify_batch(&msgs, &sigs, &keys).is_ok() {
        return vec![true; parsed.len()];
    }
    parsed
        .iter()
        .map(|p| p.key.verify_strict(&p.message, &p.sig).is_ok())
        .collect()
}

/// Why a line whose signature does not hold fails G1.
const ALTERED: &str = "the signature does not verify (the line was altered or forged)";

/// G1 for one line, signature included.
pub fn check(line: &str, trusted: &[VerifyingKey]) -> Result<Valid, String> {
    let p = parse(line, trusted)?;
    if p.key.verify_strict(&p.message, &p.sig).is_err() {
        return Err(ALTERED.into());
    }
    Ok(p.valid)
}

/// `check` for many lines at once: each `(tag, line)` is parsed against `trusted`, and the
/// parsed lines `keep` accepts are verified in one batch (`verify_all`). Returns the lines that
/// verify with what they say, and each failure's tag and why; lines `keep` refuses are left out.
#[allow(clippy::type_complexity)]
pub fn check_batch<T, L: AsRef<str>>(
    lines: impl IntoIterator<Item = (T, L)>,
    trusted: &[VerifyingKey],
    keep: impl Fn(&Valid) -> bool,
) -> (Vec<(T, Valid, L)>, Vec<(T, String)>) {
    let (mut parsed, mut bad) = (vec![], vec![]);
    for (tag, l) in lines {
        match parse(l.as_ref(), trusted) {
            Ok(p) if keep(&p.valid) => parsed.push((tag, p, l)),
            Ok(_) => {}
            Err(why) => bad.push((tag, why)),
        }
    }
    let refs: Vec<&Parsed> = parsed.iter().map(|(_, p, _)| p).collect();
    let ok = verify_all(&refs);
    let mut good = Vec::with_capacity(parsed.len());
    for ((tag, p, l), ok) in parsed.into_iter().zip(ok) {
        if ok {
            good.push((tag, p.valid, l));
        } else {
            bad.push((tag, ALTERED.into()));
        }
    }
    (good, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    fn line(kind: Kind, baseline: Option<&str>, delta: Option<Value>) -> String {
        sign(
            &NewLine {
                ts_ms: 1_796_210_400_000,
                tick: 3,
                kind: Some(kind),
                baseline: baseline.map(String::from),
                delta,
                ..Default::default()
            },
            &key(),
        )
    }

    /// The test vectors of docs/drift-schema.md.
    #[test]
    fn test_vectors() {
        assert_eq!(
            header("libra", "2026-12-02"),
            r#"{"date":"2026-12-02","identity":"libra","schema":"fleet.drift/0.2"}"#
        );
        let l = line(Kind::Fencepost, Some("researcher"), None);
        assert_eq!(
            l,
            r#"{"baseline_pos":"researcher","drift_delta":null,"sig":"SIG","signer":"6kpsY+KcUgq+9VB7Ey7F+ZVHdq6+vnuSQh7qaRRG0iw=","tick":3,"ts":"2026-12-02T11:20:00.000Z","type":"fencepost"}"#
                .replace("SIG", "T9hDCR5Hm5e+piE4WJbEqt1Jd6BTYU6G+fUrRflOl1VzFhfGDfKvm4UC1zjEnUtWfTtUyCLyZScsbZd4ZC+MBQ==")
        );
    }

    /// A G4 alert in the reader's log: a signed, checkable line naming the peer as its subject
    /// and carrying the alert's text.
    #[test]
    fn a_peer_consistency_alert_line_names_the_peer_and_the_detail() {
        let mut n = NewLine::peer_consistency_alert(1_796_210_400_000, "libra", "G4 alert: x");
        n.tick = 4;
        let l = sign(&n, &key());
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["type"], "peer_consistency_alert");
        assert_eq!(v["peer"], "libra");
        assert_eq!(v["detail"], "G4 alert: x");
        assert!(check(&l, &[key().verifying_key()]).is_ok(), "{l}");
    }

    #[test]
    fn g1_table() {
        let trusted = [key().verifying_key()];
        let good = line(Kind::Fencepost, Some("researcher"), None);
        assert!(check(&good, &trusted).is_ok());
        let mut cases: Vec<(String, &str)> = vec![
            ("{not json".into(), "malformed JSON"),
            ("[1,2]".into(), "not a JSON object"),
            (
                good.replace("\"baseline_pos\":\"researcher\"", "\"baseline_pos\":\"\""),
                "empty string",
            ),
            (
                good.replace("\"baseline_pos\":\"researcher\"", "\"baseline_pos\":42"),
                "not a string (it is a number)",
            ),
            (
                good.replace("\"baseline_pos\":\"researcher\"", "\"baseline_pos\":null"),
                "missing",
            ),
            (
                good.replace("\"type\":\"fencepost\"", "\"type\":\"vibes\""),
                "is not one of",
            ),
            (
                good.replace("2026-12-02T11:20:00.000Z", "yesterday"),
                "not RFC 3339",
            ),
            (
                good.replace("\"tick\":3", "\"tick\":-1"),
                "not a non-negative integer",
            ),
            (
                good.replace("researcher", "deployer"),
                "signature does not verify",
            ),
        ];
        let unsigned = {
            let mut v: Value = serde_json::from_str(&good).unwrap();
            v.as_object_mut().unwrap().remove("sig");
            v.to_string()
        };
        cases.push((unsigned, "unsigned"));
        let other = sign(
            &NewLine {
                ts_ms: 0,
                kind: Some(Kind::Fencepost),
                baseline: Some("x".into()),
                ..Default::default()
            },
            &SigningKey::from_bytes(&[9u8; 32]),
        );
        cases.push((other, "does not trust"));
        for (l, why) in cases {
            let e = check(&l, &trusted).unwrap_err();
            assert!(e.contains(why), "{l}: {e} (wanted {why})");
        }
    }

    #[test]
    fn headers_are_checked() {
        assert!(check_header(&header("libra", "2026-12-02"), "libra", "2026-12-02").is_ok());
        assert!(
            check_header(
                r#"{"schema":"fleet.drift/0.1","identity":"libra","date":"2026-12-02"}"#,
                "libra",
                "2026-12-02"
            )
            .unwrap_err()
            .contains("unknown schema")
        );
        assert!(check_header(&header("echo", "2026-12-02"), "libra", "2026-12-02").is_err());
    }

    #[test]
    fn batch_verification_finds_the_bad_line() {
        let trusted = [key().verifying_key()];
        let a = line(Kind::Fencepost, Some("a"), None);
        let b = line(Kind::Drift, Some("a"), Some(serde_json::json!({"to": "b"})));
        let mut pb = parse(&b, &trusted).unwrap();
        pb.message.push(b'x');
        let pa = parse(&a, &trusted).unwrap();
        assert_eq!(verify_all(&[&pa, &pb]), vec![true, false]);
    }
}
