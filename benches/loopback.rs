//! End to end on loopback, per transport: an in-process xfer server serves the 256 MiB
//! synthetic resource, and `xfer::download` fetches it to a file on tmpfs (deleted after each
//! iteration). Client and server share the machine's cores, so these figures are a ceiling on
//! per-byte cost, not a network measurement.
//!
//! Names: `<protocol>_<connections>x<streams>_get_256mib_<tls|plain>_<digest|nodigest>`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use xfer::crates::common::synthetic::SyntheticSpec;
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, GetConfig, Http2Config, HttpVersion, LaneLayout};

mod common;

const SIZE: u64 = 256 << 20;

struct Variant {
    name: &'static str,
    tls: bool,
    quic: bool,
    verify: bool,
    client: fn(ClientConfig) -> ClientConfig,
}

fn h1_x8(mut c: ClientConfig) -> ClientConfig {
    c.http.version = HttpVersion::Http1;
    c.with_lanes(layout(8, 1))
}

fn h2_1x8(mut c: ClientConfig) -> ClientConfig {
    c.http.version = HttpVersion::Http2;
    c.with_lanes(layout(1, 8))
}

fn h2_1x8_spec(c: ClientConfig) -> ClientConfig {
    let mut c = c;
    c.http.http2 = Http2Config::hyper_defaults();
    h2_1x8(c)
}

fn quic_2x4(c: ClientConfig) -> ClientConfig {
    c.with_lanes(layout(2, 4))
}

fn layout(connections: usize, streams: usize) -> LaneLayout {
    LaneLayout {
        connections: Some(connections),
        streams_per_connection: Some(streams),
    }
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "h1_8x_get_256mib_tls_digest",
        tls: true,
        quic: false,
        verify: true,
        client: h1_x8,
    },
    Variant {
        name: "h1_8x_get_256mib_tls_nodigest",
        tls: true,
        quic: false,
        verify: false,
        client: h1_x8,
    },
    Variant {
        name: "h1_8x_get_256mib_plain_digest",
        tls: false,
        quic: false,
        verify: true,
        client: h1_x8,
    },
    Variant {
        name: "h1_8x_get_256mib_plain_nodigest",
        tls: false,
        quic: false,
        verify: false,
        client: h1_x8,
    },
    Variant {
        name: "h2_1x8_get_256mib_tls_digest",
        tls: true,
        quic: false,
        verify: true,
        client: h2_1x8,
    },
    Variant {
        name: "h2_1x8_get_256mib_tls_digest_specdefaults",
        tls: true,
        quic: false,
        verify: true,
        client: h2_1x8_spec,
    },
    Variant {
        name: "quic_2x4_get_256mib_digest",
        tls: true,
        quic: true,
        verify: true,
        client: quic_2x4,
    },
];

fn loopback(c: &mut Criterion) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => panic!("runtime: {e}"),
    };
    let scratch = common::scratch_dir();
    let root = scratch.path().join("root");
    if let Err(e) = std::fs::create_dir_all(&root) {
        panic!("{}: {e}", root.display());
    }
    let start = |tls: ServerTls| {
        let mut cfg = ServeConfig::new(&root, tls);
        cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        match runtime.block_on(Servers::start(cfg)) {
            Ok(s) => s,
            Err(e) => panic!("starting servers: {e}"),
        }
    };
    let plain = start(ServerTls::Plain);
    let tls = start(ServerTls::SelfSigned {
        dir: scratch.path().join("cert"),
        names: vec!["127.0.0.1".into()],
    });
    let ca = match &tls.self_signed {
        Some(s) => s.cert_path.clone(),
        None => panic!("no certificate was generated"),
    };
    let trusted = ClientConfig::default().with_tls(ClientTlsOptions {
        client_identity: None,
        ca_certs: vec![ca],
        dangerous_insecure: false,
    });
    let path = SyntheticSpec {
        size: SIZE,
        seed: 1,
    }
    .path_and_query();

    let mut group = c.benchmark_group("loopback");
    group.throughput(Throughput::Bytes(SIZE));
    for v in VARIANTS {
        let base = match (v.quic, v.tls) {
            (true, _) => tls
                .quic_base()
                .unwrap_or_else(|| panic!("QUIC did not start")),
            (false, true) => tls.http_base(),
            (false, false) => plain.http_base(),
        };
        let url = format!("{base}{path}");
        let client = (v.client)(trusted.clone());
        group.bench_function(BenchmarkId::from_parameter(v.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let dest = scratch.path().join(format!("{}-{i}", v.name));
                    let config = GetConfig {
                        verify: v.verify,
                        overwrite: true,
                        ..GetConfig::default()
                    };
                    let started = Instant::now();
                    let result = runtime.block_on(xfer::download(&url, &dest, &client, config));
                    total += started.elapsed();
                    if let Err(e) = result {
                        panic!("{}: {e}", v.name);
                    }
                    common::remove_outputs(&dest);
                }
                total
            });
        });
    }
    group.finish();
    runtime.block_on(async {
        plain.shutdown().await;
        tls.shutdown().await;
    });
}

criterion_group! {
    name = benches;
    config = common::quick();
    targets = loopback
}
criterion_main!(benches);
