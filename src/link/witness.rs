//! Ledger witnessing over the links (the shell of `ledger::witness`): as a witness, judge a
//! peer's checkpoint with the entries that extend what this host last cosigned for it, persist
//! the new state (`STATE/witness/*.json`, fsynced) before answering with a cosignature, and on
//! an equivocation keep both checkpoints, alert, and refuse the peer from then on. As a
//! submitter, once per heartbeat, send each linked peer this host's checkpoints beyond what it
//! has witnessed, and keep its latest cosignature (`STATE/witness-cosigs/PEER.note`).
//!
//! Must never answer before the witnessed state is on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fleetd_actors::ctx::SharedCtx;
use fleetd_actors::events::EventKind;
use fleetd_actors::ledger::witness::{OwnLedger, Submission, Verdict, Witnessed, judge};

use super::wire::{self, Request, Response};

/// At most this many witness requests to one peer per heartbeat.
const MAX_ROUNDS: usize = 64;

pub struct WitnessService {
    ctx: SharedCtx,
    /// One judgement at a time.
    lock: tokio::sync::Mutex<()>,
    /// What each peer has witnessed of this host's ledger, as far as this host knows.
    witnessed_by: Mutex<HashMap<String, u64>>,
    /// Peers with a submission under way (one at a time each).
    busy: Mutex<std::collections::HashSet<String>>,
    /// This host's ledger as last parsed, with the file length it was parsed at.
    own: Mutex<Option<(u64, Arc<OwnLedger>)>>,
}

fn file_of(dir: &Path, origin: &str) -> PathBuf {
    let safe: String = origin
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{safe}.json"))
}

/// Every witnessed state held in a state dir (for `ledger verify --witness`).
pub fn load_all(state_dir: &Path) -> std::io::Result<Vec<Witnessed>> {
    let mut out = vec![];
    let dir = state_dir.join("witness");
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in rd.flatten() {
        if e.path().extension().is_some_and(|x| x == "json")
            && let Ok(b) = std::fs::read(e.path())
            && let Ok(w) = serde_json::from_slice::<Witnessed>(&b)
        {
            out.push(w);
        }
    }
    Ok(out)
}

impl WitnessService {
    pub fn new(ctx: SharedCtx) -> WitnessService {
        WitnessService {
            ctx,
            lock: tokio::sync::Mutex::new(()),
            witnessed_by: Mutex::new(HashMap::new()),
            busy: Mutex::new(Default::default()),
            own: Mutex::new(None),
        }
    }

    /// A peer asks this host to witness its checkpoint.
    pub async fn witness(
        &self,
        peer: &str,
        note: String,
        old_size: u64,
        lines: Vec<String>,
    ) -> Response {
        let refuse = |why: String| {
            Response::Refused {
            refused: format!("a checkpoint from {peer} to witness"),
            why,
            accepted: "a checkpoint signed by the peer's host key, with the entries that extend what this host witnessed".into(),
        }
        };
        let Some(key) = self.ctx.config().peer_key(peer) else {
            return refuse("not a configured peer".into());
        };
        let Some(origin) = note.lines().next().map(str::to_string) else {
            return refuse("an empty checkpoint".into());
        };
        let _g = self.lock.lock().await;
        let dir = self.ctx.state_dir.join("witness");
        let path = file_of(&dir, &origin);
        let (p2, n2, k2, path2) = (peer.to_string(), note.clone(), key, path.clone());
        let verdict = match tokio::task::spawn_blocking(move || {
            // What this host witnessed of that origin before (small; on the blocking pool with
            // the judgement, not on the async thread).
            let prev: Option<Witnessed> = std::fs::read(&path2)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            judge(prev.as_ref(), &p2, &k2, &n2, old_size, &lines)
        })
        .await
        {
            Ok(v) => v,
            Err(e) => return refuse(e.to_string()),
        };
        let save = |w: &Witnessed| {
            let (path, body) = (
                path.clone(),
                serde_json::to_vec_pretty(w).unwrap_or_default(),
            );
            tokio::task::spawn_blocking(move || fleetd_actors::files::write_private(&path, &body))
        };
        match verdict {
            Verdict::Cosign(w) => {
                if !matches!(save(&w).await, Ok(Ok(()))) {
                    return refuse("this host could not persist the witnessed state".into());
                }
                self.ctx.events.emit(EventKind::Witnessed {
                    peer: peer.to_string(),
                    origin: w.origin.clone(),
                    size: w.size,
                });
                // `judge` verified the note, so it has a body.
                let body = fleetd_actors::keys::note_body(&note).unwrap_or_default();
                let signature = fleetd_actors::keys::cosign(
                    body,
                    &self.ctx.witness_name(),
                    &self.ctx.host_key,
                    self.ctx.now() / 1000,
                );
                Response::Cosigned { signature }
            }
            Verdict::Conflict { size } => Response::WitnessConflict { size },
            Verdict::Refuse(why) => {
                tracing::warn!(%peer, %origin, %why, "a checkpoint was refused");
                refuse(why)
            }
            Verdict::Diverged(why) => {
                fleetd_actors::drift::service::raise(
                    &self.ctx,
                    peer,
                    fleetd_actors::drift::gates::AlertRule::Witness,
                    format!("the ledger {origin} of `{peer}` no longer extends what this host witnessed: {why}"),
                )
                .await;
                refuse(why)
            }
            Verdict::Equivocation(w) => {
                let _ = save(&w).await;
                let text = format!(
                    "equivocation: `{peer}` signed two checkpoints of {origin} at size {} with different heads; both are kept in {} and `{peer}` is refused from now on",
                    w.size,
                    path.display()
                );
                fleetd_actors::drift::service::raise(
                    &self.ctx,
                    peer,
                    fleetd_actors::drift::gates::AlertRule::Witness,
                    text.clone(),
                )
                .await;
                refuse(text)
            }
        }
    }

