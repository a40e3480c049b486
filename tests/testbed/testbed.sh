#!/usr/bin/env bash
# testbed.sh — runs a real etcd + kube-apiserver on loopback for the `apiserver` test tier.
#
#   testbed.sh up DIR                 certificates, etcd, kube-apiserver; waits for /readyz;
#                                     writes DIR/kubeconfig (admin, embedded certs),
#                                     DIR/kubeconfig-paths (same, file references) and DIR/env
#   testbed.sh down DIR               stops exactly the processes `up` started, removes DIR
#   testbed.sh restart-apiserver DIR  stops and restarts kube-apiserver only (same port, same etcd)
#   testbed.sh stop-apiserver DIR     stops kube-apiserver only (etcd keeps running), and
#   testbed.sh start-apiserver DIR    starts it again on its port: the two halves of a restart,
#                                     for writes straight into etcd that no watch may see
#   testbed.sh compact DIR            compacts etcd at its current revision (old resourceVersions
#                                     then answer 410 Gone / "too old resource version")
#   testbed.sh status DIR             exits 0 when both processes run and /readyz answers
#
# Binaries come from build.sh's cache (${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}/bin/...) or from
# FEEDGUARD_KUBE_APISERVER / FEEDGUARD_ETCD. Extra kube-apiserver flags: FEEDGUARD_APISERVER_FLAGS
# (word-split), e.g. "--watch-cache=false" so that watches are served from etcd directly.
# Everything binds 127.0.0.1; ports are picked free at random and retried when taken.
#
# Opt-ins for a test bed with a real node (tests/node/cluster.sh); unset, nothing changes:
#   FEEDGUARD_TESTBED_SA_ADMISSION=1   keep the ServiceAccount admission plugin (pods then get
#                                      their projected API token; needs kube-controller-manager
#                                      to create the `default` ServiceAccounts)
#   FEEDGUARD_TESTBED_ADVERTISE_ADDRESS=IP   kube-apiserver binds 0.0.0.0 and advertises IP (the
#                                      `kubernetes` Service's endpoint, reached by pods); the
#                                      serving certificate also names IP. Run it inside a network
#                                      namespace of your own: 0.0.0.0 means every address there.
#   FEEDGUARD_TESTBED_CGROUP=DIR       a cgroup directory the caller made: etcd and kube-apiserver
#                                      (also when restarted later) are moved into it
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
READY_TIMEOUT_S="${FEEDGUARD_TESTBED_READY_TIMEOUT_S:-120}"

log() { printf '[testbed %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- processes ---------------------------------------------------------------------------
# is_ours PID DIR — PID is alive and its command line mentions DIR (guards against PID reuse).
is_ours() {
  local pid="$1" dir="$2"
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/"
}

# stop_pid NAME PID DIR — TERM, wait up to 15 s, then KILL; only if the PID is ours.
stop_pid() {
  local name="$1" pid="$2" dir="$3" i
  if ! is_ours "$pid" "$dir"; then
    [[ -n "$pid" ]] && log "$name (pid $pid) is not running (or not ours); nothing to stop"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    is_ours "$pid" "$dir" || return 0
    sleep 0.1
  done
  log "$name (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    is_ours "$pid" "$dir" || return 0
    sleep 0.1
  done
  die "$name (pid $pid) did not exit"
}

# spawn LOG CMD... — starts CMD in its own session, detached from our stdio (so a CTest fixture
# step can exit while the server keeps running); prints its PID once the child runs CMD (or has
# exited). Until its exec the child is a copy of this shell, whose command line names no file
# of the test bed: is_ours would take it for a server that already exited (a start-up
# "exited during start-up" with an empty log, seen once in the node tier on a loaded machine).
spawn() {
  local logf="$1" pid me shell i; shift
  setsid "$@" </dev/null >>"$logf" 2>&1 &
  pid=$!
  me=$BASHPID
  shell="$(tr '\0' ' ' <"/proc/$me/cmdline")"
  for ((i = 0; i < 400; i++)); do
    [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == "$shell" ]] || break
    sleep 0.005
  done
  # FEEDGUARD_TESTBED_CGROUP: a cgroup directory the caller made (tests/node/cluster.sh: the node's
  # daemons' cgroup); the server and all its threads move there.
  if [[ -n "${FEEDGUARD_TESTBED_CGROUP:-}" ]]; then
    echo "$pid" >"$FEEDGUARD_TESTBED_CGROUP/cgroup.procs" 2>/dev/null ||
      log "WARNING: could not move pid $pid into $FEEDGUARD_TESTBED_CGROUP"
  fi
  echo "$pid"
}

