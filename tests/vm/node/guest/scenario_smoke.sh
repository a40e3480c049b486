#!/bin/bash
# scenario_smoke.sh — the chart on the systemd node: one Idle fence applied and reverted.
helm_install
K create namespace "$NS" >/dev/null
K -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: nb, labels: {app: nb}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: feedguard.local/busybox:1, imagePullPolicy: Never, command: [sleep, "3600"],
     resources: {requests: {cpu: 250m}, limits: {cpu: "1"}}}
YAML
wait_until 300 "pod nb Running" bash -c "[[ \$(kubectl -n $NS get pod nb -o jsonpath='{.status.phase}') == Running ]]" || exit 1
d="$(pod_dir nb)"
say "pod dir $d: cpu.idle $(cat "$d/cpu.idle") cpu.weight $(cat "$d/cpu.weight")"
systemctl show "$(unit_of "$d")" -p CPUWeight -p ControlGroup
# Who may set a unit property: root with and without capabilities, on the system bus and on
# systemd's private socket (the agent runs as uid 0 with every capability dropped).
unit="$(unit_of "$d")"
setprop() {  # ADDRESS VALUE [setpriv args...]
  local addr="$1" v="$2"
  shift 2
  "$@" busctl --address="$addr" call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
    org.freedesktop.systemd1.Manager SetUnitProperties 'sba(sv)' "$unit" true 1 CPUWeight t "$v" 2>&1
}
nocap=(setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all --)
for addr in unix:path=/run/dbus/system_bus_socket unix:path=/run/systemd/private; do
  out="$(setprop "$addr" 0 "${nocap[@]}")"; say "no caps, $addr, CPUWeight=idle: rc=$? '$out' -> cpu.idle $(cat "$d/cpu.idle")"
  out="$(setprop "$addr" 39)"; say "all caps, $addr, CPUWeight=39: rc=$? '$out' -> cpu.idle $(cat "$d/cpu.idle") weight $(cat "$d/cpu.weight")"
  out="$(setprop "$addr" 0)"; say "all caps, $addr, CPUWeight=idle: rc=$? '$out' -> cpu.idle $(cat "$d/cpu.idle") weight $(cat "$d/cpu.weight")"
  keep=(setpriv --bounding-set=-all,+sys_admin --inh-caps=-all --ambient-caps=-all --)
  out="$(setprop "$addr" 39 "${keep[@]}")"; say "CAP_SYS_ADMIN only, $addr, CPUWeight=39: rc=$? '$out' -> cpu.idle $(cat "$d/cpu.idle") weight $(cat "$d/cpu.weight")"
done
systemctl daemon-reload
say "after daemon-reload: cpu.idle $(cat "$d/cpu.idle") weight $(cat "$d/cpu.weight"); $(systemctl show "$unit" -p CPUWeight)"
ls /run/systemd/system.control/ 2>/dev/null | head; cat /run/systemd/system.control/"$unit".d/* 2>/dev/null
