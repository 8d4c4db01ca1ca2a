package testbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recordTB captures Fatalf/Skipf instead of ending the real test.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordTB) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runTB runs f with a recordTB on its own goroutine, as Fatalf/Skipf end it.
func runTB(t *testing.T, f func(tb testing.TB)) *recordTB {
	r := &recordTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestMissingBackendSkipsLocallyAndFailsInCI(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(EnvJaegerBin, "")
	t.Setenv(EnvCacheDir, empty)
	t.Setenv(EnvPrometheusBin, filepath.Join(empty, "no-prometheus"))

	for _, tc := range []struct {
		name  string
		start func(tb testing.TB)
	}{
		{"jaeger", func(tb testing.TB) { StartJaeger(tb) }},
		{"prometheus", func(tb testing.TB) { StartPrometheus(tb, []string{"127.0.0.1:1"}, time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvCI, "")
			r := runTB(t, tc.start)
			if r.skip == "" || r.fatal != "" {
				t.Fatalf("without CI: want a skip, got skip=%q fatal=%q", r.skip, r.fatal)
			}
			if !strings.Contains(r.skip, "scripts/test.sh") {
				t.Errorf("skip message does not say how to run the tests: %q", r.skip)
			}

			t.Setenv(EnvCI, "true")
			r = runTB(t, tc.start)
			if r.fatal == "" || r.skip != "" {
				t.Fatalf("with CI: want a failure, got skip=%q fatal=%q", r.skip, r.fatal)
			}
			if !strings.Contains(r.fatal, "required when CI is set") {
				t.Errorf("failure message is unclear: %q", r.fatal)
			}
		})
	}
}

// The cached binary is named after the version in tools/go.mod by
// scripts/build-jaeger.sh; JaegerVersion must follow it.
func TestJaegerVersionMatchesToolsModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tools", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/jaegertracing/jaeger" {
			if f[1] != JaegerVersion {
				t.Fatalf("tools/go.mod pins Jaeger %s, JaegerVersion is %s", f[1], JaegerVersion)
			}
			return
		}
	}
	t.Fatal("github.com/jaegertracing/jaeger not found in tools/go.mod")
}

func TestJaegerBinFromCache(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvJaegerBin, "")
	t.Setenv(EnvCacheDir, dir)
	p := filepath.Join(dir, "jaeger-"+JaegerVersion)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := JaegerBin()
	if err != nil || got != p {
		t.Fatalf("JaegerBin() = %q, %v; want %q", got, err, p)
	}
	t.Setenv(EnvJaegerBin, filepath.Join(dir, "missing"))
	if _, err := JaegerBin(); err == nil || !strings.Contains(err.Error(), EnvJaegerBin) {
		t.Fatalf("JaegerBin() with a bad %s: err = %v", EnvJaegerBin, err)
	}
}

func TestPrometheusConfig(t *testing.T) {
	cfg, err := prometheusConfig([]string{
		"127.0.0.1:9464",
		"http://127.0.0.1:8888/metrics",
		"http://127.0.0.1:7000/custom",
	}, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := string(cfg)
	for _, want := range []string{
		`"job_name": "llmtrace"`,
		`"job_name": "llmtrace_2"`,
		`"metrics_path": "/custom"`,
		`"scrape_interval": "250ms"`,
		`"127.0.0.1:9464"`,
		`"127.0.0.1:8888"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("config lacks %s:\n%s", want, s)
		}
	}
	if strings.Count(s, `"job_name"`) != 2 {
		t.Errorf("want 2 jobs (host:port and /metrics URL share one):\n%s", s)
	}
}

func TestDecodePromResult(t *testing.T) {
	vec := `{"status":"success","data":{"resultType":"vector","result":[
		{"metric":{"__name__":"x","b":"2"},"value":[1700000000.5,"+Inf"]},
		{"metric":{"__name__":"x","b":"1"},"value":[1700000000.5,"3.25"]}]}}`
	got, err := decodePromResult("x", []byte(vec))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Labels["b"] != "1" || got[0].Value != 3.25 || got[1].Value <= 1e308 {
		t.Fatalf("vector decoded as %+v", got)
	}
	if want := time.UnixMilli(1700000000500); !got[0].Time.Equal(want) {
		t.Errorf("time = %v, want %v", got[0].Time, want)
	}
	sc := `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"7"]}}`
	got, err = decodePromResult("7", []byte(sc))
	if err != nil || len(got) != 1 || got[0].Value != 7 || got[0].Labels != nil {
		t.Fatalf("scalar decoded as %+v, %v", got, err)
	}
	bad := `{"status":"error","errorType":"bad_data","error":"parse error"}`
	if _, err := decodePromResult("(", []byte(bad)); err == nil || !strings.Contains(err.Error(), "parse error") {
		t.Fatalf("error response: err = %v", err)
	}
}
