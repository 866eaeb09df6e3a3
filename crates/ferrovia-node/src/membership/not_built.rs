//! A build without etcd: a store-backed job fails to start naming the
//! feature, and the membership types are uninhabited.

use std::time::Duration;

use crate::error::{BootstrapError, NodeError};
use crate::membership::{MemberEvent, StoreConfig};

/// Never made: this build has no etcd.
pub(crate) enum Joining {}

/// Never made: this build has no etcd.
pub(crate) enum Membership {}

impl Joining {
    pub(crate) fn start(
        _cfg: &StoreConfig,
        _rank: usize,
        _n: usize,
        _token: Option<&str>,
        _timeout: Duration,
    ) -> Result<Joining, NodeError> {
        Err(BootstrapError::EngineNotBuilt {
            engine: "etcd",
            feature: "etcd",
        }
        .into())
    }

    pub(crate) fn who(&self) -> (usize, usize) {
        match *self {}
    }

    pub(crate) fn endpoint(&self) -> &str {
        match *self {}
    }

    pub(crate) fn token(&self) -> &str {
        match *self {}
    }

    pub(crate) fn exchange(&mut self, _blobs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, NodeError> {
        match *self {}
    }

    pub(crate) fn ready(self) -> Result<Membership, NodeError> {
        match self {}
    }
}

impl Membership {
    pub(crate) fn incarnation(&self) -> u64 {
        match *self {}
    }

    pub(crate) fn incarnations(&self) -> &[u64] {
        match *self {}
    }

    pub(crate) fn is_replacement(&self) -> bool {
        match *self {}
    }

    pub(crate) fn next_event(&self, _timeout: Duration) -> Option<MemberEvent> {
        match *self {}
    }

    pub(crate) fn joined_blob(&self, _rank: usize) -> Result<(Vec<u8>, u64), NodeError> {
        match *self {}
    }

    pub(crate) fn set_running(&mut self) -> Result<(), NodeError> {
        match *self {}
    }

    pub(crate) fn publish(&self, _name: &str, _value: Vec<u8>) -> Result<(), NodeError> {
        match *self {}
    }

    pub(crate) fn fetch(&self, _name: &str, _timeout: Duration) -> Result<Vec<u8>, NodeError> {
        match *self {}
    }
}
