//! MCP: the fleet tools, an rmcp server the daemon runs per connection on `mcp.sock`. Agents
//! reach it through `fleetd mcp` (`shim`), a pipe from their stdio to the socket.
//!
//! Owns the tool surface: names, JSON schemas, descriptions, and how results and refusals look
//! (structured content plus readable text). Every byte of MCP goes through rmcp, for both
//! protocol eras (2025-11-25 with `initialize`, 2026-07-28 with `server/discover`). Must never
//! take identity from a tool's arguments: the caller is resolved from the socket's peer pid.

use std::sync::Arc;
use std::time::Duration;

use fleetd_actors::backoff::Backoff;
use fleetd_actors::error::FleetError;
use fleetd_actors::fleet::{Fleet, SpawnRequest};
use fleetd_actors::types::Caller;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams,
    ResultType, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::identity;

const INSTRUCTIONS: &str = "fleetd fleet tools. Your identity comes from the terminal you run in (fleet_whoami). \
The lead (primary) spawns and stops members and sends them work; workers answer each message with fleet_reply \
on the ticket named in the message header, and may fleet_ask their lead. Use wait:false for fleet_send and \
collect answers with fleet_poll / fleet_ack.";

/// A result: readable text (a summary line, then the JSON) and the same JSON as structured
/// content. Structured content is always a JSON object, as MCP requires.
fn text_and_json<T: Serialize>(summary: String, v: &T) -> CallToolResult {
    let json = match serde_json::to_value(v).unwrap_or(serde_json::Value::Null) {
        o @ serde_json::Value::Object(_) => o,
        other => serde_json::json!({ "result": other }),
    };
    let mut r = CallToolResult::structured(json.clone());
    r.content = vec![ContentBlock::text(format!(
        "{summary}\n\n{}",
        serde_json::to_string_pretty(&json).unwrap_or_default()
    ))];
    r
}

fn refusal(e: FleetError) -> CallToolResult {
    let json = serde_json::json!({ "error": e });
    let mut r = CallToolResult::structured_error(json);
    r.content = vec![ContentBlock::text(e.to_string())];
    r
}

