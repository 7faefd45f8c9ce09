#!/usr/bin/env bash
# Installs what the tests need (Debian packages for interop and link-emulation tests), then runs
# every check CI runs: formatting, lints, and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pair in nginx:nginx-light curl:curl iperf3:iperf3 aria2c:aria2 davix-ls:davix rclone:rclone openssl:openssl ping:iputils-ping ip:iproute2 prometheus:prometheus chromium:chromium lintian:lintian; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair##*:}")
done
# WLCG interop (tests/e2e/wlcg.rs, tpc.rs, xrootd_tokens.rs, gfal_tokens.rs; docs/wlcg.md, docs/tokens.md): gfal2 with its
# HTTP plugin and scripts, XRootD with its HTTP, TPC and SciTokens plugins, scitokens-cpp (davix comes with davix-ls
# above). About 4 MB, 7 s of apt.
for pkg in gfal2 gfal2-plugin-http gfal2-util-scripts xrootd-server xrootd-server-plugins xrootd-scitokens-plugins scitokens-cpp; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "warning: cannot install ${need[*]} (not root); the tests that need them will say so" >&2
  fi
fi

# Tokens minted by the reference implementation's library (tests/e2e/tokens.rs, docs/tokens.md).
if ! python3 -c "import scitokens" >/dev/null 2>&1; then
  echo "installing: scitokens (pip)"
  # A Debian python refuses --user installs unless told the system packages are not at risk.
  python3 -m pip install --quiet --user scitokens 2>/dev/null \
    || python3 -m pip install --quiet scitokens 2>/dev/null \
    || python3 -m pip install --quiet --user --break-system-packages scitokens
fi

# The package test (tests/e2e/package.rs) builds the .deb with the cargo-deb that
# scripts/package.sh pins, about 40 s to compile once.
if ! cargo deb --version >/dev/null 2>&1; then
  echo "installing: cargo-deb (cargo install)"
  cargo install --locked --quiet cargo-deb --version 3.8.0
fi

# The versions the interop tests ran against, for the record.
for tool in "gfal-sum --version" "davix-get --version" "xrootd -v"; do
  GFAL_PYTHONBIN=/usr/bin/python3 $tool 2>&1 | head -1 | sed "s|^|interop: ${tool%% *}: |" || true
done

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The resume, CLI and end-to-end tests drive the real binary: `cargo test` builds it (xfer-cli
# has integration tests) with the same features as the tests, so a separate `cargo build`
# would only compile hyper, quinn and their kin a second time.
# The binary's path memory goes to a scratch file, not the user's ~/.cache. Most tests wait on
# sockets, timers and child servers more than they compute: three at a time keep two cores
# busy (the end-to-end binary: 112 s against 153 s with two).
XFER_PATH_MEMORY="$(mktemp -d)/path-memory" cargo test --workspace --locked -- --test-threads 3
# The library's documentation builds without warnings (broken links, bad HTML).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked
