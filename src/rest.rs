//! The operator's REST API (axum): on the state dir's Unix socket, and optionally on a loopback
//! TCP port guarded by a bearer token. The CLI is a client of it. `docs/REST.md` documents
//! every route.
//!
//! Owns HTTP: routes, status codes, the SSE event stream, the attach upgrade. Every request
//! resolves its caller from the connection (SO_PEERCRED and the process tree on the Unix socket;
//! the operator on the token-checked TCP port, bounded by `crate::tcp`) and passes it to
//! [`Fleet`]; the event stream shows each caller each event as `Event::seen_by` lets it. Must
//! never make an Authz decision itself.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::IncomingStream;
use axum::{Json, Router};
use fleetd_actors::authz::{Action, authorize};
use fleetd_actors::error::{ErrorKind, FleetError};
use fleetd_actors::fleet::{Fleet, SignalRequest, SpawnRequest};
use fleetd_actors::types::Caller;
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::identity;

/// The upgrade token of the attach route.
pub const ATTACH_PROTOCOL: &str = "fleetd-attach";

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct Peer {
    pub pid: Option<u32>,
    pub tcp: bool,
    /// A TCP connection's own state: the guard marks it authenticated, and serving while a
    /// request runs (its deadlines are in [`crate::tcp`]).
    pub conn: Option<Arc<crate::tcp::ConnState>>,
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        let pid = stream
            .io()
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .map(|p| p as u32);
        Peer {
            pid,
            tcp: false,
            conn: None,
        }
    }
}

impl Connected<IncomingStream<'_, crate::tcp::Listener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, crate::tcp::Listener>) -> Self {
        Peer {
            pid: None,
            tcp: true,
            conn: Some(stream.io().state()),
        }
    }
}

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct Api {
    pub fleet: Fleet,
    /// Reloads the config file (SIGHUP does the same).
    pub reload: Arc<
        dyn Fn() -> futures::future::BoxFuture<'static, Result<String, FleetError>> + Send + Sync,
    >,
    pub shutdown: CancellationToken,
    pub token: Option<String>,
    /// `GET /metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl Api {
    fn caller(&self, peer: &Peer) -> Caller {
        if peer.tcp {
            Caller::Operator
        } else {
            identity::rest_caller(&self.fleet.ctx, peer.pid)
        }
    }
}

/// A refusal as an HTTP response: the status from its kind, the body `{"error": {...}}`.
pub struct ApiError(pub FleetError);

impl From<FleetError> for ApiError {
    fn from(e: FleetError) -> Self {
        ApiError(e)
    }
}

#[derive(Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: FleetError,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.0.kind.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, Json(ErrorBody { error: self.0 })).into_response()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

