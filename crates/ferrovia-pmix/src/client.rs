//! A PMIx client: this process's rank and namespace, job information,
//! and the key-value calls (put, commit, get). The fence, which waits on
//! every rank, is in `fence`.

use std::ffi::{CStr, CString, c_char};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::error::PmixError;
use crate::ffi;
use crate::load::library;

/// The rank that names a whole job in a lookup (`PMIX_RANK_WILDCARD`, a
/// macro bindgen does not evaluate).
const RANK_WILDCARD: u32 = u32::MAX - 1;

/// This process as a PMIx client: initialised by [`Client::init`],
/// finalised when dropped. PMIx counts initialisations, so several
/// clients in one process are fine.
pub struct Client {
    pub(crate) lib: &'static ffi::PmixLib,
    pub(crate) me: ffi::pmix_proc_t,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.namespace())
            .field("rank", &self.rank())
            .finish()
    }
}

impl Client {
    /// Loads libpmix and connects to the local PMIx server the launcher
    /// started (found through the `PMIX_*` variables it set), waiting at
    /// most 60 s for it.
    pub fn init() -> Result<Client, PmixError> {
        Self::init_within(Duration::from_secs(60))
    }

    /// [`Client::init`] waiting at most `timeout` for the server: a server
    /// that takes the connection and never answers (PMIx's handshake
    /// blocks) fails with [`PmixError::TimedOut`] naming `PMIx_Init`. The
    /// call runs on a thread of its own, which is left to finish (or
    /// not) after a timeout.
    pub fn init_within(timeout: Duration) -> Result<Client, PmixError> {
        let lib = library()?;
        let (tx, rx) = mpsc::channel();
        thread::Builder::new()
            .name("ferrovia-pmix-init".into())
            .spawn(move || {
                let mut me = ffi::pmix_proc_t::default();
                // SAFETY: `me` is a valid pmix_proc_t for PMIx to fill, on
                // this thread's stack for the whole call; no info array is
                // passed (NULL, 0), which PMIx_Init accepts.
                let status = unsafe { lib.PMIx_Init(&mut me, std::ptr::null_mut(), 0) };
                let r = check(lib, "PMIx_Init", status).map(|()| Client { lib, me });
                if let Err(unwanted) = tx.send(r) {
                    // Nobody waits any more (it timed out): a client that
                    // came up late is finalised as it drops here.
                    drop(unwanted);
                }
            })
            .map_err(|e| PmixError::Call {
                call: "PMIx_Init",
                status: 0,
                text: format!("cannot start its thread: {e}"),
            })?;
        rx.recv_timeout(timeout).map_err(|_| PmixError::TimedOut {
            call: "PMIx_Init",
            after: timeout,
        })?
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The job's namespace.
    pub fn namespace(&self) -> String {
        // SAFETY: PMIx_Init filled `nspace` with a NUL-terminated string
        // (PMIX_MAX_NSLEN + 1 bytes; the array was zeroed before).
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// How many processes the job has (`PMIX_JOB_SIZE`).
    pub fn job_size(&self) -> Result<u32, PmixError> {
        self.job_u32(ffi::PMIX_JOB_SIZE)
    }

    /// How many of them run on this host (`PMIX_LOCAL_SIZE`).
    pub fn local_size(&self) -> Result<u32, PmixError> {
        self.job_u32(ffi::PMIX_LOCAL_SIZE)
    }

    fn job_u32(&self, key: &'static [u8]) -> Result<u32, PmixError> {
        let key = CStr::from_bytes_with_nul(key).expect("bindgen keys end in NUL");
        let mut whole = self.me;
        whole.rank = RANK_WILDCARD;
        self.with_value(&whole, key, |v| {
            if u32::from(v.type_) == ffi::PMIX_UINT32 {
                // SAFETY: the type says the union holds a uint32.
                Ok(unsafe { v.data.uint32 })
            } else {
                Err(v.type_)
            }
        })
        .and_then(|r| {
            r.map_err(|found| PmixError::WrongType {
                key: key.to_string_lossy().into_owned(),
                rank: RANK_WILDCARD,
                found,
                expected: "uint32",
            })
        })
    }

    /// Publishes `value` under `key` to every process of the job
    /// (`PMIX_GLOBAL`); the others see it after [`Client::commit`] and a
    /// fence that collects data.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<(), PmixError> {
        let k = key_of(key)?;
        let mut v = ffi::pmix_value_t {
            type_: ffi::PMIX_BYTE_OBJECT as u16,
            ..Default::default()
        };
        v.data.bo = ffi::pmix_byte_object_t {
            bytes: value.as_ptr().cast_mut().cast(),
            size: value.len(),
        };
        // SAFETY: `k` is a NUL-terminated key within PMIX_MAX_KEYLEN; `v`
        // is a byte object pointing at `value`, alive for the call, which
        // PMIx copies (PMIx_Put never writes through it or keeps it).
        let status = unsafe {
            self.lib
                .PMIx_Put(ffi::PMIX_GLOBAL as u8, k.as_ptr(), &mut v)
        };
        check(self.lib, "PMIx_Put", status)
    }

    /// Sends what was put to the local server.
    pub fn commit(&self) -> Result<(), PmixError> {
        // SAFETY: no arguments; the client is initialised.
        let status = unsafe { self.lib.PMIx_Commit() };
        check(self.lib, "PMIx_Commit", status)
    }

    /// What rank `rank` of the job put under `key`, from this process's
    /// own store: after a fence that collected data it is there, and the
    /// lookup never waits on the network (`PMIX_OPTIONAL`), so a key
    /// nobody put is [`PmixError::Call`] with `PMIX_ERR_NOT_FOUND` at once.
    pub fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>, PmixError> {
        let k = key_of(key)?;
        let mut whom = self.me;
        whom.rank = rank;
        self.with_value(&whom, &k, |v| {
            if u32::from(v.type_) == ffi::PMIX_BYTE_OBJECT {
                // SAFETY: the type says the union holds a byte object.
                let bo = unsafe { v.data.bo };
                if bo.size == 0 {
                    return Ok(Vec::new());
                }
                // SAFETY: PMIx's byte object holds `size` bytes at
                // `bytes`, alive until the value is destructed (after
                // this closure).
                Ok(unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) }.to_vec())
            } else {
                Err(v.type_)
            }
        })?
        .map_err(|found| PmixError::WrongType {
            key: key.to_owned(),
            rank,
            found,
            expected: "byte object",
        })
    }

    /// Looks `key` up for `whom` locally and hands the value to `read`.
    fn with_value<T>(
        &self,
        whom: &ffi::pmix_proc_t,
        key: &CStr,
        read: impl FnOnce(&ffi::pmix_value_t) -> T,
    ) -> Result<T, PmixError> {
        let mut optional = [info_bool(ffi::PMIX_OPTIONAL)];
        let mut out: *mut ffi::pmix_value_t = std::ptr::null_mut();
        // SAFETY: `whom` and `key` are valid for the call; the info array
        // holds one initialised entry; PMIx writes a value it allocated
        // to `out` on success.
        let status = unsafe {
            self.lib
                .PMIx_Get(whom, key.as_ptr(), optional.as_mut_ptr(), 1, &mut out)
        };
        check(self.lib, "PMIx_Get", status)?;
        if out.is_null() {
            return Err(call_error(self.lib, "PMIx_Get", ffi::PMIX_ERR_NOT_FOUND));
        }
        // SAFETY: on success `out` points at a value PMIx allocated.
        let r = read(unsafe { &*out });
        // SAFETY: PMIX_VALUE_RELEASE: destruct the value's contents, then
        // free the malloc'd value itself; nothing refers to it any more.
        unsafe {
            self.lib.PMIx_Value_destruct(out);
            libc::free(out.cast());
        }
        Ok(r)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: one finalize for this client's init; no info array.
        let status = unsafe { self.lib.PMIx_Finalize(std::ptr::null(), 0) };
        if status != 0 {
            // Nothing to hand the error to; the process is leaving PMIx.
            let _ = call_error(self.lib, "PMIx_Finalize", status);
        }
    }
}

