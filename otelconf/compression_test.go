package otelconf

import "testing"

// TestOTLPCompression: OTEL_EXPORTER_OTLP_COMPRESSION and its per-signal
// variant are an enum (gzip, none): read in any case, and a value not
// recognised is warned about and ignored (the general variable, else no
// compression, applies). The Go exporters compressed only for the exact
// "gzip" and sent everything else uncompressed without a word.
func TestOTLPCompression(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		gzip   bool
		warned bool
	}{
		{"unset", nil, false, false},
		{"gzip", []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"}, true, false},
		{"GZIP", []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP"}, true, false},
		{"none per signal wins", []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"}, false, false},
		{"unknown per signal: the general", []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd"}, true, true},
		{"unknown: none", []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "snappy"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, errs := selectTraces(t, tc.env...)
			if sel.gzip != tc.gzip {
				t.Errorf("gzip %v; want %v", sel.gzip, tc.gzip)
			}
			if warned := len(errs.all()) > 0; warned != tc.warned {
				t.Errorf("warned %v: %v", warned, errs.all())
			}
			exp, err := newSpanExporter(t.Context(), sel)
			if err != nil {
				t.Fatal(err)
			}
			if err := exp.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
