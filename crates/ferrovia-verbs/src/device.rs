//! Listing the RDMA devices of this host.

use std::ffi::CStr;

use ferrovia_sys as sys;

use crate::error::{Result, VerbsError, last_errno, lib};

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
        list.iter()
            .map(|&dev| {
                // SAFETY: `dev` comes from a live device list; the name is a
                // NUL-terminated string owned by the device.
                let name = unsafe { CStr::from_ptr(lib()?.ibv_get_device_name(dev)) };
                // SAFETY: as above.
                let guid = u64::from_be(unsafe { lib()?.ibv_get_device_guid(dev) });
                Ok(DeviceInfo {
                    name: name.to_string_lossy().into_owned(),
                    guid,
                })
            })
            .collect::<Result<Vec<_>>>()
    })
}

/// Runs `f` over the device list, which is freed afterwards.
pub(crate) fn with_device_list<T>(
    f: impl FnOnce(&[*mut sys::ibv_device]) -> Result<T>,
) -> Result<T> {
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below.
    let list = unsafe { lib()?.ibv_get_device_list(&mut n) };
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
    unsafe { lib()?.ibv_free_device_list(list) };
    out
}
