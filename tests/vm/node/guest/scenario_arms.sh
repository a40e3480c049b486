#!/bin/bash
# scenario_arms.sh — the fences scenario's three ways of holding an Idle fence on a systemd slice
# — (a) the agent's file writes, (b) CPUWeight=idle through systemd's D-Bus API, (c) both —
# measured on the same 20 daemon-reloads, then each one's revert (see scenario_fences.sh).
ARMS=1
# shellcheck source=scenario_fences.sh
source /fg/guest/scenario_fences.sh
