package debugsrv

import (
	"encoding/json"
	"net/http"
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
