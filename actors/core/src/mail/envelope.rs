//! What travels between two hosts' post offices: the `Envelope` (one unit, numbered per
//! sending host and receiving host) and its `Item` (a lead's message, or a report on one), with
//! the weight a batch counts. Owns only the vocabulary: numbering is the postbox's, acceptance
//! the mark's, hand-on the inbox's. Must never do I/O.

use serde::{Deserialize, Serialize};

use crate::tickets::state::RemoteUpdate;
use crate::types::{MemberName, Millis, TicketId};

/// At most this many envelopes in one batch.
pub const MAX_BATCH: usize = 256;
/// A batch stops growing once its bodies reach this many bytes (a link frame is at most 1 MiB).
pub const MAX_BATCH_BYTES: usize = 512 * 1024;

/// One unit of lead-to-lead traffic, numbered per (sending host, receiving host).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub seq: u64,
    pub item: Item,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// A message from the sending host's lead to the receiving host's lead; `ticket` is the
    /// sender's ticket, which every report about it names.
    Mail {
        ticket: TicketId,
        from: MemberName,
        body: String,
        sent_at: Millis,
    },
    /// A report on a ticket the receiving host sent (its receipt, or its answer).
    Update {
        ticket: TicketId,
        update: RemoteUpdate,
    },
}

impl Item {
    /// What the item counts for in a batch's byte budget (`postbox::MAX_BATCH_BYTES`).
    pub(super) fn weight(&self) -> usize {
        match self {
            Item::Mail { body, .. } => body.len() + 64,
            Item::Update {
                update: RemoteUpdate::Answer { text, note, .. },
                ..
            } => text.as_ref().map_or(0, |t| t.len()) + note.as_ref().map_or(0, |n| n.len()) + 64,
            Item::Update { .. } => 64,
        }
    }
}
