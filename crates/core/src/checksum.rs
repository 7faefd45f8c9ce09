//! The checksums the field asks for besides SHA-256: adler32 (the WLCG's, through gfal2 and
//! FTS) and MD5, with the RFC 3230 `Want-Digest` / `Digest` negotiation that carries them.
//!
//! RFC 3230 is obsoleted by RFC 9530, but it is what gfal2, davix, dCache, XRootD and FTS speak:
//! `Want-Digest: adler32;q=1, md5;q=0.5` is answered with `Digest: adler32=0a1b2c3d`.
//! Encodings follow the IANA registry of RFC 3230: adler32 as 8 lower-case hex digits, MD5
//! and SHA-256 as base64. RFC 9530 keys (`adler`, `md5`, `sha-256`) carry the raw bytes as
//! structured-field byte sequences, and RFC 9530's `Want-Repr-Digest` ranks them with integer
//! preferences (`adler=3, sha-256=10`). RFC 3230 names are case-insensitive; RFC 9530 keys are
//! lower-case tokens. An unknown algorithm is ignored, never an error.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::Digest as _;

use crate::digest::Sha256Digest;

/// A checksum algorithm xfer computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChecksumAlgorithm {
    Adler32,
    Md5,
    Sha256,
}

impl ChecksumAlgorithm {
    pub const ALL: [ChecksumAlgorithm; 3] = [Self::Adler32, Self::Md5, Self::Sha256];

    /// The name in RFC 3230 `Want-Digest` / `Digest` fields, as xfer writes it.
    pub fn rfc3230_name(self) -> &'static str {
        match self {
            Self::Adler32 => "adler32",
            Self::Md5 => "md5",
            Self::Sha256 => "sha-256",
        }
    }

    /// The key in RFC 9530 `Repr-Digest` / `Want-Repr-Digest` dictionaries.
    pub fn rfc9530_key(self) -> &'static str {
        match self {
            Self::Adler32 => "adler",
            Self::Md5 => "md5",
            Self::Sha256 => "sha-256",
        }
    }

    /// An RFC 3230 algorithm name (`ADLER32`, `MD5`, `SHA-256`, `sha256`), case-insensitive.
    pub fn from_rfc3230(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "adler32" | "adler" => Some(Self::Adler32),
            "md5" => Some(Self::Md5),
            "sha-256" | "sha256" => Some(Self::Sha256),
            _ => None,
        }
    }

    /// An RFC 9530 dictionary key.
    pub fn from_rfc9530(key: &str) -> Option<Self> {
        match key.trim() {
            "adler" => Some(Self::Adler32),
            "md5" => Some(Self::Md5),
            "sha-256" => Some(Self::Sha256),
            _ => None,
        }
    }

    /// What a user types: `adler32`, `md5`, `sha256` (and the RFC spellings).
    pub fn parse_user(name: &str) -> Result<Self, UnknownAlgorithm> {
        Self::from_rfc3230(name).ok_or_else(|| UnknownAlgorithm(name.to_string()))
    }

    /// Bytes of a checksum of this algorithm.
    pub fn byte_len(self) -> usize {
        match self {
            Self::Adler32 => 4,
            Self::Md5 => 16,
            Self::Sha256 => 32,
        }
    }
}

impl fmt::Display for ChecksumAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Adler32 => "adler32",
            Self::Md5 => "md5",
            Self::Sha256 => "sha256",
        })
    }
}

/// A checksum algorithm name xfer does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown checksum algorithm {0:?} (known: adler32, md5, sha256)")]
pub struct UnknownAlgorithm(pub String);

/// A computed or received checksum.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Checksum {
    pub algorithm: ChecksumAlgorithm,
    bytes: Vec<u8>,
}