    /// Submit this host's checkpoints to each linked peer (called once per heartbeat); the
    /// ledger is read once for all of them. A peer still busy with the last submission is
    /// skipped.
    pub async fn submit_all(&self, peers: Vec<(String, quinn::Connection)>) {
        let Some(own) = self.ledger().await else {
            return;
        };
        let each = peers.into_iter().map(|(peer, conn)| {
            let own = own.clone();
            async move {
                if !self
                    .busy
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(peer.clone())
                {
                    return;
                }
                self.submit(&peer, &conn, &own).await;
                self.busy
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&peer);
            }
        });
        futures::future::join_all(each).await;
    }

    /// This host's ledger as the submitter needs it, parsed again only when the file grew.
    async fn ledger(&self) -> Option<Arc<OwnLedger>> {
        let path = self.ctx.state_dir.join("ledger.jsonl");
        let len = tokio::fs::metadata(&path).await.ok()?.len();
        if len > fleetd_actors::ledger::actor::MAX_LEDGER_BYTES {
            return None;
        }
        if let Some((_, l)) = self
            .own
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(at, _)| *at == len)
        {
            return Some(l.clone());
        }
        let text = tokio::fs::read_to_string(&path).await.ok()?;
        let parsed = Arc::new(OwnLedger::parse(&text)?);
        *self.own.lock().unwrap_or_else(|p| p.into_inner()) = Some((len, parsed.clone()));
        Some(parsed)
    }

    async fn submit(&self, peer: &str, conn: &quinn::Connection, own: &OwnLedger) {
        for _ in 0..MAX_ROUNDS {
            let w = self
                .witnessed_by
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(peer)
                .copied()
                .unwrap_or(0);
            let Some(Submission {
                size,
                note,
                old_size,
                lines,
            }) = own.next(w)
            else {
                return;
            };
            let req = Request::Witness {
                note: note.clone(),
                old_size,
                lines,
            };
            match wire::request(peer, conn, &req).await {
                Ok(Response::Cosigned { signature }) => {
                    let body = format!("{note}{signature}\n");
                    let checked = self
                        .ctx
                        .config()
                        .peer_key(peer)
                        .ok_or_else(|| "it is no longer a configured peer".to_string())
                        .and_then(|k| {
                            fleetd_actors::keys::verify_cosignature(
                                &body,
                                &fleetd_actors::keys::witness_name(peer),
                                &k,
                            )
                        });
                    if let Err(why) = checked {
                        tracing::warn!(%peer, size, %why, "a witness's cosignature was not kept");
                        return;
                    }
                    self.witnessed_by
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(peer.to_string(), size);
                    let p = self
                        .ctx
                        .state_dir
                        .join("witness-cosigs")
                        .join(format!("{peer}.note"));
                    let kept = tokio::task::spawn_blocking(move || {
                        fleetd_actors::files::write_private(&p, body.as_bytes())
                    })
                    .await;
                    if matches!(kept, Ok(Ok(()))) {
                        self.ctx.events.emit(EventKind::Cosigned {
                            witness: peer.to_string(),
                            size,
                        });
                    } else {
                        tracing::warn!(%peer, size, "could not keep a witness's cosignature");
                    }
                }
                Ok(Response::WitnessConflict { size: s }) => {
                    self.witnessed_by
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(peer.to_string(), s);
                    // It holds size `s`: show it this host's checkpoint of that size, if there
                    // is one, so it compares the heads (a rewritten history shows here).
                    if let Some(n) = own.checkpoint(s) {
                        let r = wire::request(
                            peer,
                            conn,
                            &Request::Witness {
                                note: n.to_string(),
                                old_size: s,
                                lines: vec![],
                            },
                        )
                        .await;
                        if !matches!(r, Ok(Response::Cosigned { .. })) {
                            tracing::warn!(%peer, answer = ?r, "the witness did not take this host's checkpoint at the size it holds");
                            return;
                        }
                    }
                }
                Ok(Response::Refused { why, .. }) => {
                    tracing::warn!(%peer, %why, "the witness refused this host's checkpoint");
                    return;
                }
                other => {
                    tracing::debug!(%peer, answer = ?other, "witness request failed");
                    return;
                }
            }
        }
    }
}
