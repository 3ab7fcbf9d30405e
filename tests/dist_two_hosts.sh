#!/usr/bin/env bash
# Two hosts on one machine (docs/distributed.md): two network namespaces joined by a veth pair,
# one rank in each, Open MPI over TCP between them (mpirun starts the remote daemon through an
# rsh agent that enters the other namespace instead of ssh). A training job across them is
# killed (SIGKILL of the rank on the second host) and resumed from its last checkpoint; the
# result must be the same bytes as an uninterrupted run across the same two hosts.
# Usage: tests/dist_two_hosts.sh BUILD_DIR. Exit 77 (CTest: skipped) with the reason where
# namespaces cannot be made or MPI is missing.
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd)
PLDR=$BUILD/pldr
skip() {
  echo "SKIPPED: $*"
  exit 77
}
command -v mpirun >/dev/null || skip "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
command -v ip >/dev/null || skip "ip not found (iproute2)"
[ "$(id -u)" = 0 ] || skip "network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"

TAG=$$
NSA=pldr-a-$TAG NSB=pldr-b-$TAG
VA=pva$TAG VB=pvb$TAG
NET=10.231.$((TAG % 200 + 20))
HA=$NET.1 HB=$NET.2
TMP=$(mktemp -d /tmp/pldr-two-hosts.XXXXXX)
cleanup() {
  ip netns pids "$NSA" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$NSB" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "$NSA" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
ip netns add "$NSB" || skip "cannot create a second network namespace"
ip link add "$VA" type veth peer name "$VB" || skip "cannot create a veth pair"
set -e
ip link set "$VA" netns "$NSA"
ip link set "$VB" netns "$NSB"
ip -n "$NSA" addr add "$HA/24" dev "$VA"
ip -n "$NSB" addr add "$HB/24" dev "$VB"
for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
ip -n "$NSA" link set "$VA" up
ip -n "$NSB" link set "$VB" up

# The rsh agent: "agent HOST COMMAND..." runs COMMAND on HOST, here inside its namespace.
cat >"$TMP/agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $HA) ns=$NSA ;;
  $HB) ns=$NSB ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$TMP/agent.sh"
printf '%s slots=1\n%s slots=1\n' "$HA" "$HB" >"$TMP/hosts"

# Data: a short text with the bundled model's tokenizer.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$PLDR" prepare --tokenizer "$ROOT/models/pldr-sotu-small/tokenizer.model" --out "$TMP/data" \
  --ctx 33 --valid-fraction 0.05 "$ROOT/data/corpus/tinyshakespeare/valid.txt" >/dev/null

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds: Open MPI's own allocations would fail LeakSanitizer (see tests/test_dist.cpp).
export ASAN_OPTIONS=detect_leaks=0
MPI=(mpirun --hostfile "$TMP/hosts" -np 2 --bind-to none -x ASAN_OPTIONS
  --mca plm_rsh_agent "$TMP/agent.sh" --mca btl self,tcp
  --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24"
  -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -x OMP_NUM_THREADS=1)
ARGS=(--preset tiny --data "$TMP/data" --steps 240 --batch 2 --save-every 20 --eval-every 0
  --eval-batches 1 --dist-timeout 20)
on_a() { ip netns exec "$NSA" "$@"; }

echo "two hosts: $HA ($NSA) and $HB ($NSB) over veth"
on_a timeout 300 "${MPI[@]}" "$PLDR" train "${ARGS[@]}" --out "$TMP/ref" >"$TMP/ref.log" 2>&1 ||
  { echo "FAIL: the uninterrupted run failed:"; tail -20 "$TMP/ref.log"; exit 1; }
grep -q "data parallel: 2 ranks (1 on this host)" "$TMP/ref.log" ||
  { echo "FAIL: not one rank per host:"; cat "$TMP/ref.log"; exit 1; }

# The same job, killed mid-run: SIGKILL the rank on host B once step 100 is logged.
set +e
on_a timeout 300 "${MPI[@]}" "$PLDR" train "${ARGS[@]}" --out "$TMP/run" >"$TMP/run.log" 2>&1 &
JOB=$!
killed=0
for _ in $(seq 1 3000); do
  if [ -f "$TMP/run/metrics.jsonl" ] && [ "$(grep -c '"type":"train"' "$TMP/run/metrics.jsonl")" -ge 100 ]; then
    pid=$(ip netns pids "$NSB" | while read -r p; do
      tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qx "$TMP/run" && echo "$p"; done | head -1)
    if [ -n "$pid" ]; then kill -9 "$pid" && killed=1; fi
    break
  fi
  sleep 0.02
done
wait "$JOB"
rc=$?
set -e
[ "$killed" = 1 ] || { echo "FAIL: could not kill the rank on host B in time"; tail "$TMP/run.log"; exit 1; }
[ "$rc" != 0 ] || { echo "FAIL: the killed job exited 0"; exit 1; }
[ "$rc" != 124 ] || { echo "FAIL: the killed job hung until the timeout"; exit 1; }
step=$(grep -c '"type":"train"' "$TMP/run/metrics.jsonl")
echo "killed the rank on $HB at step >= 100 (mpirun exit $rc, $step steps logged)"

on_a timeout 300 "${MPI[@]}" "$PLDR" train --resume "$TMP/run" --data "$TMP/data" \
  --out "$TMP/run" >"$TMP/resume.log" 2>&1 ||
  { echo "FAIL: the resume failed:"; tail -20 "$TMP/resume.log"; exit 1; }
head -1 "$TMP/resume.log"
for f in model.safetensors train_state.safetensors; do
  cmp -s "$TMP/ref/$f" "$TMP/run/$f" || { echo "FAIL: $f differs from the uninterrupted run"; exit 1; }
done
echo "PASS: killed at step >= 100 and resumed across two namespaces over TCP: model and optimizer state identical to the uninterrupted run"
