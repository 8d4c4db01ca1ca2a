package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/internal/gunzip"
	"github.com/llmtrace/llmtrace/otelstats"
)

// gz compresses each part as one gzip member and concatenates them, as
// `cat a.gz b.gz` does.
func gz(t testing.TB, parts ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range parts {
		zw := gzip.NewWriter(&b)
		if _, err := io.WriteString(zw, p); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// secondLog is a second request, finished by the engine and the frontend.
const secondLog = `{"request_id":"r2","type":"ARRIVED","ts":1700000001.000,"model":"llama-3-8b"}
{"request_id":"r2","type":"DETOKENIZED","ts":1700000001.010,"num_new_tokens":1}
{"request_id":"r2","type":"FINISHED","ts":1700000001.020,"side":"engine","finish_reason":"length"}
{"request_id":"r2","type":"FINISHED","ts":1700000001.021,"finish_reason":"length"}
`

// replayBytes replays in through gunzip.Maybe as runReplay does and returns
// the read error, the request ids printed, the rejected lines and the
// rejections counted by reason.
func replayBytes(t *testing.T, in io.Reader) (ids []string, rejected int, byReason map[string]int64, err error) {
	t.Helper()
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	var out, stderr bytes.Buffer
	r := &replayRun{stderr: &stderr, out: bufio.NewWriter(&out)}
	tr, terr := otelstats.NewTracker(otelstats.WithMeterProvider(mp), otelstats.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelstats.WithRequestTTL(0), otelstats.WithOnFinish(r.finished),
		otelstats.WithOnReject(func(e *otelstats.RejectError) { r.reject("%v", e) }))
	if terr != nil {
		t.Fatal(terr)
	}
	err = r.read(tr, gunzip.Maybe(in))
	tr.Flush()
	_ = tr.Shutdown(context.Background())
	if ferr := r.out.Flush(); ferr != nil {
		t.Fatal(ferr)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if _, rest, ok := strings.Cut(line, `"request_id":"`); ok {
			id, _, _ := strings.Cut(rest, `"`)
			ids = append(ids, id)
		}
	}
	if stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.String())
	}
	return ids, r.rejected, rejectedByReason(t, rd), err
}

