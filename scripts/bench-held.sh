#!/usr/bin/env bash
# Side by side on one emulated long path: `xfer get` commands run in turn over a single lab
# link held open for all of them, against one of two xfer servers that differ only in their
# flags. Alternating on one link removes the link set-up and most of the hour-to-hour drift
# that make two separate `xfer lab run`s hard to compare.
#
# Usage: sudo scripts/bench-held.sh SPEC...
#   SPEC      "label|server|scheme|get flags[|client]": server a or b, scheme https or quic,
#             client a (XFER, the default) or b (XFER_CLIENT_B), e.g.
#             "ack9|a|quic|" "ackoff|b|quic|"  or  "kept|a|https|" "every|a|https|--check-every-chunk"
#   SERVE_A, SERVE_B   extra `xfer serve` flags of the two servers (default none)
#   RTT_MS=100  RATE_MBIT=1000  PROFILE=stock (or tuned)  SIZE=2147483648 (bytes)
#   LOSS_PCT=0  random loss on the wire, per cent of packets (0.01 is issue 14's loss cell)
#   WARM=1      one unreported download from each server first, so both have hashed the file
#               (its Repr-Digest known) and have the path saved, as a long-running server has
#   XFER=path   (default: builds target/release/xfer)
#   XFER_B=path the binary server b runs (default: XFER), to compare two builds' servers
#   XFER_CLIENT_B=path  the binary `xfer get` runs for specs whose client is b, to compare
#               two builds' clients
#   TIMELINE=1  also sample the client's interface every 20 ms and print where the time went:
#               the first 64 KiB, the ramp (time to 20% beyond what the 20-80% rate needs), the
#               tail (80% to the last byte, likewise) and the exit after the last byte
#   SS_KEEP=DIR  sample the server's TCP sockets (`ss -tin`) every 50 ms during each command
#               and keep them as DIR/LABEL.ss: what its congestion control saw
#   TIMELINE_KEEP=DIR  keep each command's samples as DIR/LABEL.timeline (seconds since the
#               command's start, bytes received), for a closer look at the ramp
#   LOG_KEEP=DIR  keep the two servers' logs as DIR/serve-a.log and DIR/serve-b.log, and each
#               command's stderr as DIR/LABEL.client.log (set RUST_LOG, e.g.
#               xfer_quic::resume=debug, for what the controllers did)
#
# Prints, per command: goodput over the whole command (start-up and verification included),
# its seconds, the client's CPU seconds (user + sys) and the server's (utime + stime of the
# server process over the command). The file is random, in /dev/shm, fetched to /dev/shm.
# Needs root, iproute2 and /dev/net/tun.
set -euo pipefail