/// A key as PMIx takes it.
fn key_of(key: &str) -> Result<CString, PmixError> {
    let bad = |reason| PmixError::BadKey {
        key: key.to_owned(),
        reason,
    };
    if key.is_empty() || key.len() > ffi::PMIX_MAX_KEYLEN as usize {
        return Err(bad("a key has 1 to 511 bytes"));
    }
    CString::new(key).map_err(|_| bad("a key holds no NUL byte"))
}

/// An info entry `key` = true (`key` a bindgen constant ending in NUL).
pub(crate) fn info_bool(key: &[u8]) -> ffi::pmix_info_t {
    let mut info = ffi::pmix_info_t::default();
    for (d, s) in info.key.iter_mut().zip(key) {
        *d = *s as c_char;
    }
    info.value.type_ = ffi::PMIX_BOOL as u16;
    info.value.data.flag = true;
    info
}

pub(crate) fn check(
    lib: &ffi::PmixLib,
    call: &'static str,
    status: ffi::pmix_status_t,
) -> Result<(), PmixError> {
    if status == ffi::PMIX_SUCCESS as i32 {
        Ok(())
    } else {
        Err(call_error(lib, call, status))
    }
}

pub(crate) fn call_error(
    lib: &ffi::PmixLib,
    call: &'static str,
    status: ffi::pmix_status_t,
) -> PmixError {
    // SAFETY: PMIx_Error_string returns a static string for any status.
    let text = unsafe { lib.PMIx_Error_string(status) };
    let text = if text.is_null() {
        String::from("unknown status")
    } else {
        // SAFETY: non-null: a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    PmixError::Call { call, status, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_before_pmix_sees_them() {
        assert!(key_of("ferrovia.link.3").is_ok());
        assert!(matches!(key_of(""), Err(PmixError::BadKey { .. })));
        assert!(matches!(key_of("a\0b"), Err(PmixError::BadKey { .. })));
        assert!(matches!(
            key_of(&"k".repeat(512)),
            Err(PmixError::BadKey { .. })
        ));
    }
}