// failingReader returns its error after its bytes.
type failingReader struct {
	b   []byte
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, f.err
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// TestReplayGzip: a gzip-compressed log is known by its magic bytes and
// read as the plain one is, every member of a concatenation included; a
// truncated or corrupt one ends the read with a *gunzip.Error after every
// update before the damage was recorded; the input's own failure (an
// interrupt) is not called corruption.
func TestReplayGzip(t *testing.T) {
	both := gz(t, readmeLog, secondLog)
	// A member boundary inside a line: the line reads whole.
	cut := strings.Index(secondLog, "DETOKENIZED")
	split := gz(t, readmeLog+secondLog[:cut], secondLog[cut:])
	first := gz(t, readmeLog)
	// The second member cut short: its trailer and part of its data lost.
	truncated := append(append([]byte{}, first...), gz(t, secondLog)[:20]...)
	// The CRC-32 in the trailer (the member's last 8 bytes: CRC, size) wrong.
	badCRC := append([]byte{}, gz(t, readmeLog)...)
	badCRC[len(badCRC)-8] ^= 0xff
	// A deflate block of the reserved type 3 right after the header.
	badDeflate := append(append([]byte{}, first...), 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0x07)
	for _, c := range []struct {
		name     string
		in       io.Reader
		ids      []string
		wantErr  error // matched with errors.Is; nil: none
		corrupt  bool  // the error is a *gunzip.Error
		rejected int
	}{
		{name: "plain", in: strings.NewReader(readmeLog + secondLog), ids: []string{"r1", "r2"}},
		{name: "empty", in: strings.NewReader("")},
		{name: "one byte", in: bytes.NewReader([]byte{0x1f}), rejected: 1}, // not gzip: a malformed line
		{name: "gzip", in: bytes.NewReader(gz(t, readmeLog+secondLog)), ids: []string{"r1", "r2"}},
		{name: "two members", in: bytes.NewReader(both), ids: []string{"r1", "r2"}},
		{name: "a member boundary inside a line", in: bytes.NewReader(split), ids: []string{"r1", "r2"}},
		{name: "an empty member", in: bytes.NewReader(gz(t, "", readmeLog, "")), ids: []string{"r1"}},
		{name: "second member truncated", in: bytes.NewReader(truncated), ids: []string{"r1"}, wantErr: io.ErrUnexpectedEOF, corrupt: true},
		{name: "header only", in: bytes.NewReader(gunzip.Magic[:]), wantErr: io.ErrUnexpectedEOF, corrupt: true},
		{name: "bad checksum", in: bytes.NewReader(badCRC), ids: []string{"r1"}, wantErr: gzip.ErrChecksum, corrupt: true},
		{name: "bad deflate data", in: bytes.NewReader(badDeflate), ids: []string{"r1"}, corrupt: true},
		{name: "garbage after a member", in: bytes.NewReader(append(append([]byte{}, first...), "{\"request_id\":\"r9\",\"type\":\"ARRIVED\"}\n"...)), ids: []string{"r1"}, wantErr: gzip.ErrHeader, corrupt: true},
		{
			name: "interrupted", in: &failingReader{b: both[:len(first)], err: context.Canceled},
			ids: []string{"r1"}, wantErr: context.Canceled,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ids, rejected, _, err := replayBytes(t, c.in)
			var ge *gunzip.Error
			switch {
			case c.wantErr == nil && !c.corrupt && err != nil:
				t.Errorf("read error %v, want none", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Errorf("read error %v, want %v", err, c.wantErr)
			case errors.As(err, &ge) != c.corrupt:
				t.Errorf("read error %v (%T): a *gunzip.Error %v, want %v", err, err, ge != nil, c.corrupt)
			}
			if ge != nil && !strings.Contains(ge.Error(), "truncated or corrupt") {
				t.Errorf("error %q does not say what is wrong", ge)
			}
			if strings.Join(ids, ",") != strings.Join(c.ids, ",") {
				t.Errorf("requests printed %v, want %v", ids, c.ids)
			}
			if rejected != c.rejected {
				t.Errorf("%d lines rejected, want %d", rejected, c.rejected)
			}
		})
	}
}

// TestReplayGzipBomb: decompression streams through the line bound, so a
// gzip bomb — 64 MiB of one line, a few dozen KiB compressed — costs a
// rejected too_long line and about a line's worth of memory, not its
// decompressed size; the line after it is read.
func TestReplayGzipBomb(t *testing.T) {
	const size = 64 << 20
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range size / len(chunk) {
		if _, err := zw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(zw, "\n"+readmeLog); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes compressed, %d decompressed", b.Len(), size+1+len(readmeLog))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids, rejected, byReason, err := replayBytes(t, bytes.NewReader(b.Bytes()))
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Everything allocated while reading, freed or not: the line bound
	// (1 MiB) grown by append, the decompressor's window and buffers, the
	// tracker's request.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("reading allocated %d MiB for a %d MiB line; the line bound is %d MiB", alloc>>20, size>>20, maxLine>>20)
	}
	if rejected != 1 || byReason[string(otelstats.ReasonTooLong)] != 1 {
		t.Errorf("%d lines rejected (%v), want the one too_long", rejected, byReason)
	}
	if len(ids) != 1 || ids[0] != "r1" {
		t.Errorf("requests printed %v, want r1 after the bomb", ids)
	}
}

// FuzzMaybeGunzip: any input reads without a panic; one without gzip's
// magic reads unchanged; one with it reads to its end or to a *gunzip.Error;
// and any content compressed as two members reads back whole.
func FuzzMaybeGunzip(f *testing.F) {
	f.Add([]byte(readmeLog), uint16(7))
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0x03, 0}, uint16(1))
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(secondLog))
	zw.Close()
	f.Add(b.Bytes(), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, at uint16) {
		got, err := io.ReadAll(gunzip.Maybe(bytes.NewReader(data)))
		if len(data) < 2 || data[0] != gunzip.Magic[0] || data[1] != gunzip.Magic[1] {
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("input without gzip's magic read as %q, %v", got, err)
			}
		} else if ge := (*gunzip.Error)(nil); err != nil && !errors.As(err, &ge) {
			t.Fatalf("a gzip input's error %v (%T) is no *gunzip.Error", err, err)
		}
		// As two members, split anywhere.
		i := 0
		if len(data) > 0 {
			i = int(at) % (len(data) + 1)
		}
		var two bytes.Buffer
		for _, part := range [][]byte{data[:i], data[i:]} {
			zw := gzip.NewWriter(&two)
			zw.Write(part)
			zw.Close()
		}
		got, err = io.ReadAll(gunzip.Maybe(&two))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("two members of %d and %d bytes read as %d bytes, %v", i, len(data)-i, len(got), err)
		}
	})
}
