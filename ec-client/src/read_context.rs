//! What every reader of one client shares: the datanode channel cache, the
//! config and the counters.

use std::sync::Arc;

use block_stream::XceiverClientManager;

use crate::ClientConfig;
use crate::metrics::EcReadMetrics;

/// Shared by all key streams of a [`Client`](crate::Client).
#[derive(Debug)]
pub(crate) struct ReadContext {
    pub(crate) xceivers: Arc<XceiverClientManager>,
    pub(crate) config: ClientConfig,
    pub(crate) ec_metrics: Arc<EcReadMetrics>,
}
