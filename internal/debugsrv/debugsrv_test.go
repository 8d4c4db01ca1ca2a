package debugsrv

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

func TestServe(t *testing.T) {
	defer goleak.VerifyNone(t)
	addr, stop, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	var vars struct {
		Memstats struct{ Mallocs, TotalAlloc uint64 } `json:"memstats"`
		Process  *struct {
			CPUSeconds  float64 `json:"cpu_seconds"`
			MaxRSSBytes int64   `json:"max_rss_bytes"`
		} `json:"process"`
	}
	err = json.NewDecoder(resp.Body).Decode(&vars)
	resp.Body.Close()
	if err != nil || vars.Memstats.Mallocs == 0 || vars.Memstats.TotalAlloc == 0 {
		t.Fatalf("vars %+v, %v", vars, err)
	}
	if runtime.GOOS == "linux" && (vars.Process == nil || vars.Process.CPUSeconds <= 0 || vars.Process.MaxRSSBytes < 1<<20) {
		t.Errorf("process %+v", vars.Process)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/cmdline"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// childEnv makes the test binary a child that prints its processVars.
const childEnv = "DEBUGSRV_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		_ = json.NewEncoder(os.Stdout).Encode(processVars())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The peak resident set is the process's own, not its parent's: Linux
// carries getrusage's ru_maxrss across fork and exec, so a proxy started by
// a test binary holding 256 MiB would report 256 MiB.
func TestPeakRSSIsOwn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the inheritance is Linux's")
	}
	ballast := make([]byte, 256<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1 // every page resident
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.Output()
	runtime.KeepAlive(ballast)
	if err != nil {
		t.Fatal(err)
	}
	var child struct {
		MaxRSSBytes int64 `json:"max_rss_bytes"`
	}
	if err := json.Unmarshal(out, &child); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if child.MaxRSSBytes <= 0 || child.MaxRSSBytes > 128<<20 {
		t.Errorf("child's peak RSS %d MiB; its parent held 256 MiB, the child far less", child.MaxRSSBytes>>20)
	}
}
