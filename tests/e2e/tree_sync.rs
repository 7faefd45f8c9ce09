//! Sync semantics of tree fetches, through the `xfer` binary against nginx's HTML autoindex
//! and through the library against xfer's own server: `--compare size|mtime|checksum`,
//! `--delete` (and a failed, partial or capped listing deleting nothing), `--dry-run`
//! changing nothing, and `--keep-going` past a file the server refuses (exit 7).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use xfer::tree::{Compare, TreeConfig};

use crate::interop::{nginx, start_nginx, Nginx};
use crate::support::{
    json_report, run_xfer, u64_field, write_random_file, BoxError, Fixture, Proto, TestResult,
};
use crate::tree::{config, fetch, snapshot};

/// The served tree: `run/` under nginx's root, with three files and a subdirectory.
fn served_tree(www: &Path) -> Result<(), BoxError> {
    let run = www.join("run");
    std::fs::create_dir_all(run.join("sub"))?;
    write_random_file(&run.join("same-size.bin"), 20_000, 1)?;
    write_random_file(&run.join("grows.bin"), 30_000, 2)?;
    write_random_file(&run.join("sub/kept.bin"), 40_000, 3)?;
    Ok(())
}

/// nginx with its default HTML autoindex and `extra` directives.
fn serve(dir: &Path, extra: &str) -> Result<Option<(Nginx, String)>, BoxError> {
    let Some(bin) = nginx() else {
        return Ok(None);
    };
    served_tree(&dir.join("www"))?;
    let server = start_nginx(&bin, dir, &format!("autoindex on; {extra}"))?;
    let url = format!("http://{}/run/", server.addr);
    Ok(Some((server, url)))
}

