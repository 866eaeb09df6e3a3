//! The verbs backend in a build without it: choosing it refuses with a
//! typed error (so the node falls back to UCX, or says why it cannot),
//! and its node and rail sides are uninhabited.

use ferrovia_channel::{ChannelBuilder, ChannelConfig, MultiChannel};
use ferrovia_mr::MrRegistry;

use crate::Backend;
use crate::backend::{Link, RailConnected};
use crate::error::{BootstrapError, NodeError};

fn not_built() -> NodeError {
    BootstrapError::NotBuilt {
        backend: Backend::Verbs,
    }
    .into()
}

pub(crate) fn with_device(_: &mut ChannelBuilder) -> Result<(), NodeError> {
    Err(not_built())
}

pub(crate) enum Opened {}

impl Opened {
    pub(crate) fn open(_: ChannelBuilder, _: usize) -> Result<Opened, NodeError> {
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
    pub(crate) fn open(
        _: u32,
        _: Option<&String>,
        _: &MultiChannel,
        _: &ChannelConfig,
        _: usize,
    ) -> Result<RailSide, NodeError> {
        Err(not_built())
    }

    pub(crate) fn link(&self, _: usize) -> Result<Link, NodeError> {
        match *self {}
    }

    pub(crate) fn connect(self, _: usize, _: Vec<Link>) -> Result<RailConnected, NodeError> {
        match self {}
    }
}
