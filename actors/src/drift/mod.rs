//! The drift protocol: `line` (schema, signing, G1), `gates` (anchor, G2-G4, bootstrapping),
//! `kb` (the logs on disk), `actor` (the supervised puller per peer).

pub mod gates;
pub mod kb;
pub mod line;
