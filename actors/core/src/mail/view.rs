//! What the post office publishes of itself: mail held for the lead, envelopes waiting per peer.
//! Written only by the post office; read by `fleet_list`'s coordinator row, `fleetd peers` and
//! the metrics.

use std::collections::BTreeMap;

/// What `fleet_list`'s coordinator row and `fleetd peers` show of the post office.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MailView {
    /// Mail received for the lead and not yet in its queue (no live primary yet), previewed:
    /// the oldest `HELD_PREVIEW` of them.
    pub held: Vec<String>,
    /// How many are held in all.
    pub held_total: usize,
    /// Envelopes waiting for each peer to hold them.
    pub outbox: BTreeMap<String, usize>,
}
