//! Tree scenarios: a `[tree]` table makes every transfer of the scenario fetch one directory
//! tree of many files instead of one synthetic file. The tree is generated once per scenario
//! (seeded, so every run and every tool gets the same bytes), served by `xfer serve` and by
//! nginx (autoindex, for the peers), and a run counts as good only when every file is in the
//! destination with its size.
//!
//! ```toml
//! [tree]
//! files = 2000            # files in the tree
//! median = "240KiB"       # log-normal sizes: median and sigma of the underlying normal
//! sigma = 1.15
//! max = "64MiB"           # sizes are capped here
//! dirs = 20               # files are spread round-robin over this many directories
//! seed = 42
//! large = "4GiB"          # optional: one more file of this size, first in every listing
//! ```
//!
//! `sigma = 0` makes every file exactly `median` (20,000 files of 4 KiB: round-trip bound,
//! reported in files per second). With `large`, the runner also watches the destination and
//! reports when the large file and when the last small file were complete: neither kind may
//! starve the other.
//!
//! Peers in a tree scenario: `aria2c -i URLS -j N -x1` (one `out=` line per file keeps the
//! tree's layout) and `rclone copy --transfers N` from an HTTP remote, both from nginx over
//! TLS; xfer fetches `https://SERVER:PORT/tree/` (or `quic://`) from `xfer serve` with
//! `xfer get URL/ DEST/`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::spec::{invalid, Case, Protocol, Tool};
use super::tools::{xfer_case_args, Outcome, ToolContext, ARIA2C_QUIET};
use super::units::parse_size;
use super::ScenarioError;
use crate::rng::SplitMix64;

/// The `[tree]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeFile {
    /// Files in the tree. Default 2000.
    #[serde(default)]
    pub files: Option<u32>,
    /// Median file size. Default `240KiB`.
    #[serde(default)]
    pub median: Option<String>,
    /// Sigma of the log-normal sizes. Default 1.15.
    #[serde(default)]
    pub sigma: Option<f64>,
    /// Largest file. Default `64MiB`.
    #[serde(default)]
    pub max: Option<String>,
    /// Directories the files are spread over. Default 20.
    #[serde(default)]
    pub dirs: Option<u32>,
    /// Seed of the sizes and contents. Default 42.
    #[serde(default)]
    pub seed: Option<u64>,
    /// One extra file of this size (`large.bin` at the tree's root, listed first), to see
    /// whether a large file and many small ones starve each other. Default none.
    #[serde(default)]
    pub large: Option<String>,
}

/// A validated tree shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeShape {
    pub files: u32,
    pub median: u64,
    pub sigma: f64,
    pub max: u64,
    pub dirs: u32,
    pub seed: u64,
    pub large: Option<u64>,
}

/// The path of the optional large file under the tree's root.
pub const LARGE_FILE: &str = "large.bin";

impl TreeFile {
    pub fn validate(&self) -> Result<TreeShape, ScenarioError> {
        let files = self.files.unwrap_or(2000);
        if !(1..=1_000_000).contains(&files) {
            return Err(invalid("tree.files", files, "1 ..= 1000000"));
        }
        let size = |field: &str, v: &Option<String>, default: u64| match v {
            None => Ok(default),
            Some(s) => match parse_size(s) {
                Some(n) if (1..=1 << 40).contains(&n) => Ok(n),
                _ => Err(invalid(field, s, "a size from 1 byte to 1TiB")),
            },
        };
        let median = size("tree.median", &self.median, 240 << 10)?;
        let max = size("tree.max", &self.max, 64 << 20)?;
        let sigma = self.sigma.unwrap_or(1.15);
        if !(0.0..=4.0).contains(&sigma) {
            return Err(invalid("tree.sigma", sigma, "0.0 ..= 4.0"));
        }
        let dirs = self.dirs.unwrap_or(20);
        if !(1..=10_000).contains(&dirs) {
            return Err(invalid("tree.dirs", dirs, "1 ..= 10000"));
        }
        let large = match &self.large {
            None => None,
            Some(v) => Some(size("tree.large", &Some(v.clone()), 0)?),
        };
        Ok(TreeShape {
            files,
            median,
            sigma,
            max,
            dirs,
            seed: self.seed.unwrap_or(42),
            large,
        })
    }
}

/// One generated file: its path under the tree's root (`/`-separated) and size.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeEntry {
    pub path: String,
    pub size: u64,
}

