package cli

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
)

// flagCase is one run of the llmtrace binary. args may hold placeholders,
// replaced per case: {tmp} a fresh directory, {sock} a Unix socket path in
// it, {addr} and {addr2} free loopback addresses, {log} an update log of
// two complete requests, {badlog} one with a bad line, {gzlog} {log}
// gzip-compressed as two members (`cat a.gz b.gz`), {badgz} {gzlog} with a
// truncated third member, {token} a token
// file, {jaeger} Jaeger's OTLP/gRPC endpoint (e2e/testbackend), {upstream}
// the example OpenAI-compatible server's URL (examples/httpserver).
//
// A one-shot case runs to its end; a serving case (ready set) runs until
// stderr shows ready, then interact runs against it, then it is
// interrupted as a user's Ctrl-C does. Either way the exit status must be
// exit, stdout and stderr must contain every string given, nothing may
// panic, and check (when set) looks at the files it wrote.
//
// Owners of a subcommand add its cases here; TestEveryFlagHasACase fails
// for a flag of any subcommand's -h that no case uses.
type flagCase struct {
	name     string
	args     []string
	stdin    string
	env      []string
	exit     int
	stdout   []string
	stderr   []string
	ready    string
	interact func(t *testing.T, v vars, p *proc)
	check    func(t *testing.T, v vars, stdout, stderr string)
}

// vars are a case's placeholder values.
type vars map[string]string

func (v vars) expand(s string) string {
	for k, val := range v {
		s = strings.ReplaceAll(s, "{"+k+"}", val)
	}
	return s
}

const updateLog = `{"request_id":"r1","type":"ARRIVED","ts":1700000000.000,"model":"llama-3-8b","operation":"chat"}
{"request_id":"r1","type":"INPUT_PROCESSED","ts":1700000000.002,"num_prompt_tokens":512}
{"request_id":"r1","type":"QUEUED","ts":1700000000.003}
{"request_id":"r1","type":"PREFILLING","ts":1700000000.010,"num_computed_tokens":512,"num_cached_tokens":128}
{"request_id":"r1","type":"DECODING","ts":1700000000.050}
{"request_id":"r1","type":"DETOKENIZED","ts":1700000000.051,"num_new_tokens":1}
{"request_id":"r1","type":"FINISHED","ts":1700000000.300,"side":"engine","finish_reason":"stop"}
{"request_id":"r1","type":"FINISHED","ts":1700000000.301,"finish_reason":"stop"}
{"request_id":"r2","type":"ARRIVED","ts":1700000001.000,"model":"llama-3-8b"}
{"request_id":"r2","type":"QUEUED","ts":1700000001.001}
{"request_id":"r2","type":"PREFILLING","ts":1700000001.002,"num_computed_tokens":8,"num_cached_tokens":0}
{"request_id":"r2","type":"DECODING","ts":1700000001.010}
{"request_id":"r2","type":"FINISHED","ts":1700000001.020,"side":"engine","finish_reason":"length"}
`

// gzipMembers compresses each part as one gzip member, concatenated as
// `cat a.gz b.gz` writes them.
func gzipMembers(parts ...string) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, p)
		zw.Close()
	}
	return b.Bytes()
}

// fileHas checks that the file named by placeholder key holds want.
func fileHas(key string, want ...string) func(*testing.T, vars, string, string) {
	return func(t *testing.T, v vars, _, _ string) {
		t.Helper()
		b, err := os.ReadFile(v[key])
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s has no %q:\n%.2000s", v[key], w, b)
			}
		}
	}
}

