//! A build without PMIx: under a PMIx launcher, the bootstrap fails
//! naming the feature (set `FERROVIA_RENDEZVOUS` to meet through rank 0).

use std::net::IpAddr;
use std::time::Duration;

use crate::error::{BootstrapError, NodeError};

/// Never made: this build has no PMIx.
pub(crate) enum PmixMeeting {}

impl PmixMeeting {
    pub(crate) fn start(_timeout: Duration) -> Result<PmixMeeting, NodeError> {
        Err(BootstrapError::EngineNotBuilt {
            engine: "PMIx",
            feature: "pmix",
        }
        .into())
    }

    pub(crate) fn rank(&self) -> usize {
        match *self {}
    }

    pub(crate) fn world_size(&self) -> usize {
        match *self {}
    }

    pub(crate) fn control_ip(&self) -> Result<IpAddr, NodeError> {
        match *self {}
    }

    pub(crate) fn exchange(
        &mut self,
        _token: Option<&str>,
        _blobs: Vec<Vec<u8>>,
    ) -> Result<(Vec<Vec<u8>>, String), NodeError> {
        match *self {}
    }

    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        match *self {}
    }
}
