//! Connection by address on UCX, in a build without UCX: binding and
//! resolving refuse, naming the missing backend; the listener, request
//! and connection types are uninhabited, so their methods never run.

use std::net::SocketAddr;
use std::time::Duration;

use ferrovia_channel::{Channel, ChannelBuilder};
use ferrovia_mr::MrRegistry;

use crate::Backend;
use crate::by_address::error::ConnectError;

/// No UCX settings can be given in this build: always `None`.
pub(crate) type Settings = Option<std::convert::Infallible>;

pub(crate) enum UcxSide {}
pub(crate) enum UcxIncoming {}
pub(crate) enum UcxOutgoing {}

impl UcxSide {
    pub(crate) fn bind(
        addr: SocketAddr,
        _: &ChannelBuilder,
        _: &Settings,
        _: usize,
        _: Duration,
    ) -> Result<UcxSide, ConnectError> {
        Err(ConnectError::NotBuilt {
            addr,
            backend: Backend::Ucx,
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
    ) -> Result<(SocketAddr, Vec<u8>, UcxIncoming), ConnectError> {
        match *self {}
    }
}

impl UcxIncoming {
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

impl UcxOutgoing {
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
    _: &Settings,
) -> Result<UcxOutgoing, ConnectError> {
    Err(ConnectError::NotBuilt {
        addr,
        backend: Backend::Ucx,
    })
}