impl TreeShape {
    /// The files' paths and sizes, without writing anything: `dir-DD/file-NNNNN.bin`, sizes
    /// log-normal (Box-Muller from the seed), capped at `max`; with `large`, `large.bin`
    /// first.
    pub fn entries(&self) -> Vec<TreeEntry> {
        let mut rng = SplitMix64::new(self.seed);
        let mu = (self.median as f64).ln();
        let large = self.large.map(|size| TreeEntry {
            path: LARGE_FILE.to_string(),
            size,
        });
        let small = (0..self.files).map(|i| {
            // 1 - u is in (0, 1], so the logarithm is finite.
            let (u1, u2) = (1.0 - rng.next_f64(), rng.next_f64());
            let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            // exp(ln(m)) need not round-trip exactly; a fixed size must be that size.
            let size = if self.sigma == 0.0 {
                self.median.min(self.max)
            } else {
                (mu + self.sigma * normal).exp().min(self.max as f64) as u64
            };
            TreeEntry {
                path: format!("dir-{:02}/file-{i:05}.bin", i % self.dirs),
                size,
            }
        });
        large.into_iter().chain(small).collect()
    }

    /// Writes the tree under `root` (created), contents from the seed; returns its entries.
    pub fn generate(&self, root: &Path) -> Result<Vec<TreeEntry>, ScenarioError> {
        let entries = self.entries();
        let mut rng = SplitMix64::new(self.seed ^ 0x7472_6565);
        let mut buf = vec![0u8; 1 << 20];
        for e in &entries {
            let path = root.join(&e.path);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|source| ScenarioError::io("creating", dir, source))?;
            }
            let mut f = std::fs::File::create(&path)
                .map_err(|source| ScenarioError::io("creating", &path, source))?;
            let mut left = e.size;
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                for word in buf[..n].chunks_mut(8) {
                    let r = rng.next_u64().to_le_bytes();
                    word.copy_from_slice(&r[..word.len()]);
                }
                f.write_all(&buf[..n])
                    .map_err(|source| ScenarioError::io("writing", &path, source))?;
                left -= n as u64;
            }
        }
        Ok(entries)
    }
}

/// Where a tree run reads from and writes to.
#[derive(Debug, Clone)]
pub struct TreeContext {
    /// The files of the tree.
    pub entries: Vec<TreeEntry>,
    /// nginx's TLS port in the server namespace (same certificate as `xfer serve`).
    pub nginx_port: u16,
    /// The destination directory of each run (emptied before and after).
    pub dest: PathBuf,
    /// aria2c's input file: one URL and one `out=` line per file.
    pub aria2c_input: PathBuf,
}

impl TreeContext {
    pub fn total_bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }

    /// Writes aria2c's input file for nginx at `server`.
    pub fn write_aria2c_input(&self, server: &str) -> Result<(), ScenarioError> {
        let mut text = String::new();
        for e in &self.entries {
            text.push_str(&format!(
                "https://{server}:{}/html/{}\n  out={}\n",
                self.nginx_port, e.path, e.path
            ));
        }
        std::fs::write(&self.aria2c_input, text)
            .map_err(|source| ScenarioError::io("writing", &self.aria2c_input, source))
    }

    /// Removes the destination, and with it the tree journal xfer keeps inside it.
    pub fn clear_dest(&self) {
        let _ = std::fs::remove_dir_all(&self.dest);
    }
}

/// When the large file and the last small file of a run were complete, in seconds from the
/// client's start: what shows whether one kind starved the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Completion {
    pub large_s: Option<f64>,
    pub last_small_s: Option<f64>,
}

/// Watches a run's destination for complete files while the client runs: a file counts once
/// it has its final name and size and no aria2c control file beside it (aria2c preallocates;
/// xfer and rclone rename a finished file into place). Only the files not yet seen are
/// looked at, every 100 ms.
pub struct CompletionWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Completion>,
}

