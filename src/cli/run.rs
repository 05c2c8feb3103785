//! The client subcommands: each a request to the daemon's REST API, its answer printed for
//! people or as JSON; and `attach`, a terminal on a member's PTY.

use fleetd_actors::fleet::{SendResult, TicketView};
use fleetd_actors::tickets::state::TicketState;

use super::views::{MemberDetail, Reloaded, parse};
use super::*;

/// The largest message the CLI reads from stdin or a file (the daemon's own limit,
/// `injector.max_message_bytes`, is smaller by default and says so).
pub(super) const MAX_MESSAGE_INPUT: u64 = 1 << 20;

/// A message's text: the words joined, or stdin for `-`, or a file; bounded by bytes read.
pub(super) fn message_text(words: &[String], file: Option<&Path>) -> anyhow::Result<String> {
    use std::io::Read;
    let (what, reader): (String, Box<dyn Read>) = match (file, words) {
        (Some(f), _) => (
            f.display().to_string(),
            Box::new(
                std::fs::File::open(f).with_context(|| format!("message file {}", f.display()))?,
            ),
        ),
        (None, [dash]) if dash == "-" => ("stdin".into(), Box::new(std::io::stdin())),
        (None, words) => return Ok(words.join(" ")),
    };
    let mut buf = Vec::new();
    reader
        .take(MAX_MESSAGE_INPUT + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading the message from {what}"))?;
    anyhow::ensure!(
        buf.len() as u64 <= MAX_MESSAGE_INPUT,
        "the message from {what} is over {} MiB; send a path to the text instead",
        MAX_MESSAGE_INPUT >> 20
    );
    let text = String::from_utf8(buf)
        .map_err(|_| anyhow::anyhow!("the message from {what} is not UTF-8 text"))?;
    let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
    anyhow::ensure!(!text.trim().is_empty(), "the message from {what} is empty");
    Ok(text)
}

/// `stop --drain`: ask the daemon to drain and stop, and meanwhile say on stderr what it waits
/// for. Past `drain_secs` the request is dropped (the daemon then stops waiting and the member
/// keeps running) and the command fails with status 3.
pub(super) async fn drain_then_stop(
    c: &Client,
    name: &str,
    drain_secs: Option<u64>,
) -> anyhow::Result<Value> {
    let started = std::time::Instant::now();
    let path = format!("/members/{name}?drain=true");
    let stop = c.delete::<Value>(&path);
    tokio::pin!(stop);
    let bound = drain_secs.map(Duration::from_secs);
    let mut last = String::new();
    loop {
        let tick = tokio::time::sleep(Duration::from_secs(1));
        tokio::select! {
            r = &mut stop => return r.map_err(api),
            _ = tick => {}
        }
        let waited = started.elapsed();
        if let Some(b) = bound
            && waited >= b
        {
            return Err(Failed::new(
                3,
                format!(
                    "{name} did not drain within {} s ({last}); it keeps running: `fleetd stop {name}` stops it now",
                    b.as_secs()
                ),
            )
            .into());
        }
        // Progress, when it changes: what the drain still waits for.
        // Best effort, as the request itself: an answer that does not come or does not read
        // as a member's status shows no progress this second.
        let path = format!("/members/{name}");
        let detail = c
            .get::<Value>(&path)
            .await
            .ok()
            .and_then(|m| parse::<MemberDetail>(&m, &format!("GET {path}")).ok());
        if let Some(m) = detail {
            let queued = m.queue.as_ref().map_or(0, |q| q.queued.len());
            let in_flight = m.queue.as_ref().is_some_and(|q| q.in_flight.is_some());
            let now = format!(
                "{queued} queued{}, status {}",
                if in_flight {
                    ", one being delivered"
                } else {
                    ""
                },
                wire_name(&m.member.status)
            );
            if now != last {
                eprintln!(
                    "{}",
                    fleetd_actors::sanitize::for_display(&format!(
                        "draining {name}: {now} ({} s); waits for an empty queue and an idle member",
                        waited.as_secs()
                    ))
                );
                last = now;
            }
        }
    }
}

/// `send --wait`: a reply or a tail is success; a ticket still open fails with status 3, one
/// that ended otherwise (undeliverable, expired) with 1.
fn waited(sent: &SendResult, wait_secs: Option<u64>) -> anyhow::Result<()> {
    let t = &sent.ticket;
    match t.ticket.state {
        TicketState::Replied | TicketState::Tail => Ok(()),
        TicketState::Open => Err(Failed::new(
            3,
            format!(
                "no reply {}: ticket {} is still open (receipt {}); `fleetd tickets {}` follows it",
                wait_secs.map_or("within the daemon's wait bound".to_string(), |w| format!(
                    "within {w} s"
                )),
                t.ticket.id,
                receipt_state(t.receipt.as_ref()),
                t.ticket.id
            ),
        )
        .into()),
        other => Err(Failed::new(
            1,
            format!(
                "ticket {} ended {} without a reply{}",
                t.ticket.id,
                wire_name(&other),
                t.receipt
                    .as_ref()
                    .and_then(|r| r.note.as_ref())
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            ),
        )
        .into()),
    }
}

/// A hook's payload on stdin: bounded (1 MiB), and an error rather than a wait if it never
/// ends (stdin is a terminal).
pub(super) async fn read_hook_stdin() -> anyhow::Result<String> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let limit = 1 << 20;
    tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::stdin().take(limit + 1).read_to_end(&mut buf),
    )
    .await
    .context("no hook payload on stdin within 2 s (pass it as an argument, or pipe it)")??;
    anyhow::ensure!(
        buf.len() as u64 <= limit,
        "the hook payload is over {limit} bytes"
    );
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