fn body<T>(r: Result<Json<T>, JsonRejection>, what: &str, accepted: &str) -> Result<T, ApiError> {
    r.map(|Json(v)| v).map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError(FleetError::new(
                fleetd_actors::error::ErrorKind::TooLarge,
                what,
                "the body is over this daemon's limits.max_request_bytes; it was not read in full",
                "a smaller body (or a larger limits.max_request_bytes in the config)",
            ))
        } else {
            ApiError(FleetError::invalid(what, e.body_text(), accepted))
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnBody {
    #[serde(default)]
    role: String,
    #[serde(default)]
    name: String,
    slot: Option<String>,
    profile: Option<String>,
    command: Option<Vec<String>>,
    cwd: Option<String>,
    resume: Option<String>,
    #[serde(default)]
    worktree: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendBody {
    message: String,
    #[serde(default)]
    wait: bool,
    wait_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyBody {
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputBody {
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultBody {
    target: String,
}

#[derive(Deserialize, Default)]
struct StopQuery {
    #[serde(default)]
    drain: bool,
}

#[derive(Deserialize, Default)]
struct SinceQuery {
    since: Option<u64>,
}

#[derive(Deserialize, Default)]
struct AttachQuery {
    rows: Option<u16>,
    cols: Option<u16>,
}

#[derive(utoipa::OpenApi)]
#[openapi(info(
    title = "fleetd REST API",
    description = "The operator's API on STATE_DIR/api.sock (and the optional loopback TCP listener, with `Authorization: Bearer TOKEN`). Callers are identified by their process; refusals are `{error: {kind, refused, why, accepted, rule?}}`. Shapes: docs/REST.md."
))]
struct ApiDoc;

/// The routes and the OpenAPI document describing them, built from the same definitions
/// (each handler's `#[utoipa::path]`), so neither can list a route the other lacks.
fn documented_routes() -> (Router<Api>, utoipa::openapi::OpenApi) {
    use utoipa::OpenApi;
    use utoipa_axum::{router::OpenApiRouter, routes};
    let (r, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(status))
        .routes(routes!(whoami))
        .routes(routes!(list, spawn))
        .routes(routes!(member, stop))
        .routes(routes!(send))
        .routes(routes!(screen))
        .routes(routes!(input))
        .routes(routes!(attach))
        .routes(routes!(queues))
        .routes(routes!(tickets))
        .routes(routes!(ticket))
        .routes(routes!(reply))
        .routes(routes!(ack))
        .routes(routes!(poll))
        .routes(routes!(message))
        .routes(routes!(signal))
        .routes(routes!(agents))
        .routes(routes!(events))
        .routes(routes!(reload))
        .routes(routes!(kb_dates))
        .routes(routes!(kb_file))
        .routes(routes!(alerts))
        .routes(routes!(drift))
        .routes(routes!(peers))
        .routes(routes!(metrics))
        .routes(routes!(decisions))
        .routes(routes!(decision))
        .routes(routes!(openapi_json))
        .split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    (r, doc)
}

/// The OpenAPI document of this daemon's REST API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    documented_routes().1
}

static OPENAPI_JSON: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `GET /openapi.json`: this API's OpenAPI 3.1 document, generated from the route definitions.
#[utoipa::path(get, path = "/openapi.json", tag = "daemon", responses((status = 200, description = "the OpenAPI document")))]
async fn openapi_json() -> Response {
    let body = OPENAPI_JSON
        .get_or_init(|| openapi().to_json().unwrap_or_default())
        .clone();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Build the router.
pub fn router(api: Api, max_body: usize) -> Router {
    // The same KB listing with a trailing slash (as a directory): an alias, not in the document.
    let r = documented_routes()
        .0
        .route("/kb/fleet/drift/{identity}/", get(kb_dates));
    let r = if cfg!(debug_assertions) {
        r.route("/debug/fault", post(fault))
    } else {
        r
    };
    r.layer(middleware::from_fn_with_state(api.clone(), guard))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(api)
}

/// Bearer-token check for TCP connections, and a tracing span around every request.
async fn guard(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    req: Request,
    next: Next,
) -> Response {
    let span = tracing::info_span!("rest", method = %req.method(), path = %req.uri().path(), pid = ?peer.pid, tcp = peer.tcp);
    if peer.tcp {
        let ok = match (
            &api.token,
            req.headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        ) {
            (Some(t), Some(h)) => h
                .strip_prefix("Bearer ")
                .is_some_and(|given| constant_time_eq(given.as_bytes(), t.as_bytes())),
            _ => false,
        };
        if !ok {
            return ApiError(FleetError::new(
                ErrorKind::Forbidden,
                "a request on the TCP port",
                "it has no valid bearer token",
                "an `Authorization: Bearer <token>` header with the token from api.token_file",
            ))
            .into_response();
        }
    }
    // A TCP connection that showed the token is past its auth deadline, and not idle while
    // this request is served (a bounded wait, the start of a stream).
    let _serving = peer.conn.as_ref().map(|c| {
        c.authenticated();
        c.serving()
    });
    next.run(req).instrument(span).await
}

/// Equality of two secrets in time that does not depend on where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[utoipa::path(get, path = "/status", tag = "daemon", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn status(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    let s = api.fleet.daemon_status(&c).await?;
    Ok(Json(serde_json::to_value(s).unwrap_or_default()))
}

#[utoipa::path(get, path = "/whoami", tag = "daemon", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn whoami(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.whoami(&c).await).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/members", tag = "members", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn list(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.list(&c).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(post, path = "/members", tag = "members", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn spawn(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    b: Result<Json<SpawnBody>, JsonRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let b = body(
        b,
        "spawn request",
        "{role, name, slot?, profile?, command?: [argv], cwd?, worktree?: bool} or {resume: NAME}",
    )?;
    let c = api.caller(&peer);
    let cwd = b.cwd.or_else(|| peer.pid.and_then(identity::cwd_of));
    let m = api
        .fleet
        .spawn(
            &c,
            SpawnRequest {
                role: b.role,
                name: b.name,
                slot: b.slot,
                profile: b.profile,
                command: b.command,
                cwd,
                resume: b.resume,
                worktree: b.worktree,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::to_value(m).unwrap_or_default()),
    ))
}

