//! The shared vocabulary (`ferrovia-types`) uses the verbs ABI's own
//! values; these compile-time checks keep it equal to the installed
//! headers, so conversions at the verbs transport are free.

use std::mem::{align_of, offset_of, size_of};

use ferrovia_sys as sys;
use ferrovia_types::{AccessFlags, Sge, WcStatus};

const _: () = {
    assert!(size_of::<Sge>() == size_of::<sys::ibv_sge>());
    assert!(align_of::<Sge>() == align_of::<sys::ibv_sge>());
    assert!(offset_of!(sys::ibv_sge, addr) == 0);
    assert!(offset_of!(sys::ibv_sge, length) == 8);
    assert!(offset_of!(sys::ibv_sge, lkey) == 12);

    use sys::ibv_access_flags as A;
    assert!(AccessFlags::LOCAL_WRITE.bits() == A::IBV_ACCESS_LOCAL_WRITE.0);
    assert!(AccessFlags::REMOTE_WRITE.bits() == A::IBV_ACCESS_REMOTE_WRITE.0);
    assert!(AccessFlags::REMOTE_READ.bits() == A::IBV_ACCESS_REMOTE_READ.0);
    assert!(AccessFlags::REMOTE_ATOMIC.bits() == A::IBV_ACCESS_REMOTE_ATOMIC.0);
    assert!(AccessFlags::MW_BIND.bits() == A::IBV_ACCESS_MW_BIND.0);
    assert!(AccessFlags::ON_DEMAND.bits() == A::IBV_ACCESS_ON_DEMAND.0);

    use sys::ibv_wc_status as S;
    assert!(WcStatus::SUCCESS.0 == S::IBV_WC_SUCCESS.0);
    assert!(WcStatus::LOC_LEN_ERR.0 == S::IBV_WC_LOC_LEN_ERR.0);
    assert!(WcStatus::LOC_QP_OP_ERR.0 == S::IBV_WC_LOC_QP_OP_ERR.0);
    assert!(WcStatus::LOC_PROT_ERR.0 == S::IBV_WC_LOC_PROT_ERR.0);
    assert!(WcStatus::WR_FLUSH_ERR.0 == S::IBV_WC_WR_FLUSH_ERR.0);
    assert!(WcStatus::LOC_ACCESS_ERR.0 == S::IBV_WC_LOC_ACCESS_ERR.0);
    assert!(WcStatus::REM_INV_REQ_ERR.0 == S::IBV_WC_REM_INV_REQ_ERR.0);
    assert!(WcStatus::REM_ACCESS_ERR.0 == S::IBV_WC_REM_ACCESS_ERR.0);
    assert!(WcStatus::REM_OP_ERR.0 == S::IBV_WC_REM_OP_ERR.0);
    assert!(WcStatus::RETRY_EXC_ERR.0 == S::IBV_WC_RETRY_EXC_ERR.0);
    assert!(WcStatus::RNR_RETRY_EXC_ERR.0 == S::IBV_WC_RNR_RETRY_EXC_ERR.0);
    assert!(WcStatus::GENERAL_ERR.0 == S::IBV_WC_GENERAL_ERR.0);
};

/// A list of elements as the `ibv_sge` array it is laid out as.
pub(crate) fn as_ibv_sges(sges: &[Sge]) -> *mut sys::ibv_sge {
    // Same size, alignment and field offsets (checked above); the verbs
    // read the list and never write it, despite the `*mut` in their types.
    sges.as_ptr().cast::<sys::ibv_sge>().cast_mut()
}