# ---- ports -------------------------------------------------------------------------------
port_in_use() {
  if command -v ss >/dev/null; then
    [[ -n "$(ss -Htan "sport = :$1" 2>/dev/null)" ]]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

# free_port — a random port below the kernel's ephemeral range that nothing uses right now.
# Callers still retry when the bind loses a race.
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    if ! port_in_use "$p"; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found in 200 tries"
}

# ---- certificates ------------------------------------------------------------------------
gen_pki() {
  local pki="$1"
  mkdir -p "$pki"
  chmod 700 "$pki"
  (
    cd "$pki"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 7 -subj "/CN=feedguard-testbed-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    # sign NAME SUBJECT EXTENSIONS
    sign() {
      openssl req -new "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1${FEEDGUARD_TESTBED_ADVERTISE_ADDRESS:+,IP:$FEEDGUARD_TESTBED_ADVERTISE_ADDRESS}"
    sign admin "/O=system:masters/CN=feedguard-testbed-admin" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    # Service-account token signing key pair.
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  ) || die "certificate generation with openssl failed"
}

write_kubeconfig() {
  local dir="$1" url="$2" embed="$3" out="$4" pki="$1/pki"
  local ca cert key
  if [[ "$embed" == 1 ]]; then
    ca="certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")"
    cert="client-certificate-data: $(base64 -w0 <"$pki/admin.crt")"
    key="client-key-data: $(base64 -w0 <"$pki/admin.key")"
  else
    ca="certificate-authority: $pki/ca.crt"
    cert="client-certificate: $pki/admin.crt"
    key="client-key: $pki/admin.key"
  fi
  cat >"$out.tmp" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: feedguard-testbed
  cluster:
    server: $url
    $ca
users:
- name: feedguard-testbed-admin
  user:
    $cert
    $key
contexts:
- name: feedguard-testbed
  context: {cluster: feedguard-testbed, user: feedguard-testbed-admin}
current-context: feedguard-testbed
KCFG
  chmod 600 "$out.tmp"
  mv -f "$out.tmp" "$out"
}

# ---- etcd --------------------------------------------------------------------------------
etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$1/health" 2>/dev/null | grep -q '"health":"true"'; }

start_etcd() {
  local dir="$1" try client peer pid i
  for ((try = 1; try <= 5; try++)); do
    client="$(free_port)"
    peer="$(free_port)"
    [[ "$client" != "$peer" ]] || continue
    log "starting etcd on 127.0.0.1:$client (peer $peer), try $try"
    pid="$(spawn "$dir/etcd.log" "$ETCD" --name testbed --data-dir "$dir/etcd" \
      --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "testbed=http://127.0.0.1:$peer" --initial-cluster-state new \
      --unsafe-no-fsync --snapshot-count 50000 --log-level warn)"
    for ((i = 0; i < 300; i++)); do
      if etcd_healthy "$client"; then
        ETCD_PID="$pid" ETCD_CLIENT_PORT="$client" ETCD_PEER_PORT="$peer"
        log "etcd ready (pid $pid)"
        return 0
      fi
      is_ours "$pid" "$dir" || break
      sleep 0.1
    done
    stop_pid etcd "$pid" "$dir"
    if grep -q 'address already in use' "$dir/etcd.log"; then
      log "etcd lost a port race; retrying with other ports"
      rm -rf "$dir/etcd"
      continue
    fi
    tail -n 30 "$dir/etcd.log" >&2 || true
    die "etcd did not become healthy within 30 s (log: $dir/etcd.log)"
  done
  die "etcd could not bind free ports in 5 tries"
}

# ---- kube-apiserver ----------------------------------------------------------------------
apiserver_args() {
  local dir="$1" port="$2" etcd_port="$3" pki="$1/pki"
  local bind=127.0.0.1 advertise=127.0.0.1
  if [[ -n "${FEEDGUARD_TESTBED_ADVERTISE_ADDRESS:-}" ]]; then
    bind=0.0.0.0 advertise="$FEEDGUARD_TESTBED_ADVERTISE_ADDRESS"
  fi
  local args=(
    --etcd-servers="http://127.0.0.1:$etcd_port"
    --bind-address="$bind" --advertise-address="$advertise" --secure-port="$port"
    --cert-dir="$pki" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key"
    --client-ca-file="$pki/ca.crt"
    --authorization-mode=RBAC
    --service-account-issuer="https://127.0.0.1:$port"
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key"
    --api-audiences="https://127.0.0.1:$port"
    --service-cluster-ip-range=10.0.0.0/24
    --allow-privileged=true
    --profiling=false
    --v=1
  )
  # kube-apiserver >= 1.35 refuses a loopback advertise address for the `kubernetes` Service's
  # endpoints ("cannot use public IP 127.0.0.1 with endpoint reconciler"); the loopback-only test
  # bed has no pods to reach it, so it keeps no endpoints. A node test bed advertises a real one.
  [[ "$advertise" != 127.0.0.1 ]] || args+=(--endpoint-reconciler-type=none)
  # No controller-manager runs in the apiserver tier: admission that waits for controllers
  # (ServiceAccount token population) would make every pod create hang or fail. A node test bed
  # (kube-controller-manager running) keeps it so that pods get their API token.
  [[ "${FEEDGUARD_TESTBED_SA_ADMISSION:-0}" == 1 ]] || args+=(--disable-admission-plugins=ServiceAccount)
  # shellcheck disable=SC2206
  [[ -z "${FEEDGUARD_APISERVER_FLAGS:-}" ]] || args+=(${FEEDGUARD_APISERVER_FLAGS})
  printf '%s\n' "${args[@]}"
}

