//! Host keys and C2SP signed notes.
//!
//! Owns the public-key text every other place uses (standard base64 of the 32-byte
//! key), and signed notes as specified by C2SP (`signed-note`): the key ID, the signature line,
//! the verifier-key text (`name+hash+base64(0x01||key)`), signing and verifying; and witness
//! cosignatures as specified by C2SP (`tlog-cosignature`, `cosignature/v1`: algorithm 0x04, a
//! timestamped Ed25519 signature over `cosignature/v1\ntime T\n` and the note body). Pure: the
//! key file on disk and fresh keys are `fleetd_actors::keys`. Must never log a private key.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::error::FleetError;

/// The signature algorithm byte of ed25519 in signed notes.
const ALG_ED25519: u8 = 0x01;
/// The signature algorithm byte of timestamped ed25519 cosignatures (`cosignature/v1`).
const ALG_COSIGNATURE_V1: u8 = 0x04;

/// The public key as text: standard base64 of the 32 bytes.
pub fn public_text(k: &VerifyingKey) -> String {
    B64.encode(k.to_bytes())
}

/// Parse a public key: base64 of 32 bytes, or a signed-note verifier key (`name+hash+base64`).
pub fn parse_public(s: &str) -> Result<VerifyingKey, FleetError> {
    let s = s.trim();
    let bad = |why: String| {
        FleetError::invalid(
            format!("public key `{}`", crate::types::truncate(s, 60)),
            why,
            "base64 of a 32-byte ed25519 key (as `fleetd keygen` prints it), or a signed-note verifier key name+hash+key",
        )
    };
    // Plain base64 of 32 bytes (which may itself contain `+`), else a verifier key.
    if let Ok(raw) = B64.decode(s)
        && let Ok(k) = <[u8; 32]>::try_from(raw.as_slice())
    {
        return VerifyingKey::from_bytes(&k).map_err(|e| bad(e.to_string()));
    }
    if let Some((name, rest)) = s.split_once('+') {
        let (hash, key) = rest
            .split_once('+')
            .ok_or_else(|| bad("a verifier key has three `+`-separated parts".into()))?;
        let raw = B64
            .decode(key)
            .map_err(|e| bad(format!("not base64: {e}")))?;
        if raw.len() != 33 || raw[0] != ALG_ED25519 {
            return Err(bad(
                "a verifier key must be 0x01 followed by 32 key bytes".into()
            ));
        }
        let mut k = [0u8; 32];
        k.copy_from_slice(&raw[1..]);
        let vk = VerifyingKey::from_bytes(&k).map_err(|e| bad(e.to_string()))?;
        if format!("{:08x}", key_id(name, &vk)) != hash {
            return Err(bad("its key hash does not match its name and key".into()));
        }
        return Ok(vk);
    }
    let raw = B64.decode(s).map_err(|e| bad(format!("not base64: {e}")))?;
    let k: [u8; 32] = raw.try_into().map_err(|_| bad("not 32 bytes".into()))?;
    VerifyingKey::from_bytes(&k).map_err(|e| bad(e.to_string()))
}

/// The signed-note key ID: the first 4 bytes of SHA-256(name || "\n" || 0x01 || key).
pub fn key_id(name: &str, k: &VerifyingKey) -> u32 {
    key_id_of(ALG_ED25519, name, k)
}

fn key_id_of(alg: u8, name: &str, k: &VerifyingKey) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([alg]);
    h.update(k.to_bytes());
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// The signed-note verifier key text: `name+hash+base64(0x01||key)`.
pub fn vkey(name: &str, k: &VerifyingKey) -> String {
    vkey_of(ALG_ED25519, name, k)
}

/// The cosigner's verifier key text: `name+hash+base64(0x04||key)`.
pub fn cosigner_vkey(name: &str, k: &VerifyingKey) -> String {
    vkey_of(ALG_COSIGNATURE_V1, name, k)
}

fn vkey_of(alg: u8, name: &str, k: &VerifyingKey) -> String {
    let mut raw = vec![alg];
    raw.extend_from_slice(&k.to_bytes());
    format!("{name}+{:08x}+{}", key_id_of(alg, name, k), B64.encode(raw))
}

