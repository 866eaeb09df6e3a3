//! The engine as revocation reaches it ([`revoke::Driver`]): weak
//! handles, upgraded for one revocation at a time.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::Engine;
use super::progress::{Cmd, EngineCell, Shared, turn_inline};
use crate::revoke::{self, Revocation};

/// The transport's engine, weakly.
pub(crate) struct EngineDriver {
    shared: Weak<Shared>,
    engine: Weak<Mutex<Engine>>,
}

impl EngineDriver {
    pub(crate) fn new(shared: &Arc<Shared>, engine: &EngineCell) -> EngineDriver {
        EngineDriver {
            shared: Arc::downgrade(shared),
            engine: Arc::downgrade(engine),
        }
    }
}

/// The engine, held while one revocation waits.
struct Held {
    shared: Arc<Shared>,
    engine: EngineCell,
}

impl revoke::Driver for EngineDriver {
    fn upgrade(&self) -> Option<Box<dyn revoke::Turn>> {
        Some(Box::new(Held {
            shared: self.shared.upgrade()?,
            engine: self.engine.upgrade()?,
        }))
    }
}

impl revoke::Turn for Held {
    fn submit(&self, r: Arc<Revocation>) {
        self.shared.send(Cmd::Revoke(r));
    }

    fn alive(&self) -> bool {
        self.shared.alive.load(SeqCst)
    }

    fn turn_inline(&self) -> bool {
        turn_inline(&self.engine, &self.shared)
    }

    fn wake(&self) {
        self.shared.wake(true);
    }
}
