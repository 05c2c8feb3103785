//! The alerter: the one owner of the drift alerts a daemon keeps (`drift::alerts::AlertLog`) and
//! of "raise each alert once". Every raiser (a peer's drift puller, the anchor puller, ledger
//! witnessing) asks it; it publishes the log for `GET /alerts`, status and metrics.
//!
//! The log lives in its publisher, so a restart of the alerter keeps it (alerts are raised once
//! per daemon run, whatever actor restarts). Must never decide what is alarming (the gates do)
//! nor tell anyone (the raiser emits the event and tells the lead once the alert is kept).

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::ctx::SharedCtx;
use crate::directory::{Directory, Mailbox};
use crate::drift::alerts::{Alert, AlertLog};
use crate::error::FleetError;
use crate::publish::Publisher;

pub enum AlerterMsg {
    /// Which of `texts` about `peer` are raised now (the first time each is seen).
    Fresh {
        peer: String,
        texts: Vec<String>,
        reply: RpcReplyPort<Vec<bool>>,
    },
    /// Keep an alert; answered once `GET /alerts` shows it.
    Keep {
        alert: Alert,
        reply: RpcReplyPort<()>,
    },
}

pub struct AlerterArgs {
    pub ctx: SharedCtx,
    pub log: Publisher<AlertLog>,
}

pub struct Alerter;

pub struct AlerterState {
    ctx: SharedCtx,
    log: Publisher<AlertLog>,
}

impl Actor for Alerter {
    type Msg = AlerterMsg;
    type State = AlerterState;
    type Arguments = AlerterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<AlerterMsg>,
        a: AlerterArgs,
    ) -> Result<AlerterState, ActorProcessingErr> {
        a.ctx.dir.set_alerter(Some(Mailbox::new(
            myself,
            a.ctx.mailbox_cap(),
            "the drift alerter",
        )));
        Ok(AlerterState {
            ctx: a.ctx,
            log: a.log,
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<AlerterMsg>,
        st: &mut AlerterState,
    ) -> Result<(), ActorProcessingErr> {
        st.ctx.dir.remove_actor(myself.get_id());
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<AlerterMsg>,
        msg: AlerterMsg,
        st: &mut AlerterState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            AlerterMsg::Fresh { peer, texts, reply } => {
                let mut fresh = vec![];
                st.log.modify(|log| {
                    fresh = texts.iter().map(|t| log.first_raise(&peer, t)).collect();
                });
                let _ = reply.send(fresh);
            }
            AlerterMsg::Keep { alert, reply } => {
                st.log.modify(|log| log.push(alert));
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}

/// How the alerter is found: the directory's entry for it, registered by the actor itself.
impl Directory {
    pub fn alerter(&self) -> Option<Mailbox<AlerterMsg>> {
        self.get("")
    }
    pub fn set_alerter(&self, m: Option<Mailbox<AlerterMsg>>) {
        match m {
            Some(m) => self.set_mailbox("", m),
            None => self.remove::<Mailbox<AlerterMsg>>(""),
        }
    }
}

/// The alerter, waiting out its restart.
pub async fn alerter(ctx: &SharedCtx) -> Result<Mailbox<AlerterMsg>, FleetError> {
    ctx.dir
        .wait_for(|d| d.alerter(), std::time::Duration::from_secs(5))
        .await
        .ok_or_else(|| FleetError::unavailable("the drift alerter", "it is restarting"))
}
