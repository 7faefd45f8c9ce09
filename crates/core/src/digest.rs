//! SHA-256 values and their HTTP spelling (RFC 9530 `Content-Digest`, `Repr-Digest`,
//! `Want-Content-Digest`).
//!
//! RFC 9530 fields are RFC 8941 dictionaries: `sha-256=:<base64>:, sha-512=:<base64>:`. Only
//! `sha-256` is used by xfer; other algorithms in a received field are ignored.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
pub use xfer_sha256::{pairing_stats, pairs_help, thread_pairing_stats, PairingStats};

/// The RFC 9530 algorithm key xfer computes and checks.
pub const SHA256_KEY: &str = "sha-256";

/// Header asking the server for `Content-Digest` of what it sends.
pub const WANT_CONTENT_DIGEST: &str = "want-content-digest";
/// Header (or trailer) carrying the digest of the bytes of this message's content.
pub const CONTENT_DIGEST: &str = "content-digest";
/// Header carrying the digest of the whole selected representation (the whole file).
pub const REPR_DIGEST: &str = "repr-digest";
/// Header asking for `Repr-Digest`.
pub const WANT_REPR_DIGEST: &str = "want-repr-digest";

/// A SHA-256 value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest(pub [u8; 32]);

impl Sha256Digest {
    /// Hash a whole buffer at once.
    pub fn of(data: &[u8]) -> Self {
        Self(Sha256::digest(data).into())
    }

    /// The digest of everything `input` yields, read in 1 MiB blocks.
    pub fn of_reader(mut input: impl std::io::Read) -> std::io::Result<Self> {
        let mut hasher = Sha256Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                return Ok(hasher.finish());
            }
            hasher.update(&buf[..n]);
        }
    }

    /// Lower-case hex, as `sha256sum` prints it.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }

    /// Parse 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Result<Self, DigestParseError> {
        let s = s.trim();
        if s.len() != 64 {
            return Err(DigestParseError(format!(
                "a SHA-256 is 64 hex digits, got {} characters",
                s.len()
            )));
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
            let hi = hex_val(pair[0]);
            let lo = hex_val(pair[1]);
            match (hi, lo) {
                (Some(hi), Some(lo)) => out[i] = (hi << 4) | lo,
                _ => return Err(DigestParseError(format!("not hex: {s:?}"))),
            }
        }
        Ok(Self(out))
    }

    /// Standard base64, as RFC 9530 byte sequences carry it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The RFC 9530 field value `sha-256=:<base64>:`.
    pub fn to_header_value(&self) -> String {
        format!("{SHA256_KEY}=:{}:", self.to_base64())
    }

    /// Extract the `sha-256` member of a `Content-Digest` or `Repr-Digest` field value (an
    /// RFC 8941 dictionary, parsed with `sfv`).
    ///
    /// Returns `Ok(None)` when the field carries no `sha-256` member (or is not a dictionary
    /// and does not mention one), and an error when a `sha-256` member is present but
    /// malformed: a peer that claims a digest and garbles it should not be silently trusted or
    /// silently ignored.
    pub fn from_header_value(value: &str) -> Result<Option<Self>, DigestParseError> {
        let dict: sfv::Dictionary = match sfv::Parser::new(value).parse() {
            Ok(d) => d,
            Err(e) if value.to_ascii_lowercase().contains(SHA256_KEY) => {
                return Err(DigestParseError(format!(
                    "field naming sha-256 is not a structured-field dictionary: {e}"
                )))
            }
            Err(_) => return Ok(None),
        };
        let Some(entry) = dict.get(SHA256_KEY) else {
            return Ok(None);
        };
        let bytes = match entry {
            sfv::ListEntry::Item(sfv::Item {
                bare_item: sfv::BareItem::ByteSequence(b),
                ..
            }) => b,
            _ => {
                return Err(DigestParseError(
                    "sha-256 value is not a byte sequence".to_string(),
                ))
            }
        };
        let arr: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
            DigestParseError(format!("sha-256 value has {} bytes, not 32", bytes.len()))
        })?;
        Ok(Some(Self(arr)))
    }
}