fn done<T: Serialize>(
    res: Result<T, FleetError>,
    summary: impl FnOnce(&T) -> String,
) -> Result<CallToolResult, McpError> {
    Ok(match res {
        Ok(v) => text_and_json(summary(&v), &v),
        Err(e) => refusal(e),
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnArgs {
    /// primary, architect or worker (not with resume).
    #[serde(default)]
    pub role: String,
    /// The new member's name: 1-32 of A-Z a-z 0-9 . _ -. (not with resume).
    #[serde(default)]
    pub name: String,
    /// For an architect: the configured architect slot to bind (e.g. opus, sol).
    pub slot: Option<String>,
    /// The agent profile: claude, codex, gemini, opencode (wired with the fleet tools, status
    /// hooks and the charter), or sim/shell; an architect defaults to its slot's. Required
    /// unless a command is given (which then runs with the `generic` profile).
    pub profile: Option<String>,
    /// The command to run instead of the profile's, as an argv list.
    pub command: Option<Vec<String>>,
    /// Restart this exited member with its conversation (same name, role, slot, charter).
    pub resume: Option<String>,
    /// Give the member its own git worktree and branch (removed at its exit unless it holds
    /// work). Default false.
    #[serde(default)]
    pub worktree: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// The member to send to.
    pub to: String,
    /// The message; it lands in the target's terminal when it is idle, with a ticket header.
    pub message: String,
    /// Wait (bounded) for the reply instead of returning the ticket at once. Default false.
    #[serde(default)]
    pub wait: bool,
    /// With wait: at most this many seconds (capped by tickets.send_wait_max_seconds).
    pub wait_secs: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyArgs {
    /// The ticket from the header of the message you are answering, e.g. t-12.
    pub ticket: String,
    /// Your answer.
    pub message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    /// The question for your lead.
    pub question: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AckArgs {
    /// A ticket fleet_poll returned, once you have read its answer.
    pub ticket: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// A member to describe; without it, the daemon.
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopArgs {
    /// The member to stop.
    pub name: String,
    /// First let it work through its queued messages and finish its turn.
    #[serde(default)]
    pub drain: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionArgs {
    /// open (primary), position (architect), close (primary), or show.
    pub action: String,
    /// position, close, show: the decision, e.g. d-3.
    pub decision_id: Option<String>,
    /// open: what is being decided.
    pub subject: Option<String>,
    /// open: the configured architect slots convened (e.g. ["opus", "sol"]).
    pub slots: Option<Vec<String>>,
    /// open: the deadline, RFC 3339 (or use deadline_secs).
    pub deadline: Option<String>,
    /// open: the deadline in seconds from now (or use deadline).
    pub deadline_secs: Option<u64>,
    /// open: the round cap (default 2).
    pub max_rounds: Option<u32>,
    /// position: your slot's next round (1, then 2, ...).
    pub round: Option<u32>,
    /// position: `position` or `abstain`.
    pub kind: Option<String>,
    /// position: your position, or your reason to abstain.
    pub content: Option<String>,
    /// close: the lead's verdict (recorded, never interpreted).
    pub verdict: Option<String>,
    /// close: why.
    pub rationale: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriftArgs {
    /// anchor (a clean fencepost in your own log), drift (a drift event in your own log),
    /// observe (your report about another identity), or peers (what the pullers last saw).
    pub action: String,
    /// anchor, drift, observe: the identity statement (e.g. "researcher for the parser team").
    pub baseline: Option<String>,
    /// anchor: write a reanchor instead of a fencepost.
    #[serde(default)]
    pub reanchor: bool,
    /// drift (required), observe (optional: the peer was seen drifting): what drifted, any JSON.
    pub delta: Option<serde_json::Value>,
    /// observe: the identity observed.
    pub subject: Option<String>,
}

fn need<T>(v: Option<T>, field: &str, action: &str) -> Result<T, FleetError> {
    v.ok_or_else(|| {
        FleetError::invalid(
            format!("fleet_decision {action}"),
            format!("`{field}` is missing"),
            match action {
                "open" => {
                    "{action: open, subject, slots: [..], deadline | deadline_secs, max_rounds?}"
                }
                "position" => {
                    "{action: position, decision_id, round, kind: position|abstain, content}"
                }
                "close" => "{action: close, decision_id, verdict, rationale}",
                _ => "{action: show, decision_id}",
            },
        )
    })
}

/// The fleet tools, for one MCP connection whose peer is `pid`.
#[derive(Clone)]
pub struct FleetTools {
    fleet: Fleet,
    caller: Arc<identity::ConnectionCaller>,
    max_request: usize,
    tool_router: ToolRouter<FleetTools>,
}

#[tool_router]
impl FleetTools {
    pub fn new(fleet: Fleet, pid: Option<u32>) -> Self {
        FleetTools {
            fleet,
            caller: Arc::new(identity::ConnectionCaller::new(pid)),
            max_request: usize::MAX,
            tool_router: Self::tool_router(),
        }
    }

    /// The request limit this connection is read under (said in refusals of bigger ones).
    pub fn with_max_request(mut self, max: usize) -> Self {
        self.max_request = max;
        self
    }

    /// The caller, from the connection (never from arguments): resolved on the first call and
    /// re-checked at every call (`identity::ConnectionCaller`).
    fn caller(&self) -> Caller {
        self.caller.get(&self.fleet.ctx)
    }

    #[tool(
        description = "Who am I? Your member name, role and slot as the daemon resolves them from your terminal's process tree; says so if you are not a member."
    )]
    async fn fleet_whoami(&self) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let w = self.fleet.whoami(&c).await;
        Ok(text_and_json(w.note.clone(), &w))
    }

    #[tool(
        description = "Spawn a member in its own terminal (primary only). Architects bind a configured slot; a busy slot queues the spawn (bounded wait)."
    )]
    async fn fleet_spawn(
        &self,
        Parameters(a): Parameters<SpawnArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let cwd = self.caller.pid().and_then(identity::cwd_of);
        let r = self
            .fleet
            .spawn(
                &c,
                SpawnRequest {
                    role: a.role,
                    name: a.name,
                    slot: a.slot,
                    profile: a.profile,
                    command: a.command,
                    cwd,
                    resume: a.resume,
                    worktree: a.worktree,
                },
            )
            .await;
        done(r, |v| {
            let m = &v.member;
            let pid = m.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
            let mut s = format!(
                "spawned `{}` as {} with profile {} (pid {pid})",
                m.name, m.role, m.profile
            );
            for n in &v.notes {
                s.push_str("\n- ");
                s.push_str(n);
            }
            s
        })
    }

    #[tool(
        description = "Send a message to a member (primary or architect). It is queued durably and pasted into the target's terminal when it is idle, one per turn, in order. Returns a ticket; the answer comes back through fleet_poll."
    )]
    async fn fleet_send(
        &self,
        Parameters(a): Parameters<SendArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self
            .fleet
            .send(&c, &a.to, a.message, a.wait, a.wait_secs)
            .await;
        done(r, |s| {
            format!(
                "{} to `{}` is {:?}; receipt {:?}",
                s.ticket.ticket.id,
                s.ticket.ticket.to,
                s.ticket.ticket.state,
                s.ticket.receipt.as_ref().map(|r| r.state)
            )
        })
    }

    #[tool(
        description = "Answer the ticket of a message you received (only the member the ticket was sent to may). Replies after the ticket's TTL are refused and kept as late."
    )]
    async fn fleet_reply(
        &self,
        Parameters(a): Parameters<ReplyArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self.fleet.reply(&c, &a.ticket, a.message).await;
        done(r, |t| format!("replied to {}", t.ticket.id))
    }

    #[tool(
        description = "Ask your lead a question and wait (bounded, ~55 s) for the answer. If none comes in time you get the ticket to poll later."
    )]
    async fn fleet_ask(
        &self,
        Parameters(a): Parameters<AskArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self.fleet.ask(&c, a.question).await;
        done(r, |a| a.note.clone())
    }

    #[tool(
        description = "Your tickets (the ones you opened) that you have not acknowledged, with their answers and delivery receipts."
    )]
    async fn fleet_poll(&self) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self
            .fleet
            .poll(&c)
            .await
            .map(|tickets| serde_json::json!({ "tickets": tickets }));
        done(r, |v| {
            let all = v["tickets"].as_array().map(|a| a.len()).unwrap_or(0);
            let open = v["tickets"]
                .as_array()
                .map(|a| a.iter().filter(|t| t["state"] == "open").count())
                .unwrap_or(0);
            format!("{all} tickets, {} resolved", all - open)
        })
    }

    #[tool(description = "Acknowledge a resolved ticket so fleet_poll stops returning it.")]
    async fn fleet_ack(
        &self,
        Parameters(a): Parameters<AckArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self
            .fleet
            .ack(&c, &a.ticket)
            .await
            .map(|_| serde_json::json!({"acked": a.ticket}));
        done(r, |_| "acknowledged".into())
    }

    #[tool(
        description = "The fleet: every member with role, slot, status and lineage, and the architect slots. The lead also gets this daemon's coordinator row."
    )]
    async fn fleet_list(&self) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self.fleet.list(&c).await;
        done(r, |l| format!("{} members on {}", l.members.len(), l.host))
    }

    #[tool(
        description = "Status of the daemon, or of one member (status, queue, tickets it owes)."
    )]
    async fn fleet_status(
        &self,
        Parameters(a): Parameters<StatusArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        match a.name {
            Some(n) => done(self.fleet.member_status(&c, &n).await, |d| {
                format!("`{}` is {}", d.member.name, d.member.status)
            }),
            None => done(self.fleet.daemon_status(&c).await, |s| {
                format!("fleetd {} on {}", s.version, s.host)
            }),
        }
    }

    #[tool(
        description = "The decision ledger. open (primary): convene architect slots on a subject with a deadline and a round cap; returns decision_id. position (architect): record your position or abstain for your slot's next round; the daemon stamps slot, round and time. close (primary): record the verdict once every convened slot has a position, an abstain, or (after the deadline) a timeout; the outcome is quorate or degraded. show: the whole record."
    )]
    async fn fleet_decision(
        &self,
        Parameters(a): Parameters<DecisionArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let action = a.action.clone();
        let r: Result<serde_json::Value, FleetError> = async {
            match action.as_str() {
                "open" => {
                    let req = fleetd_actors::fleet::OpenRequest {
                        subject: need(a.subject, "subject", "open")?,
                        slots: need(a.slots, "slots", "open")?,
                        deadline: a.deadline,
                        deadline_secs: a.deadline_secs,
                        max_rounds: a.max_rounds,
                    };
                    let d = self.fleet.decision_open(&c, req).await?;
                    Ok(serde_json::json!({"decision_id": d.id, "decision": d}))
                }
                "position" => {
                    let id = need(a.decision_id, "decision_id", "position")?;
                    let round = need(a.round, "round", "position")?;
                    let kind = need(a.kind, "kind", "position")?;
                    let content = need(a.content, "content", "position")?;
                    let e = self
                        .fleet
                        .decision_record(&c, &id, round, &kind, content)
                        .await?;
                    Ok(serde_json::json!({"recorded": e}))
                }
                "close" => {
                    let id = need(a.decision_id, "decision_id", "close")?;
                    let verdict = need(a.verdict, "verdict", "close")?;
                    let rationale = need(a.rationale, "rationale", "close")?;
                    let d = self
                        .fleet
                        .decision_close(&c, &id, verdict, rationale)
                        .await?;
                    Ok(serde_json::json!({"decision": d}))
                }
                "show" => {
                    let d = self
                        .fleet
                        .decision_show(&c, &need(a.decision_id, "decision_id", "show")?)?;
                    Ok(serde_json::json!({"decision": d}))
                }
                other => Err(FleetError::invalid(
                    format!("fleet_decision {other}"),
                    "not an action",
                    "open, position, close or show",
                )),
            }
        }
        .await;
        done(r, |v| match action.as_str() {
            "open" => format!("opened {}", v["decision_id"].as_str().unwrap_or("")),
            "position" => format!("recorded as ledger entry {}", v["recorded"]["seq"]),
            "close" => format!(
                "closed: {}",
                v["decision"]["closed"]["outcome"].as_str().unwrap_or("")
            ),
            _ => "the decision record".into(),
        })
    }

    #[tool(
        description = "Your identity anchors (the drift protocol). anchor: record a clean fencepost (or reanchor) in your own drift log. drift: record a drift event (delta says what). observe: record what you see of another identity (its baseline; a delta if it is drifting). peers: every peer's last anchor and the trust gates G1-G4 as the pullers last evaluated them, with alerts. The daemon signs every line with the host key and attributes it to you; you can write only your own log."
    )]
    async fn fleet_drift(
        &self,
        Parameters(a): Parameters<DriftArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let action = a.action.clone();
        let r: Result<serde_json::Value, FleetError> = async {
            let to_json = |w: fleetd_actors::drift::service::Written| {
                serde_json::to_value(w).unwrap_or_default()
            };
            match action.as_str() {
                "anchor" => self
                    .fleet
                    .drift_anchor(&c, a.baseline, a.reanchor)
                    .await
                    .map(to_json),
                "drift" => self
                    .fleet
                    .drift_drift(&c, a.baseline, a.delta)
                    .await
                    .map(to_json),
                "observe" => self
                    .fleet
                    .drift_observe(&c, a.subject, a.baseline, a.delta)
                    .await
                    .map(to_json),
                "peers" => self
                    .fleet
                    .drift_peers(&c)
                    .map(|v| serde_json::to_value(v).unwrap_or_default()),
                other => Err(FleetError::invalid(
                    format!("fleet_drift {other}"),
                    "not an action",
                    "anchor, drift, observe or peers",
                )),
            }
        }
        .await;
        done(r, |v| match action.as_str() {
            "peers" => format!("{} peers", v["peers"].as_array().map_or(0, |p| p.len())),
            _ => format!(
                "written to {}'s drift log",
                v["identity"].as_str().unwrap_or("")
            ),
        })
    }

    #[tool(
        description = "Stop a member (primary only); with drain, after it has worked through its queue."
    )]
    async fn fleet_stop(
        &self,
        Parameters(a): Parameters<StopArgs>,
    ) -> Result<CallToolResult, McpError> {
        let c = self.caller();
        let r = self.fleet.stop(&c, &a.name, a.drain).await;
        done(r, |m| format!("`{}` stopped", m.name))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FleetTools {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    /// As the macro would list them, and a member that lists them is ready for its first
    /// message (its agent's first turn will have the fleet tools).
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        if request.method != crate::bounded::OVERSIZED_METHOD {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("no method {:?}", request.method),
                None,
            ));
        }
        let bytes = request
            .params
            .as_ref()
            .and_then(|p| p.get("bytes"))
            .and_then(|b| b.as_u64())
            .unwrap_or(0);
        Err(McpError::invalid_request(
            format!(
                "refused: this request is {bytes} bytes, over the {} bytes this connection may send (limits.max_request_bytes); it was not read. Accepted: a smaller request (put long text in a file and send its path)",
                self.max_request
            ),
            None,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let hints = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let c = self.caller();
        self.fleet.tools_listed(&c).await;
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools: self.tool_router.list_all(),
            meta: None,
            next_cursor: None,
            ttl_ms: hints.then_some(0),
            cache_scope: hints.then_some(rmcp::model::CacheScope::Public),
        })
    }
}