#[utoipa::path(get, path = "/members/{name}", tag = "members", params(("name" = String, Path, description = "a member's name")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn member(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.member_status(&c, &name).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(delete, path = "/members/{name}", tag = "members", params(("name" = String, Path, description = "a member's name"), ("drain" = Option<bool>, Query, description = "let it work through its queue first")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn stop(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    Query(q): Query<StopQuery>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    let drain = q.drain;
    Ok(Json(
        serde_json::to_value(api.fleet.stop(&c, &name, drain).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(post, path = "/members/{name}/messages", tag = "messages", params(("name" = String, Path, description = "a member's name")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn send(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    b: Result<Json<SendBody>, JsonRejection>,
) -> ApiResult<serde_json::Value> {
    let b = body(b, "send request", "{message, wait?: bool, wait_secs?: N}")?;
    let c = api.caller(&peer);
    let r = api
        .fleet
        .send(
            &c,
            &name,
            b.message,
            b.wait || b.wait_secs.is_some(),
            b.wait_secs,
        )
        .await?;
    Ok(Json(serde_json::to_value(r).unwrap_or_default()))
}

#[utoipa::path(get, path = "/members/{name}/screen", tag = "members", params(("name" = String, Path, description = "a member's name")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn screen(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
) -> Result<String, ApiError> {
    let c = api.caller(&peer);
    let member = fleetd_actors::types::MemberName::new(&name)?;
    authorize(
        &c,
        &Action::Screen { member: &member },
        &format!("screen of `{member}`"),
    )?;
    let d = api.fleet.member_status(&c, &name).await?;
    Ok(d.slot_view.map(|v| v.screen).unwrap_or_default())
}

#[utoipa::path(post, path = "/members/{name}/input", tag = "members", params(("name" = String, Path, description = "a member's name")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn input(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    b: Result<Json<InputBody>, JsonRejection>,
) -> ApiResult<serde_json::Value> {
    let b = body(b, "input request", "{text}")?;
    let c = api.caller(&peer);
    api.fleet.input(&c, &name, b.text.into_bytes()).await?;
    Ok(Json(serde_json::json!({"ok": true})))
}

#[utoipa::path(get, path = "/queues", tag = "members", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn queues(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::json!({ "queues": api.fleet.queue_depths(&c).await? }),
    ))
}

#[utoipa::path(get, path = "/tickets", tag = "tickets", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn tickets(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.tickets(&c).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/tickets/{id}", tag = "tickets", params(("id" = String, Path, description = "an id such as t-3, m-7 or d-2")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn ticket(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.ticket(&c, &id).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(post, path = "/tickets/{id}/reply", tag = "tickets", params(("id" = String, Path, description = "an id such as t-3, m-7 or d-2")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn reply(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    b: Result<Json<ReplyBody>, JsonRejection>,
) -> ApiResult<serde_json::Value> {
    let b = body(b, "reply request", "{message}")?;
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.reply(&c, &id, b.message).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(post, path = "/tickets/{id}/ack", tag = "tickets", params(("id" = String, Path, description = "an id such as t-3, m-7 or d-2")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn ack(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    api.fleet.ack(&c, &id).await?;
    Ok(Json(serde_json::json!({"acked": id})))
}

#[utoipa::path(get, path = "/poll", tag = "tickets", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn poll(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.poll(&c).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/messages/{id}", tag = "messages", params(("id" = String, Path, description = "an id such as t-3, m-7 or d-2")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn message(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.message(&c, &id).await?).unwrap_or_default(),
    ))
}

#[utoipa::path(post, path = "/signal", tag = "members", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn signal(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    b: Result<Json<SignalRequest>, JsonRejection>,
) -> ApiResult<serde_json::Value> {
    let b = body(
        b,
        "signal request",
        "{status: working|idle|permission|question|exited} or {hook: PAYLOAD}",
    )?;
    let c = api.caller(&peer);
    let ack = api.fleet.signal(&c, b).await?;
    Ok(Json(serde_json::to_value(ack).unwrap_or_default()))
}

