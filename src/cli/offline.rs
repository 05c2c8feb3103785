//! The subcommands that need no daemon: ledger verification, drift checks and appends on a
//! KB, key generation, config checks.

use super::*;

/// `fleetd ledger verify PATH [--key K]`: returns the exit code.
pub fn ledger_verify(
    path: &Path,
    key: Option<&str>,
    witnesses: &[PathBuf],
    no_signatures: bool,
    json: bool,
) -> anyhow::Result<i32> {
    use fleetd_actors::keys;
    use fleetd_actors::ledger::state::verify;
    let meta = std::fs::metadata(path).with_context(|| format!("ledger {}", path.display()))?;
    anyhow::ensure!(
        meta.len() <= fleetd_actors::ledger::actor::MAX_LEDGER_BYTES,
        "{} is too large to verify here",
        path.display()
    );
    let bytes = std::fs::read(path).with_context(|| format!("ledger {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "ledger {}: FAILS: it is not text (byte {} is not UTF-8), so it is not a fleetd ledger or it was overwritten; restore it from a backup",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let (key_text, key_source) = match key {
        Some(k) if Path::new(k).exists() => {
            (Some(std::fs::read_to_string(k)?), format!("--key {k}"))
        }
        Some(k) => (Some(k.to_string()), "--key".into()),
        None => {
            let p = path.with_file_name("host.key.pub");
            match std::fs::read_to_string(&p) {
                Ok(t) => (Some(t), p.display().to_string()),
                Err(_) => (None, String::new()),
            }
        }
    };
    let vk = key_text.as_deref().map(keys::parse_public).transpose()?;
    match verify(&text, vk.as_ref()) {
        Ok(r) => {
            if json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                say!(
                    "{}: {} entries, {} checkpoints ({}), head {}",
                    path.display(),
                    r.entries,
                    r.checkpoints,
                    if r.signatures_checked {
                        format!("signatures verified with {key_source}")
                    } else {
                        "signatures NOT checked: no --key".into()
                    },
                    r.head
                );
                if !r.pending_checkpoints.is_empty() {
                    say!(
                        "note: checkpoints for entries {:?} are not written yet (a crash between an append and its checkpoint; the daemon writes them at start)",
                        r.pending_checkpoints
                    );
                }
            }
            let mut witnessed_bad = false;
            for dir in witnesses {
                let held = crate::link::witness::load_all(dir)
                    .with_context(|| format!("witness state {}", dir.display()))?;
                let mine: Vec<_> = held.iter().filter(|w| w.origin == r.origin).collect();
                if mine.is_empty() {
                    eprintln!(
                        "{}: holds no witnessed checkpoint of {}",
                        dir.display(),
                        r.origin
                    );
                    witnessed_bad = true;
                }
                for w in mine {
                    match fleetd_actors::ledger::witness::check_against(&text, w) {
                        Ok(what) => say!("witness {}: {what}", dir.display()),
                        Err(why) => {
                            eprintln!("witness {}: {why}", dir.display());
                            witnessed_bad = true;
                        }
                    }
                }
            }
            if witnessed_bad {
                return Ok(1);
            }
            if !r.signatures_checked && !no_signatures {
                eprintln!(
                    "{}: FAILS as a verification: no signature was checked (no --key, and no host.key.pub beside the ledger). Pass --key KEY (the host's public key), or --no-signatures to check only the hash chain",
                    path.display()
                );
                return Ok(4);
            }
            if let Some(line) = r.torn_tail {
                eprintln!(
                    "line {line}: torn final line (a crash during an append); the daemon truncates it at start"
                );
                return Ok(3);
            }
            Ok(0)
        }
        Err(bad) => {
            if json {
                print_json(&serde_json::json!({"bad": bad}));
            }
            eprintln!("{}: line {}: {}", path.display(), bad.line, bad.reason);
            Ok(1)
        }
    }
}

pub(super) fn read_key_arg(k: &str) -> anyhow::Result<ed25519_dalek::VerifyingKey> {
    let text = if Path::new(k).is_file() {
        std::fs::read_to_string(k).with_context(|| format!("key file {k}"))?
    } else {
        k.to_string()
    };
    Ok(fleetd_actors::keys::parse_public(text.trim())?)
}

pub(super) fn parse_time(s: &str) -> anyhow::Result<u64> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .with_context(|| format!("{s:?} is not RFC 3339"))?;
    u64::try_from(t.timestamp_millis()).map_err(|_| anyhow::anyhow!("{s:?} is before 1970"))
}

