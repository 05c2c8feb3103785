//! Messages and tickets: send (local and to another host's lead), mail arriving from one,
//! reply, ask, poll, ack, and the ticket and receipt lookups.

use super::*;

impl Fleet {
    pub(super) fn check_size(&self, what: &str, text: &str) -> Result<(), FleetError> {
        crate::tickets::state::check_message(
            what,
            text,
            self.ctx.config().injector.max_message_bytes,
        )
    }

    /// Open a ticket and queue its message, committing both in one transaction (the injector's,
    /// or the post office's for `Via::Mail`); the ticket never dangles: if the queue refuses,
    /// it is recorded as undeliverable.
    pub(super) async fn ticketed(
        &self,
        kind: TicketKind,
        from: Party,
        to: &MemberName,
        body: String,
        origin: Option<Origin>,
        via: Via,
    ) -> Result<Queued, FleetError> {
        let c = self.ctx.config();
        let (to2, body2) = (to.clone(), body.clone());
        let ttl_ms = c.tickets.ttl_seconds.saturating_mul(1000);
        let desk = self.desk().await?;
        let remote = match &via {
            Via::Injector => None,
            Via::Mail { receipt, .. } => Some(Box::new(receipt.clone())),
        };
        let ticket = desk
            .call(
                |reply| DeskMsg::Open {
                    kind,
                    from: from.clone(),
                    to: to2,
                    body: body2,
                    ttl_ms,
                    defer: true,
                    remote,
                    origin,
                    reply,
                },
                CALL,
            )
            .await??;
        let queued = match via {
            Via::Mail { mail, receipt } => mail
                .call(
                    |reply| MailMsg::Send {
                        host: receipt.host,
                        ticket: Box::new(ticket.clone()),
                        body,
                        reply,
                    },
                    CALL,
                )
                .await
                .and_then(|r| r.map(|_| None)),
            Via::Injector => {
                let msg_id = ticket.msg.ok_or_else(|| {
                    FleetError::internal("fleet_send", "the desk opened a ticket without a message")
                })?;
                let mut msg = Message::new(msg_id, to.clone(), from, Some(ticket.id), body);
                // Not pasted once its ticket has expired (`injector::state`, expire).
                msg.expires_at = Some(ticket.expires_at);
                match self.injector(to).await {
                    Some(i) => i
                        .call(
                            |reply| InjectorMsg::Enqueue {
                                msg: Box::new(msg),
                                ticket: Some(Box::new(ticket.clone())),
                                reply,
                            },
                            CALL,
                        )
                        .await
                        .and_then(|r| r.map(|m| Some(Receipt::queued(&m)))),
                    None => Err(FleetError::unavailable(
                        format!("message to `{to}`"),
                        "its injector is restarting",
                    )),
                }
            }
        };
        let receipt = match queued {
            Ok(r) => r,
            Err(e) => {
                // Never durable yet: this records it, as undeliverable, so it does not dangle.
                desk.cast(DeskMsg::Undeliverable {
                    tickets: vec![(ticket.id, e.to_string())],
                    requeued: false,
                });
                return Err(e);
            }
        };
        // The ticket is durable now (with its message); tell a desk that restarted meanwhile.
        if let Ok(d) = self.desk().await {
            d.cast(DeskMsg::Known {
                ticket: Box::new(ticket.clone()),
            });
        }
        Ok(Queued { ticket, receipt })
    }

