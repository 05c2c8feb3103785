//! A client of the REST API over the state dir's Unix socket (hyper), used by the CLI, the
//! demo and the tests. Owns HTTP-over-Unix-socket plumbing, SSE parsing and the attach
//! upgrade; must never decide anything a daemon decides.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use fleetd_actors::error::FleetError;
use fleetd_actors::events::Event;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::rest::{ATTACH_PROTOCOL, ErrorBody};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Api(FleetError),
    #[error(
        "cannot reach the fleetd daemon at {path}: {source}. Is `fleetd serve --state-dir {dir}` running?"
    )]
    Connect {
        path: String,
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("talking to the daemon: {0}")]
    Protocol(String),
}

/// The largest response body the client reads.
const MAX_BODY: usize = 64 << 20;

#[derive(Clone, Debug)]
pub struct Client {
    state_dir: PathBuf,
}

impl Client {
    pub fn new(state_dir: &Path) -> Self {
        Client {
            state_dir: state_dir.to_path_buf(),
        }
    }

    fn socket(&self) -> PathBuf {
        self.state_dir.join("api.sock")
    }

    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, ClientError> {
        let sock = self.socket();
        let stream = UnixStream::connect(&sock)
            .await
            .map_err(|source| ClientError::Connect {
                path: sock.display().to_string(),
                dir: self.state_dir.display().to_string(),
                source,
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(sender)
    }

    fn build(
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        let b = match body {
            Some(v) => Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            None => Bytes::new(),
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "fleetd");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        req.body(Full::new(b))
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Send a request and return the status and body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let mut s = self.connect().await?;
        let resp = s
            .send_request(Self::build(method, path, body)?)
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let status = resp.status();
        let limited = http_body_util::Limited::new(resp.into_body(), MAX_BODY);
        let bytes = limited
            .collect()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?
            .to_bytes();
        Ok((status, bytes))
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.raw(method, path, body).await?;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => ClientError::Api(e.error),
                Err(_) => ClientError::Protocol(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes)
                )),
            });
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Protocol(format!("bad response body: {e}")))
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::GET, path, None).await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, ClientError> {
        self.json(Method::POST, path, Some(body)).await
    }

    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::DELETE, path, None).await
    }

    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let (status, bytes) = self.raw(Method::GET, path, None).await?;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => ClientError::Api(e.error),
                Err(_) => ClientError::Protocol(format!("HTTP {status}")),
            });
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Subscribe to the event stream from sequence `since` on.
    pub async fn events(&self, since: u64) -> Result<EventStream, ClientError> {
        let mut s = self.connect().await?;
        let req = Self::build(Method::GET, &format!("/events?since={since}"), None)?;
        let resp = s
            .send_request(req)
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if !resp.status().is_success() {
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => ClientError::Api(e.error),
                Err(_) => ClientError::Protocol("event stream refused".into()),
            });
        }
        Ok(EventStream {
            body: resp.into_body(),
            buf: Vec::new(),
        })
    }

    /// Attach to a member's terminal: returns the upgraded connection (screen out, keys in).
    pub async fn attach(
        &self,
        name: &str,
        rows: u16,
        cols: u16,
    ) -> Result<TokioIo<hyper::upgrade::Upgraded>, ClientError> {
        let mut s = self.connect().await?;
        let req = Request::builder()
            .method(Method::GET)
            .uri(format!("/members/{name}/attach?rows={rows}&cols={cols}"))
            .header("host", "fleetd")
            .header("connection", "upgrade")
            .header("upgrade", ATTACH_PROTOCOL)
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = s
            .send_request(req)
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => ClientError::Api(e.error),
                Err(_) => ClientError::Protocol("attach refused".into()),
            });
        }
        let up = hyper::upgrade::on(resp)
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(TokioIo::new(up))
    }
}

/// A parsed SSE stream of [`Event`]s.
pub struct EventStream {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl EventStream {
    /// The next event; `None` when the daemon closed the stream.
    pub async fn next(&mut self) -> Option<Result<Event, ClientError>> {
        loop {
            if let Some(pos) = find(&self.buf, b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..pos + 2).collect();
                let text = String::from_utf8_lossy(&block);
                let mut data = String::new();
                let mut kind = None;
                for line in text.lines() {
                    if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    } else if let Some(e) = line.strip_prefix("event:") {
                        kind = Some(e.trim().to_string());
                    }
                }
                if data.is_empty() || kind.as_deref() == Some("lagged") {
                    continue;
                }
                return Some(
                    serde_json::from_str(&data)
                        .map_err(|e| ClientError::Protocol(format!("bad event: {e}"))),
                );
            }
            if self.buf.len() > MAX_BODY {
                return Some(Err(ClientError::Protocol("event too large".into())));
            }
            match self.body.frame().await? {
                Ok(f) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
                Err(e) => return Some(Err(ClientError::Protocol(e.to_string()))),
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