cd "$(dirname "$0")/.."
RTT_MS=${RTT_MS:-100}
RATE_MBIT=${RATE_MBIT:-1000}
PROFILE=${PROFILE:-stock}
LOSS_PCT=${LOSS_PCT:-0}
SIZE=${SIZE:-2147483648}
WARM=${WARM:-1}
[[ $# -gt 0 ]] || { sed -n '2,20p' "$0" >&2; exit 2; }

if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$PWD/target/release/xfer
fi
cargo build --release -q -p xfer-lab --example lab_hold
HOLD=$PWD/target/release/examples/lab_hold
command -v ip >/dev/null || { echo "needs iproute2" >&2; exit 1; }

WORK=$(mktemp -d /dev/shm/xfer-bench-held.XXXXXX)
# xfer's path memory starts empty for each run of this script and is shared by its commands
# (unless a spec's flags name another, or --no-path-memory).
export XFER_PATH_MEMORY=$WORK/path-memory
PIDS=()
# shellcheck source=lib/lab-hold.sh
source scripts/lib/lab-hold.sh
trap lab_hold_cleanup EXIT
lab_hold_start xbh "$RTT_MS" "$RATE_MBIT" "$PROFILE" "$LOSS_PCT"
SRV_ADDR=10.77.0.1
mkdir -p "$WORK/root"
head -c "$SIZE" /dev/urandom >"$WORK/root/f.bin"

declare -A SERVER_PID PORT=([a]=8443 [b]=8444)
declare -A BIN=([a]=$XFER [b]=${XFER_B:-$XFER})
for s in a b; do
    var=SERVE_${s^^}
    # shellcheck disable=SC2086 # the flags are words
    # `ip netns exec` remounts /sys without a cgroup2, and xfer never mounts one itself: TCP
    # resume (--mechanism tcp-resume=on) needs it mounted here, in this command's own namespace.
    ip netns exec "$SRV" sh -c 'mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"' sh \
        "${BIN[$s]}" serve "$WORK/root" --self-signed --cert-dir "$WORK/cert" \
        --cert-name "$SRV_ADDR" --listen "$SRV_ADDR:${PORT[$s]}" ${!var:-} >"$WORK/serve-$s.log" 2>&1 &
    SERVER_PID[$s]=$!
    PIDS+=("${SERVER_PID[$s]}")
    for _ in $(seq 100); do
        grep -q "serving .* at " "$WORK/serve-$s.log" 2>/dev/null && break
        sleep 0.1
    done
    grep -q "serving .* at " "$WORK/serve-$s.log" || { cat "$WORK/serve-$s.log" >&2; exit 1; }
done

cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
CLI_IF=$(ip netns exec "$CLI" ls /sys/class/net | grep -vx lo | head -n1)
TICK=$(getconf CLK_TCK)

# run LABEL SERVER SCHEME FLAGS [CLIENT]: one download; prints its row unless LABEL is empty.
run() {
    local label=$1 server=$2 scheme=$3 flags=$4 pid=${SERVER_PID[$2]}
    local client_bin=$XFER
    if [[ "${5:-a}" == b ]]; then
        client_bin=${XFER_CLIENT_B:?"$label: client b needs XFER_CLIENT_B"}
    fi
    local url="$scheme://$SRV_ADDR:${PORT[$server]}/f.bin"
    local c0 c1 t0 t1
    local sampler=
    if [[ "${TIMELINE:-0}" == 1 ]]; then
        ip netns exec "$CLI" bash -c "while :; do echo \$(date +%s.%N) \$(cat /sys/class/net/$CLI_IF/statistics/rx_bytes); sleep 0.02; done" >"$WORK/timeline" &
        sampler=$!
        PIDS+=("$sampler")
    fi
    local ss_sampler=
    if [[ -n "${SS_KEEP:-}" && -n "$label" ]]; then
        mkdir -p "$SS_KEEP"
        ip netns exec "$SRV" bash -c "while :; do echo \"@ \$(date +%s.%N)\"; ss -tinH state established '( sport = :${PORT[$server]} )'; sleep 0.05; done" >"$SS_KEEP/${label// /_}.ss" &
        ss_sampler=$!
        PIDS+=("$ss_sampler")
    fi
    c0=$(cpu_of "$pid")
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086 # the flags are words
    ip netns exec "$CLI" /usr/bin/time -f "%U %S" -o "$WORK/time" "$client_bin" get "$url" \
        -o "$WORK/out" --overwrite --quiet --ca-cert "$WORK/cert/cert.pem" $flags \
        2>"$WORK/get.err" || { echo "$label: xfer get failed:" >&2; cat "$WORK/get.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    c1=$(cpu_of "$pid")
    if [[ -n "${LOG_KEEP:-}" && -n "$label" ]]; then
        mkdir -p "$LOG_KEEP"
        cp "$WORK/get.err" "$LOG_KEEP/${label// /_}.client.log"
    fi
    if [[ -n "$ss_sampler" ]]; then
        kill "$ss_sampler"
        wait "$ss_sampler" 2>/dev/null || true
    fi
    if [[ -n "$sampler" ]]; then
        sleep 0.05
        kill "$sampler"
        wait "$sampler" 2>/dev/null || true
        if [[ -n "${TIMELINE_KEEP:-}" && -n "$label" ]]; then
            mkdir -p "$TIMELINE_KEEP"
            awk -v t0="$t0" 'NR == 1 {b0 = $2} {printf "%.3f %d\n", $1 - t0, $2 - b0}' \
                "$WORK/timeline" >"$TIMELINE_KEEP/${label// /_}.timeline"
        fi
    fi
    rm -f "$WORK/out"
    [[ -n "$label" ]] || return 0
    python3 - "$label" "$t0" "$t1" "$SIZE" "$WORK/time" "$c0" "$c1" "$TICK" "${sampler:+$WORK/timeline}" <<'PY'
import sys
label, t0, t1, size, time_file, c0, c1, tick, timeline = sys.argv[1:]
secs = float(t1) - float(t0)
user, sys_ = map(float, open(time_file).read().split()[-2:])
server = (float(c1) - float(c0)) / float(tick)
row = (f"{label:<24} {int(size) * 8 / secs / 1e6:7.0f} Mbit/s {secs:7.2f} s"
       f"   client {user + sys_:6.2f} s   server {server:6.2f} s")
if timeline:
    pts = [tuple(map(float, l.split())) for l in open(timeline) if len(l.split()) == 2]
    pts = [(t - float(t0), b - pts[0][1]) for t, b in pts]
    total = pts[-1][1]
    at = lambda frac: next(t for t, b in pts if b >= frac * total)
    # Beyond the handshakes' few KB: the body has begun.
    first = next(t for t, b in pts if b > 65536)
    # The connections' closing packets come after the command: not part of the body.
    t20, t80, last = at(0.2), at(0.8), at(0.9999)
    rate = 0.6 * total / (t80 - t20)  # bytes per second, interface bytes
    row += (f"   first 64 KiB {first:5.2f} s  ramp {t20 - 0.2 * total / rate:5.2f} s"
            f"  tail {last - t80 - 0.2 * total / rate:5.2f} s  exit {secs - last:5.2f} s")
print(row)
PY
}

echo "# $(date -u '+%F %T') UTC, ${RATE_MBIT} Mbit/s, ${RTT_MS} ms, ${LOSS_PCT}% loss, $PROFILE host, $SIZE bytes, $(nproc) CPUs shared by client, server and emulator"
echo "# server a: ${SERVE_A:-(defaults)}; server b: ${SERVE_B:-(defaults)}${XFER_B:+ (binary $XFER_B)}"
if [[ "$WARM" == 1 ]]; then
    for s in a b; do
        run "" "$s" https ""
        # The whole-file digest is computed in the background after the first request.
        for _ in $(seq 300); do
            ip netns exec "$CLI" curl -sS -f -I --cacert "$WORK/cert/cert.pem" \
                "https://$SRV_ADDR:${PORT[$s]}/f.bin" | grep -qi '^repr-digest' && break
            sleep 1
        done
    done
fi
for spec in "$@"; do
    IFS='|' read -r label server scheme flags client <<<"$spec"
    [[ "$server" == a || "$server" == b ]] || { echo "$spec: server must be a or b" >&2; exit 2; }
    [[ "${client:-a}" == a || "$client" == b ]] || { echo "$spec: client must be a or b" >&2; exit 2; }
    run "$label" "$server" "$scheme" "$flags" "${client:-a}"
done
lab_hold_stop
if [[ -n "${LOG_KEEP:-}" ]]; then
    mkdir -p "$LOG_KEEP"
    cp "$WORK"/serve-a.log "$WORK"/serve-b.log "$LOG_KEEP"/
fi
# The emulator's timing: wake-ups the host delayed, when packets were late (never early).
sed -n 's/.*late_wakeups: \([0-9]*\), worst_late: \([^ }]*\).*/# relay: \1 late wake-ups, the worst \2 late/p' "$WORK/lab.err"
