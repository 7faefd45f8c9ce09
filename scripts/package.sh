#!/usr/bin/env bash
# Builds the Debian (.deb, cargo-deb) and RPM (.rpm, cargo-generate-rpm) packages of xfer:
# the binary, its man pages and shell completions, /etc/xfer/serve.toml and the
# xfer-serve.service unit (docs/operations.md, "Install").
#
#   scripts/package.sh                 release build, both packages, into target/packages/
#   scripts/package.sh --deb-only      only the .deb
#   scripts/package.sh --profile dev   package the debug build (the install test adds --no-build)
#
# Installs cargo-deb / cargo-generate-rpm with `cargo install --locked` when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
rpm=1
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --deb-only) rpm=0; shift ;;
    --no-build) build=0; shift ;;
    *) echo "usage: $0 [--profile release|dev] [--deb-only] [--no-build]" >&2; exit 2 ;;
  esac
done

target_dir="${CARGO_TARGET_DIR:-target}"
case "$profile" in
  dev) bin_dir="$target_dir/debug" ;;
  *) bin_dir="$target_dir/$profile" ;;
esac
out="$target_dir/packages"
mkdir -p "$out"

# The versions the packages were checked with (lintian, systemd-analyze, the install test).
tool_version() { case "$1" in deb) echo 3.8.0 ;; generate-rpm) echo 0.21.1 ;; esac; }
for tool in deb generate-rpm; do
  [ "$tool" = generate-rpm ] && [ "$rpm" = 0 ] && continue
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "installing: cargo-$tool"
    cargo install --locked --quiet "cargo-$tool" --version "$(tool_version "$tool")"
  fi
done

[ "$build" = 1 ] && cargo build --locked --profile "$profile" -p xfer-cli

# Man pages and completions come from the binary's own flag definitions.
generated=packaging/generated
rm -rf "$generated"
mkdir -p "$generated/man" "$generated/completions"
"$bin_dir/xfer" man "$generated/man" >/dev/null
"$bin_dir/xfer" completions bash >"$generated/completions/xfer.bash"
"$bin_dir/xfer" completions zsh >"$generated/completions/_xfer"
"$bin_dir/xfer" completions fish >"$generated/completions/xfer.fish"
gzip -9n "$generated"/man/*.1

# cargo-deb and cargo-generate-rpm read the binary from target/<profile>.
cargo deb --locked --no-build --profile "$profile" -p xfer-cli --fast -o "$out"
if [ "$rpm" = 1 ]; then
  cargo generate-rpm --profile "$profile" -p crates/cli -o "$out"
fi
ls -1 "$out"
