#!/usr/bin/env bash
# `troupe launch --launcher slurm` through a real Slurm (issue 25): a throwaway single-node cluster (munged,
# slurmctld, slurmd from Debian's slurm-wlm and munge) whose every file lives in one temporary folder, and
# through it:
#   1. salloc + launch: the MLP trained with dist_sync by 1 server and 2 workers; both workers must report the
#      same final test accuracy, above a sanity threshold, and every process must exit 0;
#   2. sbatch --export=NONE --wait + launch: the same job from a batch script whose environment is Slurm's
#      alone (SLURM_EXPORT_ENV=NONE reaches launch's srun, which must still hand its tasks the variables);
#   3. Ctrl-C: launch interrupted while the workers train must exit 130, every task must say it was stopped
#      (srun forwards the SIGINT to them), and no troupe process may be left;
#   4. a failing worker: worker 1 exits 3 after its first epoch; srun (--kill-on-bad-exit) stops the
#      others, launch exits 1 and names it, and no troupe process may be left.
# Nothing global is touched: the daemons get the config path explicitly (-f, SLURM_CONF), munged its own key
# and socket, and ports are picked free. Whatever happens, everything is stopped at the end (trap), processes
# found by a marker in their environment, never by name.
#
# Usage: run_slurm_test.sh TROUPE_EXECUTABLE
# Exit status: 0 passed, 1 failed, 77 skipped (CTest's SKIP_RETURN_CODE: not root, not Linux, no apt-get,
# the packages cannot be installed).
# Environment: TROUPE_SLURM_INSTALL=0 never installs (skips when the packages are missing);
#              TROUPE_SLURM_KEEP=1 keeps the temporary folder (logs, config) for a look afterwards.
set -uo pipefail

readonly kSkip=77
readonly kMinAccuracy=0.50  # 1 epoch of 4000 Fashion-MNIST images gives 0.6-0.7 here; chance is 0.10
start_s=$SECONDS
log() { printf 'slurm test [%3ds]: %s\n' $((SECONDS - start_s)) "$*"; }
skip() { log "SKIPPED: $*"; exit "$kSkip"; }
fail() { log "FAILED: $*"; status=1; exit 1; }

troupe="${1:-}"
[[ -x "$troupe" ]] || { echo "usage: $0 TROUPE_EXECUTABLE" >&2; exit 2; }
troupe="$(cd "$(dirname "$troupe")" && pwd -P)/$(basename "$troupe")"  # as /proc/self/exe names it
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

[[ "$(uname -s)" == Linux ]] || skip "Slurm daemons run on Linux only"
[[ $(id -u) -eq 0 ]] || skip "needs root (it installs packages and runs slurmd, which starts tasks as their user)"

# --- packages --------------------------------------------------------------------------------------------
readonly programs=(munged mungekey slurmctld slurmd srun salloc sbatch sinfo squeue scancel)
have_all() { local p; for p in "${programs[@]}"; do command -v "$p" >/dev/null || return 1; done; }
if ! have_all; then
  [[ "${TROUPE_SLURM_INSTALL:-1}" != 0 ]] || skip "slurm-wlm/munge are not installed and TROUPE_SLURM_INSTALL=0"
  command -v apt-get >/dev/null || skip "slurm-wlm/munge are not installed and there is no apt-get"
  log "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-q -o Acquire::Retries=1 -o Acquire::http::Timeout=30 -o Dpkg::Use-Pty=0)
  apt_log="$(mktemp /tmp/troupe-slurm-apt-XXXXXX.log)"
  if ! timeout 600 apt-get "${apt_opts[@]}" update </dev/null >"$apt_log" 2>&1 ||
     ! timeout 600 apt-get "${apt_opts[@]}" install -y --no-install-recommends slurm-wlm munge \
         </dev/null >>"$apt_log" 2>&1; then
    tail -n 5 "$apt_log" | sed 's/^/  apt: /'
    skip "slurm-wlm/munge could not be installed (no network or no Debian archive?); see $apt_log"
  fi
  rm -f "$apt_log"
  log "installed slurm-wlm and munge"
  have_all || skip "slurm-wlm/munge installed, but one of ${programs[*]} is still missing"
fi
log "$(slurmctld -V), $(munged -V 2>&1 | head -n 1)"

# --- the cluster's folder, config and teardown -----------------------------------------------------------
dir="$(mktemp -d /tmp/troupe-slurm-XXXXXX)" || fail "mktemp"
chmod 755 "$dir"  # munged wants execute permission for all on its socket's path
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/run"
chmod 755 "$dir/munge"
# Every process of this cluster (daemons, slurmstepd, tasks) inherits this variable: the teardown finds them
# by it, never by a program name that another Slurm or test could share.
export TROUPE_SLURM_TEST_MARK="$dir"
status=1
pids=()

