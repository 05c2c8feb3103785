//! Requests over an open link: one bidirectional QUIC stream per request, one bounded frame each
//! way (through `codec`).
//!
//! Owns the request and response shapes and the serving loop. A frame that is too large or does
//! not decode is answered with a `Refused` response naming why, the stream is closed, and the
//! link keeps serving: a peer's bytes never panic the daemon. Must never read a frame without a
//! size bound or a deadline.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec;

/// Largest request or response frame on a link.
pub const MAX_FRAME: usize = 1 << 20;
/// How long one request may take end to end.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many requests from one peer are served at once; more wait for a stream.
pub const MAX_CONCURRENT: usize = 64;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Request {
    /// Liveness and round-trip measurement; the payload comes back.
    Ping { payload: Vec<u8> },
    /// Lead-to-lead traffic from the sender's outbox, in sequence order, from the sender's
    /// state `epoch`. Answered with `Delivered` once the receiver holds it durably.
    Deliver {
        epoch: u64,
        envelopes: Vec<fleetd_actors::mail::envelope::Envelope>,
    },
    /// The drift anchors of the identities homed on the answering host (pull-only).
    Anchors,
    /// Witness this checkpoint (a signed note): `lines` extend what the witness holds at
    /// `old_size` to it (the header first when `old_size` is 0).
    Witness {
        note: String,
        old_size: u64,
        lines: Vec<String>,
    },
    /// `home` signed both `lines` (two anchors of `identity`, one UTC day, different roles).
    Equivocation {
        home: String,
        identity: String,
        lines: Vec<String>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Response {
    Pong {
        payload: Vec<u8>,
    },
    /// The receiver holds every envelope of the sender's epoch up to `upto` durably.
    Delivered {
        upto: u64,
    },
    /// `(identity, signed line)` for each anchor the answering host serves.
    Anchors {
        anchors: Vec<(String, String)>,
    },
    /// A report was checked and taken.
    Noted,
    /// The witness persisted the checkpoint: its signature line over the checkpoint body.
    Cosigned {
        signature: String,
    },
    /// The witness holds another size for this origin.
    WitnessConflict {
        size: u64,
    },
    /// The request was not served: what was refused, why, and what would be accepted.
    Refused {
        refused: String,
        why: String,
        accepted: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("the link to {peer} failed during a request: {why}")]
    Link { peer: String, why: String },
    #[error("{peer} did not answer within {REQUEST_TIMEOUT:?}")]
    Timeout { peer: String },
    #[error("{peer} closed the stream without an answer")]
    NoAnswer { peer: String },
}

/// Send one request on `conn` and wait for its response.
pub async fn request(
    peer: &str,
    conn: &quinn::Connection,
    req: &Request,
) -> Result<Response, RequestError> {
    let fail = |why: String| RequestError::Link {
        peer: peer.to_string(),
        why,
    };
    let go = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| fail(e.to_string()))?;
        codec::write_frame(&mut send, req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let _ = send.finish();
        let resp = codec::read_frame::<_, Response>(&mut recv, MAX_FRAME)
            .await
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| RequestError::NoAnswer {
                peer: peer.to_string(),
            })?;
        // One frame per stream: consume the end (no STOP_SENDING for a stream read to its FIN).
        let _ = recv.read_to_end(0).await;
        Ok(resp)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, go)
        .await
        .map_err(|_| RequestError::Timeout {
            peer: peer.to_string(),
        })?
}

/// What serves a peer's requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        peer: &str,
        req: Request,
    ) -> impl std::future::Future<Output = Response> + Send;
}

/// The built-in handler: answers pings.
pub struct Basic;

impl Handler for Basic {
    async fn handle(&self, _peer: &str, req: Request) -> Response {
        match req {
            Request::Ping { payload } => Response::Pong { payload },
            Request::Deliver { .. }
            | Request::Anchors
            | Request::Equivocation { .. }
            | Request::Witness { .. } => Response::Refused {
                refused: "a fleet request".into(),
                why: "this endpoint serves pings only".into(),
                accepted: "Ping".into(),
            },
        }
    }
}

/// Serve `peer`'s requests on `conn` until the connection ends.
pub async fn serve<H: Handler>(peer: String, conn: quinn::Connection, handler: Arc<H>) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (mut send, mut recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(_) => return,
        };
        let (peer, handler) = (peer.clone(), handler.clone());
        let span = tracing::debug_span!("link request", %peer);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _permit = permit;
                // The frame, then the end of the stream (one frame per stream; reading to the
                // FIN also spares the peer a STOP_SENDING), all within the deadline.
                let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
                    let r = codec::read_frame::<_, Request>(&mut recv, MAX_FRAME).await;
                    let ended = match &r {
                        Ok(Some(_)) => recv.read_to_end(0).await.is_ok(),
                        _ => true,
                    };
                    (r, ended)
                })
                .await
                .map(|(r, ended)| r.map(|o| o.map(|req| (req, ended))));
                let resp = match read {
                    // One frame per stream: the request must end there.
                    Ok(Ok(Some((req, true)))) => handler.handle(&peer, req).await,
                    Ok(Ok(Some((_, false)))) => Response::Refused {
                        refused: "a link request".into(),
                        why: "more than one frame on a request stream".into(),
                        accepted: "exactly one Request frame, then the end of the stream".into(),
                    },
                    Ok(Ok(None)) => return,
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "a frame from a peer was refused");
                        let _ = recv.stop(0u32.into());
                        Response::Refused {
                            refused: "a link request".into(),
                            why: e.to_string(),
                            accepted: format!(
                                "one length-prefixed frame of at most {MAX_FRAME} bytes holding a Request of link protocol {}",
                                super::endpoint::PROTOCOL
                            ),
                        }
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "a peer's request did not arrive in time");
                        return;
                    }
                };
                if codec::write_frame(&mut send, &resp).await.is_ok() {
                    let _ = send.finish();
                }
            },
            span,
        ));
    }
}