fn server_config() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("fleetd", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
}

/// The names of the tools the server registers.
pub fn tool_names() -> Vec<String> {
    FleetTools::tool_router()
        .list_all()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// How the MCP socket shares itself out. Members and non-members draw on separate pools, so
/// processes outside the fleet can never hold the connections members need; one member cannot
/// hold all of the members' pool either. Non-members (who may only ask `fleet_whoami`) get a
/// small pool, small requests and an idle timeout.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections from members, all together (`limits.mailbox`).
    pub members: usize,
    /// Connections from any one member.
    pub per_member: usize,
    /// Connections from processes that are not members.
    pub outsiders: usize,
    /// Largest request from a member (`limits.max_request_bytes`).
    pub max_request_bytes: usize,
    /// Largest request from a non-member.
    pub outsider_request_bytes: usize,
    /// A non-member connection that sends nothing this long is closed.
    pub outsider_idle: Duration,
    /// A connection that has not finished the MCP handshake in this long is closed.
    pub handshake: Duration,
}

impl Limits {
    pub fn new(c: &fleetd_actors::config::Limits) -> Self {
        Limits {
            members: c.mailbox.max(1),
            per_member: 32.min(c.mailbox.max(1)),
            outsiders: c.mcp_outsiders.max(1),
            max_request_bytes: c.max_request_bytes,
            outsider_request_bytes: c.max_request_bytes.min(64 << 10),
            outsider_idle: Duration::from_secs(c.mcp_outsider_idle_secs.max(1)),
            handshake: Duration::from_secs(30),
        }
    }
}

