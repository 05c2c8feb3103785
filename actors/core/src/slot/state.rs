//! The member slot core: a member's screen model, its status, and the paste in flight.
//!
//! Owns the vt100 screen (a pure in-memory model fed the terminal's output bytes), the status
//! rules (`starting | working | idle | blocked | exited`), the idle-TTL reap decision, the
//! transcript tail, and the life of one paste: its bytes, its Enter (after the profile's delay),
//! and the evidence that the agent started a turn on it.
//!
//! Status: hooks first, screen second. A hook's signal (`fleetd signal`) sets the status and
//! holds it until the next signal, unless the screen has since changed and then read otherwise
//! for `hook_yield_ms` (a hook that never came). The screen is read by the profile's regexes:
//! a change shows at once when it shows work (the busy marker, or anything that is not the
//! prompt); idle needs the screen still for `stable_ms`, so a footer that redraws does not
//! flip the status. A permission dialog on screen always wins: it is `blocked` and not
//! injectable whatever any signal said (a profile may declare its dialogs injectable; a signal
//! never can).
//!
//! Acceptance: a paste counts as taken only on evidence that the agent started a turn on it,
//! after its Enter: a turn-started hook whose prompt carries the message's header, or the busy
//! marker (or a permission dialog, which only a turn opens) on screen; for a profile without a
//! busy marker, any change of the screen. Without evidence
//! within the accept timeout the core reports what the screen shows.
//!
//! The terminal link ([`relink`]): a broken connection to a terminal host that is still there
//! is made again (the member is re-adopted), and only a host that is gone (its exit recorded,
//! or nobody listening at its socket) makes the member exited.
//!
//! Pure: bytes, signals and time in, effects out. Must never read or write a terminal, a file
//! or a socket.

use std::num::NonZeroU16;
use std::ops::Not;

use crate::config::CompiledProfile;
use crate::types::{Millis, MsgId, Status, Written};

/// How a screen reads under a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    pub status: Status,
    /// For `blocked`: whether a message may answer what is on screen.
    pub injectable: bool,
}

const WORKING: Classified = Classified {
    status: Status::Working,
    injectable: false,
};
const IDLE: Classified = Classified {
    status: Status::Idle,
    injectable: true,
};

/// The part of the screen the regexes look at: its last `n` non-blank lines.
pub fn scan_window(screen: &str, n: usize) -> String {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn hit(re: &Option<regex::Regex>, text: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(text))
}

/// Why a member is `blocked`, as the operator and its lead are told.
pub const UNRECOGNISED: &str = "unrecognised screen";
pub const DIALOG: &str = "dialog on screen";
pub const PERMISSION: &str = "permission asked (hook)";
pub const QUESTION: &str = "question";

/// Whether none of the profile's regexes reads this screen window: not the prompt, not the
/// input box, not the busy marker, not a dialog or a question. Such a screen, once still for
/// the profile's `unrecognised_ms`, is `blocked` ([`UNRECOGNISED`]). A profile without a prompt
/// reads every still screen as idle: nothing is unrecognised to it.
pub fn unrecognised(profile: &CompiledProfile, window: &str) -> bool {
    profile.prompt.as_ref().is_some_and(|p| !p.is_match(window))
        && !hit(&profile.busy, window)
        && !hit(&profile.permission, window)
        && !hit(&profile.blocked, window)
        && !hit(&profile.input, window)
}

/// Classify a stable screen: busy beats permission beats question beats the empty prompt
/// (idle) beats the input box with text in it (idle, but nothing is pasted on top of it);
/// anything else is work in progress. A profile without a prompt regex reads a still screen
/// as idle. Only the last `scan_lines` non-blank lines count.
pub fn classify(profile: &CompiledProfile, screen: &str) -> Classified {
    let window = scan_window(screen, profile.scan_lines);
    let w = window.as_str();
    if hit(&profile.busy, w) {
        WORKING
    } else if hit(&profile.permission, w) {
        Classified {
            status: Status::Blocked,
            injectable: profile.permission_injectable,
        }
    } else if hit(&profile.blocked, w) {
        Classified {
            status: Status::Blocked,
            injectable: true,
        }
    } else if profile.prompt.as_ref().is_none_or(|p| p.is_match(w)) {
        IDLE
    } else if hit(&profile.input, w) {
        Classified {
            status: Status::Idle,
            injectable: false,
        }
    } else {
        WORKING
    }
}

/// What an agent's hook (or `fleetd signal STATE`) reports. See `crate::hooks` for how a
/// CLI's hook payload maps to one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The agent started a turn (a `UserPromptSubmit`-style hook); `prompt` is the submitted
    /// text (its start) when the hook carries it.
    TurnStarted { prompt: Option<String> },
    /// At work (a tool runs, a dialog was answered).
    Working,
    /// The turn ended; the agent waits at its prompt. `turn` is the prompt of the turn that
    /// ended, when the hook says (Codex's `notify`): evidence for a paste whose start no
    /// screen frame showed.
    Idle { turn: Option<String> },
    /// A permission dialog: blocked, never injectable.
    Permission,
    /// A question a message may answer: blocked, injectable.
    Question,
    /// A session (re)started: the screen decides again.
    SessionStart,
    /// The session is ending: nothing is pasted until the screen or a hook says otherwise.
    Closing,
}

impl Signal {
    pub fn name(&self) -> &'static str {
        match self {
            Signal::TurnStarted { .. } => "turn-started",
            Signal::Working => "working",
            Signal::Idle { .. } => "idle",
            Signal::Permission => "permission",
            Signal::Question => "question",
            Signal::SessionStart => "session-start",
            Signal::Closing => "exited",
        }
    }
}

/// What showed that the agent started a turn on a paste.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// A turn-started hook (with the message's header in its prompt, when it carries one).
    Hook,
    /// The screen: the busy marker after the Enter (or, without one, a change after it).
    Screen,
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The status changed; tell the registry, the injector and the event stream.
    Status {
        from: Status,
        to: Status,
        injectable: bool,
        cause: Cause,
        /// For `blocked`: why ([`UNRECOGNISED`], [`DIALOG`], ...) and the last lines of the
        /// screen (screen text: shown by the rules of `authz::blocked_screen_visible`).
        blocked: Option<(&'static str, String)>,
    },
    /// Idle for the whole TTL: stop the member and say why.
    Reap { idle_ms: Millis },
    /// Hand one message to the terminal host: its paste bytes, then (the host waits
    /// `enter_delay_ms`) its Enter; the host says when both are written ([`SlotCore::pasted`]).
    Paste {
        msg: MsgId,
        bytes: Vec<u8>,
        enter_delay_ms: Millis,
    },
    /// Write these keys to the terminal (an Enter pressed once more).
    Write(Vec<u8>),
    /// The agent started a turn on the pasted message.
    TurnStarted { msg: MsgId, by: Evidence },
    /// No evidence of a turn within the accept timeout after the Enter.
    NotStarted {
        msg: MsgId,
        waited_ms: Millis,
        /// The last lines of the screen, as the agent shows them now.
        screen: String,
    },
    /// The screen model was dropped (the member sat still): memory may be given back.
    ScreenDropped,
    /// The screen model is needed again: ask the terminal host for its screen
    /// ([`SlotCore::screen_returned`]).
    WantScreen,
}

/// Why a status changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The screen changed or was classified.
    Screen,
    /// An explicit signal (an agent hook) from the member's process tree.
    Signal,
    /// The process exited.
    Exit,
}

/// Slot settings taken from config at (re)start.
#[derive(Clone, Debug)]
pub struct SlotSettings {
    pub rows: u16,
    pub cols: u16,
    /// 0 = never reap.
    pub idle_ttl_ms: Millis,
    pub tail_lines: usize,
    /// After the Enter, the agent must show it started a turn within this time.
    pub accept_timeout_ms: Millis,
    /// A screen still this long (no paste in flight) is dropped; 0 = never (also for a
    /// terminal host that cannot hand its screen back).
    pub dormant_ms: Millis,
}

/// A status a signal set, and when.
#[derive(Clone, Copy, Debug)]
struct Pin {
    class: Classified,
    at: Millis,
}

/// The paste in flight.
#[derive(Clone, Debug)]
struct Paste {
    msg: MsgId,
    /// The header line, which a turn-started hook's prompt must carry to count.
    marker: String,
    /// When the host said its Enter was written (0 until then).
    enter_at: Millis,
    entered: bool,
    started: bool,
    reported: bool,
    /// The Enter was pressed once more (the text still sat in the input box).
    retried: bool,
}

/// The last lines of a screen, for notes.
fn excerpt(screen: &str, lines: usize) -> String {
    let ls: Vec<&str> = screen
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    ls[ls.len().saturating_sub(lines)..].join("\n")
}

/// The screen model: a vt100 grid, or none while the member sits still.
enum Screen {
    Live(Box<vt100::Parser>),
    /// Dropped after a still spell: what the rules read of it is kept (`last_contents`, the
    /// paste mode, the size) and the terminal host holds the grid. Output while dormant is
    /// not applied: the host's screen, asked for at the first output (`waking`), already
    /// holds it, and everything the host sent before that answer.
    Dormant {
        rows: u16,
        cols: u16,
        bracketed_paste: bool,
        waking: bool,
    },
}

