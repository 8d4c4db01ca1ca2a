package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
)

// A README code block's commands, as a user would type them: `\`
// continuations joined, comments and a leading "$ " dropped.
type block struct {
	file string
	line int
	lang string
	text string   // the block as written
	cmds []string // its shell commands
}

var fenceRE = regexp.MustCompile("^```([a-z]*)\\s*$")

// readBlocks returns the fenced code blocks of a Markdown file.
func readBlocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := fenceRE.FindStringSubmatch(line)
		switch {
		case m != nil && cur == nil:
			cur = &block{file: path, line: n, lang: m[1]}
		case m != nil && m[1] == "":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	for i := range out {
		if b := &out[i]; b.lang == "sh" || b.lang == "bash" || b.lang == "console" {
			b.cmds = shellCommands(b.text)
		}
	}
	return out
}

// shellCommands splits a block into commands.
func shellCommands(text string) []string {
	var cmds []string
	var cur string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "$ ")
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		line = stripComment(line)
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		cur += line
		if cur = strings.Join(strings.Fields(cur), " "); cur != "" {
			cmds = append(cmds, cur)
		}
		cur = ""
	}
	return cmds
}

// stripComment drops a " # comment" outside quotes.
func stripComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
		case quote == 0 && c == '#' && (i == 0 || line[i-1] == ' '):
			return strings.TrimSpace(line[:i])
		}
	}
	return line
}

// readmeScenario runs one block's commands. The commands run as written
// from the repository's root through bash, with only what the test
// environment forces replaced (rewrite): fixed ports and /tmp paths by
// free ones, and `bash scripts/jaeger.sh &` by e2e/testbackend's Jaeger
// on free ports (the same binary, which the script would build and run on
// the fixed ports). A command the scenario skips says why.
type readmeScenario struct {
	cmds []string
	run  func(t *testing.T, b block)
}

// shell runs README commands with a block's replacements.
type shell struct {
	t       *testing.T
	env     []string
	rewrite *strings.Replacer
}

func (s *shell) line(cmd string) string { return s.rewrite.Replace(strings.TrimSuffix(cmd, " &")) }

// run runs cmd to its end and returns its status and output.
func (s *shell) run(cmd string) (int, string, string) {
	s.t.Helper()
	s.t.Logf("$ %s", s.line(cmd))
	return run(s.t, s.env, "", "bash", "-c", s.line(cmd))
}

// ok runs cmd and fails the test unless it exits 0.
func (s *shell) ok(cmd string) (string, string) {
	s.t.Helper()
	code, o, e := s.run(cmd)
	if code != 0 {
		s.t.Errorf("README command %q exited %d\nstdout:\n%s\nstderr:\n%s", cmd, code, tail(o), tail(e))
	}
	return o, e
}

var goRunRE = regexp.MustCompile(`^((?:[A-Z_]+=\S* )*)go run \./(\S+)`)

// background starts cmd (a README command ending in &, or a server the
// next command talks to), to be stopped with Ctrl-C. An interrupted
// `go run` exits 1 whatever its program returned, so "go run ./pkg" runs
// as the program go run would build: the status checked is the program's.
func (s *shell) background(cmd string) *proc {
	s.t.Helper()
	line := s.line(cmd)
	if m := goRunRE.FindStringSubmatch(line); m != nil {
		line = m[1] + build(s.t, m[2]) + line[len(m[0]):]
	}
	s.t.Logf("$ %s &", line)
	return start(s.t, s.env, root, "bash", "-c", line)
}

func newShell(t *testing.T, env []string, oldnew ...string) *shell {
	return &shell{t: t, env: env, rewrite: strings.NewReplacer(oldnew...)}
}

// jaegerEnv starts Jaeger for a block that runs scripts/jaeger.sh, and
// returns the rewrites that point the block's fixed ports at it.
func jaegerEnv(t *testing.T) (*testbackend.Jaeger, []string) {
	j := testbackend.StartJaeger(t)
	q := strings.TrimPrefix(j.QueryURL(), "http://")
	return j, []string{"localhost:4317", j.OTLPGRPCEndpoint(), "localhost:4318", j.OTLPHTTPEndpoint(), "localhost:16686", q}
}

