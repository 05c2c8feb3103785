//! Lead-to-lead mail between hosts: the rules from `fleetd-core` (`envelope`, `postbox`: outboxes,
//! sequence numbers, batches, retry; `mark`: the receiving mark, exactly once, in order per
//! sender; `inbox`: held mail's hand-on to the lead, reports back) and `actor` (the post office:
//! durable outbox and inbox in the state dir, transmission through the link transport the binary
//! provides, hand-off to the lead's injector, receipts and answers back to the sender).

pub mod actor;
pub use fleetd_core::mail::{envelope, inbox, mark, postbox, view};
