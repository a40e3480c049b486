#!/usr/bin/env bash
# crd_test.sh — checks crds/fencepolicy.yaml against a real kube-apiserver with the real kubectl:
# installs the CRD, applies every invalid/*.yaml and expects each to be rejected with an error
# naming the field in its "# expect:" line, applies every valid/*.yaml, checks the defaults,
# `kubectl explain`, the printer columns, the status subresource and its bounds.
#
# Usage: crd_test.sh TESTBED_DIR   (a dir set up by tests/testbed/testbed.sh up; CTest passes
#        ${CMAKE_BINARY_DIR}/testbed through the `apiserver` fixture)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CRD="$ROOT/crds/fencepolicy.yaml"
TESTBED_DIR="${1:?usage: crd_test.sh TESTBED_DIR}"

# shellcheck source=../testbed_client.sh
source "$HERE/../testbed_client.sh"
testbed_client_init "$TESTBED_DIR"

WORK="$(mktemp -d)"
trap 'cleanup' EXIT
kc() { "$KUBECTL" --cache-dir "$WORK/kcache" --request-timeout=30s "$@"; }

PASSED=0 FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL - $*"; }

cleanup() {
  # Delete only the objects this test created (valid-*, invalid-*); the CRD stays (other tests
  # share the API server).
  local objs
  objs="$(kc get fencepolicies -o name 2>/dev/null | grep -E '^fencepolicy.feedguard.io/(in)?valid-')"
  # shellcheck disable=SC2086 # one argument per object name
  [[ -z "$objs" ]] || kc delete $objs --ignore-not-found --wait=false >/dev/null 2>&1
  rm -rf "$WORK"
}

# apply FILE — `kubectl apply`; its output in $OUT. Every sample is named valid-* or invalid-*.
apply() { OUT="$(kc apply -f "$1" 2>&1)"; }

# ---- install the CRD ---------------------------------------------------------------------
kc apply -f "$CRD" || fail "kubectl apply -f $CRD failed"
kc wait --for=condition=Established --timeout=60s crd/fencepolicies.feedguard.io ||
  fail "the CRD did not become Established"
pass "CRD installed and Established"