func post(t *testing.T, url, ctype string, body []byte, header ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

const chatBody = `{"model":"toy","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`

func chat(t *testing.T, base string) {
	t.Helper()
	if code := post(t, base+"/v1/chat/completions", "application/json", []byte(chatBody)); code != 200 {
		t.Errorf("chat through the proxy: %d", code)
	}
	http.DefaultClient.CloseIdleConnections()
}

var cases = map[string][]flagCase{
	"": {
		{name: "no command", exit: 2, stderr: []string{"no command given", "commands:"}},
		{name: "help", args: []string{"help"}, exit: 0, stderr: []string{"collect", "replay", "proxy", "load"}},
		{name: "-h", args: []string{"-h"}, exit: 0, stderr: []string{"usage: llmtrace"}},
		{name: "unknown", args: []string{"frobnicate"}, exit: 2, stderr: []string{`unknown command "frobnicate"`}},
	},
	"collect": {
		{name: "-h", args: []string{"-h"}, exit: 0, stderr: []string{"usage: llmtrace collect", "Exit status"}},
		{name: "no input", exit: 2, stderr: []string{"no input: give -listen", "llmtrace collect -h"}},
		{
			name: "OTEL_TRACES_SAMPLER_ARG not a ratio", args: []string{"-listen", "-"},
			env: []string{"OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=0,1"}, exit: 2, stderr: []string{`OTEL_TRACES_SAMPLER_ARG="0,1"`},
		},
		{name: "bad flag", args: []string{"-listne", "-"}, exit: 2, stderr: []string{"flag provided but not defined: -listne"}},
		{name: "unexpected argument", args: []string{"-listen", "-", "extra"}, exit: 2, stderr: []string{`unexpected argument "extra"`}},
		{name: "bad -listen", args: []string{"-listen", "udp:1.2.3.4:5"}, exit: 2, stderr: []string{`-listen "udp:1.2.3.4:5": want unix:PATH`}},
		{name: "-prometheus without -http", args: []string{"-listen", "-", "-prometheus"}, exit: 2, stderr: []string{"-prometheus serves /metrics on the -http server"}},
		{name: "bad -memory-budget", args: []string{"-listen", "-", "-memory-budget", "lots"}, exit: 2, stderr: []string{`"lots" is not a positive size`}},
		{name: "-max-conns 0", args: []string{"-listen", "-", "-max-conns", "0"}, exit: 2, stderr: []string{"-max-conns, -queue and -workers must be positive"}},
		{name: "-max-clock-ahead 0", args: []string{"-listen", "-", "-max-clock-ahead", "0s"}, exit: 2, stderr: []string{"-max-clock-ahead must be positive"}},
		{name: "missing -token-file", args: []string{"-listen", "-", "-token-file", "{tmp}/none"}, exit: 1, stderr: []string{"-token-file", "no such file"}},
		{name: "-http not loopback", args: []string{"-http", ":0"}, exit: 1, stderr: []string{"not a loopback address", "-allow-remote"}},
		{name: "-http without a port", args: []string{"-http", "localhost"}, exit: 2, stderr: []string{`-http "localhost": want HOST:PORT`, "missing port"}},
		{name: "-listen tcp not loopback", args: []string{"-listen", "tcp:0.0.0.0:0"}, exit: 1, stderr: []string{"not a loopback address"}},
		{
			name:  "stdin, every tracker flag",
			args:  []string{"-listen", "-", "-stats-out", "{tmp}/s.jsonl", "-spans-out", "{tmp}/spans.jsonl", "-stats-log", "0", "-queue", "128", "-workers", "1", "-memory-budget", "64MiB", "-grace", "1s", "-hold", "1s", "-max-clock-ahead", "30s", "-align-clocks", "-v"},
			stdin: string(jsonBody("flags-stdin")) + `{"request_id":"x","type":"NOPE","ts":1}` + "\n",
			exit:  0, stderr: []string{"unknown kind", "collector stopped", "updates=10"},
			check: func(t *testing.T, v vars, o, e string) {
				checkComplete(t, "flags-stdin", readStats(t, v["tmp"]+"/s.jsonl")["flags-stdin"])
				fileHas("spans", `"name":"llm.prefill"`)(t, vars{"spans": v["tmp"] + "/spans.jsonl"}, o, e)
			},
		},
		{
			name: "stdout outputs, -max-in-flight", args: []string{"-listen", "-", "-stats-out", "-", "-spans-out", "-", "-stats-log", "0", "-max-in-flight", "10"},
			stdin: string(jsonBody("to-stdout")), exit: 0, stdout: []string{`"request_id":"to-stdout"`, `"name":"chat m"`},
		},
		{
			name: "-stats-log", args: []string{"-listen", "-", "-stats-log", "10ms"},
			stdin: string(jsonBody("statslog")), exit: 0, stderr: []string{"collector stopped"},
		},
		{
			name: "unix, tcp, -http with -prometheus, -max-body", ready: `msg="serving HTTP"`,
			args: []string{"-listen", "unix:{sock}", "-listen", "tcp:{addr}", "-http", "{addr2}", "-prometheus", "-max-body", "4KiB", "-stats-log", "0", "-stats-out", "{tmp}/s.jsonl"},
			interact: func(t *testing.T, v vars, p *proc) {
				if code := post(t, "http://"+v["addr2"]+"/v1/updates", "application/x-ndjson", jsonBody("via-http")); code != 202 {
					t.Errorf("POST: %d", code)
				}
				big := bytes.Repeat(jsonBody("big"), 20)
				if code := post(t, "http://"+v["addr2"]+"/v1/updates", "application/x-ndjson", big); code != 413 {
					t.Errorf("POST %d bytes over -max-body 4KiB: %d, want 413", len(big), code)
				}
				if code, body := get(t, "http://"+v["addr2"]+"/metrics"); code != 200 || !strings.Contains(body, "llm_collector_updates") {
					t.Errorf("/metrics: %d", code)
				}
				for _, a := range [][2]string{{"unix", v["sock"]}, {"tcp", v["addr"]}} {
					c, err := net.Dial(a[0], a[1])
					if err != nil {
						t.Errorf("dial %s: %v", a[1], err)
						continue
					}
					c.Write(jsonBody("via-" + a[0]))
					c.Close()
				}
				http.DefaultClient.CloseIdleConnections()
			},
			check: func(t *testing.T, v vars, _, _ string) {
				s := readStats(t, v["tmp"]+"/s.jsonl")
				for _, id := range []string{"via-http", "via-unix", "via-tcp"} {
					checkComplete(t, id, s[id])
				}
			},
		},
		{
			name: "-token-file, -allow-remote, -max-conns, -idle-timeout", ready: "msg=listening addr=tcp:",
			// Port 0, read back from the log: freeport checks only
			// 127.0.0.1, and a wildcard bind can collide where it cannot
			// (this failed in CI, collect exiting before it listened).
			args: []string{"-listen", "tcp:0.0.0.0:0", "-allow-remote", "-token-file", "{token}", "-max-conns", "1", "-idle-timeout", "200ms", "-stats-log", "0"},
			interact: func(t *testing.T, v vars, p *proc) {
				_, port, err := net.SplitHostPort(strings.TrimPrefix(logValue(p.stderr.String(), "listening", "addr"), "tcp:"))
				if err != nil {
					t.Fatalf("collect's listening address: %v", err)
				}
				// A stranger is cut off; the one slot frees; the idle
				// connection times out.
				c, err := net.Dial("tcp", "127.0.0.1:"+port)
				if err != nil {
					t.Fatal(err)
				}
				c.Write(jsonBody("stranger"))
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				io.Copy(io.Discard, c)
				c.Close()
				p.waitStderr("unauthorized=1") // its slot is free once its end is logged
				idle, err := net.Dial("tcp", "127.0.0.1:"+port)
				if err != nil {
					t.Fatal(err)
				}
				idle.SetReadDeadline(time.Now().Add(30 * time.Second))
				io.Copy(io.Discard, idle)
				idle.Close()
			},
			stderr: []string{"must present the token", "unauthorized=1", "timed_out=1"},
		},
	},
	"replay": {
		{name: "-h", args: []string{"-h"}, exit: 0, stderr: []string{"usage: llmtrace replay", "2 usage error"}},
		{name: "no input", exit: 2, stderr: []string{"no input", "llmtrace replay -h"}},
		{name: "two inputs", args: []string{"a", "b"}, exit: 2, stderr: []string{"one input at a time"}},
		{name: "bad flag", args: []string{"-x", "{log}"}, exit: 2, stderr: []string{"flag provided but not defined: -x"}},
		{name: "unreadable", args: []string{"{tmp}/none.jsonl"}, exit: 1, stderr: []string{"no such file"}},
		{name: "file", args: []string{"{log}"}, exit: 0, stdout: []string{`"request_id":"r1"`, `"queue_duration_s":0.007`, `"request_id":"r2"`}, stderr: []string{"p50"}},
		{name: "stdin, -q", args: []string{"-q", "-"}, stdin: updateLog, exit: 0, stdout: []string{`"request_id":"r2"`}},
		{name: "rejected lines", args: []string{"{badlog}"}, exit: 3, stderr: []string{"line 14", "1 update(s) rejected"}},
		{name: "a directory", args: []string{"{tmp}"}, exit: 1, stderr: []string{"is a directory, not an update log"}},
		{name: "gzip file", args: []string{"{gzlog}"}, exit: 0, stdout: []string{`"request_id":"r1"`, `"request_id":"r2"`}, stderr: []string{"p50"}},
		{name: "gzip stdin", args: []string{"-q", "-"}, stdin: string(gzipMembers(updateLog[:300], updateLog[300:])), exit: 0, stdout: []string{`"request_id":"r2"`}},
		{
			// What was read before the damage is printed and summed up;
			// the status says the input could not be read.
			name: "truncated gzip", args: []string{"{badgz}"}, exit: 1, stdout: []string{`"request_id":"r1"`, `"request_id":"r2"`},
			stderr: []string{"requests: 2", "gzip-compressed input truncated or corrupt", "unexpected EOF"},
		},
		{
			name: "-grace, -hold: the log's own clock", args: []string{"-grace", "100ms", "-hold", "100ms", "{log}"}, exit: 0,
			// Timestamps from 2023, an hour apart from nothing: a replay
			// expires on the log's times, not this machine's clock.
			stdout: []string{`"request_id":"r1"`, `"finish_reason":"stop"`},
		},
	},
	"proxy": {
		{name: "-h", args: []string{"-h"}, exit: 0, stderr: []string{"usage: llmtrace proxy"}},
		{name: "no -upstream", exit: 2},
		// The upstream given bare, or a -models list split by a space: the
		// proxy ran, ignoring it.
		{name: "unexpected argument", args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-models", "toy,", "other"}, exit: 2,
			stderr: []string{`unexpected argument "other"`, "llmtrace proxy -h"}},
		{
			name: "OTEL_TRACES_SAMPLER the Go SDK lacks", args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-models", "toy"},
			env: []string{"OTEL_TRACES_SAMPLER=jaeger_remote"}, exit: 2, stderr: []string{`OTEL_TRACES_SAMPLER="jaeger_remote"`},
		},
		{
			name: "every flag", ready: "msg=proxying", args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-metrics-listen", "{addr2}",
				"-stats-out", "{tmp}/s.jsonl", "-spans-out", "{tmp}/spans.jsonl", "-stats-log", "50ms",
				"-stall-factor", "4", "-stall-min", "50ms", "-drain", "5s", "-trust-traceparent", "-server-timing",
				"-body-budget", "8388608", "-event-limit", "65536", "-idle-timeout", "30s", "-max-header-bytes", "32768",
				"-read-header-timeout", "5s", "-read-timeout", "1m", "-upstream-dial-timeout", "5s", "-upstream-header-timeout", "1m",
				"-models", "toy"},
			interact: func(t *testing.T, v vars, _ *proc) {
				chat(t, "http://"+v["addr"])
				if code, body := get(t, "http://"+v["addr2"]+"/metrics"); code != 200 || !strings.Contains(body, "gen_ai_server") {
					t.Errorf("/metrics: %d", code)
				}
			},
			check: func(t *testing.T, v vars, o, e string) {
				fileHas("s", `"finish_reason":"stop"`)(t, vars{"s": v["tmp"] + "/s.jsonl"}, o, e)
				fileHas("s", `"name":"chat toy"`)(t, vars{"s": v["tmp"] + "/spans.jsonl"}, o, e)
			},
		},
		{
			name: "-debug-listen", ready: "msg=proxying",
			args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-debug-listen", "{addr2}", "-models", "toy", "-stats-log", "0"},
			interact: func(t *testing.T, v vars, _ *proc) {
				chat(t, "http://"+v["addr"])
				if code, body := get(t, "http://"+v["addr2"]+"/debug/vars"); code != 200 || !strings.Contains(body, `"max_rss_bytes"`) {
					t.Errorf("/debug/vars: %d %.300s", code, body)
				}
			},
		},
		{
			// A B3 mesh: the caller's b3 header puts the request in its
			// trace, and tracecontext still goes upstream.
			name: "OTEL_PROPAGATORS", ready: "msg=proxying", env: []string{"OTEL_PROPAGATORS=b3,tracecontext"},
			args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-models", "toy", "-stats-log", "0", "-stats-out", "{tmp}/s.jsonl"},
			interact: func(t *testing.T, v vars, _ *proc) {
				if code := post(t, "http://"+v["addr"]+"/v1/chat/completions", "application/json", []byte(chatBody),
					"b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"); code != 200 {
					t.Errorf("chat through the proxy: %d", code)
				}
			},
			check: func(t *testing.T, v vars, o, e string) {
				fileHas("s", `"trace_id":"80f198ee56343ba864fe8b2a57d3eff7"`)(t, vars{"s": v["tmp"] + "/s.jsonl"}, o, e)
			},
		},
		{name: "OTEL_PROPAGATORS of an unknown name", args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-models", "toy"},
			env: []string{"OTEL_PROPAGATORS=tracecontext,zipkin"}, exit: 2, stderr: []string{"OTEL_PROPAGATORS", "zipkin"}},
		{
			// An added path is traced (an upstream 404 is still a traced
			// request); a removed one passes untraced.
			name: "-route", ready: "msg=proxying",
			args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-models", "toy", "-stats-log", "0", "-stats-out", "{tmp}/s.jsonl",
				"-route", "/v2/chat/=chat", "-route", "/v1/completions="},
			interact: func(t *testing.T, v vars, _ *proc) {
				if code := post(t, "http://"+v["addr"]+"/v2/chat", "application/json", []byte(chatBody)); code != 404 {
					t.Errorf("/v2/chat through the proxy: %d, want the upstream's 404", code)
				}
				if code := post(t, "http://"+v["addr"]+"/v1/completions", "application/json", []byte(`{"model":"toy","prompt":"hi","max_tokens":2}`)); code != 200 {
					t.Errorf("/v1/completions through the proxy: %d", code)
				}
				chat(t, "http://"+v["addr"])
			},
			check: func(t *testing.T, v vars, _, _ string) {
				b, err := os.ReadFile(v["tmp"] + "/s.jsonl")
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) != 2 || !strings.Contains(lines[0], `"error_type":"404"`) || !strings.Contains(lines[1], `"finish_reason":"stop"`) ||
					strings.Contains(string(b), "text_completion") {
					t.Errorf("want the /v2/chat 404 and the chat traced, the completion not:\n%s", b)
				}
			},
		},
		{name: "-route without an operation", args: []string{"-upstream", "{upstream}", "-route", "/chat/completions"}, exit: 2,
			stderr: []string{"invalid value", "want PATH=OPERATION"}},
		{name: "-route of an unknown operation", args: []string{"-upstream", "{upstream}", "-route", "/generate=generate"}, exit: 2,
			stderr: []string{"one of chat, text_completion, embeddings"}},
		{
			// Silent connections fill the cap; a client is still served,
			// closing the oldest, and the exit says what they cost.
			name: "-max-conns", ready: "msg=proxying",
			args: []string{"-upstream", "{upstream}", "-listen", "{addr}", "-max-conns", "3", "-models", "toy", "-stats-log", "0"},
			interact: func(t *testing.T, v vars, _ *proc) {
				for range 3 {
					c, err := net.Dial("tcp", v["addr"])
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
				}
				time.Sleep(100 * time.Millisecond) // accepted, silent
				chat(t, "http://"+v["addr"])
			},
			stderr: []string{"evicted_idle="},
		},
		{
			name: "-public, -models-wait from the upstream", ready: "msg=proxying",
			args:     []string{"-upstream", "{upstream}", "-listen", "{addr}", "-public", "-models-wait", "5s", "-stats-log", "0", "-stats-out", "{tmp}/s.jsonl"},
			interact: func(t *testing.T, v vars, _ *proc) { chat(t, "http://"+v["addr"]) },
			check: func(t *testing.T, v vars, o, e string) {
				fileHas("s", `"finish_reason":"stop"`)(t, vars{"s": v["tmp"] + "/s.jsonl"}, o, e)
			},
		},
	},
	"load": {
		{name: "-h", args: []string{"-h"}, exit: 0, stderr: []string{"usage: llmtrace load"}},
		{name: "bad -endpoint", args: []string{"-endpoint", "nope"}, exit: 2, stderr: []string{"want host:port"}},
		{name: "no endpoint", exit: 2},
		{
			name: "one level", args: []string{"-endpoint", "{jaeger}", "-rate", "200", "-duration", "1s", "-in-flight", "8", "-prompt-tokens", "8",
				"-output-tokens", "4", "-step-time", "1ms", "-max-waiting", "64", "-progress", "300ms", "-metrics"},
			exit: 0, stdout: []string{"llmtrace-load rate=200.0", "dropped=0"},
		},
		{
			name: "-find-max", args: []string{"-endpoint", "{jaeger}", "-rate", "100", "-duration", "200ms", "-find-max", "-levels", "2"},
			exit: 0, stdout: []string{"llmtrace-load max_rate="},
		},
	},
}

