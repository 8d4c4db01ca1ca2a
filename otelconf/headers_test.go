package otelconf

import (
	"fmt"
	"strings"
	"testing"
)

// TestHeadersWarnings: an OTEL_EXPORTER_OTLP_HEADERS entry the exporters
// drop — no "=", a key that is not an HTTP token, a value whose percent
// encoding is broken — is warned about naming the variable (the one the
// signal uses: a per-signal one replaces the general one) and the entry's
// place or key, never its value, which is often a credential. The
// exporters only logged "parse headers" without the variable, and the
// value with it.
func TestHeadersWarnings(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{[]string{"OTEL_EXPORTER_OTLP_HEADERS", "x-a=b%20c, x-b = d ,api-key=a=b"}, nil},
		{[]string{"OTEL_EXPORTER_OTLP_HEADERS", "x-a=1,bad-secret1,=secret2,x-c=secret3%zz,"},
			[]string{"OTEL_EXPORTER_OTLP_HEADERS: entry 2", "OTEL_EXPORTER_OTLP_HEADERS: entry 3", `OTEL_EXPORTER_OTLP_HEADERS: "x-c"`, "OTEL_EXPORTER_OTLP_HEADERS: entry 5"}},
		{[]string{"OTEL_EXPORTER_OTLP_HEADERS", "bad", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x y=1"}, []string{`OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1: "x y"`}},
	} {
		t.Run(strings.Join(tc.env, "="), func(t *testing.T) {
			_, errs := selectTraces(t, tc.env...)
			all := fmt.Sprint(errs.all())
			if len(errs.all()) != len(tc.want) {
				t.Errorf("%d warnings, want %d: %s", len(errs.all()), len(tc.want), all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("no warning saying %q: %s", w, all)
				}
			}
			if strings.Contains(all, "secret") {
				t.Errorf("a warning shows a value: %s", all)
			}
		})
	}
}