var readmeScenarios = []readmeScenario{
	{
		cmds: []string{"go run ./examples/simengine", "bash scripts/test.sh"},
		run: func(t *testing.T, b block) {
			// No OTEL_* at all: the demo needs nothing but Go, and must
			// say so and exit 0.
			sh := newShell(t, cleanEnv())
			o, e := sh.ok(b.cmds[0])
			if !strings.Contains(o+e, "p99") {
				t.Errorf("the demo printed no summary table:\n%s", tail(o))
			}
			t.Log("skipped: bash scripts/test.sh — the suite this test is part of")
		},
	},
	{
		// The measuring runs take minutes; the same commands run briefly
		// here (20 requests per mode; the study's every configuration
		// once), so a flag or path they name cannot rot.
		cmds: []string{"go test -run='^$' -bench='^BenchmarkSideBySide$' -benchtime=600x -count=5 ./openaihttp"},
		run: func(t *testing.T, b block) {
			sh := newShell(t, cleanEnv(), "-benchtime=600x -count=5", "-benchtime=20x -count=1")
			if o, _ := sh.ok(b.cmds[0]); !strings.Contains(o, "BenchmarkSideBySide") {
				t.Errorf("no benchmark result:\n%s", tail(o))
			}
		},
	},
	{
		cmds: []string{"cd e2e && LLMTRACE_OVERHEAD=full go test -count=1 -timeout=60m -run='^TestOverhead$' -v ./overhead"},
		run: func(t *testing.T, b block) {
			sh := newShell(t, cleanEnv(), "LLMTRACE_OVERHEAD=full ", "")
			if o, _ := sh.ok(b.cmds[0]); !strings.Contains(o, "--- PASS: TestOverhead") {
				t.Errorf("the study's brief run did not pass:\n%s", tail(o))
			}
		},
	},
	{
		cmds: []string{"go get github.com/llmtrace/llmtrace@latest"},
		run: func(t *testing.T, b block) {
			t.Skip("go get — the module is not published from the test machines; the example module embedding it (replace directive to the repository) builds in the suite")
		},
	},
	{
		cmds: []string{"go run ./cmd/llmtrace proxy -listen :8001 -upstream http://localhost:8000"},
		run: func(t *testing.T, b block) {
			up, addr := startUpstream(t), freeAddr(t)
			// :8001 is every interface; the test's port is loopback.
			sh := newShell(t, noExport(), "-listen :8001", "-listen "+addr, "http://localhost:8000", up)
			p := sh.background(b.cmds[0])
			dialUntil(t, p, "tcp", addr)
			chat(t, "http://"+addr)
			if code := p.stop(); code != 0 {
				t.Errorf("proxy exited %d", code)
			}
		},
	},
	{
		cmds: []string{
			"go run ./cmd/llmtrace collect -listen unix:/tmp/llmtrace.sock -http 127.0.0.1:4320",
			"python3 examples/multiprocess/producer.py unix:/tmp/llmtrace.sock 5",
		},
		run: func(t *testing.T, b block) {
			sock, addr := filepath.Join(shortDir(t), "llmtrace.sock"), freeAddr(t)
			sh := newShell(t, noExport(), "/tmp/llmtrace.sock", sock, "127.0.0.1:4320", addr)
			p := sh.background(b.cmds[0])
			dialUntil(t, p, "unix", sock)
			if code, body := get(t, "http://"+addr+"/healthz"); code != 200 || body != "ok\n" {
				t.Errorf("/healthz: %d %q", code, body)
			}
			sh.ok(b.cmds[1])
			p.waitStderr("producer=toy-python-engine encoding=binary updates=")
			if code := p.stop(); code != 0 {
				t.Errorf("collect exited %d", code)
			}
			// 5 requests of 14 updates each (ARRIVED, INPUT_PROCESSED, QUEUED,
			// PREFILLING, 4 × DECODING + DETOKENIZED, 2 × FINISHED).
			if n := logInt(p.stderr.String(), "collector stopped", "recorded"); n != 5*14 {
				t.Errorf("collect recorded %d updates, want the producer's 70:\n%s", n, p.stderr.String())
			}
		},
	},
	{
		cmds: []string{
			"bash scripts/jaeger.sh &",
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 go run ./examples/simengine",
			"curl -s 'localhost:16686/api/v3/services'",
		},
		run: func(t *testing.T, b block) {
			_, rw := jaegerEnv(t)
			sh := newShell(t, cleanEnv(), rw...)
			sh.ok(b.cmds[1])
			o, _ := sh.ok(b.cmds[2])
			if !strings.Contains(o, `"simengine"`) {
				t.Errorf("Jaeger knows no simengine service: %s", o)
			}
		},
	},
	{
		cmds: []string{
			"docker compose up -d",
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 OTEL_METRIC_EXPORT_INTERVAL=5000 go run ./examples/simengine -realtime -speedup 10",
		},
		run: func(t *testing.T, b block) {
			t.Log("skipped: docker compose up -d — no Docker on the test machines; e2e/deploycheck validates the compose file, the collector config and the dashboards")
			// The demo's command runs against Jaeger instead of the stack
			// (the same OTLP receiver the stack's collector forwards to).
			_, rw := jaegerEnv(t)
			sh := newShell(t, cleanEnv(), rw...)
			sh.ok(b.cmds[1])
		},
	},
	{
		cmds: []string{"go run ./cmd/llmtrace replay updates.jsonl > stats.jsonl"},
		run: func(t *testing.T, b block) {
			// The README's update log is the json block before the command,
			// its output the one after.
			blocks := readBlocks(t, b.file)
			var in, want string
			for i := range blocks {
				if blocks[i].line == b.line {
					in, want = blocks[i-1].text, blocks[i+1].text
				}
			}
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "updates.jsonl"), []byte(in), 0o600)
			sh := newShell(t, noExport(), "updates.jsonl", filepath.Join(dir, "updates.jsonl"), "stats.jsonl", filepath.Join(dir, "stats.jsonl"))
			sh.ok(b.cmds[0])
			got, _ := os.ReadFile(filepath.Join(dir, "stats.jsonl"))
			compareStats(t, got, []byte(want))
		},
	},
	{
		cmds: []string{
			"bash scripts/jaeger.sh &",
			"go run ./cmd/llmtrace load -endpoint localhost:4317 -rate 2000 -duration 10s",
			"go run ./cmd/llmtrace load -endpoint localhost:4317 -rate 1000 -find-max",
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf go run ./cmd/llmtrace load -rate 2000 -duration 10s",
		},
		run: func(t *testing.T, b block) {
			_, rw := jaegerEnv(t)
			sh := newShell(t, cleanEnv(), rw...)
			o, _ := sh.ok(b.cmds[1])
			if !strings.Contains(o, "llmtrace-load rate=2000.0") {
				t.Errorf("no result line:\n%s", o)
			}
			// As written, -find-max runs up to ten 10 s levels; the same
			// command with shorter levels (flags after it win).
			o, _ = sh.ok(b.cmds[2] + " -duration 1s -levels 3")
			if !strings.Contains(o, "llmtrace-load max_rate=") {
				t.Errorf("no max_rate line:\n%s", o)
			}
			if o, _ = sh.ok(b.cmds[3]); !strings.Contains(o, "llmtrace-load rate=2000.0") || !strings.Contains(o, " dropped=0") {
				t.Errorf("over OTLP/HTTP:\n%s", o)
			}
		},
	},
	{
		cmds: []string{
			"cd otelcol && go run go.opentelemetry.io/collector/cmd/builder@v0.161.0 --config=builder-config.yaml",
			"TIER2_ENDPOINTS='[tier2-0:4317,tier2-1:4317]' ./_build/otelcol-llmtrace --config=file:../deploy/fleet/tier1.yaml",
			"JAEGER_OTLP_ENDPOINT=jaeger:4317 ./_build/otelcol-llmtrace --config=file:../deploy/fleet/tier2.yaml",
		},
		run: func(t *testing.T, b block) {
			// The build as written: the manifest's replace lines are
			// copied into otelcol/_build/go.mod, so a wrong relative
			// target fails here (the e2e/fleet harness builds elsewhere).
			sh := newShell(t, cleanEnv())
			sh.ok(b.cmds[0])
			// tier2-0 and jaeger are a deployment's host names, so the two
			// tiers are validated here rather than run; e2e/fleet runs both
			// against Jaeger and Prometheus (TestFleetLive).
			for _, c := range b.cmds[1:] {
				sh.ok("cd otelcol && " + strings.Replace(c, " --config=", " validate --config=", 1))
			}
		},
	},
	// examples/multiprocess/README.md
	{
		cmds: []string{
			"go run ./examples/multiprocess",
			"go run ./examples/multiprocess -clock-offset=-400ms",
			"go run ./examples/multiprocess -clock-offset=-400ms -align-clocks",
		},
		run: func(t *testing.T, b block) {
			sh := newShell(t, noExport())
			for _, c := range b.cmds {
				o, _ := sh.ok(c)
				if n := strings.Count(o, `"request_id":`); n != 24 {
					t.Errorf("%s: %d requests' stats, want 24", c, n)
				}
			}
		},
	},
	{
		cmds: []string{
			"go build -o /tmp/llmtrace ./cmd/llmtrace && go build -o /tmp/mp ./examples/multiprocess",
			"/tmp/llmtrace collect -listen unix:/tmp/c.sock -align-clocks -stats-out - &",
			"/tmp/mp -role engine -engine unix:/tmp/e.sock -collector unix:/tmp/c.sock -clock-offset=-400ms &",
			"/tmp/mp -role frontend -spawn-engine=false -host-collector=false -engine unix:/tmp/e.sock -collector unix:/tmp/c.sock",
		},
		run: func(t *testing.T, b block) {
			dir := shortDir(t)
			sh := newShell(t, noExport(), "/tmp/", dir+"/")
			sh.ok(b.cmds[0])
			col := sh.background(b.cmds[1])
			dialUntil(t, col, "unix", filepath.Join(dir, "c.sock"))
			eng := sh.background(b.cmds[2])
			sh.ok(b.cmds[3])
			if code := eng.wait(60 * time.Second); code != 0 {
				t.Errorf("engine exited %d", code)
			}
			col.waitFor("both streams read", func() bool { return strings.Count(col.stderr.String(), `msg="stream ended`) >= 2 })
			if code := col.stop(); code != 0 {
				t.Errorf("collect exited %d", code)
			}
			if n := strings.Count(col.stdout.String(), `"request_id":`); n != 24 {
				t.Errorf("collect wrote %d requests' stats, want 24", n)
			}
		},
	},
	{
		cmds: []string{
			"/tmp/llmtrace collect -listen unix:/tmp/c.sock -stats-out - &",
			"python3 examples/multiprocess/producer.py unix:/tmp/c.sock 5",
		},
		run: func(t *testing.T, b block) {
			// /tmp/llmtrace is the binary the block before built.
			dir := shortDir(t)
			os.Symlink(llmtrace(t), filepath.Join(dir, "llmtrace"))
			sh := newShell(t, noExport(), "/tmp/", dir+"/")
			col := sh.background(b.cmds[0])
			dialUntil(t, col, "unix", filepath.Join(dir, "c.sock"))
			sh.ok(b.cmds[1])
			col.waitFor("5 requests", func() bool { return strings.Count(col.stdout.String(), `"request_id":`) == 5 })
			if code := col.stop(); code != 0 {
				t.Errorf("collect exited %d", code)
			}
		},
	},
}

