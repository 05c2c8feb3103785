//! The drift protocol's rules: `line` (schema, signing, G1), `gates` (anchor, G2-G4,
//! bootstrapping), `remote` (anchors of other hosts, G3 across hosts), `alerts` (kept alerts,
//! raise each once).

pub mod alerts;
pub mod cache;
pub mod gates;
pub mod line;
pub mod remote;
pub mod role;
