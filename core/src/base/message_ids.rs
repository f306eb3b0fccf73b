//! The `MESSAGE_ID`s of the events an operator looks for (`journalctl
//! MESSAGE_ID=...`), given as the `message_id` field (`message_id =
//! %ids::CONNECTED`). Fixed for good: scripts and alerts match them.

/// A host's controller connected (its admin queue).
pub const CONNECTED: &str = "64fb856328274f8dad5413c5fdfe4eb5";
/// A host failed DH-HMAC-CHAP authentication.
pub const AUTH_FAILED: &str = "a092a32ea2fd4e6ea8ad678fd0fe4bed";
/// This gateway's cluster connection was fenced (OSD blocklist).
pub const FENCED: &str = "8a4a4484fcac4d9483ec4e4abcfcac56";
/// A drain started (ANA groups non-optimized).
pub const DRAIN_STARTED: &str = "d7cdd33af4a34438b8ebd5bf500f2814";
/// A drain completed.
pub const DRAINED: &str = "ff7e17b2fea44af68d48aca8cb945271";
/// A drain did not complete in its time.
pub const DRAIN_TIMED_OUT: &str = "7281c702a36d4c4bafa98148917bf4ae";
/// The drained listeners were restored.
pub const UNDRAINED: &str = "2122c9c05981410da3232a294e7084fe";
