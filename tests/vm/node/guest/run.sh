#!/bin/bash
# run.sh — the guest's entry point (fg-guest.service): node up, chart installed, then
# scenario_$SCENARIO.sh; logs and observations to /fg/out; the exit marker to /dev/ttyS1;
# power off. Exit status of the scenario = FAILED count (0 pass).
mkdir -p /fg/out
exec > >(tee -a /fg/out/guest.log) 2>&1
# shellcheck source=lib.sh
source /fg/guest/lib.sh
# shellcheck source=node_up.sh
source /fg/guest/node_up.sh

finish() {
  local rc=$?
  ((rc == 0 && FAILED > 0)) && rc=1
  say "scenario $SCENARIO: $FAILED failure(s), exit $rc; collecting logs"
  for u in kubelet containerd kube-proxy; do journalctl -u "$u" --no-pager >"$OUT/$u.log" 2>&1; done
  journalctl -b --no-pager -o short-monotonic >"$OUT/journal.log" 2>&1
  cp -r /var/log/pods "$OUT/pods" 2>/dev/null
  echo "FEEDGUARD_VM_EXIT $(cat /fg/nonce) $rc" >/dev/ttyS1
  sync
  systemctl poweroff --no-block
}
trap finish EXIT

node_up
# shellcheck disable=SC1090
source "/fg/guest/scenario_$SCENARIO.sh"
exit 0  # the scenario's checks counted into FAILED; finish turns a count into the exit status