/// `xfer get URL DEST --json extra...`: exit code, report and stderr.
pub(crate) async fn get(
    url: &str,
    dest: &Path,
    extra: &[&str],
) -> Result<(i32, serde_json::Value, String), BoxError> {
    let mut args = vec![
        "get".to_string(),
        url.to_string(),
        dest.display().to_string(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = run_xfer(args).await?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = json_report(&out)?;
    Ok((out.status.code().unwrap_or(-1), report, stderr))
}

/// Rewrite `path` with other bytes of the same length; its mtime set to `mtime`.
fn rewrite_same_size(path: &Path, mtime: SystemTime) -> Result<(), BoxError> {
    let mut bytes = std::fs::read(path)?;
    for b in bytes.iter_mut().take(100) {
        *b ^= 0x5a;
    }
    std::fs::write(path, &bytes)?;
    std::fs::File::options()
        .write(true)
        .open(path)?
        .set_modified(mtime)?;
    Ok(())
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_size_then_mtime_then_checksum_without_server_digests() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((_server, url)) = serve(dir.path(), "")? else {
        return Ok(());
    };
    let run = dir.path().join("www/run");
    let dest = dir.path().join("got");
    let (code, first, _) = get(&url, &dest, &[]).await?;
    assert_eq!((code, u64_field(&first, "fetched")?), (0, 3), "{first}");

    // Same size, another minute (nginx's page shows minutes): only mtime sees it. Longer: all.
    let elsewhere = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    rewrite_same_size(&run.join("same-size.bin"), elsewhere)?;
    write_random_file(&run.join("grows.bin"), 31_000, 2)?;

    let (code, by_size, _) = get(&url, &dest, &["--compare", "size"]).await?;
    assert_eq!(code, 0, "{by_size}");
    assert_eq!(by_size["compare"], "size");
    assert_eq!(
        (
            u64_field(&by_size, "fetched")?,
            u64_field(&by_size, "skipped")?
        ),
        (1, 2),
        "{by_size}"
    );
    assert_ne!(
        std::fs::read(dest.join("same-size.bin"))?,
        std::fs::read(run.join("same-size.bin"))?,
        "size alone cannot see a same-size change"
    );

    let (code, by_mtime, _) = get(&url, &dest, &["--compare", "mtime"]).await?;
    assert_eq!(code, 0, "{by_mtime}");
    assert_eq!(
        (
            u64_field(&by_mtime, "fetched")?,
            u64_field(&by_mtime, "skipped")?
        ),
        (1, 2),
        "{by_mtime}"
    );
    assert_eq!(
        std::fs::read(dest.join("same-size.bin"))?,
        std::fs::read(run.join("same-size.bin"))?
    );

    // nginx sends no digest: every file is fetched, and the run says it could not compare.
    let (code, by_sum, stderr) = get(&url, &dest, &["--compare", "checksum"]).await?;
    assert_eq!(code, 0, "{by_sum}");
    assert_eq!(u64_field(&by_sum, "fetched")?, 3, "{by_sum}");
    assert_eq!(strings(&by_sum["not_compared"]).len(), 3, "{by_sum}");
    assert!(
        stderr.contains("could not be compared by checksum"),
        "{stderr}"
    );
    Ok(())
}

/// Against xfer's server, which answers `Want-Digest`: a copy damaged in place (same size and
/// mtime) is skipped by size and mtime and found by checksum; nothing is "not compared".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_checksum_asks_the_server_for_its_digest() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    for i in 0..3u64 {
        write_random_file(&fx.root().join(format!("f{i}.bin")), 12_000 + i, 10 + i)?;
    }
    let dest = fx.out().join("tree");
    assert_eq!(fetch(&fx, &dest, config()).await?.fetched, 3);
    let damaged = dest.join("f1.bin");
    let mtime = std::fs::metadata(&damaged)?.modified()?;
    rewrite_same_size(&damaged, mtime)?;
    for compare in [Compare::Size, Compare::Mtime] {
        let r = fetch(
            &fx,
            &dest,
            TreeConfig {
                compare,
                ..config()
            },
        )
        .await?;
        assert_eq!((r.fetched, r.skipped), (0, 3), "{compare:?}: {r:?}");
    }
    let r = fetch(
        &fx,
        &dest,
        TreeConfig {
            compare: Compare::Checksum,
            ..config()
        },
    )
    .await?;
    assert!(r.failed.is_empty() && r.not_compared.is_empty(), "{r:?}");
    assert_eq!((r.fetched, r.skipped), (1, 2), "{r:?}");
    assert_eq!(
        std::fs::read(&damaged)?,
        std::fs::read(fx.root().join("f1.bin"))?
    );
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_what_the_listing_no_longer_names_and_nothing_else() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((_server, url)) = serve(dir.path(), "")? else {
        return Ok(());
    };
    let run = dir.path().join("www/run");
    let dest = dir.path().join("got");
    get(&url, &dest, &[]).await?;
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside)?;
    std::fs::write(outside.join("precious"), b"not the tree's")?;
    std::fs::remove_file(run.join("grows.bin"))?;
    std::fs::create_dir_all(dest.join("local-only/deeper"))?;
    std::fs::write(dest.join("local-only/deeper/x"), b"x")?;
    std::fs::write(dest.join("sub/stale.bin"), b"stale")?;
    std::fs::write(
        dest.join("notes.keep"),
        b"excluded: not the listing's to judge",
    )?;
    std::os::unix::fs::symlink(&outside, dest.join("link-out"))?;

    // Without --delete nothing goes.
    let (code, plain, _) = get(&url, &dest, &[]).await?;
    assert_eq!(code, 0, "{plain}");
    assert!(dest.join("grows.bin").exists() && dest.join("sub/stale.bin").exists());

    let (code, report, _) = get(&url, &dest, &["--delete", "--exclude", "*.keep"]).await?;
    assert_eq!(code, 0, "{report}");
    let mut deleted = strings(&report["deleted"]);
    deleted.sort();
    assert_eq!(
        deleted,
        [
            "grows.bin",
            "link-out",
            "local-only",
            "local-only/deeper",
            "local-only/deeper/x",
            "sub/stale.bin"
        ],
        "{report}"
    );
    assert!(dest.join("notes.keep").exists());
    assert!(dest.join("sub/kept.bin").exists() && dest.join("same-size.bin").exists());
    assert!(
        outside.join("precious").exists(),
        "a link's target is not the tree's"
    );
    assert!(
        dest.join(".xfer-staging").exists(),
        "the staging directory stays"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_after_a_failed_or_partial_listing_deletes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    // The subdirectory's index is refused: the listing is partial.
    let Some((server, url)) = serve(dir.path(), "location /run/sub/ { return 403; }")? else {
        return Ok(());
    };
    let dest = dir.path().join("got");
    std::fs::create_dir_all(dest.join("sub"))?;
    std::fs::write(dest.join("sub/kept.bin"), b"the listing could not say")?;
    std::fs::write(dest.join("gone.bin"), b"unlisted")?;
    let before = snapshot(&dest)?;

    let (code, partial, stderr) = get(&url, &dest, &["--delete"]).await?;
    assert_eq!(code, 3, "{partial}");
    assert!(strings(&partial["deleted"]).is_empty(), "{partial}");
    assert!(
        partial["delete_skipped"]
            .as_str()
            .is_some_and(|s| s.contains("did not complete")),
        "{partial}"
    );
    assert!(stderr.contains("--delete removed nothing"), "{stderr}");
    assert!(dest.join("gone.bin").exists() && dest.join("sub/kept.bin").exists());

    // A capped listing is not a complete one either.
    let (_, capped, _) = get(&url, &dest, &["--delete", "--max-listing-entries", "1"]).await?;
    assert!(strings(&capped["deleted"]).is_empty(), "{capped}");
    assert!(dest.join("gone.bin").exists());

    // No server at all.
    drop(server);
    let (code, failed, _) = get(&url, &dest, &["--delete"]).await?;
    assert_eq!(code, 3, "{failed}");
    assert!(strings(&failed["deleted"]).is_empty(), "{failed}");
    assert_eq!(
        snapshot(&dest)?.keys().collect::<Vec<_>>(),
        before
            .keys()
            .chain(["grows.bin".to_string(), "same-size.bin".to_string()].iter())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>(),
        "only the two files of the partial run were added"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_the_plan_and_changes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((_server, url)) = serve(dir.path(), "")? else {
        return Ok(());
    };
    let run = dir.path().join("www/run");

    // Into a destination that does not exist: all to fetch, and it is not created.
    let missing = dir.path().join("missing");
    let (code, plan, _) = get(&url, &missing, &["--dry-run"]).await?;
    assert_eq!(code, 0, "{plan}");
    assert!(!missing.exists(), "a dry run created the destination");
    assert_eq!(plan["plan"].as_array().map(Vec::len), Some(3), "{plan}");

    let dest = dir.path().join("got");
    get(&url, &dest, &[]).await?;
    write_random_file(&run.join("grows.bin"), 31_000, 2)?;
    std::fs::write(dest.join("local-only"), b"x")?;
    std::fs::remove_dir_all(dest.join(".xfer-staging"))?;
    let before: BTreeMap<_, _> = snapshot(&dest)?;

    let (code, report, _) = get(&url, &dest, &["--dry-run", "--delete"]).await?;
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["dry_run"], true);
    let mut plan: Vec<(String, String)> = report["plan"]
        .as_array()
        .ok_or("no plan")?
        .iter()
        .map(|p| {
            (
                p["action"].as_str().unwrap_or_default().to_string(),
                p["path"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    plan.sort();
    let want: Vec<(String, String)> = [
        ("delete", "local-only"),
        ("fetch", "grows.bin"),
        ("skip", "same-size.bin"),
        ("skip", "sub/kept.bin"),
    ]
    .iter()
    .map(|(a, p)| (a.to_string(), p.to_string()))
    .collect();
    assert_eq!(plan, want, "{report}");
    assert!(report["plan"]
        .as_array()
        .ok_or("no plan")?
        .iter()
        .all(|p| p["reason"].as_str().is_some_and(|r| !r.is_empty())));
    assert_eq!(
        snapshot(&dest)?,
        before,
        "a dry run changed the destination"
    );
    assert!(!dest.join(".xfer-staging").exists());

    // Without --json the plan is printed one line per path.
    let out = run_xfer(vec![
        "get".into(),
        url.clone(),
        dest.display().to_string(),
        "--dry-run".into(),
        "--delete".into(),
        "--quiet".into(),
    ])
    .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("fetch\tgrows.bin\t"))
            && text.lines().any(|l| l.starts_with("delete\tlocal-only\t")),
        "{text}"
    );
    assert_eq!(snapshot(&dest)?, before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_going_finishes_the_rest_and_exits_7_with_the_failures() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((_server, url)) = serve(dir.path(), "location = /run/refused.bin { return 403; }")?
    else {
        return Ok(());
    };
    write_random_file(&dir.path().join("www/run/refused.bin"), 5_000, 9)?;
    let (code, report, stderr) = get(&url, &dir.path().join("got"), &["--keep-going"]).await?;
    assert_eq!(code, 7, "{report}\n{stderr}");
    assert_eq!(report["status"], "partial");
    assert_eq!(u64_field(&report, "fetched")?, 3, "{report}");
    let failed = report["failed"].as_array().ok_or("no failed list")?;
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0]["path"], "refused.bin");
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("403")),
        "{report}"
    );
    assert!(
        stderr.contains("1 paths failed:") && stderr.contains("failed: refused.bin"),
        "{stderr}"
    );

    // Without it the same run is a remote failure, exit 3.
    let (code, _, _) = get(&url, &dir.path().join("again"), &[]).await?;
    assert_eq!(code, 3);

    // A listing that fails as a whole leaves nothing known in place: 3 even with it.
    let missing = format!("{url}no-such-dir/");
    let (code, report, _) = get(&missing, &dir.path().join("none"), &["--keep-going"]).await?;
    assert_eq!(code, 3, "{report}");
    Ok(())
}
