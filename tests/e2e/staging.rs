//! Where a tree stages its files: names a dataset shares with xfer's part files and journals
//! come out as they are, a name listed twice is one entry or refused, and a link planted at
//! any staging name is never written through.

use std::collections::BTreeMap;
use std::path::Path;

use xfer::crates::common::listing::RelPath;
use xfer::tree::{
    staged_name, DestError, FailureKind, TreeDownload, TreeError, TreeJournalError, STAGING_DIR,
};
use xfer::{transport_for, ClientConfig};

use crate::support::{write_random_file, BoxError, Fixture, Proto, TestResult, MIB};
use crate::tree::{config, crafted_server, fetch, response, snapshot};

/// A tree whose names are those xfer once gave its own files: `x` beside `x.part` and
/// `x.xfer-journal`, `g` beside `g.xfer-journal`, in the root and below. Every file is several
/// chunks, so each has a part file and a journal while it is fetched.
fn build_confusable_tree(root: &Path) -> Result<u64, BoxError> {
    std::fs::create_dir_all(root.join("sub"))?;
    let names = [
        "x",
        "x.part",
        "x.xfer-journal",
        "g",
        "g.xfer-journal",
        "sub/x",
        "sub/x.part",
    ];
    for (i, name) in names.iter().enumerate() {
        write_random_file(&root.join(name), MIB + 1000 * i as u64 + 5, 40 + i as u64)?;
    }
    Ok(names.len() as u64)
}

/// The tree comes out identical, and a re-run skips every file because each is right, not
/// because another file's size and time matched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_like_staging_files_come_out_identical() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    let files = build_confusable_tree(&fx.root())?;
    let dest = fx.out().join("tree");

    let first = fetch(&fx, &dest, config()).await?;
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    assert_eq!(first.fetched, files, "{first:?}");
    assert_eq!(snapshot(&dest)?, snapshot(&fx.root())?);
    // Nothing staged is left, and only the tree journal stays.
    let staged: Vec<_> = std::fs::read_dir(dest.join(STAGING_DIR))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    assert_eq!(staged, ["tree-journal"]);

    let second = fetch(&fx, &dest, config()).await?;
    assert!(second.failed.is_empty(), "{:?}", second.failed);
    assert_eq!((second.skipped, second.fetched), (files, 0), "{second:?}");
    assert_eq!(snapshot(&dest)?, snapshot(&fx.root())?);
    fx.shutdown().await;
    Ok(())
}

/// A former destination served in its turn: xfer's server neither lists nor serves the staging
/// directory in it, so the next client fetches the files and nothing half-done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_destination_hides_its_staging() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    write_random_file(&fx.root().join("a"), MIB + 7, 60)?;
    std::fs::create_dir_all(fx.root().join(STAGING_DIR))?;
    write_random_file(&fx.root().join(STAGING_DIR).join("0123.part"), 1000, 61)?;
    let dest = fx.out().join("again");
    let report = fetch(&fx, &dest, config()).await?;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.fetched, 1, "{report:?}");
    assert_eq!(
        std::fs::read(dest.join("a"))?,
        std::fs::read(fx.root().join("a"))?
    );
    assert!(!dest.join(STAGING_DIR).join("0123.part").exists());
    fx.shutdown().await;
    Ok(())
}

