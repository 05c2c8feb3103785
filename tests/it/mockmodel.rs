//! A scripted mock model server for the real-agent tests: one loopback HTTP server that speaks
//! the four wire APIs the agent CLIs use, streaming (SSE) as each CLI expects:
//!
//! - Anthropic Messages (`POST /v1/messages?beta=true`): Claude Code. It reads the LAST `user`
//!   message (its first request puts a `system` message after the prompt); MCP tools are called
//!   `mcp__fleet__fleet_whoami` (deferred: not in `tools`, called by name anyway).
//! - OpenAI Responses (`POST /v1/responses`): Codex. MCP tools come as a namespace and are
//!   called as `{"type":"function_call","name":"fleet_whoami","namespace":"mcp__fleet"}`; a side
//!   request for a thread title carries `text.format` = json_schema.
//! - Gemini (`POST /v1beta/models/{m}:streamGenerateContent?alt=sse`, `:generateContent`,
//!   `:countTokens`): Gemini CLI. Tools are `mcp_fleet_fleet_whoami`; the first user turn has a
//!   `<session_context>` part (and a `<hook_context>` part: the charter fleetd's SessionStart
//!   hook returns) before the prompt; tool results come wrapped in `<untrusted_context>`.
//! - OpenAI chat completions (`POST /v1/chat/completions`, `GET /v1/models`): opencode. Tools
//!   are `fleet_fleet_whoami`.
//!
//! The script, per conversation, decided from the request alone (so any number of agents can
//! share the server): a fresh user prompt -> call `fleet_whoami`; its result -> call
//! `fleet_reply {ticket: the t-N of the prompt's header, message: "whoami: " + the first line of
//! the result}`; that result -> the text `done.`. A prompt with `FLEET-PERMISSION` asks for a
//! shell command that needs approval (then `done.`); one with `FLEET-TEXT` answers `done.` at
//! once. A prompt with `FLEET-HOLD-Ns` holds the turn's first answer N seconds more (a slow or
//! thinking model: nothing streams meanwhile). Requests without tools (titles, summaries, classifiers) get a short text or a JSON
//! object shaped by their schema.
//!
//! Every request is kept (API, path, JSON body, what was answered, when), and waiters are woken
//! through a watch channel on each one: no polling.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::watch;

/// A model API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    Responses,
    Gemini,
    Chat,
}

/// One request the mock received.
#[derive(Clone, Debug)]
pub struct Request {
    pub seq: usize,
    pub api: Option<Api>,
    pub method: String,
    /// Path and query.
    pub path: String,
    pub body: Value,
    /// When it arrived (ms since the Unix epoch, like fleetd's event times).
    pub at_ms: u64,
    /// For a request of an agent's conversation (it carries tools): the prompt of the turn it
    /// belongs to, as the API carries it.
    pub turn_prompt: Option<String>,
    /// Its last item is the user's prompt (not a tool result): it starts a turn.
    pub starts_turn: bool,
    /// What the mock answered, in short (`call NAME {args}`, `text ...`, `side ...`).
    pub answer: String,
    /// The answer is the turn's final text.
    pub final_text: bool,
    /// When the answer was handed to the connection (ms since the Unix epoch).
    pub answered_ms: u64,
}

struct Inner {
    log: Mutex<Vec<Request>>,
    tx: watch::Sender<usize>,
    perm_file: PathBuf,
    delay: Duration,
}

