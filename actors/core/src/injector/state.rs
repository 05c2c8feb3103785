//! The injector core: one durable FIFO per target, delivered only when the target can take it.
//!
//! Owns the delivery rules: a message lands only while the target is `idle` (or `blocked` with
//! an injectable dialog), at most one per turn (the next waits for the turn it started to end),
//! in send order; and every message's receipt, `queued -> delivered -> accepted | stalled`, or
//! `failed` when the target is gone. `accepted` means the target's slot saw evidence that the
//! agent started a turn on this message (a hook, or its busy marker after the Enter), never
//! merely a status change; without it the slot reports the message not taken and it is
//! `stalled`, with why in its `note` and what the screen showed in its `screen` (screen text,
//! which views show only by the Screen rule). Pure: the shell persists each [`Effect::Save`] before it performs the effects
//! after it (so a receipt is durable before anyone is told, and `delivered` is durable before the
//! paste: a crash can stall a message, never paste it twice). Must never touch a terminal.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::error::FleetError;
use crate::types::{MemberName, Millis, MsgId, Party, Status, TicketId, Written};

/// Where a message is. Every message is always in exactly one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptState {
    /// Durable in the target's queue, waiting for the target to be injectable.
    Queued,
    /// Lead-to-lead mail: durable on the receiving host (its queue or its coordinator's
    /// mailbox). Never a state of a local message.
    Transmitted,
    /// Pasted into the target's terminal, followed by Enter.
    Delivered,
    /// The agent started a turn on it (a hook said so, or its busy marker showed after the
    /// Enter).
    Accepted,
    /// No turn started on it within the accept timeout: reported with what the screen showed,
    /// held (the next message waits), never retried blindly; it still turns `accepted` if the
    /// turn starts later.
    Stalled,
    /// It can never be delivered (the target exited); `note` says why.
    Failed,
}

impl ReceiptState {
    /// Final states: the message left the queue.
    pub fn is_final(self) -> bool {
        matches!(self, ReceiptState::Accepted | ReceiptState::Failed)
    }
}

/// A message with its receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub id: MsgId,
    pub target: MemberName,
    pub from: Party,
    pub ticket: Option<TicketId>,
    pub body: String,
    pub state: ReceiptState,
    pub queued_at: Millis,
    pub delivered_at: Option<Millis>,
    /// When it became accepted, stalled or failed.
    pub settled_at: Option<Millis>,
    pub note: Option<String>,
    /// A stalled paste: the last lines of the target's screen when it stalled. Screen text,
    /// kept apart from `note` so that views show it only to those the Screen rule lets see
    /// the target's screen (`fleetd_core::authz::screen_visible`), the note to everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<String>,
    /// Set when the body held characters that may not reach a terminal as such (see
    /// [`crate::sanitize`]): what was shown visibly instead. The stored body is the safe one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub altered: Option<String>,
    /// When its ticket expires: a message still queued then is never pasted (its ticket's
    /// reply would be refused as late); its receipt says why. None: no ticket, no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Millis>,
}

impl Message {
    /// A message not yet queued: the injector sets `queued_at` when it stores it.
    pub fn new(
        id: MsgId,
        target: MemberName,
        from: Party,
        ticket: Option<TicketId>,
        body: String,
    ) -> Message {
        Message {
            id,
            target,
            from,
            ticket,
            body,
            state: ReceiptState::Queued,
            queued_at: 0,
            delivered_at: None,
            settled_at: None,
            note: None,
            screen: None,
            altered: None,
            expires_at: None,
        }
    }
}

/// The text a message is delivered as: a one-line header naming the ticket and the sender,
/// then the body. Agents (and the reply charter) rely on `ticket t-N` being in the header.
pub fn delivery_text(msg: &Message) -> String {
    match msg.ticket {
        Some(t) => format!(
            "[fleet ticket {t} from {} · answer with fleet_reply]\n{}",
            msg.from, msg.body
        ),
        None => format!("[fleet message from {}]\n{}", msg.from, msg.body),
    }
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Persist this message's new state (durably) before the effects that follow.
    Save(Message),
    /// Paste the message (bracketed paste + Enter) into the target's terminal.
    Deliver(Message),
    /// The turn that took this message ended (the target is idle again).
    TurnEnded {
        msg: MsgId,
        ticket: Option<TicketId>,
    },
}