pub(super) async fn attach(c: &Client, name: &str) -> anyhow::Result<()> {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stdin = std::io::stdin();
    anyhow::ensure!(
        nix::unistd::isatty(&stdin).unwrap_or(false),
        "attach needs a terminal on stdin"
    );
    let (rows, cols) = term_size().unwrap_or((40, 120));
    let (rows, cols) = fleetd_actors::term::clamp_size(rows, cols);
    let conn = c.attach(name, rows, cols).await.map_err(api)?;
    let saved = tcgetattr(&stdin)?;
    let mut raw = saved.clone();
    cfmakeraw(&mut raw);
    tcsetattr(&stdin, SetArg::TCSANOW, &raw)?;
    eprint!("[attached to {name}; Ctrl-] detaches]\r\n");
    let (mut rd, mut wr) = tokio::io::split(conn);
    let (key_tx, mut key_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 1024];
        let mut stdin = std::io::stdin().lock();
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || key_tx.blocking_send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    let mut stdout = tokio::io::stdout();
    let why = loop {
        tokio::select! {
            n = rd.read(&mut buf) => match n {
                Ok(0) | Err(_) => break "the member's terminal closed",
                Ok(n) => { let _ = stdout.write_all(&buf[..n]).await; let _ = stdout.flush().await; }
            },
            k = key_rx.recv() => match k {
                Some(k) => {
                    if let Some(i) = k.iter().position(|&b| b == 0x1d) {
                        let _ = wr.write_all(&k[..i]).await;
                        break "detached";
                    }
                    if wr.write_all(&k).await.is_err() { break "the daemon closed the connection" }
                }
                None => break "end of input",
            },
        }
    };
    tcsetattr(&stdin, SetArg::TCSANOW, &saved)?;
    eprintln!("\r\n[{why}; {name} keeps running]");
    Ok(())
}

