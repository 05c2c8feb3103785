//! The host's key file: a fresh key, reading and writing it (a 32-byte seed, base64, file mode
//! 0600; the public half in `KEY.pub`). Everything else about keys and signed notes is pure and
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
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(FleetError::invalid(
                what,
                format!(
                    "it is readable by others (mode {:o})",
                    meta.permissions().mode() & 0o777
                ),
                "mode 0600: chmod 600 the file",
            ));
        }
    }
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