/// One member's screen and status.
pub struct SlotCore {
    screen_model: Screen,
    profile: CompiledProfile,
    settings: SlotSettings,
    /// The status as last published.
    status: Status,
    injectable: bool,
    status_since: Millis,
    /// What the screen says (quick reading on a change, full reading once stable).
    screen: Classified,
    /// A permission dialog is on screen now.
    dialog: bool,
    /// The screen is one none of the profile's regexes reads ([`unrecognised`]); a member
    /// that has drawn nothing yet counts as one (it waits for a prompt it has not shown).
    strange: bool,
    /// ...and it has been still, with no hook, for the profile's window: `blocked`.
    stuck: bool,
    /// When the last signal (hook) came.
    last_signal: Millis,
    /// The reason published with the status (for `blocked`).
    reason: Option<&'static str>,
    pin: Option<Pin>,
    /// Until the member's `fleetd mcp` has listed the fleet tools (or this time passes), an
    /// idle member reads as still starting.
    tools_until: Option<Millis>,
    /// Likewise until its session-start hook has come.
    session_until: Option<Millis>,
    /// ...and until the screen has been still for the window after that hook.
    settling: bool,
    last_change: Millis,
    /// When the screen model last came back from the host (it stays at least `dormant_ms`).
    woke_at: Millis,
    last_contents: String,
    /// The screen changed since it was last classified.
    dirty: bool,
    paste: Option<Paste>,
    /// The paste ids the terminal host reported at (re)connection, when it reported them.
    host_pasted: Option<std::collections::BTreeSet<u64>>,
    reaped: bool,
}

fn nz(v: u16, dflt: u16) -> NonZeroU16 {
    NonZeroU16::new(v)
        .or(NonZeroU16::new(dflt))
        .unwrap_or(NonZeroU16::MIN)
}

impl SlotCore {
    pub fn new(profile: CompiledProfile, settings: SlotSettings, now: Millis) -> Self {
        let (rows, cols) =
            crate::term::clamp_size(nz(settings.rows, 40).get(), nz(settings.cols, 120).get());
        let parser = vt100::Parser::new(nz(rows, 40), nz(cols, 120), 0);
        let tools_until = (profile.wait_for_tools_ms > 0).then(|| now + profile.wait_for_tools_ms);
        let session_until =
            (profile.wait_for_session_ms > 0).then(|| now + profile.wait_for_session_ms);
        let silent_is_idle = profile.prompt.is_none();
        SlotCore {
            screen_model: Screen::Live(Box::new(parser)),
            profile,
            settings,
            status: Status::Starting,
            injectable: false,
            status_since: now,
            screen: Classified {
                status: Status::Starting,
                injectable: false,
            },
            dialog: false,
            strange: silent_is_idle.not(),
            stuck: false,
            last_signal: now,
            reason: None,
            pin: None,
            tools_until,
            session_until,
            settling: false,
            last_change: now,
            woke_at: 0,
            last_contents: String::new(),
            // Without a prompt to wait for, a program that prints nothing (`cat`, a silent
            // REPL) is idle once its empty screen has been still for the window; a profile
            // with a prompt waits for it to be drawn.
            dirty: silent_is_idle,
            paste: None,
            host_pasted: None,
            reaped: false,
        }
    }

    /// The paste ids the terminal host says it has taken (from its hello).
    pub fn host_pastes(&mut self, ids: &[u64]) {
        self.host_pasted = Some(ids.iter().copied().collect());
    }

    /// After a restart: was message `msg` (recorded as delivered) written? If it was, its turn
    /// is watched for from now, as for a paste just made; a turn already on screen (the busy
    /// marker, or a permission dialog) is its turn, since nothing else was pasted after it.
    /// (The submitted-message rule applies too: the header in the transcript, the box empty.)
    pub fn resolve(&mut self, msg: MsgId, text: &str, now: Millis) -> (Written, Vec<Effect>) {
        let written = self.written(msg, text, now);
        let mut fx = vec![];
        if written == Written::Yes {
            self.evidence_on_screen(now, &mut fx);
        }
        (written, fx)
    }

    fn written(&mut self, msg: MsgId, text: &str, now: Millis) -> Written {
        match &self.host_pasted {
            None => Written::Unknown(
                "the terminal host did not say which pastes it took (its connection is gone)"
                    .into(),
            ),
            Some(ids) if ids.contains(&msg.0) => {
                self.track(msg, text);
                if let Some(p) = &mut self.paste {
                    p.entered = true;
                    p.enter_at = now;
                }
                Written::Yes
            }
            Some(ids) => match ids.first() {
                // The host remembers its last pastes only: an id older than all of them cannot
                // be told apart from one it never got.
                Some(oldest) if ids.len() >= crate::term::PASTES_REMEMBERED && msg.0 < *oldest => {
                    Written::Unknown(format!(
                        "the terminal host remembers only its last {} pastes",
                        crate::term::PASTES_REMEMBERED
                    ))
                }
                _ => Written::No,
            },
        }
    }

    /// Restore after a restart: the terminal host's snapshot primes the screen, and the status
    /// the store remembered is kept until the screen is classified again. A running agent
    /// listed its tools long ago: no wait for them.
    pub fn restore(&mut self, snapshot: &[u8], status: Status, since: Millis) {
        self.tools_until = None;
        self.session_until = None;
        let parser = self.live();
        parser.process(snapshot);
        self.last_contents = parser.screen().contents();
        if status != Status::Exited {
            self.status = status;
            self.status_since = since;
            self.injectable = status == Status::Idle;
            self.screen = Classified {
                status,
                injectable: self.injectable,
            };
        }
        self.dialog = self.dialog_in(&self.last_contents.clone());
        self.strange = unrecognised(
            &self.profile,
            &scan_window(&self.last_contents, self.profile.scan_lines),
        );
        self.stuck = false;
        // Classify the restored screen once it has been still for the window.
        self.dirty = true;
    }

