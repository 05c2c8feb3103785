//! The member slot core: a member's screen model and its status.
//!
//! Owns the vt100 screen (a pure in-memory model fed the terminal's output bytes), the status
//! rules (`starting | working | idle | blocked | exited` from the profile's regexes and a
//! screen-stability window, overridden by explicit signals from agent hooks), the idle-TTL reap
//! decision, and the transcript tail. Pure: bytes and time in, effects out. Must never read or
//! write a terminal, a file or a socket.

use std::num::NonZeroU16;

use crate::config::CompiledProfile;
use crate::types::{Millis, Status};

/// How a stable screen reads under a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    pub status: Status,
    /// For `blocked`: whether a message may answer what is on screen.
    pub injectable: bool,
}

/// The part of the screen the regexes look at: its last `n` non-blank lines.
pub fn scan_window(screen: &str, n: usize) -> String {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Classify a stable screen: busy beats permission beats question beats prompt; anything else
/// is work in progress. Only the last `scan_lines` non-blank lines count.
pub fn classify(profile: &CompiledProfile, screen: &str) -> Classified {
    let window = scan_window(screen, profile.scan_lines);
    let screen = window.as_str();
    let hit = |re: &Option<regex::Regex>| re.as_ref().is_some_and(|r| r.is_match(screen));
    if hit(&profile.busy) {
        Classified {
            status: Status::Working,
            injectable: false,
        }
    } else if hit(&profile.permission) {
        Classified {
            status: Status::Blocked,
            injectable: profile.permission_injectable,
        }
    } else if hit(&profile.blocked) {
        Classified {
            status: Status::Blocked,
            injectable: true,
        }
    } else if profile.prompt.is_match(screen) {
        Classified {
            status: Status::Idle,
            injectable: true,
        }
    } else {
        Classified {
            status: Status::Working,
            injectable: false,
        }
    }
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The status changed; tell the registry, the injector and the event stream.
    Status {
        from: Status,
        to: Status,
        injectable: bool,
        cause: Cause,
    },
    /// Idle for the whole TTL: stop the member and say why.
    Reap { idle_ms: Millis },
}

/// Why a status changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The screen changed or was classified.
    Screen,
    /// An explicit `fleetd signal` from the member's process tree.
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
}

/// One member's screen and status.
pub struct SlotCore {
    parser: vt100::Parser,
    profile: CompiledProfile,
    settings: SlotSettings,
    status: Status,
    injectable: bool,
    status_since: Millis,
    last_change: Millis,
    last_contents: String,
    /// The screen changed since it was last classified.
    dirty: bool,
    /// A status set by an explicit signal; screen rules are suspended until the next message
    /// goes in (or the next signal).
    pinned: bool,
    reaped: bool,
}

fn nz(v: u16, dflt: u16) -> NonZeroU16 {
    NonZeroU16::new(v)
        .or(NonZeroU16::new(dflt))
        .unwrap_or(NonZeroU16::MIN)
}

impl SlotCore {
    pub fn new(profile: CompiledProfile, settings: SlotSettings, now: Millis) -> Self {
        let parser = vt100::Parser::new(nz(settings.rows, 40), nz(settings.cols, 120), 0);
        SlotCore {
            parser,
            profile,
            settings,
            status: Status::Starting,
            injectable: false,
            status_since: now,
            last_change: now,
            last_contents: String::new(),
            dirty: false,
            pinned: false,
            reaped: false,
        }
    }

    /// Restore after a restart: the terminal host's snapshot primes the screen, and the status
    /// the store remembered is kept until the screen is classified again.
    pub fn restore(&mut self, snapshot: &[u8], status: Status, since: Millis) {
        self.parser.process(snapshot);
        self.last_contents = self.parser.screen().contents();
        if status != Status::Exited {
            self.status = status;
            self.status_since = since;
            self.injectable = status == Status::Idle;
        }
        // Classify the restored screen once it has been still for the window.
        self.dirty = true;
    }

