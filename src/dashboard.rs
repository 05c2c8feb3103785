//! `fleetd dashboard`: the fleet in a browser. The operator's CLI serves one page (embedded in
//! the binary) on a loopback port and forwards the page's reads to the daemon's Unix socket, so
//! the browser sees what the operator may see, live through the event stream, and can change
//! nothing (only GET is forwarded; no terminal attach).
//!
//! Access: the printed URL carries a one-time token; opening it trades the token for a session
//! cookie (HttpOnly, SameSite=Strict) and the token is spent. Requests without the cookie, with
//! another Host than this loopback address (DNS rebinding), or for anything but reading are
//! refused. Owns that gate and the forwarding; must never write to the fleet.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::rest::constant_time_eq;

const PAGE: &str = include_str!("dashboard.html");
const COOKIE: &str = "fleetd_dashboard";

struct Gate {
    sock: PathBuf,
    addr: SocketAddr,
    /// The link's token until it is used once.
    login: Mutex<Option<String>>,
    session: String,
}

/// 32 random bytes as hex.
fn secret() -> anyhow::Result<String> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| anyhow::anyhow!("no randomness for the dashboard token"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("fleetd dashboard: {why}\n"),
    )
        .into_response()
}

async fn handle(State(g): State<Arc<Gate>>, req: Request) -> Response {
    // Only this loopback address by name: a page elsewhere cannot rebind a name onto it.
    let host_ok = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h == g.addr.to_string() || h == format!("localhost:{}", g.addr.port()));
    if !host_ok {
        return refuse(StatusCode::FORBIDDEN, "unexpected Host header");
    }
    if req.method() != Method::GET {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "the dashboard only reads; use the fleetd CLI to change the fleet",
        );
    }
    let path = req.uri().path().to_string();
    if path == "/login" {
        let given = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")))
            .unwrap_or("")
            .to_string();
        let mut login = g.login.lock().unwrap_or_else(|p| p.into_inner());
        return match login.as_deref() {
            Some(t) if constant_time_eq(t.as_bytes(), given.as_bytes()) => {
                *login = None;
                let cookie = format!("{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/", g.session);
                let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
                if let Ok(v) = HeaderValue::from_str(&cookie) {
                    r.headers_mut().insert(header::SET_COOKIE, v);
                }
                r
            }
            _ => refuse(
                StatusCode::FORBIDDEN,
                "this link is wrong or was already used; run `fleetd dashboard` for a new one",
            ),
        };
    }
    let has_session = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| {
            c.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_string)
        })
        .any(|v| constant_time_eq(v.as_bytes(), g.session.as_bytes()));
    if !has_session {
        return refuse(
            StatusCode::FORBIDDEN,
            "no session; open the link `fleetd dashboard` printed",
        );
    }
    if path == "/" {
        return (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
                ),
            ],
            PAGE,
        )
            .into_response();
    }
    let Some(api_path) = path.strip_prefix("/api") else {
        return refuse(StatusCode::NOT_FOUND, "no such page");
    };
    if api_path.ends_with("/attach") {
        return refuse(
            StatusCode::FORBIDDEN,
            "the dashboard does not attach to terminals",
        );
    }
    let target = match req.uri().query() {
        Some(q) => format!("{api_path}?{q}"),
        None => api_path.to_string(),
    };
    match forward(&g.sock, &target).await {
        Ok(r) => r,
        Err(e) => refuse(StatusCode::BAD_GATEWAY, &format!("the daemon: {e}")),
    }
}

/// GET `target` from the daemon's socket, as this (the operator's) process; the answer is
/// streamed back as it comes (the event stream stays open).
async fn forward(sock: &std::path::Path, target: &str) -> anyhow::Result<Response> {
    let stream = tokio::net::UnixStream::connect(sock).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::get(target)
        .header(header::HOST, "fleetd")
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// Serve the dashboard on 127.0.0.1:`port` (0: any free port) until interrupted; `ready` gets
/// the login URL once it listens.
pub async fn run(state_dir: PathBuf, port: u16) -> anyhow::Result<()> {
    let sock = state_dir.join("api.sock");
    anyhow::ensure!(
        sock.exists(),
        "no daemon at {}: is `fleetd serve` running with this state dir?",
        sock.display()
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let token = secret()?;
    let gate = Arc::new(Gate {
        sock,
        addr,
        login: Mutex::new(Some(token.clone())),
        session: secret()?,
    });
    {
        // A closed stdout must not end the dashboard: the link is all it has to say.
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "fleetd dashboard: http://{addr}/login?token={token}");
        let _ = writeln!(out, "(the link works once; Ctrl-C stops the dashboard)");
        let _ = out.flush();
    }
    let app = Router::new().fallback(handle).with_state(gate);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
