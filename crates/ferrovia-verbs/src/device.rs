//! Listing the RDMA devices of this host.

use std::ffi::CStr;

use ferrovia_sys as sys;

use crate::error::{Result, VerbsError, last_errno};

/// An RDMA device present on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kernel name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// Node GUID, in host byte order.
    pub guid: u64,
}

/// Lists the RDMA devices of this host.
///
/// A kernel without RDMA support (`ibv_get_device_list` returning NULL with
/// `ENOSYS`) and a host without devices both give `Ok(vec![])`.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    with_device_list(|list| {
        Ok(list
            .iter()
            .map(|&dev| {
                // SAFETY: `dev` comes from a live device list; the name is a
                // NUL-terminated string owned by the device.
                let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) };
                // SAFETY: as above.
                let guid = u64::from_be(unsafe { sys::ibv_get_device_guid(dev) });
                DeviceInfo {
                    name: name.to_string_lossy().into_owned(),
                    guid,
                }
            })
            .collect())
    })
}

/// Runs `f` over the device list, which is freed afterwards.
pub(crate) fn with_device_list<T>(
    f: impl FnOnce(&[*mut sys::ibv_device]) -> Result<T>,
) -> Result<T> {
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return match last_errno() {
            None | Some(libc::ENOSYS) | Some(libc::ENODEV) => f(&[]),
            Some(errno) => Err(VerbsError::Verb {
                verb: "ibv_get_device_list",
                errno,
            }),
        };
    }
    let len = usize::try_from(n).unwrap_or(0);
    // SAFETY: libibverbs returns `n` valid device pointers at `list`.
    let devs = unsafe { std::slice::from_raw_parts(list, len) };
    let out = f(devs);
    // SAFETY: `list` came from ibv_get_device_list and is freed once; opened
    // contexts stay valid after the list is freed (ibv_get_device_list(3)).
    unsafe { sys::ibv_free_device_list(list) };
    out
}

/// The system page size. Registrations with an explicit RDMA address need
/// it: the kernel requires the address and the RDMA address to share their
/// offset within a page.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v)
        .ok()
        .filter(|&p| p.is_power_of_two())
        .unwrap_or(4096)
}