    /// Sends `message` from `caller` to the member `to` (or, as `NAME@HOST`, to another host's
    /// lead over the mail link). Returns once the message is durably queued, as a ticket the
    /// receiver answers with [`Fleet::reply`]; with `wait`, it waits up to `wait_secs` (capped by
    /// `tickets.send_wait_max_seconds`) for the answer, a tail or an expiry. The message reaches
    /// the terminal only when the target can take it, as one neutralised paste. Refused: a send
    /// to itself, an unknown or exited member, text over `limits.max_message_bytes`, and what
    /// Authz does not allow `caller`.
    pub async fn send(
        &self,
        caller: &Caller,
        to: &str,
        message: String,
        wait: bool,
        wait_secs: Option<u64>,
    ) -> Result<SendResult, FleetError> {
        if let Some((member, host)) = to.split_once('@') {
            return self
                .send_remote(caller, member, host, message, wait, wait_secs)
                .await;
        }
        authorize(caller, &Action::Send, "fleet_send")?;
        let from = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_send", "no party"))?;
        let to = member_name(to)?;
        let what = format!("fleet_send to `{to}`");
        self.check_size(&what, &message)?;
        crate::tickets::state::check_not_self(&what, &from, &to)?;
        self.live_member(&to, &what).await?;
        let queued = self
            .ticketed(TicketKind::Send, from, &to, message, None, Via::Injector)
            .await?;
        self.sent(caller, queued, wait, wait_secs).await
    }

    /// Answer a send: the ticket at once, or after a bounded wait for its answer (as `caller`
    /// sees it).
    pub(super) async fn sent(
        &self,
        caller: &Caller,
        queued: Queued,
        wait: bool,
        wait_secs: Option<u64>,
    ) -> Result<SendResult, FleetError> {
        if !wait {
            let ticket = match queued.receipt {
                // The receipt as committed with the ticket: no second read of the store.
                Some(r) => TicketView {
                    ticket: queued.ticket,
                    receipt: Some(r),
                },
                None => self.view(queued.ticket, caller).await,
            };
            return Ok(SendResult {
                ticket,
                resolved: None,
            });
        }
        let max = self.ctx.config().tickets.send_wait_max_seconds;
        let secs = wait_secs.unwrap_or(max).min(max);
        let (t, resolved) = self.wait_ticket(queued.ticket.id, secs).await?;
        Ok(SendResult {
            ticket: self.view(t, caller).await,
            resolved: Some(resolved),
        })
    }

    /// `fleet_send` to `lead@HOST`: durable in this host's outbox before it returns, then
    /// carried by the post office until the other host holds it.
    pub(super) async fn send_remote(
        &self,
        caller: &Caller,
        member: &str,
        host: &str,
        message: String,
        wait: bool,
        wait_secs: Option<u64>,
    ) -> Result<SendResult, FleetError> {
        let what = format!(
            "fleet_send to `{}@{}`",
            crate::types::truncate(member, 40),
            crate::types::truncate(host, 40)
        );
        authorize(caller, &Action::SendRemote, &what)?;
        let c = self.ctx.config();
        let accepted = || {
            let peers: Vec<String> = c.peers.keys().map(|p| format!("lead@{p}")).collect();
            if peers.is_empty() {
                "lead@HOST for a host in [peers] (none is configured)".to_string()
            } else {
                peers.join(", ")
            }
        };
        if member != "lead" {
            return Err(FleetError::invalid(
                what,
                "lead-to-lead mail goes to the other host's lead, addressed as `lead`",
                accepted(),
            ));
        }
        if host == c.daemon.host {
            return Err(FleetError::invalid(
                what,
                "that is this host; send to a member by name",
                accepted(),
            ));
        }
        if !c.peers.contains_key(host) {
            return Err(FleetError::not_found(
                what,
                format!("`{host}` is not a configured peer"),
                accepted(),
            ));
        }
        self.check_size(&what, &message)?;
        let mail = self.ctx.dir.mail().ok_or_else(|| {
            FleetError::unavailable(
                what.clone(),
                "the post office is not running (no [link] listen address, or it is restarting)",
            )
        })?;
        let from = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_send", "no party"))?;
        let receipt = RemoteReceipt {
            host: host.to_string(),
            state: ReceiptState::Queued,
            queued_at: self.ctx.now(),
            transmitted_at: None,
            delivered_at: None,
            settled_at: None,
            note: None,
            altered: crate::sanitize::for_terminal(&message).1.describe(),
        };
        let lead = MemberName::new("lead")?;
        let queued = self
            .ticketed(
                TicketKind::Send,
                from,
                &lead,
                message,
                None,
                Via::Mail { mail, receipt },
            )
            .await?;
        self.sent(caller, queued, wait, wait_secs).await
    }

