package transport_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// A collector serving a Unix socket, as `llmtrace collect -listen unix:PATH
// -token-file FILE` does, and an engine process's Producer feeding it.
func ExampleServer() {
	dir, _ := os.MkdirTemp("", "ex")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "collector.sock")

	finished := make(chan *otelstats.RequestStats, 1)
	tr, _ := otelstats.NewTracker(
		otelstats.WithAutoSweep(100*time.Millisecond), // live: expiry on the tracker's own clock
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) { c := *s; finished <- &c }),
	)
	defer tr.Shutdown(context.Background())
	srv, err := transport.NewServer(transport.ServerConfig{
		Collector: transport.Config{Tracker: tr, Token: "s3cret"}, // asked of TCP and HTTP producers
		Listen:    []transport.Addr{{Network: "unix", Address: sock}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()

	// In the engine's process.
	p, _ := transport.NewProducer(transport.ProducerConfig{Addr: "unix:" + sock, Name: "engine-0", Side: otelstats.SideEngine})
	t0 := time.Now()
	for _, u := range []otelstats.Update{
		{RequestID: "r1", Kind: otelstats.KindArrived, Time: t0, Model: "llama"},
		{RequestID: "r1", Kind: otelstats.KindQueued, Time: t0.Add(time.Millisecond)},
		{RequestID: "r1", Kind: otelstats.KindPrefilling, Time: t0.Add(3 * time.Millisecond), NumComputedTokens: 8},
		{RequestID: "r1", Kind: otelstats.KindDecoding, Time: t0.Add(9 * time.Millisecond)},
		{RequestID: "r1", Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: t0.Add(12 * time.Millisecond), FinishReason: "stop"},
	} {
		p.Send(u) // never blocks the engine
	}
	_ = p.Close(context.Background())

	s := <-finished
	fmt.Println(s.RequestID, s.FinishReason, "queue", s.QueueDuration.Value, "ttft", s.FirstTokenLatency.Value)
	stop()
	fmt.Println("run:", <-ran)
	// Output:
	// r1 stop queue 2ms ttft 9ms
	// run: <nil>
}
