//! Pulling the uncompressed ELF `vmlinux` out of Debian's `vmlinuz` (a
//! bzImage with an xz payload). qemu boots an ELF kernel through its PVH
//! entry point, skipping the real-mode setup and the in-guest decompression:
//! about 2.5 s less per boot under TCG.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::failure::{Failure, Result, io_failure};

/// The start of an xz stream.
const XZ_MAGIC: [u8; 6] = [0xFD, b'7', b'z', b'X', b'Z', 0x00];
const ELF_MAGIC: [u8; 4] = [0x7F, b'E', b'L', b'F'];

/// The offset of the first xz stream in `image`.
pub(crate) fn find_xz_stream(image: &[u8]) -> Option<usize> {
    image.windows(XZ_MAGIC.len()).position(|w| w == XZ_MAGIC)
}

/// Writes the ELF kernel inside `vmlinuz` to `out`. Returns false (and
/// leaves no `out`) when there is none to be found: the caller then boots the
/// bzImage itself, which only costs time.
pub(crate) fn extract(vmlinuz: &Path, out: &Path) -> Result<bool> {
    let image = std::fs::read(vmlinuz)
        .map_err(|e| io_failure(format!("cannot read {}", vmlinuz.display()), e))?;
    let Some(offset) = find_xz_stream(&image) else {
        return Ok(false);
    };
    let sink =
        File::create(out).map_err(|e| io_failure(format!("cannot create {}", out.display()), e))?;
    let mut xz = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(sink)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Failure::new(format!("cannot run xz: {e}")))?;
    if let Some(mut stdin) = xz.stdin.take() {
        // xz stops reading after the one stream; the rest of the bzImage may
        // then hit a closed pipe, which is expected.
        let _ = stdin.write_all(&image[offset..]);
    }
    // Its exit status is not telling either (trailing data): check the output.
    let _ = xz.wait();
    let mut head = [0u8; 4];
    let is_elf = File::open(out)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && head == ELF_MAGIC;
    if !is_elf {
        let _ = std::fs::remove_file(out);
    }
    Ok(is_elf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_first_xz_magic() {
        let mut image = vec![0u8; 100];
        image.extend_from_slice(&[0xFD, b'7', b'z', b'X', b'Z', 0x00, 1, 2]);
        image.extend_from_slice(&XZ_MAGIC);
        assert_eq!(find_xz_stream(&image), Some(100));
    }

    #[test]
    fn no_magic_no_offset() {
        assert_eq!(find_xz_stream(b""), None);
        assert_eq!(find_xz_stream(&[0xFD, b'7', b'z', b'X', b'Z']), None);
        // A near miss: the last byte differs (a UTF-8 aware search would
        // also have to treat 0xFD as a byte, not a character).
        assert_eq!(find_xz_stream(&[0xFD, b'7', b'z', b'X', b'Z', 0x01]), None);
    }
}
