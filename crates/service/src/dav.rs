//! WebDAV, read-only and class 1 (RFC 4918): `OPTIONS` and `PROPFIND` with `Depth: 0` or `1`.
//!
//! Every `PROPFIND` is answered with the four properties a tree transfer needs —
//! `resourcetype`, `getcontentlength`, `getlastmodified`, `getetag` (the ETag a GET of the file
//! gives) — whatever the request body asks for; the body is not read. `Depth: infinity`, and
//! a missing `Depth`, which RFC 4918 §10.2 says means infinity, are refused with 403 and the
//! `DAV:propfind-finite-depth` precondition (§9.1): the recursive listing is the manifest.

use std::ops::ControlFlow;

use xfer_common::dir_walk::{walk_dir, WalkDepth};
use xfer_common::listing::propfind::MultistatusWriter;
use xfer_common::listing::EntryKind;
use xfer_common::{FileStamp, TargetKind};

use crate::directory::{decoded_path, listing_plan, resolve_target};
use crate::listing_body::ListingStream;
use crate::plan::{ResponsePlan, CONTENT_TYPE_XML};
use crate::request::Request;
use crate::status::{self, allowed};

/// Sent with `OPTIONS` when uploads are on: this server understands xfer's parallel upload
/// protocol (chunks with `Content-Range`), so a client may use it rather than one plain `PUT`.
pub const UPLOAD_PROTOCOL: &str = "xfer-upload-protocol";
/// The version of that protocol, the value of [`UPLOAD_PROTOCOL`].
pub const UPLOAD_PROTOCOL_VERSION: &str = "1";

/// The body of the 403 for `Depth: infinity` (RFC 4918 §9.1, §16).
const FINITE_DEPTH_ERROR: &str = concat!(
    r#"<?xml version="1.0" encoding="utf-8"?>"#,
    "\n",
    r#"<D:error xmlns:D="DAV:"><D:propfind-finite-depth/></D:error>"#,
    "\n"
);

/// `OPTIONS`, for any path: the methods served and WebDAV class 1, which is what WebDAV
/// clients probe before they send `PROPFIND`. With uploads on, `Xfer-Upload-Protocol: 1`
/// tells a client (`xfer put`, a pushing third-party copy) that chunked, parallel uploads
/// with `Content-Range` are understood here (docs/upload-protocol.md); any other server
/// gets whole-file `PUT`s only.
pub(crate) fn options(uploads: Option<&crate::upload::UploadConfig>, tpc: bool) -> ResponsePlan {
    let mut plan = ResponsePlan {
        allow: Some(allowed(uploads.is_some(), tpc)),
        dav: Some("1"),
        ..ResponsePlan::empty(status::OK)
    };
    if let Some(up) = uploads {
        plan.headers
            .push((UPLOAD_PROTOCOL, UPLOAD_PROTOCOL_VERSION.to_string()));
        // The resumable-upload draft: OPTIONS tells a client the limits before it starts.
        plan.headers
            .push(("upload-limit", crate::upload::resumable::options_limit(up)));
    }
    plan
}

/// How deep a `PROPFIND` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    Zero,
    One,
    Infinity,
}

fn parse_depth(value: Option<&str>) -> Option<Depth> {
    match value.map(str::trim) {
        None => Some(Depth::Infinity),
        Some("0") => Some(Depth::Zero),
        Some("1") => Some(Depth::One),
        Some(v) if v.eq_ignore_ascii_case("infinity") => Some(Depth::Infinity),
        Some(_) => None,
    }
}

/// `PROPFIND`: a 207 Multi-Status with the resource itself and, at `Depth: 1` on a
/// collection, its members.
pub(crate) async fn propfind(cfg: &crate::config::ServiceConfig, req: &Request) -> ResponsePlan {
    let depth = match parse_depth(req.depth.as_deref()) {
        Some(Depth::Infinity) => {
            let mut plan = ResponsePlan::refusal(
                status::FORBIDDEN,
                FINITE_DEPTH_ERROR,
                Some("PROPFIND with Depth: infinity (or none); ask for 0 or 1".into()),
            );
            plan.content_type = CONTENT_TYPE_XML;
            return plan;
        }
        Some(d) => d,
        None => {
            return ResponsePlan::refusal(
                status::BAD_REQUEST,
                "Depth must be 0, 1 or infinity\n",
                Some(format!(
                    "PROPFIND with Depth: {}",
                    req.depth.as_deref().unwrap_or("")
                )),
            )
        }
    };
    let target = match resolve_target(cfg, req).await {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    let mut plan = listing_plan(CONTENT_TYPE_XML, false, move || {
        ListingStream::spawn(move |out| {
            let href = decoded_path(&target);
            let meta = std::fs::metadata(&target.canonical).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("PROPFIND of {}: {e}", target.canonical.display()),
                )
            })?;
            let mut doc = MultistatusWriter::new(out)?;
            match target.kind {
                TargetKind::File => {
                    let stamp = FileStamp::of(&meta);
                    doc.write_member(
                        &href,
                        EntryKind::File,
                        Some(stamp.size),
                        meta.modified().ok(),
                        Some(&stamp.etag()),
                    )?;
                }
                TargetKind::Directory => {
                    doc.write_member(
                        &href,
                        EntryKind::Directory,
                        None,
                        meta.modified().ok(),
                        None,
                    )?;
                }
            }
            if depth == Depth::One && target.kind == TargetKind::Directory {
                walk_dir(&target.root, &target.canonical, WalkDepth::Children, |e| {
                    let e = e.entry;
                    let slash = if e.is_dir() { "/" } else { "" };
                    doc.write_member(
                        &format!("{href}{}{slash}", e.path),
                        e.kind,
                        e.size,
                        e.modified,
                        e.etag.as_deref(),
                    )?;
                    Ok(ControlFlow::Continue(()))
                })?;
            }
            doc.finish()?;
            Ok(())
        })
    });
    plan.status = status::MULTI_STATUS;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_values() {
        assert_eq!(parse_depth(None), Some(Depth::Infinity));
        assert_eq!(parse_depth(Some("0")), Some(Depth::Zero));
        assert_eq!(parse_depth(Some(" 1 ")), Some(Depth::One));
        assert_eq!(parse_depth(Some("Infinity")), Some(Depth::Infinity));
        assert_eq!(parse_depth(Some("2")), None);
    }
}
