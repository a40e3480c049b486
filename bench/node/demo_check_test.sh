#!/usr/bin/env bash
# demo_check_test.sh — the rule behind `examples/demo/run.sh --check` (check_verdict), on made-up
# numbers: fenced median >= 1.2 x plain-CFS median, and every round's revert checked and byte-exact.
# Sources run.sh (which then defines its functions only). No root, no cluster; CTest label unit.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../examples/demo/run.sh
source "$HERE/../../examples/demo/run.sh"
set +e
fails=0

# case NAME WANT(pass|fail) ROUNDS "FENCED..." "CFS..." CHECKED FAILED
case_() {
  local name="$1" want="$2" f=($4) c=($5) r got
  ROUNDS="$3" REVERT_CHECKED="$6" REVERT_FAILED="$7"
  RES=()
  for ((r = 1; r <= ROUNDS; r++)); do
    RES[$r.fenced.sps]="${f[r - 1]}"
    RES[$r.cfs.sps]="${c[r - 1]}"
  done
  if check_verdict >/dev/null 2>&1; then got=pass; else got=fail; fi
  if [[ "$got" == "$want" ]]; then
    echo "ok: $name ($got)"
  else
    echo "FAIL: $name: check_verdict said $got, expected $want"
    fails=$((fails + 1))
  fi
}

case_ "fenced 1.33x CFS, reverted"               pass 1 "800" "600" 1 0
case_ "fenced exactly 1.2x CFS"                  pass 1 "720" "600" 1 0
case_ "fenced 1.17x CFS"                         fail 1 "700" "600" 1 0
case_ "fenced 3x CFS but one revert failed"      fail 1 "900" "300" 1 1
case_ "fenced 3x CFS, revert never checked"      fail 1 "900" "300" 0 0
case_ "2 of 3 rounds' reverts checked"           fail 3 "900 900 900" "300 300 300" 2 0
case_ "no CFS throughput at all"                 fail 1 "900" "0" 1 0
case_ "medians pass (800 vs 600) though round 2 fails" pass 3 "900 500 800" "600 700 300" 3 0
case_ "medians fail (710 vs 600) though round 3 passes" fail 3 "700 710 900" "600 600 100" 3 0
case_ "even rounds: medians 740 vs 625"          fail 2 "700 780" "600 650" 2 0
case_ "even rounds: medians 780 vs 625"          pass 2 "760 800" "600 650" 2 0
case_ "fractional samples/s"                     pass 1 "612.5" "510.4" 1 0

# obs NAME WANT CFS_WAIT CFS_PODS FENCED_WAIT FENCED_PODS ("-" = unset: the phase not observed
# or the trainer not in the report)
obs() {
  local name="$1" want="$2" got
  OBS_WAIT=() OBS_PODS=()
  [[ "$3" != - ]] && OBS_WAIT[cfs]="$3"
  [[ "$4" != - ]] && OBS_PODS[cfs]="$4"
  [[ "$5" != - ]] && OBS_WAIT[fenced]="$5"
  [[ "$6" != - ]] && OBS_PODS[fenced]="$6"
  if check_observation >/dev/null 2>&1; then got=pass; else got=fail; fi
  if [[ "$got" == "$want" ]]; then
    echo "ok: observation: $name ($got)"
  else
    echo "FAIL: observation: $name: check_observation said $got, expected $want"
    fails=$((fails + 1))
  fi
}
obs "the demo's run: 68% behind pods, then 3%"        pass 0.72 0.68 0.82 0.035
obs "fenced: not starving at all"                     pass 0.72 0.68 - -
obs "nothing observed (skipped)"                      pass - - - -
obs "fenced still 30% behind pods"                    fail 0.72 0.68 0.5 0.30
obs "fenced 12% of a 40% wait: not under 10%"         fail 0.72 0.40 0.3 0.12
obs "fenced 9% of a 24% wait: over a third"           fail 0.5 0.24 0.3 0.09
obs "plain CFS showed no wait behind pods"            fail 0.5 0.1 0.2 0.01
obs "the trainer not in the report under plain CFS"   fail "" - - -

[[ "$(median 3 1 2)" == 2 && "$(median 4 1 3 2)" == 2.5 && "$(median 7)" == 7 ]] ||
  { echo "FAIL: median: $(median 3 1 2) $(median 4 1 3 2) $(median 7)"; fails=$((fails + 1)); }
((fails == 0)) && echo "PASS" || { echo "$fails case(s) failed"; exit 1; }
