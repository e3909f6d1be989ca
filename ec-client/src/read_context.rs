//! What every reader of one client shares: the datanode channel cache, the
//! config, the counters, and the om (to refresh a key's locations).

use std::sync::Arc;

use block_stream::XceiverClientManager;

use crate::ClientConfig;
use crate::metrics::EcReadMetrics;
use crate::om_client::OmClient;

/// Shared by all key streams of a [`Client`](crate::Client).
#[derive(Debug)]
pub(crate) struct ReadContext {
    pub(crate) xceivers: Arc<XceiverClientManager>,
    pub(crate) config: ClientConfig,
    pub(crate) ec_metrics: Arc<EcReadMetrics>,
    /// Looks up a key again when its readers need fresh locations.
    pub(crate) om: OmClient,
}
