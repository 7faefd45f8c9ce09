//! Listings decided by the core, without sockets: WebDAV `PROPFIND` and `OPTIONS`, the HTML
//! index and its redirect, and the manifest, each read back with the project's own readers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use xfer_common::listing::manifest::{read_manifest, MANIFEST_MEDIA_TYPE};
use xfer_common::listing::propfind::read_multistatus;
use xfer_common::listing::{EntryKind, ListingEntry};
use xfer_common::Resource;
use xfer_core::Sha256Digest;
use xfer_service::{
    status, Body, Method, Request, ResponsePlan, Service, ServiceConfig, CONTENT_TYPE_HTML,
    CONTENT_TYPE_XML, MAX_HTML_ENTRIES,
};

fn peer() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9))
}

/// Names a tree transfer has to get right, with their contents (`None`: a directory).
const TREE: &[(&str, Option<&[u8]>)] = &[
    ("f.bin", Some(b"0123456789")),
    ("empty file", Some(b"")),
    ("100% done.txt", Some(b"pct")),
    ("ünïcødé ☃.txt", Some(b"snow")),
    ("<a&b>.txt", Some(b"amp")),
    ("empty dir", None),
    ("sub", None),
    ("sub/deeper", None),
    ("sub/deeper/x y.bin", Some(b"xy")),
];

struct Fixture {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    svc: Service,
}

fn fixture(repr_digest: bool) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("root")).expect("mkdir");
    let root = dir.path().join("root").canonicalize().expect("canonical");
    for (name, content) in TREE {
        let p = root.join(name);
        match content {
            Some(c) => std::fs::write(&p, c).expect("write"),
            None => std::fs::create_dir_all(&p).expect("mkdir"),
        }
    }
    let mut cfg = ServiceConfig::new(root.clone());
    cfg.repr_digest = repr_digest;
    Fixture {
        _dir: dir,
        root,
        svc: Service::new(cfg),
    }
}

fn req(method: Method, path: &str) -> Request {
    Request::new(method, "", peer(), "test").with_target(path)
}

fn propfind(path: &str, depth: Option<&str>) -> Request {
    let mut r = req(Method::Propfind, path);
    r.depth = depth.map(str::to_string);
    r
}

async fn body_of(plan: ResponsePlan) -> Vec<u8> {
    match plan.body {
        Body::Empty => Vec::new(),
        Body::Message(m) => m.to_vec(),
        Body::Listing(mut l) => {
            let mut out = Vec::new();
            while let Some(chunk) = l.next().await {
                out.extend_from_slice(&chunk.expect("listing chunk"));
            }
            out
        }
        Body::Stream(_) => panic!("a listing answered with file bytes"),
    }
}

async fn text_of(plan: ResponsePlan) -> String {
    String::from_utf8(body_of(plan).await).expect("utf-8 listing")
}

fn read_dav(body: &str, base: &str) -> BTreeMap<String, ListingEntry> {
    let mut out = BTreeMap::new();
    read_multistatus(body.as_bytes(), base, |e| {
        out.insert(e.path.as_str().to_string(), e);
        Ok(())
    })
    .expect("multistatus reads back");
    out
}

fn read_tree(body: &[u8]) -> BTreeMap<String, ListingEntry> {
    let mut out = BTreeMap::new();
    read_manifest(body, |e| {
        out.insert(e.path.as_str().to_string(), e);
        Ok(())
    })
    .expect("manifest reads back");
    out
}

fn etag_of(root: &std::path::Path, encoded_path: &str) -> String {
    Resource::open(root, encoded_path, None)
        .expect("open")
        .etag()
        .to_string()
}

#[tokio::test]
async fn propfind_depth_1_lists_members_with_get_validators() {
    let fx = fixture(false);
    let plan = fx.svc.respond(&propfind("/", Some("1"))).await;
    assert_eq!(plan.status, status::MULTI_STATUS);
    assert_eq!(plan.content_type, CONTENT_TYPE_XML);
    assert_eq!(plan.content_length, None);
    let body = text_of(plan).await;
    let members = read_dav(&body, "/");
    let names: Vec<&str> = members.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "100% done.txt",
            "<a&b>.txt",
            "empty dir",
            "empty file",
            "f.bin",
            "sub",
            "ünïcødé ☃.txt"
        ]
    );
    let f = &members["f.bin"];
    assert_eq!(f.kind, EntryKind::File);
    assert_eq!(f.size, Some(10));
    assert_eq!(
        f.etag.as_deref(),
        Some(etag_of(&fx.root, "/f.bin").as_str())
    );
    let meta = std::fs::metadata(fx.root.join("f.bin")).expect("stat");
    let whole_seconds = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    };
    assert_eq!(
        f.modified.map(whole_seconds),
        Some(whole_seconds(meta.modified().expect("mtime")))
    );
    assert_eq!(members["empty file"].size, Some(0));
    assert!(members["empty dir"].is_dir());
    assert!(members["sub"].is_dir());
    // Hrefs are percent-encoded: no raw space, `%`, `<` or non-ASCII in them.
    for href in body.split("<D:href>").skip(1) {
        let href = &href[..href.find("</D:href>").expect("closed href")];
        assert!(
            href.bytes().all(|b| b.is_ascii_graphic() && b != b'<'),
            "{href}"
        );
    }
    assert!(
        body.contains("<D:href>/100%25%20done.txt</D:href>"),
        "{body}"
    );
    assert!(body.contains("<D:href>/empty%20dir/</D:href>"), "{body}");
}

