//! The fence: every process of the job enters it, and with data
//! collection each leaves holding what every other one put. PMIx's
//! blocking fence waits as long as the host's server likes, so ferrovia
//! calls the non-blocking one and waits on its callback up to a deadline.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::client::{Client, call_error, info_bool};
use crate::error::PmixError;
use crate::ffi;

/// What the fence's callback and the waiter share. The callback holds
/// one reference (given to PMIx as its `cbdata`), so a waiter that gives
/// up leaves it valid for a callback that comes later.
struct Done {
    status: Mutex<Option<ffi::pmix_status_t>>,
    cv: Condvar,
    /// The info array, which must stay valid until the callback.
    _info: Infos,
}

/// Info entries of keys and scalar values only.
struct Infos(#[allow(dead_code)] Box<[ffi::pmix_info_t]>);

// SAFETY: the entries hold keys and booleans, no pointers; after the call
// nothing in Rust reads or writes them, PMIx only reads them.
unsafe impl Send for Infos {}
// SAFETY: as above: shared, they are never written.
unsafe impl Sync for Infos {}

unsafe extern "C" fn fence_done(status: ffi::pmix_status_t, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the `Arc::into_raw` that `Client::fence` gave
    // PMIx for this one callback: taken back exactly once, here.
    let done = unsafe { Arc::from_raw(cbdata.cast_const().cast::<Done>()) };
    *done.status.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    done.cv.notify_all();
}

impl Client {
    /// Waits until every process of the job has entered a fence; with
    /// `collect`, each then holds what every other one put and committed
    /// (see [`Client::get`]). Fails with [`PmixError::TimedOut`] after
    /// `timeout` (a rank that never comes), leaving the fence outstanding
    /// inside PMIx.
    pub fn fence(&self, collect: bool, timeout: Duration) -> Result<(), PmixError> {
        let info: Box<[ffi::pmix_info_t]> = if collect {
            Box::new([info_bool(ffi::PMIX_COLLECT_DATA)])
        } else {
            Box::new([])
        };
        let (ptr, n) = (info.as_ptr(), info.len());
        let done = Arc::new(Done {
            status: Mutex::new(None),
            cv: Condvar::new(),
            _info: Infos(info),
        });
        let cbdata = Arc::into_raw(done.clone()).cast_mut().cast::<c_void>();
        // SAFETY: no proc array (NULL, 0: every process of our namespace);
        // the info array lives in `done`, which the callback's reference
        // keeps alive until the callback has run; `fence_done` takes that
        // reference back exactly once.
        let status = unsafe {
            self.lib
                .PMIx_Fence_nb(std::ptr::null(), 0, ptr, n, Some(fence_done), cbdata)
        };
        if status != ffi::PMIX_SUCCESS as i32 {
            // No callback will come: take its reference back.
            // SAFETY: the `into_raw` above, not given to PMIx after all.
            drop(unsafe { Arc::from_raw(cbdata.cast_const().cast::<Done>()) });
            if status == ffi::PMIX_OPERATION_SUCCEEDED {
                return Ok(());
            }
            return Err(call_error(self.lib, "PMIx_Fence_nb", status));
        }
        // A timeout too large for an Instant (Duration::MAX) waits a century.
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
        let mut got = done.status.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(status) = *got {
                return if status == ffi::PMIX_SUCCESS as i32 {
                    Ok(())
                } else {
                    Err(call_error(self.lib, "PMIx_Fence_nb", status))
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PmixError::TimedOut {
                    call: "PMIx_Fence_nb",
                    after: timeout,
                });
            }
            got = done
                .cv
                .wait_timeout(got, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
