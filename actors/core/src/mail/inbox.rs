//! The receiving side's hand-on: received traffic held (stored and acknowledged) until the lead
//! takes it, and what goes back to the sender.
//!
//! Owns the hand-on order (the reports in a round go to the desk together; each peer's mail
//! reaches the lead in order, and a refused message holds the rest of its peer's mail), the
//! bound on held mail (`MAX_HELD`), which events are news for another host (`report_of`) and
//! what a resolved received ticket tells its origin (`answer_of`). Pure: the shell stores and
//! hands on; this decides the order. Must never do I/O.

use std::collections::VecDeque;

use super::envelope::{Envelope, Item};
use crate::events::EventKind;
use crate::tickets::state::{RemoteUpdate, Ticket, TicketState};
use crate::types::{MemberName, Party, TicketId};

/// At most this many received messages are held for the lead (no live primary yet); a peer's
/// further mail is left in its outbox until the lead takes some (backpressure, not loss).
pub const MAX_HELD: usize = 10_000;

/// Received traffic stored and acknowledged but not yet handed on, in arrival order. Each
/// envelope carries this host's own arrival number (its key in the store): the sender's seq
/// is not unique once the sender starts a new epoch.
///
/// Owns the hand-on rule: the reports in a round go to the desk together (they are idempotent
/// and need no order with mail); each peer's mail goes to the lead in order, and once one of a
/// peer's messages is refused, the rest of that peer's mail waits behind it (FIFO per peer,
/// across rounds). Also the bound on held mail (`room`).
#[derive(Clone, Debug, Default)]
pub struct Inbox {
    held: VecDeque<(String, u64, Envelope)>,
    /// How many of `held` are mail (the rest are reports).
    mails: usize,
    /// The next arrival number.
    next: u64,
}

impl Inbox {
    /// The arrival number the next envelope stored should get (then `push` it with it).
    pub fn next_arrival(&self) -> u64 {
        self.next.max(1)
    }

    /// Hold an envelope from `peer`, stored under `arrival`.
    pub fn push(&mut self, peer: String, arrival: u64, env: Envelope) {
        self.mails += usize::from(matches!(env.item, Item::Mail { .. }));
        self.next = self.next.max(arrival + 1);
        self.held.push_back((peer, arrival, env));
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// How many received messages are held for the lead.
    pub fn mails(&self) -> usize {
        self.mails
    }

    /// How many more messages may be accepted for the lead (`MAX_HELD` in all).
    pub fn room(&self) -> usize {
        MAX_HELD.saturating_sub(self.mails)
    }

    /// What is held, oldest first: (peer, arrival, envelope).
    pub fn iter(&self) -> impl Iterator<Item = &(String, u64, Envelope)> {
        self.held.iter()
    }

    /// Start handing on everything held. Feed the round the desk's answer to its reports and
    /// the lead's answer to each mail it gives, then `end` it.
    pub fn round(&mut self) -> Round {
        self.mails = 0;
        Round {
            pending: std::mem::take(&mut self.held),
            applied: false,
            blocked: vec![],
            current: None,
            keep: vec![],
            done: vec![],
        }
    }

    /// A round is over: what it did not hand on is held again, in its order. Returns what it
    /// handed on, (peer, arrival), to drop from the store.
    pub fn end(&mut self, mut r: Round) -> Vec<(String, u64)> {
        // Anything the round did not get to (it was ended early) is kept too, and so is
        // anything that arrived meanwhile, behind it.
        r.handed(false);
        let arrived = std::mem::take(&mut self.held);
        self.mails = 0;
        for (peer, arrival, env) in r.keep.into_iter().chain(r.pending).chain(arrived) {
            self.push(peer, arrival, env);
        }
        r.done
    }
}

/// One mail to hand to the lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToHand {
    pub peer: String,
    /// The sender's sequence number.
    pub seq: u64,
    pub ticket: TicketId,
    pub from: MemberName,
    pub body: String,
}

