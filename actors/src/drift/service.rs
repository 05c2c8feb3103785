//! The drift protocol's I/O inside the daemon: reading the KB into an index, appending a signed
//! line (one append at a time), and raising an alert everywhere it belongs (kept by the
//! alerter, tracing, events, and a message to the lead). `fleet_drift`'s operations are in
//! `fleet/drift.rs`; the scheduler and pullers in `actor.rs`.
//!
//! Owns the order of that I/O. Must never decide a gate (see `gates`).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::ctx::Ctx;
use crate::drift::alerter::AlerterMsg;
use crate::drift::gates::{self, Index, Params, Report};
use crate::drift::kb;
use crate::drift::line::{NewLine, sign};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::injector::actor::InjectorMsg;
use crate::injector::state::Message;
use crate::types::Party;

pub use crate::drift::cache::CachedAnchor;

pub use crate::drift::alerts::Alert;

/// The rules' parameters at `now` from the live config.
pub fn params(ctx: &Ctx) -> Params {
    Params::from_config(&ctx.config().drift, ctx.now())
}

/// Read and index the whole KB (blocking; call from a blocking thread).
pub fn read_index(
    kb_dir: &std::path::Path,
    trusted: &[ed25519_dalek::VerifyingKey],
) -> std::io::Result<Index> {
    match kb::read(kb_dir) {
        Ok(s) => Ok(gates::index(&s, trusted)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Index::default()),
        Err(e) => Err(e),
    }
}

/// Append a signed line to `identity`'s log (serialized, synced before it returns).
pub async fn append(
    ctx: &Arc<Ctx>,
    identity: &str,
    mut line: NewLine,
) -> Result<String, FleetError> {
    let _g = ctx.kb_append.lock().await;
    let (kb_dir, key, id) = (ctx.kb_dir(), ctx.host_key.clone(), identity.to_string());
    let kind = line
        .kind
        .map(|k| k.as_str().to_string())
        .unwrap_or_default();
    let (signed, tick) = tokio::task::spawn_blocking(move || {
        line.tick = kb::next_tick(&kb_dir, &id);
        let signed = sign(&line, &key);
        kb::append(&kb_dir, &id, &kb::date_of(line.ts_ms), &signed).map(|_| (signed, line.tick))
    })
    .await
    .map_err(|e| FleetError::internal("a drift log append", e.to_string()))?
    .map_err(|e| match e.kind() {
        // The identity's directory is a symlink (or not a directory): refused, not failed.
        std::io::ErrorKind::InvalidData => FleetError::invalid(
            format!("a drift log append for {identity}"),
            e.to_string(),
            "an identity directory that is a real directory in the KB (remove the symlink)",
        ),
        _ => FleetError::internal("a drift log append", e.to_string()),
    })?;
    ctx.events.emit(EventKind::DriftLine {
        identity: identity.to_string(),
        kind,
        tick,
    });
    Ok(signed)
}

/// Raise an alert everywhere it belongs: tracing, the event stream, `GET /alerts`, and a
/// message to the lead.
pub async fn raise(ctx: &Arc<Ctx>, peer: &str, rule: crate::drift::gates::AlertRule, text: String) {
    tracing::warn!(%peer, %rule, alert = %text, "drift alert");
    // Kept before the event goes out, so whoever reacts to the event finds it in `/alerts`.
    let alert = Alert {
        at: ctx.now(),
        peer: peer.to_string(),
        rule: rule.to_string(),
        text: text.clone(),
    };
    match crate::drift::alerter::alerter(ctx).await {
        Ok(a) => {
            if let Err(e) = a
                .call(
                    |reply| AlerterMsg::Keep { alert, reply },
                    Duration::from_secs(5),
                )
                .await
            {
                tracing::warn!(error = %e, "a drift alert is raised but not kept for /alerts");
            }
        }
        Err(e) => tracing::warn!(error = %e, "a drift alert is raised but not kept for /alerts"),
    }
    ctx.events.emit(EventKind::DriftAlert {
        peer: peer.to_string(),
        rule: rule.to_string(),
        text: text.clone(),
    });
    notify_lead(ctx, &format!("[drift alert about {peer}] {text}")).await;
}

/// Queue a message (without a ticket) for the live primary, if there is one.
pub async fn notify_lead(ctx: &Arc<Ctx>, text: &str) {
    let Ok(registry) = ctx.dir.registry() else {
        return;
    };
    let Ok(Some(lead)) = registry
        .call(
            |reply| crate::registry::actor::RegistryMsg::Primary { reply },
            Duration::from_secs(5),
        )
        .await
    else {
        return;
    };
    let Some(inj) = ctx.dir.injector(&lead.name) else {
        return;
    };
    let number = match ctx.dir.tickets() {
        Ok(desk) => {
            desk.call(
                |reply| crate::tickets::actor::DeskMsg::Number { reply },
                Duration::from_secs(5),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let id = match number {
        Ok(Ok(id)) => id,
        Ok(Err(e)) | Err(e) => {
            tracing::warn!(error = %e, "the lead is not told of a drift alert: no message number");
            return;
        }
    };
    let msg = Message::new(
        id,
        lead.name.clone(),
        Party::Fleetd,
        None,
        crate::types::truncate(
            text,
            ctx.config().injector.max_message_bytes.saturating_sub(64),
        ),
    );
    if let Err(e) = inj
        .call(
            |reply| InjectorMsg::Enqueue {
                msg: Box::new(msg),
                ticket: None,
                reply,
            },
            Duration::from_secs(5),
        )
        .await
    {
        tracing::warn!(error = %e, "could not queue a drift alert for the lead");
    }
}

/// What a `fleet_drift` write returns.
#[derive(Clone, Debug, Serialize)]
pub struct Written {
    pub identity: String,
    /// A `first_contact` line written first, because the identity had no log.
    pub first_contact: Option<Value>,
    pub line: Value,
}

/// What `fleet_drift peers` returns.
#[derive(Clone, Debug, Serialize)]
pub struct PeersView {
    pub reader: Option<String>,
    pub heartbeat_secs: u64,
    pub last_pass: Option<String>,
    pub peers: Vec<Report>,
    pub alerts: Vec<Alert>,
}
