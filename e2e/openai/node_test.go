package openai_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodeOpenAI is the official Node openai package the test drives the proxy
// with: the last release whose engines field admits the node 20 installed
// here (7.x asks for node ≥ 22).
const nodeOpenAI = "openai@6.30.1"

// nodeOpenAIDir installs nodeOpenAI once into the user's cache
// (~/.cache/llmtrace/node-openai-…) and returns the package's directory;
// it skips the test when node or npm is missing.
func nodeOpenAIDir(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(cache, "llmtrace", "node-"+strings.ReplaceAll(nodeOpenAI, "@", "-"))
	pkg := filepath.Join(dir, "node_modules", "openai")
	if _, err := os.Stat(filepath.Join(pkg, "package.json")); err == nil {
		return pkg
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "node-openai-install")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(dir), "node-openai-install"); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", tmp, nodeOpenAI)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", nodeOpenAI, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(pkg, "package.json")); serr != nil {
			t.Fatal(err)
		}
	}
	return pkg
}

const nodeClient = `
const { OpenAI } = require(process.argv[2]);
(async () => {
  const client = new OpenAI({ baseURL: process.argv[3] + "/v1", apiKey: "test", maxRetries: 0 });
  const messages = [{ role: "user", content: "Tell me about tracing." }];
  const { data, response } = await client.chat.completions.create({ model: "toy", messages }).withResponse();
  const stream = await client.chat.completions.create({ model: "toy", messages, stream: true, stream_options: { include_usage: true } });
  let streamed = "", usage = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (c && c.delta && c.delta.content) streamed += c.delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  console.log(JSON.stringify({ content: data.choices[0].message.content, usage: data.usage,
    serverTiming: response.headers.get("server-timing"), streamed, streamUsage: usage }));
})().catch((e) => { console.error(e); process.exit(1); });
`

// The official Node client through the built proxy: a completion and a
// stream come through whole, its Server-Timing header names the
// request's trace, and the proxy's stats agree with the client's usage.
func TestProxyNodeOpenAI(t *testing.T) {
	pkg := nodeOpenAIDir(t)
	up := newUpstream(t)
	px := startProxy(t, up.srv.URL, "-server-timing")
	script := filepath.Join(t.TempDir(), "client.cjs")
	if err := os.WriteFile(script, []byte(nodeClient), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", script, pkg, px.url)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node: %v\n%s\n%s", err, out, stderr)
	}
	px.stop(t)
	var got struct {
		Content      string `json:"content"`
		Streamed     string `json:"streamed"`
		ServerTiming string `json:"serverTiming"`
		Usage        struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
		StreamUsage struct {
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"streamUsage"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Content == "" || got.Streamed == "" {
		t.Fatalf("node got %+v", got)
	}
	st := readLines[jsonStats](t, px.statsPath)
	if len(st) != 2 {
		t.Fatalf("%d stats lines", len(st))
	}
	if !strings.Contains(got.ServerTiming, `traceparent;desc="00-`+st[0].TraceID+"-") || !strings.Contains(got.ServerTiming, "e2e;dur=") {
		t.Errorf("Server-Timing %q, trace %s", got.ServerTiming, st[0].TraceID)
	}
	if st[0].NumOutputTokens != got.Usage.CompletionTokens || st[0].FirstTokenLatency != nil ||
		st[1].NumOutputTokens != got.StreamUsage.CompletionTokens || st[1].FirstTokenLatency == nil {
		t.Errorf("stats %+v, node usage %+v / %+v", st, got.Usage, got.StreamUsage)
	}
}
