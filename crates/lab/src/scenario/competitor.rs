//! A competing bulk TCP flow for the fairness cells: one connection from the server namespace
//! to the client namespace, sending as fast as its congestion control lets it through the
//! same emulated bottleneck and queue as the measured transfers. The receiver counts bytes,
//! so the runner reads how much the competitor got while a transfer ran.
//!
//! The sockets are made on threads inside each namespace and then used from plain threads:
//! a socket keeps its namespace for life. The sender uses the namespace's default congestion
//! control (recorded with the point's settings), as an unrelated bulk flow would, or the one
//! the cell names (`TCP_CONGESTION` on its socket).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::ScenarioError;
use crate::{Lab, LabError, SERVER_ADDR};

/// How often the sender and receiver look at the stop flag while blocked.
const POLL: Duration = Duration::from_millis(200);

/// A running competitor; stopped on drop.
pub struct Competitor {
    /// The sender's congestion control as its socket reports it.
    congestion: Option<String>,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    sockets: Vec<TcpStream>,
    threads: Vec<JoinHandle<()>>,
}

fn failed(what: &str, e: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::Competitor {
        reason: format!("{what}: {e}"),
    }
}

/// Runs `f` in a lab namespace thread and returns what it made.
fn in_namespace<T: Send + 'static>(
    handle: Result<JoinHandle<Result<std::io::Result<T>, LabError>>, LabError>,
    what: &str,
) -> Result<T, ScenarioError> {
    handle?
        .join()
        .map_err(|_| failed(what, "the thread panicked"))??
        .map_err(|e| failed(what, e))
}

impl Competitor {
    /// Connects the flow on `port` of the server address and starts sending, with the
    /// congestion control `congestion` when given.
    pub fn start(
        lab: &Lab,
        port: u16,
        congestion: Option<&str>,
    ) -> Result<Competitor, ScenarioError> {
        let addr = SocketAddr::from((SERVER_ADDR, port));
        let listener: TcpListener = in_namespace(
            lab.spawn_in_server(move || TcpListener::bind(addr)),
            "binding the competitor's listener in the server namespace",
        )?;
        let client: TcpStream = in_namespace(
            lab.spawn_in_client(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5))),
            "connecting the competitor from the client namespace",
        )?;
        // The connection is already in the accept queue: accept does not block.
        let (server, _) = listener
            .accept()
            .map_err(|e| failed("accepting the competitor's connection", e))?;
        if let Some(cc) = congestion {
            set_congestion(&server, cc)
                .map_err(|e| failed(&format!("setting congestion control {cc}"), e))?;
        }
        let congestion = get_congestion(&server);
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut sockets = Vec::new();
        let mut threads = Vec::new();
        for (stream, sends) in [(server, true), (client, false)] {
            stream
                .set_write_timeout(Some(POLL))
                .and_then(|()| stream.set_read_timeout(Some(POLL)))
                .map_err(|e| failed("setting the competitor's socket timeouts", e))?;
            let copy = stream
                .try_clone()
                .map_err(|e| failed("cloning the competitor's socket", e))?;
            sockets.push(copy);
            let stop = stop.clone();
            let received = received.clone();
            let name = if sends {
                "competitor-send"
            } else {
                "competitor-recv"
            };
            let t = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    if sends {
                        send_until(stream, &stop)
                    } else {
                        receive_until(stream, &stop, &received)
                    }
                })
                .map_err(|e| failed("starting a competitor thread", e))?;
            threads.push(t);
        }
        Ok(Competitor {
            congestion,
            received,
            stop,
            sockets,
            threads,
        })
    }

    /// The sender's congestion control, as its socket reports it.
    pub fn congestion(&self) -> Option<&str> {
        self.congestion.as_deref()
    }

    /// Payload bytes the client side has received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Whether the flow still runs (both threads alive).
    pub fn running(&self) -> bool {
        self.threads.iter().all(|t| !t.is_finished())
    }
}

impl Drop for Competitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn send_until(mut stream: TcpStream, stop: &AtomicBool) {
    let buf = vec![0x5a_u8; 256 << 10];
    while !stop.load(Ordering::Relaxed) {
        match stream.write(&buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if timed_out(&e) || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "competitor sender stopped");
                break;
            }
        }
    }
}

fn receive_until(mut stream: TcpStream, stop: &AtomicBool, received: &AtomicU64) {
    let mut buf = vec![0_u8; 256 << 10];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if timed_out(&e) || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "competitor receiver stopped");
                break;
            }
        }
    }
}

fn set_congestion(s: &TcpStream, name: &str) -> std::io::Result<()> {
    rustix::net::sockopt::set_tcp_congestion(s, name).map_err(std::io::Error::from)
}

fn get_congestion(s: &TcpStream) -> Option<String> {
    rustix::net::sockopt::tcp_congestion(s).ok()
}