/// The cosigner name of `host`'s ledger witness.
pub fn witness_name(host: &str) -> String {
    format!("fleetd/{host}/witness")
}

/// The message a `cosignature/v1` signs: the header line, the time line, the note body.
fn cosigned_message(body: &str, time: u64) -> String {
    format!("cosignature/v1\ntime {time}\n{body}")
}

/// Cosign a note body (which must end with a newline) as cosigner `name` at `time` (POSIX
/// seconds): the signature line, `— name base64(key ID || time || signature)`.
pub fn cosign(body: &str, name: &str, key: &SigningKey, time: u64) -> String {
    debug_assert!(body.ends_with('\n'));
    let time = time.min(i64::MAX as u64);
    let sig: Signature = key.sign(cosigned_message(body, time).as_bytes());
    let mut blob = key_id_of(ALG_COSIGNATURE_V1, name, &key.verifying_key())
        .to_be_bytes()
        .to_vec();
    blob.extend_from_slice(&time.to_be_bytes());
    blob.extend_from_slice(&sig.to_bytes());
    format!("\u{2014} {name} {}", B64.encode(blob))
}

/// Verify a cosigned note: returns the cosignature's time if a `cosignature/v1` line by `name`
/// with key `k` verifies over the note's body.
pub fn verify_cosignature(note: &str, name: &str, k: &VerifyingKey) -> Result<u64, String> {
    let (body, sigs) = split_note(note)?;
    let want = key_id_of(ALG_COSIGNATURE_V1, name, k);
    for blob in signature_blobs(sigs, name)? {
        if blob.len() != 4 + 8 + 64
            || u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) != want
        {
            continue;
        }
        let mut t = [0u8; 8];
        t.copy_from_slice(&blob[4..12]);
        let time = u64::from_be_bytes(t);
        if time > i64::MAX as u64 {
            return Err(format!("the cosignature's time {time} exceeds 2^63-1"));
        }
        let sig = Signature::from_slice(&blob[12..]).map_err(|e| e.to_string())?;
        return k
            .verify_strict(cosigned_message(body, time).as_bytes(), &sig)
            .map(|_| time)
            .map_err(|_| "the cosignature does not verify".into());
    }
    Err(format!("no cosignature/v1 by `{name}` with this key"))
}

/// A note's body: the text a signature or cosignature covers.
pub fn note_body(note: &str) -> Result<&str, String> {
    split_note(note).map(|(body, _)| body)
}

/// A note's body (through its last newline before the blank line) and its signature lines.
fn split_note(note: &str) -> Result<(&str, &str), String> {
    let split = note
        .rfind("\n\n")
        .ok_or("no blank line before the signatures")?;
    if !note.ends_with('\n') {
        return Err("the note does not end with a newline".into());
    }
    Ok((&note[..split + 1], &note[split + 2..]))
}

/// The decoded blobs of the signature lines by `name`.
fn signature_blobs(sigs: &str, name: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut r = vec![];
    for line in sigs.lines() {
        let rest = line
            .strip_prefix("\u{2014} ")
            .ok_or_else(|| format!("malformed signature line {line:?}"))?;
        let (n, b64) = rest
            .rsplit_once(' ')
            .ok_or_else(|| format!("malformed signature line {line:?}"))?;
        if n != name {
            continue;
        }
        r.push(
            B64.decode(b64)
                .map_err(|e| format!("signature is not base64: {e}"))?,
        );
    }
    Ok(r)
}

/// Sign a note body (which must end with a newline) as `name`: the whole note text.
pub fn sign_note(body: &str, name: &str, key: &SigningKey) -> String {
    debug_assert!(body.ends_with('\n'));
    let sig: Signature = key.sign(body.as_bytes());
    let mut blob = key_id(name, &key.verifying_key()).to_be_bytes().to_vec();
    blob.extend_from_slice(&sig.to_bytes());
    format!("{body}\n\u{2014} {name} {}\n", B64.encode(blob))
}

