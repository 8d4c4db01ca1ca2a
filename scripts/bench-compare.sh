#!/usr/bin/env bash
# Compare the tracker's benchmarks of two commits in one run, alternating the
# two test binaries so that a busy moment of a shared machine hits both alike:
#
#   bash scripts/bench-compare.sh [BASE [PATTERN [COUNT]]]
#
# BASE defaults to the commit the round started from (8440ea1); PATTERN to the
# per-token, per-step and per-request benchmarks; COUNT (runs of each binary)
# to 8. Prints benchstat's comparison (old = BASE, new = the work tree) of
# ns/op, cpu-ns/op, B/op and allocs/op. Results: BENCHMARKS.md.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${1:-8440ea1}"
pattern="${2:-^Benchmark(StepToken|Step1024|Request|RequestGivenTimes|RequestBatchGivenTimes|RequestUnsampled)$}"
count="${3:-8}"
tmp="$(mktemp -d)"
trap 'git -C "$repo" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git -C "$repo" worktree add --detach -q "$tmp/base" "$base"
(cd "$tmp/base" && go test -c -o "$tmp/old.test" ./otelstats)
(cd "$repo" && go test -c -o "$tmp/new.test" ./otelstats)
for i in $(seq "$count"); do
	for which in old new; do
		(cd "$repo/otelstats" && "$tmp/$which.test" -test.run='^$' -test.bench="$pattern" -test.benchmem \
			-test.count=1) | grep '^Benchmark' >>"$tmp/$which.txt"
	done
	echo "bench-compare: round $i of $count done" >&2
done
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da "$tmp/old.txt" "$tmp/new.txt"
