//! Daemon boot and shutdown: the state dir, the config, the store, the actor tree, the API
//! actor (REST and MCP sockets), signals (SIGTERM/SIGINT graceful, SIGHUP reload) and the exit
//! code (non-zero after an escalation or a shutdown that overran its deadline).
//!
//! Owns process-level lifecycle only. Must never hold product rules.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetd_actors::clock::{Clock, SystemClock};
use fleetd_actors::config::{Config, OnShutdown};
use std::collections::BTreeMap;

use fleetd_actors::ctx::{Ctx, LinkPublishers, SharedCtx};
use fleetd_actors::drift::remote::RemoteAnchor;
use fleetd_actors::error::FleetError;
use fleetd_actors::events::{EventBus, EventKind};
use fleetd_actors::fleet::Fleet;
use fleetd_actors::link::state::LinkView;
use fleetd_actors::mail::view::MailView;
use fleetd_actors::publish::Publisher;
use fleetd_actors::store::Store;
use fleetd_actors::supervisor::actor::ChildSpec;
use fleetd_actors::types::Caller;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::{mcp, rest, term};

/// Where the daemon's sockets and files live inside its state dir.
pub struct Layout {
    pub state_dir: PathBuf,
}

impl Layout {
    pub fn new(state_dir: &Path) -> Self {
        Layout {
            state_dir: state_dir.to_path_buf(),
        }
    }
    /// The REST socket as clients name it: a symlink to the socket in [`Layout::socket_dir`].
    pub fn api_socket(&self) -> PathBuf {
        self.state_dir.join("api.sock")
    }
    /// The MCP socket as clients name it: a symlink to the socket in [`Layout::socket_dir`].
    pub fn mcp_socket(&self) -> PathBuf {
        self.state_dir.join("mcp.sock")
    }
    /// Where the listening sockets really are. A confined member sees this directory (read-only)
    /// rather than the socket files, so a socket bound again by a restarted daemon or API actor
    /// is the one it reaches (a mount of the file would keep the old one).
    pub fn socket_dir(&self) -> PathBuf {
        self.state_dir.join(fleetd_actors::sandbox::SOCKET_DIR)
    }
    pub fn db(&self) -> PathBuf {
        self.state_dir.join("fleetd.redb")
    }
}

/// Read and check a config file (or the built-in default).
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    let config = match path {
        Some(p) => {
            // Bounded by the bytes actually read (a FIFO or /dev/zero has no size to check).
            use std::io::Read;
            let mut text = String::new();
            std::fs::File::open(p)
                .and_then(|f| f.take((1 << 20) + 1).read_to_string(&mut text))
                .with_context(|| format!("config file {}", p.display()))?;
            anyhow::ensure!(
                text.len() <= 1 << 20,
                "config file {} is larger than 1 MiB",
                p.display()
            );
            Config::parse(&text).with_context(|| p.display().to_string())?
        }
        None => Config::default(),
    };
    let tools = mcp::tool_names();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    let problems = config.check(&tools);
    anyhow::ensure!(
        problems.is_empty(),
        "the config has problems:\n  - {}",
        problems.join("\n  - ")
    );
    Ok(config)
}

/// The host key: `daemon.key_file`, or `STATE_DIR/host.key` (created at first start).
fn load_or_create_key(
    config: &Config,
    state_dir: &Path,
) -> anyhow::Result<ed25519_dalek::SigningKey> {
    use fleetd_actors::keys;
    match &config.daemon.key_file {
        Some(f) => Ok(keys::load(Path::new(f))?),
        None => {
            let p = state_dir.join("host.key");
            if !p.exists() {
                let k = keys::generate();
                keys::save(&p, &k)?;
                tracing::info!(path = %p.display(), public_key = %keys::public_text(&k.verifying_key()), "created the host key");
            }
            Ok(keys::load(&p)?)
        }
    }
}

