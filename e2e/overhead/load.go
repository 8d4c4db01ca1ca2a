package overhead

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Tokens is the completion each request asks for: the toy engine's natural
// length for seed 3 is 36, so max_tokens ends it at 32.
const Tokens = 32

const requestBody = `{"model":"toy","stream":true,"max_tokens":32,"seed":3,"messages":[` +
	`{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Tell me about tracing a serving stack."}]}`

// Load is what a closed-loop load measured: every request that finished
// within the measured window, its TTFT and its gaps between content
// chunks (ITL), as the client saw them.
type Load struct {
	Started          int // requests sent, finished or not
	Requests, Tokens int
	Errors           int
	FirstError       string
	Elapsed          time.Duration
	TTFT, ITL        []time.Duration
}

// Drive keeps streams requests open at once against base until ctx ends,
// each a new one as soon as the last finished, and returns what finished.
func Drive(ctx context.Context, client *http.Client, base string, streams int) *Load {
	var (
		mu    sync.Mutex
		total = &Load{}
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range streams {
		wg.Go(func() {
			var l Load
			for ctx.Err() == nil {
				l.Started++
				ttft, gaps, err := stream(ctx, client, base)
				switch {
				case ctx.Err() != nil: // cut by the end of the window: not counted
				case err != nil:
					l.Errors++
					if l.FirstError == "" {
						l.FirstError = err.Error()
					}
				default:
					l.Requests++
					l.Tokens += Tokens
					l.TTFT = append(l.TTFT, ttft)
					l.ITL = append(l.ITL, gaps...)
				}
			}
			mu.Lock()
			total.Started += l.Started
			total.Requests += l.Requests
			total.Tokens += l.Tokens
			total.Errors += l.Errors
			if total.FirstError == "" {
				total.FirstError = l.FirstError
			}
			total.TTFT = append(total.TTFT, l.TTFT...)
			total.ITL = append(total.ITL, l.ITL...)
			mu.Unlock()
		})
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	return total
}

// stream sends one streamed chat completion and times its content chunks.
func stream(ctx context.Context, client *http.Client, base string) (ttft time.Duration, gaps []time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(requestBody))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	gaps = make([]time.Duration, 0, Tokens-1)
	var last time.Time
	chunks, done := 0, false
	for {
		line, err := r.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data: ")) {
			switch {
			case bytes.HasPrefix(line, []byte("data: [DONE]")):
				done = true
			case bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"content":""`)):
				now := time.Now()
				if chunks == 0 {
					ttft = now.Sub(start)
				} else {
					gaps = append(gaps, now.Sub(last))
				}
				last = now
				chunks++
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, nil, err
		}
	}
	if chunks != Tokens || !done {
		return 0, nil, fmt.Errorf("%d content chunks, [DONE] %v; want %d and [DONE]", chunks, done, Tokens)
	}
	return ttft, gaps, nil
}
