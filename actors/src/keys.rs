//! The host's key file: a fresh key, reading and writing it (a 32-byte seed, base64, file mode
//! 0600; the public half in `KEY.pub`); and the REST API's token file, read with the same
//! mode check. Everything else about keys and signed notes is pure and
//! lives in `fleetd_core::keys`, re-exported here. Must never write a private key anywhere but
//! the key file, nor log it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::SigningKey;

use crate::error::FleetError;

pub use fleetd_core::keys::*;

/// A fresh host key.
pub fn generate() -> SigningKey {
    SigningKey::generate(&mut rand::rng())
}

/// Read a private key file (base64 of the 32-byte seed).
pub fn load(path: &std::path::Path) -> Result<SigningKey, FleetError> {
    let what = format!("key file {}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| {
        FleetError::not_found(
            what.clone(),
            e.to_string(),
            "a key made by `fleetd keygen --out FILE`",
        )
    })?;
    if meta.len() > 4096 {
        return Err(FleetError::invalid(
            what,
            "it is too large to be a key",
            "a key made by `fleetd keygen`",
        ));
    }
    private(&what, &meta)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| FleetError::invalid(what.clone(), e.to_string(), "a readable key file"))?;
    let raw = B64.decode(text.trim()).map_err(|e| {
        FleetError::invalid(
            what.clone(),
            format!("not base64: {e}"),
            "a key made by `fleetd keygen`",
        )
    })?;
    let seed: [u8; 32] = raw.try_into().map_err(|_| {
        FleetError::invalid(
            what,
            "not a 32-byte ed25519 seed",
            "a key made by `fleetd keygen`",
        )
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A secret file must be the service user's alone: refused if group or others may read or
/// write it (the mode is named, and the fix).
fn private(what: &str, meta: &std::fs::Metadata) -> Result<(), FleetError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(FleetError::invalid(
            what,
            format!("group or others may read or write it (mode {mode:o})"),
            "mode 0600, the owner's alone: chmod 600 the file",
        ));
    }
    Ok(())
}

/// Read the REST API's bearer token file (`api.token_file`): a regular file of at most 4 KiB,
/// mode 0600 (like the host key; one that group or others may read or write is refused), its
/// text trimmed and not empty. The token itself is never part of an error.
pub fn load_token(path: &std::path::Path) -> Result<String, FleetError> {
    use std::io::Read;
    let what = format!("api.token_file {}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| {
        FleetError::not_found(
            what.clone(),
            e.to_string(),
            "a file holding the token, mode 0600",
        )
    })?;
    if !meta.is_file() {
        return Err(FleetError::invalid(
            what,
            "it is not a regular file",
            "a file holding the token, mode 0600",
        ));
    }
    private(&what, &meta)?;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(4097).read_to_string(&mut text))
        .map_err(|e| {
            FleetError::invalid(what.clone(), e.to_string(), "a readable UTF-8 token file")
        })?;
    if text.len() > 4096 {
        return Err(FleetError::invalid(
            what,
            "it is over 4 KiB",
            "a file holding one token",
        ));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(FleetError::invalid(
            what,
            "it is empty",
            "a file holding the token (e.g. `openssl rand -hex 32`), mode 0600",
        ));
    }
    Ok(token.to_string())
}

/// Write a private key (0600) and its public half (`PATH.pub`); refuses to overwrite.
pub fn save(path: &std::path::Path, key: &SigningKey) -> Result<(), FleetError> {
    if path.exists() {
        return Err(FleetError::conflict(
            format!("key file {}", path.display()),
            "it already exists (a host key is never overwritten)",
            "another path, or remove the old key deliberately",
        ));
    }
    crate::files::write_private(path, B64.encode(key.to_bytes()).as_bytes())
        .map_err(|e| FleetError::internal(format!("key file {}", path.display()), e.to_string()))?;
    let mut pubpath = path.as_os_str().to_owned();
    pubpath.push(".pub");
    std::fs::write(&pubpath, format!("{}\n", public_text(&key.verifying_key())))
        .map_err(|e| FleetError::internal("public key file", e.to_string()))
}