impl Checksum {
    /// A checksum from its raw bytes; `None` if the length is wrong for the algorithm.
    pub fn from_bytes(algorithm: ChecksumAlgorithm, bytes: &[u8]) -> Option<Self> {
        (bytes.len() == algorithm.byte_len()).then(|| Self {
            algorithm,
            bytes: bytes.to_vec(),
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The value as a [`Sha256Digest`], when it is a SHA-256.
    pub fn as_sha256(&self) -> Option<Sha256Digest> {
        match self.algorithm {
            ChecksumAlgorithm::Sha256 => <[u8; 32]>::try_from(self.bytes.as_slice())
                .ok()
                .map(Sha256Digest),
            _ => None,
        }
    }

    /// Lower-case hex, as `gfal-sum` and `xrdadler32` print it.
    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The value of an RFC 3230 `Digest` member (without the name): hex for adler32, base64
    /// for the others.
    pub fn rfc3230_value(&self) -> String {
        match self.algorithm {
            ChecksumAlgorithm::Adler32 => self.to_hex(),
            _ => STANDARD.encode(&self.bytes),
        }
    }

    /// `adler32=0a1b2c3d`, one member of an RFC 3230 `Digest` field.
    pub fn to_rfc3230_member(&self) -> String {
        format!("{}={}", self.algorithm.rfc3230_name(), self.rfc3230_value())
    }

    /// `adler=:ChsCOw==:`, one member of an RFC 9530 dictionary.
    pub fn to_rfc9530_member(&self) -> String {
        format!(
            "{}=:{}:",
            self.algorithm.rfc9530_key(),
            STANDARD.encode(&self.bytes)
        )
    }

    /// Parse an RFC 3230 value for `algorithm`. adler32 is accepted as 8 hex digits (what the
    /// field sends) or as base64 of 4 bytes (what a literal reading of RFC 3230 gives).
    pub fn from_rfc3230_value(algorithm: ChecksumAlgorithm, value: &str) -> Option<Self> {
        let value = value.trim();
        if algorithm == ChecksumAlgorithm::Adler32 && value.len() == 8 {
            if let Ok(n) = u32::from_str_radix(value, 16) {
                return Self::from_bytes(algorithm, &n.to_be_bytes());
            }
        }
        let bytes = STANDARD.decode(value).ok()?;
        Self::from_bytes(algorithm, &bytes)
    }
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.to_hex())
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.to_hex())
    }
}

/// Computes one checksum over bytes fed in order.
#[derive(Clone)]
pub enum Checksummer {
    Adler32(adler2::Adler32),
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
}

impl Checksummer {
    pub fn new(algorithm: ChecksumAlgorithm) -> Self {
        match algorithm {
            ChecksumAlgorithm::Adler32 => Self::Adler32(adler2::Adler32::new()),
            ChecksumAlgorithm::Md5 => Self::Md5(md5::Md5::new()),
            ChecksumAlgorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
        }
    }

    pub fn algorithm(&self) -> ChecksumAlgorithm {
        match self {
            Self::Adler32(_) => ChecksumAlgorithm::Adler32,
            Self::Md5(_) => ChecksumAlgorithm::Md5,
            Self::Sha256(_) => ChecksumAlgorithm::Sha256,
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Adler32(h) => h.write_slice(data),
            Self::Md5(h) => h.update(data),
            Self::Sha256(h) => sha2::Digest::update(h, data),
        }
    }

    pub fn finish(self) -> Checksum {
        let algorithm = self.algorithm();
        let bytes = match self {
            Self::Adler32(h) => h.checksum().to_be_bytes().to_vec(),
            Self::Md5(h) => h.finalize().to_vec(),
            Self::Sha256(h) => sha2::Digest::finalize(h).to_vec(),
        };
        Checksum { algorithm, bytes }
    }

    /// One-shot convenience.
    pub fn of(algorithm: ChecksumAlgorithm, data: &[u8]) -> Checksum {
        let mut h = Self::new(algorithm);
        h.update(data);
        h.finish()
    }
}

/// adler32's modulus: the largest prime below 2^16.
const ADLER_BASE: u64 = 65_521;

/// The adler32 of `A ‖ B` from `adler32(A)`, `adler32(B)` and the length of `B`, exactly, without
/// the bytes (zlib's `adler32_combine`). Chunks fetched and checked on different lanes can
/// so give the whole file's adler32 in order at the cost of a few multiplications per chunk.
///
/// adler32 is `s2 << 16 | s1` with `s1 = 1 + Σ bytes` and `s2 = Σ s1 after each byte`, both mod
/// 65521. Appending `B` adds `s1(B) - 1` to `s1`, and to `s2` adds `s2(B)` plus `s1(A) - 1`
/// once for each of B's `len_b` bytes.
pub fn adler32_combine(a: u32, b: u32, len_b: u64) -> u32 {
    let rem = len_b % ADLER_BASE;
    let (a1, a2) = (u64::from(a & 0xffff), u64::from(a >> 16));
    let (b1, b2) = (u64::from(b & 0xffff), u64::from(b >> 16));
    // Operands below 2^16 each: every intermediate fits in 34 bits.
    let s1 = (a1 + b1 + ADLER_BASE - 1) % ADLER_BASE;
    let s2 = (rem * (a1 % ADLER_BASE) + a2 + b2 + ADLER_BASE - rem) % ADLER_BASE;
    // Both sums are below 65521: the value fits 32 bits.
    u32::try_from(s2 << 16 | s1).unwrap_or(u32::MAX)
}

