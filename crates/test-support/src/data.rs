//! Deterministic test bytes: a fixed function of (seed, offset), different at every offset so a
//! chunk written at the wrong place shows, and cheap enough to generate hundreds of MiB.

use std::io::Write;
use std::path::Path;

use xfer_core::digest::{Sha256Digest, Sha256Hasher};

use crate::BoxError;

/// The 8 bytes at word `index` of the stream for `seed` (the splitmix64 output function).
fn word(seed: u64, index: u64) -> [u8; 8] {
    let mut z =
        (seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).to_le_bytes()
}

/// `len` bytes of the stream for `seed`.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(&word(seed, i));
        i += 1;
    }
    out.truncate(len);
    out
}

/// Write `size` bytes of the stream for `seed` to `path`; returns their SHA-256 in hex.
pub fn write_random_file(path: &Path, size: u64, seed: u64) -> Result<String, BoxError> {
    let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut hasher = Sha256Hasher::new();
    let mut block = Vec::with_capacity(1 << 20);
    let mut written = 0u64;
    let mut i = 0u64;
    while written < size {
        block.clear();
        while block.len() < (1 << 20) {
            block.extend_from_slice(&word(seed, i));
            i += 1;
        }
        let take = (size - written).min(block.len() as u64) as usize;
        file.write_all(&block[..take])?;
        hasher.update(&block[..take]);
        written += take as u64;
    }
    file.flush()?;
    Ok(hasher.finish().to_hex())
}

/// SHA-256 of a file, in hex.
pub fn sha256_hex(path: &Path) -> Result<String, BoxError> {
    Ok(Sha256Digest::of_reader(std::fs::File::open(path)?)?.to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_memory_agree() -> Result<(), BoxError> {
        let dir = std::env::temp_dir().join(format!("xfer-ts-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("f");
        let size = (1 << 20) + 13;
        let hex = write_random_file(&path, size, 7)?;
        assert_eq!(std::fs::read(&path)?, random_bytes(size as usize, 7));
        assert_eq!(sha256_hex(&path)?, hex);
        assert_ne!(random_bytes(64, 7), random_bytes(64, 8));
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