// backends are started once, for the cases that need them, and live as
// long as parent (TestFlags itself, not the case that first needed them).
type backends struct {
	parent   *testing.T
	mu       sync.Mutex
	jaeger   *testbackend.Jaeger
	upstream string
}

func (b *backends) vars(t *testing.T, c *flagCase) vars {
	t.Helper()
	dir := shortDir(t)
	v := vars{"tmp": dir, "sock": filepath.Join(dir, "c.sock"), "addr": freeAddr(t), "addr2": freeAddr(t),
		"log": filepath.Join(dir, "updates.jsonl"), "badlog": filepath.Join(dir, "bad.jsonl"), "token": filepath.Join(dir, "token")}
	os.WriteFile(v["log"], []byte(updateLog), 0o600)
	os.WriteFile(v["badlog"], []byte(updateLog+`{"request_id":"r3","type":"QUEUED"}`+"\n"), 0o600)
	os.WriteFile(v["token"], []byte("flag-token\n"), 0o600)
	v["gzlog"], v["badgz"] = filepath.Join(dir, "updates.jsonl.gz"), filepath.Join(dir, "bad.jsonl.gz")
	gzlog := gzipMembers(updateLog[:300], updateLog[300:])
	os.WriteFile(v["gzlog"], gzlog, 0o600)
	os.WriteFile(v["badgz"], append(gzlog, gzipMembers(updateLog)[:30]...), 0o600)
	all := strings.Join(c.args, " ")
	b.mu.Lock()
	defer b.mu.Unlock()
	if strings.Contains(all, "{jaeger}") {
		if b.jaeger == nil {
			b.jaeger = testbackend.StartJaeger(b.parent)
		}
		v["jaeger"] = b.jaeger.OTLPGRPCEndpoint()
	}
	if strings.Contains(all, "{upstream}") {
		if b.upstream == "" {
			b.upstream = startUpstream(b.parent)
		}
		v["upstream"] = b.upstream
	}
	return v
}

