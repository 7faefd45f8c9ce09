//! `rate-relay UPSTREAM MBIT [LISTEN]`: relay TCP connections to UPSTREAM (host:port) with at
//! most MBIT megabits per second from it over all of them; listens on LISTEN (default
//! 127.0.0.1:0), prints the local address, then runs until killed. Used by
//! scripts/bench-multi-source.sh and scripts/bench-multi-source-lab.sh.

use std::net::SocketAddr;

use xfer_test_support::RateRelay;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (upstream, mbit, listen) = match args.as_slice() {
        [upstream, mbit] => (upstream, mbit, "127.0.0.1:0"),
        [upstream, mbit, listen] => (upstream, mbit, listen.as_str()),
        _ => return Err("usage: rate-relay UPSTREAM_ADDR MBIT [LISTEN_ADDR]".into()),
    };
    let upstream: SocketAddr = upstream.parse()?;
    let mbit: u64 = mbit.parse()?;
    let listen: SocketAddr = listen.parse()?;
    let relay = RateRelay::start_on(listen, upstream, mbit * 1_000_000).await?;
    println!("{}", relay.addr());
    std::future::pending::<()>().await;
    Ok(())
}