/// Past the slot's accept timeout (twice over), how long the injector still waits for its
/// slot's word on a paste before it calls the message stalled itself.
pub const BACKSTOP_GRACE_MS: Millis = 1_000;

/// Injector limits from config.
#[derive(Clone, Debug)]
pub struct InjectorLimits {
    pub max_queue: usize,
    pub accept_timeout_ms: Millis,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Free to deliver at the next injectable status.
    Ready,
    /// Pasted; waiting for evidence that a turn started on it (the backstop counts from
    /// `since`: the paste, or the restart that found it written).
    AwaitingAccept { msg: Message, since: Millis },
    /// Not taken in time; held until a turn starts on it after all.
    Stalled { msg: Message },
    /// Accepted; the next message waits for this turn to end.
    AwaitingTurnEnd { msg: Message },
}

/// The view of the target the injector acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetView {
    pub status: Status,
    /// Whether a message may be pasted now: for `idle`, the input box is empty; for
    /// `blocked`, what is on screen is a question a message may answer.
    pub injectable: bool,
}

impl TargetView {
    /// Idle with an empty input box, or blocked on a question a message may answer.
    pub fn can_take(&self) -> bool {
        matches!(self.status, Status::Idle | Status::Blocked) && self.injectable
    }
}

/// One target's queue.
#[derive(Clone, Debug)]
pub struct Injector {
    target: MemberName,
    queue: VecDeque<Message>,
    phase: Phase,
    view: TargetView,
    limits: InjectorLimits,
    closed: Option<String>,
    /// A message the store says was delivered, loaded at start: whether it reached the
    /// terminal is asked of the terminal host before anything else is delivered.
    unresolved: bool,
    /// Shutting down: nothing more is delivered.
    quiet: bool,
}

impl Injector {
    /// Rebuild from the store: `pending` are this target's messages in a non-final state, in id
    /// order; `unfinished` is the accepted message whose turn never ended (the daemon stopped
    /// during it). A message that was `delivered` resumes as the one in flight, unresolved until
    /// the terminal host says whether it got it ([`Self::resolve`]); a `stalled` one stays
    /// stalled; an unfinished turn is awaited again, so its ticket gets its tail.
    pub fn new(
        target: MemberName,
        pending: Vec<Message>,
        unfinished: Option<Message>,
        limits: InjectorLimits,
    ) -> Self {
        let mut queue = VecDeque::new();
        let mut phase = match unfinished {
            Some(msg) => Phase::AwaitingTurnEnd { msg },
            None => Phase::Ready,
        };
        let mut unresolved = false;
        for m in pending {
            match m.state {
                ReceiptState::Delivered if phase == Phase::Ready => {
                    unresolved = true;
                    let since = m.delivered_at.unwrap_or(0);
                    phase = Phase::AwaitingAccept { msg: m, since }
                }
                ReceiptState::Stalled if phase == Phase::Ready => phase = Phase::Stalled { msg: m },
                _ => queue.push_back(m),
            }
        }
        Injector {
            target,
            queue,
            phase,
            view: TargetView {
                status: Status::Starting,
                injectable: false,
            },
            limits,
            closed: None,
            unresolved,
            quiet: false,
        }
    }

    /// The message recorded as delivered before a restart, whose fate is not known yet.
    pub fn unresolved(&self) -> Option<&Message> {
        match &self.phase {
            Phase::AwaitingAccept { msg, .. } if self.unresolved => Some(msg),
            _ => None,
        }
    }

    /// The terminal host's word on the message recorded as delivered before a restart: written
    /// (its turn is awaited from now), never got (delivered again, once: the host takes each id
    /// once), or unknown (stalled, with the reason; never accepted on a guess).
    pub fn resolve(&mut self, id: MsgId, written: Written, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        let Phase::AwaitingAccept { msg, .. } = &self.phase else {
            return fx;
        };
        if !self.unresolved || msg.id != id {
            return fx;
        }
        self.unresolved = false;
        let Phase::AwaitingAccept { mut msg, .. } =
            std::mem::replace(&mut self.phase, Phase::Ready)
        else {
            return fx;
        };
        match written {
            Written::Yes => self.phase = Phase::AwaitingAccept { msg, since: now },
            Written::No => {
                msg.state = ReceiptState::Queued;
                msg.delivered_at = None;
                msg.note = Some(
                    "recorded as delivered when the daemon stopped, but the terminal never got it: delivered again"
                        .into(),
                );
                fx.push(Effect::Save(msg.clone()));
                self.queue.push_front(msg);
                self.try_deliver(now, &mut fx);
            }
            Written::Unknown(why) => self.stall(
                msg,
                &format!("after a restart, whether it was pasted cannot be known: {why}"),
                now,
                &mut fx,
            ),
        }
        fx
    }

