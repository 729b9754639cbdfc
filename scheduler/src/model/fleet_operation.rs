//! A fleet creation in flight, as the cloud boundary hands it back and an attempt stores it.

use serde::{Deserialize, Serialize};

/// A create operation in flight: enough to poll it later, even from another process after a
/// restart (it is stored with the attempt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetOperation {
    /// The fleet being created.
    pub fleet_name: String,
    /// Where to poll (`Azure-AsyncOperation` or `Location`); `None` when the cloud finished at once.
    pub status_url: Option<String>,
    /// How long the cloud asked us to wait before polling, in milliseconds.
    pub retry_after_ms: u64,
}
