//! One scatter/gather element.

/// One scatter/gather element: `length` bytes at `addr` in the
/// registration with local key `lkey`. Laid out exactly as `struct
/// ibv_sge`, so the verbs backend posts a list of them as they are.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Sge {
    addr: u64,
    length: u32,
    lkey: u32,
}

impl Sge {
    /// An element of `length` bytes at `addr` in the registration with key
    /// `lkey`.
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    /// Start address.
    pub const fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub const fn length(&self) -> u32 {
        self.length
    }

    /// Local key.
    pub const fn lkey(&self) -> u32 {
        self.lkey
    }
}

impl std::fmt::Debug for Sge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sge({:#x}+{}, lkey {:#x})",
            self.addr, self.length, self.lkey
        )
    }
}
