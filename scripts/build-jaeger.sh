#!/usr/bin/env bash
# Build the Jaeger v2 binary used by the real-backend tests, once per machine.
#
# Jaeger lives in its own module (tools/go.mod) because it pins older otel and
# collector versions than the library. A cold build takes minutes and ~2 GB of
# memory, so the binary is cached outside the repo and reused. The version in
# the cached file name comes from tools/go.mod, so bumping Jaeger there
# triggers a fresh build.
#
# Prints the absolute path of the binary on stdout (build logs go to stderr).
# Safe to run concurrently: one build at a time (flock), written to a temp
# file and moved into place atomically.
set -euo pipefail

# go and the cache path need a home; a bare CI environment may lack HOME.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="$repo_root/tools"
cache_dir="${LLMTRACE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llmtrace}"

version="$(awk '$1 == "github.com/jaegertracing/jaeger" { print $2; exit }' "$tools_dir/go.mod")"
if [[ -z "$version" ]]; then
	echo "build-jaeger: github.com/jaegertracing/jaeger not found in $tools_dir/go.mod" >&2
	exit 1
fi
bin="$cache_dir/jaeger-$version"

if [[ -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache_dir"

build() {
	# Another copy may have finished while we waited for the lock.
	if [[ -x "$bin" ]]; then
		return 0
	fi
	local tmp
	tmp="$(mktemp "$cache_dir/.jaeger-$version.XXXXXX")"
	# shellcheck disable=SC2064
	trap "rm -f '$tmp'" EXIT
	echo "build-jaeger: building Jaeger $version into $bin (cold build: several minutes, ~2 GB RAM)" >&2
	local start=$SECONDS
	go -C "$tools_dir" build -o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger >&2
	chmod 0755 "$tmp"
	mv -f "$tmp" "$bin"
	trap - EXIT
	echo "build-jaeger: built in $((SECONDS - start))s" >&2
}

if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache_dir/.jaeger-$version.lock"
	if ! flock -n 9; then
		echo "build-jaeger: another build of Jaeger $version is running; waiting for it" >&2
		flock 9
	fi
	build
else
	build
fi

echo "$bin"