    /// Shutting down: deliver nothing more.
    pub fn quiesce(&mut self) {
        self.quiet = true;
    }

    pub fn set_limits(&mut self, limits: InjectorLimits) {
        self.limits = limits;
    }

    pub fn target(&self) -> &MemberName {
        &self.target
    }

    /// Messages waiting (not counting the one in flight).
    pub fn queued(&self) -> impl Iterator<Item = &Message> {
        self.queue.iter()
    }

    /// Messages waiting plus the one in flight, if any.
    pub fn depth(&self) -> usize {
        self.queue.len() + usize::from(self.in_flight().is_some())
    }

    /// The message in flight (delivered, stalled, or in its turn), if any.
    pub fn in_flight(&self) -> Option<&Message> {
        match &self.phase {
            Phase::Ready => None,
            Phase::AwaitingAccept { msg, .. }
            | Phase::Stalled { msg, .. }
            | Phase::AwaitingTurnEnd { msg } => Some(msg),
        }
    }

    /// Whether the queue is held behind a stalled message.
    pub fn is_stalled(&self) -> bool {
        matches!(self.phase, Phase::Stalled { .. })
    }

    /// When the in-flight message stalls even though its slot never reported on it (the slot
    /// restarted and lost track of the paste): well after the slot's own accept timeout.
    /// Also when the first queued message's ticket expires.
    pub fn next_deadline(&self) -> Option<Millis> {
        let expiry = if self.closed.is_some() {
            None
        } else {
            self.queue.iter().filter_map(|m| m.expires_at).min()
        };
        self.backstop().into_iter().chain(expiry).min()
    }

    fn backstop(&self) -> Option<Millis> {
        match &self.phase {
            Phase::AwaitingAccept { since, .. } if !self.unresolved => {
                Some(since + self.limits.accept_timeout_ms * 2 + BACKSTOP_GRACE_MS)
            }
            _ => None,
        }
    }

    /// Queued messages whose ticket has expired leave the queue, never pasted: the agent would
    /// work on a ticket whose reply is refused as late. Each receipt says so (`failed`, a note
    /// starting `expired`), and its ticket's sender is told through the ticket.
    fn expire(&mut self, now: Millis, fx: &mut Vec<Effect>) {
        if self.closed.is_some()
            || !self
                .queue
                .iter()
                .any(|m| m.expires_at.is_some_and(|e| now >= e))
        {
            return;
        }
        let target = self.target.clone();
        let (gone, keep): (Vec<Message>, Vec<Message>) = self
            .queue
            .drain(..)
            .partition(|m| m.expires_at.is_some_and(|e| now >= e));
        self.queue = keep.into();
        for mut msg in gone {
            msg.state = ReceiptState::Failed;
            msg.settled_at = Some(now);
            msg.note = Some(format!(
                "expired: its ticket{} expired after {} s in the queue, before `{target}` could                  take it; not pasted (send it again if it still matters)",
                msg.ticket.map(|t| format!(" {t}")).unwrap_or_default(),
                now.saturating_sub(msg.queued_at) / 1000,
            ));
            fx.push(Effect::Save(msg));
        }
    }

    /// Accept a message into the queue. Refused when the target is gone or the queue is full.
    pub fn enqueue(&mut self, mut msg: Message, now: Millis) -> Result<Vec<Effect>, FleetError> {
        if let Some(why) = &self.closed {
            return Err(FleetError::conflict(
                format!("message to `{}`", self.target),
                format!("`{}` has exited ({why})", self.target),
                "a message to a live member (see fleet_list)",
            ));
        }
        let depth = self.queue.len() + usize::from(self.phase != Phase::Ready);
        if depth >= self.limits.max_queue {
            return Err(FleetError::overloaded(
                format!("message to `{}`", self.target),
                format!(
                    "{depth} messages already wait for `{}` (injector.max_queue = {})",
                    self.target, self.limits.max_queue
                ),
                "the same message once the target has worked through its queue",
            ));
        }
        msg.state = ReceiptState::Queued;
        msg.queued_at = now;
        let (body, alteration) = crate::sanitize::for_terminal(&msg.body);
        if let Some(what) = alteration.describe() {
            msg.body = body;
            msg.altered = Some(what);
        }
        let mut fx = vec![Effect::Save(msg.clone())];
        self.queue.push_back(msg);
        self.try_deliver(now, &mut fx);
        Ok(fx)
    }

