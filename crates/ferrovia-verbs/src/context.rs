//! An open device context and its queries.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::device::with_device_list;
use crate::error::{Result, VerbsError, check, lib, loaded, null_error};
use crate::gid::{Gid, GidEntry, GidType, pick_gid};
use crate::port::{LinkLayer, Mtu, PortAttributes, PortState};

/// An open RDMA device (`struct ibv_context`).
///
/// Cheap to clone; every object made from it keeps it open.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) ctx: NonNull<sys::ibv_context>,
    pub(crate) name: String,
}

// SAFETY: libibverbs contexts are thread-safe (all verbs may be called from
// any thread, rdma-core's provider locks protect shared state).
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if let Some(l) = loaded() {
            // SAFETY: every child object holds an Arc to this context, so
            // none is left when it closes; it is closed once, here.
            unsafe { l.ibv_close_device(self.ctx.as_ptr()) };
        }
    }
}

/// Limits of a device, from `ibv_query_device`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttributes {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (host byte order).
    pub node_guid: u64,
    /// Largest registrable memory region.
    pub max_mr_size: u64,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: u32,
    /// Maximum CQ entries.
    pub max_cqe: u32,
    /// Maximum number of MRs.
    pub max_mr: u32,
    /// Maximum outstanding RDMA reads/atomics as responder, per QP.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA reads/atomics as initiator, per QP.
    pub max_qp_init_rd_atom: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Whether and how the device runs remote atomics.
    pub atomic_cap: AtomicCap,
    /// Maximum shared receive queues (0: none).
    pub max_srq: u32,
    /// Maximum receives one shared receive queue holds.
    pub max_srq_wr: u32,
}

/// How a device runs remote atomics (`enum ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AtomicCap {
    /// No remote atomics.
    None,
    /// Atomic with respect to other atomics through this device.
    Hca,
    /// Atomic with respect to every agent on the memory bus.
    Global,
}

impl AtomicCap {
    fn from_raw(v: u32) -> AtomicCap {
        match v {
            sys::IBV_ATOMIC_HCA => AtomicCap::Hca,
            sys::IBV_ATOMIC_GLOB => AtomicCap::Global,
            _ => AtomicCap::None,
        }
    }

    /// Whether remote fetch-and-add and compare-and-swap work at all.
    pub fn supported(self) -> bool {
        self != AtomicCap::None
    }
}

