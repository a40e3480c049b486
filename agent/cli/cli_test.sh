#!/usr/bin/env bash
# cli_test.sh — feedguard-agent's local commands on a plain-directory cgroup tree (no root, no
# kernel): bad input creates nothing on disk (not even the state dir), `plan` never does, error
# messages stay bounded, a protected pod in a fence is not a failure, a CPU manager state naming
# CPUs the machine lacks is refused; JSON keys are camelCase; flags are typed and checked (exit 2).
# Usage: cli_test.sh FEEDGUARD_AGENT TOPOLOGY_XML
set -euo pipefail
agent=$1 topo=$2
[[ -x "$agent" ]] || { echo "FAIL - no agent binary at $agent"; echo "0 passed, 1 failed"; exit 1; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { echo "ok   - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

for c in cpu cpuacct cpuset; do
  mkdir -p "$t/m/$c/kubepods/burstable/podu1/c1" "$t/m/$c/kubepods/burstable/podsys/c1"
  echo 1024 >"$t/m/$c/kubepods/burstable/podu1/cpu.shares"
  echo 1024 >"$t/m/$c/kubepods/burstable/podsys/cpu.shares"
done
fence() {  # fence NAME POD_JSON...
  local name=$1; shift
  local pods; pods=$(IFS=,; echo "$*")
  printf '{"nodeName":"n","version":"1","policies":[{"name":"p","neighbourFence":"WEIGHT"}],"neighbours":[%s]}\n' "$pods" >"$t/$name"
}
pod() { printf '{"policy":"p","pod":{"uid":"%s","namespace":"%s","name":"%s","qosClass":"BURSTABLE"}}' "$1" "$2" "$1"; }
run() {  # run CMD FENCE [extra flags] → rc in $rc, stdout $t/out, stderr $t/err
  local cmd=$1 f=$2; shift 2
  set +e
  "$agent" "$cmd" --fence "$t/$f" --cgroup-mount "$t/m" --cgroup-version v1 --cgroup-driver cgroupfs \
    --state-dir "$t/state" --topology-xml "$topo" --cpu-manager-state "" "$@" >"$t/out" 2>"$t/err"
  rc=$?
  set -e
}

fence known.json "$(pod u1 ns)"
run plan known.json
[[ $rc == 0 ]] && ok "plan of a known pod exits 0" || bad "plan exit $rc: $(cat "$t/err")"
[[ ! -e $t/state ]] && ok "plan creates no state dir" || bad "plan created $t/state"

fence unknown.json "$(pod u1 ns)" "$(pod nope ns)"
run apply unknown.json
[[ $rc == 2 ]] && ok "apply naming a pod without cgroups exits 2" || bad "apply exit $rc"
[[ ! -e $t/state ]] && ok "rejected apply creates no state dir" || bad "rejected apply created $t/state"
[[ $(cat "$t/u1shares" 2>/dev/null || cat "$t/m/cpu/kubepods/burstable/podu1/cpu.shares") == 1024 ]] \
  && ok "rejected apply wrote nothing" || bad "rejected apply wrote cpu.shares"

python3 - "$t/many.json" <<'PY'
import json, sys
pods = [{"policy": "p", "pod": {"uid": f"gone-{i}", "namespace": "ns", "name": f"gone-{i}",
                                "qosClass": "BURSTABLE"}} for i in range(40000)]
json.dump({"nodeName": "n", "version": "1", "policies": [{"name": "p"}], "neighbours": pods},
          open(sys.argv[1], "w"))
PY
run apply many.json
size=$(wc -c <"$t/err")
[[ $rc == 2 && $size -lt 16384 ]] && ok "40000 unknown pods: exit 2, a ${size}-byte message" \
  || bad "40000 unknown pods: exit $rc, ${size}-byte message"
grep -q "first 20 of 40000" "$t/err" && ok "the message says how many it left out" || bad "no count in: $(head -c 300 "$t/err")"

echo '{"policyName":"static","defaultCpuSet":"0-1","entries":{"x":{"main":"900-901"}},"checksum":1}' >"$t/cm"
run plan known.json --cpu-manager-state "$t/cm"
[[ $rc == 2 ]] && grep -q "does not have" "$t/err" && ok "CPU manager state naming absent CPUs is refused" \
  || bad "cpu manager state: exit $rc: $(cat "$t/err")"

fence protected.json "$(pod sys kube-system)"
run apply protected.json
[[ $rc == 0 ]] && ok "a protected pod in a fence is not a failure (exit 0)" || bad "protected: exit $rc: $(head -c 400 "$t/out")"
grep -q '"reason": "ProtectedPod"' "$t/out" && ok "the protected pod is reported as such" || bad "no ProtectedPod in report"

# Issue 15 (small): a bad topology file gets a message naming what is wrong, and `topology` and
# `plan` exit with the same code for it.
printf 'pack:2 core:4 pu:2\n' >"$t/synthetic.txt"
printf '<?xml version="1.0"?><svg></svg>\n' >"$t/svg.xml"
printf '<topology>nope\n' >"$t/malformed.xml"
for spec in "synthetic.txt:not an XML file" "svg.xml:without a <topology> element" \
            "malformed.xml:malformed" "absent.xml:cannot open"; do
  file=${spec%%:*} want=${spec#*:}
  set +e
  "$agent" topology --topology-xml "$t/$file" >/dev/null 2>"$t/topo_err"
  topo_rc=$?
  set -e
  run plan known.json --topology-xml "$t/$file"
  if [[ $topo_rc != 0 && $topo_rc == "$rc" ]] && grep -qF "$want" "$t/topo_err" && grep -qF "$want" "$t/err"; then
    ok "$file: topology and plan both exit $rc saying \"$want\""
  else
    bad "$file: topology exit $topo_rc ($(head -c 200 "$t/topo_err")), plan exit $rc ($(head -c 200 "$t/err"))"
  fi
done

# Issue 16: the CLI's JSON uses one key casing (camelCase) everywhere.
snake_keys() {  # snake_keys FILE → the snake_case keys in the JSON file, if any
  python3 -c '
import json, sys
bad = set()
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if "_" in k: bad.add(k)
            walk(x)
    elif isinstance(v, list):
        for x in v: walk(x)
walk(json.load(open(sys.argv[1])))
print(" ".join(sorted(bad)))' "$1"
}
run plan known.json
cp "$t/out" "$t/plan.json"
run apply protected.json
cp "$t/out" "$t/apply.json"
"$agent" topology --json --topology-xml "$topo" >"$t/topo.json"
for f in plan apply topo; do
  keys=$(snake_keys "$t/$f.json")
  [[ -z $keys ]] && ok "$f JSON has camelCase keys only" || bad "$f JSON has snake_case keys: $keys"
done
grep -q '"offLimits"' "$t/plan.json" && grep -q '"numaNodes"' "$t/topo.json" \
  && ok "plan and topology JSON name offLimits / numaNodes" || bad "plan/topology keys: $(head -c 300 "$t/plan.json")"

# Issue 16: subcommands and typed flag values through CLI11; bad values exit 2 naming the flag.
expect() {  # expect RC WHAT GREP_STDERR_OR_- ARGS... (runs the agent itself)
  local want=$1 what=$2 pat=$3; shift 3
  set +e
  "$agent" "$@" >"$t/out" 2>"$t/err"
  rc=$?
  set -e
  if [[ $rc == "$want" ]] && { [[ $pat == - ]] || grep -qF -- "$pat" "$t/err"; }; then
    ok "$what (exit $rc)"
  else
    bad "$what: exit $rc, want $want: $(head -c 300 "$t/err")"
  fi
}
expect 2 "no command prints the overview and fails" -
grep -q "revert" "$t/out" && ok "the overview lists the commands" || bad "overview: $(head -c 300 "$t/out")"
expect 0 "help prints the overview" - help
expect 2 "an unknown command is refused" 'unknown command "frobnicate"' frobnicate
expect 0 "apply --help" - apply --help
grep -q -- "--fence" "$t/out" && grep -q -- "--state-dir" "$t/out" && ok "apply --help lists --fence and the node flags" \
  || bad "apply --help: $(head -c 300 "$t/out")"
expect 2 "an unknown flag is refused" "--bogus" plan --fence "$t/known.json" --bogus 1
expect 2 "a stray argument is refused" "stray" topology --topology-xml "$topo" stray
expect 2 "a flag of another command is refused" "--json" plan --fence "$t/known.json" --json
expect 2 "--report-interval-ms abc is refused" "--report-interval-ms" \
  run --controller 127.0.0.1:1 --node-name n --report-interval-ms abc --state-dir "$t/run-state"
expect 2 "--verify-interval-ms=-1 is refused" "--verify-interval-ms" \
  run --controller 127.0.0.1:1 --node-name n --verify-interval-ms=-1 --state-dir "$t/run-state"
expect 2 "run without --controller is refused" "--controller" run --node-name n --state-dir "$t/run-state"
expect 2 "run with an empty --controller= is refused" "--controller" \
  run --controller= --node-name n --state-dir "$t/run-state"
# Issue 30: the observe flags, held to their ranges (--observe=false still checks the others).
expect 2 "--observe-period-s 0 is refused" "--observe-period-s" \
  run --controller 127.0.0.1:1 --node-name n --observe-period-s 0 --state-dir "$t/run-state"
expect 2 "--observe-period-s 301 is refused" "--observe-period-s" \
  run --controller 127.0.0.1:1 --node-name n --observe-period-s 301 --state-dir "$t/run-state"
expect 2 "--observe-top-k 9 (over the wire's 8) is refused" "--observe-top-k" \
  run --controller 127.0.0.1:1 --node-name n --observe=false --observe-top-k 9 --state-dir "$t/run-state"
expect 2 "--observe=bogus is refused" "--observe" \
  run --controller 127.0.0.1:1 --node-name n --observe=bogus --state-dir "$t/run-state"
expect 2 "--observe is a run flag only" "--observe" plan --fence "$t/known.json" --observe
expect 0 "run --help" - run --help
grep -q -- "--observe-period-s" "$t/out" && grep -q -- "--observe-top-k" "$t/out" \
  && grep -q -- "--host-proc TEXT=/proc" "$t/out" \
  && ok "run --help lists the observe flags (--host-proc defaults to /proc)" \
  || bad "run --help: $(grep -c observe "$t/out") observe lines"
expect 2 "--host-proc is a run flag only" "--host-proc" plan --fence "$t/known.json" --host-proc /host/proc
[[ ! -e $t/run-state ]] && ok "refused runs create no state dir" || bad "a refused run created $t/run-state"
expect 2 "--cgroup-driver bogus is refused" "--cgroup-driver" topology --topology-xml "$topo" --cgroup-driver bogus
expect 2 "--reserved-cpus x is refused" "--reserved-cpus" topology --topology-xml "$topo" --reserved-cpus x
run plan known.json --cpu-manager-state=
[[ $rc == 0 ]] && ok "--cpu-manager-state= (empty after =) is accepted" || bad "--cpu-manager-state=: exit $rc: $(cat "$t/err")"
run plan known.json --topology-xml "$t/absent.xml" --topology-xml "$topo"
[[ $rc == 0 ]] && ok "a flag given twice: the last value wins" || bad "flag twice: exit $rc: $(cat "$t/err")"

echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
