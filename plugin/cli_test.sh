#!/usr/bin/env bash
# cli_test.sh — kubectl-feedguard's flags and its failures before any API answer: bad flags exit
# 2 naming what is wrong (nothing dialled), --help lists the global flags, a kubeconfig that is
# absent or lacks the --context exits 1 saying so, and a server that refuses connections exits 1
# naming it (127.0.0.1:1, loopback only). Usage: cli_test.sh KUBECTL_FEEDGUARD
set -uo pipefail
bin=$1
[[ -x "$bin" ]] || { echo "FAIL - no binary at $bin"; exit 1; }
pass=0 fail=0
ok() { echo "ok   - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KUBECONFIG="$work/kubeconfig" HOME="$work"
cat >"$KUBECONFIG" <<'KC'
apiVersion: v1
kind: Config
current-context: refused
clusters:
- {name: refused, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}
users: [{name: u, user: {token: t}}]
contexts: [{name: refused, context: {cluster: refused, user: u, namespace: ml}}]
KC

exits() {  # exits CODE WANT-IN-STDERR ARGS... — exit CODE within 20 s, stderr holds WANT
  local code=$1 want=$2 err rc
  shift 2
  err=$(timeout 20 "$bin" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq $code && "$err" == *"$want"* ]]; then
    ok "$* → exit $code: ${err%%$'\n'*}"
  else
    bad "$* → exit $rc, stderr: $err (want exit $code naming '$want')"
  fi
}
exits 2 'A subcommand is required'
exits 2 '--output: yaml not in {table,json}' top -o yaml
exits 2 '--limit: "-3" is not a whole number, 0 or more' top --limit=-3
exits 2 '--limit' top --limit many
exits 2 'POD is required' explain
exits 2 '--output: table not in {yaml,json}' explain x -o table
exits 2 '--no-such-flag' top --no-such-flag
exits 2 'unknown command "frobnicate": want top or explain' frobnicate
exits 2 'unknown command "topp"' -n ml topp
exits 1 "kubeconfig has no context named 'nope'" --context nope top
exits 1 "cannot read $work/absent" --kubeconfig "$work/absent" top
exits 1 'cannot reach the API server at https://127.0.0.1:1' top
exits 1 'cannot reach the API server at https://127.0.0.1:1' explain trainer-0

out=$(timeout 20 "$bin" --help 2>&1)
rc=$?
if [[ $rc -eq 0 && "$out" == *--kubeconfig* && "$out" == *--context* && "$out" == *--namespace* &&
      "$out" == *--all-namespaces* && "$out" == *top* && "$out" == *explain* ]]; then
  ok "--help lists the global flags and both commands"
else
  bad "--help → exit $rc: $out"
fi
out=$(timeout 20 "$bin" top --help 2>&1)
if [[ "$out" == *"--limit"* && "$out" == *"table,json"* ]]; then ok "top --help"; else bad "top --help: $out"; fi

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
