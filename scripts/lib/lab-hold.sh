# Sourced by benches that run their own processes across one emulated link, held open by
# crates/lab/examples/lab_hold.rs for as long as its stdin is. Expects WORK (a scratch
# directory), HOLD (the lab_hold binary) and PIDS (an array of the bench's own processes).
#
#   lab_hold_start PREFIX RTT_MS RATE_MBIT PROFILE [LOSS_PERCENT]
#                                                    start it, wait until ready; sets SRV, CLI
#   lab_hold_stop                                    close it: the lab removes its namespaces
#   lab_hold_cleanup                                 for `trap ... EXIT`: stop the bench's
#                                                    processes, then the lab; remove WORK

lab_hold_start() {
    mkfifo "$WORK/lab.in"
    "$HOLD" --prefix "$1" --rtt-ms "$2" --rate-mbit "$3" --profile "$4" --loss-percent "${5:-0}" \
        <"$WORK/lab.in" >"$WORK/lab.out" 2>"$WORK/lab.err" &
    HOLD_PID=$!
    exec {LAB_IN}>"$WORK/lab.in"
    for _ in $(seq 100); do grep -q '^ready' "$WORK/lab.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready' "$WORK/lab.out" || { cat "$WORK/lab.err" >&2; return 1; }
    SRV=$1-srv
    CLI=$1-cli
}

lab_hold_stop() {
    if [[ -n "${LAB_IN:-}" ]]; then
        echo stop >&"$LAB_IN" || true
        exec {LAB_IN}>&-
        LAB_IN=
        wait "$HOLD_PID" 2>/dev/null || true
    fi
}

lab_hold_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait "${PIDS[@]}" 2>/dev/null || true
    lab_hold_stop
    rm -rf "$WORK"
}
