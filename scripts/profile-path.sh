#!/bin/sh
# profile-path.sh SUITE NAME [SECONDS]: runs one path of `azgate bench SUITE`
# (dataplane or lb, --only NAME) alone for SECONDS after its timings
# (--soak), samples the CPU it is pinned to (the first one this process may
# use) with perf meanwhile, and prints where the time goes: the JITed
# programs (bpf_prog_TAG_NAME; unresolved 0xffffffffc... addresses are JITed
# code too), the helpers and map code they call, and the test loop itself
# (bpf_test_run, bpf_test_timer_continue, __local_bh_enable_ip: the harness).
# Sampling is cpu-clock: VMs here expose no hardware counters, so
# `bpftool prog profile` (cycles, instructions) cannot run.
# Run it as root; EXTRA adds flags to the bench command.
set -eu
suite=$1 name=$2 secs=${3:-8}
bin=${AZGATE:-bin/azgate}
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
tmp=$(mktemp -d /tmp/azgate-perf.XXXXXX)
"$bin" bench "$suite" --only "$name" --rounds 1 --soak "$((secs + 2))s" ${EXTRA:-} >"$tmp/out" 2>"$tmp/err" &
pid=$!
while ! grep -q '^soak:' "$tmp/err" 2>/dev/null; do
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
	sleep 0.2
done
sleep 0.5
perf record -q -g -C "$cpu" -e cpu-clock -F 10000 -o "$tmp/perf.data" -- sleep "$secs" 2>/dev/null
wait "$pid"
# Only this process's samples taken inside BPF_PROG_TEST_RUN (the set-up,
# the hooks between timings and other processes on the CPU are left out),
# by the function they were in.
perf script -i "$tmp/perf.data" -F pid,ip,sym 2>/dev/null | awk -v want="$pid" -v top="${TOP:-25}" '
	function flush() { if (n && intest && p == want) { c[leaf]++; t++ } n = 0; intest = 0 }
	/^[^ \t]/ { flush(); p = $1; next }
	/^$/ { flush(); next }
	{ s = $2; if (s == "" || s ~ /unknown/) s = "[JIT code, no symbol]"; if (n == 0) leaf = s; n++
	  if (s == "bpf_test_run") intest = 1 }
	END { flush(); printf "%d samples inside BPF_PROG_TEST_RUN\n", t
	      for (k in c) printf "%6.2f%%  %s\n", 100 * c[k] / t, k | "sort -rn | head -" top }'
[ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
