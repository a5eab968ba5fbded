#!/bin/sh
# bench-compare-rev.sh REV [RUNS] [ROUNDS]: before/after of the per-packet
# paths across versions whose maps changed layout (where
# `--baseline-objects` cannot drive the old objects with this version's Go
# code). Builds REV's benchmark binary (azgate-lab; azgate before issue
# 18) from `git archive` (no git state is touched) and this one's, then
# runs REV's and this build's `bench dataplane` and `bench lb` alternately
# RUNS times (default 3, ROUNDS rounds each, default 9) and prints
# `azgate-lab bench compare`: the fastest figure of each build, the cut.
# Both builds must carry the same harness (issue 7's: xdp_chain, the 1M
# table for new flows); the figures are compared by name.
# Run as root from the repository.
set -eu
rev=$1 runs=${2:-3} rounds=${3:-9}
export PATH=/usr/local/go/bin:$PATH GOFLAGS=-buildvcs=false
tmp=$(mktemp -d /tmp/azgate-cmp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git archive "$rev" | tar -x -C "$tmp/src"
# The benchmarks are in azgate-lab since issue 18 (in azgate before).
benchbin() { if [ -d "$1/cmd/azgate-lab" ]; then echo ./cmd/azgate-lab; else echo ./cmd/azgate; fi; }
(cd "$tmp/src" && go build -o "$tmp/before" "$(benchbin .)")
go build -o "$tmp/after" "$(benchbin .)"
b="" a=""
i=1
while [ "$i" -le "$runs" ]; do
	for side in before after; do
		for suite in dataplane lb; do
			extra=""
			[ "$suite" = lb ] && extra="--conn-table 0 --lab=false"
			echo "run $i/$runs: $side $suite" >&2
			"$tmp/$side" bench "$suite" --rounds "$rounds" --json $extra >"$tmp/$side-$suite-$i.json" 2>/dev/null
			if [ "$side" = before ]; then b="$b --before $tmp/$side-$suite-$i.json"; else a="$a --after $tmp/$side-$suite-$i.json"; fi
		done
	done
	i=$((i + 1))
done
"$tmp/after" bench compare $b $a