/// A listing that names the same file twice alike fetches it once; twice with different
/// sizes is refused by name, and the run fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_listed_twice_is_one_entry_or_refused() -> TestResult {
    let listing = serde_json::json!([
        {"name": "same", "type": "file", "size": 3},
        {"name": "differ", "type": "file", "size": 3},
        {"name": "same", "type": "file", "size": 3},
        {"name": "differ", "type": "file", "size": 4},
    ])
    .to_string();
    let (url, server) = crafted_server(move |head| {
        let line = String::from_utf8_lossy(head);
        let target = line.split(' ').nth(1).unwrap_or("");
        let path = target.split('?').next().unwrap_or("");
        // A HEAD is answered with the GET's head, no body.
        let head_only = |full: String| match full.find("\r\n\r\n") {
            Some(end) if line.starts_with("HEAD ") => full[..end + 4].to_string(),
            _ => full,
        };
        let is_read = line.starts_with("GET ") || line.starts_with("HEAD ");
        head_only(match (is_read, path) {
            (true, "/run/") => response("200 OK", "application/json", &listing),
            (true, "/run/same") => response("200 OK", "application/octet-stream", "abc"),
            (true, "/run/differ") => response("200 OK", "application/octet-stream", "xyz"),
            _ => response("404 Not Found", "text/plain", ""),
        })
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("dest");
    let transport = transport_for(&url, &ClientConfig::default())?;
    let report = TreeDownload::new(transport, url, &dest, config())
        .run()
        .await?;
    server.abort();
    assert_eq!(
        std::fs::read(dest.join("same")).ok().as_deref(),
        Some(&b"abc"[..]),
        "{report:?}"
    );
    // One download each for `same` and `differ`'s first entry.
    assert_eq!((report.files, report.fetched), (2, 2), "{report:?}");
    let failed: BTreeMap<&str, (&str, FailureKind)> = report
        .failed
        .iter()
        .map(|f| (f.path.as_str(), (f.error.as_str(), f.kind)))
        .collect();
    assert_eq!(report.failed.len(), 1, "{:?}", report.failed);
    let (error, kind) = failed.get("differ").ok_or("`differ` was not refused")?;
    assert!(error.contains("listed twice"), "{error}");
    assert_eq!(*kind, FailureKind::Remote);
    Ok(())
}

fn plant(link: &Path, target: &Path) -> Result<(), BoxError> {
    std::fs::write(target, b"precious")?;
    std::os::unix::fs::symlink(target, link)?;
    Ok(())
}

fn assert_untouched(link: &Path, target: &Path) -> TestResult {
    assert_eq!(std::fs::read(target)?, b"precious", "{target:?} written");
    assert!(
        std::fs::symlink_metadata(link)?.file_type().is_symlink(),
        "{link:?} replaced"
    );
    Ok(())
}

/// Links at a file's part file and journal fail that file alone; a link for the staging
/// directory or the tree journal stops the run before anything is fetched; a linked parent
/// directory is never taken for a complete file. No link's target is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn links_at_staging_names_are_never_written_through() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    let root = fx.root();
    build_confusable_tree(&root)?;
    std::fs::write(root.join("sub/inside.txt"), b"inside")?;
    let outside = fx.out().join("outside");
    std::fs::create_dir_all(&outside)?;

    // A file's part file and another's journal.
    let dest = fx.out().join("files");
    let staging = dest.join(STAGING_DIR);
    std::fs::create_dir_all(&staging)?;
    let part = staging.join(format!("{}.part", staged_name(&RelPath::parse("x")?)));
    let journal = staging.join(format!(
        "{}.xfer-journal",
        staged_name(&RelPath::parse("g")?)
    ));
    plant(&part, &outside.join("part-target"))?;
    plant(&journal, &outside.join("journal-target"))?;
    let report = fetch(&fx, &dest, config()).await?;
    let failed: BTreeMap<&str, FailureKind> = report
        .failed
        .iter()
        .map(|f| (f.path.as_str(), f.kind))
        .collect();
    assert_eq!(
        failed,
        BTreeMap::from([("x", FailureKind::Local), ("g", FailureKind::Local)]),
        "{:?}",
        report.failed
    );
    assert!(
        report
            .failed
            .iter()
            .all(|f| f.error.contains("symbolic link")),
        "{:?}",
        report.failed
    );
    assert_untouched(&part, &outside.join("part-target"))?;
    assert_untouched(&journal, &outside.join("journal-target"))?;
    assert!(!dest.join("x").exists() && !dest.join("g").exists());
    assert_eq!(
        std::fs::read(dest.join("x.part"))?,
        std::fs::read(root.join("x.part"))?
    );

    // The staging directory itself.
    let dest = fx.out().join("dir-link");
    std::fs::create_dir_all(&dest)?;
    let elsewhere = outside.join("elsewhere");
    std::fs::create_dir_all(&elsewhere)?;
    std::os::unix::fs::symlink(&elsewhere, dest.join(STAGING_DIR))?;
    match fetch(&fx, &dest, config()).await {
        Err(e) => match e.downcast_ref::<TreeError>() {
            Some(TreeError::Dest(DestError::Symlink { .. })) => {}
            _ => return Err(format!("unexpected error: {e}").into()),
        },
        Ok(r) => return Err(format!("ran through a linked staging directory: {r:?}").into()),
    }
    assert_eq!(std::fs::read_dir(&elsewhere)?.count(), 0);

    // The tree journal.
    let dest = fx.out().join("journal-link");
    std::fs::create_dir_all(dest.join(STAGING_DIR))?;
    let tree_journal = dest.join(STAGING_DIR).join("tree-journal");
    plant(&tree_journal, &outside.join("tree-journal-target"))?;
    match fetch(&fx, &dest, config()).await {
        Err(e) => match e.downcast_ref::<TreeError>() {
            Some(TreeError::Journal(TreeJournalError::Symlink { .. })) => {}
            _ => return Err(format!("unexpected error: {e}").into()),
        },
        Ok(r) => return Err(format!("ran with a linked tree journal: {r:?}").into()),
    }
    assert_untouched(&tree_journal, &outside.join("tree-journal-target"))?;

    // A parent directory that is a link to a copy of the file, same size and time: not
    // complete, refused.
    let dest = fx.out().join("parent-link");
    std::fs::create_dir_all(&dest)?;
    let copy = outside.join("copy");
    std::fs::create_dir_all(&copy)?;
    std::fs::copy(root.join("sub/inside.txt"), copy.join("inside.txt"))?;
    let mtime = std::fs::metadata(root.join("sub/inside.txt"))?.modified()?;
    std::fs::File::options()
        .write(true)
        .open(copy.join("inside.txt"))?
        .set_modified(mtime)?;
    std::os::unix::fs::symlink(&copy, dest.join("sub"))?;
    let report = fetch(&fx, &dest, config()).await?;
    assert_eq!(report.skipped, 0, "{report:?}");
    assert!(
        report.failed.iter().any(|f| f.path == "sub/inside.txt"),
        "{:?}",
        report.failed
    );
    assert_eq!(std::fs::read_dir(&copy)?.count(), 1);
    fx.shutdown().await;
    Ok(())
}

/// A destination fetched before the tree journal moved inside it: the journal beside it is
/// moved in, and the re-run skips every file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_journal_beside_the_destination_is_moved_in() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    let files = build_confusable_tree(&fx.root())?;
    let dest = fx.out().join("tree");
    let first = fetch(&fx, &dest, config()).await?;
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    let legacy = fx.out().join("tree.xfer-tree-journal");
    std::fs::rename(dest.join(STAGING_DIR).join("tree-journal"), &legacy)?;
    std::fs::remove_dir(dest.join(STAGING_DIR))?;

    let second = fetch(&fx, &dest, config()).await?;
    assert!(second.failed.is_empty(), "{:?}", second.failed);
    assert_eq!(second.skipped, files, "{second:?}");
    assert!(!legacy.exists(), "the old journal stayed beside");
    let journal = std::fs::read_to_string(dest.join(STAGING_DIR).join("tree-journal"))?;
    assert_eq!(journal.lines().count(), 1 + files as usize, "{journal}");
    fx.shutdown().await;
    Ok(())
}