#[utoipa::path(get, path = "/kb/fleet/drift/{identity}", tag = "drift", params(("identity" = String, Path, description = "a drift identity")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /kb/fleet/drift/{identity}/`: the dates of an identity's drift logs (read-only KB).
async fn kb_dates(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(identity): Path<String>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    fleetd_actors::authz::authorize(&c, &fleetd_actors::authz::Action::Read, "the drift KB")?;
    fleetd_actors::types::MemberName::new(&identity)?;
    let kb = api.fleet.ctx.kb_dir();
    let id = identity.clone();
    let dates = tokio::task::spawn_blocking(move || fleetd_actors::drift::kb::dates(&kb, &id))
        .await
        .map_err(|e| ApiError(FleetError::internal("the drift KB", e.to_string())))?
        .map_err(|e| {
            ApiError(match e.kind() {
                std::io::ErrorKind::NotFound => FleetError::not_found(
                    format!("drift logs of {identity}"),
                    "there are none",
                    "an identity that has logged",
                ),
                _ => FleetError::invalid(
                    format!("drift logs of {identity}"),
                    format!("they are not served: {e}"),
                    "an identity directory written by fleetd (a real directory in the KB)",
                ),
            })
        })?;
    Ok(Json(serde_json::json!(dates)))
}

#[utoipa::path(get, path = "/kb/fleet/drift/{identity}/{file}", tag = "drift", params(("identity" = String, Path, description = "a drift identity"), ("file" = String, Path, description = "a KB file, DATE.jsonl")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /kb/fleet/drift/{identity}/{date}.jsonl`: one log, as stored.
async fn kb_file(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((identity, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let c = api.caller(&peer);
    fleetd_actors::authz::authorize(&c, &fleetd_actors::authz::Action::Read, "the drift KB")?;
    fleetd_actors::types::MemberName::new(&identity)?;
    let date = file.strip_suffix(".jsonl").unwrap_or("");
    if chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_err() || date.len() != 10 {
        return Err(ApiError(FleetError::invalid(
            format!("drift log {file}"),
            "not a log name",
            "YYYY-MM-DD.jsonl",
        )));
    }
    let root = fleetd_actors::drift::kb::drift_root(&api.fleet.ctx.kb_dir());
    let (id, f) = (identity.clone(), file.clone());
    let read =
        tokio::task::spawn_blocking(move || fleetd_actors::drift::kb::read_file(&root, &id, &f))
            .await
            .map_err(|e| ApiError(FleetError::internal("reading a drift log", e.to_string())))?;
    let text = read.map_err(|e| {
        ApiError(match e.kind() {
            std::io::ErrorKind::NotFound => FleetError::not_found(
                format!("drift log {identity}/{file}"),
                "no such log",
                "a date from GET /kb/fleet/drift/{identity}/",
            ),
            _ => FleetError::invalid(
                format!("drift log {identity}/{file}"),
                format!("it is not served: {e}"),
                "a regular log file written by fleetd",
            ),
        })
    })?;
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], text).into_response())
}

