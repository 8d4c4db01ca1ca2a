package httpproto

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// HTTP/2 frame and setting codes (RFC 9113 §6).
const (
	frameSettings     = 0x4
	framePing         = 0x6
	frameWindowUpdate = 0x8
	flagAck           = 0x1

	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxConcurrentStreams = 0x3

	// The protocol's values for what a SETTINGS frame leaves out.
	defaultWindow    = 65535
	defaultFrameSize = 16384
)

// TestConfigureSettings: what an h2c connection may make the server hold
// is of the order of an HTTP/1.1 connection's. One stream, and a client
// may send no more than 64 KiB of body ahead of the handler's reads, in
// frames of at most 16 KiB; net/http's defaults (1 MiB windows, 1 MiB
// frames, its frame buffer kept for the connection's life) let each
// connection pin about 2 MiB, 8 GiB at the proxy's cap of 4,096.
func TestConfigureSettings(t *testing.T) {
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Minute}
	Configure(srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The preface, an empty SETTINGS frame and a PING.
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"+
		"\x00\x00\x08\x06\x00\x00\x00\x00\x00"+"llmtrace"); err != nil {
		t.Fatal(err)
	}
	settings := map[uint16]uint32{}
	connWindow := int64(defaultWindow)
	br := bufio.NewReader(c)
	// Every frame up to the PING's answer, and what else comes within
	// 200 ms of it: the server need not send its WINDOW_UPDATE first.
	for pong := false; ; {
		var h [9]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			if ne, ok := err.(net.Error); pong && ok && ne.Timeout() {
				break
			}
			t.Fatalf("reading the server's frames: %v", err)
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			t.Fatal(err)
		}
		stream := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
		switch typ, flags := h[3], h[4]; {
		case typ == framePing && flags&flagAck != 0:
			pong = true
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		case typ == frameSettings && flags&flagAck == 0:
			for p := payload; len(p) >= 6; p = p[6:] {
				settings[binary.BigEndian.Uint16(p)] = binary.BigEndian.Uint32(p[2:])
			}
		case typ == frameWindowUpdate && stream == 0 && n == 4:
			connWindow += int64(binary.BigEndian.Uint32(payload) & 0x7fffffff)
		}
	}
	get := func(id uint16, def uint32) uint32 {
		if v, ok := settings[id]; ok {
			return v
		}
		return def
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"MAX_CONCURRENT_STREAMS", int64(get(settingMaxConcurrentStreams, 1<<31)), 1},
		{"INITIAL_WINDOW_SIZE (a stream's body ahead of the handler)", int64(get(settingInitialWindowSize, defaultWindow)), 64 << 10},
		{"the connection's window", connWindow, 64 << 10},
		{"MAX_FRAME_SIZE", int64(get(settingMaxFrameSize, defaultFrameSize)), defaultFrameSize},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d, want at most %d", c.name, c.got, c.want)
		}
	}
}