/// A file's adler32 from its chunks' adler32 values, given in file order.
#[derive(Debug, Clone, Copy)]
pub struct Adler32Chain {
    value: u32,
    len: u64,
}

impl Default for Adler32Chain {
    fn default() -> Self {
        Self::new()
    }
}

impl Adler32Chain {
    /// The adler32 of nothing (1).
    pub fn new() -> Self {
        Self { value: 1, len: 0 }
    }

    /// Append a chunk of `len` bytes whose adler32 is `value`.
    pub fn push(&mut self, value: u32, len: u64) {
        self.value = adler32_combine(self.value, value, len);
        self.len += len;
    }

    /// Bytes covered so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn value(&self) -> u32 {
        self.value
    }

    pub fn finish(self) -> Checksum {
        Checksum {
            algorithm: ChecksumAlgorithm::Adler32,
            bytes: self.value.to_be_bytes().to_vec(),
        }
    }
}

/// The algorithms an RFC 3230 `Want-Digest` value accepts, best first: by q-value (default
/// 1), ties broken by strength (SHA-256, then MD5, then adler32). `q=0` and unknown names are
/// dropped; a malformed q-value drops that member only.
pub fn want_digest_preferences(value: &str) -> Vec<ChecksumAlgorithm> {
    let mut wanted: Vec<(u16, ChecksumAlgorithm)> = Vec::new();
    for member in value.split(',') {
        let mut parts = member.split(';');
        let Some(algorithm) = parts.next().and_then(ChecksumAlgorithm::from_rfc3230) else {
            continue;
        };
        let mut q = Some(1000u16);
        for param in parts {
            if let Some((k, v)) = param.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = parse_qvalue(v.trim());
                }
            }
        }
        let Some(q) = q.filter(|q| *q > 0) else {
            continue;
        };
        match wanted.iter_mut().find(|(_, a)| *a == algorithm) {
            Some(existing) => existing.0 = existing.0.max(q),
            None => wanted.push((q, algorithm)),
        }
    }
    wanted.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    wanted.into_iter().map(|(_, a)| a).collect()
}

