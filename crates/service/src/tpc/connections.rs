//! The TCP connections a copy has open to remotes, for the markers' `RemoteConnections`
//! line, which XRootD sends and FTS's monitoring reads: `tcp:ADDR:PORT` of each open
//! connection, comma-separated (`tcp:192.0.2.7:443,tcp:[2001:db8::7]:1094`). The runner
//! registers a connection when it opens and the registration ends when the socket closes,
//! so the line shows the connections of the moment, not every one the copy ever made.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A copy's open remote connections; cheap to clone, shared by the runner and the markers.
#[derive(Debug, Clone, Default)]
pub struct RemoteConnections {
    open: Arc<Mutex<Vec<(u64, SocketAddr)>>>,
    next: Arc<AtomicU64>,
}

/// One open connection; dropping it (when the socket closes) removes it from the list.
pub struct OpenConnection {
    id: u64,
    open: Arc<Mutex<Vec<(u64, SocketAddr)>>>,
}

impl fmt::Debug for OpenConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenConnection")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(id, _)| *id != self.id);
    }
}

impl RemoteConnections {
    /// Register a connection to `peer`, open until the returned value is dropped.
    pub fn opened(&self, peer: SocketAddr) -> OpenConnection {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, peer));
        OpenConnection {
            id,
            open: Arc::clone(&self.open),
        }
    }

    /// The marker line's value, in the order the connections opened; `None` when none is
    /// open (XRootD leaves the line out then).
    pub fn describe(&self) -> Option<String> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        (!open.is_empty()).then(|| {
            open.iter()
                .map(|(_, peer)| format!("tcp:{peer}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_what_is_open_in_xrootd_form() {
        let c = RemoteConnections::default();
        assert_eq!(c.describe(), None);
        let a = c.opened("192.0.2.7:443".parse().expect("addr"));
        let b = c
            .clone()
            .opened("[2001:db8::7]:1094".parse().expect("addr"));
        assert_eq!(
            c.describe().as_deref(),
            Some("tcp:192.0.2.7:443,tcp:[2001:db8::7]:1094")
        );
        drop(a);
        assert_eq!(c.describe().as_deref(), Some("tcp:[2001:db8::7]:1094"));
        drop(b);
        assert_eq!(c.describe(), None);
    }
}