    /// The target's status changed.
    pub fn target_status(&mut self, view: TargetView, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        self.view = view;
        if view.status == Status::Exited {
            self.close("the target exited", now, &mut fx);
            return fx;
        }
        if let Phase::AwaitingTurnEnd { msg } = &self.phase
            && view.can_take()
        {
            fx.push(Effect::TurnEnded {
                msg: msg.id,
                ticket: msg.ticket,
            });
            self.phase = Phase::Ready;
        }
        self.try_deliver(now, &mut fx);
        fx
    }

    /// The target's slot saw the agent start a turn on message `id`: it is `accepted` (also
    /// after a stall), and the next message waits for that turn to end (the next status the
    /// target can take a message in).
    pub fn turn_started(&mut self, id: MsgId, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::AwaitingAccept { mut msg, .. } | Phase::Stalled { mut msg }
                if msg.id == id && !self.unresolved =>
            {
                msg.state = ReceiptState::Accepted;
                msg.settled_at = Some(now);
                fx.push(Effect::Save(msg.clone()));
                self.phase = Phase::AwaitingTurnEnd { msg };
            }
            other => self.phase = other,
        }
        fx
    }

    /// The target's slot saw no turn start on message `id` within the accept timeout; `why`
    /// says why (no screen text in it), `screen` what the screen showed (kept in the message's
    /// `screen`, shown by the Screen rule).
    pub fn not_started(
        &mut self,
        id: MsgId,
        why: &str,
        screen: Option<String>,
        now: Millis,
    ) -> Vec<Effect> {
        let mut fx = vec![];
        match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::AwaitingAccept { mut msg, .. } if msg.id == id && !self.unresolved => {
                msg.screen = screen;
                self.stall(msg, why, now, &mut fx)
            }
            other => self.phase = other,
        }
        fx
    }

    fn stall(&mut self, mut msg: Message, why: &str, now: Millis, fx: &mut Vec<Effect>) {
        msg.state = ReceiptState::Stalled;
        msg.settled_at = Some(now);
        msg.note = Some(format!("{why}; held, not retried"));
        fx.push(Effect::Save(msg.clone()));
        self.phase = Phase::Stalled { msg };
    }

    /// Time passed: a delivered message its slot never reported on becomes `stalled`.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        self.expire(now, &mut fx);
        if let Some(deadline) = self.backstop()
            && now >= deadline
            && let Phase::AwaitingAccept { msg, .. } =
                std::mem::replace(&mut self.phase, Phase::Ready)
        {
            let why = format!(
                "no word from the terminal of `{}` on whether a turn started on it within {} ms \
                 (its slot restarted after the paste?)",
                self.target,
                now.saturating_sub(msg.delivered_at.unwrap_or(now))
            );
            self.stall(msg, &why, now, &mut fx);
        }
        fx
    }

    /// The paste could not be written (the terminal is gone).
    pub fn delivery_failed(&mut self, id: MsgId, why: &str, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if let Phase::AwaitingAccept { msg, .. } = &self.phase
            && msg.id == id
        {
            let mut msg = msg.clone();
            self.phase = Phase::Ready;
            msg.state = ReceiptState::Failed;
            msg.settled_at = Some(now);
            msg.note = Some(format!("the paste could not be written: {why}"));
            fx.push(Effect::Save(msg));
        }
        fx
    }

    fn close(&mut self, why: &str, now: Millis, fx: &mut Vec<Effect>) {
        self.closed = Some(why.to_string());
        let inflight = match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::AwaitingAccept { msg, .. } | Phase::Stalled { msg, .. } => Some(msg),
            Phase::AwaitingTurnEnd { .. } | Phase::Ready => None,
        };
        for mut msg in inflight.into_iter().chain(self.queue.drain(..)) {
            msg.state = ReceiptState::Failed;
            msg.settled_at = Some(now);
            msg.note = Some(format!("undeliverable: {why}"));
            fx.push(Effect::Save(msg));
        }
    }

    fn try_deliver(&mut self, now: Millis, fx: &mut Vec<Effect>) {
        if self.closed.is_some()
            || self.quiet
            || self.phase != Phase::Ready
            || !self.view.can_take()
        {
            return;
        }
        self.expire(now, fx);
        let Some(mut msg) = self.queue.pop_front() else {
            return;
        };
        msg.state = ReceiptState::Delivered;
        msg.delivered_at = Some(now);
        fx.push(Effect::Save(msg.clone()));
        fx.push(Effect::Deliver(msg.clone()));
        self.phase = Phase::AwaitingAccept { msg, since: now };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Written;
    use proptest::prelude::*;

    fn target() -> MemberName {
        MemberName::new("w1").unwrap()
    }

    fn inj(max: usize) -> Injector {
        Injector::new(
            target(),
            vec![],
            None,
            InjectorLimits {
                max_queue: max,
                accept_timeout_ms: 1_000,
            },
        )
    }

    fn msg(id: u64) -> Message {
        Message::new(
            MsgId(id),
            target(),
            Party::Operator,
            Some(TicketId(id)),
            format!("m{id}"),
        )
    }

    fn view(status: Status) -> TargetView {
        TargetView {
            status,
            injectable: status != Status::Blocked,
        }
    }

    fn delivered(fx: &[Effect]) -> Vec<u64> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Deliver(m) => Some(m.id.0),
                _ => None,
            })
            .collect()
    }

    fn in_flight(i: &Injector) -> Option<u64> {
        i.in_flight().map(|m| m.id.0)
    }

    #[test]
    fn waits_for_idle_then_one_per_turn_in_order() {
        let mut i = inj(10);
        assert!(delivered(&i.enqueue(msg(1), 0).unwrap()).is_empty());
        assert!(delivered(&i.enqueue(msg(2), 0).unwrap()).is_empty());
        assert!(delivered(&i.target_status(view(Status::Working), 1)).is_empty());
        assert_eq!(i.depth(), 2);
        // Idle: exactly the first.
        let fx = i.target_status(view(Status::Idle), 2);
        assert_eq!(delivered(&fx), vec![1]);
        assert_eq!(i.depth(), 2, "one in flight, one waiting");
        // Save(delivered) comes before the Deliver effect.
        assert!(matches!(&fx[0], Effect::Save(m) if m.state == ReceiptState::Delivered));
        // A status change alone is no evidence: the paste's echo, a footer redraw.
        assert!(i.target_status(view(Status::Working), 3).is_empty());
        assert!(i.target_status(view(Status::Idle), 4).is_empty());
        assert_eq!(in_flight(&i), Some(1));
        // The slot saw the turn start on it: accepted, and the second waits for the turn.
        let fx = i.turn_started(MsgId(1), 5);
        assert!(
            matches!(&fx[..], [Effect::Save(m)] if m.id == MsgId(1) && m.state == ReceiptState::Accepted)
        );
        assert!(i.target_status(view(Status::Working), 6).is_empty());
        // Turn ends: the next idle takes the second.
        let fx = i.target_status(view(Status::Idle), 7);
        assert!(fx.contains(&Effect::TurnEnded {
            msg: MsgId(1),
            ticket: Some(TicketId(1))
        }));
        assert_eq!(delivered(&fx), vec![2]);
        // Evidence for a message that is not in flight changes nothing.
        assert!(i.turn_started(MsgId(1), 8).is_empty());
    }

    #[test]
    fn a_quick_turn_ends_at_the_next_idle_after_its_start() {
        let mut i = inj(10);
        i.enqueue(msg(1), 0).unwrap();
        i.enqueue(msg(2), 0).unwrap();
        assert_eq!(delivered(&i.target_status(view(Status::Idle), 1)), vec![1]);
        // The slot reports the start while the view it last sent still says idle: the next
        // message waits for the status that follows, never rides on the stale idle.
        assert!(delivered(&i.turn_started(MsgId(1), 2)).is_empty());
        let fx = i.target_status(view(Status::Idle), 3);
        assert!(matches!(fx[0], Effect::TurnEnded { msg: MsgId(1), .. }));
        assert_eq!(delivered(&fx), vec![2]);
    }

    #[test]
    fn not_started_is_stalled_with_the_reason_and_held_then_late_accept() {
        let mut i = inj(10);
        i.enqueue(msg(1), 0).unwrap();
        i.enqueue(msg(2), 0).unwrap();
        assert_eq!(delivered(&i.target_status(view(Status::Idle), 10)), vec![1]);
        let fx = i.not_started(MsgId(1), "not taken", Some("> m1".into()), 1_010);
        assert!(
            matches!(&fx[..], [Effect::Save(m)] if m.state == ReceiptState::Stalled
                && m.note.as_deref().is_some_and(|n| n.contains("not taken") && n.contains("held") && !n.contains("> m1"))
                && m.screen.as_deref() == Some("> m1"))
        );
        // Held: the idle target does not get the next message pasted on top.
        assert!(delivered(&i.target_status(view(Status::Idle), 1_100)).is_empty());
        assert!(i.is_stalled());
        // The turn starts after all: the stalled message is accepted late.
        let fx = i.turn_started(MsgId(1), 1_200);
        assert!(fx.iter().any(|e| matches!(e, Effect::Save(m) if m.id == MsgId(1) && m.state == ReceiptState::Accepted)));
        i.target_status(view(Status::Working), 1_250);
        assert_eq!(
            delivered(&i.target_status(view(Status::Idle), 1_300)),
            vec![2]
        );
    }

    #[test]
    fn the_backstop_stalls_a_paste_its_slot_never_reported_on() {
        let mut i = inj(10);
        i.enqueue(msg(1), 0).unwrap();
        i.target_status(view(Status::Idle), 10);
        let at = 10 + 2 * 1_000 + BACKSTOP_GRACE_MS;
        assert_eq!(i.next_deadline(), Some(at));
        assert!(i.tick(at - 1).is_empty());
        let fx = i.tick(at);
        assert!(
            matches!(&fx[..], [Effect::Save(m)] if m.state == ReceiptState::Stalled
            && m.note.as_deref().is_some_and(|n| n.contains("no word from the terminal")))
        );
        assert_eq!(i.next_deadline(), None);
    }

    #[test]
    fn permission_dialog_is_not_injectable_but_a_question_is() {
        let mut i = inj(10);
        i.enqueue(msg(1), 0).unwrap();
        let fx = i.target_status(
            TargetView {
                status: Status::Blocked,
                injectable: false,
            },
            1,
        );
        assert!(delivered(&fx).is_empty());
        let fx = i.target_status(
            TargetView {
                status: Status::Blocked,
                injectable: true,
            },
            2,
        );
        assert_eq!(delivered(&fx), vec![1]);
    }

    #[test]
    fn bounded_queue_and_exit_fails_everything() {
        let mut i = inj(2);
        i.enqueue(msg(1), 0).unwrap();
        i.enqueue(msg(2), 0).unwrap();
        let e = i.enqueue(msg(3), 0).unwrap_err();
        assert!(e.why.contains("injector.max_queue = 2"), "{e}");
        let fx = i.target_status(view(Status::Exited), 5);
        let failed: Vec<_> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Save(m) if m.state == ReceiptState::Failed => Some(m.id.0),
                _ => None,
            })
            .collect();
        assert_eq!(failed, vec![1, 2]);
        assert!(i.enqueue(msg(4), 6).is_err());
    }

    #[test]
    fn rebuild_resumes_in_flight_message() {
        let rebuilt = || {
            let mut d = msg(1);
            d.state = ReceiptState::Delivered;
            d.delivered_at = Some(100);
            Injector::new(
                target(),
                vec![d, msg(2)],
                None,
                InjectorLimits {
                    max_queue: 5,
                    accept_timeout_ms: 50,
                },
            )
        };
        let mut i = rebuilt();
        assert_eq!(i.unresolved().map(|m| m.id), Some(MsgId(1)));
        // Nothing is delivered, and nothing stalls, before the terminal host's word on it.
        assert!(delivered(&i.target_status(view(Status::Idle), 110)).is_empty());
        assert_eq!(i.next_deadline(), None);
        // Evidence of a turn cannot accept it before that either (it could be anyone's turn).
        assert!(i.turn_started(MsgId(1), 120).is_empty());
        // Written: its turn is awaited from now; the backstop counts from the restart.
        assert!(i.resolve(MsgId(1), Written::Yes, 130).is_empty());
        assert_eq!(i.next_deadline(), Some(130 + 2 * 50 + BACKSTOP_GRACE_MS));
        let fx = i.turn_started(MsgId(1), 140);
        assert!(matches!(&fx[..], [Effect::Save(m)] if m.state == ReceiptState::Accepted));

        // Never got it: delivered again, first in line, once.
        let mut i = rebuilt();
        let fx = i.resolve(MsgId(1), Written::No, 130);
        assert!(
            matches!(&fx[0], Effect::Save(m) if m.id == MsgId(1) && m.state == ReceiptState::Queued)
        );
        assert!(
            fx.iter().all(|e| !matches!(e, Effect::Deliver(_))),
            "not idle yet"
        );
        assert_eq!(
            delivered(&i.target_status(view(Status::Idle), 140)),
            vec![1]
        );
        assert!(
            i.resolve(MsgId(1), Written::No, 150).is_empty(),
            "resolved once"
        );

        // Nobody can say: stalled with the reason, never accepted on a guess.
        let mut i = rebuilt();
        let fx = i.resolve(MsgId(1), Written::Unknown("the host is gone".into()), 130);
        assert!(
            matches!(&fx[..], [Effect::Save(m)] if m.state == ReceiptState::Stalled
            && m.note.as_deref().is_some_and(|n| n.contains("cannot be known: the host is gone")))
        );
    }

    #[test]
    fn a_turn_the_restart_cut_short_still_ends_with_its_tail() {
        let mut a = msg(1);
        a.state = ReceiptState::Accepted;
        let mut i = Injector::new(
            target(),
            vec![msg(2)],
            Some(a),
            InjectorLimits {
                max_queue: 5,
                accept_timeout_ms: 50,
            },
        );
        assert_eq!(i.in_flight().map(|m| m.id), Some(MsgId(1)));
        // The first status the target can take a message in ends that turn (the desk attaches
        // the tail), and only then is the next message pasted.
        let fx = i.target_status(view(Status::Idle), 10);
        assert_eq!(
            fx[0],
            Effect::TurnEnded {
                msg: MsgId(1),
                ticket: Some(TicketId(1))
            }
        );
        assert_eq!(delivered(&fx), vec![2]);
    }

    #[test]
    fn a_quiesced_injector_delivers_nothing_more() {
        let mut i = inj(10);
        i.enqueue(msg(1), 0).unwrap();
        i.quiesce();
        assert!(delivered(&i.target_status(view(Status::Idle), 1)).is_empty());
        assert!(delivered(&i.enqueue(msg(2), 2).unwrap()).is_empty());
    }

    #[derive(Clone, Debug)]
    enum Ev {
        /// A message, with a ticket TTL or none.
        Send(Option<u16>),
        Status(u8),
        Tick(u16),
        /// The slot's word on the message in flight: started (true) or not (false).
        Word(bool),
    }

    /// Two messages whose tickets expired while queued behind a dialog are not pasted when it
    /// closes: each receipt is `failed`, its note says it expired; a later one goes on.
    #[test]
    fn a_message_whose_ticket_expired_while_queued_is_never_pasted() {
        let mut i = inj(10);
        let blocked = TargetView {
            status: Status::Blocked,
            injectable: false,
        };
        i.target_status(blocked, 0);
        for (id, ttl) in [(1, 1_000), (2, 1_500), (3, 60_000)] {
            let mut m = msg(id);
            m.expires_at = Some(ttl);
            i.enqueue(m, 0).unwrap();
        }
        assert_eq!(i.next_deadline(), Some(1_000), "woken at the first expiry");
        let fx = i.tick(1_000);
        assert!(
            matches!(&fx[..], [Effect::Save(m)] if m.id == MsgId(1) && m.state == ReceiptState::Failed
                && m.note.as_deref().is_some_and(|n| n.starts_with("expired: its ticket t-1 expired"))),
            "{fx:?}"
        );
        assert_eq!(i.next_deadline(), Some(1_500));
        // The dialog closes after the second expired too, before any tick: still not pasted.
        let fx = i.target_status(
            TargetView {
                status: Status::Idle,
                injectable: true,
            },
            2_000,
        );
        let delivered: Vec<u64> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Deliver(m) => Some(m.id.0),
                _ => None,
            })
            .collect();
        assert_eq!(delivered, vec![3]);
        assert!(fx.iter().any(
            |e| matches!(e, Effect::Save(m) if m.id == MsgId(2) && m.state == ReceiptState::Failed)
        ));
    }

    proptest! {
        /// For any interleaving: deliveries follow send order, only to an injectable target,
        /// never a second one before the first's turn started and then the target came back
        /// to a status it can take; accepted only on the slot's word; every message is in
        /// exactly one state at the end.
        #[test]
        fn fifo_and_one_per_turn(evs in proptest::collection::vec(prop_oneof![
            proptest::option::of(100u16..5000).prop_map(Ev::Send),
            (0u8..5).prop_map(Ev::Status),
            (0u16..1500).prop_map(Ev::Tick),
            any::<bool>().prop_map(Ev::Word),
        ], 1..120)) {
            let mut i = inj(1000);
            let mut now = 0u64;
            let mut next = 1u64;
            let mut order = vec![];
            let mut status = Status::Starting;
            // The message pasted last, whether its turn started, and whether the target came
            // back to a status that can take a message since then.
            let mut last: Option<(u64, bool, bool)> = None;
            let mut states: std::collections::BTreeMap<u64, ReceiptState> = Default::default();
            let mut expiry: std::collections::BTreeMap<u64, Option<Millis>> = Default::default();
            for e in evs {
                let fx = match e {
                    Ev::Send(ttl) => {
                        let id = next;
                        next += 1;
                        let mut m = msg(id);
                        m.expires_at = ttl.map(|t| now + t as u64);
                        expiry.insert(id, m.expires_at);
                        i.enqueue(m, now).unwrap()
                    }
                    Ev::Status(s) => {
                        let st = [Status::Working, Status::Idle, Status::Blocked, Status::Idle, Status::Working][s as usize];
                        status = st;
                        let v = TargetView { status: st, injectable: s != 2 };
                        if let Some((_, true, back)) = &mut last && v.can_take() { *back = true; }
                        i.target_status(v, now)
                    }
                    Ev::Tick(dt) => { now += dt as u64; i.tick(now) }
                    Ev::Word(started) => match i.in_flight().map(|m| m.id) {
                        Some(id) if started => {
                            if let Some((l, s, _)) = &mut last && *l == id.0 { *s = true; }
                            i.turn_started(id, now)
                        }
                        Some(id) => i.not_started(id, "screen", None, now),
                        None => vec![],
                    },
                };
                for f in fx {
                    match f {
                        Effect::Deliver(m) => {
                            prop_assert!(status == Status::Idle || status == Status::Blocked);
                            prop_assert!(expiry[&m.id.0].is_none_or(|e| now < e), "pasted after its ticket expired");
                            if let Some((_, started, back)) = last {
                                prop_assert!(started && back, "a second paste before the first's turn ended");
                            }
                            last = Some((m.id.0, false, false));
                            order.push(m.id.0);
                        }
                        Effect::Save(m) => {
                            if m.state == ReceiptState::Accepted {
                                prop_assert!(last.is_some_and(|(l, s, _)| l == m.id.0 && s), "accepted without the slot's word");
                            }
                            if m.state == ReceiptState::Failed {
                                prop_assert!(m.note.as_deref().is_some_and(|n| n.starts_with("expired")));
                                prop_assert!(expiry[&m.id.0].is_some_and(|e| now >= e), "expired early");
                                prop_assert_eq!(states.get(&m.id.0), Some(&ReceiptState::Queued), "only a queued message expires");
                            }
                            states.insert(m.id.0, m.state);
                        }
                        Effect::TurnEnded { .. } => {}
                    }
                }
            }
            let mut sorted = order.clone();
            sorted.sort();
            prop_assert_eq!(&order, &sorted, "not FIFO");
            // Nothing queued is left past its expiry.
            for m in i.queued() {
                prop_assert!(m.expires_at.is_none_or(|e| now < e), "a queued message outlived its ticket");
            }
            prop_assert_eq!(states.len() as u64, next - 1, "a message with no recorded state");
        }
    }
}
