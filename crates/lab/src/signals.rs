//! Removing lab namespaces when the process is interrupted (SIGINT) or terminated (SIGTERM).
//!
//! The handler only makes async-signal-safe calls: for every registered namespace it detaches
//! and unlinks the `/run/netns/NAME` bind mount (what `ip netns del` does), then hands the
//! signal to the handler that was installed before, or re-raises it with the default action.
//! TUN devices vanish with the process's descriptors. Processes still running inside a
//! namespace keep it alive, unnamed, until they exit.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Once, OnceLock};

const SLOTS: usize = 64;
static PATHS: [AtomicPtr<libc::c_char>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];
static INSTALL: Once = Once::new();
static PREV_INT: OnceLock<libc::sigaction> = OnceLock::new();
static PREV_TERM: OnceLock<libc::sigaction> = OnceLock::new();

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
    for (sig, prev) in [(libc::SIGINT, &PREV_INT), (libc::SIGTERM, &PREV_TERM)] {
        // SAFETY: a zeroed sigaction is a valid "default, empty mask" value; the handler has
        // the SA_SIGINFO signature.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_signal as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &new, &mut old) == 0 {
                let _ = prev.set(old);
            }
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
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
    let prev = if sig == libc::SIGINT {
        PREV_INT.get()
    } else {
        PREV_TERM.get()
    };
    let handler = prev.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    // SAFETY: restoring the default action and re-raising, or calling the handler that was
    // installed before ours with the signature its flags declare.
    unsafe {
        if handler == libc::SIG_DFL {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        } else if handler != libc::SIG_IGN {
            let flags = prev.map_or(0, |p| p.sa_flags);
            if flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(handler);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                f(sig);
            }
        }
    }
}