// startUpstream runs examples/httpserver, the README's OpenAI-compatible
// example server, for the proxy's cases; it lives until the test ends.
func startUpstream(t *testing.T) string {
	t.Helper()
	addr := freeAddr(t)
	p := start(t, noExport(), root, build(t, "examples/httpserver"), "-listen", addr, "-token-delay", "2ms", "-stats-interval", "0")
	p.waitFor("the example server", func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return "http://" + addr
}

// TestFlags runs every case of the table through the built binary.
func TestFlags(t *testing.T) {
	b := backends{parent: t}
	subs := make([]string, 0, len(cases))
	for s := range cases {
		subs = append(subs, s)
	}
	sort.Strings(subs)
	for _, sub := range subs {
		for _, c := range cases[sub] {
			t.Run(strings.TrimSpace(sub+" "+c.name), func(t *testing.T) {
				v := b.vars(t, &c)
				args := []string{}
				if sub != "" {
					args = append(args, sub)
				}
				for _, a := range c.args {
					args = append(args, v.expand(a))
				}
				env := noExport(c.env...)
				if strings.Contains(strings.Join(c.args, " "), "{jaeger}") {
					env = cleanEnv(c.env...) // load exports to Jaeger
				}
				var code int
				var stdout, stderr string
				if c.ready == "" {
					code, stdout, stderr = run(t, env, c.stdin, llmtrace(t), args...)
				} else {
					p := start(t, env, root, llmtrace(t), args...)
					p.waitStderr(c.ready)
					if c.interact != nil {
						c.interact(t, v, p)
					}
					code = p.stop()
					stdout, stderr = p.stdout.String(), p.stderr.String()
				}
				if code != c.exit {
					t.Errorf("llmtrace %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, c.exit, tail(stdout), tail(stderr))
				}
				for _, w := range c.stdout {
					if !strings.Contains(stdout, w) {
						t.Errorf("stdout has no %q:\n%s", w, tail(stdout))
					}
				}
				for _, w := range c.stderr {
					if !strings.Contains(stderr, w) {
						t.Errorf("stderr has no %q:\n%s", w, tail(stderr))
					}
				}
				if c.check != nil && !t.Failed() {
					c.check(t, v, stdout, stderr)
				}
			})
		}
	}
}

var flagRE = regexp.MustCompile(`(?m)^  -([a-zA-Z0-9-]+)`)

// TestEveryFlagHasACase: every flag a subcommand's -h shows is used by a
// case of the table (so every flag runs through the binary).
func TestEveryFlagHasACase(t *testing.T) {
	for sub, cs := range cases {
		if sub == "" {
			continue
		}
		_, _, help := run(t, noExport(), "", llmtrace(t), sub, "-h")
		flags := flagRE.FindAllStringSubmatch(help, -1)
		if len(flags) == 0 {
			t.Errorf("llmtrace %s -h shows no flags:\n%s", sub, help)
		}
		for _, f := range flags {
			used := false
			for _, c := range cs {
				for _, a := range c.args {
					if a == "-"+f[1] || strings.HasPrefix(a, "-"+f[1]+"=") {
						used = true
					}
				}
			}
			if !used {
				t.Errorf("llmtrace %s -%s: no case in flags_test.go uses it", sub, f[1])
			}
		}
	}
}
