//! The memory layer's error type.

/// Everything that can go wrong in `ferrovia-mr`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MrError {
    /// A range of zero bytes was asked for.
    #[error("zero-length range at {addr:#x}")]
    ZeroLength {
        /// Its start.
        addr: u64,
    },
    /// `addr + len` overflows the address space.
    #[error("range {addr:#x} + {len} overflows the address space")]
    Overflow {
        /// Its start.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// No registration contains any byte of the range.
    #[error("range {addr:#x}+{len} is not inside any registration")]
    NotRegistered {
        /// Its start.
        addr: usize,
        /// Its length.
        len: usize,
    },
    /// The range starts in one registration and ends in another; one SGE
    /// can only use one key.
    #[error("range {addr:#x}+{len} straddles registrations {first} and {second}")]
    Straddles {
        /// Its start.
        addr: usize,
        /// Its length.
        len: usize,
        /// The registration holding its first byte.
        first: usize,
        /// The registration holding its last byte.
        second: usize,
    },
    /// The range reaches past the registration (or region) it starts in.
    #[error("range at offset {offset} + {len} exceeds the {size}-byte region {id}")]
    OutOfRange {
        /// The registration or region id (0 for remote regions).
        id: usize,
        /// Offset of the range in the region.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Size of the region.
        size: u64,
    },
    /// The backend (its registrar) does not offer this kind of
    /// registration.
    #[error("this backend does not offer {what}")]
    NotOffered {
        /// What was asked for, e.g. `"dma-buf registration"`.
        what: &'static str,
    },
    /// The registration is device memory (a dma-buf): it has no bytes in
    /// this process to borrow, so it is named by range
    /// ([`Registration::view_at`](crate::Registration::view_at)), never by
    /// a slice.
    #[error("registration {id} is device memory (a dma-buf) with no bytes in this process")]
    DeviceMemory {
        /// The registration.
        id: usize,
    },
    /// The registration does not grant an access the operation needs.
    #[error("{what} needs access the registration was not given: {needed}")]
    AccessNotGranted {
        /// What needed it.
        what: &'static str,
        /// The missing right, e.g. `"REMOTE_WRITE"`.
        needed: &'static str,
    },
    /// An explicit RDMA address whose offset within a page differs from
    /// the segment's (the kernel refuses such registrations).
    #[error(
        "RDMA base {iova:#x} and address {addr:#x} differ in their offset within a {page}-byte page"
    )]
    MisalignedRdmaBase {
        /// The segment's address.
        addr: usize,
        /// The RDMA address asked for.
        iova: u64,
        /// The page size.
        page: u64,
    },
    /// An address that is not aligned as the operation needs.
    #[error(
        "address {addr:#x} is not {align}-byte aligned (a word of shared memory is an aligned one)"
    )]
    Misaligned {
        /// The address.
        addr: usize,
        /// The alignment needed.
        align: usize,
    },
    /// Peers' access cannot be ended: other handles keep the registration
    /// (and its remote key) alive.
    #[error("the registration has {handles} handles; only a sole handle can end peers' access")]
    StillShared {
        /// How many handles exist.
        handles: usize,
    },
    /// A wire form with a version this build does not speak.
    #[error(
        "remote-region wire form version {found} is not supported (this build speaks {supported})"
    )]
    UnknownWireVersion {
        /// The version byte found.
        found: u8,
        /// The version this build writes.
        supported: u8,
    },
    /// A wire form that ends early.
    #[error("remote-region wire form is truncated ({len} bytes)")]
    Truncated {
        /// How many bytes there were.
        len: usize,
    },
    /// A wire form whose fields do not decode.
    #[error("remote-region wire form is malformed: {0}")]
    Malformed(String),
    /// The registrar failed; its own typed error inside (a `VerbsError`
    /// naming the verb and its errno, a `UcxError`).
    #[error(transparent)]
    Registrar(Box<dyn std::error::Error + Send + Sync>),
}

/// Checks `addr + len` for zero length and overflow; returns the end.
pub(crate) fn checked_end(addr: u64, len: u64) -> Result<u64, MrError> {
    if len == 0 {
        return Err(MrError::ZeroLength { addr });
    }
    addr.checked_add(len).ok_or(MrError::Overflow { addr, len })
}

/// Why [`RegisteredMemory::into_local`](crate::RegisteredMemory::into_local)
/// failed; the shared buffer is handed back unchanged.
#[derive(thiserror::Error)]
#[error("cannot end peers' access to the buffer: {error}")]
pub struct IntoLocalError<'a> {
    pub(crate) buffer: crate::SharedSlice<'a>,
    pub(crate) error: MrError,
}

impl<'a> IntoLocalError<'a> {
    /// The buffer, still shared.
    pub fn into_buffer(self) -> crate::SharedSlice<'a> {
        self.buffer
    }

    /// The reason.
    pub fn error(&self) -> &MrError {
        &self.error
    }
}

impl std::fmt::Debug for IntoLocalError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntoLocalError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}