/// A hand-on round over what the inbox held (see `Inbox`).
#[derive(Debug)]
pub struct Round {
    pending: VecDeque<(String, u64, Envelope)>,
    applied: bool,
    /// Peers one of whose messages the lead refused this round.
    blocked: Vec<String>,
    /// The mail `next_mail` gave, waiting for `handed`.
    current: Option<(String, u64, Envelope)>,
    keep: Vec<(String, u64, Envelope)>,
    /// (peer, arrival) of what was handed on.
    done: Vec<(String, u64)>,
}

impl Round {
    /// The round's reports, to apply together before any mail is asked for.
    pub fn reports(&self) -> Vec<(TicketId, RemoteUpdate)> {
        self.pending
            .iter()
            .filter_map(|(_, _, e)| match &e.item {
                Item::Update { ticket, update } => Some((*ticket, update.clone())),
                Item::Mail { .. } => None,
            })
            .collect()
    }

    /// Whether the desk took the reports; if not, they stay held.
    pub fn reports_applied(&mut self, ok: bool) {
        self.applied = ok;
    }

    /// The next mail to hand to the lead, or `None` once the round has gone through everything.
    /// Reports pass by (handed on or kept as the desk answered), and so does the mail of a peer
    /// blocked this round. Answer each with `handed` before asking for the next.
    pub fn next_mail(&mut self) -> Option<ToHand> {
        // Asked again without an answer: the last one was not handed on.
        self.handed(false);
        while let Some((peer, arrival, env)) = self.pending.pop_front() {
            match &env.item {
                Item::Update { .. } if self.applied => self.done.push((peer, arrival)),
                Item::Mail {
                    ticket, from, body, ..
                } if !self.blocked.contains(&peer) => {
                    let m = ToHand {
                        peer: peer.clone(),
                        seq: env.seq,
                        ticket: *ticket,
                        from: from.clone(),
                        body: body.clone(),
                    };
                    self.current = Some((peer, arrival, env));
                    return Some(m);
                }
                _ => self.keep.push((peer, arrival, env)),
            }
        }
        None
    }

    /// The lead took (`true`) or refused the mail `next_mail` gave; a refusal holds the rest of
    /// that peer's mail for this round.
    pub fn handed(&mut self, ok: bool) {
        let Some((peer, arrival, env)) = self.current.take() else {
            return;
        };
        if ok {
            self.done.push((peer, arrival));
        } else {
            self.blocked.push(peer.clone());
            self.keep.push((peer, arrival, env));
        }
    }
}

/// Which event on this host is news for another host: a receipt for mail it sent (reported as
/// is), or the resolution of a ticket it opened here (reported as the ticket's answer, looked up
/// with `answer_of`: `None` here). Everything else stays here.
pub fn report_of(ev: &EventKind) -> Option<(TicketId, Option<RemoteUpdate>)> {
    match ev {
        EventKind::Receipt {
            from: Party::Remote { .. },
            ticket: Some(ticket),
            state,
            note,
            ..
        } => Some((
            *ticket,
            Some(RemoteUpdate::Receipt {
                state: *state,
                note: note.clone(),
            }),
        )),
        EventKind::Ticket {
            from: Party::Remote { .. },
            ticket,
            state,
            ..
        } if state.is_resolved() => Some((*ticket, None)),
        _ => None,
    }
}

