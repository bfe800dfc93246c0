#!/usr/bin/env bash
# Run a command as on a slower CPU without AVX-512, on a machine that has it:
# for measuring the test suite's time where no such CPU is at hand (README, Tests).
#
#     tools/slow_cpu.sh [--cpus N] -- COMMAND...
#
# torch is held to its AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, and oneDNN's to
# AVX2), and COMMAND with every process it starts (Ray's included) to N CPUs'
# worth of time by a cgroup's CPU quota (cgroup v1 `cpu` or v2; root). The
# default N = 1.2 of a 2-core machine: the AVX2 kernels alone ran the test
# suite of 199a061 in 3015 s on a 2-core Intel Xeon with AVX-512, where a 2-core
# AMD EPYC without AVX-512 took 4838 s (1.6x; 2026-11-26), and 2 / 1.6 CPUs is
# meant to make up the rest (a guess from those two totals, not yet checked
# against that EPYC). Prints the quota and the command's wall time; exits with
# the command's status.
set -euo pipefail
cpus=1.2
if [ "${1:-}" = "--cpus" ]; then
  cpus=$2
  shift 2
fi
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [--cpus N] -- COMMAND..." >&2; exit 2; }
period_us=100000
quota_us=$(python3 -c "print(int($cpus * $period_us))")
name="slow-cpu-$$"
if [ -d /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  group=/sys/fs/cgroup/cpu/$name
  mkdir "$group"
  echo "$period_us" > "$group/cpu.cfs_period_us"
  echo "$quota_us" > "$group/cpu.cfs_quota_us"
  procs="$group/cgroup.procs"
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  group=/sys/fs/cgroup/$name
  mkdir "$group"
  echo "$quota_us $period_us" > "$group/cpu.max"
  procs="$group/cgroup.procs"
else
  echo "$0: no cgroup cpu controller to set a quota with" >&2
  exit 2
fi
cleanup() {
  # Whatever the command left running keeps the group; it goes once they end.
  rmdir "$group" 2>/dev/null || true
}
trap cleanup EXIT
echo "slow_cpu: $cpus CPUs of time (cgroup $group), torch's AVX2 kernels"
started=$(date +%s)
status=0
( echo $BASHPID > "$procs"
  exec env ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 "$@" ) || status=$?
elapsed=$(( $(date +%s) - started ))
echo "slow_cpu: exit $status after $(( elapsed / 60 )) min $(( elapsed % 60 )) s"
exit $status
