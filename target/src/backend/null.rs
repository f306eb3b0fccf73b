//! The null backend: every operation succeeds at once. Reads return the data
//! buffer as it is (no copy), writes are dropped. For fabric benchmarks.

use crate::io::IoPlan;

/// Result of a null operation: always success, for any plan.
pub fn execute(_plan: &IoPlan) -> i32 {
    0
}
