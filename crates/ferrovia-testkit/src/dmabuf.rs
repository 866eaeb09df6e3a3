//! Host-memory dma-bufs for tests ([`HostDmaBuf`]): `udmabuf` (a memfd
//! exported as a dma-buf) where `/dev/udmabuf` exists, else a `vgem`
//! buffer exported with PRIME (Debian 12's kernel has no `udmabuf`, but
//! ships `vgem` as a module, which this loads if it can). Real dma-bufs,
//! so a registration of one takes the kernel's dma-buf path; the test
//! reads and writes them through a shared mapping of its own, by copies
//! (a device or a peer may write the memory: no slice of it is made).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// `_IOW('u', 0x42, struct udmabuf_create)`.
const UDMABUF_CREATE: libc::c_ulong = 0x4018_7542;
/// `DRM_IOCTL_VERSION`: `_IOWR('d', 0x00, struct drm_version)`.
const DRM_IOCTL_VERSION: libc::c_ulong = 0xc040_6400;
/// `DRM_IOCTL_MODE_CREATE_DUMB`: `_IOWR('d', 0xb2, struct drm_mode_create_dumb)`.
const DRM_IOCTL_MODE_CREATE_DUMB: libc::c_ulong = 0xc020_64b2;
/// `DRM_IOCTL_PRIME_HANDLE_TO_FD`: `_IOWR('d', 0x2d, struct drm_prime_handle)`.
const DRM_IOCTL_PRIME_HANDLE_TO_FD: libc::c_ulong = 0xc00c_642d;

#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

#[repr(C)]
struct DrmVersion {
    major: i32,
    minor: i32,
    patch: i32,
    name_len: usize,
    name: *mut libc::c_char,
    date_len: usize,
    date: *mut libc::c_char,
    desc_len: usize,
    desc: *mut libc::c_char,
}

#[repr(C)]
#[derive(Default)]
struct CreateDumb {
    height: u32,
    width: u32,
    bpp: u32,
    flags: u32,
    handle: u32,
    pitch: u32,
    size: u64,
}

#[repr(C)]
#[derive(Default)]
struct PrimeHandle {
    handle: u32,
    flags: u32,
    fd: i32,
}

/// A dma-buf of host memory, with a shared mapping the test reads and
/// writes through.
pub struct HostDmaBuf {
    // Field order: unmapped before the fd (and the exporter) go.
    map: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
    source: &'static str,
    /// What keeps the exporter's object alive (the vgem device, the memfd).
    _owner: File,
}

// SAFETY: the mapping is touched only through `read` and `write`, which
// copy through raw pointers (never references), as any other writer of the
// memory (a device, a peer) does.
unsafe impl Send for HostDmaBuf {}

fn os(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Checks an ioctl's return.
fn ok(ret: i32, what: &str) -> Result<(), String> {
    if ret < 0 { Err(os(what)) } else { Ok(()) }
}

impl HostDmaBuf {
    /// A dma-buf of at least `len` bytes (whole pages), zeroed, from
    /// `udmabuf` or `vgem`; an error saying why neither is there.
    pub fn new(len: usize) -> Result<HostDmaBuf, String> {
        let page = ferrovia_types::page_size();
        let len = len.max(1).next_multiple_of(page);
        match udmabuf(len) {
            Ok((fd, owner)) => Self::mapped(fd, owner, len, "udmabuf"),
            Err(why_u) => match vgem(len) {
                Ok((fd, owner, got)) => Self::mapped(fd, owner, got, "vgem"),
                Err(why_v) => Err(format!(
                    "no host-memory dma-buf here: udmabuf: {why_u}; vgem: {why_v}"
                )),
            },
        }
    }

    fn mapped(fd: OwnedFd, owner: File, len: usize, source: &'static str) -> Result<Self, String> {
        // SAFETY: a fresh shared mapping of an open dma-buf fd of at least
        // `len` bytes; nothing of this process is overwritten.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os(&format!("mmap of the {source} dma-buf")));
        }
        let map = NonNull::new(p.cast()).ok_or("mmap returned NULL")?;
        Ok(HostDmaBuf {
            map,
            len,
            fd,
            source,
            _owner: owner,
        })
    }

    /// The dma-buf's fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `"udmabuf"` or `"vgem"`.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// A copy of `len` bytes at `offset`.
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.len, "read past the dma-buf");
        // SAFETY: inside the mapping; read byte by byte through a raw
        // pointer, as memory others may write is read.
        (0..len)
            .map(|i| unsafe { self.map.as_ptr().add(offset + i).read_volatile() })
            .collect()
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len, "write past the dma-buf");
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: inside the mapping, through a raw pointer.
            unsafe { self.map.as_ptr().add(offset + i).write_volatile(b) };
        }
    }
}