/// Bind the QUIC endpoint and start a PeerLink per configured peer, if `link.listen` is set.
async fn start_links(
    ctx: &SharedCtx,
    links: Publisher<BTreeMap<String, LinkView>>,
    remote_anchors: Publisher<Vec<RemoteAnchor>>,
) -> anyhow::Result<Option<crate::link::actor::Links>> {
    use crate::link::endpoint::{Endpoint, Peer};
    let c = ctx.config();
    let Some(listen) = &c.link.listen else {
        return Ok(None);
    };
    let addr: std::net::SocketAddr = listen
        .parse()
        .with_context(|| format!("link.listen {listen}"))?;
    let mut peers = vec![];
    let own = ctx.host_key.verifying_key();
    if let Some(name) = own_key_as_peer(&c, &own) {
        anyhow::bail!(
            "peers.{name}.public_key is this host's own key: a host cannot be its own peer. Put {name}'s key there (`cat host.key.pub` on {name})"
        );
    }
    for (name, p) in &c.peers {
        peers.push(Peer {
            name: name.clone(),
            addr: p
                .addr
                .parse()
                .with_context(|| format!("peers.{name}.addr {}", p.addr))?,
            key: fleetd_actors::keys::parse_public(&p.public_key)
                .map_err(|e| anyhow::anyhow!("peers.{name}.public_key: {e}"))?,
        });
    }
    let ep = Endpoint::bind(
        addr,
        ctx.host_key.clone(),
        c.daemon.host.clone(),
        peers,
        Duration::from_secs(c.link.keep_alive_secs.max(1)),
        Duration::from_secs(c.link.idle_timeout_secs.max(2)),
    )?;
    tracing::info!(listen = %ep.local_addr()?, peers = c.peers.len(), "peer links listening");
    let links = crate::link::actor::Links::start(ctx.clone(), ep, links, remote_anchors).await?;
    Ok(Some(links))
}

/// The name of a configured peer whose key is `own` (this host's), if any.
pub fn own_key_as_peer(
    c: &fleetd_actors::config::Config,
    own: &ed25519_dalek::VerifyingKey,
) -> Option<String> {
    c.peers
        .keys()
        .find(|name| c.peer_key(name).as_ref() == Some(own))
        .cloned()
}

/// Start the post office (lead-to-lead mail) under the root supervisor.
async fn start_post_office(
    fleet: &Fleet,
    transport: fleetd_actors::mail::actor::Transport,
    view: Publisher<MailView>,
) -> anyhow::Result<()> {
    use fleetd_actors::mail::actor::{MailActor, MailArgs};
    let f = fleet.clone();
    let hand_on: fleetd_actors::mail::actor::HandOn = Arc::new(move |origin, from, body| {
        let f = f.clone();
        Box::pin(async move { f.deliver_remote(origin, from, body).await })
    });
    let ctx = fleet.ctx.clone();
    fleet
        .start_child(ChildSpec::actor("mail", "mail", move || {
            let args = MailArgs {
                ctx: ctx.clone(),
                hand_on: hand_on.clone(),
                transport: transport.clone(),
                view: view.clone(),
            };
            (MailActor, args)
        }))
        .await?;
    Ok(())
}

/// What the API actor needs to (re)bind its listeners.
#[derive(Clone)]
struct ApiArgs {
    fleet: Fleet,
    layout: Arc<Layout>,
    reload: ReloadFn,
}

type ReloadFn =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<String, FleetError>> + Send + Sync>;

/// The API as a supervised actor: it owns the REST and MCP listeners; stopping it stops
/// accepting (first, at shutdown, being the last child started).
struct ApiActor;