    /// The terminal was resized.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.parser
            .screen_mut()
            .set_size(nz(rows, 40), nz(cols, 120));
    }

    pub fn size(&self) -> (u16, u16) {
        let (r, c) = self.parser.screen().size();
        (r.get(), c.get())
    }

    pub fn set_profile(&mut self, profile: CompiledProfile) {
        self.profile = profile;
    }

    pub fn set_settings(&mut self, settings: SlotSettings) {
        self.settings.idle_ttl_ms = settings.idle_ttl_ms;
        self.settings.tail_lines = settings.tail_lines;
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

    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// The screen as plain text.
    pub fn screen_text(&self) -> String {
        self.parser.screen().contents()
    }

    /// Escape sequences that redraw the current screen (for an attaching terminal).
    pub fn screen_formatted(&self) -> Vec<u8> {
        self.parser.screen().state_formatted().into_bytes()
    }

    /// Whether the program asked for bracketed paste.
    pub fn bracketed_paste(&self) -> bool {
        self.parser.screen().bracketed_paste()
    }

    /// The last `tail_lines` non-blank lines of the screen.
    pub fn tail(&self) -> String {
        let text = self.screen_text();
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.trim_end())
            .filter(|l| !l.is_empty())
            .collect();
        let start = lines.len().saturating_sub(self.settings.tail_lines);
        lines[start..].join("\n")
    }

    fn set(
        &mut self,
        to: Status,
        injectable: bool,
        cause: Cause,
        now: Millis,
        fx: &mut Vec<Effect>,
    ) {
        if self.status == Status::Exited {
            return;
        }
        if to != self.status || injectable != self.injectable {
            let from = self.status;
            if to != self.status {
                self.status_since = now;
            }
            self.status = to;
            self.injectable = injectable;
            fx.push(Effect::Status {
                from,
                to,
                injectable,
                cause,
            });
        }
    }

    /// Output from the terminal.
    pub fn output(&mut self, bytes: &[u8], now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        self.parser.process(bytes);
        let contents = self.parser.screen().contents();
        if contents != self.last_contents {
            self.last_contents = contents;
            self.last_change = now;
            self.dirty = true;
            if !self.pinned && self.status != Status::Starting {
                self.set(Status::Working, false, Cause::Screen, now, &mut fx);
            }
        }
        fx
    }

    /// Time passed: classify a screen that has been still for the stability window, and reap a
    /// member idle for the whole TTL.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if self.status == Status::Exited {
            return fx;
        }
        if !self.pinned
            && self.dirty
            && now.saturating_sub(self.last_change) >= self.profile.stable_ms
        {
            self.dirty = false;
            let c = classify(&self.profile, &self.last_contents);
            self.set(c.status, c.injectable, Cause::Screen, now, &mut fx);
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
        let classify_at =
            (!self.pinned && self.dirty).then_some(self.last_change + self.profile.stable_ms);
        let reap_at =
            (self.settings.idle_ttl_ms > 0 && !self.reaped && self.status == Status::Idle)
                .then_some(self.status_since + self.settings.idle_ttl_ms);
        match (classify_at, reap_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// An explicit signal from the member's own process tree (an agent hook): it wins over the
    /// screen rules until the next message is injected or the next signal.
    pub fn signal(&mut self, status: Status, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if status == Status::Exited || status == Status::Starting {
            return fx;
        }
        self.pinned = true;
        self.set(
            status,
            status != Status::Working,
            Cause::Signal,
            now,
            &mut fx,
        );
        fx
    }

    /// A message was pasted: screen rules resume, so leaving idle can be seen.
    pub fn injected(&mut self, now: Millis) {
        self.pinned = false;
        self.last_change = now;
        self.dirty = true;
    }

    /// The process is gone.
    pub fn exited(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if self.status != Status::Exited {
            let from = self.status;
            self.status = Status::Exited;
            self.injectable = false;
            self.status_since = now;
            fx.push(Effect::Status {
                from,
                to: Status::Exited,
                injectable: false,
                cause: Cause::Exit,
            });
        }
        fx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn core(ttl: Millis) -> SlotCore {
        let p = Config::default().compiled_profile("sim").unwrap();
        SlotCore::new(
            p,
            SlotSettings {
                rows: 10,
                cols: 40,
                idle_ttl_ms: ttl,
                tail_lines: 3,
            },
            0,
        )
    }

    fn statuses(fx: &[Effect]) -> Vec<Status> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Status { to, .. } => Some(*to),
                _ => None,
            })
            .collect()
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
    }

    #[test]
    fn starting_then_idle_after_stability_window() {
        let mut c = core(0);
        assert!(c.output(b"sim agent\r\nsim> ", 0).is_empty());
        assert_eq!(c.status(), Status::Starting);
        assert!(c.tick(149).is_empty());
        assert_eq!(statuses(&c.tick(150)), vec![Status::Idle]);
        // Any change means working at once.
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
    fn prompt_after_work_is_idle_again() {
        let mut c = core(0);
        c.output(b"sim> ", 0);
        c.tick(200);
        c.output(b"go\r\n* working\r\n", 300);
        assert_eq!(c.status(), Status::Working);
        c.output(b"\x1b[2J\x1b[Hdone\r\nsim> ", 400);
        assert_eq!(statuses(&c.tick(600)), vec![Status::Idle]);
    }

    #[test]
    fn signal_wins_until_next_injection() {
        let mut c = core(0);
        c.output(b"sim> ", 0);
        c.tick(200);
        assert_eq!(
            statuses(&c.signal(Status::Blocked, 300)),
            vec![Status::Blocked]
        );
        // Screen rules are suspended: a stable prompt does not make it idle.
        c.output(b"x", 310);
        assert!(statuses(&c.tick(1_000)).is_empty());
        assert_eq!(c.status(), Status::Blocked);
        c.injected(1_100);
        c.output(b"y", 1_110);
        assert_eq!(c.status(), Status::Working);
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
        assert!(c.signal(Status::Idle, 30).is_empty());
        assert_eq!(c.status(), Status::Exited);
    }

    #[test]
    fn restore_primes_screen_from_snapshot() {
        let mut a = core(0);
        a.output(b"hello\r\nsim> ", 0);
        let snap = a.screen_formatted();
        let mut b = core(0);
        b.restore(&snap, Status::Idle, 5);
        assert_eq!(b.screen_text(), a.screen_text());
        assert_eq!(b.status(), Status::Idle);
    }
}