impl Drop for HostDmaBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `mapped`, unmapped once.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.len) };
    }
}

/// A memfd of `len` bytes exported through `/dev/udmabuf`.
fn udmabuf(len: usize) -> Result<(OwnedFd, File), String> {
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/udmabuf")
        .map_err(|e| format!("/dev/udmabuf: {e}"))?;
    let name = CString::new("ferrovia-dmabuf").map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated name; the fd is owned below.
    let memfd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
    if memfd < 0 {
        return Err(os("memfd_create"));
    }
    // SAFETY: a fresh fd this function owns from here.
    let memfd = unsafe { File::from_raw_fd(memfd) };
    memfd
        .set_len(len as u64)
        .map_err(|e| format!("ftruncate: {e}"))?;
    // SAFETY: F_ADD_SEALS on our memfd with an integer argument.
    let sealed = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
    ok(sealed, "F_SEAL_SHRINK")?;
    let mut create = UdmabufCreate {
        memfd: memfd.as_raw_fd() as u32,
        flags: 0x01, // UDMABUF_FLAGS_CLOEXEC
        offset: 0,
        size: len as u64,
    };
    // SAFETY: the ioctl reads the struct it is given.
    let fd = unsafe { libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE, &mut create) };
    ok(fd, "UDMABUF_CREATE")?;
    // SAFETY: a fresh dma-buf fd the kernel returned.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, memfd))
}

/// The vgem device, loading its module once if no card is one.
fn vgem_card() -> Result<File, String> {
    for attempt in 0..2 {
        let cards = std::fs::read_dir("/dev/dri").map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("card"))
                })
                .collect::<Vec<_>>()
        });
        for path in cards.unwrap_or_default() {
            let Ok(card) = OpenOptions::new().read(true).write(true).open(&path) else {
                continue;
            };
            let mut name = [0u8; 32];
            let mut v = DrmVersion {
                major: 0,
                minor: 0,
                patch: 0,
                name_len: name.len(),
                name: name.as_mut_ptr().cast(),
                date_len: 0,
                date: std::ptr::null_mut(),
                desc_len: 0,
                desc: std::ptr::null_mut(),
            };
            // SAFETY: the ioctl writes at most `name_len` bytes to `name`.
            if unsafe { libc::ioctl(card.as_raw_fd(), DRM_IOCTL_VERSION, &mut v) } == 0
                && name.starts_with(b"vgem")
            {
                return Ok(card);
            }
        }
        if attempt == 0 {
            let _ = std::process::Command::new("modprobe").arg("vgem").status();
        }
    }
    Err("no vgem card in /dev/dri (modprobe vgem as root)".into())
}

/// A vgem buffer of at least `len` bytes exported as a dma-buf: its fd,
/// the card, its size.
fn vgem(len: usize) -> Result<(OwnedFd, File, usize), String> {
    let card = vgem_card()?;
    let mut dumb = CreateDumb {
        width: 1024,
        bpp: 32,
        height: u32::try_from(len.div_ceil(4096)).map_err(|e| e.to_string())?,
        ..CreateDumb::default()
    };
    // SAFETY: the ioctl reads and writes the struct it is given.
    let made = unsafe { libc::ioctl(card.as_raw_fd(), DRM_IOCTL_MODE_CREATE_DUMB, &mut dumb) };
    ok(made, "DRM_IOCTL_MODE_CREATE_DUMB")?;
    let mut prime = PrimeHandle {
        handle: dumb.handle,
        flags: (libc::O_CLOEXEC | libc::O_RDWR) as u32,
        fd: -1,
    };
    // SAFETY: as above.
    let exported =
        unsafe { libc::ioctl(card.as_raw_fd(), DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut prime) };
    ok(exported, "DRM_IOCTL_PRIME_HANDLE_TO_FD")?;
    // SAFETY: a fresh dma-buf fd the kernel returned.
    let fd = unsafe { OwnedFd::from_raw_fd(prime.fd) };
    Ok((fd, card, dumb.size as usize))
}
