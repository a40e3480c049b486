# testbed_client.sh — sourced by the apiserver-tier shell tests (crd_test.sh, chart_test.sh): the
# test bed's env (tests/testbed/testbed.sh up TESTBED_DIR), its KUBECONFIG exported, KUBECTL
# (default: kubectl on PATH) and jq checked, and `fail`.
#   source "$HERE/../testbed_client.sh"; testbed_client_init "$TESTBED_DIR"
fail() { echo "FATAL: $*" >&2; exit 1; }
testbed_client_init() {
  [[ -f "$1/env" ]] || fail "$1/env not found: the test bed is not up (testbed.sh up $1)"
  # shellcheck disable=SC1091
  source "$1/env"
  export KUBECONFIG
  KUBECTL="${KUBECTL:-$(command -v kubectl)}" || fail "kubectl is not installed"
  command -v jq >/dev/null || fail "jq is not installed"
}