#[tokio::test]
async fn propfind_depth_0_describes_only_the_resource() {
    let fx = fixture(false);
    let plan = fx.svc.respond(&propfind("/sub/", Some("0"))).await;
    assert_eq!(plan.status, status::MULTI_STATUS);
    let body = text_of(plan).await;
    assert_eq!(body.matches("<D:response>").count(), 1, "{body}");
    assert!(body.contains("<D:href>/sub/</D:href>"), "{body}");
    assert!(body.contains("<D:collection/>"), "{body}");
    assert!(read_dav(&body, "/sub/").is_empty());

    // A file at depth 0 (and at depth 1: it has no members) is itself, with its ETag.
    for depth in ["0", "1"] {
        let plan = fx
            .svc
            .respond(&propfind("/sub/deeper/x%20y.bin", Some(depth)))
            .await;
        assert_eq!(plan.status, status::MULTI_STATUS);
        let body = text_of(plan).await;
        let members = read_dav(&body, "/sub/deeper/");
        assert_eq!(members.len(), 1, "{body}");
        let x = &members["x y.bin"];
        assert_eq!(x.size, Some(2));
        assert_eq!(
            x.etag.as_deref(),
            Some(etag_of(&fx.root, "/sub/deeper/x%20y.bin").as_str())
        );
    }

    // Without the trailing slash the collection is still named in its `/` form.
    let body = text_of(fx.svc.respond(&propfind("/sub", Some("1"))).await).await;
    let members = read_dav(&body, "/sub/");
    assert!(members["deeper"].is_dir(), "{body}");
    assert!(body.contains("<D:href>/sub/deeper/</D:href>"), "{body}");
}