    /// Hand a message received from another host's lead to this host's primary (through its
    /// injector, as any message). Once only: a message that already has its ticket here is not
    /// handed on again. Refused while there is no live primary: it then stays held.
    pub async fn deliver_remote(
        &self,
        origin: Origin,
        from: MemberName,
        body: String,
    ) -> Result<TicketId, FleetError> {
        let desk = self.desk().await?;
        let o2 = origin.clone();
        if let Some(t) = desk
            .call(|reply| DeskMsg::ByOrigin { origin: o2, reply }, CALL)
            .await?
        {
            return Ok(t.id);
        }
        let primary = self.live_primary().await?.ok_or_else(|| {
            FleetError::unavailable(
                format!("mail from lead@{}", origin.host),
                "there is no live primary to take it; it stays in the coordinator's mailbox",
            )
        })?;
        let from = Party::Remote {
            member: from,
            host: origin.host.clone(),
        };
        let t = self
            .ticketed(
                TicketKind::Send,
                from,
                &primary.name,
                body,
                Some(origin),
                Via::Injector,
            )
            .await?;
        Ok(t.ticket.id)
    }

    pub(super) async fn wait_ticket(
        &self,
        id: TicketId,
        secs: u64,
    ) -> Result<(Ticket, bool), FleetError> {
        let deadline = self.ctx.now() + secs * 1000;
        let desk = self.desk().await?;
        let out = desk
            .call(
                |reply| DeskMsg::Wait {
                    ticket: id,
                    deadline,
                    reply,
                },
                Duration::from_secs(secs + 5),
            )
            .await??;
        Ok(match out {
            WaitOutcome::Resolved(t) => (t, true),
            WaitOutcome::TimedOut(t) => (t, false),
        })
    }

    /// Answers `ticket` with `text`. Only the ticket's addressee may reply, once; a reply after
    /// the ticket expired is refused as late and kept visible on the ticket. Wakes a sender
    /// waiting on it, and, for mail from another host, sends the answer back over the link.
    pub async fn reply(
        &self,
        caller: &Caller,
        ticket: &str,
        text: String,
    ) -> Result<TicketView, FleetError> {
        let id: TicketId = ticket.parse()?;
        self.check_size(&format!("fleet_reply to {id}"), &text)?;
        let c = caller.clone();
        let t = self
            .desk()
            .await?
            .call(
                |reply| DeskMsg::Reply {
                    caller: c,
                    ticket: id,
                    text,
                    reply,
                },
                CALL,
            )
            .await??;
        Ok(self.view(t, caller).await)
    }

    /// Asks `caller`'s lead (the live primary) `question` and waits up to
    /// `tickets.ask_wait_seconds` for its reply or its turn's tail; otherwise the ticket stays
    /// open and [`Fleet::poll`] shows the answer when it comes.
    pub async fn ask(&self, caller: &Caller, question: String) -> Result<AskResult, FleetError> {
        let lead = self.live_primary().await?;
        let lead_name = lead.as_ref().map(|m| m.name.clone());
        authorize(
            caller,
            &Action::Ask {
                lead: lead_name.as_ref(),
            },
            "fleet_ask",
        )?;
        let (Some(lead), Some(from)) = (lead, caller.party()) else {
            return Err(FleetError::internal(
                "fleet_ask",
                "authorized without a lead",
            ));
        };
        self.check_size("fleet_ask", &question)?;
        let queued = self
            .ticketed(
                TicketKind::Ask,
                from,
                &lead.name,
                format!("question: {question}"),
                None,
                Via::Injector,
            )
            .await?;
        let secs = self.ctx.config().tickets.ask_wait_seconds;
        let (t, _) = self.wait_ticket(queued.ticket.id, secs).await?;
        let (answered, answer, note) = match t.state {
            TicketState::Replied => (
                true,
                t.reply.as_ref().map(|r| r.text.clone()),
                "your lead answered".to_string(),
            ),
            TicketState::Tail => (
                true,
                t.tail.as_ref().map(|r| r.text.clone()),
                "your lead ended its turn without fleet_reply; this is its transcript tail"
                    .to_string(),
            ),
            TicketState::Open => (
                false,
                None,
                format!(
                    "no answer within {secs} s (tickets.ask_wait_seconds); fleet_poll shows {} when it comes",
                    t.id
                ),
            ),
            other => (
                false,
                None,
                format!("the question could not be answered: {other:?}"),
            ),
        };
        Ok(AskResult {
            ticket: self.view(t, caller).await,
            answered,
            answer,
            note,
        })
    }