/// RFC 9110 §12.4.2 qvalue (`0`, `0.5`, `1`, `1.000`) in thousandths.
fn parse_qvalue(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = format!("{frac:0<3}").parse::<u16>().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The algorithms an RFC 9530 `Want-Repr-Digest` / `Want-Content-Digest` value accepts, best
/// first: a structured-field dictionary of preferences 1 (least) to 10 (most), ties broken by
/// strength. `0` means "not acceptable"; a bare key counts as 1; unknown keys, values out of
/// range and a field that is not a dictionary are ignored (RFC 8941: an invalid field is
/// ignored as a whole).
pub fn want_repr_digest_preferences(value: &str) -> Vec<ChecksumAlgorithm> {
    let Ok(dict) = sfv::Parser::new(value).parse::<sfv::Dictionary>() else {
        return Vec::new();
    };
    let mut wanted: Vec<(i64, ChecksumAlgorithm)> = Vec::new();
    for (key, entry) in &dict {
        let Some(algorithm) = ChecksumAlgorithm::from_rfc9530(key.as_str()) else {
            continue;
        };
        let preference = match entry {
            sfv::ListEntry::Item(item) => match &item.bare_item {
                sfv::BareItem::Integer(n) => i64::from(*n),
                sfv::BareItem::Boolean(true) => 1,
                _ => continue,
            },
            sfv::ListEntry::InnerList(_) => continue,
        };
        if (1..=10).contains(&preference) {
            wanted.push((preference, algorithm));
        }
    }
    wanted.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    wanted.into_iter().map(|(_, a)| a).collect()
}

/// The members of an RFC 9530 `Repr-Digest` / `Content-Digest` value that xfer understands
/// (byte sequences of the right length under a known key); anything else is skipped.
pub fn parse_rfc9530_field(value: &str) -> Vec<Checksum> {
    let Ok(dict) = sfv::Parser::new(value).parse::<sfv::Dictionary>() else {
        return Vec::new();
    };
    dict.iter()
        .filter_map(|(key, entry)| {
            let algorithm = ChecksumAlgorithm::from_rfc9530(key.as_str())?;
            match entry {
                sfv::ListEntry::Item(sfv::Item {
                    bare_item: sfv::BareItem::ByteSequence(b),
                    ..
                }) => Checksum::from_bytes(algorithm, b),
                _ => None,
            }
        })
        .collect()
}

/// The members of an RFC 3230 `Digest` field value that xfer understands.
pub fn parse_digest_field(value: &str) -> Vec<Checksum> {
    value
        .split(',')
        .filter_map(|member| {
            let (name, v) = member.split_once('=')?;
            let algorithm = ChecksumAlgorithm::from_rfc3230(name)?;
            Checksum::from_rfc3230_value(algorithm, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adler(data: &[u8]) -> u32 {
        let mut h = adler2::Adler32::new();
        h.write_slice(data);
        h.checksum()
    }

    #[test]
    fn adler32_combine_matches_the_whole_buffer() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(38);
        // Lengths around the modulus and long runs of 0xff push both sums past 65521.
        for len in [
            0usize,
            1,
            2,
            5551,
            5552,
            65_520,
            65_521,
            65_522,
            200_000,
            1 << 20,
        ] {
            let mut data = vec![0u8; len];
            if len % 2 == 0 {
                rng.fill(data.as_mut_slice());
            } else {
                data.fill(0xff);
            }
            let whole = adler(&data);
            for _ in 0..8 {
                let cut = rng.gen_range(0..=len);
                let (a, b) = data.split_at(cut);
                assert_eq!(
                    adler32_combine(adler(a), adler(b), b.len() as u64),
                    whole,
                    "len {len} cut at {cut}"
                );
            }
        }
        // An empty right side leaves the left one as it was.
        assert_eq!(
            adler32_combine(adler(b"Wikipedia"), 1, 0),
            adler(b"Wikipedia")
        );
        assert_eq!(
            adler32_combine(1, adler(b"Wikipedia"), 9),
            adler(b"Wikipedia")
        );
    }

    #[test]
    fn adler32_chain_of_uneven_chunks_is_the_files_checksum() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(9530);
        let mut data = vec![0u8; 3 << 20];
        rng.fill(data.as_mut_slice());
        let mut chain = Adler32Chain::new();
        let mut rest = data.as_slice();
        while !rest.is_empty() {
            let n = rng.gen_range(1..=rest.len().min(300_000));
            let (chunk, tail) = rest.split_at(n);
            chain.push(adler(chunk), n as u64);
            rest = tail;
        }
        assert_eq!(chain.len(), data.len() as u64);
        assert_eq!(
            chain.finish(),
            Checksummer::of(ChecksumAlgorithm::Adler32, &data)
        );
        assert!(Adler32Chain::new().is_empty());
        assert_eq!(
            Adler32Chain::new().finish(),
            Checksummer::of(ChecksumAlgorithm::Adler32, b"")
        );
    }

    #[test]
    fn known_values() {
        // Reference values: zlib's adler32 and RFC 1321's MD5 test suite.
        assert_eq!(
            Checksummer::of(ChecksumAlgorithm::Adler32, b"").to_hex(),
            "00000001"
        );
        assert_eq!(
            Checksummer::of(ChecksumAlgorithm::Adler32, b"Wikipedia").to_hex(),
            "11e60398"
        );
        assert_eq!(
            Checksummer::of(ChecksumAlgorithm::Md5, b"abc").to_hex(),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            Checksummer::of(ChecksumAlgorithm::Sha256, b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for a in ChecksumAlgorithm::ALL {
            let mut h = Checksummer::new(a);
            for piece in data.chunks(4093) {
                h.update(piece);
            }
            assert_eq!(h.finish(), Checksummer::of(a, &data), "{a}");
        }
    }

    #[test]
    fn field_encodings() {
        let adler = Checksummer::of(ChecksumAlgorithm::Adler32, b"Wikipedia");
        assert_eq!(adler.to_rfc3230_member(), "adler32=11e60398");
        assert_eq!(adler.to_rfc9530_member(), "adler=:EeYDmA==:");
        let md5 = Checksummer::of(ChecksumAlgorithm::Md5, b"abc");
        assert_eq!(md5.to_rfc3230_member(), "md5=kAFQmDzST7DWlj99KOF/cg==");
        let parsed = parse_digest_field(
            "ADLER32=11e60398, MD5=kAFQmDzST7DWlj99KOF/cg==, foo=bar, sha-256=!!",
        );
        assert_eq!(parsed, vec![adler.clone(), md5]);
        // adler32 also as base64 of its 4 bytes.
        assert_eq!(
            Checksum::from_rfc3230_value(ChecksumAlgorithm::Adler32, "EeYDmA=="),
            Some(adler)
        );
        assert_eq!(
            Checksum::from_rfc3230_value(ChecksumAlgorithm::Adler32, "xyz"),
            None
        );
    }

    #[test]
    fn want_digest_negotiation() {
        use ChecksumAlgorithm::*;
        assert_eq!(want_digest_preferences("adler32"), vec![Adler32]);
        assert_eq!(want_digest_preferences("ADLER32"), vec![Adler32]);
        assert_eq!(
            want_digest_preferences("md5;q=0.3, adler32;q=1, SHA-256;q=0.5"),
            vec![Adler32, Sha256, Md5]
        );
        assert_eq!(
            want_digest_preferences("adler32, md5, sha-256"),
            vec![Sha256, Md5, Adler32]
        );
        assert_eq!(
            want_digest_preferences("sha-512, adler32;q=0, crc32c"),
            vec![]
        );
        assert_eq!(
            want_digest_preferences("md5;q=2, adler32;q=0.1"),
            vec![Adler32]
        );
        assert_eq!(
            want_digest_preferences("md5;q=0.1234, adler32;q=abc"),
            vec![]
        );
        assert_eq!(want_digest_preferences(""), vec![]);
        assert_eq!(want_digest_preferences(",,;;=,"), vec![]);
    }

    #[test]
    fn want_repr_digest_negotiation() {
        use ChecksumAlgorithm::*;
        assert_eq!(want_repr_digest_preferences("adler=3"), vec![Adler32]);
        assert_eq!(
            want_repr_digest_preferences("adler=3, sha-256=10, md5=1, sha-512=10"),
            vec![Sha256, Adler32, Md5]
        );
        assert_eq!(
            want_repr_digest_preferences("adler, md5=1"),
            vec![Md5, Adler32]
        );
        assert_eq!(
            want_repr_digest_preferences("adler=0, md5=11, sha-256=-1, crc32c=5"),
            vec![]
        );
        // Not a dictionary (RFC 3230 spelling, a q-value): ignored as a whole.
        assert_eq!(want_repr_digest_preferences("ADLER32;q=1"), vec![]);
        assert_eq!(
            want_repr_digest_preferences("adler=\"x\", md5=(1 2)"),
            vec![]
        );
        assert_eq!(want_repr_digest_preferences(""), vec![]);
    }

    #[test]
    fn rfc9530_fields_round_trip() {
        let adler = Checksummer::of(ChecksumAlgorithm::Adler32, b"Wikipedia");
        let sha = Checksummer::of(ChecksumAlgorithm::Sha256, b"abc");
        let field = format!(
            "{}, sha-512=:AAAA:, {}, md5=:AAAA:, crc32c=?1",
            adler.to_rfc9530_member(),
            sha.to_rfc9530_member()
        );
        assert_eq!(parse_rfc9530_field(&field), vec![adler, sha]);
        assert_eq!(parse_rfc9530_field("adler32=11e60398"), vec![]);
    }

    #[test]
    fn user_names() {
        assert_eq!(
            ChecksumAlgorithm::parse_user("sha256"),
            Ok(ChecksumAlgorithm::Sha256)
        );
        assert_eq!(
            ChecksumAlgorithm::parse_user("Adler32"),
            Ok(ChecksumAlgorithm::Adler32)
        );
        assert!(ChecksumAlgorithm::parse_user("crc32").is_err());
    }
}