#[utoipa::path(get, path = "/alerts", tag = "drift", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn alerts(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.drift_alerts(&c)?).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/drift", tag = "drift", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn drift(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.drift_peers(&c)?).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/agents", tag = "daemon", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /agents`: the agent profiles, whether their CLIs are installed and verified.
async fn agents(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    fleetd_actors::authz::authorize(&c, &fleetd_actors::authz::Action::Read, "agents")?;
    let config = api.fleet.ctx.config();
    Ok(Json(
        serde_json::to_value(crate::doctor::check(&config).await).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/peers", tag = "peers", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /peers`: this host and the reachability of every peer host.
async fn peers(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    fleetd_actors::authz::authorize(&c, &fleetd_actors::authz::Action::Read, "peers")?;
    let ctx = &api.fleet.ctx;
    let config = ctx.config();
    // The held mail's previews quote mail for the lead: shown to those the coordinator gate
    // shows the lead's mailbox to (the primary and the operator); others see the counts.
    let mut mail = ctx.views.mail.get();
    if !fleetd_actors::authz::coordinator_row_visible(&c) {
        mail.held.clear();
    }
    Ok(Json(serde_json::json!({
        "host": config.daemon.host,
        "public_key": fleetd_actors::keys::public_text(&ctx.host_key.verifying_key()),
        "listen": config.link.listen,
        "links": ctx.link_views(),
        "mail": mail,
        "remote_anchors": ctx
            .views
            .remote_anchors
            .with(|a| fleetd_actors::drift::remote::latest_of(a)),
    })))
}

#[utoipa::path(get, path = "/metrics", tag = "daemon", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /metrics`: the Prometheus/OpenMetrics text exposition (see `crate::metrics`).
async fn metrics(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Response, ApiError> {
    let c = api.caller(&peer);
    fleetd_actors::authz::authorize(&c, &fleetd_actors::authz::Action::Read, "metrics")?;
    let body = api.metrics.render(&api.fleet).await;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response())
}

#[utoipa::path(get, path = "/decisions", tag = "decisions", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn decisions(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.decision_list(&c)?).unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/decisions/{id}", tag = "decisions", params(("id" = String, Path, description = "an id such as t-3, m-7 or d-2")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn decision(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    Ok(Json(
        serde_json::to_value(api.fleet.decision_show(&c, &id)?).unwrap_or_default(),
    ))
}

