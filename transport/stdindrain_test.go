package transport

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"
)

// TestStdinDrainsAtShutdown: with stdin beside a socket, a shutdown gives
// stdin the drain grace a connection gets. Its producer's last updates,
// written just after the run was told to stop (the producer gets the same
// signal and flushes), are recorded, not dropped by a collector already
// closed.
func TestStdinDrainsAtShutdown(t *testing.T) {
	e := newEnv(t, Config{DrainGrace: 2 * time.Second})
	inR, inW := io.Pipe()
	cfg := ServerConfig{Collector: e.c.cfg, Listen: []Addr{{"unix", filepath.Join(shortDir(t), "c.sock")}}, Stdin: inR}
	e.c.Close(context.Background()) // the server makes its own collector from the config
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	t0 := time.Now().Add(-time.Second)
	write := func(id string) {
		for _, u := range lifecycle(id, t0) {
			if _, err := inW.Write(AppendUpdateJSON(nil, &u)); err != nil {
				t.Error(err)
			}
		}
	}
	write("before")
	cancel()
	time.Sleep(50 * time.Millisecond) // the run is stopping
	write("after")
	inW.Close()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	st := srv.Collector().Stats()
	if st.Dropped != 0 || st.Recorded != 2*int64(len(lifecycle("x", t0))) {
		t.Errorf("recorded %d, dropped %d: stdin's last updates lost at shutdown", st.Recorded, st.Dropped)
	}
}
