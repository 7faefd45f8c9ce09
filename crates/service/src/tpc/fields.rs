//! The `COPY` fields that say which credentials the copy may use (`Credential`,
//! `X-No-Delegate`) and what it belongs to (`ClientInfo`, `SciTag`).
//!
//! xfer delegates nothing (no GridSite proxy delegation, no OpenID Connect token exchange):
//! the remote sees only what the caller passed with `TransferHeader<Name>` fields, plus the
//! server's own client certificate when the library user configured one. `Credential: none`
//! (what gfal2 sends with a token for the remote) and `X-No-Delegate: true` take that
//! certificate away too. A `Credential` the server cannot honour is refused before anything
//! starts, as XRootD does, rather than copying with other credentials than the caller chose.

use crate::status;
use crate::upload::Refusal;

/// Which credentials a copy presents to the remote besides its `TransferHeader` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyCredentials {
    /// The server's configured client identity, if any (no `Credential` field).
    #[default]
    Server,
    /// Nothing but the `TransferHeader` fields: no client certificate
    /// (`Credential: none`, `X-No-Delegate: true`).
    None,
}

/// `Credential` values dCache defines for delegation; understood, and refused here.
const DELEGATION_KINDS: &[&str] = &["gridsite", "oidc"];

/// The credentials the caller's `Credential` and `X-No-Delegate` fields leave the copy.
pub(crate) fn credentials(
    credential: Option<&str>,
    no_delegate: Option<&str>,
) -> Result<CopyCredentials, Refusal> {
    let no_delegate = no_delegate.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    match credential.map(str::trim) {
        None | Some("") if no_delegate => Ok(CopyCredentials::None),
        None | Some("") => Ok(CopyCredentials::Server),
        Some(v) if v.eq_ignore_ascii_case("none") => Ok(CopyCredentials::None),
        Some(v) if DELEGATION_KINDS.iter().any(|k| v.eq_ignore_ascii_case(k)) => {
            Err(Refusal::new(
                status::BAD_REQUEST,
                "this server delegates no credentials: send Credential: none and the remote's token in TransferHeaderAuthorization\n",
                format!("Credential: {}", bounded(v)),
            ))
        }
        Some(v) => Err(Refusal::new(
            status::BAD_REQUEST,
            "unknown Credential value (this server understands only none)\n",
            format!("Credential: {}", bounded(v)),
        )),
    }
}

/// Longest `ClientInfo` kept for the log, in characters.
const CLIENT_INFO_MAX: usize = 256;

/// `ClientInfo` as the log shows it: printable ASCII only (anything else becomes `?`), cut
/// to [`CLIENT_INFO_MAX`] characters, so a caller can neither forge log lines nor fill
/// them. FTS sends `job-id=…;file-id=…;retry=…`.
pub(crate) fn client_info(value: Option<&str>) -> Option<String> {
    let v = value?.trim();
    (!v.is_empty()).then(|| bounded(v))
}

/// A caller's text as logs and refusals show it: printable ASCII, at most
/// [`CLIENT_INFO_MAX`] characters.
pub(crate) fn bounded(v: &str) -> String {
    let mut out: String = v
        .chars()
        .take(CLIENT_INFO_MAX)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if v.chars().count() > CLIENT_INFO_MAX {
        out.push('…');
    }
    out
}

/// The SciTags flow identifiers a `SciTag` field may carry (experiment << 6 | activity):
/// the range the SciTags specification gives and XRootD checks.
const SCITAG_RANGE: std::ops::RangeInclusive<u32> = 65..=65535;

/// `SciTag` as a number in [`SCITAG_RANGE`]; anything else is ignored (with a debug line),
/// since a wrong label must not fail a copy.
pub(crate) fn scitag(value: Option<&str>) -> Option<u32> {
    let v = value?.trim();
    match v.parse::<u32>() {
        Ok(n) if SCITAG_RANGE.contains(&n) => Some(n),
        _ => {
            tracing::debug!(scitag = %bounded(v), "SciTag ignored: not an integer from 65 to 65535");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_values() {
        assert_eq!(credentials(None, None).ok(), Some(CopyCredentials::Server));
        assert_eq!(
            credentials(Some("none"), None).ok(),
            Some(CopyCredentials::None)
        );
        assert_eq!(
            credentials(Some(" NONE "), None).ok(),
            Some(CopyCredentials::None)
        );
        assert_eq!(
            credentials(None, Some("true")).ok(),
            Some(CopyCredentials::None)
        );
        assert_eq!(
            credentials(None, Some("false")).ok(),
            Some(CopyCredentials::Server)
        );
        for refused in ["gridsite", "oidc", "x509", "bearer"] {
            let r = credentials(Some(refused), None).err();
            assert_eq!(r.map(|r| r.status), Some(status::BAD_REQUEST), "{refused}");
        }
        // `X-No-Delegate` does not make an unknown value acceptable.
        assert!(credentials(Some("magic"), Some("true")).is_err());
    }

    #[test]
    fn client_info_is_printable_and_bounded() {
        assert_eq!(
            client_info(Some("job-id=a1;file-id=7;retry=0")).as_deref(),
            Some("job-id=a1;file-id=7;retry=0")
        );
        assert_eq!(
            client_info(Some("a\nforged line\x1b[0m")).as_deref(),
            Some("a?forged line?[0m")
        );
        let long = "x".repeat(10_000);
        let shown = client_info(Some(&long)).expect("kept");
        assert_eq!(shown.chars().count(), CLIENT_INFO_MAX + 1);
        assert_eq!(client_info(Some("  ")), None);
        assert_eq!(client_info(None), None);
    }

    #[test]
    fn scitags_in_range_only() {
        assert_eq!(scitag(Some("206")), Some(206));
        assert_eq!(scitag(Some(" 65 ")), Some(65));
        assert_eq!(scitag(Some("65535")), Some(65535));
        for bad in ["64", "0", "65536", "-1", "abc", "", "2.5"] {
            assert_eq!(scitag(Some(bad)), None, "{bad}");
        }
        assert_eq!(scitag(None), None);
    }
}
