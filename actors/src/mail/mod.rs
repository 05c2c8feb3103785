//! Lead-to-lead mail between hosts: `state` (outboxes, sequence numbers, the receiving mark:
//! exactly once, in order per sender) and `actor` (the post office: durable outbox and inbox in
//! the state dir, transmission through the link transport the binary provides, hand-off to the
//! lead's injector, receipts and answers back to the sender).

pub mod actor;
pub use fleetd_core::mail::{state, view};