# Every property in the schema has a description (so kubectl explain teaches the API).
missing="$(kc get crd fencepolicies.feedguard.io -o json | jq -r '
  .spec.versions[0].schema.openAPIV3Schema as $s
  | [$s | paths(type == "object" and has("properties")) as $p | $s | getpath($p).properties
     | to_entries[] | select(.key != "metadata" and (.value.description // "") == "") | .key]
  + [$s | paths(type == "object" and has("items")) as $p | $s | getpath($p).items
     | select((.description // "") == "") | "items"] | unique | join(",")')"
if [[ -z "$missing" ]]; then pass "every schema field has a description"; else bad "fields without description: $missing"; fi

# ---- invalid objects ---------------------------------------------------------------------
n_invalid=0
for f in "$HERE"/invalid/*.yaml; do
  n_invalid=$((n_invalid + 1))
  name="$(basename "$f")"
  expect="$(sed -n 's/^# expect: //p' "$f")" line=""
  [[ -n "$expect" ]] || { bad "$name has no '# expect:' line"; continue; }
  if apply "$f"; then
    bad "$name was accepted; expected a rejection naming $expect"
    continue
  fi
  # The field must be named as an error's subject: "FIELD: ...", "FIELD[i]..." or "FIELD" quoted.
  line="$(grep -F -e "$expect:" -e "${expect}[" -e "\"$expect\"" <<<"$OUT" | head -1)"
  if [[ -n "$line" ]]; then
    pass "$name rejected: $(sed 's/^.*is invalid: //; s/^\* //; s/^.*strict decoding error: //' <<<"$line" | cut -c1-140)"
  else
    bad "$name rejected, but the error does not name '$expect': $OUT"
  fi
done
((n_invalid >= 20)) || bad "only $n_invalid invalid samples (want >= 20)"
leaked="$(kc get fencepolicies -o name 2>/dev/null | grep -c '/invalid-')"
if [[ "$leaked" == 0 ]]; then pass "no invalid object was stored"; else bad "$leaked invalid objects were stored"; fi

# ---- valid objects -----------------------------------------------------------------------
for f in "$HERE"/valid/*.yaml; do
  name="$(basename "$f")"
  if apply "$f"; then pass "$name accepted"; else bad "$name rejected: $OUT"; fi
done

got="$(kc get fp valid-minimal -o jsonpath='{.spec.mode} {.spec.priority} {.spec.trainers.cpu.placement} {.spec.trainers.cpu.numa} {.spec.neighbours.fence}')"
if [[ "$got" == "Enforce 0 WholeCores PreferGPULocal Idle" ]]; then
  pass "defaults filled: $got"
else
  bad "defaults: got '$got', want 'Enforce 0 WholeCores PreferGPULocal Idle'"
fi
got="$(kc get fp valid-dryrun-threads -o jsonpath='{.spec.mode} {.spec.trainers.cpu.placement} {.spec.trainers.cpu.numa} {.spec.neighbours.fence}')"
if [[ "$got" == "DryRun Threads RequireGPULocal Cpuset" ]]; then pass "explicit values kept: $got"; else bad "explicit values: got '$got'"; fi

# ---- kubectl explain (the OpenAPI document is published a moment after Established) ------
explained=""
for ((i = 0; i < 60; i++)); do
  explained="$(kc explain fencepolicy.spec.trainers 2>&1)" && grep -q "podSelector" <<<"$explained" && break
  sleep 1
done
if grep -q "The pods to protect" <<<"$explained" && grep -q "podSelector" <<<"$explained" &&
  grep -q "namespaceSelector" <<<"$explained" && grep -q "cpu" <<<"$explained"; then
  pass "kubectl explain fencepolicy.spec.trainers prints descriptions"
else
  bad "kubectl explain fencepolicy.spec.trainers: $explained"
fi
out="$(kc explain fp.spec.neighbours.fence 2>&1)"
if grep -q "SCHED_IDLE" <<<"$out" && grep -qE "Idle.*Weight.*Cpuset.*Quota|ENUM" <<<"$out"; then
  pass "kubectl explain fp.spec.neighbours.fence documents the values"
else
  bad "kubectl explain fp.spec.neighbours.fence: $out"
fi

# ---- status subresource and printer columns ----------------------------------------------
status='{"status":{"observedGeneration":1,"nodes":{"matched":3,"enforced":2,"failed":1,"stale":0},
  "trainers":{"protected":5,"starved":0},"neighbours":{"fenced":17},
  "failures":[{"node":"gpu-17","reason":"CgroupNotFound","message":"no pod cgroup","since":"2025-01-01T00:00:00Z"}],
  "conditions":[{"type":"Ready","status":"False","reason":"NodesFailed","message":"1 of 3 nodes failed",
  "lastTransitionTime":"2025-01-01T00:00:00Z","observedGeneration":1}]}}'
if out="$(kc patch fp valid-minimal --subresource=status --type=merge -p "$status" 2>&1)"; then
  pass "status written through the /status subresource"
else
  bad "status patch failed: $out"
fi
out="$(kc patch fp valid-minimal --type=merge -p '{"status":{"nodes":{"matched":99}}}' 2>&1)"
got="$(kc get fp valid-minimal -o jsonpath='{.status.nodes.matched}')"
if [[ "$got" == 3 ]]; then pass "a status change through the main resource is ignored"; else bad "status.nodes.matched is '$got' after a main-resource patch ($out)"; fi

table="$(kc get fp 2>&1)"
echo "$table"
header="$(head -1 <<<"$table" | tr -s ' ')"
row="$(grep '^valid-minimal ' <<<"$table" | tr -s ' ')"
if [[ "$header" == "NAME MODE NODES ENFORCED TRAINERS READY REASON AGE" ]]; then pass "kubectl get fp columns: $header"; else bad "kubectl get fp header: '$header'"; fi
if [[ "$row" =~ ^valid-minimal\ Enforce\ 3\ 2\ 5\ False\ NodesFailed\ [0-9]+[smh] ]]; then pass "kubectl get fp row: $row"; else bad "kubectl get fp row: '$row'"; fi
wide="$(kc get fp -o wide 2>&1 | head -1 | tr -s ' ')"
if [[ "$wide" == *PRIORITY* ]]; then pass "kubectl get fp -o wide adds PRIORITY"; else bad "wide header: $wide"; fi
n="$(kc get feedguard -o name 2>/dev/null | grep -c 'fencepolicy.feedguard.io/valid-')"
if [[ "$n" -ge 5 ]]; then pass "category 'feedguard' lists the policies ($n)"; else bad "kubectl get feedguard found $n policies"; fi

# failures_rejected DESC LIST — a status patch with failures = LIST must be refused, naming
# status.failures.
failures_rejected() {
  local out
  if out="$(kc patch fp valid-minimal --subresource=status --type=merge -p "{\"status\":{\"failures\":$2}}" 2>&1)"; then
    bad "$1 were accepted"
  elif grep -q "status.failures" <<<"$out"; then
    pass "$1 rejected: $(grep -o 'status.failures[^,]*' <<<"$out" | head -1)"
  else
    bad "$1 rejected without naming status.failures: $out"
  fi
}
# A failures list over its bound is rejected.
failures_rejected "33 failures" "$(jq -cn '[range(33) | {node: "n\(.)", reason: "CgroupNotFound"}]')"
# failures is a list-map keyed by node: two entries for one node are rejected (the controller
# merges a node's failed pods into one entry for this reason).
failures_rejected "two failures for one node" \
  '[{"node":"gpu-1","reason":"CgroupNotFound"},{"node":"gpu-1","reason":"WriteFailed"}]'
out="$(kc patch fp valid-minimal --subresource=status --type=merge -p '{"status":{"conditions":[{"type":"Ready","status":"Maybe","reason":"X","message":"","lastTransitionTime":"2025-01-01T00:00:00Z"}]}}' 2>&1)"
if grep -q 'status.conditions\[0\].status' <<<"$out"; then pass "condition status outside True|False|Unknown rejected"; else bad "bad condition status: $out"; fi

echo "crd_test: $PASSED passed, $FAILED failed ($n_invalid invalid samples)"
((FAILED == 0))