/// The running mock. Dropping it leaves the server task to end with the test's runtime.
#[derive(Clone)]
pub struct Mock {
    inner: Arc<Inner>,
    base: String,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Mock {
    /// Start on 127.0.0.1:0. Each answer of a conversation waits 300 ms first, so a turn lasts
    /// long enough for a paste in the middle of it to show. FLEET-PERMISSION creates a file in
    /// the temp dir.
    pub async fn start() -> Mock {
        Self::start_with(Duration::from_millis(300), None).await
    }

    /// Start with this delay before each conversation answer, and FLEET-PERMISSION's command
    /// creating `perm_file` (put it in the agent's working directory: a path outside it makes
    /// opencode ask a second question, for the directory).
    pub async fn start_with(delay: Duration, perm_file: Option<PathBuf>) -> Mock {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the mock model server");
        let addr = listener.local_addr().expect("mock address");
        let (tx, _) = watch::channel(0usize);
        let inner = Arc::new(Inner {
            log: Mutex::new(vec![]),
            tx,
            perm_file: perm_file.unwrap_or_else(|| {
                std::env::temp_dir().join(format!("fleetd-mock-{}.touched", addr.port()))
            }),
            delay,
        });
        let _ = std::fs::remove_file(&inner.perm_file);
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::disable())
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Mock {
            inner,
            base: format!("http://{addr}"),
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> String {
        self.base.clone()
    }

    /// The file the FLEET-PERMISSION command creates (it exists once the dialog was approved
    /// and the command ran).
    pub fn perm_file(&self) -> PathBuf {
        self.inner.perm_file.clone()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.inner.log.lock().unwrap().clone()
    }

    /// The distinct user prompts that started turns on `api`, in order, as the agent sent them
    /// (Claude's `<pasted_content>` wrapping removed).
    pub fn user_prompts(&self, api: Api) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for r in self.requests() {
            if r.api != Some(api) || !r.starts_turn {
                continue;
            }
            let Some(p) = r.turn_prompt.as_deref() else {
                continue;
            };
            let p = unwrap_pasted(p);
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Wait (bounded, woken by each request) until `api` has seen at least `n` user prompts.
    pub async fn wait_prompts(&self, api: Api, n: usize, timeout: Duration) -> Vec<String> {
        let mut rx = self.inner.tx.subscribe();
        let fut = async {
            loop {
                let p = self.user_prompts(api);
                if p.len() >= n || rx.changed().await.is_err() {
                    return p;
                }
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(p) if p.len() >= n => p,
            _ => panic!(
                "the mock saw fewer than {n} {api:?} prompts within {timeout:?}; requests:\n{}",
                self.summary()
            ),
        }
    }

    /// When the turn whose prompt contains `needle` started (its first request arrived).
    pub fn turn_started_ms(&self, api: Api, needle: &str) -> Option<u64> {
        self.requests()
            .into_iter()
            .find(|r| r.api == Some(api) && r.starts_turn && prompt_has(r, needle))
            .map(|r| r.at_ms)
    }

    /// When the mock answered the final text of the turn whose prompt contains `needle`.
    pub fn turn_ended_ms(&self, api: Api, needle: &str) -> Option<u64> {
        self.requests()
            .into_iter()
            .rfind(|r| r.api == Some(api) && r.final_text && prompt_has(r, needle))
            .map(|r| r.answered_ms)
    }

    /// One line per request, for failure messages.
    pub fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                let prompt = r
                    .turn_prompt
                    .as_deref()
                    .map(|p| {
                        let p = unwrap_pasted(p);
                        let head: String = p.chars().take(70).collect();
                        format!(" prompt({} chars)={head:?}", p.chars().count())
                    })
                    .unwrap_or_default();
                format!(
                    "  #{} {} {:?} {} ({} B) starts_turn={} -> {}{}",
                    r.seq,
                    r.method,
                    r.api,
                    r.path,
                    r.body.to_string().len(),
                    r.starts_turn,
                    r.answer,
                    prompt
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn prompt_has(r: &Request, needle: &str) -> bool {
    r.turn_prompt.as_deref().is_some_and(|p| p.contains(needle))
}

/// Claude Code sends a large paste as `\n\n<pasted_content id="abcd">\nTEXT\n</pasted_content
/// id="abcd">\n`; this gives TEXT back (and anything around the wrapping, if there is any).
pub fn unwrap_pasted(p: &str) -> String {
    let Some(start) = p.find("<pasted_content id=\"") else {
        return p.to_string();
    };
    let after_open = match p[start..].find("\">\n") {
        Some(i) => start + i + 3,
        None => return p.to_string(),
    };
    let Some(close) = p[after_open..].find("\n</pasted_content id=\"") else {
        return p.to_string();
    };
    let close = after_open + close;
    let end_tag = match p[close..].find("\">") {
        Some(i) => close + i + 2,
        None => return p.to_string(),
    };
    let before = p[..start].trim_start_matches('\n');
    let after = p[end_tag..].trim_start_matches('\n');
    format!("{before}{}{after}", &p[after_open..close])
}

/// The ticket named in a fleet header: `[fleet ticket t-N from ...`.
pub fn ticket_in(prompt: &str) -> Option<String> {
    let re = regex::Regex::new(r"\[fleet ticket (t-\d+) from ").unwrap();
    re.captures(prompt).map(|c| c[1].to_string())
}

/// The first line of a fleet tool's result, without the wrappers the CLIs add (Codex's
/// `Wall time: ... Output:`, Gemini's `<untrusted_context>`).
pub fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| {
            !l.is_empty()
                && !l.starts_with("Wall time:")
                && *l != "Output:"
                && !l.starts_with("<untrusted_context")
                && !l.starts_with("</untrusted_context")
        })
        .unwrap_or("")
        .to_string()
}

// ------------------------------------------------------------------------------------------
// The script.

/// What the model does next.
#[derive(Clone, Debug)]
enum Step {
    Text(String),
    Call {
        name: String,
        namespace: Option<String>,
        args: Value,
    },
}

impl Step {
    fn describe(&self) -> String {
        match self {
            Step::Text(t) => format!("text {t:?}"),
            Step::Call {
                name,
                namespace,
                args,
            } => format!(
                "call {}{name} {}",
                namespace
                    .as_deref()
                    .map(|n| format!("{n}."))
                    .unwrap_or_default(),
                truncate(&args.to_string(), 160)
            ),
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n).collect::<String>() + "…"
    }
}

/// `FLEET-HOLD-Ns` in a prompt: hold its first answer N seconds (at most 120).
fn hold_secs(prompt: &str) -> Option<u64> {
    prompt.match_indices("FLEET-HOLD-").find_map(|(at, m)| {
        let digits: String = prompt[at + m.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok().map(|s| s.min(120))
    })
}

/// Where a conversation stands, read from one request.
struct Turn {
    /// Tools the request declares: (name, namespace).
    tools: Vec<(String, Option<String>)>,
    /// The prompt of the turn.
    prompt: String,
    /// The last item: the prompt itself, or a tool's result.
    last: Last,
}

enum Last {
    Prompt,
    Result { name: String, text: String },
}

fn script(api: Api, t: &Turn, perm_file: &str) -> Step {
    match &t.last {
        Last::Prompt if t.prompt.contains("FLEET-TEXT") => Step::Text("done.".into()),
        Last::Prompt if t.prompt.contains("FLEET-PERMISSION") => shell(api, t, perm_file),
        Last::Prompt => call(api, t, "fleet_whoami", json!({})),
        Last::Result { name, text } if name.ends_with("fleet_whoami") => {
            let ticket = ticket_in(&t.prompt).unwrap_or_else(|| "t-0".into());
            call(
                api,
                t,
                "fleet_reply",
                json!({"ticket": ticket, "message": format!("whoami: {}", first_line(text))}),
            )
        }
        Last::Result { .. } => Step::Text("done.".into()),
    }
}

/// A fleet tool as this API names it: the declared tool ending in `base` if there is one
/// (Claude defers MCP tools, so they are not declared), else the CLI's naming.
fn call(api: Api, t: &Turn, base: &str, args: Value) -> Step {
    let found = t
        .tools
        .iter()
        .find(|(n, _)| n == base || n.ends_with(&format!("_{base}")))
        .cloned();
    let (name, namespace) = found.unwrap_or_else(|| match api {
        Api::Anthropic => (format!("mcp__fleet__{base}"), None),
        Api::Responses => (base.to_string(), Some("mcp__fleet".to_string())),
        Api::Gemini => (format!("mcp_fleet_{base}"), None),
        Api::Chat => (format!("fleet_{base}"), None),
    });
    Step::Call {
        name,
        namespace,
        args,
    }
}

/// A shell command that needs the user's approval in each CLI.
fn shell(api: Api, t: &Turn, file: &str) -> Step {
    let has = |n: &str| t.tools.iter().any(|(x, _)| x == n);
    let (name, args) = match api {
        // Not read-only, so manual mode asks.
        Api::Anthropic => (
            "Bash",
            json!({"command": format!("touch {file} && echo hi"), "description": "Create a test file"}),
        ),
        // Escalated: asked for under any sandbox with approval_policy on-request.
        Api::Responses => {
            let cmd = format!("touch {file} && echo escalated-ok");
            let why = "fleetd test: this command needs approval";
            if has("exec_command") {
                (
                    "exec_command",
                    json!({"cmd": cmd, "sandbox_permissions": "require_escalated", "justification": why}),
                )
            } else if has("shell_command") {
                (
                    "shell_command",
                    json!({"command": cmd, "sandbox_permissions": "require_escalated", "justification": why}),
                )
            } else {
                (
                    "shell",
                    json!({"command": ["bash", "-lc", cmd], "sandbox_permissions": "require_escalated", "justification": why}),
                )
            }
        }
        // A redirection always asks.
        Api::Gemini => (
            "run_shell_command",
            json!({"command": format!("echo hi > {file}"), "description": "Write a test file"}),
        ),
        // permission.bash = "ask" in the test's config.
        Api::Chat => (
            "bash",
            json!({"command": format!("touch {file} && echo hi"), "description": "Create a test file"}),
        ),
    };
    Step::Call {
        name: name.into(),
        namespace: None,
        args,
    }
}

/// A JSON value shaped like `schema` (for side requests that ask for structured output).
fn schema_example(s: &Value) -> Value {
    let ty = match &s["type"] {
        Value::String(t) => t.to_ascii_lowercase(),
        Value::Array(a) => a
            .first()
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase(),
        _ => String::new(),
    };
    if let Some(e) = s["enum"].as_array().and_then(|a| a.first()) {
        return e.clone();
    }
    if ty == "object" || s.get("properties").is_some() {
        let mut out = serde_json::Map::new();
        if let Some(props) = s["properties"].as_object() {
            for (k, v) in props {
                let val = match k.as_str() {
                    "next_speaker" => json!("user"),
                    "title" => json!("Mock title"),
                    _ => schema_example(v),
                };
                out.insert(k.clone(), val);
            }
        }
        return Value::Object(out);
    }
    match ty.as_str() {
        "array" => json!([]),
        "number" | "integer" => json!(0),
        "boolean" => json!(false),
        _ => json!("Mock title"),
    }
}

// ------------------------------------------------------------------------------------------
// Reading each API's request.

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(|b| b["text"].as_str().or(b.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn blocks(m: &Value) -> Vec<Value> {
    match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => vec![],
    }
}

/// The user's text in an Anthropic message: its last text block that is not a system reminder.
fn anthropic_user_text(m: &Value) -> Option<String> {
    blocks(m)
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .rfind(|t| !t.trim_start().starts_with("<system-reminder>"))
        .map(str::to_string)
}

fn anthropic_turn(body: &Value) -> Option<Turn> {
    let tools: Vec<(String, Option<String>)> = body["tools"]
        .as_array()?
        .iter()
        .filter_map(|t| t["name"].as_str().map(|n| (n.to_string(), None)))
        .collect();
    if tools.is_empty() {
        return None;
    }
    let msgs: Vec<&Value> = body["messages"]
        .as_array()?
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "assistant")
        .collect();
    let is_result = |b: &Value| b["type"] == "tool_result";
    let prompt = msgs
        .iter()
        .rev()
        .filter(|m| m["role"] == "user" && !blocks(m).iter().any(is_result))
        .find_map(|m| anthropic_user_text(m))
        .unwrap_or_default();
    let last = msgs.last()?;
    let results: Vec<Value> = blocks(last).into_iter().filter(is_result).collect();
    let last = match results.last() {
        Some(r) if anthropic_user_text(last).is_none() => {
            let id = r["tool_use_id"].as_str().unwrap_or("");
            let name = msgs
                .iter()
                .rev()
                .filter(|m| m["role"] == "assistant")
                .flat_map(|m| blocks(m))
                .find(|b| b["type"] == "tool_use" && b["id"] == id)
                .and_then(|b| b["name"].as_str().map(str::to_string))
                .unwrap_or_default();
            Last::Result {
                name,
                text: text_of(&r["content"]),
            }
        }
        _ => Last::Prompt,
    };
    // A fresh prompt sharing a message with tool results (after a denied call) is the prompt.
    let prompt = match (&last, anthropic_user_text(msgs.last()?)) {
        (Last::Prompt, Some(t)) => t,
        _ => prompt,
    };
    Some(Turn {
        tools,
        prompt,
        last,
    })
}

fn responses_turn(body: &Value) -> Option<Turn> {
    let mut tools = vec![];
    for t in body["tools"].as_array().into_iter().flatten() {
        if let Some(sub) = t["tools"].as_array() {
            for s in sub {
                if let Some(n) = s["name"].as_str() {
                    tools.push((n.to_string(), t["name"].as_str().map(str::to_string)));
                }
            }
        } else if let Some(n) = t["name"].as_str() {
            tools.push((n.to_string(), None));
        }
    }
    let items = body["input"].as_array()?;
    let text = |i: &Value| {
        i["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect::<String>()
    };
    // The prompt is the last user message that is not Codex's own context: Codex adds an
    // `<environment_context>` user message within a turn when its context changes (the date,
    // at midnight UTC), and that is not the operator's or a member's prompt.
    let last_user = items.iter().rposition(|i| {
        i["type"] == "message"
            && i["role"] == "user"
            && !text(i).trim_start().starts_with("<environment_context>")
    });
    let prompt = last_user.map(|i| text(&items[i])).unwrap_or_default();
    let after = &items[last_user.map(|i| i + 1).unwrap_or(0)..];
    let output = after
        .iter()
        .rfind(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output");
    let last = match output {
        None => Last::Prompt,
        Some(o) => {
            let name = after
                .iter()
                .find(|i| {
                    i["call_id"] == o["call_id"] && i["type"] != o["type"] && i["name"].is_string()
                })
                .and_then(|i| i["name"].as_str())
                .unwrap_or("")
                .to_string();
            Last::Result {
                name,
                text: text_of(&o["output"]),
            }
        }
    };
    Some(Turn {
        tools,
        prompt,
        last,
    })
}

fn gemini_turn(body: &Value) -> Option<Turn> {
    let tools: Vec<(String, Option<String>)> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| {
            t["functionDeclarations"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|f| f["name"].as_str().map(|n| (n.to_string(), None)))
        .collect();
    if tools.is_empty() {
        return None;
    }
    let contents = body["contents"].as_array()?;
    let parts = |c: &Value| c["parts"].as_array().cloned().unwrap_or_default();
    let prompt = contents
        .iter()
        .rev()
        .filter(|c| c["role"] == "user")
        .filter(|c| !parts(c).iter().any(|p| p.get("functionResponse").is_some()))
        .find_map(|c| {
            let texts: Vec<String> = parts(c)
                .iter()
                .filter_map(|p| p["text"].as_str())
                .filter(|t| !t.starts_with("<session_context>") && !t.starts_with("<hook_context>"))
                .map(str::to_string)
                .collect();
            (!texts.is_empty()).then(|| texts.concat())
        })
        .unwrap_or_default();
    let last = contents.last()?;
    let last = match parts(last)
        .iter()
        .rev()
        .find_map(|p| p.get("functionResponse").cloned())
    {
        Some(fr) => Last::Result {
            name: fr["name"].as_str().unwrap_or("").to_string(),
            text: match &fr["response"]["output"] {
                Value::String(s) => s.clone(),
                Value::Null => fr["response"].to_string(),
                other => text_of(other),
            },
        },
        None => Last::Prompt,
    };
    Some(Turn {
        tools,
        prompt,
        last,
    })
}

fn chat_turn(body: &Value) -> Option<Turn> {
    let tools: Vec<(String, Option<String>)> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t["function"]["name"]
                .as_str()
                .map(|n| (n.to_string(), None))
        })
        .collect();
    if tools.is_empty() {
        return None;
    }
    let msgs = body["messages"].as_array()?;
    let content = |m: &Value| match &m["content"] {
        Value::Array(a) => a
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<String>(),
        other => other.as_str().unwrap_or("").to_string(),
    };
    let prompt = msgs
        .iter()
        .rfind(|m| m["role"] == "user")
        .map(content)
        .unwrap_or_default();
    let last = msgs.last()?;
    let last = if last["role"] == "tool" {
        let id = &last["tool_call_id"];
        let name = msgs
            .iter()
            .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
            .find(|c| &c["id"] == id)
            .and_then(|c| c["function"]["name"].as_str().map(str::to_string))
            .unwrap_or_default();
        Last::Result {
            name,
            text: content(last),
        }
    } else {
        Last::Prompt
    };
    Some(Turn {
        tools,
        prompt,
        last,
    })
}

// ------------------------------------------------------------------------------------------
// Writing each API's answer.

fn sse_response(body: String) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(body))
        .unwrap()
}

fn json_response(code: StatusCode, v: Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

fn anthropic_answer(step: &Step, model: &str, stream: bool) -> Response {
    let n = now_ms();
    let id = format!("msg_mock_{n}");
    let usage = json!({"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let (block, stop) = match step {
        Step::Text(t) => (json!({"type": "text", "text": t}), "end_turn"),
        Step::Call { name, args, .. } => (
            json!({"type": "tool_use", "id": format!("toolu_mock_{n}"), "name": name, "input": args}),
            "tool_use",
        ),
    };
    if !stream {
        return json_response(
            StatusCode::OK,
            json!({"id": id, "type": "message", "role": "assistant", "model": model,
                   "content": [block], "stop_reason": stop, "stop_sequence": null, "usage": usage}),
        );
    }
    let mut out = String::new();
    let mut ev = |name: &str, v: Value| out.push_str(&format!("event: {name}\ndata: {v}\n\n"));
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    );
    match step {
        Step::Text(t) => {
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            );
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
            );
        }
        Step::Call { args, .. } => {
            let mut b = block.clone();
            b["input"] = json!({});
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": b}),
            );
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": args.to_string()}}),
            );
        }
    }
    ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 10}}),
    );
    ev("message_stop", json!({"type": "message_stop"}));
    sse_response(out)
}