pub(super) fn term_size() -> Option<(u16, u16)> {
    let ws = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// Run a client subcommand.
pub async fn run_client(cli: Cli) -> anyhow::Result<()> {
    let sd = cli.state_dir.clone();
    match cli.cmd {
        Cmd::Spawn {
            role,
            name,
            slot,
            profile,
            resume,
            worktree,
            json,
            command,
        } => {
            let cwd = std::env::current_dir()
                .ok()
                .map(|p| p.display().to_string());
            let body = match resume {
                Some(r) => json!({"resume": r, "worktree": worktree}),
                None => json!({"role": role, "name": name, "slot": slot, "profile": profile,
                    "command": if command.is_empty() { Value::Null } else { json!(command) },
                    "cwd": cwd, "worktree": worktree}),
            };
            let v: Value = client(&sd)?.post("/members", &body).await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                print!("{}", print_spawned(&parse(&v, "POST /members")?));
            }
        }
        Cmd::List { json } => {
            let v: Value = client(&sd)?.get("/members").await.map_err(api)?;
            if json {
                print_json(&v)
            } else {
                print!("{}", print_members(&parse(&v, "GET /members")?))
            }
        }
        Cmd::Status { name, json } => {
            let c = client(&sd)?;
            match name {
                Some(n) => {
                    let v: Value = c.get(&format!("/members/{n}")).await.map_err(api)?;
                    if json {
                        print_json(&v);
                    } else {
                        print!(
                            "{}",
                            print_member_detail(&parse(&v, &format!("GET /members/{n}"))?)
                        );
                    }
                }
                None => {
                    let v: Value = c.get("/status").await.map_err(api)?;
                    if json {
                        print_json(&v);
                    } else {
                        print!("{}", print_daemon_status(&parse(&v, "GET /status")?));
                    }
                }
            }
        }
        Cmd::Send {
            name,
            message,
            file,
            wait,
            wait_secs,
            json,
        } => {
            let text = message_text(&message, file.as_deref())?;
            let wait = wait || wait_secs.is_some();
            let body = json!({"message": text, "wait": wait, "wait_secs": wait_secs});
            let v: Value = client(&sd)?
                .post(&format!("/members/{name}/messages"), &body)
                .await
                .map_err(api)?;
            if json {
                print_json(&v);
            }
            if !json || wait {
                let sent: SendResult = parse(&v, &format!("POST /members/{name}/messages"))?;
                if !json {
                    print!("{}", print_sent(&sent));
                }
                if wait {
                    waited(&sent, wait_secs)?;
                }
            }
        }
        Cmd::Reply {
            ticket,
            message,
            file,
            json,
        } => {
            let text = message_text(&message, file.as_deref())?;
            let v: Value = client(&sd)?
                .post(
                    &format!("/tickets/{ticket}/reply"),
                    &json!({"message": text}),
                )
                .await
                .map_err(api)?;
            if json {
                print_json(&v)
            } else {
                let t: TicketView = parse(&v, &format!("POST /tickets/{ticket}/reply"))?;
                say!("replied to {}", t.ticket.id)
            }
        }
        Cmd::Stop {
            name,
            drain,
            drain_secs,
            json,
        } => {
            let c = client(&sd)?;
            let v: Value = if drain {
                drain_then_stop(&c, &name, drain_secs).await?
            } else {
                c.delete(&format!("/members/{name}")).await.map_err(api)?
            };
            if json {
                print_json(&v)
            } else {
                print!(
                    "{}",
                    print_stopped(&parse(&v, &format!("DELETE /members/{name}"))?)
                )
            }
        }
        Cmd::Attach { name } => attach(&client(&sd)?, &name).await?,
        Cmd::Screen { name } => {
            let t = client(&sd)?
                .get_text(&format!("/members/{name}/screen"))
                .await
                .map_err(api)?;
            say!("{t}");
        }
        Cmd::Tickets { id, json } => {
            let c = client(&sd)?;
            match id {
                Some(id) => {
                    let v: Value = c.get(&format!("/tickets/{id}")).await.map_err(api)?;
                    if json {
                        print_json(&v)
                    } else {
                        print!(
                            "{}",
                            print_ticket(&parse(&v, &format!("GET /tickets/{id}"))?)
                        )
                    }
                }
                None => {
                    let v: Value = c.get("/tickets").await.map_err(api)?;
                    if json {
                        print_json(&v)
                    } else {
                        print!("{}", print_tickets(&parse::<Vec<_>>(&v, "GET /tickets")?))
                    }
                }
            }
        }
        Cmd::Poll { json } => {
            let v: Value = client(&sd)?.get("/poll").await.map_err(api)?;
            if json {
                print_json(&v)
            } else {
                print!("{}", print_tickets(&parse::<Vec<_>>(&v, "GET /poll")?))
            }
        }
        Cmd::Ack { ticket } => {
            let _: Value = client(&sd)?
                .post(&format!("/tickets/{ticket}/ack"), &json!({}))
                .await
                .map_err(api)?;
            say!("acknowledged {ticket}");
        }
        Cmd::Events { since, count, json } => {
            let mut st = client(&sd)?.events(since).await.map_err(api)?;
            let mut n = 0;
            let mut out = std::io::stdout();
            while let Some(e) = st.next().await {
                let e = e.map_err(api)?;
                if json {
                    let text = serde_json::to_string(&e).unwrap_or_default();
                    let _ = writeln!(out, "{}", fleetd_actors::sanitize::json_for_terminal(&text));
                } else {
                    let text = describe_event(&e);
                    let _ = writeln!(out, "{}", fleetd_actors::sanitize::for_display(&text));
                }
                let _ = out.flush();
                n += 1;
                if count.is_some_and(|c| n >= c) {
                    break;
                }
            }
        }
        Cmd::Signal {
            arg, hook: false, ..
        } => {
            let Some(state) = arg else {
                anyhow::bail!(
                    "fleetd signal needs a state: {}",
                    fleetd_actors::hooks::STATES
                );
            };
            let _: Value = client(&sd)?
                .post("/signal", &json!({"status": state}))
                .await
                .map_err(api)?;
        }
        Cmd::Signal {
            arg,
            hook: true,
            context,
            context_on_resume,
        } => {
            // An agent waits for its hook: bounded, and never a failure it would act on. Its
            // stdout goes to the model (Claude Code) or is parsed (Gemini CLI): nothing is
            // printed there but the context asked for.
            let sent = tokio::time::timeout(Duration::from_secs(5), async {
                let payload = match arg {
                    Some(a) => a,
                    None => read_hook_stdin().await?,
                };
                let v: Value =
                    serde_json::from_str(&payload).context("the hook payload is not JSON")?;
                // A resumed session has its charter already in its history if its CLI replays
                // the context it was given (Codex). One that does not (Gemini CLI: it fires
                // SessionStart before it loads the resumed conversation, which replaces what
                // the hook added) is given it with its first turn instead, when the daemon
                // says that turn is the first since the resume (`context_due`).
                let event = v["hook_event_name"].as_str().unwrap_or("").to_string();
                let starts = event == "SessionStart" && v["source"] != "resume";
                let ack: Value = client(&sd)?
                    .post("/signal", &json!({"hook": v}))
                    .await
                    .map_err(api)?;
                if let Some(why) = ack["session_refused"].as_str() {
                    eprintln!(
                        "fleetd signal --hook: the session id was not kept for resume: {}",
                        fleetd_actors::sanitize::for_display(why)
                    );
                }
                let owed = context_on_resume
                    && ack["context_due"] == true
                    && matches!(event.as_str(), "BeforeAgent" | "UserPromptSubmit");
                if let (Some(file), true) = (context, starts || owed) {
                    let text = std::fs::read(&file)
                        .with_context(|| format!("the context file {}", file.display()))?;
                    anyhow::ensure!(text.len() <= 1 << 20, "{} is over 1 MiB", file.display());
                    let out = json!({"hookSpecificOutput": {
                        "hookEventName": event,
                        "additionalContext": String::from_utf8_lossy(&text),
                    }});
                    println!("{out}");
                }
                anyhow::Ok(())
            })
            .await;
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!(
                    "fleetd signal --hook: {}",
                    fleetd_actors::sanitize::for_display(&crate::report::report(&e))
                ),
                Err(_) => eprintln!("fleetd signal --hook: the daemon did not answer within 5 s"),
            }
        }
        Cmd::Agents { json } => {
            // The daemon's view (its config, its PATH), or, with no daemon, this shell's with
            // the built-in profiles.
            let remote = match client(&sd) {
                Ok(c) => c.get::<Value>("/agents").await.ok(),
                Err(_) => None,
            };
            let v = match remote {
                Some(v) => v,
                None => {
                    eprintln!(
                        "(no daemon answered: the built-in profiles, checked on this shell's PATH)"
                    );
                    serde_json::to_value(
                        crate::doctor::check(&fleetd_actors::config::Config::default()).await,
                    )?
                }
            };
            if json {
                print_json(&v);
            } else {
                print!("{}", print_agents(&parse::<Vec<_>>(&v, "GET /agents")?));
            }
        }
        Cmd::Fault { target } => {
            let _: Value = client(&sd)?
                .post("/debug/fault", &json!({"target": target}))
                .await
                .map_err(api)?;
            say!("fault injected into {target}");
        }
        Cmd::Decision {
            cmd: DecisionCmd::List { json },
        } => {
            let v: Value = client(&sd)?.get("/decisions").await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                print!(
                    "{}",
                    print_decisions(&parse::<Vec<_>>(&v, "GET /decisions")?)
                );
            }
        }
        Cmd::Decision {
            cmd: DecisionCmd::Show { id, json },
        } => {
            let v: Value = client(&sd)?
                .get(&format!("/decisions/{id}"))
                .await
                .map_err(api)?;
            if json {
                print_json(&v);
            } else {
                print!(
                    "{}",
                    print_decision(&parse(&v, &format!("GET /decisions/{id}"))?)
                );
            }
        }
        Cmd::Peers { json } => {
            let v: Value = client(&sd)?.get("/peers").await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                print!("{}", print_peers(&parse(&v, "GET /peers")?));
            }
        }
        Cmd::Drift {
            cmd: DriftCmd::Peers { json },
        } => {
            let v: Value = client(&sd)?.get("/drift").await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                print!("{}", print_drift(&parse(&v, "GET /drift")?));
            }
        }
        Cmd::Dashboard { port } => crate::dashboard::run(state_dir(&sd)?, port).await?,
        Cmd::Reload => {
            let v: Value = client(&sd)?
                .post("/config/reload", &json!({}))
                .await
                .map_err(api)?;
            let r: Reloaded = parse(&v, "POST /config/reload")?;
            say!("{}", opt(&r.detail));
        }
        Cmd::Serve { .. }
        | Cmd::Config { .. }
        | Cmd::Mcp { .. }
        | Cmd::SimAgent(_)
        | Cmd::Probe(_)
        | Cmd::Demo { .. }
        | Cmd::Bench(_)
        | Cmd::EchoServer
        | Cmd::Ledger { .. }
        | Cmd::Keygen { .. }
        | Cmd::Drift {
            cmd: DriftCmd::Append { .. } | DriftCmd::Check { .. },
        }
        | Cmd::PtyHost(_) => unreachable!("handled in main"),
    }
    Ok(())
}
