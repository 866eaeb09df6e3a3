//! The verbs backend in a build without it: choosing it refuses with a
//! typed error (so the node falls back to UCX, or says why it cannot),
//! and its node and rail sides are uninhabited.

use ferrovia_channel::{ChannelBuilder, ChannelConfig, DatagramTransport, MultiChannel};
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

/// Nothing to set: no verbs in this build. (Not a unit struct, so
/// `Settings::default()` reads the same in both builds.)
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings(());

pub(crate) fn default_settings() -> Settings {
    Settings::default()
}

pub(crate) fn with_device(_: &mut Settings) -> Result<(), NodeError> {
    Err(not_built())
}

pub(crate) enum Opened {}

impl Opened {
    pub(crate) fn open(_: ChannelBuilder, _: Settings, _: usize) -> Result<Opened, NodeError> {
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
        _: &Settings,
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

pub(crate) enum DatagramSide {}

impl DatagramSide {
    pub(crate) fn open(
        _: &MultiChannel,
        _: &Settings,
        _: u32,
        _: u32,
    ) -> Result<DatagramSide, NodeError> {
        Err(not_built())
    }

    pub(crate) fn link(&self) -> Result<(u32, Link), NodeError> {
        match *self {}
    }

    pub(crate) fn connect(self, _: Vec<Link>) -> Result<Box<dyn DatagramTransport>, NodeError> {
        match self {}
    }
}
