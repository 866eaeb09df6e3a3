//! Extended completion queues (`ibv_create_cq_ex`), polled with
//! `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll`, and their
//! completion timestamps where the device stamps completions.
//!
//! As for extended queue pairs, every function pointer the poll loop
//! calls is checked at creation: a provider that leaves one unset gets a
//! plain CQ instead (or a typed error when the extended one was
//! demanded), never a call through NULL.

use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::Mutex;

use ferrovia_sys as sys;

use crate::completion::WorkCompletion;
use crate::context::Context;
use crate::error::{Result, VerbsError, last_errno};

/// How a completion queue is polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PollPath {
    /// `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` where the
    /// provider offers them, else `ibv_poll_cq` (logged once per device).
    #[default]
    Auto,
    /// `ibv_poll_cq` into an array of `struct ibv_wc`.
    Classic,
    /// The extended poll loop; a device without it is a typed error.
    Extended,
}

/// How to create a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CqOptions {
    /// With a completion channel, so the CQ can be slept on.
    pub channel: bool,
    /// How it is polled.
    pub poll_path: PollPath,
    /// Stamp every completion with the device's clock
    /// (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`): needs the extended path,
    /// and a device whose `completion_timestamp_mask` is not 0; else
    /// creation fails with [`VerbsError::Unsupported`] and makes nothing.
    pub timestamps: bool,
}

impl CqOptions {
    /// Sets the `channel` field.
    #[must_use]
    pub fn channel(mut self, channel: bool) -> Self {
        self.channel = channel;
        self
    }

    /// Sets the `poll_path` field.
    #[must_use]
    pub fn poll_path(mut self, poll_path: PollPath) -> Self {
        self.poll_path = poll_path;
        self
    }

    /// Sets the `timestamps` field.
    #[must_use]
    pub fn timestamps(mut self, timestamps: bool) -> Self {
        self.timestamps = timestamps;
        self
    }
}

/// What every extended poll reads (timestamps come on top when asked).
const WC_FLAGS: u32 = sys::IBV_WC_EX_WITH_BYTE_LEN
    | sys::IBV_WC_EX_WITH_IMM
    | sys::IBV_WC_EX_WITH_QP_NUM
    | sys::IBV_WC_EX_WITH_SRC_QP;

/// The function pointers the poll loop calls, by name.
fn required(c: &sys::ibv_cq_ex, timestamps: bool) -> Option<&'static str> {
    [
        ("start_poll", c.start_poll.is_some()),
        ("end_poll", c.end_poll.is_some()),
        ("read_opcode", c.read_opcode.is_some()),
        ("read_vendor_err", c.read_vendor_err.is_some()),
        ("read_wc_flags", c.read_wc_flags.is_some()),
        ("read_byte_len", c.read_byte_len.is_some()),
        ("read_imm_data", c.read_imm_data.is_some()),
        ("read_qp_num", c.read_qp_num.is_some()),
        ("read_src_qp", c.read_src_qp.is_some()),
        (
            "read_completion_ts",
            !timestamps || c.read_completion_ts.is_some(),
        ),
    ]
    .into_iter()
    .find(|(_, set)| !set)
    .map(|(name, _)| name)
}

fn fall_back(device: &str, why: &str) {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said
        .get_or_insert_with(HashSet::new)
        .insert(format!("{device}: {why}"))
    {
        tracing::info!("{device}: polling with ibv_poll_cq: {why}");
    }
}

