//! The rules of lead-to-lead mail (its pure core; the post office, its shell, lives in
//! `fleetd-actors`): what travels (`envelope`), the sending side's outboxes, numbering,
//! batches and retry (`postbox`), the receiving side's mark that makes delivery exactly once
//! and in order (`mark`), and the held mail's hand-on to the lead and the reports back
//! (`inbox`). Must never do I/O.

pub mod envelope;
pub mod inbox;
pub mod mark;
pub mod postbox;
pub mod view;

#[cfg(test)]
mod testkit;
