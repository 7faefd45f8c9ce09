//! A seconds-long smoke run of every fuzz target: the committed corpus, then a fixed number of
//! seeded mutations of it. Long, coverage-guided runs are `scripts/fuzz.sh`; this keeps every
//! target compiling and catches the shallow bugs on every test run.

use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

use xfer_fuzz_targets::TARGETS;

/// Mutated inputs per target. Deterministic (fixed seed), so a failure reproduces.
const MUTATIONS: usize = 4000;

/// Fragments that matter to these decoders, spliced into inputs.
const TOKENS: &[&[u8]] = &[
    b"..",
    b"%2e%2e",
    b"/",
    b"\\",
    b"\0",
    b"%00",
    b"%2F",
    b"bytes=",
    b"-",
    b",",
    b";",
    b"=",
    b":",
    b"q=0",
    b"q=1",
    b"sha-256",
    b"adler32",
    b"md5",
    b"18446744073709551615",
    b"99999999999999999999",
    b"</D:href>",
    b"<D:href>",
    b"<D:collection/>",
    b"</D:response>",
    b"\"type\":\"dir\"",
    b"\"path\":\"",
    b"{\"end\":{\"entries\":0}}\n",
    b"\n",
    b"\xff",
    b"\xc3\xbc",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut data = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(6) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            2 if !data.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(data.len());
                data.drain(at.min(end)..end);
            }
            3 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                data.splice(at..at, token.iter().copied());
            }
            4 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len() + 1);
                let to = (from + rng.below(64)).min(other.len());
                data.splice(at..at, other[from..to].iter().copied());
            }
            _ => data.truncate(at),
        }
    }
    data
}

fn corpus_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name)
}

fn load_corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

fn run_one(name: &str, target: fn(&[u8]), input: &[u8]) {
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| target(input)));
    if outcome.is_err() {
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        panic!("fuzz target {name} broke an invariant on input (hex) {hex}");
    }
}

#[test]
fn every_target_survives_its_corpus_and_mutations() {
    for &(name, target) in TARGETS {
        let corpus = load_corpus(name);
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} is empty");
        for input in &corpus {
            run_one(name, target, input);
        }
        let mut rng = Rng(0x5eed_0000 ^ name.len() as u64 ^ (name.as_bytes()[0] as u64) << 32);
        for _ in 0..MUTATIONS {
            let input = mutate(&mut rng, &corpus);
            run_one(name, target, &input);
        }
        println!(
            "{name}: {} corpus inputs, {MUTATIONS} mutations",
            corpus.len()
        );
    }
}

#[test]
fn every_target_has_a_libfuzzer_entry_point() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for &(name, _) in TARGETS {
        let file = dir.join(format!("{name}.rs"));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("xfer_fuzz_targets::{name}")),
            "{} does not call xfer_fuzz_targets::{name}",
            file.display()
        );
    }
}
