package fleet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
)

// BuilderVersion is the ocb release of builder-config.yaml.
const BuilderVersion = "v0.161.0"

var (
	binOnce sync.Once
	binPath string
	binSkip string
	binErr  error
)

// collectorBinary finds or builds (once per test process) the llmtrace
// distribution from otelcol/builder-config.yaml with testbackend's ocb
// harness: LLMTRACE_OTELCOL_LLMTRACE_BIN names a prebuilt one,
// LLMTRACE_BUILD_COLLECTOR=1 (the default under CI) builds it into the
// cache, keyed by the manifest and the components' sources. A cold build
// takes minutes; a cached one is found at once.
func collectorBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		root := filepath.Join("..", "..")
		binPath, binSkip, binErr = testbackend.CollectorBuild{
			Manifest: filepath.Join(root, "otelcol", "builder-config.yaml"), BuilderVersion: BuilderVersion,
			RepoRoot: root, LocalPackages: []string{"./llmtraceprocessor", "./llmtraceconnector"},
			BinEnv: "LLMTRACE_OTELCOL_LLMTRACE_BIN",
		}.Binary()
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	if binSkip != "" {
		t.Skip(binSkip)
	}
	return binPath
}

// The distribution has the llmtrace components and everything the fleet
// recipe names.
func TestDistributionComponents(t *testing.T) {
	bin := collectorBinary(t)
	out, err := exec.Command(bin, "components").CombinedOutput()
	if err != nil {
		t.Fatalf("%s components: %v\n%s", filepath.Base(bin), err, out)
	}
	for _, c := range []string{"llmtrace", "llmtrace_metrics", "tail_sampling", "load_balancing", "prometheus", "otlp_grpc", "otlp", "batch", "memory_limiter", "forward", "health_check"} {
		if !strings.Contains(string(out), "name: "+c+"\n") {
			t.Errorf("the distribution lacks %s:\n%s", c, out)
		}
	}
}

// The recipe's configs validate with the distribution, with the
// environment's defaults and with every variable set.
func TestFleetRecipeValidates(t *testing.T) {
	bin := collectorBinary(t)
	for _, recipe := range []string{"tier1.yaml", "tier2.yaml"} {
		for _, env := range [][]string{nil, {"TIER2_ENDPOINTS=[127.0.0.1:1,127.0.0.1:2,127.0.0.1:3]", "SLOW_TTFT_SECONDS=0.5", "SAMPLE_PERCENTAGE=1.5", "TAIL_DECISION_WAIT=30s"}} {
			cmd := exec.Command(bin, "validate", "--config=file:"+filepath.Join("..", "..", "deploy", "fleet", recipe))
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s validate %s (env %v): %v\n%s", filepath.Base(bin), recipe, env, err, out)
			}
		}
	}
	// A broken setting fails validation: the command is not a rubber stamp.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("processors:\n  llmtrace:\n    engine: llama.cpp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "validate", "--config=file:"+filepath.Join("..", "..", "deploy", "fleet", "tier2.yaml"), "--config=file:"+bad)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "llama.cpp") {
		t.Errorf("an unknown engine validated: %v\n%s", err, out)
	}
}
