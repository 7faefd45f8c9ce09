//! `rate-relay UPSTREAM MBIT`: relay TCP connections to UPSTREAM (host:port) with at most
//! MBIT megabits per second from it over all of them; prints the local address, then runs
//! until killed. Used by scripts/bench-multi-source.sh.

use std::net::SocketAddr;

use xfer_test_support::RateRelay;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [upstream, mbit] = args.as_slice() else {
        return Err("usage: rate-relay UPSTREAM_ADDR MBIT".into());
    };
    let upstream: SocketAddr = upstream.parse()?;
    let mbit: u64 = mbit.parse()?;
    let relay = RateRelay::start(upstream, mbit * 1_000_000).await?;
    println!("{}", relay.addr());
    std::future::pending::<()>().await;
    Ok(())
}
