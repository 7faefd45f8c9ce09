//! Macaroon requests: `POST` with `Content-Type: application/macaroon-request`, which gfal2
//! (and so FTS) sends to every https endpoint before a transfer, asking for a macaroon to use
//! instead of the caller's credentials (dCache and XRootD issue them). xfer issues none.
//!
//! The answer is 405 at once, before access control and without reading the body: gfal2
//! takes any status but 200 as "no macaroon here" and goes on with the credentials it has.
//! 405 rather than 400 because the request is well formed; this server just does not serve
//! it, which is what a WebDAV server without a macaroon issuer answers. Never 401 or 403,
//! which would read as a verdict on the caller's token.

use crate::plan::ResponsePlan;
use crate::request::{Method, Request};
use crate::status;

/// The media type of a macaroon request (dCache's and XRootD's convention).
const MACAROON_REQUEST: &str = "application/macaroon-request";

/// Whether `req` asks for a macaroon.
pub(crate) fn is_request(req: &Request) -> bool {
    req.method == Method::Post
        && req.upload.draft.content_type.as_deref().is_some_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(MACAROON_REQUEST))
        })
}

/// The refusal; `allow` is what the server does serve.
pub(crate) fn refusal(allow: &'static str) -> ResponsePlan {
    let mut plan = ResponsePlan::refusal(
        status::METHOD_NOT_ALLOWED,
        "this server issues no macaroons: present your token or certificate with each request\n",
        Some("macaroon request".into()),
    );
    plan.allow = Some(allow);
    plan
}
