//! Segments: a buffer registered once on every rail of an engine (the
//! first rail owns it, the others hold aliases), and what a peer needs to
//! reach one over every rail.

use std::sync::Arc;

use ferrovia_channel::Lease;
use ferrovia_mr::{
    Access, Local, MrRegistry, RegisterOptions, RegisteredMemory, Registration, RemoteMemoryRegion,
    Shared, WIRE_MAX_LEN,
};
use ferrovia_types::AccessFlags;

use crate::error::TransferError;

/// A buffer registered on every rail of an engine: `Local` (the default)
/// for the memory a program writes from and reads into, `Shared` for the
/// memory peers write (a target's segment). Views into it are byte
/// ranges: a descriptor list names them by offset.
pub struct Segment<A: Access = Local> {
    buf: RegisteredMemory<'static, A>,
    /// The registrations on rails 1.. (rail 0's is the buffer's own).
    aliases: Vec<Registration<'static>>,
}

impl<A: Access> std::fmt::Debug for Segment<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("len", &self.buf.len())
            .field("rails", &(self.aliases.len() + 1))
            .finish()
    }
}

impl<A: Access> Segment<A> {
    /// Allocates `len` zeroed bytes registered on every rail (page
    /// aligned; zero-based if `opts` asks: byte `i` at RDMA address `i`,
    /// as a caching allocator's segment is).
    pub(crate) fn alloc(
        registries: &[MrRegistry],
        len: usize,
        opts: RegisterOptions<A>,
    ) -> Result<Segment<A>, TransferError> {
        let (first, rest) = registries
            .split_first()
            .ok_or_else(|| TransferError::Mismatch("an engine with no rail".into()))?;
        let buf = first.alloc(len, opts)?;
        let aliases = rest
            .iter()
            .map(|r| r.register_alias(&buf, opts))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Segment { buf, aliases })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether it is empty (never: segments have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Rails it is registered on.
    pub fn rails(&self) -> usize {
        self.aliases.len() + 1
    }

    /// The buffer (rail 0's registration), for its bytes: `Local` memory
    /// derefs to them; `Shared` memory is read with `read_into`, `to_vec`
    /// or its atomic words.
    pub fn buffer(&self) -> &RegisteredMemory<'static, A> {
        &self.buf
    }

    /// The registration on `rail`.
    pub(crate) fn registration(&self, rail: usize) -> Option<&Registration<'static>> {
        match rail {
            0 => Some(self.buf.registration()),
            r => self.aliases.get(r - 1),
        }
    }

    /// What a peer needs to reach the whole segment over every rail (the
    /// rights it was registered with).
    pub fn remote(&self) -> Result<RemoteSegment, TransferError> {
        let rails = (0..self.rails())
            .map(|r| {
                self.registration(r)
                    .ok_or_else(|| TransferError::Mismatch("a rail without a registration".into()))?
                    .remote()
                    .map_err(TransferError::from)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RemoteSegment { rails })
    }
}

impl Segment<Shared> {
    /// Lends the bytes to writes and reads for the borrow: `Shared`
    /// memory is read through copies and atomics, never a Rust
    /// reference, so the device may write it while the program (or a
    /// peer) looks, as peers' writes do.
    pub fn lease(&self) -> Lease<'_> {
        Lease::shared_memory(&self.buf)
    }
}

impl Segment<Local> {
    /// Lends the bytes to writes for the borrow (the device only reads
    /// them; the program may too).
    pub fn lease(&self) -> Lease<'_> {
        Lease::shared(&self.buf)
    }

    /// The bytes (not while a scope's batch borrows them).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes, to fill or read (not while lent).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Lends the bytes to writes and reads for `'a`, exclusively.
    pub fn lease_mut(&mut self) -> Lease<'_> {
        Lease::exclusive(&mut self.buf)
    }

    /// Gives the segment to owned batches: the lease owns the buffer and
    /// its aliases; every run posted under it holds it until the device is
    /// done. [`Segment::from_lease`] gives it back.
    pub fn into_lease(self) -> Arc<Lease<'static>> {
        Arc::new(Lease::owning_with(self.buf, self.aliases))
    }

    /// The segment back from its lease, once no run holds it (and if it
    /// owns its bytes: [`Segment::into_lease`]'s do); else the lease again.
    pub fn from_lease(lease: Arc<Lease<'static>>) -> Result<Segment<Local>, Arc<Lease<'static>>> {
        let lease = Arc::try_unwrap(lease)?;
        match lease.into_parts() {
            Ok((buf, aliases)) => Ok(Segment { buf, aliases }),
            Err(borrowing) => Err(Arc::new(borrowing)),
        }
    }
}

/// What a peer needs to reach a segment over every rail: one remote
/// descriptor per rail (no local keys), with the rights the owner granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSegment {
    rails: Vec<RemoteMemoryRegion>,
}

impl RemoteSegment {
    /// From one descriptor per rail, all of one length.
    pub fn new(rails: Vec<RemoteMemoryRegion>) -> Result<RemoteSegment, TransferError> {
        let Some(first) = rails.first() else {
            return Err(TransferError::Mismatch(
                "a remote segment needs a rail".into(),
            ));
        };
        if rails.iter().any(|r| r.len() != first.len()) {
            return Err(TransferError::Mismatch(
                "a remote segment's rails differ in length".into(),
            ));
        }
        Ok(RemoteSegment { rails })
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.rails[0].len()
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rails it can be reached over.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }

    /// The descriptor on `rail`.
    pub fn rail(&self, rail: usize) -> Option<RemoteMemoryRegion> {
        self.rails.get(rail).copied()
    }

    /// The rights the owner granted (on every rail alike).
    pub fn access(&self) -> AccessFlags {
        self.rails[0].access()
    }

    /// Its wire form: a count, then each rail's descriptor in its own
    /// wire form (at most 1 + 255 × its maximum length).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.rails.len() as u8];
        let mut buf = [0u8; WIRE_MAX_LEN];
        for r in &self.rails {
            let w = r.encode_into(&mut buf);
            out.push(w.len() as u8);
            out.extend_from_slice(w);
        }
        out
    }

    /// Decodes [`RemoteSegment::encode`]'s form, checking every field.
    pub fn decode(bytes: &[u8]) -> Result<RemoteSegment, TransferError> {
        let bad = |why: &str| TransferError::Mismatch(format!("a remote segment: {why}"));
        let (&n, mut rest) = bytes.split_first().ok_or_else(|| bad("empty"))?;
        let mut rails = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let (&len, tail) = rest.split_first().ok_or_else(|| bad("cut short"))?;
            let len = usize::from(len);
            if tail.len() < len {
                return Err(bad("cut short"));
            }
            rails.push(RemoteMemoryRegion::decode(&tail[..len])?);
            rest = &tail[len..];
        }
        if !rest.is_empty() {
            return Err(bad("bytes after its rails"));
        }
        RemoteSegment::new(rails)
    }
}
