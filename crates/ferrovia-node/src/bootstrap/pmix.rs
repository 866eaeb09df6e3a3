//! Meeting through PMIx: each rank puts what every peer needs from it
//! (one key per peer), commits, and enters a fence that collects the
//! data; then it reads what each peer put for it. A second fence, with no
//! data, is the ready round. Rank 0 puts a random job token for the
//! control path: PMIx is authenticated by the resource manager, so no
//! token derived from a job id is needed. This module alone asks whether
//! the build has PMIx (`built.rs`, else `not_built.rs`).

#[cfg(feature = "pmix")]
mod built;
#[cfg(not(feature = "pmix"))]
mod not_built;

#[cfg(feature = "pmix")]
pub(crate) use built::PmixMeeting;
#[cfg(not(feature = "pmix"))]
pub(crate) use not_built::PmixMeeting;