readyz() {
  local dir="$1" port="$2" pki="$1/pki"
  curl -fsS --max-time 3 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$port/readyz" >/dev/null 2>&1
}

# start_apiserver DIR PORT — uses the argument list saved in DIR/apiserver.args.
start_apiserver() {
  local dir="$1" port="$2" pid i t0=$SECONDS
  local -a args
  mapfile -t args <"$dir/apiserver.args"
  log "starting kube-apiserver $FEEDGUARD_K8S_VERSION on https://127.0.0.1:$port"
  pid="$(spawn "$dir/apiserver.log" "$KUBE_APISERVER" "${args[@]}")"
  for ((i = 0; i < READY_TIMEOUT_S * 4; i++)); do
    if readyz "$dir" "$port"; then
      APISERVER_PID="$pid"
      log "kube-apiserver ready (pid $pid) after $((SECONDS - t0)) s"
      return 0
    fi
    if ! is_ours "$pid" "$dir"; then
      tail -n 40 "$dir/apiserver.log" >&2 || true
      if grep -q 'address already in use' "$dir/apiserver.log"; then return 2; fi
      die "kube-apiserver exited during start-up (log: $dir/apiserver.log)"
    fi
    sleep 0.25
  done
  tail -n 40 "$dir/apiserver.log" >&2 || true
  stop_pid kube-apiserver "$pid" "$dir"
  die "kube-apiserver not ready within $READY_TIMEOUT_S s (log: $dir/apiserver.log)"
}

write_env() {
  local dir="$1"
  cat >"$dir/env.tmp" <<ENV
# Written by tests/testbed/testbed.sh; shell-sourceable KEY=VALUE.
TESTBED_DIR=$dir
KUBECONFIG=$dir/kubeconfig
KUBECONFIG_PATHS=$dir/kubeconfig-paths
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
APISERVER_PORT=$APISERVER_PORT
APISERVER_PID=$APISERVER_PID
ETCD_URL=http://127.0.0.1:$ETCD_CLIENT_PORT
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
ETCD_PID=$ETCD_PID
CA_CERT=$dir/pki/ca.crt
ADMIN_CERT=$dir/pki/admin.crt
ADMIN_KEY=$dir/pki/admin.key
SA_SIGNING_KEY=$dir/pki/sa.key
K8S_VERSION=$FEEDGUARD_K8S_VERSION
ETCD_VERSION=$FEEDGUARD_ETCD_VERSION
HELM=$HELM
FEEDGUARD_TESTBED_CGROUP=${FEEDGUARD_TESTBED_CGROUP:-}
ENV
  mv -f "$dir/env.tmp" "$dir/env"
}

load_env() {
  local dir="$1"
  [[ -f "$dir/env" ]] || die "$dir/env not found: is the test bed up? (testbed.sh up $dir)"
  # shellcheck disable=SC1091
  source "$dir/env"
}

# ---- commands ----------------------------------------------------------------------------
cmd_up() {
  local dir="$1" try rc
  for bin in "$KUBE_APISERVER" "$ETCD"; do
    [[ -x "$bin" ]] || die "$bin is not built. Run: $HERE/build.sh   (builds kube-apiserver \
$FEEDGUARD_K8S_VERSION and etcd $FEEDGUARD_ETCD_VERSION from Go modules, cached under $CACHE)"
  done
  command -v openssl >/dev/null || die "openssl is not installed"
  command -v curl >/dev/null || die "curl is not installed"
  if [[ -f "$dir/env" ]]; then
    log "$dir holds an earlier test bed; tearing it down first"
    cmd_down "$dir"
  fi
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  rm -rf "${dir:?}"/{pki,etcd,etcd.log,apiserver.log,apiserver.args,kubeconfig,kubeconfig-paths,env}
  local t0=$SECONDS
  gen_pki "$dir/pki"
  ETCD_PID="" APISERVER_PID=""
  # If anything below fails, stop what was started.
  trap 'rc=$?; if ((rc)); then log "up failed; cleaning up"; stop_pid kube-apiserver "$APISERVER_PID" "$dir"; stop_pid etcd "$ETCD_PID" "$dir"; fi' EXIT
  start_etcd "$dir"
  for ((try = 1; try <= 5; try++)); do
    APISERVER_PORT="$(free_port)"
    apiserver_args "$dir" "$APISERVER_PORT" "$ETCD_CLIENT_PORT" >"$dir/apiserver.args"
    rc=0
    start_apiserver "$dir" "$APISERVER_PORT" || rc=$?
    ((rc == 2)) || break
    log "kube-apiserver lost a port race; retrying"
  done
  ((rc == 0)) || die "kube-apiserver could not bind a free port in 5 tries"
  write_kubeconfig "$dir" "https://127.0.0.1:$APISERVER_PORT" 1 "$dir/kubeconfig"
  write_kubeconfig "$dir" "https://127.0.0.1:$APISERVER_PORT" 0 "$dir/kubeconfig-paths"
  write_env "$dir"
  trap - EXIT
  log "test bed up in $((SECONDS - t0)) s: KUBECONFIG=$dir/kubeconfig (env: $dir/env)"
}

