//! MCP through the real shim (`fleetd mcp` as a child process, rmcp's client), in both protocol
//! eras, and the shim surviving a daemon restart.

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion, ResultType};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::common::*;

#[derive(Clone, Copy, Debug)]
pub enum Era {
    Initialize,
    Discover,
}

pub async fn client(d: &D, era: Era) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("mcp")
        .env("FLEETD_STATE_DIR", &d.state)
        .env_remove("RUST_LOG");
    let (t, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fleetd mcp");
    match era {
        Era::Initialize => ().serve(t).await.expect("initialize"),
        Era::Discover => ()
            .serve_with_lifecycle(
                t,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("discover"),
    }
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_string());
    if let Value::Object(m) = args {
        p = p.with_arguments(m);
    }
    p
}

pub async fn call(c: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    c.call_tool(params(tool, args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

/// A call that must be refused before the tool runs (bad arguments, unknown tool): its message,
/// whether rmcp reports it as a JSON-RPC error or as an error result.
pub async fn call_err(c: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> String {
    match c.call_tool(params(tool, args)).await {
        Ok(r) if r.is_error == Some(true) => text(&r),
        Ok(r) => panic!("{tool} should have failed, got {r:?}"),
        Err(e) => e.to_string(),
    }
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

const TOOLS: [&str; 12] = [
    "fleet_ack",
    "fleet_ask",
    "fleet_decision",
    "fleet_drift",
    "fleet_list",
    "fleet_poll",
    "fleet_reply",
    "fleet_send",
    "fleet_spawn",
    "fleet_status",
    "fleet_stop",
    "fleet_whoami",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_protocol_eras_list_the_tools_and_call_them() {
    let d = D::start().await;
    for era in [Era::Initialize, Era::Discover] {
        let c = client(&d, era).await;
        let mut names: Vec<String> = c
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        assert_eq!(names, TOOLS, "{era:?}");
        for t in c.list_all_tools().await.unwrap() {
            assert!(
                t.description.as_deref().is_some_and(|d| !d.is_empty()),
                "{} has no description",
                t.name
            );
            assert_eq!(
                t.input_schema.get("type").and_then(|v| v.as_str()),
                Some("object"),
                "{}",
                t.name
            );
        }
        let r = call(&c, "fleet_whoami", json!({})).await;
        assert_eq!(r.is_error, Some(false), "{era:?}");
        assert_eq!(r.structured_content.as_ref().unwrap()["member"], false);
        // The 2026-07-28 era requires resultType on every result (the official Python SDK
        // refuses a result without it); the 2025-11-25 era has none.
        let want = match era {
            Era::Initialize => None,
            Era::Discover => Some(ResultType::COMPLETE),
        };
        let listed = c.list_tools(None).await.unwrap();
        assert_eq!(listed.result_type, want, "tools/list in {era:?}");
        assert_eq!(r.result_type, want, "tools/call in {era:?}");
        let _ = c.cancel().await;
    }
    // A member whose agent speaks the 2026-07-28 era works end to end.
    d.spawn(
        "w1",
        "worker",
        sim(&["--mcp-era", "discover", "--work-ms", "10"]),
    )
    .await;
    let t = d.ask("w1", "sum: 2 2").await;
    assert_eq!(t["reply"]["text"], "sum of 2 numbers = 4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shim_survives_a_daemon_restart() {
    let mut d = D::start().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "10"])).await;
    assert_eq!(
        d.ask("w1", "sum: 1 2").await["reply"]["text"],
        "sum of 2 numbers = 3"
    );
    let c = client(&d, Era::Initialize).await;
    assert_eq!(
        call(&c, "fleet_whoami", json!({})).await.is_error,
        Some(false)
    );
    d.kill9();
    d.boot().await;
    // The same MCP session keeps working (the shim reconnected), for us and for the agent,
    // whose MCP session began before the restart.
    let r = call(&c, "fleet_list", json!({})).await;
    assert_eq!(r.is_error, Some(true), "a non-member still may not list");
    assert!(text(&r).contains("not a fleet member"));
    assert_eq!(
        d.ask("w1", "sum: 3 4").await["reply"]["text"],
        "sum of 2 numbers = 7"
    );
    let _ = c.cancel().await;
}

/// The official MCP Python SDK (PyPI `mcp`, pinned by .ci/run, which sets FLEETD_MCP_PYTHON to
/// a Python that has it) lists and calls the tools through `fleetd mcp` in both protocol eras
/// and in its default (auto) mode. Its 2026-07-28 client refuses any result without
/// `resultType`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_works_in_both_eras() {
    let Some(python) = std::env::var_os("FLEETD_MCP_PYTHON") else {
        eprintln!(
            "SKIPPED: FLEETD_MCP_PYTHON is not set (a Python with PyPI mcp==2.3.0; .ci/run sets it)"
        );
        return;
    };
    let d = D::start().await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/mcp_sdk_client.py");
    for era in ["2025-11-25", "2026-07-28", "auto"] {
        let out = tokio::process::Command::new(&python)
            .arg(&script)
            .args(["--era", era, "--"])
            .arg(bin())
            .arg("mcp")
            .env("FLEETD_STATE_DIR", &d.state)
            .output()
            .await
            .expect("run the Python SDK client (FLEETD_MCP_PYTHON)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "era {era}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
        let want_protocol = if era == "2025-11-25" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(v["protocol"], want_protocol, "{v}");
        assert_eq!(v["tools"], json!(TOOLS), "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert!(
            v["whoami"].as_str().unwrap().contains("not a member"),
            "{v}"
        );
    }
}
