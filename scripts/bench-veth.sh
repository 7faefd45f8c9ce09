#!/usr/bin/env bash
# QUIC (or HTTP) CPU per byte over a real kernel path that is not loopback: two network
# namespaces joined by a veth pair of MTU $MTU (9000: jumbo frames; 1500: Ethernet), `xfer
# serve` in one and `xfer bench` in the other, for one or more builds side by side, rows
# alternating round by round. Prints goodput and both ends' CPU seconds per GiB. Needs root
# (ip netns); creates and removes its own namespaces, touches nothing else.
#
# Usage: sudo scripts/bench-veth.sh LABEL=XFER_BINARY [LABEL=XFER_BINARY ...]
#   MTU=9000        MTU of both veth ends
#   ROUNDS=3        rounds over all rows
#   DUR=8           seconds per row
#   ROWS="noverify sha256"   `--no-verify` rows, SHA-256 rows
#   URL_SCHEME=quic quic, or https for HTTP/1.1 (--protocol http1)
#   CONC=8          lanes (--concurrency)
set -euo pipefail

MTU=${MTU:-9000}; ROUNDS=${ROUNDS:-3}; DUR=${DUR:-8}; ROWS=${ROWS:-noverify sha256}
URL_SCHEME=${URL_SCHEME:-quic}; CONC=${CONC:-8}
[ $# -ge 1 ] || { sed -n '2,16p' "$0"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-veth: needs root for ip netns" >&2; exit 2; }

A=xv-srv-$$; B=xv-cli-$$; WORK=$(mktemp -d /dev/shm/bench-veth-XXXXXX)
cleanup() {
  for pid in $(ip netns pids "$A" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add xva netns "$A" type veth peer name xvb netns "$B"
ip -n "$A" addr add 10.79.0.1/24 dev xva; ip -n "$B" addr add 10.79.0.2/24 dev xvb
ip -n "$A" link set xva mtu "$MTU" up; ip -n "$B" link set xvb mtu "$MTU" up
ip -n "$A" link set lo up; ip -n "$B" link set lo up

labels=(); declare -A BIN PORT PID
port=19100
for spec in "$@"; do
  label=${spec%%=*}; bin=${spec#*=}
  labels+=("$label"); BIN[$label]=$bin; PORT[$label]=$port
  mkdir -p "$WORK/$label/root"
  (cd "$WORK/$label" && exec ip netns exec "$A" "$bin" serve root --self-signed \
      --listen "10.79.0.1:$port" > serve.log 2>&1) &
  port=$((port + 1))
done
for label in "${labels[@]}"; do
  for _ in $(seq 100); do
    [ -s "$WORK/$label/xfer-cert/cert.pem" ] && grep -q "10.79.0.1:${PORT[$label]}" "$WORK/$label/serve.log" && break
    sleep 0.1
  done
  PID[$label]=
  for p in $(ip netns pids "$A"); do
    if grep -q -- "10.79.0.1:${PORT[$label]}" "/proc/$p/cmdline" 2>/dev/null; then PID[$label]=$p; break; fi
  done
  [ -n "${PID[$label]}" ] || { echo "bench-veth: server $label did not start" >&2; cat "$WORK/$label/serve.log" >&2; exit 1; }
done

tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "# bench-veth $(date -u +%FT%TZ): MTU $MTU, $URL_SCHEME x $CONC, ${DUR}s rows, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-12s %-9s %9s %11s %11s\n' round label row MiB/s cli_s/GiB srv_s/GiB
for r in $(seq "$ROUNDS"); do
  for label in "${labels[@]}"; do
    for row in $ROWS; do
      args=(bench "$URL_SCHEME://10.79.0.1:${PORT[$label]}" --ca-cert "$WORK/$label/xfer-cert/cert.pem"
            --concurrency "$CONC" --mean-size 100MiB --size-sd 0 --duration "$DUR" --json)
      [ "$URL_SCHEME" = https ] && args+=(--protocol http1)
      [ "$row" = noverify ] && args+=(--no-verify)
      s0=$(cpu "${PID[$label]}")
      out=$( { /usr/bin/time -f "%U %S" ip netns exec "$B" "${BIN[$label]}" "${args[@]}"; } 2>&1 ) || true
      s1=$(cpu "${PID[$label]}")
      printf '%s' "$out" | python3 -c "
import json, sys
t = sys.stdin.read()
try:
    j = json.loads(t[t.index('{'):t.rindex('}') + 1]); u, s = t[t.rindex('}') + 1:].split()[-2:]
except (ValueError, IndexError):
    print('$r $label $row: bench failed:', t[-300:]); sys.exit()
g = j['bytes_received'] / 2**30
print(f\"{'$r':6} {'$label':12} {'$row':9} {j['goodput_bps'] / 8 / 2**20:9.0f} {(float(u) + float(s)) / g:11.3f} {($s1 - $s0) / $tick / g:11.3f}\")"
    done
  done
done