    /// The terminal was resized.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        let (rows, cols) = crate::term::clamp_size(rows, cols);
        match &mut self.screen_model {
            Screen::Live(p) => p.screen_mut().set_size(nz(rows, 40), nz(cols, 120)),
            // The host resizes its own screen; it comes back at this size.
            Screen::Dormant {
                rows: r, cols: c, ..
            } => (*r, *c) = (rows, cols),
        }
    }

    pub fn size(&self) -> (u16, u16) {
        match &self.screen_model {
            Screen::Live(p) => {
                let (r, c) = p.screen().size();
                (r.get(), c.get())
            }
            Screen::Dormant { rows, cols, .. } => (*rows, *cols),
        }
    }

    /// The live screen model, made from nothing at the dormant screen's size if there is none
    /// (for output that replaces the screen whole: a restore or the host's screen).
    fn live(&mut self) -> &mut vt100::Parser {
        if let Screen::Dormant { rows, cols, .. } = self.screen_model {
            self.screen_model =
                Screen::Live(Box::new(vt100::Parser::new(nz(rows, 40), nz(cols, 120), 0)));
        }
        match &mut self.screen_model {
            Screen::Live(p) => p,
            Screen::Dormant { .. } => unreachable!("made live above"),
        }
    }

    /// Whether the screen model is dropped (the member sat still).
    pub fn is_dormant(&self) -> bool {
        matches!(self.screen_model, Screen::Dormant { .. })
    }

    /// Ask for the screen model back: a dormant screen asks the terminal host for its screen
    /// (once); a live one needs nothing.
    pub fn wake(&mut self) -> Vec<Effect> {
        match &mut self.screen_model {
            Screen::Dormant { waking, .. } if !*waking => {
                *waking = true;
                vec![Effect::WantScreen]
            }
            _ => vec![],
        }
    }

    /// The terminal host's screen, asked for by [`Effect::WantScreen`]: the screen model is
    /// live again from it, and read as output (it holds all output the host sent before it).
    /// On a live screen (a second answer) it is output like any other redraw.
    pub fn screen_returned(&mut self, snapshot: &[u8], now: Millis) -> Vec<Effect> {
        // A fresh model at the dormant screen's size: the host's screen replaces it whole.
        if self.is_dormant() {
            self.woke_at = now;
        }
        self.live();
        self.output(snapshot, now)
    }

    /// Whether a still screen is due to be dropped now (see [`SlotSettings::dormant_ms`]).
    fn dormant_at(&self) -> Option<Millis> {
        let d = self.settings.dormant_ms;
        if d == 0
            || self.is_dormant()
            || self.dirty
            || self.status == Status::Exited
            || self
                .paste
                .as_ref()
                .is_some_and(|p| !p.started && !p.reported)
        {
            return None;
        }
        Some(self.last_change.max(self.woke_at) + d)
    }

    pub fn set_profile(&mut self, profile: CompiledProfile) {
        self.profile = profile;
    }

    pub fn set_settings(&mut self, settings: SlotSettings) {
        self.settings.idle_ttl_ms = settings.idle_ttl_ms;
        self.settings.tail_lines = settings.tail_lines;
        self.settings.accept_timeout_ms = settings.accept_timeout_ms;
        self.settings.dormant_ms = settings.dormant_ms;
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn injectable(&self) -> bool {
        self.injectable
    }

    pub fn status_since(&self) -> Millis {
        self.status_since
    }

    /// Why the member is `blocked` ([`UNRECOGNISED`], [`DIALOG`], [`PERMISSION`], [`QUESTION`]),
    /// as last published; `None` in any other status.
    pub fn blocked_reason(&self) -> Option<&'static str> {
        self.reason
    }

    /// The message handed to the terminal host whose paste and Enter it has not confirmed.
    pub fn paste_unconfirmed(&self) -> Option<MsgId> {
        self.paste.as_ref().filter(|p| !p.entered).map(|p| p.msg)
    }

    /// The message whose paste is in flight (pasted, its turn not yet seen to start).
    pub fn paste_in_flight(&self) -> Option<MsgId> {
        self.paste.as_ref().filter(|p| !p.started).map(|p| p.msg)
    }

    /// Whether a signal's status holds (the screen rules wait).
    pub fn is_pinned(&self) -> bool {
        self.pin.is_some()
    }

    /// The screen as plain text (a dormant screen's as it was when dropped: nothing was
    /// drawn since).
    pub fn screen_text(&self) -> String {
        match &self.screen_model {
            Screen::Live(p) => p.screen().contents(),
            Screen::Dormant { .. } => self.last_contents.clone(),
        }
    }

    /// Escape sequences that redraw the current screen (for an attaching terminal); `None`
    /// while the screen is dormant ([`Self::wake`] first).
    pub fn screen_formatted(&self) -> Option<Vec<u8>> {
        match &self.screen_model {
            Screen::Live(p) => Some(p.screen().state_formatted().into_bytes()),
            Screen::Dormant { .. } => None,
        }
    }

    /// Whether the program asked for bracketed paste.
    pub fn bracketed_paste(&self) -> bool {
        match &self.screen_model {
            Screen::Live(p) => p.screen().bracketed_paste(),
            Screen::Dormant {
                bracketed_paste, ..
            } => *bracketed_paste,
        }
    }

    /// The last `tail_lines` non-blank lines of the screen.
    pub fn tail(&self) -> String {
        excerpt(&self.screen_text(), self.settings.tail_lines)
    }

    fn dialog_in(&self, contents: &str) -> bool {
        hit(
            &self.profile.permission,
            &scan_window(contents, self.profile.scan_lines),
        )
    }

    /// The status the rules give now: the exit, else a dialog on screen, else a signal's, else
    /// the screen's; an idle member whose tools are not listed yet is still starting.
    fn effective(&self) -> (Classified, Option<&'static str>) {
        if self.dialog {
            let c = Classified {
                status: Status::Blocked,
                injectable: self.profile.permission_injectable,
            };
            return (c, Some(DIALOG));
        }
        if self.stuck {
            // Nothing on screen says what the member does, and nothing has changed for the
            // window: a hook's `working` does not outlive that.
            let c = Classified {
                status: Status::Blocked,
                injectable: false,
            };
            return (c, Some(UNRECOGNISED));
        }
        let c = match &self.pin {
            Some(p) => p.class,
            None => self.screen,
        };
        if self.waits_to_start() && c.status == Status::Idle {
            let c = Classified {
                status: Status::Starting,
                injectable: false,
            };
            return (c, None);
        }
        let reason = (c.status == Status::Blocked).then_some(match self.pin {
            Some(p) if p.class.injectable => QUESTION,
            Some(_) => PERMISSION,
            None if c.injectable => QUESTION,
            None => DIALOG,
        });
        (c, reason)
    }

    /// How long an unrecognised screen must be still (with no hook) before it is `blocked`: the
    /// profile's window, or for a member still starting the longest wait its start may take.
    fn stuck_window(&self) -> Option<Millis> {
        let w = self.profile.unrecognised_ms;
        if w == 0 {
            return None;
        }
        if self.screen.status == Status::Starting || self.waits_to_start() {
            return Some(
                w.max(self.profile.wait_for_tools_ms)
                    .max(self.profile.wait_for_session_ms),
            );
        }
        Some(w)
    }

    /// When a strange screen becomes `blocked` ([`Self::stuck`]), if it is one.
    fn stuck_at(&self) -> Option<Millis> {
        if !self.strange || self.stuck || self.dialog || self.status == Status::Exited {
            return None;
        }
        Some(self.last_change.max(self.last_signal) + self.stuck_window()?)
    }

    /// The member's `fleetd mcp` listed the fleet tools: it may take its first message.
    pub fn tools_listed(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if self.tools_until.take().is_some() {
            self.refresh(Cause::Screen, now, &mut fx);
        }
        fx
    }

    /// Whether the member still waits for its tools to be listed or its session to start.
    pub fn waits_to_start(&self) -> bool {
        self.tools_until.is_some() || self.session_until.is_some() || self.settling
    }

    /// Publish the effective status if it changed.
    fn refresh(&mut self, cause: Cause, now: Millis, fx: &mut Vec<Effect>) {
        if self.status == Status::Exited {
            return;
        }
        let (c, reason) = self.effective();
        if c.status != self.status || c.injectable != self.injectable || reason != self.reason {
            let from = self.status;
            if c.status != self.status {
                self.status_since = now;
            }
            self.status = c.status;
            self.injectable = c.injectable;
            self.reason = reason;
            fx.push(Effect::Status {
                from,
                to: c.status,
                injectable: c.injectable,
                cause,
                blocked: reason.map(|r| (r, excerpt(&self.last_contents, 8))),
            });
        }
    }

    fn started(&mut self, by: Evidence, now: Millis, fx: &mut Vec<Effect>) {
        if let Some(p) = &mut self.paste
            && p.entered
            && !p.started
        {
            p.started = true;
            fx.push(Effect::TurnStarted { msg: p.msg, by });
            // Work began: a signal's `idle` no longer holds.
            if self.pin.is_some_and(|p| p.class == IDLE) {
                self.pin = None;
            }
            // And the screen's does not either: between the Enter and the first busy frame an
            // agent's screen looks like its prompt (Claude Code shows the message submitted
            // and an empty input box for ~100 ms). The turn is over when a signal says so or
            // the screen has been still at the prompt for the stability window, not before:
            // a next message pasted in that gap is typed into a running turn.
            self.screen = WORKING;
            self.dirty = true;
            self.last_change = now;
            // Published now: the slot tells the injector the status after a start at once.
            self.refresh(Cause::Screen, now, fx);
        }
    }

    /// Whether the screen now shows a turn on the pasted message: the busy marker, a permission
    /// dialog (which only a turn opens), or the message submitted (its header in the
    /// transcript and the input box empty again: a turn too quick for any frame to show it
    /// busy). Only counts after the Enter ([`Self::started`]).
    fn evidence_on_screen(&mut self, now: Millis, fx: &mut Vec<Effect>) {
        let window = scan_window(&self.last_contents, self.profile.scan_lines);
        let busy = hit(&self.profile.busy, &window);
        let submitted = self.paste.as_ref().is_some_and(|p| {
            !p.marker.is_empty()
                && self
                    .profile
                    .prompt
                    .as_ref()
                    .is_some_and(|r| r.is_match(&window))
                && self
                    .last_contents
                    .contains(&p.marker.chars().take(40).collect::<String>())
        });
        if busy || self.dialog || submitted {
            self.started(Evidence::Screen, now, fx);
        }
    }

    /// Output from the terminal.
    pub fn output(&mut self, bytes: &[u8], now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        let contents = match &mut self.screen_model {
            Screen::Live(p) => {
                p.process(bytes);
                p.screen().contents()
            }
            // Held by the host, whose screen is asked for (once) and read in its place.
            Screen::Dormant { .. } => return self.wake(),
        };
        if contents == self.last_contents || self.status == Status::Exited {
            return fx;
        }
        let window = scan_window(&contents, self.profile.scan_lines);
        self.last_contents = contents;
        self.last_change = now;
        self.dirty = true;
        self.dialog = hit(&self.profile.permission, &window);
        self.strange = unrecognised(&self.profile, &window);
        self.stuck = false;
        let busy = hit(&self.profile.busy, &window);
        // The quick reading: work shows at once; idle waits for a still screen.
        if self.screen.status != Status::Starting {
            let at_prompt = self
                .profile
                .prompt
                .as_ref()
                .is_some_and(|p| p.is_match(&window))
                || hit(&self.profile.blocked, &window);
            if busy {
                self.screen = WORKING;
            } else if at_prompt {
                // Still at the prompt (a footer redrew): idle stays idle.
            } else if hit(&self.profile.input, &window) {
                // Text in the input box: nothing goes on top of it, from now.
                self.screen.injectable = false;
            } else {
                self.screen = WORKING;
            }
        }
        if self.profile.busy.is_none() || busy {
            self.started(Evidence::Screen, now, &mut fx);
        }
        self.evidence_on_screen(now, &mut fx);
        self.refresh(Cause::Screen, now, &mut fx);
        fx
    }

    fn track(&mut self, msg: MsgId, text: &str) {
        let marker = crate::sanitize::for_terminal(text.lines().next().unwrap_or(""))
            .0
            .trim()
            .to_string();
        self.paste = Some(Paste {
            msg,
            marker,
            enter_at: 0,
            entered: false,
            started: false,
            reported: false,
            retried: false,
        });
    }

    /// Paste `text` (made safe here by [`crate::sanitize`]) as message `msg`; the terminal
    /// host writes it and, after the profile's delay, its Enter, and says so ([`Self::pasted`]).
    pub fn paste(&mut self, msg: MsgId, text: &str) -> Vec<Effect> {
        let bytes = crate::sanitize::paste_bytes(text, self.bracketed_paste());
        self.track(msg, text);
        vec![Effect::Paste {
            msg,
            bytes,
            enter_delay_ms: self.profile.enter_delay_ms,
        }]
    }

    /// The terminal host wrote message `msg`'s paste and its Enter: from now on, a turn
    /// starting is evidence that it took it.
    pub fn pasted(&mut self, msg: MsgId, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if let Some(p) = &mut self.paste
            && p.msg == msg
            && !p.entered
        {
            p.entered = true;
            p.enter_at = now;
            // The agent may have answered before the host's word arrived.
            self.evidence_on_screen(now, &mut fx);
        }
        fx
    }

    /// Time passed: classifying a screen that has been still for the stability window, a
    /// signal that no longer holds, a paste not taken, the idle reap.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if self.status == Status::Exited {
            return fx;
        }
        if self.tools_until.is_some_and(|t| now >= t) {
            // They never came (an agent that lists tools lazily, or none): go ahead anyway.
            self.tools_until = None;
        }
        if self.session_until.is_some_and(|t| now >= t) {
            self.session_until = None;
        }
        let still = now.saturating_sub(self.last_change);
        if self.dirty && still >= self.profile.stable_ms {
            self.dirty = false;
            self.settling = false;
            self.screen = classify(&self.profile, &self.last_contents);
        }
        if let Some(pin) = self.pin
            && self.last_change > pin.at
            && !self.dirty
            && self.screen != pin.class
            && still >= self.profile.hook_yield_ms
        {
            self.pin = None;
        }
        if self.stuck_at().is_some_and(|at| now >= at) {
            self.stuck = true;
        }
        let retry = self.profile.enter_retry_ms;
        let text_in_box = self.screen
            == (Classified {
                status: Status::Idle,
                injectable: false,
            });
        if let Some(p) = &mut self.paste
            && retry > 0
            && p.entered
            && !p.started
            && !p.retried
            && now >= p.enter_at + retry
        {
            p.retried = true;
            if text_in_box {
                fx.push(Effect::Write(b"\r".to_vec()));
            }
        }
        let timeout = self.settings.accept_timeout_ms;
        if let Some(p) = &mut self.paste
            && p.entered
            && !p.started
            && !p.reported
            && now >= p.enter_at + timeout
        {
            p.reported = true;
            let (msg, waited_ms) = (p.msg, now - p.enter_at);
            fx.push(Effect::NotStarted {
                msg,
                waited_ms,
                screen: excerpt(&self.last_contents, 8),
            });
        }
        self.refresh(Cause::Screen, now, &mut fx);
        if let (Some(at), Screen::Live(p)) = (self.dormant_at(), &self.screen_model)
            && now >= at
        {
            let (r, c) = p.screen().size();
            self.screen_model = Screen::Dormant {
                rows: r.get(),
                cols: c.get(),
                bracketed_paste: p.screen().bracketed_paste(),
                waking: false,
            };
            fx.push(Effect::ScreenDropped);
        }
        let ttl = self.settings.idle_ttl_ms;
        if ttl > 0
            && !self.reaped
            && self.status == Status::Idle
            && now.saturating_sub(self.status_since) >= ttl
        {
            self.reaped = true;
            fx.push(Effect::Reap {
                idle_ms: now - self.status_since,
            });
        }
        fx
    }

    /// When `tick` next has something to decide, for the shell's timer.
    pub fn next_deadline(&self) -> Option<Millis> {
        if self.status == Status::Exited {
            return None;
        }
        let mut at: Vec<Millis> = vec![];
        if self.dirty {
            at.push(self.last_change + self.profile.stable_ms);
        }
        // A pin the screen agrees with has nothing to decide (a past instant here would hide
        // every later one from the shell's timer).
        if let Some(pin) = self.pin
            && self.last_change > pin.at
            && (self.dirty || self.screen != pin.class)
        {
            at.push(self.last_change + self.profile.hook_yield_ms.max(self.profile.stable_ms));
        }
        if let Some(p) = &self.paste
            && p.entered
            && !p.started
            && !p.reported
        {
            at.push(p.enter_at + self.settings.accept_timeout_ms);
            if self.profile.enter_retry_ms > 0 && !p.retried {
                at.push(p.enter_at + self.profile.enter_retry_ms);
            }
        }
        at.extend(self.tools_until);
        at.extend(self.session_until);
        at.extend(self.stuck_at());
        at.extend(self.dormant_at());
        if self.settings.idle_ttl_ms > 0 && !self.reaped && self.status == Status::Idle {
            at.push(self.status_since + self.settings.idle_ttl_ms);
        }
        at.into_iter().min()
    }

    /// A signal from the member's own process tree (an agent hook): it sets the status until
    /// the next one (see the module doc for when the screen takes over again).
    pub fn signal(&mut self, signal: Signal, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if self.status == Status::Exited {
            return fx;
        }
        let pin = |class| Some(Pin { class, at: now });
        // A hook is a sign of life: an unrecognised screen waits its window again from now.
        self.last_signal = now;
        self.stuck = false;
        let ours = |prompt: &Option<String>, paste: &Option<Paste>| match (prompt, paste) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(text), Some(p)) => crate::sanitize::for_terminal(text).0.contains(&p.marker),
        };
        match signal {
            Signal::TurnStarted { prompt } => {
                if ours(&prompt, &self.paste) {
                    self.started(Evidence::Hook, now, &mut fx);
                }
                self.pin = pin(WORKING);
            }
            Signal::Working | Signal::Closing => self.pin = pin(WORKING),
            Signal::Idle { turn } => {
                if turn.is_some() && ours(&turn, &self.paste) {
                    self.started(Evidence::Hook, now, &mut fx);
                }
                self.pin = pin(IDLE);
            }
            Signal::Permission => {
                self.pin = pin(Classified {
                    status: Status::Blocked,
                    injectable: false,
                })
            }
            Signal::Question => {
                self.pin = pin(Classified {
                    status: Status::Blocked,
                    injectable: true,
                })
            }
            Signal::SessionStart => {
                // The screen decides again. A starting member's wait ends only once the screen
                // has been still for the window after the hook: a CLI may still be loading
                // its session when the hook fires (Gemini CLI loads a resumed conversation
                // right after it, and drops the keys it reads meanwhile).
                if self.session_until.take().is_some() || self.status == Status::Starting {
                    self.settling = true;
                }
                self.pin = None;
                self.dirty = true;
                self.last_change = now;
            }
        }
        self.refresh(Cause::Signal, now, &mut fx);
        fx
    }

    /// The process is gone.
    pub fn exited(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if self.status != Status::Exited {
            let from = self.status;
            self.status = Status::Exited;
            self.injectable = false;
            self.status_since = now;
            self.reason = None;
            fx.push(Effect::Status {
                from,
                to: Status::Exited,
                injectable: false,
                cause: Cause::Exit,
                blocked: None,
            });
        }
        fx
    }
}