/// `fleetd drift check`: returns the exit code.
pub fn drift_check(
    kb: &Path,
    reader: &str,
    now: Option<&str>,
    trust: &[String],
    config: Option<&Path>,
    json: bool,
) -> anyhow::Result<i32> {
    use fleetd_actors::drift::{gates, kb as kbmod};
    let config = crate::daemon::load_config(config)?;
    fleetd_actors::types::MemberName::new(reader).map_err(|e| anyhow::anyhow!("--self: {e}"))?;
    let now = match now {
        Some(n) => parse_time(n)?,
        None => fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock),
    };
    let mut keys = vec![];
    for t in trust.iter().chain(config.drift.trust.iter()) {
        keys.push(read_key_arg(t).with_context(|| format!("--trust {t}"))?);
    }
    anyhow::ensure!(kb.is_dir(), "the KB {} is not a directory", kb.display());
    let snap = kbmod::read(kb).with_context(|| format!("reading the KB {}", kb.display()))?;
    let ix = gates::index(&snap, &keys);
    let p = gates::Params::from_config(&config.drift, now);
    let reports = gates::evaluate_all(&ix, Some(reader), &p);
    if json {
        for r in &reports {
            println!(
                "{}",
                fleetd_actors::sanitize::json_for_terminal(&serde_json::to_string(r)?)
            );
        }
    } else {
        if keys.is_empty() {
            eprintln!("note: no --trust key given: every signed line fails G1");
        }
        let mut out = String::new();
        let rows: Vec<super::views::DriftReport> = reports.iter().map(Into::into).collect();
        print_drift_reports(&mut out, &rows);
        print!("{out}");
        for r in &reports {
            for a in &r.alerts {
                say!("{}: {a}", r.peer);
            }
        }
    }
    Ok(0)
}

/// `fleetd drift append`.
#[allow(clippy::too_many_arguments)]
pub fn drift_append(
    kb: &Path,
    key: &Path,
    identity: &str,
    kind: &str,
    baseline: Option<String>,
    delta: Option<&str>,
    subject: Option<String>,
    ts: Option<&str>,
    tick: Option<u64>,
    source: Option<String>,
) -> anyhow::Result<()> {
    use fleetd_actors::drift::{kb as kbmod, line};
    fleetd_actors::types::MemberName::new(identity)
        .map_err(|e| anyhow::anyhow!("--identity: {e}"))?;
    if let Some(s) = &subject {
        fleetd_actors::types::MemberName::new(s).map_err(|e| anyhow::anyhow!("--subject: {e}"))?;
    }
    let kind = line::Kind::parse(kind)
        .with_context(|| format!("--type {kind:?}: expected fencepost, reanchor, drift, first_contact or peer_consistency_alert"))?;
    let signing = fleetd_actors::keys::load(key)?;
    let delta = delta
        .map(serde_json::from_str::<Value>)
        .transpose()
        .context("--delta is not JSON")?;
    let ts_ms = match ts {
        Some(t) => parse_time(t)?,
        None => fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock),
    };
    let mut extra = serde_json::Map::new();
    if let Some(s) = source {
        extra.insert("source".into(), Value::String(s));
    }
    let tick = tick.unwrap_or_else(|| kbmod::next_tick(kb, identity));
    let nl = line::NewLine {
        ts_ms,
        tick,
        kind: Some(kind),
        baseline,
        delta,
        subject,
        extra,
    };
    let signed = line::sign(&nl, &signing);
    let path = kbmod::append(kb, identity, &kbmod::date_of(ts_ms), &signed)?;
    eprintln!("appended to {}", path.display());
    say!("{signed}");
    Ok(())
}

/// `fleetd keygen --out FILE`.
pub fn keygen(out: &Path) -> anyhow::Result<()> {
    let k = fleetd_actors::keys::generate();
    fleetd_actors::keys::save(out, &k)?;
    say!("{}", fleetd_actors::keys::public_text(&k.verifying_key()));
    Ok(())
}

/// `fleetd config check [FILE]`.
pub fn config_check(file: Option<&Path>) -> anyhow::Result<()> {
    let c = crate::daemon::load_config(file)?;
    // With a key file named, a peer that carries this host's own key is caught here too (the
    // daemon refuses it at start either way).
    if let Some(kf) = &c.daemon.key_file
        && let Ok(key) = fleetd_actors::keys::load(Path::new(kf))
        && let Some(name) = crate::daemon::own_key_as_peer(&c, &key.verifying_key())
    {
        anyhow::bail!(
            "peers.{name}.public_key is this host's own key ({kf}): a host cannot be its own peer. Put {name}'s key there"
        );
    }
    say!(
        "{}: ok",
        file.map(|f| f.display().to_string())
            .unwrap_or_else(|| "built-in default".into())
    );
    Ok(())
}
