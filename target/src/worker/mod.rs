//! What a worker (poll group) needs whatever transports it drives: how
//! long it polls before it sleeps, and how other threads wake it and hand
//! it completions.

pub mod polling;
pub mod wake;