#[utoipa::path(post, path = "/config/reload", tag = "daemon", responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
async fn reload(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> ApiResult<serde_json::Value> {
    let c = api.caller(&peer);
    authorize(&c, &Action::Admin, "config reload")?;
    let detail = (api.reload)().await?;
    Ok(Json(
        serde_json::json!({"reloaded": true, "detail": detail}),
    ))
}

async fn fault(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    b: Result<Json<FaultBody>, JsonRejection>,
) -> ApiResult<serde_json::Value> {
    let b = body(
        b,
        "fault request",
        "{target: registry|tickets|slot:NAME|injector:NAME|decision:d-N|drift:PEER}",
    )?;
    let c = api.caller(&peer);
    api.fleet.inject_fault(&c, &b.target).await?;
    Ok(Json(serde_json::json!({"injected": b.target})))
}

#[utoipa::path(get, path = "/events", tag = "daemon", params(("since" = Option<u64>, Query, description = "replay after this sequence number")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /events?since=N`: an SSE stream of every event after sequence N (replayed from the
/// daemon's ring of recent events), then live. Ends when the daemon shuts down.
async fn events(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Query(q): Query<SinceQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let c = api.caller(&peer);
    fleetd_actors::authz::authorize(&c, &fleetd_actors::authz::Action::Read, "event stream")?;
    let since = q
        .since
        .or_else(|| {
            headers
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.parse().ok())
        })
        .unwrap_or(0);
    let (past, rx) = api.fleet.ctx.events.subscribe(since);
    // Each event as this caller may see it (a receipt's screen text by the Screen rule).
    let to_sse = move |e: &fleetd_actors::events::Event| {
        SseEvent::default()
            .id(e.seq.to_string())
            .data(serde_json::to_string(&e.seen_by(&c)).unwrap_or_default())
    };
    let past = futures::stream::iter(past.iter().map(&to_sse).collect::<Vec<_>>());
    let live = live_until(rx, api.shutdown.clone()).map(move |r| match r {
        Ok(e) => to_sse(&e),
        Err(n) => SseEvent::default()
            .event("lagged")
            .data(format!("{{\"type\":\"lagged\",\"missed\":{n}}}")),
    });
    let stream = past.chain(live).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The live events until `shutdown`, then those already published (the last words: an
/// escalation, a member's exit) and the end; `Err(n)`: this subscriber missed `n` events.
fn live_until(
    rx: tokio::sync::broadcast::Receiver<fleetd_actors::events::Event>,
    shutdown: CancellationToken,
) -> impl futures::Stream<Item = Result<fleetd_actors::events::Event, u64>> {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    futures::stream::unfold(
        (rx, shutdown, false),
        |(mut rx, shutdown, mut closing)| async move {
            loop {
                let r = if closing {
                    match rx.try_recv() {
                        Ok(e) => Ok(e),
                        Err(TryRecvError::Lagged(n)) => Err(n),
                        Err(TryRecvError::Empty | TryRecvError::Closed) => return None,
                    }
                } else {
                    tokio::select! {
                        biased;
                        r = rx.recv() => match r {
                            Ok(e) => Ok(e),
                            Err(RecvError::Lagged(n)) => Err(n),
                            Err(RecvError::Closed) => return None,
                        },
                        _ = shutdown.cancelled() => {
                            closing = true;
                            continue;
                        }
                    }
                };
                return Some((r, (rx, shutdown, closing)));
            }
        },
    )
}

#[utoipa::path(get, path = "/members/{name}/attach", tag = "members", params(("name" = String, Path, description = "a member's name"), ("rows" = Option<u16>, Query, description = "terminal rows"),("cols" = Option<u16>, Query, description = "terminal columns")), responses((status = 200, description = "see docs/REST.md"), (status = "4XX", description = "a refusal: {error: {kind, refused, why, accepted, rule?}}")))]
/// `GET /members/{name}/attach` with `Upgrade: fleetd-attach`: after the 101, the connection
/// carries the terminal: the current screen, then its output; bytes sent are keys.
async fn attach(
    State(api): State<Api>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    Query(q): Query<AttachQuery>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let c = api.caller(&peer);
    let wants_upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(ATTACH_PROTOCOL));
    if !wants_upgrade {
        return Err(ApiError(FleetError::invalid(
            "attach",
            "the request does not ask for the attach upgrade",
            format!(
                "`Connection: Upgrade` and `Upgrade: {ATTACH_PROTOCOL}` (use `fleetd attach NAME`)"
            ),
        )));
    }
    let (snapshot, mut rx) = api.fleet.attach(&c, &name).await?;
    if let AttachQuery {
        rows: Some(r),
        cols: Some(cl),
    } = q
    {
        api.fleet.resize(&c, &name, r, cl).await?;
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let fleet = api.fleet.clone();
    let shutdown = api.shutdown.clone();
    tokio::spawn(
        async move {
            let Ok(upgraded) = on_upgrade.await else { return };
            let io = TokioIo::new(upgraded);
            let (mut rd, mut wr) = tokio::io::split(io);
            if wr.write_all(&snapshot).await.is_err() {
                return;
            }
            let mut buf = vec![0u8; 4096];
            loop {
                tokio::select! {
                    out = rx.recv() => match out {
                        Ok(bytes) => if wr.write_all(&bytes).await.is_err() { break },
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => break,
                    },
                    n = rd.read(&mut buf) => match n {
                        Ok(0) | Err(_) => break,
                        Ok(n) => if fleet.input(&c, &name, buf[..n].to_vec()).await.is_err() { break },
                    },
                    _ = shutdown.cancelled() => break,
                }
            }
            let _ = wr.shutdown().await;
        }
        .instrument(tracing::info_span!("attach")),
    );
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    resp.headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static(ATTACH_PROTOCOL));
    Ok(resp)
}

/// Serve the router on a Unix socket until `shutdown`.
pub async fn serve_unix(
    listener: UnixListener,
    app: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, app.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Serve the router on the bounded TCP listener until `shutdown`.
pub async fn serve_tcp(
    listener: crate::tcp::Listener,
    app: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, app.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fleetd_actors::clock::ManualClock;
    use fleetd_actors::events::{EventBus, EventKind};
    use futures::StreamExt;
    use tokio_util::sync::CancellationToken;

    use super::live_until;

    /// An event published just before the shutdown (an escalation) still reaches a subscriber
    /// that had not read it yet; then the stream ends.
    #[tokio::test]
    async fn the_stream_ends_after_the_events_published_before_the_shutdown() {
        let bus = EventBus::new(Arc::new(ManualClock::new(0)), 64);
        let (_, rx) = bus.subscribe(0);
        let stop = CancellationToken::new();
        let mut live = Box::pin(live_until(rx, stop.clone()));
        bus.emit(EventKind::Escalated { reason: "a".into() });
        assert!(matches!(live.next().await, Some(Ok(e)) if e.seq == 1));
        bus.emit(EventKind::Escalated { reason: "b".into() });
        bus.emit(EventKind::Escalated { reason: "c".into() });
        stop.cancel();
        let rest: Vec<u64> = live.map(|r| r.map(|e| e.seq).unwrap_or(0)).collect().await;
        assert_eq!(rest, vec![2, 3]);
    }
}
