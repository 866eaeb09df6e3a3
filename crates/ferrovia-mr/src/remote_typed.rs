//! Typed navigation in remote memory: a `T`, an array of `T`, a field.

use std::marker::PhantomData;
use std::mem::size_of;

use crate::error::MrError;
use crate::remote::RemoteMemoryRegion;

/// A `T` in a peer's memory. `T` should be `#[repr(C)]` plain data whose
/// layout both sides share.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RemoteTyped<T> {
    region: RemoteMemoryRegion,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for RemoteTyped<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RemoteTyped<T> {}

/// An array of `T` in a peer's memory.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RemoteArray<T> {
    region: RemoteMemoryRegion,
    len: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for RemoteArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RemoteArray<T> {}

fn elem_size<T>() -> Result<u64, MrError> {
    match size_of::<T>() {
        0 => Err(MrError::ZeroLength { addr: 0 }),
        n => Ok(n as u64),
    }
}

impl RemoteMemoryRegion {
    /// The `T` at the start of this region (which must hold one).
    pub fn typed<T>(&self) -> Result<RemoteTyped<T>, MrError> {
        Ok(RemoteTyped {
            region: self.sub_region(0, elem_size::<T>()?)?,
            _t: PhantomData,
        })
    }

    /// This region as an array of as many whole `T` as fit.
    pub fn array<T>(&self) -> Result<RemoteArray<T>, MrError> {
        let size = elem_size::<T>()?;
        let len = self.len() / size;
        if len == 0 {
            return Err(MrError::OutOfRange {
                id: 0,
                offset: 0,
                len: size,
                size: self.len(),
            });
        }
        Ok(RemoteArray {
            region: self.sub_region(0, len * size)?,
            len,
            _t: PhantomData,
        })
    }
}

impl<T> RemoteTyped<T> {
    /// The bytes of the `T`.
    pub fn region(&self) -> RemoteMemoryRegion {
        self.region
    }

    /// The field at `offset` of type `F`. Prefer the
    /// [`remote_field!`](crate::remote_field) macro, which computes the
    /// offset with `offset_of!` and infers `F`.
    ///
    /// `_project` only names the field's type; it is never called.
    pub fn field_at<F>(
        &self,
        offset: usize,
        _project: fn(&T) -> &F,
    ) -> Result<RemoteTyped<F>, MrError> {
        Ok(RemoteTyped {
            region: self.region.sub_region(offset as u64, elem_size::<F>()?)?,
            _t: PhantomData,
        })
    }
}

impl<T> RemoteArray<T> {
    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: an array has at least one element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of the whole array.
    pub fn region(&self) -> RemoteMemoryRegion {
        self.region
    }

    /// Element `index`.
    pub fn get(&self, index: u64) -> Result<RemoteTyped<T>, MrError> {
        self.slice(index, 1).map(|a| RemoteTyped {
            region: a.region,
            _t: PhantomData,
        })
    }

    /// Elements `start..start + count`.
    pub fn slice(&self, start: u64, count: u64) -> Result<RemoteArray<T>, MrError> {
        let size = elem_size::<T>()?;
        let overflow = MrError::Overflow {
            addr: start,
            len: count,
        };
        let offset = start.checked_mul(size).ok_or(overflow)?;
        let bytes = count.checked_mul(size).ok_or(MrError::Overflow {
            addr: start,
            len: count,
        })?;
        Ok(RemoteArray {
            region: self.region.sub_region(offset, bytes)?,
            len: count,
            _t: PhantomData,
        })
    }
}

/// The remote location of a field: `remote_field!(typed, Struct, field)`
/// gives a `RemoteTyped<FieldType>` (or an error if the region is short).
#[macro_export]
macro_rules! remote_field {
    ($typed:expr, $ty:ty, $field:ident) => {
        $typed.field_at(::core::mem::offset_of!($ty, $field), |s: &$ty| &s.$field)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Header {
        magic: u32,
        count: u64,
        slots: [u16; 4],
    }

    #[test]
    fn fields_and_elements() {
        let r = RemoteMemoryRegion::new(0x1000, 4096, 9).unwrap();
        let h = r.typed::<Header>().unwrap();
        assert_eq!(h.region().len(), size_of::<Header>() as u64);
        let count = remote_field!(h, Header, count).unwrap();
        assert_eq!(count.region().addr(), 0x1000 + 8);
        assert_eq!(count.region().len(), 8);
        let slots = remote_field!(h, Header, slots).unwrap();
        assert_eq!(slots.region().addr(), 0x1000 + 16);
        let magic = remote_field!(h, Header, magic).unwrap();
        assert_eq!((magic.region().addr(), magic.region().rkey()), (0x1000, 9));

        let arr = r.array::<u64>().unwrap();
        assert_eq!(arr.len(), 512);
        assert_eq!(arr.get(511).unwrap().region().addr(), 0x1000 + 511 * 8);
        assert!(matches!(arr.get(512), Err(MrError::OutOfRange { .. })));
        assert!(matches!(
            arr.slice(u64::MAX, 2),
            Err(MrError::Overflow { .. })
        ));
        let part = arr.slice(10, 5).unwrap();
        assert_eq!((part.region().addr(), part.len()), (0x1000 + 80, 5));

        let tiny = RemoteMemoryRegion::new(0, 4, 1).unwrap();
        assert!(tiny.typed::<Header>().is_err());
        assert!(tiny.array::<u64>().is_err());
    }
}