// compareStats compares RequestStats lines field by field, where the
// README writes "…" for a value that differs per run (ids).
func compareStats(t *testing.T, got, want []byte) {
	t.Helper()
	g, w := bytes.Split(bytes.TrimSpace(got), []byte("\n")), bytes.Split(bytes.TrimSpace(want), []byte("\n"))
	if len(g) != len(w) {
		t.Fatalf("%d lines, the README shows %d:\n%s", len(g), len(w), got)
	}
	for i := range g {
		var gm, wm map[string]any
		if err := json.Unmarshal(g[i], &gm); err != nil {
			t.Fatalf("%s: %v", g[i], err)
		}
		if err := json.Unmarshal(w[i], &wm); err != nil {
			t.Fatalf("the README's %s: %v", w[i], err)
		}
		for k, wv := range wm {
			if wv == "…" {
				if gm[k] == nil {
					t.Errorf("%s: missing", k)
				}
				continue
			}
			if gb, wb := mustJSON(gm[k]), mustJSON(wv); gb != wb {
				t.Errorf("%s = %s, the README shows %s", k, gb, wb)
			}
		}
		for k := range gm {
			if _, ok := wm[k]; !ok {
				t.Errorf("%s is in the output but not in the README's", k)
			}
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestReadmeCommands runs every shell command of the README's code blocks
// (and examples/multiprocess/README.md's). A block whose commands match no
// scenario fails: whoever adds a command to a README adds its run here.
func TestReadmeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo, Jaeger and the load generator")
	}
	for _, file := range []string{"README.md", "examples/multiprocess/README.md"} {
		for _, b := range readBlocks(t, filepath.Join(root, file)) {
			if len(b.cmds) == 0 {
				continue
			}
			name := file + ":" + strconv.Itoa(b.line)
			t.Run(name, func(t *testing.T) {
				for _, sc := range readmeScenarios {
					if strings.Join(sc.cmds, "\n") == strings.Join(b.cmds, "\n") {
						sc.run(t, b)
						return
					}
				}
				t.Fatalf("%s: no scenario runs this block's commands (add one to readme_test.go):\n%s", name, strings.Join(b.cmds, "\n"))
			})
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
