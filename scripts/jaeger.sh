#!/usr/bin/env bash
# Runs Jaeger v2 all-in-one locally (in-memory storage) for llmtrace's demo:
#   bash scripts/jaeger.sh &
#   OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 go run ./examples/simengine
#   curl -s 'http://localhost:16686/api/v3/services'
# Builds the binary once per machine (scripts/build-jaeger.sh). A Jaeger built
# from Go sources has no UI assets; its query API on :16686 works. For the UI,
# use the official image through docker-compose.yml (see deploy/README.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin="${LLMTRACE_JAEGER_BIN:-$(bash scripts/build-jaeger.sh)}"
# Jaeger traces itself into OTEL_EXPORTER_OTLP_ENDPOINT; keep it out of ours.
unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
exec "$bin" "$@"
