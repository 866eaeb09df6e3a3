//! The UCX backend in a build without it: choosing it refuses with a
//! typed error, and its node and rail sides are uninhabited.

use ferrovia_channel::{ChannelBuilder, ChannelConfig, MultiChannel};
use ferrovia_mr::MrRegistry;

use crate::Backend;
use crate::backend::{Link, RailConnected};
use crate::error::{BootstrapError, NodeError};

/// UCX is not in this build: nothing to fall back to.
pub(crate) const BUILT: bool = false;

fn not_built() -> NodeError {
    BootstrapError::NotBuilt {
        backend: Backend::Ucx,
    }
    .into()
}

pub(crate) enum Opened {}

impl Opened {
    pub(crate) fn open(_: ChannelBuilder, _: std::net::IpAddr) -> Result<Opened, NodeError> {
        Err(not_built())
    }

    pub(crate) fn registry(&self) -> &MrRegistry {
        match *self {}
    }

    pub(crate) fn link(&self, _: usize) -> Result<Link, NodeError> {
        match *self {}
    }

    pub(crate) fn describe(&self) -> String {
        match *self {}
    }

    pub(crate) fn connect(self, _: usize, _: Vec<Link>) -> Result<MultiChannel, NodeError> {
        match self {}
    }
}

pub(crate) enum RailSide {}

impl RailSide {
    pub(crate) fn open(_: &ChannelConfig, _: std::net::IpAddr) -> Result<RailSide, NodeError> {
        Err(not_built())
    }

    pub(crate) fn link(&self, _: usize) -> Result<Link, NodeError> {
        match *self {}
    }

    pub(crate) fn connect(
        self,
        _: u32,
        _: usize,
        _: Vec<Link>,
    ) -> Result<RailConnected, NodeError> {
        match self {}
    }
}
