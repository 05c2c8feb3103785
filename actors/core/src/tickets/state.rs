//! The ticket desk core: every send and every ask opens a ticket that ends answered, answered by
//! transcript tail, undeliverable, or expired.
//!
//! Owns ticket TTLs, who may reply (the member the ticket was sent to), late replies (refused
//! with a clear error and kept visible), the transcript-tail fallback when a turn ends without
//! `fleet_reply`, poll/ack of one's own tickets, and bounded waits on a ticket. Pure: the shell
//! persists each [`Effect::Save`] before it answers anyone. Must never read a terminal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::authz::{Action, authorize};
use crate::error::{ErrorKind, FleetError};
use crate::injector::state::ReceiptState;
use crate::types::{Caller, MemberName, Millis, MsgId, Party, TicketId};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TicketKind {
    /// fleet_send (or the operator's send): the target owes a reply.
    Send,
    /// fleet_ask: the asker's lead owes an answer.
    Ask,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TicketState {
    /// Waiting for the owner's reply.
    Open,
    /// The owner replied with fleet_reply.
    Replied,
    /// The owner's turn ended without fleet_reply; the transcript tail stands in.
    Tail,
    /// The message could not be delivered (the owner exited).
    Undeliverable,
    /// The TTL ran out before a reply.
    Expired,
}

impl TicketState {
    pub fn is_resolved(self) -> bool {
        self != TicketState::Open
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The answer, made safe for a terminal (see [`crate::sanitize`]): agents' TUIs show it.
    pub text: String,
    pub at: Millis,
    /// What [`crate::sanitize`] showed visibly instead of passing on, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub altered: Option<String>,
}

impl Reply {
    /// A reply, tail or remote answer as it is kept: neutralised, with a note if it changed.
    pub fn new(text: String, at: Millis) -> Self {
        let (text, alteration) = crate::sanitize::for_terminal(&text);
        Reply {
            text,
            at,
            altered: alteration.describe(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub id: TicketId,
    pub kind: TicketKind,
    /// Who opened it and polls it.
    pub from: Party,
    /// Who owns it and must reply.
    pub to: MemberName,
    /// The message that carried it, for its delivery receipt.
    pub msg: Option<MsgId>,
    /// The first line of the message, for listings.
    pub subject: String,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub state: TicketState,
    pub reply: Option<Reply>,
    /// "worker finished without a structured fleet_reply — transcript tail follows".
    pub tail: Option<Reply>,
    /// Replies that came after the TTL: refused, but kept visible.
    pub late: Vec<Reply>,
    pub note: Option<String>,
    pub acked: bool,
    pub updated_at: Millis,
    /// Lead-to-lead mail this host sent: the remote host and the receipt as it travelled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteReceipt>,
    /// Lead-to-lead mail this host received: the sender's host and its ticket (the one answers
    /// go back to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// The receipt of a message sent to another host's lead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteReceipt {
    pub host: String,
    /// `queued` (durable in this host's outbox), `transmitted` (durable on the receiving host),
    /// then the receiving injector's states as they come back.
    pub state: ReceiptState,
    pub queued_at: Millis,
    pub transmitted_at: Option<Millis>,
    pub delivered_at: Option<Millis>,
    pub settled_at: Option<Millis>,
    pub note: Option<String>,
    /// The receiving host pastes the text made safe (see [`crate::sanitize`]); this says what
    /// it will show visibly instead of passing on, as the sender's own check found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub altered: Option<String>,
}

/// Where a received lead-to-lead message came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub host: String,
    pub ticket: TicketId,
}

/// What the receiving host reports on a ticket this host sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteUpdate {
    /// This host's outbox entry is durable on the receiver.
    Transmitted,
    /// The receiving injector's receipt.
    Receipt {
        state: ReceiptState,
        note: Option<String>,
    },
    /// The ticket on the receiving host resolved: replied, tail, undeliverable or expired.
    Answer {
        state: TicketState,
        text: Option<String>,
        note: Option<String>,
    },
}

/// Order of receipt states as they may only move forward (a stale report never undoes a newer one).
fn receipt_rank(s: ReceiptState) -> u8 {
    match s {
        ReceiptState::Queued => 0,
        ReceiptState::Transmitted => 1,
        ReceiptState::Delivered => 2,
        ReceiptState::Stalled => 3,
        ReceiptState::Accepted | ReceiptState::Failed => 4,
    }
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Persist the ticket durably before anything after it.
    Save(Ticket),
    /// Forget a ticket past retention.
    Delete(TicketId),
    /// A waiter's ticket resolved: answer it with the ticket.
    Wake { waiter: u64, ticket: Ticket },
    /// A waiter's bounded wait ran out: answer it with the still-open ticket.
    WaitExpired { waiter: u64, ticket: Ticket },
    /// Record durably that message numbers up to this one may have been handed out, before
    /// any of them is (so no restart hands one out twice).
    ReserveMsgIds(u64),
}

/// How many message numbers one durable reservation covers: one store write per this many
/// messages.
pub const MSG_ID_BLOCK: u64 = 1024;

#[derive(Clone, Debug)]
struct Waiter {
    id: u64,
    ticket: TicketId,
    deadline: Millis,
}

/// The desk: all tickets and the bounded waits on them.
#[derive(Clone, Debug)]
pub struct Desk {
    tickets: BTreeMap<TicketId, Ticket>,
    waiters: Vec<Waiter>,
    next_id: u64,
    retention: usize,
    /// The next message number, and the highest one durably reserved.
    next_msg: u64,
    msg_reserved: u64,
}

/// A message's text, as every send, reply and ask takes it: not empty, and at most `max`
/// bytes (`injector.max_message_bytes`), refused whole rather than cut.
pub fn check_message(what: &str, text: &str, max: usize) -> Result<(), FleetError> {
    if text.len() > max {
        return Err(FleetError::invalid(
            what,
            format!(
                "the message is {} bytes; the limit is injector.max_message_bytes = {max}",
                text.len()
            ),
            format!(
                "a message of at most {max} bytes (put long content in a file and send its path)"
            ),
        ));
    }
    if text.trim().is_empty() {
        return Err(FleetError::invalid(
            what,
            "the message is empty",
            "a non-empty message",
        ));
    }
    Ok(())
}

/// A member never sends to itself (its own message would wait for its own turn to end).
pub fn check_not_self(what: &str, from: &Party, to: &MemberName) -> Result<(), FleetError> {
    if from.member() == Some(to) {
        return Err(FleetError::invalid(
            what,
            "a member cannot send to itself",
            "a message to another member",
        ));
    }
    Ok(())
}

/// The first line of a message, at most 80 characters.
pub fn subject_of(body: &str) -> String {
    crate::types::truncate(
        body.lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim(),
        80,
    )
}

impl Desk {
    /// The desk over the stored tickets. `msg_floor` is the highest message number that may
    /// have been handed out before (the larger of the highest stored message and the last
    /// durable reservation): numbering resumes above it.
    pub fn new(tickets: Vec<Ticket>, next_id: u64, retention: usize, msg_floor: u64) -> Self {
        let max_id = tickets.iter().map(|t| t.id.0).max().unwrap_or(0);
        let max_msg = tickets.iter().filter_map(|t| t.msg).map(|m| m.0).max();
        let floor = msg_floor.max(max_msg.unwrap_or(0));
        Desk {
            tickets: tickets.into_iter().map(|t| (t.id, t)).collect(),
            waiters: vec![],
            next_id: next_id.max(max_id + 1),
            retention,
            next_msg: floor + 1,
            msg_reserved: floor,
        }
    }

    /// The next message number: every message the daemon queues (a ticket's, or one from
    /// `fleetd` itself) is numbered here. Past the durable reservation, the effects reserve the
    /// next block first.
    pub fn number_message(&mut self) -> (MsgId, Vec<Effect>) {
        let id = self.next_msg;
        self.next_msg += 1;
        let mut fx = vec![];
        if id > self.msg_reserved {
            self.msg_reserved = id + MSG_ID_BLOCK - 1;
            fx.push(Effect::ReserveMsgIds(self.msg_reserved));
        }
        (MsgId(id), fx)
    }

    pub fn set_retention(&mut self, retention: usize) {
        self.retention = retention;
    }

    pub fn get(&self, id: TicketId) -> Option<&Ticket> {
        self.tickets.get(&id)
    }

    pub fn all(&self) -> impl Iterator<Item = &Ticket> {
        self.tickets.values()
    }

    /// The id the next ticket will get (persisted so ids never repeat).
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    fn not_found(id: TicketId) -> FleetError {
        FleetError::not_found(
            format!("ticket {id}"),
            "no such ticket (it never existed, or it aged out of retention)",
            "a ticket id returned by fleet_send or fleet_ask",
        )
    }

    /// Open a ticket; `ttl_ms` from now. `remote`: it carries lead-to-lead mail this host sends;
    /// `origin`: it is for mail another host sent.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &mut self,
        kind: TicketKind,
        from: Party,
        to: MemberName,
        msg: Option<MsgId>,
        body: &str,
        ttl_ms: Millis,
        now: Millis,
        remote: Option<RemoteReceipt>,
        origin: Option<Origin>,
    ) -> (Ticket, Vec<Effect>) {
        let id = TicketId(self.next_id);
        self.next_id += 1;
        let t = Ticket {
            id,
            kind,
            from,
            to,
            msg,
            subject: subject_of(body),
            created_at: now,
            expires_at: now + ttl_ms,
            state: TicketState::Open,
            reply: None,
            tail: None,
            late: vec![],
            note: None,
            acked: false,
            updated_at: now,
            remote,
            origin,
        };
        self.tickets.insert(id, t.clone());
        let mut fx = vec![Effect::Save(t.clone())];
        self.trim(&mut fx);
        (t, fx)
    }

    /// A ticket committed by someone else (the injector, with its message): keep it if this desk
    /// does not know it (it restarted in between).
    pub fn adopt(&mut self, t: Ticket) {
        self.next_id = self.next_id.max(t.id.0 + 1);
        self.tickets.entry(t.id).or_insert(t);
    }

    /// Attach the message id once the injector has queued it.
    pub fn set_msg(&mut self, id: TicketId, msg: MsgId) -> Vec<Effect> {
        match self.tickets.get_mut(&id) {
            Some(t) => {
                t.msg = Some(msg);
                vec![Effect::Save(t.clone())]
            }
            None => vec![],
        }
    }

    /// `caller` replies to ticket `id`. Only the ticket's owner may; after the TTL the reply is
    /// refused as late and kept visible on the ticket.
    #[allow(clippy::result_large_err)] // a refusal carries the effects to persist with it
    pub fn reply(
        &mut self,
        caller: &Caller,
        id: TicketId,
        text: String,
        now: Millis,
    ) -> Result<(Ticket, Vec<Effect>), (FleetError, Vec<Effect>)> {
        let Some(t) = self.tickets.get_mut(&id) else {
            return Err((Self::not_found(id), vec![]));
        };
        if let Err(e) = authorize(
            caller,
            &Action::Reply { owner: &t.to },
            &format!("fleet_reply to {id}"),
        ) {
            return Err((e, vec![]));
        }
        let what = format!("fleet_reply to {id}");
        if let Some(r) = &t.remote {
            return Err((
                FleetError::conflict(
                    what,
                    format!(
                        "{id} is a message this host sent to the lead of `{}`; its answer comes from there",
                        r.host
                    ),
                    "fleet_reply to a ticket you received (fleet_poll shows the answer to this one)",
                ),
                vec![],
            ));
        }
        match t.state {
            TicketState::Replied => {
                return Err((
                    FleetError::conflict(
                        what,
                        format!("{id} already has a reply"),
                        "one fleet_reply per ticket",
                    ),
                    vec![],
                ));
            }
            TicketState::Expired | TicketState::Open | TicketState::Tail
                if t.state == TicketState::Expired || now >= t.expires_at =>
            {
                if t.state == TicketState::Open {
                    t.state = TicketState::Expired;
                    t.note = Some(format!("no reply from `{}` within the ticket TTL", t.to));
                }
                t.late.push(Reply::new(text, now));
                t.updated_at = now;
                let e = FleetError::new(
                    ErrorKind::Late,
                    what,
                    format!(
                        "{id} expired at its TTL, {} ms before this reply; the reply is kept on the ticket as late, but the sender was not answered with it",
                        now.saturating_sub(t.expires_at)
                    ),
                    "a reply before the ticket's expires_at; for a long task, reply with progress early",
                );
                let t = t.clone();
                let mut fx = vec![Effect::Save(t.clone())];
                if t.state == TicketState::Expired {
                    self.wake(&t, &mut fx);
                }
                return Err((e, fx));
            }
            TicketState::Undeliverable => {
                return Err((
                    FleetError::conflict(
                        what,
                        format!("{id} was never delivered"),
                        "a reply to a ticket you received",
                    ),
                    vec![],
                ));
            }
            TicketState::Open | TicketState::Tail | TicketState::Expired => {}
        }
        t.state = TicketState::Replied;
        t.reply = Some(Reply::new(text, now));
        t.updated_at = now;
        t.acked = false;
        let t = t.clone();
        let mut fx = vec![Effect::Save(t.clone())];
        self.wake(&t, &mut fx);
        Ok((t, fx))
    }

    /// The owner's turn that took ticket `id` ended without fleet_reply: attach the tail.
    pub fn turn_ended(&mut self, id: TicketId, tail: String, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if let Some(t) = self.tickets.get_mut(&id)
            && t.state == TicketState::Open
        {
            t.state = TicketState::Tail;
            t.tail = Some(Reply::new(tail, now));
            t.note = Some(format!(
                "`{}` finished its turn without a structured fleet_reply; the transcript tail follows",
                t.to
            ));
            t.updated_at = now;
            let t = t.clone();
            fx.push(Effect::Save(t.clone()));
            self.wake(&t, &mut fx);
        }
        fx
    }

    /// The message carrying ticket `id` can never be delivered.
    pub fn undeliverable(&mut self, id: TicketId, why: &str, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        if let Some(t) = self.tickets.get_mut(&id)
            && t.state == TicketState::Open
        {
            t.state = TicketState::Undeliverable;
            t.note = Some(why.to_string());
            t.updated_at = now;
            let t = t.clone();
            fx.push(Effect::Save(t.clone()));
            self.wake(&t, &mut fx);
        }
        fx
    }

    /// The receiving host reported on ticket `id`, which this host sent it. Idempotent: a
    /// report that arrives twice, or after a newer one, changes nothing.
    pub fn remote_update(&mut self, id: TicketId, u: RemoteUpdate, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        let Some(t) = self.tickets.get_mut(&id) else {
            return fx;
        };
        let Some(r) = t.remote.as_mut() else {
            return fx;
        };
        let mut changed = false;
        let mut resolved = false;
        match u {
            RemoteUpdate::Transmitted | RemoteUpdate::Receipt { .. } => {
                let (state, note) = match u {
                    RemoteUpdate::Receipt { state, note } => (state, note),
                    _ => (ReceiptState::Transmitted, None),
                };
                if r.transmitted_at.is_none() {
                    r.transmitted_at = Some(now);
                    changed = true;
                }
                if state == ReceiptState::Delivered && r.delivered_at.is_none() {
                    r.delivered_at = Some(now);
                    changed = true;
                }
                if receipt_rank(state) > receipt_rank(r.state) {
                    r.state = state;
                    r.note = note;
                    if state.is_final() {
                        r.settled_at = Some(now);
                    }
                    changed = true;
                }
            }
            RemoteUpdate::Answer { state, text, note } => {
                if t.state == TicketState::Open && state.is_resolved() {
                    let reply = text.map(|text| Reply::new(text, now));
                    match state {
                        TicketState::Replied => t.reply = reply,
                        TicketState::Tail => t.tail = reply,
                        _ => {}
                    }
                    t.state = state;
                    t.note = note;
                    changed = true;
                    resolved = true;
                }
            }
        }
        if changed {
            t.updated_at = now;
            let t = t.clone();
            fx.push(Effect::Save(t.clone()));
            if resolved {
                self.wake(&t, &mut fx);
            }
        }
        fx
    }

    /// The ticket this host opened for a message received from `origin`, if it still has one
    /// (so a message handed over once is never handed over again).
    pub fn by_origin(&self, origin: &Origin) -> Option<&Ticket> {
        self.tickets
            .values()
            .find(|t| t.origin.as_ref() == Some(origin))
    }

    /// Wait on ticket `id` until `deadline`. Answers at once if it is already resolved.
    pub fn wait(
        &mut self,
        id: TicketId,
        waiter: u64,
        deadline: Millis,
    ) -> Result<Option<Ticket>, FleetError> {
        let t = self.tickets.get(&id).ok_or_else(|| Self::not_found(id))?;
        if t.state.is_resolved() {
            return Ok(Some(t.clone()));
        }
        self.waiters.push(Waiter {
            id: waiter,
            ticket: id,
            deadline,
        });
        Ok(None)
    }

    pub fn cancel_wait(&mut self, waiter: u64) {
        self.waiters.retain(|w| w.id != waiter);
    }

    /// Expire tickets past their TTL and waits past their deadline.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = vec![];
        let expired: Vec<TicketId> = self
            .tickets
            .values()
            .filter(|t| t.state == TicketState::Open && now >= t.expires_at)
            .map(|t| t.id)
            .collect();
        for id in expired {
            if let Some(t) = self.tickets.get_mut(&id) {
                t.state = TicketState::Expired;
                t.note = Some(format!("no reply from `{}` within the ticket TTL", t.to));
                t.updated_at = now;
                let t = t.clone();
                fx.push(Effect::Save(t.clone()));
                self.wake(&t, &mut fx);
            }
        }
        let (due, keep): (Vec<Waiter>, Vec<Waiter>) =
            self.waiters.drain(..).partition(|w| now >= w.deadline);
        self.waiters = keep;
        for w in due {
            if let Some(t) = self.tickets.get(&w.ticket) {
                fx.push(Effect::WaitExpired {
                    waiter: w.id,
                    ticket: t.clone(),
                });
            }
        }
        fx
    }

    /// The earliest time `tick` has work to do.
    pub fn next_deadline(&self) -> Option<Millis> {
        let t = self
            .tickets
            .values()
            .filter(|t| t.state == TicketState::Open)
            .map(|t| t.expires_at)
            .min();
        let w = self.waiters.iter().map(|w| w.deadline).min();
        match (t, w) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `party`'s own tickets (the ones it opened) that it has not acknowledged, oldest first.
    pub fn poll(&self, party: &Party) -> Vec<Ticket> {
        self.tickets
            .values()
            .filter(|t| &t.from == party && !t.acked)
            .cloned()
            .collect()
    }

    /// Tickets addressed to `member` that are still open (what it owes).
    pub fn owed_by(&self, member: &MemberName) -> Vec<Ticket> {
        self.tickets
            .values()
            .filter(|t| &t.to == member && t.state == TicketState::Open)
            .cloned()
            .collect()
    }

    /// Acknowledge a resolved ticket so poll stops returning it. Only its opener may.
    pub fn ack(
        &mut self,
        party: &Party,
        id: TicketId,
        now: Millis,
    ) -> Result<Vec<Effect>, FleetError> {
        let t = self
            .tickets
            .get_mut(&id)
            .ok_or_else(|| Self::not_found(id))?;
        if &t.from != party {
            return Err(FleetError::new(
                ErrorKind::Forbidden,
                format!("fleet_ack of {id}"),
                format!("{id} was opened by `{}`, not by `{party}`", t.from),
                "fleet_ack of a ticket you opened (see fleet_poll)",
            )
            .with_rule("READ"));
        }
        if !t.state.is_resolved() {
            return Err(FleetError::conflict(
                format!("fleet_ack of {id}"),
                format!("{id} is still open"),
                "fleet_ack once fleet_poll shows the ticket replied, tail, undeliverable or expired",
            ));
        }
        t.acked = true;
        t.updated_at = now;
        let mut fx = vec![Effect::Save(t.clone())];
        self.trim(&mut fx);
        Ok(fx)
    }

    fn wake(&mut self, t: &Ticket, fx: &mut Vec<Effect>) {
        let (hit, keep): (Vec<Waiter>, Vec<Waiter>) =
            self.waiters.drain(..).partition(|w| w.ticket == t.id);
        self.waiters = keep;
        for w in hit {
            fx.push(Effect::Wake {
                waiter: w.id,
                ticket: t.clone(),
            });
        }
    }

    /// Keep at most `retention` tickets: drop the oldest resolved ones, acknowledged first.
    /// Once over, it drops down to a tenth below the bound, so the walk over every ticket and
    /// the commit of the deletions come once per `retention / 10` new tickets, not with each
    /// (each send at the bound would otherwise pay a sort of all of them and a commit of one).
    fn trim(&mut self, fx: &mut Vec<Effect>) {
        if self.tickets.len() <= self.retention {
            return;
        }
        let excess = self.tickets.len() - (self.retention - self.retention / 10);
        let mut candidates: Vec<(bool, Millis, TicketId)> = self
            .tickets
            .values()
            .filter(|t| t.state.is_resolved())
            .map(|t| (!t.acked, t.updated_at, t.id))
            .collect();
        candidates.sort();
        for (_, _, id) in candidates.into_iter().take(excess) {
            self.tickets.remove(&id);
            fx.push(Effect::Delete(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_numbered_once_across_restarts() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        let (first, fx) = d.number_message();
        assert_eq!(first, MsgId(1));
        assert!(matches!(fx.as_slice(), [Effect::ReserveMsgIds(n)] if *n == MSG_ID_BLOCK));
        let mut last = first;
        for _ in 1..MSG_ID_BLOCK {
            let (m, fx) = d.number_message();
            assert!(fx.is_empty(), "inside the reserved block");
            assert_eq!(m.0, last.0 + 1);
            last = m;
        }
        let (m, fx) = d.number_message();
        assert_eq!(m.0, MSG_ID_BLOCK + 1);
        assert!(matches!(fx.as_slice(), [Effect::ReserveMsgIds(n)] if *n == 2 * MSG_ID_BLOCK));
        // A restart resumes above the durable reservation, not above the stored messages: a
        // number handed out but not yet stored is never handed out again.
        let mut again = Desk::new(vec![], 1, 100, 2 * MSG_ID_BLOCK);
        assert_eq!(again.number_message().0, MsgId(2 * MSG_ID_BLOCK + 1));
        // A stored ticket's message above the floor moves the floor too.
        let mut t = Desk::new(vec![], 1, 100, 0)
            .open(
                TicketKind::Send,
                Party::Operator,
                MemberName::new("w1").unwrap(),
                Some(MsgId(77)),
                "x",
                10,
                0,
                None,
                None,
            )
            .0;
        t.id = TicketId(5);
        let mut d3 = Desk::new(vec![t], 1, 100, 3);
        assert_eq!(d3.number_message().0, MsgId(78));
    }

    #[test]
    fn a_message_is_not_empty_nor_over_the_limit_and_not_to_oneself() {
        assert!(check_message("send", "hello", 5).is_ok());
        let e = check_message("send", "hello!", 5).unwrap_err();
        assert!(e.why.contains("6 bytes") && e.why.contains("= 5"), "{e}");
        assert!(
            check_message("send", " \n\t", 5)
                .unwrap_err()
                .why
                .contains("empty")
        );
        let w1 = MemberName::new("w1").unwrap();
        let w2 = MemberName::new("w2").unwrap();
        assert!(check_not_self("send", &Party::Member(w2.clone()), &w1).is_ok());
        assert!(check_not_self("send", &Party::Operator, &w1).is_ok());
        let e = check_not_self("send", &Party::Member(w1.clone()), &w1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
    }
    use crate::types::{MemberIdentity, Role};
    use proptest::prelude::*;

    fn n(s: &str) -> MemberName {
        MemberName::new(s).unwrap()
    }
    fn member(name: &str, role: Role) -> Caller {
        Caller::Member(MemberIdentity {
            name: n(name),
            role,
            slot: None,
        })
    }
    fn lead() -> Party {
        Party::Member(n("lead"))
    }

    /// The lead sends `body` to `to`: a ticket open for `ttl_ms` from `now`.
    fn send(
        d: &mut Desk,
        to: &str,
        body: &str,
        ttl_ms: Millis,
        now: Millis,
    ) -> (Ticket, Vec<Effect>) {
        d.open(
            TicketKind::Send,
            lead(),
            n(to),
            None,
            body,
            ttl_ms,
            now,
            None,
            None,
        )
    }

    #[test]
    fn reply_by_owner_wakes_waiter() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        let (t, fx) = send(&mut d, "w1", "do x\nmore", 1_000, 0);
        assert_eq!(t.subject, "do x");
        assert!(matches!(&fx[..], [Effect::Save(_)]));
        assert_eq!(d.wait(t.id, 7, 500).unwrap(), None);
        // Someone else cannot reply.
        let (e, _) = d
            .reply(&member("w2", Role::Worker), t.id, "x".into(), 10)
            .unwrap_err();
        assert_eq!(e.rule.as_deref(), Some("REPLY"));
        let (e, _) = d
            .reply(&member("lead", Role::Primary), t.id, "x".into(), 10)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Forbidden);
        let (e, _) = d
            .reply(&Caller::NotMember { pid: None }, t.id, "x".into(), 10)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Forbidden);
        let (t2, fx) = d
            .reply(&member("w1", Role::Worker), t.id, "done".into(), 20)
            .unwrap();
        assert_eq!(t2.state, TicketState::Replied);
        assert!(matches!(&fx[0], Effect::Save(_)));
        assert!(matches!(&fx[1], Effect::Wake { waiter: 7, .. }));
        // A second reply is refused.
        assert!(
            d.reply(&member("w1", Role::Worker), t.id, "again".into(), 21)
                .is_err()
        );
        assert_eq!(d.poll(&lead()).len(), 1);
        d.ack(&lead(), t.id, 30).unwrap();
        assert!(d.poll(&lead()).is_empty());
    }

    #[test]
    fn ttl_expiry_then_late_reply_is_refused_and_kept() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        let (t, _) = send(&mut d, "w1", "x", 1_000, 0);
        assert!(d.tick(999).is_empty());
        let fx = d.tick(1_000);
        assert!(matches!(&fx[..], [Effect::Save(t)] if t.state == TicketState::Expired));
        let (e, fx) = d
            .reply(
                &member("w1", Role::Worker),
                t.id,
                "late answer".into(),
                1_500,
            )
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Late);
        assert!(e.why.contains("500 ms"), "{e}");
        assert!(
            matches!(&fx[..], [Effect::Save(t)] if t.late.len() == 1 && t.late[0].text == "late answer")
        );
        assert_eq!(d.get(t.id).unwrap().late.len(), 1);
    }

    #[test]
    fn turn_end_without_reply_attaches_tail_and_reply_still_wins() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        let (t, _) = send(&mut d, "w1", "x", 1_000, 0);
        d.wait(t.id, 1, 900).unwrap();
        let fx = d.turn_ended(t.id, "last lines".into(), 10);
        assert!(fx.iter().any(
            |e| matches!(e, Effect::Wake { waiter: 1, ticket } if ticket.state == TicketState::Tail)
        ));
        let got = d.get(t.id).unwrap();
        assert!(
            got.note
                .as_deref()
                .unwrap()
                .contains("without a structured fleet_reply")
        );
        // A reply that arrives afterwards still counts.
        let (t2, _) = d
            .reply(&member("w1", Role::Worker), t.id, "real".into(), 20)
            .unwrap();
        assert_eq!(t2.state, TicketState::Replied);
        assert_eq!(t2.tail.as_ref().unwrap().text, "last lines");
        // Turn end after a reply changes nothing.
        assert!(d.turn_ended(t.id, "x".into(), 30).is_empty());
    }

    #[test]
    fn bounded_wait_expires_with_open_ticket() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        let (t, _) = d.open(
            TicketKind::Ask,
            Party::Member(n("w1")),
            n("lead"),
            None,
            "q?",
            10_000,
            0,
            None,
            None,
        );
        d.wait(t.id, 3, 55).unwrap();
        assert_eq!(d.next_deadline(), Some(55));
        let fx = d.tick(55);
        assert!(
            matches!(&fx[..], [Effect::WaitExpired { waiter: 3, ticket }] if ticket.state == TicketState::Open)
        );
    }

    #[test]
    fn ack_rules() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        let (t, _) = send(&mut d, "w1", "x", 1_000, 0);
        assert_eq!(
            d.ack(&lead(), t.id, 1).unwrap_err().kind,
            ErrorKind::Conflict
        );
        d.tick(2_000);
        assert_eq!(
            d.ack(&Party::Operator, t.id, 1).unwrap_err().kind,
            ErrorKind::Forbidden
        );
        d.ack(&lead(), t.id, 1).unwrap();
    }

    #[test]
    fn retention_drops_oldest_acked_first_never_open() {
        let mut d = Desk::new(vec![], 1, 3, 0);
        let mut ids = vec![];
        for i in 0..3 {
            let (t, _) = send(&mut d, "w1", "x", 10, i);
            ids.push(t.id);
        }
        d.tick(100); // all expired
        d.ack(&lead(), ids[1], 101).unwrap();
        let (_, fx) = send(&mut d, "w1", "y", 10, 102);
        assert!(fx.contains(&Effect::Delete(ids[1])), "{fx:?}");
        let (_, _) = send(&mut d, "w1", "z", 10, 103);
        assert_eq!(d.all().filter(|t| t.state == TicketState::Open).count(), 2);
    }

    #[test]
    fn at_the_retention_bound_tickets_are_dropped_a_tenth_at_a_time_not_one_per_send() {
        let mut d = Desk::new(vec![], 1, 100, 0);
        for i in 0..100 {
            send(&mut d, "w1", "x", 10, i);
        }
        d.tick(1_000); // all expired: each may be dropped
        let mut trims = 0;
        for i in 0..100 {
            let (_, fx) = send(&mut d, "w1", "y", 10_000, 2_000 + i);
            let deleted = fx.iter().filter(|e| matches!(e, Effect::Delete(_))).count();
            if deleted > 0 {
                trims += 1;
                // Down to 90 from 101, or as many resolved ones as are left.
                assert!(deleted <= 11, "{fx:?}");
                assert!(trims > 1 || deleted == 11, "{fx:?}");
            }
            assert!(d.all().count() <= 100, "the bound holds");
        }
        assert!(trims <= 10, "{trims} trims in 100 sends");
        // The ones dropped are resolved ones; every send of this loop is still there.
        assert_eq!(
            d.all().filter(|t| t.state == TicketState::Open).count(),
            100
        );
    }

    proptest! {
        /// Whatever happens, a ticket's reply is only ever from its owner, resolved tickets never
        /// go back to open, and nothing is resolved before its TTL except by reply/tail.
        #[test]
        fn ticket_rules(ops in proptest::collection::vec((0u8..5, 0u8..3, 0u16..400), 1..100)) {
            let mut d = Desk::new(vec![], 1, 1_000, 0);
            let names = ["w1", "w2", "lead"];
            let mut now = 0;
            let mut ids = vec![];
            for (op, who, dt) in ops {
                now += dt as u64;
                match op {
                    0 => { let (t, _) = send(&mut d, names[who as usize % 2], "x", 1_000, now); ids.push(t.id); }
                    1 => if let Some(id) = ids.get(who as usize).copied() {
                        let caller = member(names[who as usize], Role::Worker);
                        let before = d.get(id).unwrap().clone();
                        match d.reply(&caller, id, "r".into(), now) {
                            Ok((t, _)) => {
                                prop_assert_eq!(&t.to, &n(names[who as usize]));
                                prop_assert!(now < t.expires_at);
                            }
                            Err(_) => {
                                let after = d.get(id).unwrap();
                                let expired_now = before.state == TicketState::Open
                                    && after.state == TicketState::Expired
                                    && now >= after.expires_at;
                                prop_assert!(after.state == before.state || expired_now);
                            }
                        }
                    },
                    2 => { d.tick(now); }
                    3 => if let Some(id) = ids.get(who as usize).copied() { d.turn_ended(id, "tail".into(), now); },
                    _ => if let Some(id) = ids.get(who as usize).copied() { let _ = d.ack(&lead(), id, now); },
                }
                for t in d.all() {
                    if t.state == TicketState::Expired { prop_assert!(t.reply.is_none()); }
                    if let Some(r) = &t.reply { prop_assert!(r.at < t.expires_at); }
                }
            }
        }
    }
}