marked_pids() {  # the processes whose environment carries this run's mark (not this shell)
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid="${f#/proc/}"; pid="${pid%/environ}"
    [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
    if { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qxF "TROUPE_SLURM_TEST_MARK=$dir"; then echo "$pid"; fi
  done
}

teardown() {
  trap - EXIT INT TERM
  set +e
  if [[ -n "${SLURM_CONF:-}" && -f "$SLURM_CONF" ]]; then
    timeout 10 scancel --quiet --user=root >/dev/null 2>&1
  fi
  # The daemons we started (TERM, then KILL after a deadline), then anything else that carries the mark
  # (slurmstepd and tasks outliving slurmd).
  local p deadline
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  deadline=$((SECONDS + 15))
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  local left
  left="$(marked_pids)"
  if [[ -n "$left" ]]; then
    log "stopping left-over processes of this cluster: $(echo $left)"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
  fi
  if ((status != 0)); then
    local f
    for f in slurmctld.log slurmd.log munge/munged.log; do
      [[ -f "$dir/$f" ]] && { echo "--- last lines of $f"; tail -n 25 "$dir/$f"; }
    done
  fi
  if [[ "${TROUPE_SLURM_KEEP:-0}" == 1 ]]; then
    log "kept $dir"
  else
    rm -rf "$dir"
  fi
  log "$( ((status == 0)) && echo PASSED || echo "exit $status") in $((SECONDS - start_s)) s"
  exit "$status"
}
trap teardown EXIT
trap 'log "interrupted"; status=1; exit 1' INT TERM

free_port() {  # a TCP port nothing listens on, from a range away from the ephemeral one
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 10000))
    [[ " $* " == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}
ctld_port="$(free_port)" || fail "no free port"
slurmd_port="$(free_port "$ctld_port")" || fail "no free port"
host="$(hostname -s)"
cpus="$(nproc)"
sed -e "s|@HOST@|$host|g" -e "s|@DIR@|$dir|g" -e "s|@CPUS@|$cpus|g" -e "s|@CTLD_PORT@|$ctld_port|g" \
    -e "s|@SLURMD_PORT@|$slurmd_port|g" "$here/slurm.conf.in" >"$dir/slurm.conf" || fail "writing slurm.conf"
: >"$dir/plugstack.conf"
export SLURM_CONF="$dir/slurm.conf"  # for salloc, sbatch, srun, sinfo, scancel
# Slurm's own variables from an allocation this script may run in would confuse the commands below.
while IFS='=' read -r name _; do unset "$name"; done < <(env | grep -E '^(SLURM|SALLOC|SBATCH|SRUN)_' | grep -v '^SLURM_CONF=')

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds or the deadline passes
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what not within ${limit}s"
    local p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "$what: a daemon (pid $p) died"; done
    sleep 0.2
  done
}

# --- daemons ---------------------------------------------------------------------------------------------
mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 ||
  { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none && chmod 600 "$dir/munge/munge.key"; } ||
  fail "cannot create a munge key"
munged --foreground --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
       --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" \
       </dev/null >"$dir/munge/munged.out" 2>&1 &
pids+=($!)
wait_for 30 "munged's socket" test -S "$dir/munge/munge.socket"
slurmctld -D -f "$SLURM_CONF" </dev/null >"$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" </dev/null >"$dir/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [[ "$(sinfo -h -N -n "$host" -o '%T' 2>/dev/null)" == idle ]]; }
wait_for 90 "node $host idle in sinfo" node_idle
log "cluster up: node $host ($cpus CPUs), slurmctld port $ctld_port, slurmd port $slurmd_port, folder $dir"

# --- 1. salloc + launch ----------------------------------------------------------------------------------
# S+N = 3 tasks: on a machine with fewer CPUs, the allocation must overcommit (otherwise the job step waits
# for CPUs that never come).
train() {  # train EPOCHS: the worker command
  printf '%s\n' "$troupe" train --model mlp --kvstore dist_sync --epochs "$1" --train-images 4000 \
    --test-images 1000 --progress none
}
mapfile -t train < <(train 1)
launch=("$troupe" launch --launcher slurm --host 127.0.0.1 -n 2 -s 1 --)
check_training() {  # check_training NAME OUTPUT_FILE RC
  local name=$1 out=$2 rc=$3
  sed "s/^/  $name| /" "$out"
  ((rc == 0)) || fail "$name: exit status $rc"
  grep -q '^troupe launch: every process exited 0$' "$out" || fail "$name: no 'every process exited 0'"
  local tasks
  tasks=$(grep -cE '^troupe launch: (server 0|worker [01]) on .* exited 0 \(task [0-2]\)$' "$out")
  ((tasks == 3)) || fail "$name: $tasks of 3 tasks said 'exited 0 (task i)'"
  local a0 a1
  a0=$(sed -n 's/^\[worker 0\] final test accuracy \([0-9.]*\)$/\1/p' "$out")
  a1=$(sed -n 's/^\[worker 1\] final test accuracy \([0-9.]*\)$/\1/p' "$out")
  [[ -n "$a0" && -n "$a1" ]] || fail "$name: a worker gave no 'final test accuracy' line"
  [[ "$a0" == "$a1" ]] || fail "$name: the workers disagree: $a0 and $a1 (dist_sync trains one model)"
  awk -v a="$a0" -v m="$kMinAccuracy" 'BEGIN { exit !(a >= m) }' || fail "$name: accuracy $a0 < $kMinAccuracy"
  log "$name: passed (both workers: final test accuracy $a0)"
}

cd "$dir/run" || fail "cd"
t0=$SECONDS
timeout 300 salloc --quiet -J troupe-salloc -N1 -n 4 --overcommit "${launch[@]}" "${train[@]}" \
  </dev/null >"$dir/salloc.out" 2>&1
rc=$?
check_training salloc "$dir/salloc.out" "$rc"
log "salloc run took $((SECONDS - t0)) s"

# --- 2. sbatch --export=NONE + launch --------------------------------------------------------------------
t0=$SECONDS
{
  echo '#!/bin/sh'
  printf '%q ' "${launch[@]}" "${train[@]}"
  echo
} >"$dir/job.sh"
timeout 300 sbatch --quiet --wait -J troupe-sbatch -N1 -n 3 --overcommit --export=NONE \
  -o "$dir/sbatch.out" -D "$dir/run" "$dir/job.sh" </dev/null >"$dir/sbatch.submit" 2>&1
rc=$?
cat "$dir/sbatch.submit"
check_training sbatch "$dir/sbatch.out" "$rc"
log "sbatch run took $((SECONDS - t0)) s"

# --- 3. Ctrl-C -------------------------------------------------------------------------------------------
t0=$SECONDS
mapfile -t long_train < <(train 1000)  # far longer than the test waits
timeout 300 salloc --quiet -J troupe-interrupt -N1 -n 3 --overcommit "${launch[@]}" "${long_train[@]}" \
  </dev/null >"$dir/interrupt.out" 2>&1 &
salloc_pid=$!
trained() { [[ $(grep -c '^\[worker [01]\] Epoch\[0\] Train-accuracy=' "$dir/interrupt.out") -eq 2 ]]; }
wait_for 120 "the interrupted job's first epoch" trained
troupe_pids() {  # this cluster's processes running troupe, with ARG as their first argument when given
  local p exe arg
  for p in $(marked_pids); do
    { read -r -d "" exe && read -r -d "" arg; } 2>/dev/null <"/proc/$p/cmdline" || continue
    [[ "$exe" == "$troupe" && ( -z "${1:-}" || "$arg" == "$1" ) ]] && echo "$p"
  done
}
launch_pid="$(troupe_pids launch)"
[[ "$launch_pid" =~ ^[0-9]+$ ]] || fail "interrupt: not one launch process under salloc: '$launch_pid'"
kill -INT "$launch_pid"
wait "$salloc_pid"
rc=$?
sed 's/^/  interrupt| /' "$dir/interrupt.out"
((rc == 130)) || fail "interrupt: exit status $rc, not 130"
# srun must forward the stop to its tasks (a SIGTERM to srun would SIGKILL them): each then stops its
# process and prints its own last line ('stopped by srun', or how the process ended when it saw the
# scheduler go first).
ended=$(grep -cE '^troupe launch: (server 0|worker [01]) on .* \(task [0-2]\)$' "$dir/interrupt.out")
((ended == 3)) || fail "interrupt: $ended of 3 tasks printed their last line (did srun kill them?)"
no_job() { [[ -z "$(squeue -h -o %i)" ]]; }
wait_for 30 "the interrupted job's end" no_job
no_troupe() { [[ -z "$(troupe_pids)" ]]; }
wait_for 30 "the interrupted job's troupe processes' end" no_troupe
log "interrupt: passed (exit 130, every task printed its last line, nothing left) in $((SECONDS - t0)) s"

# --- 4. a failing worker ---------------------------------------------------------------------------------
t0=$SECONDS
# Worker 1 trains one epoch and exits 3; worker 0 would train for long.
fail_cmd='if [ "$TROUPE_LAUNCH_INDEX" = 1 ]; then "$@" --epochs 1 && exit 3; exit 4; fi; exec "$@" --epochs 1000'
mapfile -t base < <(train 1)
base=("${base[@]:0:6}" "${base[@]:8}")  # without --epochs 1
timeout 300 salloc --quiet -J troupe-failure -N1 -n 3 --overcommit "${launch[@]}" sh -c "$fail_cmd" sh "${base[@]}" \
  </dev/null >"$dir/failure.out" 2>&1
rc=$?
sed 's/^/  failure| /' "$dir/failure.out"
((rc == 1)) || fail "failure: exit status $rc, not 1"
grep -qE '^troupe launch: worker 1 on .* exited 3 \(task 2\)$' "$dir/failure.out" ||
  fail "failure: no 'worker 1 ... exited 3 (task 2)' line"
ended=$(grep -cE '^troupe launch: (server 0|worker [01]) on .* \(task [0-2]\)$' "$dir/failure.out")
((ended == 3)) || fail "failure: $ended of 3 tasks printed their last line"
wait_for 30 "the failed job's end" no_job
wait_for 30 "the failed job's troupe processes' end" no_troupe
log "failure: passed (exit 1, worker 1's exit 3 named, every task printed its last line, nothing left) in $((SECONDS - t0)) s"

status=0
