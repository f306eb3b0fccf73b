//! What hosts see: subsystems with their namespaces and controllers, and
//! the ANA groups of each listener.

pub mod ana;
pub mod auth;
pub mod controller;
pub mod discovery;
pub mod discovery_log;
pub mod hostid;
pub mod identity;
pub mod namespace;
pub mod ns_cache;
pub mod port;
pub mod qos;
pub mod subsystem;
pub mod target;
pub mod tls_keys;
pub mod unproven;