impl CompletionWatch {
    /// Starts watching when the tree has a large file; `started` is the client's start.
    pub fn start(tree: &TreeContext, started: std::time::Instant) -> Option<CompletionWatch> {
        let large = tree.entries.iter().find(|e| e.path == LARGE_FILE)?.clone();
        let small: Vec<TreeEntry> = tree
            .entries
            .iter()
            .filter(|e| e.path != LARGE_FILE)
            .cloned()
            .collect();
        let dest = tree.dest.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let complete = |e: &TreeEntry| {
                let path = dest.join(&e.path);
                let control = dest.join(format!("{}.aria2", e.path));
                matches!(std::fs::symlink_metadata(&path), Ok(m) if m.is_file() && m.len() == e.size)
                    && std::fs::symlink_metadata(control).is_err()
            };
            let mut pending = small;
            let mut done = Completion::default();
            loop {
                // Read the flag first, so the pass after the client's exit still counts.
                let last_pass = stopped.load(std::sync::atomic::Ordering::Acquire);
                let now = started.elapsed().as_secs_f64();
                if done.large_s.is_none() && complete(&large) {
                    done.large_s = Some(now);
                }
                pending.retain(|e| !complete(e));
                if pending.is_empty() && done.last_small_s.is_none() {
                    done.last_small_s = Some(now);
                }
                if last_pass || (done.large_s.is_some() && done.last_small_s.is_some()) {
                    return done;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        Some(CompletionWatch { stop, thread })
    }

    /// Stops watching (after one last look) and returns what was seen.
    pub fn finish(self) -> Completion {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// Whether a case needs nginx.
pub fn needs_nginx(case: &Case) -> bool {
    matches!(case.tool, Tool::Aria2c | Tool::Rclone)
}

/// Program and arguments of a tree case.
pub fn command_line(case: &Case, ctx: &ToolContext, tree: &TreeContext) -> (PathBuf, Vec<String>) {
    let s = |v: &str| v.to_string();
    let ca = ctx.ca_cert.display().to_string();
    let dest = tree.dest.display().to_string();
    let nginx = format!("https://{}:{}", ctx.server, tree.nginx_port);
    match case.tool {
        Tool::Xfer => {
            let scheme = match case.protocol {
                Some(Protocol::Quic) => "quic",
                _ => "https",
            };
            let url = format!("{scheme}://{}:{}/tree/", ctx.server, ctx.port);
            let mut a = vec![s("get"), url, format!("{dest}/")];
            a.extend([s("--json"), s("--quiet"), s("--ca-cert"), ca]);
            xfer_case_args(case, &mut a);
            (ctx.xfer_bin.clone(), a)
        }
        Tool::Aria2c => {
            let mut a = vec![
                format!("-i{}", tree.aria2c_input.display()),
                format!("-j{}", case.connections),
                s("-x1"),
                format!("--ca-certificate={ca}"),
                format!("--dir={dest}"),
            ];
            a.extend(ARIA2C_QUIET.map(String::from));
            a.extend(case.args.iter().cloned());
            (PathBuf::from("aria2c"), a)
        }
        Tool::Rclone => {
            let mut a = vec![
                s("copy"),
                s("--config"),
                s("/dev/null"),
                s("--transfers"),
                case.connections.to_string(),
                s("--http-url"),
                format!("{nginx}/html/"),
                s("--ca-cert"),
                ca,
            ];
            a.extend(case.args.iter().cloned());
            a.extend([s(":http:"), dest]);
            (PathBuf::from("rclone"), a)
        }
        // Refused in tree scenarios by the spec.
        Tool::Iperf3 | Tool::Curl => (PathBuf::from(case.tool.name()), Vec::new()),
    }
}

/// A tree run's outcome: good only when every file is in the destination with its size
/// (xfer verifies digests itself; the peers are held to the sizes). Goodput is the tree's
/// bytes over the process's wall time, for every tool alike: listing, connection set-up and
/// start-up count.
pub fn outcome(
    case: &Case,
    tree: &TreeContext,
    stderr: &str,
    stdout: &str,
    exit_ok: bool,
    wall: f64,
) -> Outcome {
    let last = |text: &str| {
        text.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let (mut bytes, mut missing) = (0u64, Vec::new());
    for e in &tree.entries {
        match std::fs::symlink_metadata(tree.dest.join(&e.path)) {
            Ok(m) if m.is_file() && m.len() == e.size => bytes += e.size,
            _ => missing.push(e.path.as_str()),
        }
    }
    let error = if !exit_ok {
        Some(format!(
            "{} failed: {} {}",
            case.tool.name(),
            last(stdout),
            last(stderr)
        ))
    } else if !missing.is_empty() {
        Some(format!(
            "{} of {} files missing or short, first {}",
            missing.len(),
            tree.entries.len(),
            missing[0]
        ))
    } else {
        None
    };
    Outcome {
        bytes: Some(bytes),
        seconds: Some(wall),
        goodput_bps: (wall > 0.0).then(|| bytes as f64 * 8.0 / wall),
        error,
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;
    use crate::scenario::spec::Scenario;

    const TREE: &str = r#"
        name = "t"
        [link]
        rate = "1G"
        rtt = ["100ms"]
        [tree]
        files = 400
        [[transfer]]
        tool = "xfer"
        [[transfer]]
        tool = "xfer"
        protocol = "http2"
        connections = [1]
        args = ["--tree-lanes", "64"]
        [[transfer]]
        tool = "aria2c"
        [[transfer]]
        tool = "rclone"
        connections = [32]
    "#;

    fn contexts(dir: &Path) -> (ToolContext, TreeContext) {
        let tool = ToolContext {
            xfer_bin: "/bin/xfer".into(),
            server: Ipv4Addr::new(10, 77, 0, 1),
            port: 8443,
            ca_cert: "/c/cert.pem".into(),
            out_file: "/dev/shm/o".into(),
            duration: Duration::from_secs(5),
            file_source: false,
            nginx_port: 8444,
        };
        let shape = TreeFile {
            files: Some(5),
            median: Some("1KiB".into()),
            sigma: Some(0.5),
            max: None,
            dirs: Some(2),
            seed: None,
            large: None,
        }
        .validate()
        .unwrap_or_else(|e| panic!("{e}"));
        let entries = shape
            .generate(&dir.join("src"))
            .unwrap_or_else(|e| panic!("{e}"));
        let tree = TreeContext {
            entries,
            nginx_port: 8444,
            dest: dir.join("dest"),
            aria2c_input: dir.join("urls"),
        };
        (tool, tree)
    }

    #[test]
    fn sizes_are_log_normal_around_the_median() {
        let shape = TreeFile {
            files: None,
            median: None,
            sigma: None,
            max: None,
            dirs: None,
            seed: None,
            large: None,
        }
        .validate()
        .unwrap_or_else(|e| panic!("{e}"));
        let entries = shape.entries();
        assert_eq!(entries, shape.entries(), "the seed fixes the tree");
        assert_eq!(entries.len(), 2000);
        let mut sizes: Vec<u64> = entries.iter().map(|e| e.size).collect();
        sizes.sort_unstable();
        let median = sizes[1000] as f64;
        assert!(
            (0.85..1.15).contains(&(median / (240.0 * 1024.0))),
            "median {median}"
        );
        // Mean of a log-normal: median * exp(sigma^2 / 2) ≈ 1.94 × median.
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        assert!((1.6..2.3).contains(&(mean / median)), "mean {mean}");
        assert_eq!(entries[21].path, "dir-01/file-00021.bin");
    }

    #[test]
    fn fixed_sizes_and_a_large_file_first() {
        let shape = TreeFile {
            files: Some(20_000),
            median: Some("4KiB".into()),
            sigma: Some(0.0),
            max: None,
            dirs: None,
            seed: None,
            large: Some("4GiB".into()),
        }
        .validate()
        .unwrap_or_else(|e| panic!("{e}"));
        let entries = shape.entries();
        assert_eq!(entries.len(), 20_001);
        assert_eq!(entries[0].path, LARGE_FILE);
        assert_eq!(entries[0].size, 4 << 30);
        assert!(
            entries[1..].iter().all(|e| e.size == 4096),
            "every small file 4 KiB"
        );
    }

    #[test]
    fn completion_watch_sees_files_only_when_whole_and_without_a_control_file() {
        let dir = std::env::temp_dir().join(format!("xfer-lab-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let entry = |path: &str, size| TreeEntry {
            path: path.into(),
            size,
        };
        let tree = TreeContext {
            entries: vec![entry(LARGE_FILE, 10), entry("d/a.bin", 3)],
            nginx_port: 0,
            dest: dir.clone(),
            aria2c_input: dir.join("urls"),
        };
        std::fs::create_dir_all(dir.join("d")).unwrap_or_else(|e| panic!("{e}"));
        // Preallocated with its control file: not yet complete.
        std::fs::write(dir.join(LARGE_FILE), [0u8; 10]).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("large.bin.aria2"), b"x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("d/a.bin"), b"ab").unwrap_or_else(|e| panic!("{e}"));
        let watch = CompletionWatch::start(&tree, std::time::Instant::now())
            .unwrap_or_else(|| panic!("a tree with a large file is watched"));
        let seen = watch.finish();
        assert_eq!(seen, Completion::default(), "nothing complete yet");
        std::fs::remove_file(dir.join("large.bin.aria2")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("d/a.bin"), b"abc").unwrap_or_else(|e| panic!("{e}"));
        let seen = CompletionWatch::start(&tree, std::time::Instant::now())
            .unwrap_or_else(|| panic!("watched"))
            .finish();
        assert!(
            seen.large_s.is_some() && seen.last_small_s.is_some(),
            "{seen:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tree_scenarios_admit_only_tree_tools() {
        let s = Scenario::from_toml(TREE).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = s.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "xfer default",
                "xfer http2 c=1",
                "aria2c c=32",
                "rclone c=32"
            ]
        );
        assert_eq!(s.tree.as_ref().map(|t| t.files), Some(400));
        let e = Scenario::from_toml(&TREE.replace("tool = \"rclone\"", "tool = \"curl\""))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("transfer[3].tool"), "{e}");
        let e = Scenario::from_toml(&TREE.replace("[tree]\n        files = 400", ""))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("rclone only in a [tree]"), "{e}");
        let e = Scenario::from_toml(&TREE.replace("files = 400", "files = 0"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("tree.files"), "{e}");
    }

    #[test]
    fn command_lines_and_outcomes() {
        let s = Scenario::from_toml(TREE).unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (ctx, tree) = contexts(dir.path());
        let dest = tree.dest.display().to_string();

        let (p, a) = command_line(&s.cases[0], &ctx, &tree);
        assert_eq!(p, PathBuf::from("/bin/xfer"));
        assert_eq!(
            a[..3],
            ["get", "https://10.77.0.1:8443/tree/", &format!("{dest}/")]
        );
        assert!(
            !a.iter().any(|x| x == "--protocol"),
            "default command: {a:?}"
        );
        let (_, a) = command_line(&s.cases[1], &ctx, &tree);
        let line = a.join(" ");
        assert!(
            line.contains("--protocol http2 -c 1 --tree-lanes 64"),
            "{line}"
        );
        let (p, a) = command_line(&s.cases[2], &ctx, &tree);
        assert_eq!(p, PathBuf::from("aria2c"));
        assert!(a.contains(&"-j32".to_string()) && a.contains(&"-x1".to_string()));
        let (p, a) = command_line(&s.cases[3], &ctx, &tree);
        assert_eq!(p, PathBuf::from("rclone"));
        assert_eq!(
            a.join(" "),
            format!(
                "copy --config /dev/null --transfers 32 --http-url https://10.77.0.1:8444/html/ --ca-cert /c/cert.pem :http: {dest}"
            )
        );

        tree.write_aria2c_input("10.77.0.1")
            .unwrap_or_else(|e| panic!("{e}"));
        let urls = std::fs::read_to_string(&tree.aria2c_input).unwrap_or_default();
        assert!(
            urls.starts_with(
                "https://10.77.0.1:8444/html/dir-00/file-00000.bin\n  out=dir-00/file-00000.bin\n"
            ),
            "{urls}"
        );

        // Nothing fetched: every file missing. All of it copied: good, goodput over wall time.
        let o = outcome(&s.cases[0], &tree, "", "", true, 2.0);
        assert!(o
            .error
            .is_some_and(|e| e.starts_with("5 of 5 files missing")));
        for e in &tree.entries {
            let to = tree.dest.join(&e.path);
            std::fs::create_dir_all(to.parent().unwrap_or(&tree.dest))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::copy(dir.path().join("src").join(&e.path), &to)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let o = outcome(&s.cases[3], &tree, "", "", true, 2.0);
        assert_eq!(o.error, None);
        assert_eq!(o.bytes, Some(tree.total_bytes()));
        assert_eq!(o.goodput_bps, Some(tree.total_bytes() as f64 * 4.0));
        let o = outcome(&s.cases[2], &tree, "", "errorCode=1 boom\n", false, 2.0);
        assert!(o
            .error
            .is_some_and(|e| e.contains("aria2c failed") && e.contains("boom")));
        // A short file fails the run.
        std::fs::write(tree.dest.join(&tree.entries[0].path), b"x")
            .unwrap_or_else(|e| panic!("{e}"));
        let o = outcome(&s.cases[3], &tree, "", "", true, 2.0);
        assert!(o.error.is_some_and(|e| e.starts_with("1 of 5")));
        tree.clear_dest();
        assert!(!tree.dest.exists());
    }
}