/// Why a slot has no link to its terminal host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkDown {
    /// The link it had broke (the host closed it, or it failed).
    Lost,
    /// A connection could not be made because nobody listens at the host's socket, or there is
    /// none: the host is gone.
    NoHost,
    /// A connection could not be made for another reason (no greeting in time, the host's
    /// backlog full, a greeting that did not read).
    Failed,
}

/// What a slot does about a missing link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relink {
    /// The program's exit is recorded: the member exited.
    Exited,
    /// Connect again after this long (the way a restarted slot does: the screen, the paste ids).
    Reconnect { after_ms: Millis },
    /// The host is gone, or did not answer in every attempt: the member is gone with it.
    Gone,
}

/// How many times a connection that failed (not refused) is tried again.
pub const RELINK_ATTEMPTS: u32 = 3;
/// The wait before the first of them; doubled for each next one.
pub const RELINK_BACKOFF_MS: Millis = 100;

/// The rule for a missing terminal link, `attempt` being how many connections failed so far.
/// A recorded exit always wins; a lost link is made again at once; a host nobody listens for is
/// gone; any other failure is tried again, with backoff, a bounded number of times.
pub fn relink(down: LinkDown, exit_recorded: bool, attempt: u32) -> Relink {
    if exit_recorded {
        return Relink::Exited;
    }
    match down {
        LinkDown::Lost => Relink::Reconnect { after_ms: 0 },
        LinkDown::NoHost => Relink::Gone,
        LinkDown::Failed if attempt < RELINK_ATTEMPTS => Relink::Reconnect {
            after_ms: RELINK_BACKOFF_MS << attempt,
        },
        LinkDown::Failed => Relink::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Profile};
    use crate::types::Written;
    use proptest::prelude::*;

    fn settings(ttl: Millis) -> SlotSettings {
        SlotSettings {
            rows: 10,
            cols: 60,
            idle_ttl_ms: ttl,
            tail_lines: 3,
            accept_timeout_ms: 2_000,
            dormant_ms: 0,
        }
    }

    fn core(ttl: Millis) -> SlotCore {
        let p = Config::default().compiled_profile("sim").unwrap();
        SlotCore::new(p, settings(ttl), 0)
    }

    /// A profile shaped like a real TUI's: a prompt line, a busy marker, a permission dialog
    /// with its own selection cursor, an Enter delay.
    fn tui() -> SlotCore {
        let p = Profile {
            command: vec!["tui".into()],
            prompt: Some("(?m)^> ?$".into()),
            input: Some("(?m)^> ".into()),
            busy: Some("esc to interrupt".into()),
            permission: Some("Do you want to proceed\\?".into()),
            stable_ms: 100,
            enter_delay_ms: 50,
            scan_lines: 6,
            hook_yield_ms: 1_000,
            ..Profile::default()
        };
        SlotCore::new(CompiledProfile::compile("tui", &p).unwrap(), settings(0), 0)
    }

    /// A lost link to a host still there is made again, never an exit; a recorded exit or a
    /// host nobody listens for ends the member; other failures are retried, bounded, backing off.
    #[test]
    fn a_lost_link_is_made_again_and_only_a_gone_host_ends_the_member() {
        assert_eq!(
            relink(LinkDown::Lost, false, 0),
            Relink::Reconnect { after_ms: 0 }
        );
        for down in [LinkDown::Lost, LinkDown::NoHost, LinkDown::Failed] {
            for attempt in [0, 1, RELINK_ATTEMPTS, u32::MAX] {
                assert_eq!(relink(down, true, attempt), Relink::Exited, "{down:?}");
            }
        }
        assert_eq!(relink(LinkDown::NoHost, false, 0), Relink::Gone);
        let waits: Vec<Relink> = (0..=RELINK_ATTEMPTS)
            .map(|a| relink(LinkDown::Failed, false, a))
            .collect();
        assert_eq!(
            waits,
            [
                Relink::Reconnect { after_ms: 100 },
                Relink::Reconnect { after_ms: 200 },
                Relink::Reconnect { after_ms: 400 },
                Relink::Gone
            ]
        );
        assert_eq!(relink(LinkDown::Failed, false, u32::MAX), Relink::Gone);
    }

    #[test]
    fn without_a_prompt_a_program_that_prints_nothing_becomes_idle_once_still() {
        let p = Config::default().compiled_profile("generic").unwrap();
        let stable = p.stable_ms;
        let mut c = SlotCore::new(p, settings(0), 0);
        assert!(statuses(&c.tick(stable - 1)).is_empty());
        assert_eq!(c.next_deadline(), Some(stable));
        assert_eq!(statuses(&c.tick(stable)), vec![Status::Idle]);
        // With a prompt to wait for, an empty screen is not a prompt: still starting, until
        // it has shown nothing for the profile's window (then nobody knows what it waits for).
        let mut t = tui();
        assert!(statuses(&t.tick(9_999)).is_empty());
        assert_eq!(t.status(), Status::Starting);
        assert_eq!(t.next_deadline(), Some(10_000));
        assert_eq!(statuses(&t.tick(10_000)), vec![Status::Blocked]);
        assert_eq!(t.blocked_reason(), Some(UNRECOGNISED));
    }

    /// The safe default: a screen none of the regexes reads, still for `unrecognised_ms` with
    /// no hook since, is blocked ("unrecognised screen"), not injectable, with its last lines;
    /// a hook's `working` does not outlive it; output or a hook starts the window again.
    #[test]
    fn an_unrecognised_still_screen_is_blocked_whatever_a_hook_said() {
        let mut c = idle_tui();
        c.signal(Signal::TurnStarted { prompt: None }, 1_000);
        assert_eq!(c.status(), Status::Working);
        let dialog = [
            "Auto mode can't check actions",
            " Enter to stay · Esc to cancel",
        ];
        c.output(&frame(&dialog), 1_100);
        c.tick(1_200);
        assert_eq!(
            c.status(),
            Status::Working,
            "the hook's working holds for now"
        );
        c.tick(2_100);
        assert_eq!(c.status(), Status::Working);
        assert_eq!(
            c.next_deadline(),
            Some(11_100),
            "the timer must wake for it"
        );
        assert!(statuses(&c.tick(11_099)).is_empty());
        let fx = c.tick(11_100);
        let blocked: Vec<_> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Status {
                    to,
                    injectable,
                    blocked,
                    ..
                } => Some((*to, *injectable, blocked.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            blocked,
            vec![(
                Status::Blocked,
                false,
                Some((UNRECOGNISED, dialog.map(str::trim_end).join("\n")))
            )]
        );
        // A hook later (a tool ran after all) starts the window again.
        c.signal(Signal::Working, 12_000);
        assert_eq!((c.status(), c.blocked_reason()), (Status::Working, None));
        assert_eq!(c.next_deadline(), Some(22_000));
        c.tick(21_999);
        assert_eq!(c.blocked_reason(), None);
        c.tick(22_000);
        assert_eq!(c.blocked_reason(), Some(UNRECOGNISED));
        // The prompt back: idle once still, as always.
        c.output(&frame(&["welcome", "> ", "? for shortcuts"]), 23_000);
        c.signal(Signal::Idle { turn: None }, 23_000);
        c.tick(23_100);
        assert_eq!((c.status(), c.injectable()), (Status::Idle, true));
        assert_eq!(c.blocked_reason(), None);
        // A still busy marker, a still prompt, a still dialog: never "unrecognised".
        for (screen, want) in [
            (&["working", "* esc to interrupt"][..], Status::Working),
            (&["welcome", "> "][..], Status::Idle),
            (&["Do you want to proceed?", "1. Yes"][..], Status::Blocked),
        ] {
            c.output(&frame(screen), 30_000);
            c.tick(100_000);
            assert_eq!(c.status(), want, "{screen:?}");
            assert_ne!(c.blocked_reason(), Some(UNRECOGNISED), "{screen:?}");
            assert_eq!(c.next_deadline(), None, "{screen:?}");
        }
    }

    /// A profile may turn the rule off (a shell whose command prints nothing for a while).
    #[test]
    fn the_shell_profile_has_no_unrecognised_rule() {
        let p = Config::default().compiled_profile("shell").unwrap();
        assert_eq!(p.unrecognised_ms, 0);
        let mut c = SlotCore::new(p, settings(0), 0);
        c.output(b"$ sleep 100\r\n", 0);
        c.tick(1_000_000);
        assert_eq!(c.status(), Status::Working);
    }

    fn statuses(fx: &[Effect]) -> Vec<Status> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Status { to, .. } => Some(*to),
                _ => None,
            })
            .collect()
    }

    fn started(fx: &[Effect]) -> Vec<(MsgId, Evidence)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::TurnStarted { msg, by } => Some((*msg, *by)),
                _ => None,
            })
            .collect()
    }

    fn writes(fx: &[Effect]) -> Vec<Vec<u8>> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Write(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    fn pastes(fx: &[Effect]) -> Vec<(Vec<u8>, Millis)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Paste {
                    bytes,
                    enter_delay_ms,
                    ..
                } => Some((bytes.clone(), *enter_delay_ms)),
                _ => None,
            })
            .collect()
    }

    /// A paste the terminal host confirms (paste and Enter written) at `at`.
    fn paste_written(c: &mut SlotCore, id: u64, text: &str, at: Millis) {
        c.paste(MsgId(id), text);
        c.pasted(MsgId(id), at);
    }

    /// Redraw the whole screen (as TUIs do): `lines` from the top.
    fn frame(lines: &[&str]) -> Vec<u8> {
        let mut b = b"\x1b[2J\x1b[H".to_vec();
        b.extend_from_slice(lines.join("\r\n").as_bytes());
        b
    }

    fn idle_tui() -> SlotCore {
        let mut c = tui();
        c.output(b"\x1b[?2004h", 0);
        c.output(&frame(&["welcome", "> ", "? for shortcuts"]), 0);
        c.tick(100);
        assert_eq!(c.status(), Status::Idle);
        c
    }

    /// An idle TUI whose screen is dropped after `dormant_ms` of stillness.
    fn dormant_tui(dormant_ms: Millis) -> SlotCore {
        let mut c = idle_tui();
        c.set_settings(SlotSettings {
            dormant_ms,
            ..settings(0)
        });
        c
    }

    fn has(fx: &[Effect], e: &Effect) -> bool {
        fx.contains(e)
    }

    #[test]
    fn a_still_screen_is_dropped_and_what_the_rules_read_of_it_is_kept() {
        let mut c = dormant_tui(1_000);
        let (text, tail, size) = (c.screen_text(), c.tail(), c.size());
        assert!(c.screen_formatted().is_some());
        // Last drawn at 0: due at 1,000, and the timer is told so.
        assert_eq!(c.next_deadline(), Some(1_000));
        assert!(!has(&c.tick(999), &Effect::ScreenDropped));
        assert!(!c.is_dormant());
        let fx = c.tick(1_000);
        assert_eq!(fx, vec![Effect::ScreenDropped]);
        assert!(c.is_dormant());
        assert_eq!(
            c.next_deadline(),
            None,
            "nothing more to do for an idle member"
        );
        assert_eq!((c.screen_text(), c.tail(), c.size()), (text, tail, size));
        assert_eq!((c.status(), c.injectable()), (Status::Idle, true));
        assert_eq!(c.screen_formatted(), None, "an attach must wake it first");
        // The paste mode is remembered: a message to the dormant member is still bracketed.
        assert!(c.bracketed_paste());
        let p = pastes(&c.paste(MsgId(1), "[fleet ticket t-1 from lead]\nhi"));
        assert!(p[0].0.starts_with(b"\x1b[200~"));
        // 0 keeps every screen.
        let mut k = dormant_tui(0);
        assert!(
            c.tick(1_000_000).is_empty() && !k.tick(1_000_000).contains(&Effect::ScreenDropped)
        );
        assert!(!k.is_dormant());
    }

    #[test]
    fn output_to_a_dormant_screen_asks_for_the_hosts_screen_once_and_reads_that() {
        let mut c = dormant_tui(1_000);
        c.tick(1_000);
        assert!(c.is_dormant());
        // The host's own model of the same terminal, fed everything.
        let mut host = vt100::Parser::new(nz(10, 10), nz(60, 60), 0);
        host.process(b"\x1b[?2004h");
        host.process(&frame(&["welcome", "> ", "? for shortcuts"]));
        let work = frame(&["> do it", "", "* esc to interrupt"]);
        host.process(&work);
        // The first output asks for the screen; the bytes are not applied (the host's screen
        // will hold them), and later output before the answer asks nothing more.
        assert_eq!(c.output(&work, 1_500), vec![Effect::WantScreen]);
        assert!(c.output(b"more", 1_510).is_empty());
        assert!(c.wake().is_empty(), "already asked");
        assert_eq!(c.status(), Status::Idle, "nothing read yet");
        // Asked back for an attach, an unchanged screen stays for the window from then on.
        let mut a = dormant_tui(1_000);
        a.tick(1_000);
        let same = a.last_contents.clone();
        assert_eq!(a.wake(), vec![Effect::WantScreen]);
        let mut h = vt100::Parser::new(nz(10, 10), nz(60, 60), 0);
        h.process(b"\x1b[?2004h");
        h.process(&frame(&["welcome", "> ", "? for shortcuts"]));
        assert_eq!(h.screen().contents(), same);
        assert!(
            a.screen_returned(h.screen().state_formatted().as_bytes(), 5_000)
                .is_empty()
        );
        assert_eq!(a.next_deadline(), Some(6_000));
        assert!(a.tick(5_999).is_empty());
        assert_eq!(a.tick(6_000), vec![Effect::ScreenDropped]);
        let fx = c.screen_returned(host.screen().state_formatted().as_bytes(), 1_520);
        assert!(!c.is_dormant());
        assert_eq!(statuses(&fx), vec![Status::Working]);
        assert_eq!(c.screen_text(), host.screen().contents());
        assert!(c.bracketed_paste());
        // Live again: output is read as it comes, and the screen drops again once still.
        let fx = c.output(&frame(&["> do it", "done", "> "]), 1_600);
        assert!(fx.iter().all(|e| e != &Effect::WantScreen));
        c.tick(1_700);
        assert_eq!(c.status(), Status::Idle);
        assert_eq!(c.next_deadline(), Some(2_600));
        assert_eq!(c.tick(2_600), vec![Effect::ScreenDropped]);
    }

    #[test]
    fn a_paste_in_flight_keeps_the_screen_until_its_turn_is_seen_or_reported() {
        let mut c = dormant_tui(1_000);
        c.paste(MsgId(4), "[fleet ticket t-4 from lead]\nx");
        // Not yet written by the host, then written but no turn seen: the screen is needed.
        assert!(!has(&c.tick(5_000), &Effect::ScreenDropped));
        c.pasted(MsgId(4), 5_000);
        assert!(!has(&c.tick(6_000), &Effect::ScreenDropped));
        // The accept timeout (2 s) reports it; from then the still screen may go.
        let fx = c.tick(7_000);
        assert!(fx.iter().any(|e| matches!(e, Effect::NotStarted { .. })));
        assert!(has(&fx, &Effect::ScreenDropped) || has(&c.tick(7_001), &Effect::ScreenDropped));
        assert!(c.is_dormant());
        // A turn seen on the screen ends the hold as well.
        let mut c = dormant_tui(1_000);
        c.paste(MsgId(5), "[fleet ticket t-5 from lead]\ny");
        c.pasted(MsgId(5), 200);
        c.output(&frame(&["> y", "", "* esc to interrupt"]), 300);
        c.output(&frame(&["> y", "ok", "> "]), 400);
        c.tick(500);
        assert_eq!(c.status(), Status::Idle);
        assert_eq!(c.tick(1_400), vec![Effect::ScreenDropped]);
    }

    #[test]
    fn a_dormant_screen_takes_a_resize_and_comes_back_at_that_size() {
        let mut c = dormant_tui(1_000);
        c.tick(1_000);
        c.resize(20, 80);
        assert_eq!(c.size(), (20, 80));
        let mut host = vt100::Parser::new(nz(20, 20), nz(80, 80), 0);
        host.process(&frame(&["welcome", "> "]));
        assert_eq!(c.wake(), vec![Effect::WantScreen]);
        c.screen_returned(host.screen().state_formatted().as_bytes(), 1_100);
        assert_eq!(c.size(), (20, 80));
        assert_eq!(c.screen_text(), host.screen().contents());
        // A live screen needs no waking.
        assert!(c.wake().is_empty());
    }

    #[test]
    fn classification_table() {
        let p = Config::default().compiled_profile("sim").unwrap();
        let cases = [
            ("banner\nsim> ", Status::Idle, true),
            ("sim> x\n* working on x", Status::Working, false),
            ("Allow rm -rf? [y/n]", Status::Blocked, false),
            ("some output", Status::Working, false),
            ("", Status::Working, false),
            // A dialog that has scrolled up does not count: only the last line does (scan_lines = 1).
            (
                "Allow x? [y/n] yes\n* working\ndone\nsim> ",
                Status::Idle,
                true,
            ),
            ("sim> \nsim> go\n* working on go", Status::Working, false),
        ];
        for (screen, status, inj) in cases {
            assert_eq!(
                classify(&p, screen),
                Classified {
                    status,
                    injectable: inj
                },
                "{screen:?}"
            );
        }
        // Without a prompt regex a still screen is idle.
        let g = CompiledProfile::compile("generic", &Profile::default()).unwrap();
        assert_eq!(classify(&g, "anything at all"), IDLE);
    }

    #[test]
    fn starting_then_idle_after_stability_window() {
        let mut c = core(0);
        assert!(c.output(b"sim agent\r\nsim> ", 0).is_empty());
        assert_eq!(c.status(), Status::Starting);
        assert!(c.tick(149).is_empty());
        assert_eq!(statuses(&c.tick(150)), vec![Status::Idle]);
        // Work shows at once.
        assert_eq!(
            statuses(&c.output(b"task\r\n* working on task", 200)),
            vec![Status::Working]
        );
        // Still working while the busy marker shows, even when stable.
        assert!(c.tick(1_000).is_empty());
        // The agent replaces its busy line and shows the prompt again.
        assert!(statuses(&c.output(b"\r\x1b[2Kdone\r\nsim> ", 1_100)).is_empty());
        assert!(statuses(&c.tick(1_249)).is_empty());
        assert_eq!(statuses(&c.tick(1_250)), vec![Status::Idle]);
    }

    #[test]
    fn a_redrawn_footer_does_not_flip_idle_but_work_shows_at_once() {
        let mut c = idle_tui();
        for (i, footer) in ["● high · /effort", "? for shortcuts", "● high · /effort"]
            .iter()
            .enumerate()
        {
            let at = 200 + 100 * i as u64;
            assert!(c.output(&frame(&["welcome", "> ", footer]), at).is_empty());
            assert!(c.tick(at + 100).is_empty());
            assert_eq!(c.status(), Status::Idle);
        }
        // Text typed into the input box is not work either, but nothing goes on top of it.
        let fx = c.output(&frame(&["welcome", "> hello", "? for shortcuts"]), 600);
        assert_eq!(
            fx,
            vec![Effect::Status {
                from: Status::Idle,
                to: Status::Idle,
                injectable: false,
                cause: Cause::Screen,
                blocked: None,
            }]
        );
        c.tick(700);
        assert_eq!((c.status(), c.injectable()), (Status::Idle, false));
        c.output(&frame(&["welcome", "> ", "? for shortcuts"]), 750);
        c.tick(850);
        assert_eq!((c.status(), c.injectable()), (Status::Idle, true));
        // The busy marker is.
        let fx = c.output(&frame(&["welcome", "> ", "* esc to interrupt"]), 700);
        assert_eq!(statuses(&fx), vec![Status::Working]);
        // So is a screen the profile cannot read.
        let mut g = idle_tui();
        assert_eq!(
            statuses(&g.output(&frame(&["a full-screen pager"]), 300)),
            vec![Status::Working]
        );
    }

    #[test]
    fn a_paste_goes_to_the_host_whole_and_is_accepted_on_the_busy_marker_after_its_enter() {
        let mut c = idle_tui();
        let fx = c.paste(MsgId(7), "[fleet ticket t-7 from lead]\nhello");
        let p = pastes(&fx);
        assert_eq!(p.len(), 1);
        assert!(p[0].0.starts_with(b"\x1b[200~") && p[0].0.ends_with(b"\x1b[201~"));
        assert_eq!(p[0].1, 50, "the host waits the profile's Enter delay");
        assert_eq!(c.paste_unconfirmed(), Some(MsgId(7)));
        // The echo in the input box is no evidence.
        let fx = c.output(
            &frame(&["welcome", "> [Pasted text +2 lines]", "? for shortcuts"]),
            1_010,
        );
        assert!(started(&fx).is_empty());
        // The host says paste and Enter are written; the box still shows the paste.
        assert!(started(&c.pasted(MsgId(7), 1_050)).is_empty());
        assert_eq!(c.paste_unconfirmed(), None);
        let fx = c.output(&frame(&["> hello", "", "* esc to interrupt"]), 1_100);
        assert_eq!(started(&fx), vec![(MsgId(7), Evidence::Screen)]);
        // Once only.
        assert!(
            started(&c.output(&frame(&["> hello", "x", "* esc to interrupt"]), 1_200)).is_empty()
        );
    }

    #[test]
    fn after_a_restart_the_hosts_record_says_whether_a_delivery_was_written() {
        let mut c = idle_tui();
        assert!(matches!(
            c.resolve(MsgId(3), "[fleet ticket t-3 from lead]\nx", 10).0,
            Written::Unknown(_)
        ));
        c.host_pastes(&[1, 3]);
        assert_eq!(c.resolve(MsgId(2), "x", 10).0, Written::No);
        assert_eq!(
            c.resolve(MsgId(3), "[fleet ticket t-3 from lead]\nx", 10),
            (Written::Yes, vec![])
        );
        // A written one is watched for its turn from now.
        let fx = c.signal(
            Signal::TurnStarted {
                prompt: Some("[fleet ticket t-3 from lead]\nx".into()),
            },
            20,
        );
        assert_eq!(started(&fx), vec![(MsgId(3), Evidence::Hook)]);
        // Older than all the host remembers: cannot be told.
        let ids: Vec<u64> = (100..100 + crate::term::PASTES_REMEMBERED as u64).collect();
        c.host_pastes(&ids);
        assert!(matches!(
            c.resolve(MsgId(50), "x", 30).0,
            Written::Unknown(_)
        ));
        assert_eq!(c.resolve(MsgId(5_000), "x", 30).0, Written::No);
        // A turn already on screen when the daemon came back is the written paste's turn.
        let mut c = idle_tui();
        c.output(
            &frame(&["Bash: rm x", "Do you want to proceed?", "❯ 1. Yes"]),
            40,
        );
        c.host_pastes(&[9]);
        let (w, fx) = c.resolve(MsgId(9), "[fleet ticket t-9 from lead]\nx", 50);
        assert_eq!(w, Written::Yes);
        assert_eq!(started(&fx), vec![(MsgId(9), Evidence::Screen)]);
    }

    #[test]
    fn a_turn_too_quick_to_show_busy_counts_once_its_message_is_submitted() {
        let mut c = idle_tui();
        c.paste(MsgId(8), "[fleet ticket t-8 from lead]\nquick");
        // In the box, before the Enter: nothing.
        let fx = c.output(
            &frame(&["welcome", "> [fleet ticket t-8 from lead] quick"]),
            10,
        );
        assert!(started(&fx).is_empty());
        c.pasted(MsgId(8), 20);
        // The whole turn within one read: the message in the transcript, the box empty again.
        let fx = c.output(
            &frame(&["> [fleet ticket t-8 from lead] quick", "done", "> "]),
            30,
        );
        assert_eq!(started(&fx), vec![(MsgId(8), Evidence::Screen)]);
        // The same turn seen before the host's word that the Enter was written: counted then.
        let mut c = idle_tui();
        c.paste(MsgId(9), "[fleet ticket t-9 from lead]\nquick");
        let fx = c.output(
            &frame(&["> [fleet ticket t-9 from lead] quick", "done", "> "]),
            30,
        );
        assert!(started(&fx).is_empty());
        assert_eq!(
            started(&c.pasted(MsgId(9), 40)),
            vec![(MsgId(9), Evidence::Screen)]
        );
    }

    /// Claude Code shows a submitted message and an empty input box for ~100 ms before its
    /// first busy frame: that screen counts as the turn's start, and must not also count as its
    /// end (the next message would be typed into the running turn). The status says working
    /// from the start until the screen has been still at the prompt for the stability window.
    #[test]
    fn the_screen_that_shows_a_start_is_not_also_the_end_of_the_turn() {
        let mut c = idle_tui();
        c.paste(MsgId(8), "[fleet ticket t-8 from lead]\nquick");
        c.pasted(MsgId(8), 20);
        let fx = c.output(&frame(&["> [fleet ticket t-8 from lead] quick", "> "]), 30);
        assert_eq!(started(&fx), vec![(MsgId(8), Evidence::Screen)]);
        assert_eq!(c.status(), Status::Working, "{fx:?}");
        assert!(!(c.status() == Status::Idle && c.injectable()));
        // Still at the prompt for less than the window: still working.
        assert!(statuses(&c.tick(30 + 99)).is_empty());
        assert_eq!(c.status(), Status::Working);
        // A whole window still: the turn was that quick after all.
        c.tick(30 + 100);
        assert_eq!((c.status(), c.injectable()), (Status::Idle, true));
    }

    #[test]
    fn a_paste_left_in_the_input_box_is_reported_with_the_screen() {
        let mut c = idle_tui();
        paste_written(&mut c, 1, "[fleet ticket t-1 from lead]\nplease", 50);
        c.output(
            &frame(&[
                "welcome",
                "> [fleet ticket t-1 from lead] please",
                "? for shortcuts",
            ]),
            60,
        );
        assert_eq!(
            (c.status(), c.injectable()),
            (Status::Idle, false),
            "the text sits in the input box"
        );
        assert_eq!(c.next_deadline(), Some(160), "classify first");
        c.tick(160);
        assert_eq!(c.next_deadline(), Some(2_050));
        let fx = c.tick(2_050);
        let Some(Effect::NotStarted {
            msg,
            waited_ms,
            screen,
        }) = fx.first()
        else {
            panic!("{fx:?}")
        };
        assert_eq!((*msg, *waited_ms), (MsgId(1), 2_000));
        assert!(
            screen.contains("> [fleet ticket t-1 from lead] please"),
            "{screen}"
        );
        assert!(c.tick(5_000).is_empty(), "reported once");
        // It still counts if the turn starts later (someone pressed Enter).
        let fx = c.signal(
            Signal::TurnStarted {
                prompt: Some("[fleet ticket t-1 from lead]\nplease".into()),
            },
            6_000,
        );
        assert_eq!(started(&fx), vec![(MsgId(1), Evidence::Hook)]);
    }

    #[test]
    fn an_enter_the_tui_dropped_is_pressed_once_more() {
        let p = Profile {
            command: vec!["tui".into()],
            prompt: Some("(?m)^> ?$".into()),
            input: Some("(?m)^> ".into()),
            busy: Some("esc to interrupt".into()),
            stable_ms: 100,
            enter_delay_ms: 50,
            enter_retry_ms: 500,
            ..Profile::default()
        };
        let mut c = SlotCore::new(CompiledProfile::compile("tui", &p).unwrap(), settings(0), 0);
        c.output(b"\x1b[?2004h", 0);
        c.output(&frame(&["> "]), 0);
        c.tick(100);
        c.paste(MsgId(1), "[fleet ticket t-1 from lead]\nx");
        c.pasted(MsgId(1), 1_050);
        c.output(&frame(&["> [Pasted Text: 2 lines]"]), 1_060);
        assert_eq!(c.next_deadline(), Some(1_160), "classify first");
        c.tick(1_160);
        assert_eq!(c.next_deadline(), Some(1_550));
        assert_eq!(writes(&c.tick(1_550)), vec![b"\r".to_vec()], "once more");
        assert!(writes(&c.tick(2_500)).is_empty(), "only once");
        // It went: the turn starts.
        let fx = c.output(&frame(&["> ", "* esc to interrupt"]), 2_600);
        assert_eq!(started(&fx), vec![(MsgId(1), Evidence::Screen)]);
        // A box that emptied needs no second Enter.
        let mut c = idle_tui();
        paste_written(&mut c, 2, "x", 50);
        assert!(writes(&c.tick(5_000)).is_empty());
    }

    #[test]
    fn a_member_waits_for_its_tools_and_its_session_before_it_reads_idle() {
        let p = Profile {
            command: vec!["tui".into()],
            prompt: Some("(?m)^> ?$".into()),
            stable_ms: 100,
            wait_for_tools_ms: 10_000,
            wait_for_session_ms: 10_000,
            ..Profile::default()
        };
        let mut c = SlotCore::new(CompiledProfile::compile("tui", &p).unwrap(), settings(0), 0);
        c.output(&frame(&["> "]), 0);
        c.tick(100);
        assert_eq!(
            c.status(),
            Status::Starting,
            "the prompt shows, but nothing is loaded"
        );
        c.tools_listed(200);
        assert_eq!(c.status(), Status::Starting);
        assert!(c.waits_to_start());
        // The session started: idle once the screen has been still for the window after it.
        assert!(statuses(&c.signal(Signal::SessionStart, 300)).is_empty());
        assert_eq!(c.next_deadline(), Some(400));
        assert!(statuses(&c.tick(399)).is_empty());
        assert_eq!(statuses(&c.tick(400)), vec![Status::Idle]);
        // A CLI that loads its session after the hook (Gemini CLI's resume: the conversation
        // drawn, the input box gone, keys dropped) and redraws its prompt when done.
        let mut c = SlotCore::new(CompiledProfile::compile("tui", &p).unwrap(), settings(0), 0);
        c.output(&frame(&["> "]), 0);
        c.tools_listed(200);
        c.signal(Signal::SessionStart, 300);
        c.output(&frame(&["> earlier turn", "* resuming"]), 350);
        assert!(statuses(&c.tick(400)).is_empty());
        assert_eq!(c.status(), Status::Starting);
        c.output(&frame(&["> earlier turn", "> "]), 600);
        assert!(statuses(&c.tick(699)).is_empty());
        assert_eq!(statuses(&c.tick(700)), vec![Status::Idle]);
        // Neither came: the wait ends at its bound.
        let mut c = SlotCore::new(CompiledProfile::compile("tui", &p).unwrap(), settings(0), 0);
        c.output(&frame(&["> "]), 0);
        c.tick(100);
        assert_eq!(c.next_deadline(), Some(10_000));
        assert_eq!(statuses(&c.tick(10_000)), vec![Status::Idle]);
    }

    #[test]
    fn a_turn_started_hook_counts_only_for_the_pasted_message() {
        let mut c = idle_tui();
        paste_written(&mut c, 3, "[fleet ticket t-3 from lead]\nx", 50);
        // The operator's own prompt: work, but not this message's turn.
        let fx = c.signal(
            Signal::TurnStarted {
                prompt: Some("what time is it".into()),
            },
            60,
        );
        assert!(started(&fx).is_empty());
        assert_eq!(statuses(&fx), vec![Status::Working]);
        let fx = c.signal(
            Signal::TurnStarted {
                prompt: Some("[fleet ticket t-3 from lead]\nx".into()),
            },
            70,
        );
        assert_eq!(started(&fx), vec![(MsgId(3), Evidence::Hook)]);
        // A hook without the prompt text counts for the paste in flight, after its Enter only.
        let mut c = idle_tui();
        c.paste(MsgId(4), "[fleet ticket t-4 from lead]\nx");
        assert!(started(&c.signal(Signal::TurnStarted { prompt: None }, 10)).is_empty());
        let mut c = idle_tui();
        paste_written(&mut c, 5, "[fleet ticket t-5 from lead]\nx", 50);
        assert_eq!(
            started(&c.signal(Signal::TurnStarted { prompt: None }, 60)),
            vec![(MsgId(5), Evidence::Hook)]
        );
        // Codex's notify says so at the turn's end.
        let mut c = idle_tui();
        paste_written(&mut c, 6, "[fleet ticket t-6 from lead]\nx", 50);
        let fx = c.signal(
            Signal::Idle {
                turn: Some("[fleet ticket t-6 from lead]\nx".into()),
            },
            60,
        );
        assert_eq!(started(&fx), vec![(MsgId(6), Evidence::Hook)]);
    }

    #[test]
    fn hooks_first_the_dialog_on_screen_always_wins() {
        let mut c = idle_tui();
        assert_eq!(
            statuses(&c.signal(Signal::Permission, 200)),
            vec![Status::Blocked]
        );
        assert!(!c.injectable());
        // The dialog renders: blocked at once, whatever a hook says next.
        let dialog = frame(&[
            "Bash: rm x",
            "Do you want to proceed?",
            "❯ 1. Yes",
            "  2. No",
        ]);
        c.output(&dialog, 210);
        for s in [
            Signal::Idle { turn: None },
            Signal::Question,
            Signal::SessionStart,
        ] {
            c.signal(s, 300);
            assert_eq!((c.status(), c.injectable()), (Status::Blocked, false));
        }
        c.tick(5_000);
        assert_eq!((c.status(), c.injectable()), (Status::Blocked, false));
        // Answered: the tool runs (a hook says so), then the turn ends.
        c.output(&frame(&["welcome", "> ", "* esc to interrupt"]), 5_100);
        c.signal(Signal::Working, 5_110);
        assert_eq!(c.status(), Status::Working);
        assert_eq!(
            statuses(&c.signal(Signal::Idle { turn: None }, 5_200)),
            vec![Status::Idle]
        );
        // A question may be answered by a message.
        c.signal(Signal::Question, 5_300);
        assert_eq!((c.status(), c.injectable()), (Status::Blocked, true));
    }

    #[test]
    fn a_hook_that_never_came_yields_to_a_screen_that_changed_and_settled() {
        let mut c = idle_tui();
        c.signal(Signal::Permission, 100);
        // The screen does not change: the signal holds.
        assert!(c.tick(10_000).is_empty());
        assert_eq!(c.status(), Status::Blocked);
        // The dialog was answered "no" (no hook fires for that) and the prompt is back.
        c.output(&frame(&["welcome", "> ", "interrupted"]), 10_100);
        c.tick(10_200);
        assert_eq!(c.status(), Status::Blocked, "not before hook_yield_ms");
        assert_eq!(c.next_deadline(), Some(11_100));
        assert_eq!(statuses(&c.tick(11_100)), vec![Status::Idle]);
        assert!(!c.is_pinned());
    }

    #[test]
    fn signal_idle_holds_while_a_footer_changes() {
        let mut c = idle_tui();
        c.output(&frame(&["x", "> ", "* esc to interrupt"]), 200);
        c.signal(Signal::TurnStarted { prompt: None }, 210);
        // The turn ends (Stop) a moment before the busy marker is redrawn away.
        assert_eq!(
            statuses(&c.signal(Signal::Idle { turn: None }, 300)),
            vec![Status::Idle]
        );
        for i in 0..5u64 {
            c.output(
                &frame(&["x", "> ", if i % 2 == 0 { "a" } else { "b" }]),
                400 + i * 50,
            );
            c.tick(400 + i * 50 + 1);
            assert_eq!(c.status(), Status::Idle);
        }
    }

    #[test]
    fn without_a_busy_marker_any_change_after_the_enter_is_evidence() {
        let mut c = SlotCore::new(
            CompiledProfile::compile("generic", &Profile::default()).unwrap(),
            settings(0),
            0,
        );
        c.output(b"$ ", 0);
        c.tick(1_500);
        assert_eq!(c.status(), Status::Idle);
        let fx = c.paste(MsgId(1), "echo hi");
        assert_eq!(
            pastes(&fx)[0].1,
            0,
            "no delay: the Enter right after the paste"
        );
        c.pasted(MsgId(1), 2_000);
        let fx = c.output(b"echo hi\r\nhi\r\n$ ", 2_010);
        assert_eq!(started(&fx), vec![(MsgId(1), Evidence::Screen)]);
    }

    #[test]
    fn idle_ttl_reaps_once() {
        let mut c = core(1_000);
        c.output(b"sim> ", 0);
        c.tick(150);
        assert_eq!(c.next_deadline(), Some(1_150));
        assert!(
            c.tick(1_149)
                .iter()
                .all(|e| !matches!(e, Effect::Reap { .. }))
        );
        assert_eq!(c.tick(1_150), vec![Effect::Reap { idle_ms: 1_000 }]);
        assert!(c.tick(5_000).is_empty());
    }

    #[test]
    fn exit_is_final_and_tail_is_bounded() {
        let mut c = core(0);
        c.output(b"a\r\nb\r\n\r\nc\r\nd\r\nsim> ", 0);
        assert_eq!(c.tail(), "c\nd\nsim>");
        assert_eq!(statuses(&c.exited(10)), vec![Status::Exited]);
        assert!(c.output(b"more", 20).is_empty());
        assert!(c.signal(Signal::Idle { turn: None }, 30).is_empty());
        assert_eq!(c.status(), Status::Exited);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn restore_primes_screen_from_snapshot() {
        let mut a = core(0);
        a.output(b"hello\r\nsim> ", 0);
        let snap = a.screen_formatted().unwrap();
        let mut b = core(0);
        b.restore(&snap, Status::Idle, 5);
        assert_eq!(b.screen_text(), a.screen_text());
        assert_eq!(b.status(), Status::Idle);
    }

    #[derive(Clone, Debug)]
    enum Ev {
        Screen(u8),
        Signal(u8),
        Paste,
        /// The host confirms the last paste written.
        Written,
        Tick(u16),
    }

    const SCREENS: [&[&str]; 5] = [
        &["welcome", "> ", "? for shortcuts"],
        &["welcome", "> typed", "● high"],
        &["working", "", "* esc to interrupt"],
        &[
            "Bash: rm x",
            "Do you want to proceed?",
            "❯ 1. Yes",
            "  2. No",
        ],
        &["output", "more output"],
    ];

    fn signal_of(i: u8) -> Signal {
        match i % 7 {
            0 => Signal::TurnStarted { prompt: None },
            1 => Signal::Working,
            2 => Signal::Idle { turn: None },
            3 => Signal::Permission,
            4 => Signal::Question,
            5 => Signal::SessionStart,
            _ => Signal::Closing,
        }
    }

    proptest! {
        /// Whatever the hooks say, in any order: while a permission dialog is on screen the
        /// member is blocked and not injectable; a paste is accepted at most once, and only
        /// after its Enter was written.
        #[test]
        fn no_signal_makes_a_dialog_injectable(evs in proptest::collection::vec(prop_oneof![
            (0u8..5).prop_map(Ev::Screen),
            any::<u8>().prop_map(Ev::Signal),
            Just(Ev::Paste),
            Just(Ev::Written),
            (0u16..3000).prop_map(Ev::Tick),
        ], 1..80)) {
            let mut c = idle_tui();
            let mut now = 1_000u64;
            let mut next = 1u64;
            let mut entered: std::collections::BTreeSet<u64> = Default::default();
            let mut accepted: std::collections::BTreeSet<u64> = Default::default();
            let mut last_paste = 0u64;
            let mut dialog = false;
            for e in evs {
                now += 1;
                let fx = match e {
                    Ev::Screen(i) => {
                        dialog = i == 3;
                        c.output(&frame(SCREENS[i as usize]), now)
                    }
                    Ev::Signal(i) => c.signal(signal_of(i), now),
                    Ev::Paste => {
                        last_paste = next;
                        next += 1;
                        c.paste(MsgId(last_paste), &format!("[fleet ticket t-{last_paste} from lead]\nx"))
                    }
                    Ev::Written => {
                        entered.insert(last_paste);
                        c.pasted(MsgId(last_paste), now)
                    }
                    Ev::Tick(dt) => { now += dt as u64; c.tick(now) }
                };
                for f in &fx {
                    if let Effect::TurnStarted { msg, .. } = f {
                        prop_assert!(entered.contains(&msg.0), "accepted before its Enter");
                        prop_assert!(accepted.insert(msg.0), "accepted twice");
                    }
                }
                if dialog {
                    prop_assert_eq!((c.status(), c.injectable()), (Status::Blocked, false));
                }
                // Only the screen nobody reads is ever "unrecognised", and never injectable.
                if c.blocked_reason() == Some(UNRECOGNISED) {
                    prop_assert_eq!((c.status(), c.injectable()), (Status::Blocked, false));
                    let text = c.screen_text();
                    prop_assert_eq!(text.trim_end(), "output\nmore output");
                }
            }
        }
    }
}
