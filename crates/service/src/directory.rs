//! Directories answered to GET: the HTML index for browsers (with the redirect to the `/`
//! form) and xfer's recursive manifest. Both stream from a walk on the blocking pool
//! ([`ListingStream`]); neither ever hashes a file: a manifest carries `sha256` only when the
//! digest cache already knows it.

use std::ops::ControlFlow;
use std::path::PathBuf;

use xfer_common::dir_walk::{walk_dir, WalkDepth};
use xfer_common::listing::html::HtmlIndexWriter;
use xfer_common::listing::manifest::{ManifestWriter, MANIFEST_MEDIA_TYPE};
use xfer_common::{resolve_target_under, ResourceError, Target, TargetKind};

use crate::config::ServiceConfig;
use crate::listing_body::ListingStream;
use crate::plan::{Body, ResponsePlan, CONTENT_TYPE_HTML};
use crate::request::Request;
use crate::status::{self, refusal_for};

/// Entries an HTML index shows before it says it was cut and points at the manifest: a page
/// a browser still renders quickly.
pub const MAX_HTML_ENTRIES: usize = 10_000;

/// The request asks for the manifest: the query has a `manifest` parameter, or `Accept`
/// names its media type.
pub(crate) fn wants_manifest(req: &Request) -> bool {
    let in_query = req.query.as_deref().is_some_and(|q| {
        q.split('&')
            .any(|p| p == "manifest" || p.starts_with("manifest="))
    });
    let in_accept = req
        .accept
        .iter()
        .flat_map(|v| v.split(','))
        .filter_map(|m| m.split(';').next())
        .any(|m| m.trim().eq_ignore_ascii_case(MANIFEST_MEDIA_TYPE));
    in_query || in_accept
}

/// Resolve the request path to a file or directory on the blocking pool; a refusal plan when
/// it cannot be served.
pub(crate) async fn resolve_target(
    cfg: &ServiceConfig,
    req: &Request,
) -> Result<Target, ResponsePlan> {
    let root = cfg.root.clone();
    let path = req.path.clone();
    let joined = tokio::task::spawn_blocking(move || resolve_target_under(&root, &path)).await;
    let resolved = match joined {
        Ok(r) => r.map_err(ResourceError::from),
        Err(e) => Err(ResourceError::Open {
            path: PathBuf::new(),
            source: std::io::Error::other(format!("resolve task failed: {e}")),
        }),
    };
    resolved.map_err(|e| {
        let (code, text) = refusal_for(e.class());
        ResponsePlan::refusal(code, text, Some(e.to_string()))
    })
}

/// A 200 whose body is a listing being produced (none for HEAD).
pub(crate) fn listing_plan(
    content_type: &'static str,
    head: bool,
    body: impl FnOnce() -> ListingStream,
) -> ResponsePlan {
    ResponsePlan {
        content_type,
        content_length: None,
        body: if head {
            Body::Empty
        } else {
            Body::Listing(body())
        },
        ..ResponsePlan::empty(status::OK)
    }
}

/// GET or HEAD of something that is not a regular file: the index of a directory, or the
/// redirect to its `/` form; `None` when it is not a directory either.
pub(crate) async fn index(cfg: &ServiceConfig, req: &Request, head: bool) -> Option<ResponsePlan> {
    let target = resolve_target(cfg, req).await.ok()?;
    if target.kind != TargetKind::Directory {
        return None;
    }
    if !req.path.ends_with('/') {
        // Relative links in the page resolve against the directory only in the `/` form.
        let mut location = format!("{}/", req.path);
        if let Some(q) = &req.query {
            location.push('?');
            location.push_str(q);
        }
        return Some(ResponsePlan {
            detail: Some(format!("directory; moved to {location}")),
            location: Some(location),
            ..ResponsePlan::empty(status::MOVED_PERMANENTLY)
        });
    }
    Some(listing_plan(CONTENT_TYPE_HTML, head, move || {
        ListingStream::spawn(move |out| {
            let title = decoded_dir_path(&target);
            let mut page = HtmlIndexWriter::new(out, &title)?;
            let mut shown = 0usize;
            let mut truncated = None;
            walk_dir(&target.root, &target.canonical, WalkDepth::Children, |e| {
                if shown == MAX_HTML_ENTRIES {
                    truncated = Some(shown);
                    return Ok(ControlFlow::Break(()));
                }
                shown += 1;
                let e = e.entry;
                page.write_entry(e.path.file_name(), e.kind, e.size, e.modified)?;
                Ok(ControlFlow::Continue(()))
            })?;
            page.finish(truncated)?;
            Ok(())
        })
    }))
}

/// The recursive manifest of the directory the request names (GET `?manifest`, `xfer/1`
/// LIST); 404 for anything but a directory.
pub(crate) async fn manifest(cfg: &ServiceConfig, req: &Request, head: bool) -> ResponsePlan {
    let target = match resolve_target(cfg, req).await {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    if target.kind != TargetKind::Directory {
        return ResponsePlan::refusal(
            status::NOT_FOUND,
            "not a directory\n",
            Some(format!("manifest of {}: not a directory", req.path)),
        );
    }
    // With `repr_digest` off the server neither sends nor computes whole-file digests.
    let digests = cfg.repr_digest.then(|| cfg.digests.clone());
    listing_plan(MANIFEST_MEDIA_TYPE, head, move || {
        ListingStream::spawn(move |out| {
            let mut manifest = ManifestWriter::new(out)?;
            walk_dir(&target.root, &target.canonical, WalkDepth::Recursive, |e| {
                let mut entry = e.entry;
                entry.sha256 = digests
                    .as_ref()
                    .zip(e.content_key.as_ref())
                    .and_then(|(d, key)| d.get_by_key(key));
                manifest.write_entry(&entry)?;
                Ok(ControlFlow::Continue(()))
            })?;
            manifest.finish()?;
            Ok(())
        })
    })
}

/// The target's absolute decoded path, with a trailing `/` for a directory.
pub(crate) fn decoded_path(target: &Target) -> String {
    match target.kind {
        TargetKind::Directory => decoded_dir_path(target),
        TargetKind::File => format!("/{}", target.relative),
    }
}

fn decoded_dir_path(target: &Target) -> String {
    if target.relative.is_empty() {
        "/".to_string()
    } else {
        format!("/{}/", target.relative)
    }
}
