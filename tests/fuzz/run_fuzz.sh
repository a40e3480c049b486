#!/usr/bin/env bash
# run_fuzz.sh FUZZER CORPUS_DIR SECONDS — one short libFuzzer run from the committed seed corpus.
# New inputs go to a scratch corpus (never into the repository); a crash, leak, timeout (10 s per
# input) or memory blow-up (2 GiB) fails the run and leaves the input under $FG_FUZZ_ARTIFACTS
# (default: a temp dir, printed) to be added to CORPUS_DIR as a regression-* file once fixed.
set -euo pipefail
fuzzer=$1 corpus=$2 seconds=$3
scratch=$(mktemp -d)
artifacts=${FG_FUZZ_ARTIFACTS:-$scratch/artifacts}
mkdir -p "$artifacts" "$scratch/corpus"
trap 'rm -rf "$scratch/corpus"' EXIT
echo "fuzzing $(basename "$fuzzer") for ${seconds}s from $corpus (artifacts: $artifacts)"
export HWLOC_COMPONENTS=-pci
"$fuzzer" "$scratch/corpus" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 2>&1 | tail -25
