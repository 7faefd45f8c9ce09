#!/usr/bin/env bash
# Peak server memory while listing one directory of N entries: creates the directory, runs
# `xfer serve --plain` on it, asks for the manifest, a PROPFIND Depth: 1 and the HTML index
# with curl, and prints the server's peak RSS (VmHWM) after each. Usage:
#   scripts/listing-rss.sh [ENTRIES] [XFER_BINARY]
# (defaults: 500000, target/release/xfer). Needs curl and Linux's /proc.
set -euo pipefail
entries="${1:-500000}"
xfer="${2:-target/release/xfer}"
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$work/root/big"
python3 - "$work/root/big" "$entries" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    open(os.path.join(d, f"file-{i:07d} with a space.bin"), "wb").close()
EOF

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$xfer" serve "$work/root" --plain --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -sf -o /dev/null -X OPTIONS "http://127.0.0.1:$port/" && break; sleep 0.1; done

hwm() { awk '/VmHWM/ {print $2 " kB"}' "/proc/$server/status"; }
echo "entries: $entries"
curl -sf -o /dev/null -X PROPFIND -H 'Depth: 0' "http://127.0.0.1:$port/big/"
echo "after start-up:          peak RSS $(hwm)"
bytes=$(curl -sf "http://127.0.0.1:$port/big/?manifest" | wc -c)
echo "manifest ($bytes bytes): peak RSS $(hwm)"
bytes=$(curl -sf -X PROPFIND -H 'Depth: 1' "http://127.0.0.1:$port/big/" | wc -c)
echo "PROPFIND Depth: 1 ($bytes bytes): peak RSS $(hwm)"
bytes=$(curl -sf "http://127.0.0.1:$port/big/" | wc -c)
echo "HTML index ($bytes bytes, capped): peak RSS $(hwm)"