/// Whether a `Want-Content-Digest`/`Want-Repr-Digest` value asks for SHA-256 with a non-zero
/// preference (RFC 9530 §4: a dictionary of integers, `sha-256=5, sha-512=3`; `0` means "not
/// acceptable"; a bare `sha-256` is taken as a wish). A field that is not a dictionary is
/// ignored, as RFC 8941 says a recipient does with an invalid field.
pub fn wants_sha256(value: &str) -> bool {
    let Ok(dict) = sfv::Parser::new(value).parse::<sfv::Dictionary>() else {
        return false;
    };
    match dict.get(SHA256_KEY) {
        Some(sfv::ListEntry::Item(item)) => match &item.bare_item {
            sfv::BareItem::Integer(n) => i64::from(*n) > 0,
            sfv::BareItem::Boolean(b) => *b,
            _ => false,
        },
        _ => false,
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({})", self.to_hex())
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl serde::Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// A malformed digest value.
#[derive(Debug, Clone, thiserror::Error)]
#[error("malformed digest: {0}")]
pub struct DigestParseError(pub String);

/// Streaming SHA-256 of a byte sequence fed in order.
#[derive(Clone, Default)]
pub struct Sha256Hasher(Sha256);

impl Sha256Hasher {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(self) -> Sha256Digest {
        Sha256Digest(self.0.finalize().into())
    }
}

/// Streaming SHA-256 for a lane's chunk: bytes handed over as [`bytes::Bytes`] may wait to
/// be hashed together with another lane's on the same thread (two streams interleaved on one
/// core cost less than one after the other; see the `xfer-sha256` crate).
#[derive(Default)]
pub struct LaneSha256(xfer_sha256::PairingSha256);

impl LaneSha256 {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, data: bytes::Bytes) {
        self.0.update(data);
    }

    pub fn finish(self) -> Sha256Digest {
        Sha256Digest(self.0.finish())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let d = Sha256Digest::of(b"hello");
        let v = d.to_header_value();
        assert_eq!(Sha256Digest::from_header_value(&v).ok().flatten(), Some(d));
    }

    #[test]
    fn rfc9530_example_and_other_algorithms() {
        // RFC 9530 appendix B: sha-256 of `{"hello": "world"}`.
        let v = "sha-512=:AAAA:, sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:";
        let d = Sha256Digest::from_header_value(v).ok().flatten();
        assert_eq!(d, Some(Sha256Digest::of(b"{\"hello\": \"world\"}")));
        assert_eq!(
            Sha256Digest::from_header_value("sha-512=:AAAA:")
                .ok()
                .flatten(),
            None
        );
        assert!(Sha256Digest::from_header_value("sha-256=:AAAA:").is_err());
        assert!(Sha256Digest::from_header_value("sha-256=abc").is_err());
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let d = Sha256Digest::of(b"");
        assert_eq!(
            d.to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            Sha256Digest::from_hex(&d.to_hex().to_uppercase()).ok(),
            Some(d)
        );
        assert!(Sha256Digest::from_hex("xyz").is_err());
        assert!(Sha256Digest::from_hex(&"g".repeat(64)).is_err());
    }

    #[test]
    fn want_digest_preferences() {
        assert!(wants_sha256("sha-256=1"));
        assert!(wants_sha256("sha-512=3, sha-256=10"));
        assert!(!wants_sha256("sha-256=0"));
        assert!(!wants_sha256("sha-512=1"));
        assert!(wants_sha256("sha-256"));
        assert!(wants_sha256("sha-256=3;x=1"));
        assert!(!wants_sha256("sha-256=?0"));
        assert!(!wants_sha256("sha-256=-1"));
        assert!(!wants_sha256("sha-256=1,,"), "not a dictionary");
        assert!(!wants_sha256("sha-256=(1 2)"));
    }

    #[test]
    fn odd_but_valid_and_invalid_dictionaries() {
        let d = Sha256Digest::of(b"x");
        let b64 = d.to_base64();
        for ok in [
            format!("sha-256=:{b64}:"),
            format!("  sha-256=:{b64}:;alg=x  "),
            format!("unixsum=30637, sha-256=:{b64}:"),
            format!("sha-256=:AAAA:, sha-256=:{b64}:"),
        ] {
            assert_eq!(
                Sha256Digest::from_header_value(&ok).ok().flatten(),
                Some(d),
                "{ok}"
            );
        }
        for absent in ["", "md5=:AAAA:", "not a dictionary at all;;", "a=1,"] {
            assert!(
                matches!(Sha256Digest::from_header_value(absent), Ok(None)),
                "{absent:?}"
            );
        }
        for bad in [
            format!("sha-256=\"{b64}\""),
            format!("sha-256=:{b64}"),
            "sha-256=(:AAAA:)".to_string(),
            "sha-256".to_string(),
            "sha-256=:!!:".to_string(),
        ] {
            assert!(Sha256Digest::from_header_value(&bad).is_err(), "{bad:?}");
        }
    }
}
