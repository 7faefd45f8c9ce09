//! Opening a TUN device (layer 3, no packet-info prefix) in the calling thread's network
//! namespace, optionally with virtio-net headers and TCP and UDP segmentation offload.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use libc::{TUNSETIFF, TUNSETOFFLOAD, TUNSETVNETHDRSZ};

// <linux/if_tun.h> flags, narrowed to the widths the kernel reads them at: `ifr_flags` is a
// short, the offload argument an unsigned long.
const IFF_TUN: libc::c_short = libc::IFF_TUN as libc::c_short;
const IFF_NO_PI: libc::c_short = libc::IFF_NO_PI as libc::c_short;
const IFF_VNET_HDR: libc::c_short = libc::IFF_VNET_HDR as libc::c_short;
const TUN_F_CSUM: libc::c_ulong = libc::TUN_F_CSUM as libc::c_ulong;
const TUN_F_TSO4: libc::c_ulong = libc::TUN_F_TSO4 as libc::c_ulong;
// The kernel takes UDP segmentation offload only for both families at once.
const TUN_F_USO: libc::c_ulong = (libc::TUN_F_USO4 | libc::TUN_F_USO6) as libc::c_ulong;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// A failed step and its OS error.
pub(crate) type TunError = (&'static str, io::Error);

/// Opens a non-blocking TUN device named `name` in the current thread's namespace. With
/// `offload`, reads and writes carry a 10-byte virtio-net header and the kernel may hand over
/// TCP and UDP (`UDP_SEGMENT`) super-packets of up to 64 KiB; UDP only from Linux 6.2, earlier
/// kernels hand over single datagrams.
pub(crate) fn open(name: &str, offload: bool) -> Result<OwnedFd, TunError> {
    const DEV: &CStr = c"/dev/net/tun";
    // SAFETY: DEV is a valid NUL-terminated path; the returned fd is checked before use.
    let raw = unsafe {
        libc::open(
            DEV.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if raw < 0 {
        return Err(("open /dev/net/tun", io::Error::last_os_error()));
    }
    // SAFETY: raw is a freshly opened descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI | if offload { IFF_VNET_HDR } else { 0 },
        _pad: [0; 22],
    };
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return Err((
            "device name",
            io::Error::new(io::ErrorKind::InvalidInput, "longer than 15 bytes"),
        ));
    }
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which IfReq mirrors (40 bytes).
    if unsafe { libc::ioctl(raw, TUNSETIFF, &mut req as *mut IfReq) } < 0 {
        return Err(("TUNSETIFF", io::Error::last_os_error()));
    }
    if offload {
        let size: libc::c_int = crate::relay::gso::VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer.
        if unsafe { libc::ioctl(raw, TUNSETVNETHDRSZ, &size as *const libc::c_int) } < 0 {
            return Err(("TUNSETVNETHDRSZ", io::Error::last_os_error()));
        }
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        let with_uso =
            unsafe { libc::ioctl(raw, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_USO) };
        // SAFETY: as above.
        if with_uso < 0 && unsafe { libc::ioctl(raw, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4) } < 0 {
            return Err(("TUNSETOFFLOAD", io::Error::last_os_error()));
        }
    }
    Ok(fd)
}