#[tokio::test]
async fn propfind_infinity_is_refused_with_the_precondition() {
    let fx = fixture(false);
    for depth in [None, Some("infinity"), Some("Infinity")] {
        let plan = fx.svc.respond(&propfind("/", depth)).await;
        assert_eq!(plan.status, status::FORBIDDEN, "{depth:?}");
        assert_eq!(plan.content_type, CONTENT_TYPE_XML);
        let body = text_of(plan).await;
        assert!(
            body.contains(r#"<D:error xmlns:D="DAV:"><D:propfind-finite-depth/></D:error>"#),
            "{body}"
        );
    }
    let plan = fx.svc.respond(&propfind("/", Some("2"))).await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    for (path, want) in [
        ("/missing", status::NOT_FOUND),
        ("/../etc", status::FORBIDDEN),
        ("/%2e%2e/etc", status::FORBIDDEN),
    ] {
        let plan = fx.svc.respond(&propfind(path, Some("1"))).await;
        assert_eq!(plan.status, want, "{path}");
    }
}

#[tokio::test]
async fn options_names_dav_class_1_and_the_methods() {
    let fx = fixture(false);
    let plan = fx.svc.respond(&req(Method::Options, "/")).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(plan.dav, Some("1"));
    assert_eq!(plan.allow, Some("GET, HEAD, OPTIONS, PROPFIND"));
    assert_eq!(plan.content_length, Some(0));
    let plan = fx
        .svc
        .respond(&req(Method::Other("MKCOL".into()), "/x/"))
        .await;
    assert_eq!(plan.status, status::METHOD_NOT_ALLOWED);
    assert_eq!(plan.allow, Some("GET, HEAD, OPTIONS, PROPFIND"));
}

#[tokio::test]
async fn html_index_escapes_names_and_encodes_links() {
    let fx = fixture(false);
    let plan = fx.svc.respond(&req(Method::Get, "/")).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(plan.content_type, CONTENT_TYPE_HTML);
    let page = text_of(plan).await;
    assert!(
        page.contains(r#"<a href="./%3Ca%26b%3E.txt">&lt;a&amp;b&gt;.txt</a>"#),
        "{page}"
    );
    assert!(!page.contains("<a&b>"), "{page}");
    assert!(
        page.contains(r#"<a href="./100%25%20done.txt">100% done.txt</a></td><td>3</td>"#),
        "{page}"
    );
    assert!(
        page.contains(
            r#"<a href="./%C3%BCn%C3%AFc%C3%B8d%C3%A9%20%E2%98%83.txt">ünïcødé ☃.txt</a>"#
        ),
        "{page}"
    );
    assert!(
        page.contains(r#"<a href="./empty%20dir/">empty dir/</a>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<a href="./empty%20file">empty file</a></td><td>0</td>"#),
        "{page}"
    );
    assert!(
        !page.contains("href=\"../\""),
        "the root has no parent link"
    );

    let page = text_of(fx.svc.respond(&req(Method::Get, "/sub/")).await).await;
    assert!(page.contains("<title>Index of /sub/</title>"), "{page}");
    assert!(
        page.contains(r#"<a href="./deeper/">deeper/</a>"#),
        "{page}"
    );
    assert!(page.contains(r#"href="../""#), "{page}");
}

#[tokio::test]
async fn a_directory_without_its_slash_redirects() {
    let fx = fixture(false);
    for (path, want) in [
        ("/sub", "/sub/"),
        ("/empty%20dir", "/empty%20dir/"),
        ("/sub/deeper?x=1", "/sub/deeper/?x=1"),
    ] {
        let plan = fx.svc.respond(&req(Method::Get, path)).await;
        assert_eq!(plan.status, status::MOVED_PERMANENTLY, "{path}");
        assert_eq!(plan.location.as_deref(), Some(want), "{path}");
    }
    let plan = fx.svc.respond(&req(Method::Head, "/sub/")).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(plan.content_length, None);
    assert!(matches!(plan.body, Body::Empty));
}

#[tokio::test]
async fn html_index_is_capped_and_points_at_the_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(root.join("many")).expect("mkdir");
    for i in 0..MAX_HTML_ENTRIES + 5 {
        std::fs::write(root.join(format!("many/{i}")), b"").expect("write");
    }
    let svc = Service::new(ServiceConfig::new(root));
    let page = text_of(svc.respond(&req(Method::Get, "/many/")).await).await;
    assert_eq!(
        page.matches("<tr><td><a href=\"./").count(),
        MAX_HTML_ENTRIES
    );
    assert!(page.contains("Truncated"), "no truncation line");
    assert!(page.contains(r#"href="./?manifest""#));
    assert!(page.ends_with("</body></html>\n"));
}

fn expected_tree(prefix: &str) -> Vec<(String, EntryKind, Option<u64>)> {
    TREE.iter()
        .filter_map(|(name, content)| {
            let rel = name.strip_prefix(prefix)?;
            Some((
                rel.to_string(),
                if content.is_some() {
                    EntryKind::File
                } else {
                    EntryKind::Directory
                },
                content.map(|c| c.len() as u64),
            ))
        })
        .filter(|(rel, _, _)| !rel.is_empty())
        .collect()
}

fn summary(tree: &BTreeMap<String, ListingEntry>) -> Vec<(String, EntryKind, Option<u64>)> {
    tree.values()
        .map(|e| (e.path.as_str().to_string(), e.kind, e.size))
        .collect()
}

#[tokio::test]
async fn manifest_round_trips_through_the_reader() {
    let fx = fixture(false);
    let mut by_accept = req(Method::Get, "/");
    by_accept.accept = vec![format!("text/plain;q=0.1, {MANIFEST_MEDIA_TYPE}")];
    for request in [
        req(Method::Get, "/?manifest"),
        by_accept,
        req(Method::List, "/"),
    ] {
        let plan = fx.svc.respond(&request).await;
        assert_eq!(plan.status, status::OK, "{:?}", request.method);
        assert_eq!(plan.content_type, MANIFEST_MEDIA_TYPE);
        let body = body_of(plan).await;
        let tree = read_tree(&body);
        let mut want = expected_tree("");
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(summary(&tree), want);
        let f = &tree["sub/deeper/x y.bin"];
        assert_eq!(
            f.etag.as_deref(),
            Some(etag_of(&fx.root, "/sub/deeper/x%20y.bin").as_str())
        );
        let mtime = std::fs::metadata(fx.root.join("sub/deeper/x y.bin"))
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(f.modified, Some(mtime), "mtime to the nanosecond");
        assert!(tree.values().all(|e| e.sha256.is_none()));
        // Directories come before what they hold.
        let text = String::from_utf8(body).expect("utf-8");
        let at = |needle: &str| text.find(needle).expect(needle);
        assert!(at("\"path\":\"sub\"") < at("\"path\":\"sub/deeper\""));
        assert!(at("\"path\":\"sub/deeper\"") < at("\"path\":\"sub/deeper/x y.bin\""));
    }
    // A subdirectory's manifest is relative to it, with or without the slash.
    for path in ["/sub/?manifest", "/sub?manifest"] {
        let tree = read_tree(&body_of(fx.svc.respond(&req(Method::Get, path)).await).await);
        let mut want = expected_tree("sub/");
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(summary(&tree), want, "{path}");
    }
    let empty = body_of(fx.svc.respond(&req(Method::List, "/empty%20dir/")).await).await;
    assert!(read_tree(&empty).is_empty());
}

#[tokio::test]
async fn manifest_of_a_file_or_outside_is_refused() {
    let fx = fixture(false);
    for (r, want) in [
        (req(Method::Get, "/f.bin?manifest"), status::NOT_FOUND),
        (req(Method::List, "/f.bin"), status::NOT_FOUND),
        (req(Method::List, "/missing/"), status::NOT_FOUND),
        (req(Method::List, "/../"), status::FORBIDDEN),
    ] {
        let plan = fx.svc.respond(&r).await;
        assert_eq!(plan.status, want, "{}", r.path);
    }
    // A HEAD of the manifest says what it is without producing it.
    let plan = fx.svc.respond(&req(Method::Head, "/?manifest")).await;
    assert_eq!(plan.status, status::OK);
    assert!(matches!(plan.body, Body::Empty));
}

#[tokio::test]
async fn manifest_carries_sha256_only_once_the_cache_knows_it() {
    let fx = fixture(true);
    let tree = read_tree(&body_of(fx.svc.respond(&req(Method::List, "/")).await).await);
    assert!(tree.values().all(|e| e.sha256.is_none()), "never hashed");
    let cache = &fx.svc.config().digests;
    let resource = Resource::open(&fx.root, "/f.bin", None).expect("open");
    cache.ensure(&resource);
    xfer_test_support::wait_until_async(
        Duration::from_secs(30),
        "the digest to be computed",
        || cache.get(&resource).is_some(),
    )
    .await;
    let tree = read_tree(&body_of(fx.svc.respond(&req(Method::List, "/")).await).await);
    assert_eq!(tree["f.bin"].sha256, Some(Sha256Digest::of(b"0123456789")));
    assert_eq!(tree["100% done.txt"].sha256, None);
}

#[cfg(unix)]
#[tokio::test]
async fn unnameable_entries_and_symlinks_out_are_left_out() {
    use std::os::unix::ffi::OsStrExt;

    let fx = fixture(false);
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), b"secret").expect("write");
    std::os::unix::fs::symlink(outside.path().join("secret"), fx.root.join("out-link"))
        .expect("symlink");
    std::os::unix::fs::symlink(outside.path(), fx.root.join("out-dir")).expect("symlink");
    std::os::unix::fs::symlink(fx.root.join("f.bin"), fx.root.join("in-link")).expect("symlink");
    std::fs::write(fx.root.join("line\nbreak"), b"x").expect("write");
    std::fs::write(
        fx.root.join(std::ffi::OsStr::from_bytes(b"not-utf8-\xff")),
        b"x",
    )
    .expect("write");
    let tree = read_tree(&body_of(fx.svc.respond(&req(Method::List, "/")).await).await);
    assert!(!tree.contains_key("out-link") && !tree.contains_key("out-dir"));
    assert!(tree
        .keys()
        .all(|k| !k.contains("break") && !k.contains("utf8")));
    assert_eq!(tree["in-link"].size, Some(10));
    assert_eq!(
        tree["in-link"].etag.as_deref(),
        Some(etag_of(&fx.root, "/f.bin").as_str())
    );
    let page = text_of(fx.svc.respond(&req(Method::Get, "/")).await).await;
    assert!(
        !page.contains("out-link") && !page.contains("secret"),
        "{page}"
    );
    let body = text_of(fx.svc.respond(&propfind("/", Some("1"))).await).await;
    assert!(!body.contains("out-"), "{body}");
}

#[tokio::test]
async fn an_abandoned_listing_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    for i in 0..5_000 {
        std::fs::write(root.join(format!("a-long-enough-name-{i:06}")), b"").expect("write");
    }
    let svc = Service::new(ServiceConfig::new(root));
    let plan = svc.respond(&req(Method::List, "/")).await;
    let Body::Listing(mut listing) = plan.body else {
        panic!("not a listing");
    };
    // Take one chunk and drop the rest: the writer's next send fails and the walk ends,
    // instead of blocking a pool thread on a full channel for ever.
    assert!(listing.next().await.is_some());
    drop(listing);
    let plan = svc.respond(&req(Method::List, "/")).await;
    let tree = read_tree(&body_of(plan).await);
    assert_eq!(tree.len(), 5_000);
}
