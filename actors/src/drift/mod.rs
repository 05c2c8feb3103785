//! The drift protocol: `line` (schema, signing, G1), `gates` (anchor, G2-G4, bootstrapping),
//! `kb` (the logs on disk), `remote` (anchors pulled from other hosts, G3 across hosts), `service` (the daemon side of fleet_drift, alerts), `actor` (the
//! scheduler and the supervised puller per peer).

pub mod actor;
pub mod alerter;
pub use fleetd_core::drift::alerts;
pub use fleetd_core::drift::cache;
pub use fleetd_core::drift::gates;
pub mod kb;
pub use fleetd_core::drift::line;
pub use fleetd_core::drift::remote;
pub use fleetd_core::drift::role;
pub mod service;