/// Verify a note: returns its body if a signature line by `name` with key `k` verifies.
pub fn verify_note<'a>(note: &'a str, name: &str, k: &VerifyingKey) -> Result<&'a str, String> {
    let (body, sigs) = split_note(note)?;
    let want = key_id(name, k);
    for blob in signature_blobs(sigs, name)? {
        if blob.len() != 68 || u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) != want {
            continue;
        }
        let sig = Signature::from_slice(&blob[4..]).map_err(|e| e.to_string())?;
        return k
            .verify_strict(body.as_bytes(), &sig)
            .map(|_| body)
            .map_err(|_| "the signature does not verify".into());
    }
    Err(format!("no signature by `{name}` with this key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    #[test]
    fn note_round_trip_and_tamper() {
        let k = fixed();
        let body = "fleetd/local/ledger\n3\nq0nZ5fHXrHkE6SGj0lhZ8S1qSe5hLnIVdWPHIN4XQ0s=\n";
        let note = sign_note(body, "fleetd/local/ledger", &k);
        assert!(note.starts_with(body));
        assert_eq!(
            verify_note(&note, "fleetd/local/ledger", &k.verifying_key()).unwrap(),
            body
        );
        let forged = note.replace("\n3\n", "\n4\n");
        assert!(verify_note(&forged, "fleetd/local/ledger", &k.verifying_key()).is_err());
        let other = SigningKey::from_bytes(&[8u8; 32]);
        assert!(verify_note(&note, "fleetd/local/ledger", &other.verifying_key()).is_err());
    }

    #[test]
    fn vkey_parses_back_and_key_text_round_trips() {
        let vk = fixed().verifying_key();
        let v = vkey("fleetd/local/ledger", &vk);
        assert_eq!(parse_public(&v).unwrap(), vk);
        assert_eq!(parse_public(&public_text(&vk)).unwrap(), vk);
        assert!(parse_public("nope").is_err());
        let mut bad = v.clone();
        bad.replace_range(v.find('+').unwrap() + 1..v.find('+').unwrap() + 3, "00");
        assert!(parse_public(&bad).is_err() || bad == v);
    }

    #[test]
    fn cosignature_v1_round_trip_and_tamper() {
        let (k, name) = (fixed(), "fleetd/b/witness");
        let vk = k.verifying_key();
        let body = "fleetd/a/ledger\n3\nq0nZ5fHXrHkE6SGj0lhZ8S1qSe5hLnIVdWPHIN4XQ0s=\n";
        let checkpoint = sign_note(body, "fleetd/a/ledger", &SigningKey::from_bytes(&[9u8; 32]));
        let line = cosign(body, name, &k, 1_679_315_147);
        let note = format!("{checkpoint}{line}\n");
        assert_eq!(verify_cosignature(&note, name, &vk), Ok(1_679_315_147));
        // The blob is key ID (4) || time (8, big-endian) || signature (64), algorithm 0x04.
        let blob = B64.decode(line.rsplit_once(' ').unwrap().1).unwrap();
        assert_eq!(blob.len(), 76);
        assert_eq!(&blob[4..12], &1_679_315_147u64.to_be_bytes());
        let v = cosigner_vkey(name, &vk);
        assert!(
            v.starts_with(&format!("{name}+{}+", hex4(&blob[..4]))),
            "{v}"
        );
        assert_eq!(B64.decode(v.rsplit_once('+').unwrap().1).unwrap()[0], 0x04);
        // Not a plain note signature, and not one over another body, time, key or name.
        assert!(verify_note(&note, name, &vk).is_err());
        let forged = note.replacen("\n3\n", "\n4\n", 1);
        assert!(verify_cosignature(&forged, name, &vk).is_err());
        let mut later = blob.clone();
        later[11] ^= 1;
        let retimed = note.replace(&B64.encode(&blob), &B64.encode(&later));
        assert!(verify_cosignature(&retimed, name, &vk).is_err());
        let other = SigningKey::from_bytes(&[8u8; 32]).verifying_key();
        assert!(verify_cosignature(&note, name, &other).is_err());
        assert!(verify_cosignature(&note, "fleetd/c/witness", &vk).is_err());
    }

    fn hex4(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
