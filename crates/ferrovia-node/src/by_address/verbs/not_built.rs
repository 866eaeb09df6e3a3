//! Connection by address on verbs, in a build without verbs: binding and
//! resolving refuse, naming the missing backend; the listener, request
//! and connection types are uninhabited, so their methods never run.

use std::net::SocketAddr;
use std::time::Duration;

use ferrovia_channel::{Channel, ChannelBuilder};

use crate::backend::VerbsSettings;
use ferrovia_mr::MrRegistry;

use crate::Backend;
use crate::by_address::error::ConnectError;

pub(crate) enum VerbsListener {}
pub(crate) enum VerbsIncoming {}
pub(crate) enum VerbsOutgoing {}

impl VerbsListener {
    pub(crate) fn bind(
        addr: SocketAddr,
        _: &ChannelBuilder,
        _: &VerbsSettings,
        _: usize,
    ) -> Result<VerbsListener, ConnectError> {
        Err(ConnectError::NotBuilt {
            addr,
            backend: Backend::Verbs,
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        match *self {}
    }

    pub(crate) fn refused(&self) -> u64 {
        match *self {}
    }

    pub(crate) fn accept(
        &self,
        _: Duration,
    ) -> Result<(SocketAddr, Vec<u8>, VerbsIncoming), ConnectError> {
        match *self {}
    }
}

impl VerbsIncoming {
    pub(crate) fn registry(&self) -> &MrRegistry {
        match *self {}
    }

    pub(crate) fn accept(self, _: Vec<u8>, _: &[u8], _: Duration) -> Result<Channel, ConnectError> {
        match self {}
    }

    pub(crate) fn reject(self, _: &[u8]) -> Result<(), ConnectError> {
        match self {}
    }
}

impl VerbsOutgoing {
    pub(crate) fn registry(&self) -> &MrRegistry {
        match *self {}
    }

    pub(crate) fn connect(self, _: &[u8], _: Duration) -> Result<Channel, ConnectError> {
        match self {}
    }
}

pub(crate) fn resolve(
    addr: SocketAddr,
    _: &ChannelBuilder,
    _: &VerbsSettings,
    _: Duration,
) -> Result<VerbsOutgoing, ConnectError> {
    Err(ConnectError::NotBuilt {
        addr,
        backend: Backend::Verbs,
    })
}

/// No verbs device in this build: none has an address.
pub(crate) fn local_ip() -> Option<std::net::IpAddr> {
    None
}