fn to_u32(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

impl Context {
    /// Opens the device named `name` (e.g. `"rxe0"`).
    pub fn open(name: &str) -> Result<Context> {
        with_device_list(|devs| {
            let mut present = Vec::new();
            for &dev in devs {
                // SAFETY: `dev` is from a live device list.
                let dev_name = unsafe { CStr::from_ptr(lib()?.ibv_get_device_name(dev)) }
                    .to_string_lossy()
                    .into_owned();
                if dev_name == name {
                    // SAFETY: `dev` is valid; the context outlives the list.
                    let ctx = unsafe { lib()?.ibv_open_device(dev) };
                    let ctx = NonNull::new(ctx).ok_or_else(|| null_error("ibv_open_device"))?;
                    tracing::debug!("opened RDMA device {dev_name}");
                    return Ok(Context {
                        inner: Arc::new(ContextInner {
                            ctx,
                            name: dev_name,
                        }),
                    });
                }
                present.push(dev_name);
            }
            if present.is_empty() {
                Err(VerbsError::NoDevice)
            } else {
                Err(VerbsError::NoSuchDevice {
                    name: name.to_owned(),
                    present,
                })
            }
        })
    }

    /// Opens the device named by `FERROVIA_DEVICE` if set, else the first
    /// device with an active port.
    pub fn open_default() -> Result<Context> {
        if let Ok(name) = std::env::var("FERROVIA_DEVICE") {
            return Context::open(&name);
        }
        let mut first_err = None;
        for dev in crate::device::devices()? {
            match Context::open(&dev.name) {
                Ok(ctx) if ctx.active_port().is_ok() => return Ok(ctx),
                Ok(_) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.unwrap_or(VerbsError::NoDevice))
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The raw context, for `ferrovia-sys` calls.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.inner.ctx.as_ptr()
    }

    /// Queries the device limits.
    pub fn query_device(&self) -> Result<DeviceAttributes> {
        let mut a = sys::ibv_device_attr::default();
        // SAFETY: valid context and out-pointer.
        check("ibv_query_device", unsafe {
            lib()?.ibv_query_device(self.as_raw(), &mut a)
        })?;
        // SAFETY: fw_ver is a NUL-terminated char array filled by the driver.
        let fw = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) };
        Ok(DeviceAttributes {
            fw_ver: fw.to_string_lossy().into_owned(),
            node_guid: u64::from_be(a.node_guid),
            max_mr_size: a.max_mr_size,
            max_qp: to_u32(a.max_qp),
            max_qp_wr: to_u32(a.max_qp_wr),
            max_sge: to_u32(a.max_sge),
            max_cqe: to_u32(a.max_cqe),
            max_mr: to_u32(a.max_mr),
            max_qp_rd_atom: to_u32(a.max_qp_rd_atom),
            max_qp_init_rd_atom: to_u32(a.max_qp_init_rd_atom),
            phys_port_cnt: a.phys_port_cnt,
            atomic_cap: AtomicCap::from_raw(a.atomic_cap),
            max_srq: to_u32(a.max_srq),
            max_srq_wr: to_u32(a.max_srq_wr),
        })
    }

    /// Queries port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttributes> {
        // Zeroed, as the header's inline does: the exported symbol fills
        // only the leading, older part of the struct (every field read
        // below is in it).
        let mut a = sys::ibv_port_attr::default();
        // SAFETY: a live context, and an out-pointer to a struct that
        // begins with the `_compat_ibv_port_attr` layout the exported
        // `ibv_query_port` writes (rdma-core appended fields after it).
        check("ibv_query_port", unsafe {
            lib()?.ibv_query_port(self.as_raw(), port, (&raw mut a).cast())
        })?;
        let mtu = |m: sys::ibv_mtu| Mtu::from_raw(m.0).unwrap_or(Mtu::Mtu256);
        Ok(PortAttributes {
            port,
            state: PortState::from_raw(a.state.0),
            max_mtu: mtu(a.max_mtu),
            active_mtu: mtu(a.active_mtu),
            link_layer: match u32::from(a.link_layer) {
                sys::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
                sys::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
                _ => LinkLayer::Unspecified,
            },
            lid: a.lid,
            gid_table_len: to_u32(a.gid_tbl_len),
            max_msg_size: a.max_msg_sz,
        })
    }

    /// The first active port.
    pub fn active_port(&self) -> Result<PortAttributes> {
        let ports = self.query_device()?.phys_port_cnt;
        for port in 1..=ports {
            let attr = self.query_port(port)?;
            if attr.is_active() {
                return Ok(attr);
            }
        }
        Err(VerbsError::InvalidArgument(format!(
            "device {} has no active port (of {ports})",
            self.name()
        )))
    }

    /// The populated entries of port `port`'s GID table, with their types.
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_table_len;
        let mut out = Vec::new();
        for index in 0..len {
            let mut e = sys::ibv_gid_entry::default();
            // SAFETY: valid context and out-pointer of the size passed (what
            // the header's `ibv_query_gid_ex` inline passes); flags must be 0.
            let ret = unsafe {
                lib()?._ibv_query_gid_ex(
                    self.as_raw(),
                    u32::from(port),
                    index,
                    &mut e,
                    0,
                    std::mem::size_of::<sys::ibv_gid_entry>(),
                )
            };
            // Empty slots report ENODATA (or EINVAL on some providers).
            if ret != 0 {
                continue;
            }
            // SAFETY: `raw` is the byte view of the 16-byte GID union.
            let gid = Gid(unsafe { e.gid.raw });
            if gid.is_zero() {
                continue;
            }
            out.push(GidEntry {
                gid,
                index,
                port,
                gid_type: GidType::from_raw(e.gid_type),
            });
        }
        Ok(out)
    }

    /// The GID to connect with on `port` (see [`pick_gid`]).
    pub fn pick_gid(&self, port: u8) -> Result<GidEntry> {
        let ethernet = self.query_port(port)?.link_layer == LinkLayer::Ethernet;
        pick_gid(&self.gid_table(port)?, ethernet).ok_or_else(|| VerbsError::NoUsableGid {
            device: self.name().to_owned(),
            port,
        })
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.name)
            .finish()
    }
}
