//! Several gateways serving one shared store (an RBD image), sans-IO: the
//! record they keep of each other ([`roster`]), their parts of a QoS cap
//! held for the store as a whole ([`qos_share`]), which one writes the
//! store and when another may fence it ([`ownership`]), taking an ANA
//! group over while no other serves it optimized ([`takeover`]), and
//! whether this one may stop ([`ok_to_stop`]). The RBD backend runs them
//! against the cluster (`rbd::presence`, `rbd::owner`) and keeps the
//! shared reservation state there (`rbd::cluster`); the daemon's loop makes
//! the passes.

pub mod ok_to_stop;
pub mod ownership;
pub mod qos_share;
pub mod roster;
pub mod takeover;
