//! How a verbs failure reaches the channel layer: as
//! [`TransportError::Backend`] with the [`VerbsError`] (the verb and its
//! errno) inside, as UCX's failures reach it, so the channel knows no
//! backend.

use ferrovia_channel::TransportError;
use ferrovia_mr::MrError;
use ferrovia_verbs::VerbsError;

/// A verbs failure as a transport error.
pub(crate) fn from_verbs(e: VerbsError) -> TransportError {
    TransportError::Backend(Box::new(e))
}

/// A verbs failure to register memory as a registry error.
pub(crate) fn registration(e: VerbsError) -> MrError {
    MrError::Registrar(Box::new(e))
}

/// The verbs error inside a transport error, if it is one: which verb
/// failed and with which errno.
pub fn verbs_error(e: &TransportError) -> Option<&VerbsError> {
    match e {
        TransportError::Backend(inner) => inner.downcast_ref(),
        _ => None,
    }
}
