#!/usr/bin/env bash
# Long, coverage-guided runs of xfer's fuzz targets (libFuzzer through cargo-fuzz).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]
#   SECONDS_PER_TARGET  default 600; targets default to all of them (fuzz/fuzz_targets/*.rs)
#   SANITIZER=address   or none (faster; still catches panics and broken invariants)
#   MERGE=1             afterwards, merge what the run found into the committed corpus
#                       (fuzz/corpus/<target>/, minimised with libFuzzer's -merge=1)
#
# Each target runs from the committed corpus (read-only) plus a scratch corpus under
# fuzz/target/scratch/<target>/. A crash stops that target, leaves the input under
# fuzz/artifacts/<target>/ and makes the script exit 1 after the others ran. The same target
# bodies run on every test run as a seconds-long smoke test (crates/fuzz-targets/tests/smoke.rs).
#
# cargo-fuzz wants nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

SECS=${1:-600}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in fuzz_targets/*.rs; do TARGETS+=("$(basename "$f" .rs)"); done
fi
SANITIZER=${SANITIZER:-address}

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1

failed=()
for t in "${TARGETS[@]}"; do
  scratch=target/scratch/$t
  mkdir -p "$scratch" "corpus/$t"
  echo "== $t: ${SECS}s, sanitizer $SANITIZER"
  if ! cargo fuzz run -O -s "$SANITIZER" "$t" "$scratch" "corpus/$t" -- \
      -max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1; then
    failed+=("$t")
    continue
  fi
  if [ "${MERGE:-0}" = 1 ]; then
    cargo fuzz run -O -s "$SANITIZER" "$t" "corpus/$t" "$scratch" -- -merge=1
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "crashed: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
echo "no crash in ${#TARGETS[@]} targets × ${SECS}s"