    /// The tickets `caller` sent whose answers it has not acknowledged yet.
    pub async fn poll(&self, caller: &Caller) -> Result<Vec<TicketView>, FleetError> {
        authorize(caller, &Action::Read, "fleet_poll")?;
        let party = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_poll", "no party"))?;
        let ts = self
            .desk()
            .await?
            .call(|reply| DeskMsg::Poll { party, reply }, CALL)
            .await?;
        let mut out = vec![];
        for t in ts {
            out.push(self.view(t, caller).await);
        }
        Ok(out)
    }

    /// Acknowledges an answered ticket of `caller`'s, so [`Fleet::poll`] stops showing it.
    pub async fn ack(&self, caller: &Caller, ticket: &str) -> Result<(), FleetError> {
        authorize(caller, &Action::Read, "fleet_ack")?;
        let id: TicketId = ticket.parse()?;
        let party = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_ack", "no party"))?;
        self.desk()
            .await?
            .call(
                |reply| DeskMsg::Ack {
                    party,
                    ticket: id,
                    reply,
                },
                CALL,
            )
            .await?
    }

    /// One ticket, if the caller opened it, owns it, or is the operator.
    pub async fn ticket(&self, caller: &Caller, ticket: &str) -> Result<TicketView, FleetError> {
        authorize(caller, &Action::Read, "ticket lookup")?;
        let id: TicketId = ticket.parse()?;
        let t = self
            .desk()
            .await?
            .call(|reply| DeskMsg::Get { ticket: id, reply }, CALL)
            .await?
            .ok_or_else(|| {
                FleetError::not_found(
                    format!("ticket {id}"),
                    "no such ticket",
                    "a ticket id from fleet_send",
                )
            })?;
        authorize(
            caller,
            &Action::ReadOwn {
                from: &t.from,
                to: &t.to,
            },
            &format!("lookup of {id}"),
        )?;
        Ok(self.view(t, caller).await)
    }

    /// Tickets: all of them for the operator; for a member, those it opened or was sent.
    pub async fn tickets(&self, caller: &Caller) -> Result<Vec<TicketView>, FleetError> {
        authorize(caller, &Action::Read, "ticket listing")?;
        let all = self
            .desk()
            .await?
            .call(|reply| DeskMsg::All { reply }, CALL)
            .await?;
        let mut out = vec![];
        for t in all {
            let visible = authorize(
                caller,
                &Action::ReadOwn {
                    from: &t.from,
                    to: &t.to,
                },
                "ticket listing",
            );
            if visible.is_ok() {
                out.push(self.view(t, caller).await);
            }
        }
        Ok(out)
    }

    /// The receipt of message `id`: its state (queued, delivered, accepted, ...) and when.
    pub async fn message(&self, caller: &Caller, id: &str) -> Result<Receipt, FleetError> {
        authorize(caller, &Action::Read, "receipt lookup")?;
        let id: MsgId = id.parse()?;
        let m = self
            .ctx
            .store
            .run(move |s| s.message(id))
            .await?
            .ok_or_else(|| {
                FleetError::not_found(
                    format!("message {id}"),
                    "no such message",
                    "a message id from a ticket",
                )
            })?;
        authorize(
            caller,
            &Action::ReadOwn {
                from: &m.from,
                to: &m.target,
            },
            &format!("lookup of {id}"),
        )?;
        Ok(Receipt::of(&m, caller))
    }
}