/// Creates an extended CQ, or says why not: `Ok(None)` means "use a
/// plain one" (the reason was logged).
pub(crate) fn create(
    ctx: &Context,
    depth: u32,
    channel: *mut sys::ibv_comp_channel,
    opts: &CqOptions,
) -> Result<Option<NonNull<sys::ibv_cq_ex>>> {
    let unsupported = |detail: String| VerbsError::Unsupported {
        device: ctx.name().to_owned(),
        what: "extended completion queues (ibv_create_cq_ex)",
        detail,
    };
    if opts.timestamps {
        if opts.poll_path == PollPath::Classic {
            return Err(VerbsError::InvalidArgument(
                "completion timestamps need the extended poll path".into(),
            ));
        }
        ctx.query_device_ex()?.require_timestamps()?;
    }
    let mut wc_flags = u64::from(WC_FLAGS);
    if opts.timestamps {
        wc_flags |= u64::from(sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
    }
    let mut attr = sys::ibv_cq_init_attr_ex {
        cqe: depth,
        channel,
        wc_flags,
        ..Default::default()
    };
    // SAFETY: a live context; `channel` is NULL or a live channel the CQ's
    // owner keeps alive with it.
    let cq = unsafe { sys::ibv_create_cq_ex(ctx.as_raw(), &mut attr) };
    let Some(cq) = NonNull::new(cq) else {
        let errno = last_errno().unwrap_or(libc::EIO);
        let why = format!("ibv_create_cq_ex refused wc_flags {wc_flags:#x} (errno {errno})");
        if opts.poll_path == PollPath::Extended || opts.timestamps {
            return Err(unsupported(why));
        }
        fall_back(ctx.name(), &why);
        return Ok(None);
    };
    // SAFETY: the CQ just created.
    if let Some(name) = required(unsafe { cq.as_ref() }, opts.timestamps) {
        // SAFETY: created above, used by nothing; a cq_ex is destroyed
        // through its `ibv_cq` view.
        unsafe {
            crate::error::lib()?.ibv_destroy_cq(sys::ibv_cq_ex_to_cq(cq.as_ptr()));
        }
        let why = format!("the provider's extended CQ has no {name}");
        if opts.poll_path == PollPath::Extended || opts.timestamps {
            return Err(unsupported(why));
        }
        fall_back(ctx.name(), &why);
        return Ok(None);
    }
    Ok(Some(cq))
}

/// Polls up to `n` completions of `cq` into `out` (and their timestamps
/// into `stamps`, when given); returns how many were written.
///
/// Each completion is taken by a start/end pair of its own, never by
/// `ibv_next_poll`: soft-RoCE before rdma-core 55 (b78b414e0) advances
/// its consumer index once more in `ibv_end_poll` after `ibv_next_poll`
/// found the queue empty, so the next completion is skipped (a request
/// that never completes), and before 61 (5e7aa4102) it unlocks the CQ
/// twice. A start/end pair per completion is correct on every provider.
///
/// # Safety
/// `cq` must be a live extended CQ whose poll functions [`create`]
/// checked (with timestamps if `stamps` is given); `out` (and `stamps`)
/// must have room for `n` entries. Polls of one CQ may run on several
/// threads: the provider serialises them between start and end.
pub(crate) unsafe fn poll(
    cq: NonNull<sys::ibv_cq_ex>,
    out: *mut WorkCompletion,
    n: usize,
    stamps: Option<*mut u64>,
) -> std::result::Result<usize, i32> {
    let c = cq.as_ptr();
    // SAFETY: checked at creation (`required`).
    let (start, end) = unsafe {
        (
            (*c).start_poll.unwrap_unchecked(),
            (*c).end_poll.unwrap_unchecked(),
        )
    };
    let mut attr = sys::ibv_poll_cq_attr::default();
    for got in 0..n {
        // SAFETY: a live extended CQ (our caller's contract).
        match unsafe { start(c, &mut attr) } {
            0 => {}
            libc::ENOENT => return Ok(got),
            // What was taken stands; the error comes back on the next poll.
            _ if got > 0 => return Ok(got),
            e => return Err(e),
        }
        // SAFETY: `got < n`, inside `out` (and `stamps`); the CQ holds a
        // current completion between a successful start and its end, which
        // consumes it.
        unsafe {
            out.add(got).write(read(c));
            if let Some(s) = stamps {
                s.add(got)
                    .write((*c).read_completion_ts.unwrap_unchecked()(c));
            }
            end(c);
        }
    }
    Ok(n)
}

/// The current completion as a `struct ibv_wc`.
///
/// # Safety
/// `c` holds a current completion (inside a poll sequence) and its read
/// functions were checked at creation.
#[inline]
unsafe fn read(c: *mut sys::ibv_cq_ex) -> WorkCompletion {
    // SAFETY: our caller's contract; the checked readers are called
    // unwrapped, and only the fields valid for the status are read.
    unsafe {
        let x = &*c;
        let mut wc = sys::ibv_wc {
            wr_id: x.wr_id,
            status: x.status,
            qp_num: x.read_qp_num.unwrap_unchecked()(c),
            ..Default::default()
        };
        if x.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
            wc.vendor_err = x.read_vendor_err.unwrap_unchecked()(c);
            return WorkCompletion(wc);
        }
        wc.opcode = x.read_opcode.unwrap_unchecked()(c);
        wc.byte_len = x.read_byte_len.unwrap_unchecked()(c);
        wc.wc_flags = x.read_wc_flags.unwrap_unchecked()(c);
        // The immediate and an invalidated rkey share the field.
        let with = sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 | sys::ibv_wc_flags::IBV_WC_WITH_INV.0;
        if wc.wc_flags & with != 0 {
            wc.__bindgen_anon_1.imm_data = x.read_imm_data.unwrap_unchecked()(c);
        }
        if wc.opcode.0 & sys::ibv_wc_opcode::IBV_WC_RECV.0 != 0 {
            wc.src_qp = x.read_src_qp.unwrap_unchecked()(c);
        }
        WorkCompletion(wc)
    }
}
