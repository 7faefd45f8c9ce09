//! Trees listed from HTML index pages: `xfer get URL/ DEST/` from nginx's default autoindex,
//! `python3 -m http.server`, `rclone serve http` and an Apache "fancy" index served from a
//! fixture, each identical to the source; then hostile pages from a loopback server — names
//! that escape, a page that never ends, one nested without end, a redirect back to a listed
//! directory, and nginx following a symlinked directory into itself — each refused with a
//! message naming the page.
//!
//! nginx, Python and rclone come from Debian (`nginx-light`, `python3`, `rclone`). When
//! missing, the tests print why and skip, except under `CI=true`, where they fail.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::interop::{nginx, nginx_with_tree, start_child, start_nginx};
use crate::listing_limits::{listing_server, not_found, whole, Answer};
use crate::support::{require_program, BoxError, TestResult};

/// `xfer get URL/ DEST/`: listed from the HTML index, every file fetched and equal to the
/// source; a second run fetches nothing.
async fn get_and_compare(url: &str, dest: &Path, served: &Path, files: u64) -> TestResult {
    crate::interop::get_tree_and_check(url, dest, served, "html_index", files, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_from_nginx_default_autoindex() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((_server, url, files)) = nginx_with_tree(dir.path(), "autoindex on;")? else {
        return Ok(());
    };
    let served = dir.path().join("www/run");
    get_and_compare(&url, &dir.path().join("got"), &served, files).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_from_python_http_server() -> TestResult {
    let Some(python) = require_program("python3", &["/usr/bin/python3"], "python3") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let served = dir.path().join("served");
    std::fs::create_dir_all(&served)?;
    let files = crate::tree::build_tree(&served)?;
    let (_server, addr) = start_child("python3 -m http.server", |addr| {
        let mut c = Command::new(&python);
        c.args(["-m", "http.server", "--bind", "127.0.0.1"])
            .arg(addr.port().to_string())
            .current_dir(&served);
        c
    })?;
    let url = format!("http://{addr}/");
    get_and_compare(&url, &dir.path().join("got"), &served, files).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_from_rclone_serve_http() -> TestResult {
    crate::interop::get_tree_from_rclone("http", "html_index", false).await
}

/// The page Apache 2.4's `mod_autoindex` writes with `IndexOptions FancyIndexing HTMLTable`
/// (sort links, icons, a parent link by absolute path, rounded sizes, the server's address
/// line), for the directory `title` holding `rows` (name, is_dir).
fn apache_page(title: &str, rows: &[(&str, bool)]) -> String {
    let mut page = format!(
        "<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 3.2 Final//EN\">\n<html>\n <head>\n  <title>Index of {title}</title>\n </head>\n <body>\n<h1>Index of {title}</h1>\n  <table>\n   <tr><th valign=\"top\"><img src=\"/icons/blank.gif\" alt=\"[ICO]\"></th><th><a href=\"?C=N;O=D\">Name</a></th><th><a href=\"?C=M;O=A\">Last modified</a></th><th><a href=\"?C=S;O=A\">Size</a></th><th><a href=\"?C=D;O=A\">Description</a></th></tr>\n   <tr><th colspan=\"5\"><hr></th></tr>\n<tr><td valign=\"top\"><img src=\"/icons/back.gif\" alt=\"[PARENTDIR]\"></td><td><a href=\"/\">Parent Directory</a></td><td>&nbsp;</td><td align=\"right\">  - </td><td>&nbsp;</td></tr>\n"
    );
    for (name, is_dir) in rows {
        let (icon, href, size) = if *is_dir {
            ("folder.gif", format!("{name}/"), "  - ".to_string())
        } else {
            ("unknown.gif", name.to_string(), "1.2K".to_string())
        };
        let href = href.replace(' ', "%20");
        page.push_str(&format!(
            "<tr><td valign=\"top\"><img src=\"/icons/{icon}\" alt=\"[   ]\"></td><td><a href=\"{href}\">{name}</a></td><td align=\"right\">2026-11-28 09:14  </td><td align=\"right\">{size}</td><td>&nbsp;</td></tr>\n"
        ));
    }
    page.push_str("   <tr><th colspan=\"5\"><hr></th></tr>\n</table>\n<address>Apache/2.4.62 (Debian) Server at 127.0.0.1 Port 80</address>\n</body></html>\n");
    page
}

/// A file's answer: HEAD gets the head alone.
fn file_answer(method: &str, body: &str) -> Answer {
    if method == "HEAD" {
        return Answer::Whole(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nlast-modified: Sat, 28 Nov 2026 09:14:00 GMT\r\n\r\n",
            body.len()
        ));
    }
    Answer::Whole(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nlast-modified: Sat, 28 Nov 2026 09:14:00 GMT\r\n\r\n{body}",
        body.len()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_from_an_apache_fancy_index() -> TestResult {
    let dir = tempfile::tempdir()?;
    let served = dir.path().join("served");
    let files: [(&str, String); 3] = [
        ("read me.txt", "hello from apache\n".repeat(70)),
        ("data/run-1.csv", "t,v\n1,2\n".repeat(300)),
        ("data/nested/x.json", "{\"k\": 1}\n".to_string()),
    ];
    for (name, body) in &files {
        let path = served.join(name);
        std::fs::create_dir_all(path.parent().ok_or("no parent")?)?;
        std::fs::write(path, body)?;
    }
    let bodies: BTreeMap<String, String> = files
        .iter()
        .map(|(n, b)| (format!("/run/{}", n.replace(' ', "%20")), b.clone()))
        .collect();
    let (url, task) = listing_server(move |method, path| match path {
        "/run/" if method == "GET" => whole(
            "200 OK",
            "text/html;charset=UTF-8",
            &apache_page("/run", &[("data", true), ("read me.txt", false)]),
        ),
        "/run/data/" if method == "GET" => whole(
            "200 OK",
            "text/html;charset=UTF-8",
            &apache_page("/run/data", &[("nested", true), ("run-1.csv", false)]),
        ),
        "/run/data/nested/" if method == "GET" => whole(
            "200 OK",
            "text/html;charset=UTF-8",
            &apache_page("/run/data/nested", &[("x.json", false)]),
        ),
        p if p.contains('?') || method == "PROPFIND" => {
            whole("405 Method Not Allowed", "text/plain", "")
        }
        p => match bodies.get(p) {
            Some(body) => file_answer(method, body),
            None => not_found(),
        },
    })
    .await?;
    let result = get_and_compare(&url, &dir.path().join("got"), &served, 3).await;
    task.abort();
    result
}

/// `xfer get URL/ DEST/ --json` against a page expected to be refused: the report's failure
/// for `path` and the exit code.
async fn refused(url: &str, dest: &Path, extra: &[&str]) -> Result<(i32, String), BoxError> {
    let (code, report, _) = crate::tree_sync::get(url, dest, extra).await?;
    let errors: Vec<String> = report["failed"]
        .as_array()
        .ok_or("no failed list")?
        .iter()
        .map(|f| format!("{}: {}", f["path"], f["error"]))
        .collect();
    assert!(!errors.is_empty(), "nothing refused: {report}");
    Ok((code, errors.join("\n")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pages_are_refused_naming_the_page() -> TestResult {
    let (url, task) = listing_server(|method, path| {
        let page = |body: &str| whole("200 OK", "text/html", body);
        match (method, path) {
            (_, p) if p.contains('?') => whole("404 Not Found", "text/plain", ""),
            ("PROPFIND", _) => whole("405 Method Not Allowed", "text/plain", ""),
            ("GET", "/run/escape/") => page(
                "<a href=\"ok.txt\">ok</a><a href=\"%2e%2e/\">up</a><a href=\"%2e%2e%2fetc%2fpasswd\">x</a>",
            ),
            ("GET", "/run/nul/") => page("<a href=\"a%00b\">nul</a>"),
            ("GET", "/run/endless/") => Answer::Drip {
                content_type: "text/html",
                first: "<html><body><pre>".into(),
                each: |i| format!("<a href=\"f{i}\">f{i}</a> 28-Nov-2026 16:00 1\n"),
                every: Duration::from_millis(2),
            },
            ("GET", "/run/huge/") => Answer::Huge {
                content_type: "text/html",
                status: "200 OK",
                prefix: "<html><body><a href=\"f\">".into(),
                fill: b'x',
                len: 400 * 1024 * 1024,
                suffix: "</a></body></html>".into(),
            },
            // Every level links one more level down, for ever.
            ("GET", p) if p.starts_with("/run/deep/") => page("<a href=\"d/\">d/</a>"),
            ("GET", "/run/loop/") => page("<a href=\"back/\">back/</a>"),
            ("GET", "/run/loop/back/") => Answer::Whole(
                "HTTP/1.1 301 Moved Permanently\r\nlocation: /run/loop/\r\ncontent-length: 0\r\n\r\n"
                    .into(),
            ),
            ("HEAD" | "GET", "/run/escape/ok.txt") => file_answer(method, "fine\n"),
            _ => not_found(),
        }
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = |n: &str| dir.path().join(n);

    let (code, errors) = refused(&format!("{url}escape/"), &dest("escape"), &[]).await?;
    assert_eq!(code, 3, "{errors}");
    assert!(
        errors.contains(&format!("{url}escape/")) && errors.contains("`.` or `..`"),
        "{errors}"
    );
    assert!(!dir.path().join("etc").exists());

    let (code, errors) = refused(&format!("{url}nul/"), &dest("nul"), &[]).await?;
    assert_eq!(code, 3);
    assert!(errors.contains("NUL in a name"), "{errors}");

    let (code, errors) = refused(
        &format!("{url}endless/"),
        &dest("endless"),
        &["--listing-timeout", "2s", "--max-listing-entries", "200000"],
    )
    .await?;
    assert_eq!(code, 3);
    assert!(
        errors.contains(&format!("{url}endless/")) && errors.contains("--listing-timeout"),
        "{errors}"
    );

    let (code, errors) = refused(&format!("{url}huge/"), &dest("huge"), &[]).await?;
    assert_eq!(code, 3);
    assert!(
        errors.contains(&format!("{url}huge/")) && errors.contains("longer than 65536 bytes"),
        "{errors}"
    );

    let (code, errors) = refused(
        &format!("{url}deep/"),
        &dest("deep"),
        &["--max-listing-depth", "6"],
    )
    .await?;
    assert_eq!(code, 3);
    assert!(errors.contains("6 levels deep"), "{errors}");

    let (code, errors) = refused(&format!("{url}loop/"), &dest("loop"), &[]).await?;
    assert_eq!(code, 3);
    assert!(
        errors.contains("already listed") && errors.contains(&format!("{url}loop/")),
        "{errors}"
    );
    task.abort();
    Ok(())
}

/// nginx follows a symbolic link to a directory: `loop -> .` makes `loop/loop/loop/...`
/// an index without end. The depth bound ends it, and the files are fetched only down to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_directory_loop_in_nginx_stops_at_the_depth_bound() -> TestResult {
    let Some(bin) = nginx() else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let run = dir.path().join("www/run");
    std::fs::create_dir_all(&run)?;
    std::fs::write(run.join("f.txt"), b"one file\n")?;
    std::os::unix::fs::symlink(".", run.join("loop"))?;
    let server = start_nginx(&bin, dir.path(), "autoindex on;")?;
    let url = format!("http://{}/run/", server.addr);
    let dest = dir.path().join("got");
    let (code, errors) = refused(&url, &dest, &["--max-listing-depth", "4"]).await?;
    assert_eq!(code, 3);
    assert!(errors.contains("4 levels deep"), "{errors}");
    assert!(dest.join("loop/loop/loop/f.txt").is_file());
    assert!(!dest.join("loop/loop/loop/loop/loop").exists());
    Ok(())
}
