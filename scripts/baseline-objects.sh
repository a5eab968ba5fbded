#!/bin/sh
# baseline-objects.sh REV DIR: extracts the compiled BPF objects committed at
# git revision REV (internal/dataplane/*_bpfel.o) into DIR, for
#   azgate-lab bench dataplane --baseline-objects DIR
#   azgate-lab bench lb --baseline-objects DIR
# which time those objects next to this build's in the same run.
set -eu
if [ $# -ne 2 ]; then
	echo "usage: $0 REV DIR" >&2
	exit 2
fi
rev=$1 dir=$2
mkdir -p "$dir"
for o in edge agent; do
	git show "$rev:internal/dataplane/${o}_bpfel.o" >"$dir/${o}_bpfel.o"
done
git rev-parse "$rev" >"$dir/REVISION"
echo "objects of $(cat "$dir/REVISION") in $dir"
