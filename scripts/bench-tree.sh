#!/usr/bin/env bash
# Many-file tree on loopback: `xfer get URL/ DEST/` with its defaults over HTTP/1.1, HTTP/2 and
# QUIC from `xfer serve`, and from nginx's JSON index; beside `aria2c -i urls -j 32` and
# `rclone copy --transfers 32` (HTTP remote) from the same nginx. Everything over TLS.
#
# The tree has the issue's shape: FILES files (default 2000) in 20 directories, log-normal
# sizes with median 240 KiB and sigma 1.15 (mean ≈ 466 KiB, ≈ 950 MB in all), seed 42.
#
# Usage: scripts/bench-tree.sh [OUT_DIR]
#   XFER=path    xfer binary (default: builds target/release/xfer)
#   FILES=n      files in the tree
#   ROWS="a b"   only these rows (names as in the table)
#
# This is loopback: no emulated RTT, so it measures per-file overheads (requests, handshakes,
# file creation, hashing), not what multiplexing gains on a long path. The comparison at 50,
# 100 and 200 ms runs through the lab: `xfer lab run scenarios/tree.toml` (docs/results.md,
# "Trees").
set -euo pipefail

cd "$(dirname "$0")/.."
FILES=${FILES:-2000}
OUT=${1:-target/bench-tree/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$PWD/target/release/xfer
fi
for tool in nginx aria2c rclone python3; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
NGINX=$(command -v nginx)

WORK=$(mktemp -d /dev/shm/xfer-bench-tree.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listening on $1" >&2
    exit 1
}

# The tree, and the list of its files for aria2c.
mkdir -p "$WORK/www/tree"
python3 - "$WORK/www/tree" "$FILES" <<'EOF'
import math, os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(42)
total = 0
for i in range(n):
    size = int(min(64 << 20, rng.lognormvariate(math.log(240 * 1024), 1.15)))
    d = os.path.join(root, f"dir-{i % 20:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"file-{i:05d}.bin"), "wb") as f:
        f.write(rng.randbytes(size))
    total += size
print(f"tree: {n} files, {total} bytes", file=sys.stderr)
EOF
TOTAL=$(find "$WORK/www/tree" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')

XPORT=$(free_port)
"$XFER" serve "$WORK/www/tree" --self-signed --cert-dir "$WORK/cert" --listen "127.0.0.1:$XPORT" \
    >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
wait_port "$XPORT"
CA=$WORK/cert/cert.pem

NPORT=$(free_port)
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1; pid $WORK/nginx/pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off; client_body_temp_path $WORK/nginx; proxy_temp_path $WORK/nginx;
  fastcgi_temp_path $WORK/nginx; uwsgi_temp_path $WORK/nginx; scgi_temp_path $WORK/nginx;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$NPORT ssl http2;
    ssl_certificate $WORK/cert/cert.pem; ssl_certificate_key $WORK/cert/key.pem;
    root $WORK/www;
    location /json/ { alias $WORK/www/tree/; autoindex on; autoindex_format json; }
    location /html/ { alias $WORK/www/tree/; autoindex on; }
  }
}
EOF
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
PIDS+=($!)
wait_port "$NPORT"
(cd "$WORK/www/tree" && find . -type f | sed "s|^\./|https://127.0.0.1:$NPORT/html/|") >"$WORK/urls"

declare -A CMD
CMD[xfer-http1]="$XFER get https://127.0.0.1:$XPORT/ DEST --ca-cert $CA --protocol http1 --quiet"
CMD[xfer-http2]="$XFER get https://127.0.0.1:$XPORT/ DEST --ca-cert $CA --protocol http2 --quiet"
CMD[xfer-http2-noverify]="$XFER get https://127.0.0.1:$XPORT/ DEST --ca-cert $CA --protocol http2 --no-verify --quiet"
CMD[xfer-quic]="$XFER get quic://127.0.0.1:$XPORT/ DEST --ca-cert $CA --quiet"
CMD[xfer-nginx-json]="$XFER get https://127.0.0.1:$NPORT/json/ DEST --ca-cert $CA --protocol http1 --quiet"
CMD[aria2c-j32]="aria2c -i $WORK/urls -j 32 -x1 --ca-certificate=$CA --dir=DEST --force-sequential=false --allow-overwrite=true --file-allocation=none --summary-interval=0 --console-log-level=warn --download-result=hide"
CMD[rclone-t32]="rclone copy --transfers 32 --http-url https://127.0.0.1:$NPORT/html/ --ca-cert $CA :http: DEST"
ROWS=${ROWS:-"xfer-http1 xfer-http2 xfer-http2-noverify xfer-quic xfer-nginx-json aria2c-j32 rclone-t32"}

printf '%-16s %8s %10s %12s %s\n' row seconds files Mbit/s check | tee "$OUT/table.txt"
echo '[' >"$OUT/results.json"
first=1
for row in $ROWS; do
    dest=$WORK/dest-$row
    rm -rf "$dest" "$dest.xfer-tree-journal"
    mkdir -p "$dest"
    cmd=${CMD[$row]//DEST/$dest}
    start=$(date +%s.%N)
    if $cmd >"$WORK/$row.log" 2>&1; then status=ok; else status="exit $?"; fi
    end=$(date +%s.%N)
    got=$(find "$dest" -type f ! -name '*.xfer-*' -printf '%s\n' | awk '{s+=$1; n++} END {print n+0, s+0}')
    files=${got% *}
    bytes=${got#* }
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}')
    mbps=$(awk -v b="$bytes" -v s="$secs" 'BEGIN {printf "%.0f", b * 8 / s / 1e6}')
    check=$status
    [[ "$files" == "$FILES" && "$bytes" == "$TOTAL" ]] || check="$status, incomplete ($files files, $bytes bytes)"
    printf '%-16s %8s %10s %12s %s\n' "$row" "$secs" "$files" "$mbps" "$check" | tee -a "$OUT/table.txt"
    [[ $first == 1 ]] || echo ',' >>"$OUT/results.json"
    first=0
    printf '{"row":"%s","seconds":%s,"files":%s,"bytes":%s,"mbit_s":%s,"status":"%s"}' \
        "$row" "$secs" "$files" "$bytes" "$mbps" "$check" >>"$OUT/results.json"
    rm -rf "$dest" "$dest.xfer-tree-journal"
done
echo ']' >>"$OUT/results.json"
echo "tree: $FILES files, $TOTAL bytes; results in $OUT" >&2
