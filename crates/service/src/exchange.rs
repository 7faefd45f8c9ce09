//! One request from its arrival to the last byte of its answer: counted in the metrics,
//! listed on the status page while it runs, and written to the access log when it ends.
//!
//! ```text
//!  Service::respond ─ Exchange::begin ──▶ live table (status page)
//!        │ upload body ─ CountingBody ──▶ bytes in
//!        └ plan decided ─ Exchange::attach ─▶ Finish rides in the body (stream, listing)
//!                                               or in the plan (no body)
//!  body sent / dropped ─▶ Finish::drop ──▶ metrics, live table out, last errors, access log
//! ```
//!
//! The record ends when the body ends, whichever codec sends it, so every protocol is
//! recorded by the same code once.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use xfer_common::metrics;

use crate::access::Identity;
use crate::access_log::Checksum;
use crate::plan::{Body, ResponsePlan};
use crate::record::{activity, lock, Finish, Live, UploadPart};
use crate::request::{Method, Request};
use crate::upload::UploadBody;

/// A request begun.
pub(crate) struct Exchange {
    id: u64,
    live: Arc<Live>,
    time: SystemTime,
}

impl Exchange {
    pub fn begin(req: &Request) -> Self {
        let a = activity();
        let id = a.next.fetch_add(1, Ordering::Relaxed);
        let live = Arc::new(Live {
            method: req.method.as_str().to_string(),
            path: req.path.clone(),
            protocol: req.protocol,
            peer: req.peer,
            started: Instant::now(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            size: AtomicU64::new(req.upload.content_length.unwrap_or(0)),
        });
        lock(&a.live).insert(id, Arc::clone(&live));
        Self {
            id,
            live,
            time: SystemTime::now(),
        }
    }

    /// `body`, with the bytes read from it counted.
    pub fn counting<'a>(&self, body: &'a mut dyn UploadBody) -> CountingBody<'a> {
        CountingBody {
            inner: body,
            live: Arc::clone(&self.live),
        }
    }

    /// Hand the record to the plan's body, which ends it when it is sent or dropped.
    pub fn attach(self, req: &Request, plan: &mut ResponsePlan, who: Identity) {
        if let Some(size) = plan.size {
            self.live.size.store(size, Ordering::Relaxed);
        }
        let checksum = plan
            .digest
            .as_ref()
            .map(|c| Checksum {
                algorithm: c.algorithm.rfc3230_name().to_ascii_lowercase(),
                value: c.to_hex(),
                of: "resource",
            })
            .or_else(|| {
                plan.repr_digest.map(|d| Checksum {
                    algorithm: "sha-256".into(),
                    value: d.to_hex(),
                    of: "resource",
                })
            })
            .or_else(|| {
                plan.content_digest.map(|d| Checksum {
                    algorithm: "sha-256".into(),
                    value: d.to_hex(),
                    of: "body",
                })
            });
        let mut finish = Finish {
            id: self.id,
            live: self.live,
            time: self.time,
            identity: who,
            status: plan.status,
            remote: req
                .copy
                .source
                .clone()
                .or_else(|| req.copy.destination.clone()),
            checksum,
            copy: plan.copy_report.take(),
            upload: UploadPart::of(req),
            detail: plan.detail.clone(),
            streamed: false,
            complete: false,
        };
        match &mut plan.body {
            // A HEAD's body is never sent: the answer is over with its head.
            _ if req.method == Method::Head => plan.finish = Some(Box::new(finish)),
            Body::Stream(s) => {
                finish.streamed = true;
                s.finish = Some(Box::new(finish));
            }
            Body::Listing(l) => {
                finish.streamed = true;
                l.finish = Some(Box::new(finish));
            }
            Body::Empty | Body::Message(_) => plan.finish = Some(Box::new(finish)),
        }
    }
}

/// An upload body whose bytes are counted as they are read.
pub(crate) struct CountingBody<'a> {
    inner: &'a mut dyn UploadBody,
    live: Arc<Live>,
}

impl UploadBody for CountingBody<'_> {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<io::Result<Bytes>>> + Send + '_>> {
        Box::pin(async move {
            let chunk = self.inner.next_chunk().await;
            if let Some(Ok(b)) = &chunk {
                let n = b.len() as u64;
                self.live.bytes_in.fetch_add(n, Ordering::Relaxed);
                metrics::global().add_bytes_in(self.live.protocol, n);
            }
            chunk
        })
    }
}