/// What the API actor hears: one of its listeners ended (an error, a panic, or returning)
/// while the actor was not stopping. The actor then fails, so its policy restarts it (which
/// binds the sockets again) or escalates.
enum ApiMsg {
    ListenerEnded { which: &'static str, why: String },
}

/// Runs one listener; if it ends while `token` is not cancelled, tells the API actor.
fn listener(
    myself: &ActorRef<ApiMsg>,
    token: &CancellationToken,
    which: &'static str,
    serve: impl std::future::Future<Output = Result<(), String>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut inner = tokio::spawn(serve);
    let (me, token) = (myself.clone(), token.clone());
    tokio::spawn(async move {
        let why = tokio::select! {
            r = &mut inner => match fleetd_actors::supervisor::actor::why_ended(r) {
                Some(why) => why,
                None => return,
            },
            // Stopping: the listener ends on its own copy of the token; give it up if it
            // lingers.
            _ = token.cancelled() => {
                if tokio::time::timeout(Duration::from_secs(3), &mut inner).await.is_err() {
                    inner.abort();
                }
                return;
            }
        };
        if !token.is_cancelled() {
            tracing::error!(listener = which, %why, "a listener stopped; the API restarts");
            let _ = me.cast(ApiMsg::ListenerEnded { which, why });
        }
    })
}

struct ApiState {
    token: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    layout: Arc<Layout>,
}

/// Bind `link`'s socket in the socket dir (0700, the socket 0600) and point `link` at it.
fn bind_private(link: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let (Some(state), Some(name)) = (link.parent(), link.file_name()) else {
        return Err(std::io::Error::other("a socket path with no directory"));
    };
    let dir = state.join(fleetd_actors::sandbox::SOCKET_DIR);
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let target = Path::new(fleetd_actors::sandbox::SOCKET_DIR).join(name);
    if std::fs::read_link(link).ok().as_deref() != Some(target.as_path()) {
        // An older daemon's socket file, or a wrong link: replaced.
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(&target, link)?;
    }
    Ok(l)
}

impl ApiState {
    /// Cancel the listeners and wait (bounded) for them; remove the sockets.
    async fn close(&mut self) {
        self.token.cancel();
        for t in self.tasks.drain(..) {
            if tokio::time::timeout(Duration::from_secs(4), t)
                .await
                .is_err()
            {
                tracing::warn!("an API listener did not stop within 4 s");
            }
        }
        // The sockets go; the links stay, dangling until the next daemon binds.
        for link in [self.layout.api_socket(), self.layout.mcp_socket()] {
            if let Some(name) = link.file_name() {
                let _ = std::fs::remove_file(self.layout.socket_dir().join(name));
            }
        }
    }
}

impl Actor for ApiActor {
    type Msg = ApiMsg;
    type State = ApiState;
    type Arguments = ApiArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ApiMsg>,
        a: ApiArgs,
    ) -> Result<ApiState, ActorProcessingErr> {
        let token = CancellationToken::new();
        let config = a.fleet.ctx.config();
        // Checked at start too (`Daemon::start`); read again at each restart of this actor,
        // with the same refusal if the file was made readable since.
        let tcp_token = match &config.api.token_file {
            Some(f) => {
                Some(fleetd_actors::keys::load_token(Path::new(f)).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let api = rest::Api {
            fleet: a.fleet.clone(),
            reload: a.reload.clone(),
            shutdown: token.clone(),
            token: tcp_token,
            metrics: metrics.clone(),
        };
        let app = rest::router(api, config.limits.max_request_bytes);
        let mut tasks = vec![metrics.follow(&a.fleet, token.clone())];
        let rest_l = bind_private(&a.layout.api_socket())
            .map_err(|e| format!("{}: {e}", a.layout.api_socket().display()))?;
        let (app1, t1) = (app.clone(), token.clone());
        tasks.push(listener(&myself, &token, "REST", async move {
            rest::serve_unix(rest_l, app1, t1)
                .await
                .map_err(|e| e.to_string())
        }));
        if let Some(addr) = &config.api.tcp {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|e| format!("api.tcp {addr}: {e}"))?;
            let l = crate::tcp::Listener::new(l, &config.api);
            let t2 = token.clone();
            tasks.push(listener(&myself, &token, "REST TCP", async move {
                rest::serve_tcp(l, app, t2).await.map_err(|e| e.to_string())
            }));
        }
        let mcp_l = bind_private(&a.layout.mcp_socket())
            .map_err(|e| format!("{}: {e}", a.layout.mcp_socket().display()))?;
        let (f, t3) = (a.fleet.clone(), token.clone());
        let limits = mcp::Limits::new(&config.limits);
        tasks.push(listener(&myself, &token, "MCP", async move {
            mcp::serve(mcp_l, f, t3, limits).await;
            Ok(())
        }));
        tracing::info!(rest = %a.layout.api_socket().display(), mcp = %a.layout.mcp_socket().display(), tcp = ?config.api.tcp, "listening");
        Ok(ApiState {
            token,
            tasks,
            layout: a.layout,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<ApiMsg>,
        msg: ApiMsg,
        st: &mut ApiState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ApiMsg::ListenerEnded { which, why } => {
                // ractor runs no post_stop after a failure: close the rest here.
                st.close().await;
                Err(format!("the {which} listener stopped: {why}").into())
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ApiMsg>,
        st: &mut ApiState,
    ) -> Result<(), ActorProcessingErr> {
        st.close().await;
        Ok(())
    }
}

/// Tell a service manager (systemd `Type=notify`, or a test) how the daemon is doing, through
/// the datagram socket named by `NOTIFY_SOCKET` (the sd_notify protocol). No-op without it.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let r = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(&path))
    };
    if let Err(e) = r {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// A running daemon.
pub struct Daemon {
    pub fleet: Fleet,
    pub layout: Arc<Layout>,
    join: tokio::task::JoinHandle<()>,
    config_path: Option<PathBuf>,
    /// Peer links, when `link.listen` is set.
    pub links: Option<crate::link::actor::Links>,
}

/// Reload the config file into the running fleet; returns a short description.
async fn reload_config(fleet: &Fleet, path: Option<&Path>) -> Result<String, FleetError> {
    let Some(path) = path else {
        return Ok("no config file (running on the built-in default); nothing to reload".into());
    };
    match load_config(Some(path)) {
        Ok(mut c) => {
            // The endpoint and the links are built at start; keep the running ones and say so.
            let running = fleet.ctx.config();
            let mut detail = format!("reloaded {}", path.display());
            if c.link != running.link || c.peers != running.peers {
                c.link = running.link.clone();
                c.peers = running.peers.clone();
                detail.push_str("; the [link] and [peers] changes were not applied: they take effect at the next start");
            }
            if c.api != running.api {
                c.api = running.api.clone();
                detail.push_str("; the [api] changes were not applied: the listeners take them at the next start");
            }
            // The running token file is checked again: one made readable by others since the
            // start is refused here too (the listener keeps the token it read).
            if let Some(f) = &c.api.token_file
                && let Err(e) = fleetd_actors::keys::load_token(Path::new(f))
            {
                let detail = e.to_string();
                tracing::error!(%detail, "config reload refused");
                fleet
                    .ctx
                    .events
                    .emit(EventKind::ConfigReloaded { ok: false, detail });
                return Err(e);
            }
            fleet.reload(c).await;
            tracing::info!(%detail, "config reloaded");
            fleet.ctx.events.emit(EventKind::ConfigReloaded {
                ok: true,
                detail: detail.clone(),
            });
            Ok(detail)
        }
        Err(e) => {
            let detail = crate::report::report(&e);
            tracing::error!(%detail, "config reload refused; keeping the running config");
            fleet.ctx.events.emit(EventKind::ConfigReloaded {
                ok: false,
                detail: detail.clone(),
            });
            // Say once what would be accepted: the file's own error may already say it.
            let accepted = if detail.contains(". Accepted: ") {
                ""
            } else {
                "a config that passes `fleetd config check`"
            };
            Err(FleetError::invalid("config reload", detail, accepted))
        }
    }
}

/// Take group and other permissions off what an older fleetd left in the state dir (its top
/// level and the KB), without following symlinks.
fn tighten(state_dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let fix = |p: &Path| {
        if let Ok(m) = std::fs::symlink_metadata(p)
            && (m.is_file() || m.is_dir())
            && m.permissions().mode() & 0o077 != 0
        {
            let mode = m.permissions().mode() & !0o077;
            if let Err(e) = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)) {
                tracing::warn!(path = %p.display(), "could not make it private: {e}");
            }
        }
    };
    for dir in [state_dir.to_path_buf(), state_dir.join("kb")] {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten().take(100_000) {
                fix(&e.path());
            }
        }
    }
}

impl Daemon {
    /// Boot a daemon on `state_dir`.
    pub async fn start(
        state_dir: &Path,
        config_path: Option<PathBuf>,
        fleetd_exe: PathBuf,
    ) -> anyhow::Result<Daemon> {
        // Everything the daemon creates is the service user's alone (files 0600, directories
        // 0700); members get the umask the daemon was started with back (see `term`).
        term::remember_user_umask();
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("could not create the state dir {}", state_dir.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| {
                    format!(
                        "could not make the state dir {} private (mode 0700)",
                        state_dir.display()
                    )
                })?;
        }
        let state_dir = std::fs::canonicalize(state_dir)
            .with_context(|| format!("state dir {}", state_dir.display()))?;
        tighten(&state_dir);
        let layout = Arc::new(Layout::new(&state_dir));
        let config = load_config(config_path.as_deref())?;
        let store = Store::open(&layout.db()).map_err(|e| {
            if e.is_in_use() {
                let hint = format!(
                    "{e}. Is another `fleetd serve` running with --state-dir {}?",
                    state_dir.display()
                );
                anyhow::Error::new(e).context(hint)
            } else {
                anyhow::Error::new(e)
            }
        })?;
        let ledger = state_dir.join("ledger.jsonl");
        if let Err(why) = fleetd_actors::ledger::actor::check_is_ledger(&ledger) {
            anyhow::bail!(
                "the ledger {path} is not a fleetd ledger: {why}. Check it with `fleetd ledger verify {path}`; restore it from a backup (docs/OPERATIONS.md), or move it aside to start a new ledger",
                path = ledger.display()
            );
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let events = Arc::new(EventBus::new(clock.clone(), 4096));
        let backend = Arc::new(term::HostBackend::new(&state_dir, fleetd_exe.clone())?);
        let host_key = load_or_create_key(&config, &state_dir)?;
        // The TCP listener's token is a secret like the host key: a file others may read stops
        // the start here, before anything runs (the API actor reads it again when it starts).
        if let Some(f) = &config.api.token_file {
            fleetd_actors::keys::load_token(Path::new(f))?;
        }
        let (ctx, publishers) = Ctx::new(
            store,
            events,
            clock,
            config,
            backend,
            state_dir.clone(),
            fleetd_exe,
            host_key,
        );
        let ctx: SharedCtx = Arc::new(ctx);
        let (fleet, join, hosts) = Fleet::boot(ctx.clone(), publishers).await?;
        let (f2, p2) = (fleet.clone(), config_path.clone());
        let reload: ReloadFn = Arc::new(move || {
            let (f, p) = (f2.clone(), p2.clone());
            Box::pin(async move { reload_config(&f, p.as_deref()).await })
        });
        let args = ApiArgs {
            fleet: fleet.clone(),
            layout: layout.clone(),
            reload,
        };
        fleet
            .start_child(ChildSpec::actor("api", "api", move || {
                (ApiActor, args.clone())
            }))
            .await?;
        // Settled receipts beyond retention are trimmed now and then, by a supervised task. Once
        // the table is within retention the look is not repeated until a message has been added
        // (only new messages grow it), so an idle daemon reads two keys every five minutes.
        let c2 = ctx.clone();
        fleet
            .start_child(ChildSpec::task("gc", "gc", move || {
                let c = c2.clone();
                Box::pin(async move {
                    let mut every = tokio::time::interval(Duration::from_secs(300));
                    let mut settled: Option<(u64, usize)> = None;
                    loop {
                        every.tick().await;
                        let keep = c.config().tickets.retention;
                        let r = c.store.run(move |s| s.sweep_receipts(keep, settled)).await;
                        match r {
                            Ok(s) => settled = s,
                            Err(e) => {
                                settled = None;
                                tracing::warn!(error = %e, "could not trim old receipts");
                            }
                        }
                    }
                })
            }))
            .await?;
        let LinkPublishers {
            links,
            mail,
            remote_anchors,
        } = hosts;
        let links = start_links(&ctx, links, remote_anchors).await?;
        if let Some(l) = &links {
            start_post_office(&fleet, l.transport(), mail).await?;
        }
        tracing::info!(state_dir = %state_dir.display(), pid = std::process::id(), "fleetd started");
        Ok(Daemon {
            fleet,
            layout,
            join,
            config_path,
            links,
        })
    }

    pub async fn reload(&self) -> Result<String, FleetError> {
        reload_config(&self.fleet, self.config_path.as_deref()).await
    }

    /// Graceful shutdown: stop accepting, stop children in reverse start order within the
    /// deadline (stopping members first if `on_shutdown = "stop"`). Returns the exit code.
    pub async fn shutdown(self) -> i32 {
        let config = self.fleet.ctx.config();
        let deadline = config.daemon.shutdown_deadline();
        let started = tokio::time::Instant::now();
        // Before anything is stopped or saved: no delivery starts from now, and one already
        // handed to a terminal host is given a moment to be confirmed written.
        let unsettled = self
            .fleet
            .quiesce((deadline / 4).min(Duration::from_secs(2)))
            .await;
        for u in &unsettled {
            tracing::error!("{u}");
        }
        if config.daemon.on_shutdown == OnShutdown::Stop {
            let names = self.fleet.live_members().await.unwrap_or_default();
            let stops = names.iter().map(|n| {
                let f = self.fleet.clone();
                let n = n.to_string();
                async move { f.stop(&Caller::Operator, &n, false).await }
            });
            let _ = tokio::time::timeout(deadline / 2, futures::future::join_all(stops)).await;
        }
        if let Some(l) = &self.links {
            l.shutdown().await;
        }
        let remaining = deadline
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1));
        let hung = self.fleet.shutdown(remaining).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.join).await;
        if !hung.is_empty() {
            tracing::error!(?hung, "shutdown overran its deadline; these were killed");
            1
        } else if !unsettled.is_empty() {
            tracing::error!(
                deliveries = unsettled.len(),
                "fleetd stopped with deliveries in flight (resolved at the next start)"
            );
            1
        } else {
            tracing::info!("fleetd stopped cleanly");
            0
        }
    }

    /// Serve until a signal; returns the process exit code.
    pub async fn run_until_signalled(mut self) -> anyhow::Result<i32> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        // Ready only once the signal handlers are in place: a SIGHUP or SIGTERM sent right after
        // READY=1 must reach them, not the default action.
        notify("READY=1");
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
                _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break; }
                _ = hup.recv() => {
                    notify("RELOADING=1");
                    let _ = self.reload().await;
                    notify("READY=1");
                }
                _ = &mut self.join => {
                    let why = self.fleet.ctx.escalation();
                    let why = why.unwrap_or_else(|| "the supervisor stopped".into());
                    tracing::error!(reason = %why, "escalation: fleetd exits non-zero so its service manager restarts it");
                    eprintln!("fleetd: escalated: {why}");
                    return Ok(2);
                }
            }
        }
        notify("STOPPING=1");
        Ok(self.shutdown().await)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use fleetd_actors::clock::{Clock, SystemClock};
    use fleetd_actors::ctx::Ctx;
    use fleetd_actors::events::{EventBus, EventKind};
    use fleetd_actors::supervisor::actor::{ChildSpec, Supervisor, start_child};
    use ractor::Actor;

    fn ctx(dir: &std::path::Path) -> (Arc<Ctx>, fleetd_actors::ctx::Publishers) {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut config = fleetd_actors::config::Config::default();
        config.supervision.insert(
            "gc".into(),
            fleetd_actors::config::RestartPolicyConfig {
                max_restarts: 2,
                window_secs: 60,
                backoff_initial_ms: 1,
                backoff_max_ms: 1,
                ..Default::default()
            },
        );
        let (ctx, publishers) = Ctx::new(
            fleetd_actors::store::Store::open(&dir.join("state.redb")).unwrap(),
            Arc::new(EventBus::new(clock.clone(), 64)),
            clock,
            config,
            Arc::new(crate::term::HostBackend::new(dir, "/bin/false".into()).unwrap()),
            dir.to_path_buf(),
            "/bin/false".into(),
            ed25519_dalek::SigningKey::from_bytes(&[7; 32]),
        );
        (Arc::new(ctx), publishers)
    }

    /// A supervised task that errs, panics or returns fails its child: it is restarted under
    /// its policy, and past the limit the supervisor escalates.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_child_that_ends_is_restarted_then_escalates() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, publishers) = ctx(dir.path());
        let (_, mut events) = ctx.events.subscribe(u64::MAX);
        let (sup, join) = Actor::spawn(None, Supervisor, (ctx.clone(), publishers.escalation))
            .await
            .unwrap();
        let starts = Arc::new(AtomicU32::new(0));
        let s2 = starts.clone();
        let spec = ChildSpec::task("gc", "gc", move || {
            let n = s2.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match n {
                    0 => Err("boom".to_string()),
                    1 => panic!("a bug"),
                    _ => Ok(()),
                }
            })
        });
        start_child(&sup, spec).await.unwrap();
        let mut reasons = vec![];
        loop {
            let e = tokio::time::timeout(std::time::Duration::from_secs(10), events.recv())
                .await
                .expect("an event within 10 s")
                .unwrap();
            match e.kind {
                EventKind::Restarted { child, reason, .. } => {
                    assert_eq!(child, "gc");
                    reasons.push(reason);
                }
                EventKind::Escalated { reason } => {
                    assert!(
                        reason.contains("gc") && reason.contains("limit 2"),
                        "{reason}"
                    );
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].contains("gc stopped: boom"), "{reasons:?}");
        assert!(reasons[1].contains("it panicked"), "{reasons:?}");
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        tokio::time::timeout(std::time::Duration::from_secs(10), join)
            .await
            .expect("the supervisor stops after escalating")
            .unwrap();
    }
}
