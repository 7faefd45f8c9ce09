//! Removing lab namespaces when the process is interrupted (SIGINT) or terminated (SIGTERM).
//!
//! The handler only makes async-signal-safe calls: for every registered namespace it detaches
//! and unlinks the `/run/netns/NAME` bind mount (what `ip netns del` does), then lets the
//! handler that was installed before run (signal-hook chains it), or, when there was none,
//! ends the process as the signal's default action would.
//! TUN devices vanish with the process's descriptors. Processes still running inside a
//! namespace keep it alive, unnamed, until they exit.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

const SLOTS: usize = 64;
static PATHS: [AtomicPtr<libc::c_char>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];
static INSTALL: Once = Once::new();

/// A namespace mount registered for removal on a signal; unregisters when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    slot: Option<usize>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            // The string is leaked, not freed: a handler running on another thread may still be
            // reading it. A few dozen bytes per lab.
            PATHS[slot].store(null_mut(), Ordering::SeqCst);
        }
    }
}

/// Registers `path` (a `/run/netns` mount) and installs the handlers once per process.
pub(crate) fn register(path: &Path) -> Registration {
    INSTALL.call_once(install);
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Registration { slot: None };
    };
    let ptr = c.into_raw();
    for (i, slot) in PATHS.iter().enumerate() {
        if slot
            .compare_exchange(null_mut(), ptr, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Registration { slot: Some(i) };
        }
    }
    tracing::warn!(path = %path.display(), "too many labs for signal cleanup; this one is not covered");
    // SAFETY: ptr came from CString::into_raw above and was never shared.
    drop(unsafe { CString::from_raw(ptr) });
    Registration { slot: None }
}

fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // With no handler before ours, the signal must still end the process once the
        // namespaces are gone; a handler installed before ours is chained by signal-hook.
        let was_default = disposition_is_default(sig);
        // SAFETY: the action only makes async-signal-safe calls (umount2, unlink, and
        // signal-hook's emulate_default_handler, documented as async-signal-safe).
        let registered = unsafe {
            signal_hook::low_level::register(sig, move || {
                remove_registered();
                if was_default {
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                }
            })
        };
        if let Err(e) = registered {
            tracing::warn!(signal = sig, error = %e, "cannot install the lab's cleanup handler");
        }
    }
}

fn disposition_is_default(sig: libc::c_int) -> bool {
    // SAFETY: reading the current action only (a null new action); a zeroed sigaction is a
    // valid output buffer.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_DFL
    }
}

/// Detach and unlink every registered namespace mount. Runs in a signal handler.
fn remove_registered() {
    for slot in &PATHS {
        let p = slot.swap(null_mut(), Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: p is a leaked, never-freed C string; umount2 and unlink are
            // async-signal-safe.
            unsafe {
                libc::umount2(p, libc::MNT_DETACH);
                libc::unlink(p);
            }
        }
    }
}
