//! What a device offers beyond `ibv_query_device`: on-demand paging,
//! completion timestamps, memory windows (`ibv_query_device_ex`).

use ferrovia_sys as sys;

use crate::context::Context;
use crate::error::{Result, VerbsError, check, lib};

/// On-demand paging capabilities (`struct ibv_odp_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct OdpCaps {
    /// `IBV_ODP_SUPPORT`: on-demand registrations work at all.
    pub supported: bool,
    /// `IBV_ODP_SUPPORT_IMPLICIT`: the whole address space as one region.
    pub implicit: bool,
    /// What RC queue pairs may do on on-demand memory
    /// (`IBV_ODP_SUPPORT_SEND`, `_RECV`, `_WRITE`, `_READ`, `_ATOMIC`,
    /// `_SRQ_RECV` bits).
    pub rc: u32,
    /// The same bits for UD queue pairs.
    pub ud: u32,
}

/// The RC bits an on-demand registration needs for the channel's work:
/// sends and receives, RDMA writes and reads as initiator and target.
pub const ODP_RC_NEEDED: u32 = sys::IBV_ODP_SUPPORT_SEND
    | sys::IBV_ODP_SUPPORT_RECV
    | sys::IBV_ODP_SUPPORT_WRITE
    | sys::IBV_ODP_SUPPORT_READ;

/// Which kinds of memory windows a device binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WindowCaps {
    /// `IBV_DEVICE_MEM_WINDOW`: type 1 windows (bound with `ibv_bind_mw`).
    pub type1: bool,
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2A` or `_2B`: type 2 windows, bound by
    /// a work request on one queue pair and reached only through it.
    pub type2: bool,
    /// How many windows the device holds (`max_mw`).
    pub max: u32,
}

/// The extended attributes of a device (`ibv_query_device_ex`). A
/// provider without that verb answers as if it offered none of them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceCaps {
    /// The device name, for errors naming it.
    pub device: String,
    /// On-demand paging.
    pub odp: OdpCaps,
    /// Valid bits of a completion timestamp; 0: the device gives none.
    pub completion_timestamp_mask: u64,
    /// The clock of those timestamps in kHz; 0: unknown.
    pub hca_core_clock_khz: u64,
    /// Memory windows.
    pub windows: WindowCaps,
    /// Most address handles (datagram destinations).
    pub max_ah: u32,
    /// Whether `ibv_query_device_ex` answered (else the rest is the
    /// plain query's view: nothing extended offered).
    pub extended_query: bool,
}

impl DeviceCaps {
    /// `Ok` if the device stamps completions, else the typed refusal.
    pub fn require_timestamps(&self) -> Result<()> {
        if self.completion_timestamp_mask == 0 {
            return Err(VerbsError::Unsupported {
                device: self.device.clone(),
                what: "completion timestamps",
                detail: "completion_timestamp_mask is 0 (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)"
                    .into(),
            });
        }
        Ok(())
    }

    /// `Ok` if RC on-demand registrations work for sends, receives,
    /// writes and reads, else the typed refusal naming the missing bits.
    pub fn require_odp(&self) -> Result<()> {
        let missing = ODP_RC_NEEDED & !self.odp.rc;
        if !self.odp.supported || missing != 0 {
            return Err(VerbsError::Unsupported {
                device: self.device.clone(),
                what: "on-demand paging",
                detail: if self.odp.supported {
                    format!("rc_odp_caps lacks {missing:#x} (IBV_ODP_SUPPORT_SEND/RECV/WRITE/READ)")
                } else {
                    "general_odp_caps lacks IBV_ODP_SUPPORT".into()
                },
            });
        }
        Ok(())
    }

    /// `Ok` if the device binds type 2 windows, else the typed refusal.
    pub fn require_type2_windows(&self) -> Result<()> {
        if !self.windows.type2 || self.windows.max == 0 {
            return Err(VerbsError::Unsupported {
                device: self.device.clone(),
                what: "type 2 memory windows",
                detail: format!(
                    "device_cap_flags lacks IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B (max_mw {})",
                    self.windows.max
                ),
            });
        }
        Ok(())
    }
}

impl Context {
    /// The device's extended attributes. A provider without
    /// `ibv_query_device_ex` is asked `ibv_query_device` and offers
    /// nothing extended.
    pub fn query_device_ex(&self) -> Result<DeviceCaps> {
        let mut a = sys::ibv_device_attr_ex::default();
        // SAFETY: a live context and an out-pointer to a zeroed struct of
        // the size the shim passes (`sizeof(struct ibv_device_attr_ex)`
        // from the same headers bindgen read).
        let ret = unsafe { sys::ferrovia_query_device_ex(self.as_raw(), &mut a) };
        let extended = match ret {
            0 => true,
            libc::EOPNOTSUPP => {
                a = sys::ibv_device_attr_ex::default();
                // SAFETY: a live context and an out-pointer.
                check("ibv_query_device", unsafe {
                    lib()?.ibv_query_device(self.as_raw(), &mut a.orig_attr)
                })?;
                false
            }
            r => check("ibv_query_device_ex", r).map(|()| false)?,
        };
        let flags = u64::from(a.orig_attr.device_cap_flags) | a.device_cap_flags_ex;
        let has = |bit: u32| flags & u64::from(bit) != 0;
        let odp = &a.odp_caps;
        Ok(DeviceCaps {
            device: self.name().to_owned(),
            odp: OdpCaps {
                supported: odp.general_caps & u64::from(sys::IBV_ODP_SUPPORT) != 0,
                implicit: odp.general_caps & u64::from(sys::IBV_ODP_SUPPORT_IMPLICIT) != 0,
                rc: odp.per_transport_caps.rc_odp_caps,
                ud: odp.per_transport_caps.ud_odp_caps,
            },
            completion_timestamp_mask: a.completion_timestamp_mask,
            hca_core_clock_khz: a.hca_core_clock,
            windows: WindowCaps {
                type1: has(sys::IBV_DEVICE_MEM_WINDOW),
                type2: has(sys::IBV_DEVICE_MEM_WINDOW_TYPE_2A)
                    || has(sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B),
                max: u32::try_from(a.orig_attr.max_mw).unwrap_or(0),
            },
            max_ah: u32::try_from(a.orig_attr.max_ah).unwrap_or(0),
            extended_query: extended,
        })
    }
}
