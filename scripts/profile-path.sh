#!/bin/sh
# profile-path.sh SUITE NAME [SECONDS]: runs one path of `azgate-lab bench SUITE`
# (dataplane or lb, --only NAME) alone for SECONDS after its timings
# (--soak), samples the CPU it is pinned to (the first one this process may
# use) with perf meanwhile, and prints where the time goes, counting only
# the samples taken inside BPF_PROG_TEST_RUN: by function (the JITed
# programs are bpf_prog_TAG_NAME; the test loop itself is bpf_test_run,
# bpf_test_timer_continue and __local_bh_enable_ip), then the program
# under test's samples by source line (from the JIT line table the bench
# writes, --jit-lines).
# Sampling is cpu-clock: VMs here expose no hardware counters, so
# `bpftool prog profile` (cycles, instructions) cannot run.
# Run it as root; AZGATE_LAB names the binary (default bin/azgate-lab), EXTRA adds flags to the bench command (the lb suite wants
# "--conn-table 0 --lab=false"); TOP sets the length of the lists.
set -eu
suite=$1 name=$2 secs=${3:-8}
bin=${AZGATE_LAB:-bin/azgate-lab}
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
tmp=$(mktemp -d /tmp/azgate-perf.XXXXXX)
"$bin" bench "$suite" --only "$name" --rounds 1 --soak "$((secs + 2))s" --jit-lines "$tmp/lines" ${EXTRA:-} \
	>"$tmp/out" 2>"$tmp/err" &
pid=$!
while ! grep -q '^soak:' "$tmp/err" 2>/dev/null; do
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
	sleep 0.2
done
sleep 0.5
perf record -q -g -C "$cpu" -e cpu-clock -F 10000 -o "$tmp/perf.data" -- sleep "$secs" 2>/dev/null
wait "$pid"
perf script -i "$tmp/perf.data" -F pid,ip,sym 2>/dev/null | python3 -c '
import bisect, collections, sys
want, lines_file, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
table = sorted((int(a, 16), where, text) for a, where, text in
               (l.rstrip("\n").split("\t", 2) for l in open(lines_file)))
addrs = [t[0] for t in table]
lo, hi = addrs[0], addrs[-1] + 4096
by_sym, by_line, total, prog = collections.Counter(), collections.Counter(), 0, 0
def flush(rec):
    global total, prog
    if not rec or rec[0] != want or not any(s == "bpf_test_run" for _, s in rec[1:]):
        return
    total += 1
    ip, sym = rec[1]
    by_sym[sym or "[unknown]"] += 1
    a = int(ip, 16)
    if lo <= a < hi:
        prog += 1
        i = bisect.bisect_right(addrs, a) - 1
        by_line[table[i][1] + "  " + table[i][2][:70]] += 1
rec = None
for l in sys.stdin:
    if not l.strip():
        flush(rec); rec = None; continue
    f = l.split()
    if not l.startswith("\t"):
        flush(rec); rec = [f[0]]; continue
    if rec is not None:
        rec.append((f[0], f[1] if len(f) > 1 else ""))
flush(rec)
print("%d samples inside BPF_PROG_TEST_RUN, by function:" % total)
for s, c in by_sym.most_common(top):
    print("%6.2f%%  %s" % (100 * c / total, s))
print("\n%d of them in the program under test, by source line (%% of all):" % prog)
for s, c in by_line.most_common(top):
    print("%6.2f%%  %s" % (100 * c / total, s))
' "$pid" "$tmp/lines" "${TOP:-25}"
[ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
