#!/bin/bash
# lib.sh — shared by the VM node's guest scripts (sourced): the shape, paths, logging, kubectl,
# waiting, and where kubelet's systemd driver puts a pod's cgroup.
# shellcheck disable=SC1091
source /fg/shape.env
export PATH="$RUNTIME_BIN:/fg/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export KUBECONFIG=/fg/etc/admin.kubeconfig
OUT=/fg/out
RNS=feedguard-system
RELEASE=fg
NS=fg-shape
CG=/sys/fs/cgroup
# The knob files of this cgroup version (agent/cgroup/kernel_facts.h has the same names).
WEIGHT_FILE=cpu.weight QUOTA_FILE=cpu.max MIN_WEIGHT=1
if [[ "$CGROUP" == v1 ]]; then
  CG=/sys/fs/cgroup/cpu WEIGHT_FILE=cpu.shares QUOTA_FILE=cpu.cfs_quota_us MIN_WEIGHT=2
fi
G0=$(date +%s)
say() { printf '[guest %(%H:%M:%S)T +%4ds] %s\n' -1 "$(($(date +%s) - G0))" "$*"; }
FAILED=0
bad() { say "FAIL: $*"; FAILED=$((FAILED + 1)); }
fail() { say "FAIL (fatal): $*"; FAILED=$((FAILED + 1)); exit 1; }
pass() { say "ok: $*"; }
now_ns() { date +%s%N; }
K() { kubectl --request-timeout=60s "$@"; }
# wait_until SECONDS WHAT CMD... — polls CMD every 0.5 s; returns 1 (after bad) on timeout.
wait_until() {
  local limit="$1" what="$2" t=$SECONDS
  shift 2
  until "$@"; do
    if ((SECONDS - t >= limit)); then bad "$what: not within ${limit}s"; return 1; fi
    sleep 0.5
  done
  say "$what after $((SECONDS - t)) s"
}
# observe KIND JSON — one line of observations.jsonl (analyze.py reads them).
observe() { printf '{"t_ns": %s, "kind": "%s", "data": %s}\n' "$(now_ns)" "$1" "$2" >>"$OUT/observations.jsonl"; }

# pod_uid NAME; pod_qos NAME
pod_uid() { K -n "$NS" get pod "$1" -o jsonpath='{.metadata.uid}'; }
pod_qos() { K -n "$NS" get pod "$1" -o jsonpath='{.status.qosClass}'; }
# pod_dir NAME — the pod's cgroup dir (cpu controller) as kubelet's systemd driver names it.
# Cached per pod (kubectl under tcg takes seconds; a pod's uid and QoS class never change):
# cache_pod_dirs fills the cache for every pod of $NS with one kubectl call.
declare -A POD_DIR=()
slice_of() {  # UID QOS
  local u="${1//-/_}"
  case "$2" in
    Guaranteed) echo "$CG/kubepods.slice/kubepods-pod$u.slice" ;;
    Burstable) echo "$CG/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$u.slice" ;;
    BestEffort) echo "$CG/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod$u.slice" ;;
  esac
}
cache_pod_dirs() {
  local name uid qos
  while read -r name uid qos; do
    [[ -n "$qos" ]] && POD_DIR[$name]="$(slice_of "$uid" "$qos")"
  done < <(K -n "$NS" get pods -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid} {.status.qosClass}{"\n"}{end}')
}
pod_dir() {
  [[ -n "${POD_DIR[$1]:-}" ]] || POD_DIR[$1]="$(slice_of "$(pod_uid "$1")" "$(pod_qos "$1")")"
  echo "${POD_DIR[$1]}"
}
# cpuset_dir DIR — the same cgroup in the cpuset hierarchy (v1) or DIR itself (v2).
cpuset_dir() { if [[ "$CGROUP" == v1 ]]; then echo "/sys/fs/cgroup/cpuset${1#/sys/fs/cgroup/cpu}"; else echo "$1"; fi; }
unit_of() { basename "$1"; }