/// Which pool a connection draws on.
enum Pool {
    Member(String),
    Outsider,
}

/// Serve MCP on `listener` until `shutdown`: one rmcp session per connection, identified by its
/// peer pid, within `limits`.
pub async fn serve(
    listener: UnixListener,
    fleet: Fleet,
    shutdown: CancellationToken,
    limits: Limits,
) {
    let members = Arc::new(tokio::sync::Semaphore::new(limits.members));
    let outsiders = Arc::new(tokio::sync::Semaphore::new(limits.outsiders));
    let per_member: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>> =
        Arc::default();
    // Failed accepts in a row: the wait doubles from 10 ms to 1 s.
    const ACCEPT_BACKOFF: Backoff = Backoff::new(10, 1_000);
    let mut failures = 0u32;
    let mut logged_accept_error = false;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                failures = 0;
                logged_accept_error = false;
                stream
            }
            Err(e) => {
                // Out of file descriptors (EMFILE/ENFILE) or memory: accepting again at once
                // would spin. Back off (bounded) and say so once per episode.
                if !logged_accept_error {
                    tracing::error!(error = %e, "MCP accept failed; backing off until it succeeds (raise LimitNOFILE if this is EMFILE)");
                    logged_accept_error = true;
                }
                failures = failures.saturating_add(1);
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_BACKOFF.delay(failures)) => {}
                    _ = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        let pid = stream
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .map(|p| p as u32);
        let pool = match identity::mcp_caller(&fleet.ctx, pid) {
            Caller::Member(m) => Pool::Member(m.name.to_string()),
            _ => Pool::Outsider,
        };
        let admitted = match &pool {
            Pool::Member(name) => {
                let mut counts = per_member.lock().unwrap_or_else(|p| p.into_inner());
                let n = counts.entry(name.clone()).or_default();
                if *n >= limits.per_member {
                    Err(format!(
                        "member `{name}` already has {} MCP connections open (the most one member may hold)",
                        limits.per_member
                    ))
                } else {
                    match members.clone().try_acquire_owned() {
                        Ok(p) => {
                            *n += 1;
                            Ok(p)
                        }
                        Err(_) => Err(format!(
                            "{} MCP connections from members are open (limits.mailbox)",
                            limits.members
                        )),
                    }
                }
            }
            Pool::Outsider => outsiders.clone().try_acquire_owned().map_err(|_| {
                format!(
                    "{} MCP connections from processes outside the fleet are open",
                    limits.outsiders
                )
            }),
        };
        let permit = match admitted {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(pid = ?pid, "MCP connection refused: {why}");
                refuse(stream, &why);
                continue;
            }
        };
        let (max, idle) = match pool {
            Pool::Member(_) => (limits.max_request_bytes, None),
            Pool::Outsider => (limits.outsider_request_bytes, Some(limits.outsider_idle)),
        };
        let tools = FleetTools::new(fleet.clone(), pid).with_max_request(max);
        let stop = shutdown.clone();
        let counts = per_member.clone();
        // An outsider that has not even finished its handshake is idle too.
        let handshake = idle.map_or(limits.handshake, |i| i.min(limits.handshake));
        tokio::spawn(
            async move {
                let _permit = permit;
                let last_read = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let (r, w) = stream.into_split();
                let r = crate::bounded::Metered::new(r, max, last_read.clone());
                let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(r, w)
                    .with_max_line_length(max);
                let started = tokio::select! {
                    s = tokio::time::timeout(handshake, tools.serve(transport)) => Some(s),
                    _ = stop.cancelled() => None,
                };
                match started {
                    Some(Ok(Ok(svc))) => {
                        let ct = svc.cancellation_token();
                        let idle_out = async {
                            let Some(idle) = idle else {
                                return std::future::pending().await;
                            };
                            loop {
                                let last = last_read.load(std::sync::atomic::Ordering::Relaxed);
                                let quiet = crate::bounded::now_ms().saturating_sub(last);
                                let left = (idle.as_millis() as u64).saturating_sub(quiet);
                                if left == 0 {
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(left)).await;
                            }
                        };
                        tokio::select! {
                            _ = svc.waiting() => {}
                            _ = stop.cancelled() => ct.cancel(),
                            _ = idle_out => {
                                tracing::debug!("MCP connection from outside the fleet closed: idle");
                                ct.cancel();
                            }
                        }
                    }
                    Some(Ok(Err(e))) => {
                        tracing::debug!(error = %e, "MCP session ended during start-up")
                    }
                    Some(Err(_)) => tracing::debug!("MCP connection closed: no handshake in time"),
                    None => {}
                }
                if let Pool::Member(name) = pool {
                    let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(n) = c.get_mut(&name) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            c.remove(&name);
                        }
                    }
                }
            }
            .instrument(tracing::info_span!("mcp", pid = ?pid)),
        );
    }
}

/// Tell a refused connection why (one JSON-RPC error line, best effort, never blocking), then
/// close it.
fn refuse(stream: UnixStream, why: &str) {
    let line = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": format!("connection refused by fleetd: {why}; try again when fewer are open")},
    });
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    let _ = stream.try_write(&bytes);
}
