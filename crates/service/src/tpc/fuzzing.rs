//! A `COPY` request's fields on arbitrary bytes, for the fuzz targets: what the server reads
//! before it starts a copy (the remote URL, the `TransferHeader*` fields, `Credential`,
//! `X-No-Delegate`, `ClientInfo`, `SciTag`), each with the invariant it must keep.

use url::Url;

use super::remote_policy::RemotePolicy;
use super::{check_literal_host, fields, outgoing_headers, remote_url, RESERVED_HEADERS};
use crate::request::CopyHead;

/// `Name: value` lines as a request head's fields.
pub fn copy_fields(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let head = CopyHead::from_fields(text.lines().filter_map(|l| l.split_once(':')));
    for remote in [head.source.as_deref(), head.destination.as_deref()]
        .into_iter()
        .flatten()
    {
        let Ok(url) = remote_url(remote, &["https", "http"]) else {
            continue;
        };
        assert!(matches!(url.scheme(), "https" | "http"), "{url}");
        assert!(url.host().is_some(), "{url} has no host");
        assert!(
            url.username().is_empty() && url.password().is_none(),
            "{url}"
        );
        assert!(url.fragment().is_none(), "{url}");
        // What is judged is what is reached: the normalised form reads back as itself.
        assert_eq!(Url::parse(url.as_str()).as_ref(), Ok(&url), "{remote:?}");
        let _ = check_literal_host(&url, &RemotePolicy::default());
    }
    if let Ok(headers) = outgoing_headers(&head.transfer_headers) {
        for (name, value) in &headers {
            let lower = name.to_ascii_lowercase();
            assert!(
                !RESERVED_HEADERS.contains(&lower.as_str()),
                "{name} passed on"
            );
            assert!(!name.is_empty(), "an empty header name passed on");
            assert!(
                !value.bytes().any(|b| b.is_ascii_control() && b != b'\t'),
                "a control character in {name}"
            );
        }
    }
    let _ = fields::credentials(head.credential.as_deref(), head.no_delegate.as_deref());
    if let Some(info) = fields::client_info(head.client_info.as_deref()) {
        assert!(
            info.chars().all(|c| c.is_ascii_graphic() || c == ' '),
            "{info:?}"
        );
    }
    if let Some(tag) = fields::scitag(head.scitag.as_deref()) {
        assert!((65..=65535).contains(&tag), "SciTag {tag}");
    }
}
