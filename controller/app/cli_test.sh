#!/usr/bin/env bash
# cli_test.sh — feedguard-controller's flags, typed and checked by CLI11 before anything starts:
# a bad value exits 2 naming the flag and what it wants (nothing dialled, nothing listened on),
# --help lists every flag with its default, the last of a repeated flag wins.
# Usage: cli_test.sh FEEDGUARD_CONTROLLER
set -uo pipefail
ctl=$1
[[ -x "$ctl" ]] || { echo "FAIL - no controller binary at $ctl"; exit 1; }
pass=0 fail=0
ok() { echo "ok   - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }
refused() {  # refused WANT-IN-STDERR ARGS... — exit 2 within 5 s, stderr names WANT
  local want=$1 err rc
  shift
  err=$(timeout 5 "$ctl" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 2 && "$err" == *"$want"* ]]; then
    ok "$* → exit 2: $err"
  else
    bad "$* → exit $rc, stderr: $err (want exit 2 naming '$want')"
  fi
}
refused '--stale-after-ms: "abc" is not a whole number' --insecure --stale-after-ms=abc
refused '--status-interval-ms: "-1" is not a whole number' --insecure --status-interval-ms=-1
refused '--list-page-size: "100001" is not a whole number from 0 to 100000' --insecure --list-page-size 100001
refused '--max-fence-bytes: "1023" is not a whole number from 1024' --insecure --max-fence-bytes=1023
refused '--agent-memory-quota-mb' --insecure --agent-memory-quota-mb=1048577
refused '--agent-identity: foo not in {token,cert,shared-cert}' --insecure --agent-identity=foo
refused '--log-level' --insecure --log-level=loud
refused '--no-such-flag' --insecure --no-such-flag
refused '--tls-cert, --tls-key and --tls-client-ca are required' --agent-identity=token
refused '--gpu-resource-names: GPU resource name "gpu" is not <domain>/<name>' --insecure --kubeconfig=/nonexistent --gpu-resource-names=nvidia.com/gpu,gpu
refused '--lease-duration-ms: "500" is not a whole number from 1000' --insecure --lease-duration-ms=500
refused 'leader election needs --retry-period-ms (2000) < --renew-deadline-ms (10000) < --lease-duration-ms (5000)' --insecure --kubeconfig=/nonexistent --lease-duration-ms=5000
refused '--standby-arm-after-ms (15000) must be < --lease-duration-ms (15000), or 0 (never)' --insecure --kubeconfig=/nonexistent --standby-arm-after-ms=15000
refused '--standby-arm-after-ms: Value -2 not in range' --insecure --standby-arm-after-ms=-2
# A repeated flag is accepted (the last value wins, as kubectl and kubelet do; every value given
# is checked): parsing passes and the controller fails later, on the missing kubeconfig.
err=$(timeout 5 "$ctl" --insecure --list-page-size=7 --list-page-size=5 --kubeconfig=/nonexistent 2>&1)
if [[ "$err" != *"list-page-size"* && "$err" == *"/nonexistent"* ]]; then
  ok "a repeated flag is accepted ($err)"
else
  bad "a repeated flag: $err"
fi
help=$("$ctl" --help 2>&1)
rc=$?
missing=""
for f in kubeconfig listen-grpc metrics-addr leader-elect lease-namespace lease-name identity \
  lease-duration-ms renew-deadline-ms retry-period-ms standby-arm-after-ms \
  tls-cert tls-key tls-client-ca insecure agent-identity agent-token-audience \
  agent-service-account suspend agent-namespace stale-after-ms agent-memory-quota-mb \
  list-page-size list-encoding status-interval-ms max-fence-bytes max-fence-containers-per-pod \
  gpu-resource-names log-level; do
  grep -q -- "--$f\b" <<<"$help" || missing+=" --$f"
done
if [[ $rc -eq 0 && -z "$missing" && "$help" == *"--stale-after-ms INT=60000"* ]]; then
  ok "--help: exit 0, every flag listed with its default"
else
  bad "--help: exit $rc, missing:$missing"
fi
echo "$pass passed, $fail failed"
((fail == 0))