cmd_down() {
  local dir="$1"
  if [[ ! -d "$dir" ]]; then
    log "$dir does not exist; nothing to do"
    return 0
  fi
  dir="$(cd "$dir" && pwd)"
  if [[ -f "$dir/env" ]]; then
    (
      load_env "$dir"
      stop_pid kube-apiserver "$APISERVER_PID" "$dir"
      stop_pid etcd "$ETCD_PID" "$dir"
    )
  else
    log "$dir/env not found; no processes recorded"
  fi
  if [[ "${FEEDGUARD_TESTBED_KEEP_LOGS:-0}" == 1 ]]; then
    rm -rf "${dir:?}"/{pki,etcd,apiserver.args,kubeconfig,kubeconfig-paths,env}
  else
    rm -rf "${dir:?}"/{pki,etcd,etcd.log,apiserver.log,apiserver.args,kubeconfig,kubeconfig-paths,env}
    rmdir "$dir" 2>/dev/null || true
  fi
  log "test bed in $dir is down"
}

cmd_stop_apiserver() {
  local dir
  dir="$(cd "$1" && pwd)"
  load_env "$dir"
  stop_pid kube-apiserver "$APISERVER_PID" "$dir"
}

cmd_start_apiserver() {
  local dir rc=0
  dir="$(cd "$1" && pwd)"
  load_env "$dir"
  if is_ours "$APISERVER_PID" "$dir"; then
    die "kube-apiserver (pid $APISERVER_PID) is still running: stop-apiserver first"
  fi
  start_apiserver "$dir" "$APISERVER_PORT" || rc=$?
  ((rc == 0)) || die "kube-apiserver could not re-bind port $APISERVER_PORT"
  write_env "$dir"
}

cmd_restart_apiserver() {
  cmd_stop_apiserver "$1"
  cmd_start_apiserver "$1"
}

cmd_compact() {
  local dir rev out
  dir="$(cd "$1" && pwd)"
  load_env "$dir"
  # etcd's v3 HTTP/JSON gateway: read the current revision, then compact everything before it.
  out="$(curl -fsS --max-time 10 -X POST "$ETCD_URL/v3/kv/range" -d '{"key":"AA==","limit":1}')" ||
    die "etcd range request failed"
  rev="$(sed -n 's/.*"revision":"\{0,1\}\([0-9]*\)"\{0,1\}.*/\1/p' <<<"$out")"
  [[ "$rev" =~ ^[0-9]+$ ]] || die "could not read etcd's revision from: $out"
  curl -fsS --max-time 30 -X POST "$ETCD_URL/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" \
    >/dev/null || die "etcd compaction at revision $rev failed"
  log "etcd compacted at revision $rev"
  echo "$rev"
}

cmd_status() {
  local dir
  dir="$(cd "$1" && pwd)"
  load_env "$dir"
  is_ours "$ETCD_PID" "$dir" || die "etcd (pid $ETCD_PID) is not running"
  is_ours "$APISERVER_PID" "$dir" || die "kube-apiserver (pid $APISERVER_PID) is not running"
  readyz "$dir" "$APISERVER_PORT" || die "kube-apiserver /readyz does not answer ok"
  log "up: $APISERVER_URL (pid $APISERVER_PID), etcd $ETCD_URL (pid $ETCD_PID)"
}

usage() { sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -eq 2 ]] || usage
case "$1" in
  up) cmd_up "$2" ;;
  down) cmd_down "$2" ;;
  restart-apiserver) cmd_restart_apiserver "$2" ;;
  stop-apiserver) cmd_stop_apiserver "$2" ;;
  start-apiserver) cmd_start_apiserver "$2" ;;
  compact) cmd_compact "$2" ;;
  status) cmd_status "$2" ;;
  *) usage ;;
esac
