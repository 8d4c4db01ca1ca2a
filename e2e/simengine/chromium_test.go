package simengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A page rendered in real headless Chromium, driven through the DevTools
// protocol over --remote-debugging-pipe (fd 3 carries commands in, fd 4
// replies and events out, each message JSON ending in a NUL byte): no
// websocket, no Node, no driver. What the page logs to its console, the
// exceptions it throws and the browser's own log entries (a resource that
// failed to load, a CSP violation, …) are collected while it loads, and a
// screenshot of the whole page is taken once it has.

// rendered is what the browser made of a page.
type rendered struct {
	PNG []byte
	// Problems are console messages of level warning or error, uncaught
	// exceptions and browser log entries of level warning or error.
	Problems []string
	// Console is every console message, for the record.
	Console []string
}

type cdpMsg struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type cdp struct {
	w      io.Writer
	mu     sync.Mutex
	id     int
	wait   map[int]chan cdpMsg
	events chan cdpMsg
}

func (c *cdp) call(ctx context.Context, session, method string, params any, out any) error {
	c.mu.Lock()
	c.id++
	id := c.id
	ch := make(chan cdpMsg, 1)
	c.wait[id] = ch
	c.mu.Unlock()
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	b, err := json.Marshal(cdpMsg{ID: id, Method: method, Params: p, SessionID: session})
	if err != nil {
		return err
	}
	if _, err := c.w.Write(append(b, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// read dispatches the browser's messages until the pipe closes.
func (c *cdp) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	defer close(c.events)
	for {
		b, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMsg
		if json.Unmarshal(b[:len(b)-1], &m) != nil {
			continue
		}
		if m.ID != 0 {
			c.mu.Lock()
			ch := c.wait[m.ID]
			delete(c.wait, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		c.events <- m
	}
}

// renderInChromium loads url in a fresh headless Chromium with a window
// width wide and returns the screenshot of the whole page and what went
// wrong while it loaded.
func renderInChromium(t *testing.T, bin, url string, width int) *rendered {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inR, inW, err := os.Pipe() // commands: we write, Chromium reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe() // replies: Chromium writes fd 4
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(t.TempDir(), "profile"), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	c := &cdp{w: inW, wait: map[int]chan cdpMsg{}, events: make(chan cdpMsg, 1024)}
	go c.read(outR)
	defer func() {
		_ = c.call(ctx, "", "Browser.close", struct{}{}, nil)
		inW.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		outR.Close()
	}()
	r, err := c.render(ctx, url, width)
	if err != nil {
		t.Fatalf("chromium: %v\nstderr:\n%s", err, lastLines(stderr.String(), 20))
	}
	return r
}

func (c *cdp) render(ctx context.Context, url string, width int) (*rendered, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	s := att.SessionID
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		if err := c.call(ctx, s, m, struct{}{}, nil); err != nil {
			return nil, err
		}
	}
	metrics := map[string]any{"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": false}
	if err := c.call(ctx, s, "Emulation.setDeviceMetricsOverride", metrics, nil); err != nil {
		return nil, err
	}
	if err := c.call(ctx, s, "Page.navigate", map[string]any{"url": url}, nil); err != nil {
		return nil, err
	}
	r := &rendered{}
	if err := c.collectUntilLoaded(ctx, s, r); err != nil {
		return nil, err
	}
	// The whole page: the viewport as tall as the content.
	var lm struct {
		ContentSize struct {
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	if err := c.call(ctx, s, "Page.getLayoutMetrics", struct{}{}, &lm); err != nil {
		return nil, err
	}
	metrics["height"] = int(lm.ContentSize.Height) + 1
	if err := c.call(ctx, s, "Emulation.setDeviceMetricsOverride", metrics, nil); err != nil {
		return nil, err
	}
	var shot struct {
		Data string `json:"data"`
	}
	if err := c.call(ctx, s, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		return nil, err
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		return nil, err
	}
	r.PNG = png
	// Anything logged while laying out the taller page.
	c.drain(s, r)
	return r, nil
}

// collectUntilLoaded gathers the session's console and log events until
// the page's load event, and those logged before a round trip after it.
func (c *cdp) collectUntilLoaded(ctx context.Context, session string, r *rendered) error {
	for {
		select {
		case m, ok := <-c.events:
			if !ok {
				return errors.New("the browser closed the pipe")
			}
			if m.SessionID != session {
				continue
			}
			if m.Method == "Page.loadEventFired" {
				// A round trip as a barrier: the browser sends the
				// session's events in order, so every message logged
				// before the evaluation is in c.events once it answers.
				if err := c.call(ctx, session, "Runtime.evaluate", map[string]any{"expression": "document.readyState"}, nil); err != nil {
					return err
				}
				c.drain(session, r)
				return nil
			}
			r.note(m)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the page to load: %w", ctx.Err())
		}
	}
}

func (c *cdp) drain(session string, r *rendered) {
	for {
		select {
		case m, ok := <-c.events:
			if !ok {
				return
			}
			if m.SessionID == session {
				r.note(m)
			}
		default:
			return
		}
	}
}

func (r *rendered) note(m cdpMsg) {
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		var parts []string
		for _, a := range p.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		line := "console." + p.Type + ": " + strings.Join(parts, " ")
		r.Console = append(r.Console, line)
		if p.Type == "error" || p.Type == "warning" || p.Type == "assert" {
			r.Problems = append(r.Problems, line)
		}
	case "Runtime.exceptionThrown":
		var p struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(m.Params, &p)
		r.Problems = append(r.Problems, "exception: "+p.Details.Text+" "+p.Details.Exception.Description)
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level, Source, Text, URL string
			} `json:"entry"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.Entry.Level == "error" || p.Entry.Level == "warning" {
			r.Problems = append(r.Problems, fmt.Sprintf("log %s (%s): %s %s", p.Entry.Level, p.Entry.Source, p.Entry.Text, p.Entry.URL))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
