//! The backends by name: [`Backend`], as `FERROVIA_BACKEND` spells it.
//! Apart from `backend` (which opens and connects them), so the errors
//! can name a backend without importing what fails with them.

use std::str::FromStr;

/// Which transport a node runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// libibverbs RC queue pairs (InfiniBand, RoCE, soft-RoCE).
    Verbs,
    /// UCX (tcp, shared memory, or UCX's own RDMA transports): where no
    /// RDMA device is usable. Needs the `ucx` feature (on by default).
    Ucx,
}

/// A name that is no backend (`FERROVIA_BACKEND=tcp`, say): the text
/// given. Into [`BootstrapError::MalformedVar`](crate::BootstrapError)
/// where a variable held it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} names no backend: expected verbs or ucx")]
pub struct UnknownBackend(pub String);

impl Backend {
    /// `"verbs"` or `"ucx"`, as `FERROVIA_BACKEND` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Verbs => "verbs",
            Backend::Ucx => "ucx",
        }
    }

    /// `FERROVIA_BACKEND`, if set.
    pub fn from_env() -> Result<Option<Backend>, UnknownBackend> {
        match std::env::var("FERROVIA_BACKEND") {
            Ok(v) if !v.is_empty() => v.parse().map(Some),
            _ => Ok(None),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(s: &str) -> Result<Backend, UnknownBackend> {
        match s.trim().to_ascii_lowercase().as_str() {
            "verbs" | "ibverbs" | "rdma" => Ok(Backend::Verbs),
            "ucx" => Ok(Backend::Ucx),
            _ => Err(UnknownBackend(s.to_owned())),
        }
    }
}
