//! What an injector is asked and told: its messages, and the queue it shows. Below both the
//! injector and the slot (which reports to it), so neither shell imports the other both ways.

use ractor::RpcReplyPort;
use serde::Serialize;

use crate::error::FleetError;
use crate::injector::state::{Message, TargetView};
use crate::tickets::state::Ticket;
use crate::types::MsgId;

pub enum InjectorMsg {
    /// Queue a message. `ticket`, when given, is the message's ticket, not yet durable: it is
    /// committed in the same transaction as the message, so a send costs one fsync. Answered,
    /// once committed, with the message as committed (queued, or already delivered).
    Enqueue {
        msg: Box<Message>,
        ticket: Option<Box<Ticket>>,
        reply: RpcReplyPort<Result<Message, FleetError>>,
    },
    Target(TargetView),
    /// The slot saw the agent start a turn on message `id`.
    TurnStarted {
        id: MsgId,
    },
    /// The slot saw no turn start on message `id` in time; `why` says why, `screen` what the
    /// screen showed (screen text: kept apart, shown by the Screen rule).
    NotStarted {
        id: MsgId,
        why: String,
        screen: Option<String>,
    },
    Tick,
    PasteResult {
        id: MsgId,
        result: Result<(), String>,
    },
    Queue {
        reply: RpcReplyPort<QueueView>,
    },
    /// How many messages are queued or in flight (without copying them).
    Depth {
        reply: RpcReplyPort<usize>,
    },
    Reload,
    /// Shutting down: deliver nothing more.
    Quiesce {
        reply: RpcReplyPort<()>,
    },
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
}

/// A target's queue as status views show it.
#[derive(Clone, Debug, Serialize)]
pub struct QueueView {
    pub in_flight: Option<Message>,
    pub queued: Vec<Message>,
    pub stalled: bool,
}

impl QueueView {
    /// The queue as `caller` may see it: its shape (ids, senders, tickets, states, times,
    /// notes) always; each body only if `caller` may read that message
    /// (`authz::body_visible`: its parties and the operator), blanked otherwise; what the
    /// target's screen showed only by the Screen rule (`authz::screen_visible`).
    pub fn seen_by(mut self, caller: &crate::types::Caller) -> QueueView {
        for m in self.in_flight.iter_mut().chain(self.queued.iter_mut()) {
            if !crate::authz::body_visible(caller, &m.from, &m.target) {
                m.body = String::new();
                m.altered = None;
            }
            if !crate::authz::screen_visible(caller, &m.target) {
                m.screen = None;
            }
        }
        self
    }
}