fn responses_answer(step: &Step) -> Response {
    let n = now_ms();
    let rid = format!("resp_{n}");
    let base = |status: &str, output: Value| {
        json!({"id": rid, "object": "response", "created_at": n / 1000, "status": status,
               "model": "mock-model", "output": output})
    };
    let mut evs: Vec<Value> = vec![
        json!({"type": "response.created", "response": base("in_progress", json!([]))}),
        json!({"type": "response.in_progress", "response": base("in_progress", json!([]))}),
    ];
    let item = match step {
        Step::Text(t) => {
            let mid = format!("msg_{n}");
            let item = json!({"type": "message", "id": mid, "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": t, "annotations": []}]});
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
            evs.push(
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            );
            evs.push(json!({"type": "response.content_part.added", "item_id": mid, "output_index": 0,
                            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
            evs.push(
                json!({"type": "response.output_text.delta", "item_id": mid, "output_index": 0,
                            "content_index": 0, "delta": t}),
            );
            evs.push(
                json!({"type": "response.output_text.done", "item_id": mid, "output_index": 0,
                            "content_index": 0, "text": t}),
            );
            evs.push(json!({"type": "response.content_part.done", "item_id": mid, "output_index": 0,
                            "content_index": 0, "part": {"type": "output_text", "text": t, "annotations": []}}));
            item
        }
        Step::Call {
            name,
            namespace,
            args,
        } => {
            let fid = format!("fc_{n}");
            let arguments = args.to_string();
            let mut item = json!({"type": "function_call", "id": fid, "call_id": format!("call_{n}"),
                                  "name": name, "arguments": arguments, "status": "completed"});
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            evs.push(
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            );
            evs.push(
                json!({"type": "response.function_call_arguments.delta", "item_id": fid,
                            "output_index": 0, "delta": arguments}),
            );
            evs.push(
                json!({"type": "response.function_call_arguments.done", "item_id": fid,
                            "output_index": 0, "arguments": arguments}),
            );
            item
        }
    };
    evs.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
    let mut done = base("completed", json!([item]));
    done["usage"] = json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                           "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                           "total_tokens": 110});
    evs.push(json!({"type": "response.completed", "response": done}));
    let out: String = evs
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    sse_response(out)
}

fn gemini_answer(step: &Step, model: &str, stream: bool) -> Response {
    let usage = json!({"promptTokenCount": 100, "candidatesTokenCount": 5, "totalTokenCount": 105});
    let chunk = |parts: Value, last: bool| {
        let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if last {
            cand["finishReason"] = json!("STOP");
        }
        json!({"candidates": [cand], "usageMetadata": usage, "modelVersion": model})
    };
    let chunks: Vec<Value> = match step {
        Step::Call { name, args, .. } => {
            vec![chunk(
                json!([{"functionCall": {"name": name, "args": args}}]),
                true,
            )]
        }
        Step::Text(t) if stream && t.len() > 1 => {
            let mid = t.char_indices().nth(t.chars().count() / 2).unwrap().0;
            vec![
                chunk(json!([{"text": &t[..mid]}]), false),
                chunk(json!([{"text": &t[mid..]}]), true),
            ]
        }
        Step::Text(t) => vec![chunk(json!([{"text": t}]), true)],
    };
    if !stream {
        return json_response(StatusCode::OK, chunks.last().cloned().unwrap());
    }
    sse_response(
        chunks
            .iter()
            .map(|c| format!("data: {c}\r\n\r\n"))
            .collect(),
    )
}

fn chat_answer(step: &Step, model: &str, stream: bool) -> Response {
    let n = now_ms();
    let cid = format!("chatcmpl-{n}");
    let usage = json!({"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105});
    if !stream {
        let (msg, fr) = match step {
            Step::Text(t) => (json!({"role": "assistant", "content": t}), "stop"),
            Step::Call { name, args, .. } => (
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{n}"),
                       "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}),
                "tool_calls",
            ),
        };
        return json_response(
            StatusCode::OK,
            json!({"id": cid, "object": "chat.completion", "created": n / 1000, "model": model,
                   "choices": [{"index": 0, "message": msg, "finish_reason": fr}], "usage": usage}),
        );
    }
    let chunk = |delta: Value, fr: Value| {
        json!({"id": cid, "object": "chat.completion.chunk", "created": n / 1000, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]})
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let fr = match step {
        Step::Text(t) => {
            out.push(chunk(json!({"content": t}), Value::Null));
            "stop"
        }
        Step::Call { name, args, .. } => {
            out.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call_{n}"), "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            out.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": args.to_string()}}]}),
                Value::Null,
            ));
            "tool_calls"
        }
    };
    let mut end = chunk(json!({}), json!(fr));
    end["usage"] = usage;
    out.push(end);
    let mut text: String = out.iter().map(|c| format!("data: {c}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    sse_response(text)
}

// ------------------------------------------------------------------------------------------
// The one handler.

async fn handle(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let at_ms = now_ms();
    let path = uri.path().to_string();
    let full = uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_else(|| path.clone());
    let json: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        if body.is_empty() {
            Value::Null
        } else {
            json!({"_raw": String::from_utf8_lossy(&body)})
        }
    });
    let mut rec = Request {
        seq: 0,
        api: None,
        method: method.to_string(),
        path: full,
        body: json.clone(),
        at_ms,
        turn_prompt: None,
        starts_turn: false,
        answer: String::new(),
        final_text: false,
        answered_ms: 0,
    };
    let perm = inner.perm_file.display().to_string();
    let model = json["model"].as_str().unwrap_or("mock-model").to_string();
    let stream = json["stream"].as_bool().unwrap_or(false);

    // Which API, and where the conversation stands.
    let (api, turn, side): (Option<Api>, Option<Turn>, Option<Response>) = if method == Method::GET
        || method == Method::HEAD
    {
        let resp = if path.ends_with("/models") {
            json_response(
                StatusCode::OK,
                json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "owned_by": "mock"}]}),
            )
        } else {
            json_response(StatusCode::OK, json!({}))
        };
        rec.answer = "get".into();
        (None, None, Some(resp))
    } else if path.ends_with("/v1/messages/count_tokens") {
        rec.answer = "count_tokens".into();
        (
            Some(Api::Anthropic),
            None,
            Some(json_response(StatusCode::OK, json!({"input_tokens": 1234}))),
        )
    } else if path.ends_with("/v1/messages") {
        match anthropic_turn(&json) {
            Some(t) => (Some(Api::Anthropic), Some(t), None),
            None => {
                let asks_json = json["system"].to_string().to_lowercase().contains("json");
                let text = if asks_json {
                    json!({"title": "Mock title", "isNewTopic": false}).to_string()
                } else {
                    "Mock title".to_string()
                };
                rec.answer = format!("side text {text:?}");
                (
                    Some(Api::Anthropic),
                    None,
                    Some(anthropic_answer(&Step::Text(text), &model, stream)),
                )
            }
        }
    } else if path.ends_with("/responses") {
        let fmt = &json["text"]["format"];
        if fmt["type"] == "json_schema" {
            let obj = schema_example(&fmt["schema"]);
            rec.answer = format!("side structured {obj}");
            (
                Some(Api::Responses),
                None,
                Some(responses_answer(&Step::Text(obj.to_string()))),
            )
        } else {
            match responses_turn(&json) {
                Some(t) => (Some(Api::Responses), Some(t), None),
                None => (
                    Some(Api::Responses),
                    None,
                    Some(json_response(
                        StatusCode::BAD_REQUEST,
                        json!({"error": {"message": "no input"}}),
                    )),
                ),
            }
        }
    } else if path.contains("/models/") && path.contains(':') {
        let verb = path.rsplit(':').next().unwrap_or("");
        let gmodel = path
            .rsplit('/')
            .next()
            .and_then(|s| s.split(':').next())
            .unwrap_or("gemini")
            .to_string();
        if verb == "countTokens" {
            rec.answer = "countTokens".into();
            (
                Some(Api::Gemini),
                None,
                Some(json_response(StatusCode::OK, json!({"totalTokens": 100}))),
            )
        } else {
            let gstream = verb == "streamGenerateContent";
            match gemini_turn(&json) {
                Some(t) => (Some(Api::Gemini), Some(t), None),
                None => {
                    let gc = &json["generationConfig"];
                    let schema = if gc["responseJsonSchema"].is_object() {
                        Some(&gc["responseJsonSchema"])
                    } else if gc["responseSchema"].is_object() {
                        Some(&gc["responseSchema"])
                    } else {
                        None
                    };
                    let text = match schema {
                        Some(s) => schema_example(s).to_string(),
                        None if gc["responseMimeType"] == "application/json" => "{}".into(),
                        None => "Mock session".into(),
                    };
                    rec.answer = format!("side text {text:?}");
                    (
                        Some(Api::Gemini),
                        None,
                        Some(gemini_answer(&Step::Text(text), &gmodel, gstream)),
                    )
                }
            }
        }
    } else if path.ends_with("/chat/completions") {
        match chat_turn(&json) {
            Some(t) => (Some(Api::Chat), Some(t), None),
            None => {
                rec.answer = "side text \"Mock session\"".into();
                (
                    Some(Api::Chat),
                    None,
                    Some(chat_answer(
                        &Step::Text("Mock session".into()),
                        &model,
                        stream,
                    )),
                )
            }
        }
    } else {
        rec.answer = "404".into();
        (
            None,
            None,
            Some(json_response(
                StatusCode::NOT_FOUND,
                json!({"error": {"message": "not found"}}),
            )),
        )
    };
    rec.api = api;

    let resp = match (side, turn, api) {
        (Some(resp), _, _) => resp,
        (None, Some(t), Some(api)) => {
            let step = script(api, &t, &perm);
            rec.turn_prompt = Some(t.prompt.clone());
            rec.starts_turn = matches!(t.last, Last::Prompt);
            rec.final_text = matches!(step, Step::Text(_));
            rec.answer = step.describe();
            tokio::time::sleep(inner.delay).await;
            if let Some(secs) = hold_secs(&t.prompt)
                && (matches!(t.last, Last::Prompt) != t.prompt.contains("FLEET-HOLD-AFTER-TOOL"))
            {
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            match api {
                Api::Anthropic => anthropic_answer(&step, &model, stream),
                Api::Responses => responses_answer(&step),
                Api::Gemini => {
                    let gmodel = path
                        .rsplit('/')
                        .next()
                        .and_then(|s| s.split(':').next())
                        .unwrap_or("gemini");
                    gemini_answer(&step, gmodel, path.ends_with(":streamGenerateContent"))
                }
                Api::Chat => chat_answer(&step, &model, stream),
            }
        }
        _ => json_response(StatusCode::BAD_REQUEST, json!({"error": "unreadable"})),
    };
    rec.answered_ms = now_ms();
    {
        let mut log = inner.log.lock().unwrap();
        rec.seq = log.len() + 1;
        log.push(rec);
        let n = log.len();
        drop(log);
        inner.tx.send_replace(n);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 POST over a fresh connection; the whole response as text.
    async fn post(m: &Mock, path: &str, body: Value) -> String {
        let base = m.base_url();
        let addr = base.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let b = body.to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    const PROMPT: &str = "[fleet ticket t-7 from operator · answer with fleet_reply]\nwho are you?";
    const WHOAMI: &str = "you are primary `lead`, resolved from your connection's process tree\n\n{\"name\": \"lead\"}";

    /// The script through each API, without any agent CLI (runs everywhere).
    #[tokio::test]
    async fn the_script_speaks_all_four_apis() {
        let m = Mock::start().await;
        // Anthropic: the prompt is followed by a system message; MCP tools are not declared.
        let user = json!({"role": "user", "content": [{"type": "text", "text": PROMPT}]});
        let a = post(
            &m,
            "/v1/messages?beta=true",
            json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}],
            "messages": [user, {"role": "system", "content": "env"}]}),
        )
        .await;
        assert!(
            a.contains("event: message_start")
                && a.contains(r#""name":"mcp__fleet__fleet_whoami""#),
            "{a}"
        );
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "mcp__fleet__fleet_whoami", "input": {}}]});
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": [{"type": "text", "text": WHOAMI}]}]});
        let a = post(
            &m,
            "/v1/messages?beta=true",
            json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}],
            "messages": [user, call, result]}),
        )
        .await;
        assert!(
            a.contains("mcp__fleet__fleet_reply") && a.contains(r#"\"ticket\":\"t-7\""#),
            "{a}"
        );
        assert!(
            a.contains("whoami: you are primary `lead`, resolved"),
            "{a}"
        );
        let perm = json!({"role": "user", "content": "[fleet ticket t-8 from operator · answer with fleet_reply]\nFLEET-PERMISSION"});
        let a = post(
            &m,
            "/v1/messages",
            json!({"stream": true, "tools": [{"name": "Bash"}], "messages": [perm]}),
        )
        .await;
        assert!(
            a.contains(r#""name":"Bash""#) && a.contains("touch "),
            "{a}"
        );
        let text = json!({"role": "user", "content": "FLEET-TEXT"});
        let a = post(
            &m,
            "/v1/messages",
            json!({"stream": false, "tools": [{"name": "Bash"}], "messages": [text]}),
        )
        .await;
        assert!(
            a.contains(r#""text":"done.""#) && a.contains("end_turn"),
            "{a}"
        );
        // Responses: namespaced MCP tools; a title side request.
        let tools = json!([{"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "mcp__fleet", "tools": [{"type": "function", "name": "fleet_whoami"}, {"type": "function", "name": "fleet_reply"}]}]);
        let input = json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}]);
        let r = post(
            &m,
            "/v1/responses",
            json!({"stream": true, "tools": tools, "input": input}),
        )
        .await;
        assert!(
            r.contains(r#""name":"fleet_whoami","namespace":"mcp__fleet""#)
                || r.contains(r#""namespace":"mcp__fleet""#),
            "{r}"
        );
        assert!(r.contains("event: response.completed"), "{r}");
        let mut input2 = input.as_array().unwrap().clone();
        input2.push(json!({"type": "function_call", "name": "fleet_whoami", "namespace": "mcp__fleet", "call_id": "c1", "arguments": "{}"}));
        input2.push(json!({"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "Wall time: 0.01 seconds\nOutput:"}, {"type": "input_text", "text": WHOAMI}]}));
        let r = post(
            &m,
            "/v1/responses",
            json!({"stream": true, "tools": tools, "input": input2}),
        )
        .await;
        assert!(
            r.contains("fleet_reply") && r.contains("whoami: you are primary `lead`"),
            "{r}"
        );
        let r = post(&m, "/v1/responses", json!({"stream": true, "input": input,
            "text": {"format": {"type": "json_schema", "schema": {"type": "object", "properties": {"title": {"type": "string"}}}}}})).await;
        assert!(r.contains("Mock title"), "{r}");
        // Gemini: a session context part before the prompt; results wrapped.
        let g = json!({"contents": [{"role": "user", "parts": [{"text": "<session_context>x</session_context>"}, {"text": PROMPT}]}],
            "tools": [{"functionDeclarations": [{"name": "mcp_fleet_fleet_whoami"}, {"name": "mcp_fleet_fleet_reply"}]}]});
        let r = post(
            &m,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            g.clone(),
        )
        .await;
        assert!(
            r.contains(r#""functionCall":{"args":{},"name":"mcp_fleet_fleet_whoami"}"#)
                || r.contains("mcp_fleet_fleet_whoami"),
            "{r}"
        );
        let mut g2 = g.clone();
        g2["contents"].as_array_mut().unwrap().push(json!({"role": "model", "parts": [{"functionCall": {"name": "mcp_fleet_fleet_whoami", "args": {}}}]}));
        g2["contents"].as_array_mut().unwrap().push(json!({"role": "user", "parts": [{"functionResponse": {"name": "mcp_fleet_fleet_whoami",
            "response": {"output": format!("<untrusted_context>\n{WHOAMI}\n</untrusted_context>")}}}]}));
        let r = post(
            &m,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            g2,
        )
        .await;
        assert!(
            r.contains("mcp_fleet_fleet_reply") && r.contains("whoami: you are primary `lead`"),
            "{r}"
        );
        let r = post(&m, "/v1beta/models/gemini-2.5-flash:countTokens", json!({})).await;
        assert!(r.contains("totalTokens"), "{r}");
        // Chat completions.
        let c = json!({"stream": true, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": PROMPT}],
            "tools": [{"type": "function", "function": {"name": "fleet_fleet_whoami"}}, {"type": "function", "function": {"name": "bash"}}]});
        let r = post(&m, "/v1/chat/completions", c).await;
        assert!(
            r.contains("fleet_fleet_whoami") && r.contains("data: [DONE]"),
            "{r}"
        );
        // The prompts that started turns, per API, and a wait that is already satisfied.
        assert_eq!(m.user_prompts(Api::Gemini), vec![PROMPT.to_string()]);
        assert_eq!(
            m.user_prompts(Api::Anthropic).first().map(String::as_str),
            Some(PROMPT)
        );
        assert_eq!(
            m.wait_prompts(Api::Chat, 1, Duration::from_secs(5)).await,
            vec![PROMPT.to_string()]
        );
        assert!(m.turn_started_ms(Api::Responses, "t-7").is_some());
    }

    /// Codex adds an `<environment_context>` user message inside a turn when its context
    /// changes (here the date, as a CI run crossed midnight UTC): the turn's prompt is still the
    /// ticket, and the whoami result before that message still leads to fleet_reply.
    #[test]
    fn codex_context_inside_a_turn_is_not_its_prompt() {
        let user = |t: &str| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]});
        let body = json!({
            "tools": [{"type": "function", "name": "mcp__fleet__fleet_whoami"}],
            "input": [
                user("<environment_context>\n  <cwd>/tmp/x</cwd>\n</environment_context>"),
                user(PROMPT),
                {"type": "function_call", "call_id": "c1", "name": "mcp__fleet__fleet_whoami", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": WHOAMI},
                user("<environment_context>\n  <current_date>2026-12-06</current_date>\n</environment_context>"),
            ]
        });
        let t = responses_turn(&body).expect("a turn");
        assert_eq!(ticket_in(&t.prompt).as_deref(), Some("t-7"), "{}", t.prompt);
        match &t.last {
            Last::Result { name, .. } => assert!(name.ends_with("fleet_whoami"), "{name}"),
            Last::Prompt => panic!("the context message was taken for a new prompt"),
        }
    }

    #[test]
    fn pasted_content_is_unwrapped() {
        let w = "\n\n<pasted_content id=\"5ff1\">\n[fleet ticket t-1 from operator]\nbody\n</pasted_content id=\"5ff1\">\n";
        assert_eq!(unwrap_pasted(w), "[fleet ticket t-1 from operator]\nbody");
        assert_eq!(unwrap_pasted("plain"), "plain");
    }

    #[test]
    fn tickets_and_first_lines() {
        assert_eq!(
            ticket_in("[fleet ticket t-12 from operator · answer with fleet_reply]\nx").as_deref(),
            Some("t-12")
        );
        assert_eq!(
            first_line("Wall time: 0.01 seconds\nOutput:\nyou are worker `w1`, x\n\n{}"),
            "you are worker `w1`, x"
        );
        assert_eq!(
            first_line("<untrusted_context>\nyou are primary `lead`\n</untrusted_context>"),
            "you are primary `lead`"
        );
    }
}
