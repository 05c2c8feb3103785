//! Signed notes checked independently of fleetd's own code.
//!
//! Default: the `signed_note` crate (a port of Go's golang.org/x/mod/sumdb/note) parses the note
//! and matches the key; a `cosignature/v1` key (algorithm 0x04) is verified here from the C2SP
//! tlog-cosignature spec. With `FLEETD_INTEROP_GO=1` (set by .ci/run, which installs Go) the same
//! note is also checked by the Go reference implementation (tests/go-note/main.go); set without Go
//! installed, that fails.

use base64::Engine;
use ed25519_dalek::Verifier as _;
use signed_note::{Note, StandardVerifier, Verifier, VerifierList};

/// A C2SP `cosignature/v1` cosigner key: the signature is an 8-byte big-endian time, then an
/// Ed25519 signature over "cosignature/v1\ntime T\n" and the note's text.
struct CosignatureV1 {
    name: String,
    id: u32,
    key: ed25519_dalek::VerifyingKey,
}

impl Verifier for CosignatureV1 {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        if sig.len() != 8 + 64 {
            return false;
        }
        let t = u64::from_be_bytes(sig[..8].try_into().unwrap_or_default());
        if t > i64::MAX as u64 {
            return false;
        }
        let mut m = format!("cosignature/v1\ntime {t}\n").into_bytes();
        m.extend_from_slice(msg);
        let Ok(s) = ed25519_dalek::Signature::from_slice(&sig[8..]) else {
            return false;
        };
        self.key.verify(&m, &s).is_ok()
    }
}

fn verifier(vkey: &str) -> Result<Box<dyn Verifier>, String> {
    let mut parts = vkey.splitn(3, '+');
    let (Some(name), Some(_), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("malformed verifier key {vkey}"));
    };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| e.to_string())?;
    if raw.first() == Some(&0x04) {
        let key: [u8; 32] = raw[1..]
            .try_into()
            .map_err(|_| "a cosignature/v1 key is 32 bytes".to_string())?;
        return Ok(Box::new(CosignatureV1 {
            name: name.to_string(),
            id: signed_note::key_id(name, &raw),
            key: ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|e| e.to_string())?,
        }));
    }
    Ok(Box::new(
        StandardVerifier::new(vkey).map_err(|e| format!("{e:?}"))?,
    ))
}

/// Open `note` with `vkey`: its text if the key's signature on it verifies.
pub fn open(vkey: &str, note: &str) -> Result<String, String> {
    let list = VerifierList::new(vec![verifier(vkey)?]);
    let n = Note::from_bytes(note.as_bytes()).map_err(|e| format!("{e:?}"))?;
    n.verify(&list).map_err(|e| format!("{e:?}"))?;
    let text = String::from_utf8_lossy(n.text()).into_owned();
    if let Some(go) = go_tool() {
        let out = run_with_stdin(go, &[vkey], note);
        assert!(
            out.status.success(),
            "the Go reference disagrees: signed_note accepts, Go says {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    }
    Ok(text)
}

/// Like [`open`], for notes that must be refused: both implementations must refuse it.
pub fn refused(vkey: &str, note: &str) -> bool {
    let ours = open_quietly(vkey, note).is_err();
    if let Some(go) = go_tool() {
        let theirs = !run_with_stdin(go, &[vkey], note).status.success();
        assert_eq!(ours, theirs, "signed_note and the Go reference disagree");
    }
    ours
}

fn open_quietly(vkey: &str, note: &str) -> Result<String, String> {
    let list = VerifierList::new(vec![verifier(vkey)?]);
    let n = Note::from_bytes(note.as_bytes()).map_err(|e| format!("{e:?}"))?;
    n.verify(&list).map_err(|e| format!("{e:?}"))?;
    Ok(String::from_utf8_lossy(n.text()).into_owned())
}

/// The Go cross-check, when `FLEETD_INTEROP_GO=1`: built once per test process.
fn go_tool() -> Option<&'static std::path::Path> {
    static TOOL: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    TOOL.get_or_init(|| {
        if std::env::var("FLEETD_INTEROP_GO").as_deref() != Ok("1") {
            eprintln!("the Go signed-note cross-check is skipped: FLEETD_INTEROP_GO is not 1 (.ci/run sets it)");
            return None;
        }
        Some(build_go_verifier())
    })
    .as_deref()
}

fn build_go_verifier() -> std::path::PathBuf {
    let out = std::env::temp_dir().join(format!("fleetd-verify-note-{}", std::process::id()));
    let src = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/go-note/main.go"),
        src.path().join("main.go"),
    )
    .unwrap();
    let o = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(src.path())
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOCACHE", src.path().join("cache"))
        .output()
        .expect("FLEETD_INTEROP_GO=1 needs `go` with golang.org/x/mod (apt-get install golang-go golang-golang-x-mod-dev; .ci/run does)");
    assert!(
        o.status.success(),
        "go build failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn run_with_stdin(tool: &std::path::Path, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut c = std::process::Command::new(tool)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}