/// What a resolved ticket received from another host tells its origin: its state, with the
/// reply's (or the transcript tail's) text. `None` while it is open.
pub fn answer_of(t: &Ticket) -> Option<RemoteUpdate> {
    if !t.state.is_resolved() {
        return None;
    }
    let text = match t.state {
        TicketState::Replied => t.reply.as_ref().map(|r| r.text.clone()),
        TicketState::Tail => t.tail.as_ref().map(|r| r.text.clone()),
        _ => None,
    };
    Some(RemoteUpdate::Answer {
        state: t.state,
        text,
        note: t.note.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mail::testkit::*;
    use proptest::prelude::*;

    #[test]
    fn only_news_for_another_host_is_reported_back() {
        use crate::injector::state::ReceiptState;
        use crate::tickets::state::TicketKind;
        let remote: Party = serde_json::from_str("\"lead@beta\"").unwrap();
        let local = Party::Member(MemberName::new("w1").unwrap());
        let receipt = |from: &Party| EventKind::Receipt {
            msg: crate::types::MsgId(1),
            target: MemberName::new("lead").unwrap(),
            from: from.clone(),
            ticket: Some(TicketId(5)),
            state: ReceiptState::Delivered,
            note: None,
            screen: None,
        };
        let ticket = |from: &Party, state| EventKind::Ticket {
            ticket: TicketId(6),
            kind: TicketKind::Send,
            from: from.clone(),
            to: MemberName::new("lead").unwrap(),
            state,
        };
        assert_eq!(
            report_of(&receipt(&remote)),
            Some((
                TicketId(5),
                Some(RemoteUpdate::Receipt {
                    state: ReceiptState::Delivered,
                    note: None
                })
            ))
        );
        assert_eq!(report_of(&receipt(&local)), None);
        assert_eq!(
            report_of(&ticket(&remote, TicketState::Replied)),
            Some((TicketId(6), None))
        );
        assert_eq!(report_of(&ticket(&remote, TicketState::Open)), None);
        assert_eq!(report_of(&ticket(&local, TicketState::Replied)), None);
    }

    /// (peer, seq) of an envelope.
    type Handed = (String, u64);

    /// Hold what `peer` sent as `seq`, under the next arrival number (what the shell stores).
    fn hold(inbox: &mut Inbox, peer: &str, seq: u64, item: Item) {
        let arrival = inbox.next_arrival();
        inbox.push(peer.into(), arrival, Envelope { seq, item });
    }

    /// Run one round: the desk answers `desk_ok`, the lead takes mail while `lead` says so.
    /// Returns the mail the lead took (peer, seq) and what the round handed on (peer, arrival).
    fn hand_round(
        inbox: &mut Inbox,
        desk_ok: bool,
        mut lead: impl FnMut(&ToHand) -> bool,
    ) -> (Vec<Handed>, Vec<Handed>) {
        let mut r = inbox.round();
        let reports = r.reports();
        r.reports_applied(reports.is_empty() || desk_ok);
        let mut took = vec![];
        while let Some(m) = r.next_mail() {
            let ok = lead(&m);
            if ok {
                took.push((m.peer.clone(), m.seq));
            }
            r.handed(ok);
        }
        (took, inbox.end(r))
    }

    #[test]
    fn a_refused_message_holds_the_rest_of_its_peers_mail_and_only_that() {
        let mut inbox = Inbox::default();
        hold(&mut inbox, "a", 1, mail(1)); // arrival 1
        hold(&mut inbox, "b", 1, mail(2)); // 2
        hold(&mut inbox, "a", 2, report(9)); // 3
        hold(&mut inbox, "a", 3, mail(3)); // 4
        hold(&mut inbox, "b", 2, mail(4)); // 5
        assert_eq!((inbox.mails(), inbox.room()), (4, MAX_HELD - 4));
        // The lead refuses a's first message: a's later mail is not even offered; b's goes on.
        // The desk refuses the report: it stays.
        let mut offered = vec![];
        let (took, done) = hand_round(&mut inbox, false, |m| {
            offered.push((m.peer.clone(), m.seq));
            m.peer == "b"
        });
        let pairs = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(p, s)| (p.to_string(), *s))
                .collect::<Vec<_>>()
        };
        assert_eq!(offered, pairs(&[("a", 1), ("b", 1), ("b", 2)]));
        assert_eq!(took, pairs(&[("b", 1), ("b", 2)]));
        assert_eq!(done, pairs(&[("b", 2), ("b", 5)]));
        let held: Vec<_> = inbox.iter().map(|(p, _, e)| (p.clone(), e.seq)).collect();
        assert_eq!(held, pairs(&[("a", 1), ("a", 2), ("a", 3)]));
        assert_eq!(inbox.mails(), 2);
        // Next round everything goes, in order.
        let (took, done) = hand_round(&mut inbox, true, |_| true);
        assert_eq!(took, pairs(&[("a", 1), ("a", 3)]));
        assert_eq!(done, pairs(&[("a", 1), ("a", 3), ("a", 4)]));
        assert!(inbox.is_empty() && inbox.mails() == 0);
    }

    #[test]
    fn a_round_ended_early_keeps_its_order_and_what_arrived_meanwhile_comes_after() {
        let mut inbox = Inbox::default();
        for s in 1..=3 {
            hold(&mut inbox, "a", s, mail(s));
        }
        let mut r = inbox.round();
        r.reports_applied(true);
        let first = r.next_mail().unwrap();
        assert_eq!(first.seq, 1);
        r.handed(true);
        assert_eq!(r.next_mail().unwrap().seq, 2);
        // No answer for 2, and the round ends: 2 and 3 are held, then what arrived.
        hold(&mut inbox, "b", 1, mail(9));
        assert_eq!(inbox.end(r), vec![("a".to_string(), 1)]);
        let held: Vec<_> = inbox
            .iter()
            .map(|(p, a, e)| (p.as_str(), *a, e.seq))
            .collect();
        assert_eq!(held, vec![("a", 2, 2), ("a", 3, 3), ("b", 4, 1)]);
        assert_eq!(inbox.mails(), 3);
        assert_eq!(inbox.next_arrival(), 5);
    }

    #[test]
    fn a_senders_new_epoch_does_not_overwrite_mail_still_held_from_the_old_one() {
        let mut inbox = Inbox::default();
        hold(&mut inbox, "a", 3, mail(1)); // the old epoch's seq 3
        hold(&mut inbox, "a", 3, mail(2)); // the new epoch's seq 3
        let mut tickets = vec![];
        let (_, done) = hand_round(&mut inbox, true, |m| {
            tickets.push(m.ticket.0);
            true
        });
        assert_eq!(tickets, vec![1, 2]);
        assert_eq!(done, vec![("a".to_string(), 1), ("a".to_string(), 2)]);
    }

    proptest! {
        /// Over rounds in which the lead and the desk refuse at random, each peer's mail reaches
        /// the lead exactly once and in order, every report is handed on once, and the count of
        /// held mail stays true.
        #[test]
        fn held_mail_reaches_the_lead_once_in_order_per_peer(
            arrivals in proptest::collection::vec((0u8..3, any::<bool>()), 1..60),
            answers in proptest::collection::vec(any::<bool>(), 1..400),
        ) {
            let mut inbox = Inbox::default();
            let mut seq = [0u64; 3];
            let mut sent: Vec<Vec<u64>> = vec![vec![]; 3];
            for (p, is_mail) in &arrivals {
                let i = usize::from(*p);
                seq[i] += 1;
                let item = if *is_mail { mail(seq[i]) } else { report(seq[i]) };
                if *is_mail {
                    sent[i].push(seq[i]);
                }
                hold(&mut inbox, &format!("p{p}"), seq[i], item);
            }
            let mut took: Vec<Vec<u64>> = vec![vec![]; 3];
            let mut handed = 0;
            let mut answers = answers.into_iter().cycle();
            let mut rounds = 0;
            while !inbox.is_empty() && rounds < 1000 {
                rounds += 1;
                // Refusals run out eventually (every tenth round the lead and desk take all).
                let all = rounds % 10 == 0;
                let desk = all || answers.next().unwrap_or(true);
                let (t, done) = hand_round(&mut inbox, desk, |_| all || answers.next().unwrap_or(true));
                for (peer, s) in t {
                    took[usize::from(peer.as_bytes()[1] - b'0')].push(s);
                }
                handed += done.len();
                let recount = inbox.iter().filter(|(_, _, e)| matches!(e.item, Item::Mail { .. })).count();
                prop_assert_eq!(inbox.mails(), recount);
            }
            prop_assert!(inbox.is_empty());
            prop_assert_eq!(took, sent);
            prop_assert_eq!(handed, arrivals.len());
        }
    }
}
