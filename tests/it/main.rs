//! Integration tests: the real `fleetd` binary, sim agents in real PTYs, real sockets.

mod agents;
mod anchors;
mod common;
mod config;
mod crash;
mod dashboard;
mod demo;
mod doors_rest;
mod drift;
mod durability;
mod fleet;
mod harden;
mod hostile;
mod house;
mod identity;
mod ledger;
mod link;
mod mail;
mod mcp;
mod mockmodel;
mod netns;
mod note;
mod ptyhost;
mod supervision;
mod witness;
