//! The etcd membership (feature `etcd`): `store` (the client, its
//! runtime, bounded calls), `join` (the job's record, claiming a rank,
//! the meeting), `live` (the lease kept alive, the members watched,
//! events, named values).

mod join;
mod live;
mod store;

pub(crate) use join::Joining;
pub(crate) use live::Membership;
