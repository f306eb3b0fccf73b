//! The command set: what each command means, whatever transport carried it.
//! Fabrics commands (Connect, Property Get/Set) and in-band authentication,
//! admin commands (of I/O and discovery controllers), I/O commands.

pub mod admin;
pub mod auth;
pub mod compare;
pub mod fabrics;
pub mod io;
pub mod reservation;
