// Package toyserver is an OpenAI-compatible inference server over a toy
// engine: POST /v1/chat/completions and /v1/completions, streamed (SSE,
// with the usage in a last chunk when stream_options.include_usage) or not,
// GET /v1/models. Its output is deterministic — a function of the request
// body — and its timing realistic: requests queue for a bounded number of
// batch slots, prefill takes time per prompt token, each output token takes
// a decode step.
//
// The server knows nothing of HTTP tracing; wrapped by openaihttp it is
// traced as a client sees it. When its Config names a Tracker, its engine
// also records the engine side of each request (QUEUED, PREFILLING with
// prefix-cache hits, DECODING, FINISHED) under the request id the
// middleware put in the context, and its frontend reports its
// tokenization (openaihttp.InputProcessed): the full span tree of SPEC §3.
package toyserver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"iter"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Config shapes the toy server. The zero Config is usable.
type Config struct {
	// Models are the model names served; the first is the default. Any
	// model is accepted when empty.
	Models []string
	// Slots is how many requests run at once (the batch); others queue.
	// Default 8.
	Slots int
	// TokenDelay is one decode step; default 20 ms.
	TokenDelay time.Duration
	// PrefillPerToken is the prefill time per uncached prompt token;
	// default 100 µs. PrefillBase is added once; default 5 ms.
	PrefillPerToken time.Duration
	PrefillBase     time.Duration
	// Jitter varies each delay by up to this fraction; default 0.2, a
	// negative value none.
	Jitter float64
	// MaxTokens caps a response without max_tokens; default 64.
	MaxTokens int
	// Tracker, when set, receives the engine's updates for requests that
	// carry an otelstats.Request (the middleware's).
	Tracker *otelstats.Tracker
	// Now and NewID make responses reproducible in tests: the "created"
	// time and the response ids. Defaults: time.Now and random ids.
	Now   func() time.Time
	NewID func() string
}

// Server is the toy server; it is an http.Handler.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	slots chan struct{}

	mu    sync.Mutex
	cache map[[32]byte]int // prefix cache: first message → its tokens
}

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Slots <= 0 {
		cfg.Slots = 8
	}
	if cfg.TokenDelay == 0 {
		cfg.TokenDelay = 20 * time.Millisecond
	}
	if cfg.PrefillPerToken == 0 {
		cfg.PrefillPerToken = 100 * time.Microsecond
	}
	if cfg.PrefillBase == 0 {
		cfg.PrefillBase = 5 * time.Millisecond
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = 0.2
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string {
			var b [12]byte
			binary.LittleEndian.PutUint64(b[:], rand.Uint64())
			binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
			return hex.EncodeToString(b[:])
		}
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), slots: make(chan struct{}, cfg.Slots), cache: map[[32]byte]int{}}
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, true) })
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, false) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// request is the part of a chat or completions request the toy reads.
type request struct {
	Model         string    `json:"model"`
	Messages      []message `json:"messages"`
	Prompt        any       `json:"prompt"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	Seed                *int64 `json:"seed"`
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	var e apiError
	e.Error.Message, e.Error.Type = msg, typ
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range s.cfg.Models {
		out.Data = append(out.Data, model{m, "model", s.cfg.Now().Unix(), "llmtrace"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// prompt is a request after "templating": its text and first message.
type prompt struct {
	text  string
	first string
}

func (p *prompt) tokens() int { return len(strings.Fields(p.text)) + 1 }

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
		b.WriteByte(' ')
	}
	return b.String()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, chat bool) {
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	if req.Model == "" && len(s.cfg.Models) > 0 {
		req.Model = s.cfg.Models[0]
	}
	if len(s.cfg.Models) > 0 && !contains(s.cfg.Models, req.Model) {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("the model %q does not exist", req.Model))
		return
	}
	// Templating and tokenization.
	var p prompt
	if chat {
		if len(req.Messages) == 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "messages must not be empty")
			return
		}
		var b strings.Builder
		for i, m := range req.Messages {
			c := contentText(m.Content)
			if i == 0 {
				p.first = c
			}
			fmt.Fprintf(&b, "<|%s|> %s ", m.Role, c)
		}
		p.text = b.String()
	} else {
		switch v := req.Prompt.(type) {
		case string:
			p.text = v
		case []any:
			for _, x := range v {
				if s, ok := x.(string); ok {
					p.text += s + " "
				}
			}
		default:
			writeError(w, http.StatusBadRequest, "invalid_request_error", "prompt must be a string or a list of strings")
			return
		}
		p.first = p.text
	}
	promptTokens := p.tokens()
	_ = openaihttp.InputProcessed(r.Context(), time.Now(), promptTokens) // no-op when not traced

	maxTokens := s.cfg.MaxTokens
	for _, m := range []*int{req.MaxCompletionTokens, req.MaxTokens} {
		if m != nil {
			if *m < 1 {
				writeError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens must be at least 1")
				return
			}
			maxTokens = *m
			break
		}
	}
	g := generation{
		s: s, q: otelstats.RequestFromContext(r.Context()), prompt: &p, promptTokens: promptTokens,
		maxTokens: maxTokens, seed: seedOf(&req, &p),
	}
	out := &output{id: s.cfg.NewID(), created: s.cfg.Now().Unix(), model: req.Model, chat: chat,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, promptTokens: promptTokens}
	if req.Stream {
		s.stream(w, r, &g, out)
	} else {
		s.complete(w, r, &g, out)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// seedOf makes the output a function of the request: its seed if it has
// one, else its prompt.
func seedOf(req *request, p *prompt) uint64 {
	if req.Seed != nil {
		return uint64(*req.Seed)
	}
	h := fnv.New64a()
	h.Write([]byte(p.text))
	return h.Sum64()
}

// output formats responses.
type output struct {
	id           string
	created      int64
	model        string
	chat         bool
	includeUsage bool
	promptTokens int
	cached       int
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (o *output) usage(completion int) *usage {
	u := &usage{PromptTokens: o.promptTokens, CompletionTokens: completion, TotalTokens: o.promptTokens + completion}
	u.PromptTokensDetails.CachedTokens = o.cached
	return u
}

func (o *output) prefix() string {
	if o.chat {
		return "chatcmpl-" + o.id
	}
	return "cmpl-" + o.id
}

// The JSON shapes, with OpenAI's field order.
type (
	delta struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content,omitempty"`
	}
	chatChoice struct {
		Index        int       `json:"index"`
		Delta        *delta    `json:"delta,omitempty"`
		Message      *msgOut   `json:"message,omitempty"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	msgOut struct {
		Role    string  `json:"role"`
		Content string  `json:"content"`
		Refusal *string `json:"refusal"`
	}
	textChoice struct {
		Text         string    `json:"text"`
		Index        int       `json:"index"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	envelope struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices any    `json:"choices"`
		Usage   *usage `json:"usage,omitempty"`
	}
	// streamEnvelope writes "usage": null, as OpenAI does on every chunk
	// but the last when the client asked for usage.
	streamEnvelope struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices any    `json:"choices"`
		Usage   *usage `json:"usage"`
	}
)

func (o *output) object(stream bool) string {
	switch {
	case !o.chat:
		return "text_completion"
	case stream:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

func (o *output) envelope(choices any, u *usage, stream bool) []byte {
	var v any = envelope{o.prefix(), o.object(stream), o.created, o.model, choices, u}
	if stream && o.includeUsage {
		v = streamEnvelope{o.prefix(), o.object(stream), o.created, o.model, choices, u}
	}
	b, _ := json.Marshal(v)
	return b
}

// chunk returns one SSE chunk's JSON: role-only (role set), content, or a
// finish chunk.
func (o *output) chunk(role, text string, finish *string) []byte {
	if !o.chat {
		return o.envelope([]textChoice{{Text: text, FinishReason: finish}}, nil, true)
	}
	d := &delta{Role: role}
	if role != "" || text != "" {
		d.Content = &text
	}
	return o.envelope([]chatChoice{{Delta: d, FinishReason: finish}}, nil, true)
}

func (o *output) usageChunk(completion int) []byte {
	return o.envelope([]chatChoice{}, o.usage(completion), true)
}

func (o *output) whole(text, finish string, completion int) []byte {
	if !o.chat {
		return o.envelope([]textChoice{{Text: text, FinishReason: &finish}}, o.usage(completion), false)
	}
	return o.envelope([]chatChoice{{Message: &msgOut{Role: "assistant", Content: text}, FinishReason: &finish}}, o.usage(completion), false)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, g *generation, o *output) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	send := func(b []byte) bool {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if o.chat && !send(o.chunk("assistant", "", nil)) {
		return
	}
	n, finish := 0, ""
	for c, err := range g.run(r.Context()) {
		if err != nil {
			return // the client is gone: nothing more to say
		}
		o.cached = g.cached
		if c.Text != "" {
			n += c.Tokens
			if !send(o.chunk("", c.Text, nil)) {
				return // the engine sees its consumer stop
			}
		}
		if c.FinishReason != "" {
			finish = c.FinishReason
		}
	}
	if !send(o.chunk("", "", &finish)) {
		return
	}
	if o.includeUsage && !send(o.usageChunk(n)) {
		return
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, g *generation, o *output) {
	var text strings.Builder
	n, finish := 0, ""
	for c, err := range g.run(r.Context()) {
		if err != nil {
			return
		}
		text.WriteString(c.Text)
		n += c.Tokens
		if c.FinishReason != "" {
			finish = c.FinishReason
		}
	}
	o.cached = g.cached
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(o.whole(text.String(), finish, n))
}

var vocabulary = strings.Fields(`the a of to and in is that it for on with as was by at from this be are or an
	which model token tokens request latency queue prefill decode cache batch engine server trace span
	llama quick brown fox jumps over lazy dog light speed small large fast slow time first last next`)

// generation is one request in the toy engine.
type generation struct {
	s            *Server
	q            *otelstats.Request
	prompt       *prompt
	promptTokens int
	maxTokens    int
	seed         uint64
	cached       int
}

// record sends one engine update for the request, if it is traced.
func (g *generation) record(u otelstats.Update) {
	if g.q == nil || g.s.cfg.Tracker == nil || g.q.ID() == "" {
		return
	}
	u.RequestID, u.Side, u.Time = g.q.ID(), otelstats.SideEngine, time.Now()
	_ = g.s.cfg.Tracker.Record(u)
}

func (g *generation) sleep(ctx context.Context, d time.Duration, rng *rand.Rand) error {
	if j := g.s.cfg.Jitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*rng.Float64()-1)))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// run yields the request's tokens as the engine produces them, one word
// (one token) per decode step, the last chunk with the finish reason.
func (g *generation) run(ctx context.Context) iter.Seq2[otelstats.Chunk, error] {
	return func(yield func(otelstats.Chunk, error) bool) {
		rng := rand.New(rand.NewPCG(g.seed, 0x1ab))
		jit := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		g.record(otelstats.Update{Kind: otelstats.KindQueued})
		select {
		case g.s.slots <- struct{}{}:
		case <-ctx.Done():
			g.record(otelstats.Update{Kind: otelstats.KindFinished, FinishReason: otelstats.FinishAbort})
			yield(otelstats.Chunk{}, ctx.Err())
			return
		}
		defer func() { <-g.s.slots }()

		g.cached = g.s.lookup(g.prompt, g.promptTokens)
		g.record(otelstats.Update{Kind: otelstats.KindPrefilling, NumComputedTokens: g.promptTokens, NumCachedTokens: g.cached})
		prefill := g.s.cfg.PrefillBase + time.Duration(g.promptTokens-g.cached)*g.s.cfg.PrefillPerToken
		if err := g.sleep(ctx, prefill, jit); err != nil {
			g.record(otelstats.Update{Kind: otelstats.KindFinished, FinishReason: otelstats.FinishAbort})
			yield(otelstats.Chunk{}, err)
			return
		}
		// The natural length: 8 to 40 words, a function of the seed.
		natural := 8 + int(rng.Uint64()%33)
		for i := 0; ; i++ {
			if i > 0 {
				if err := g.sleep(ctx, g.s.cfg.TokenDelay, jit); err != nil {
					g.record(otelstats.Update{Kind: otelstats.KindFinished, FinishReason: otelstats.FinishAbort})
					yield(otelstats.Chunk{}, err)
					return
				}
			}
			word := vocabulary[rng.IntN(len(vocabulary))]
			if i > 0 {
				word = " " + word
			}
			c := otelstats.Chunk{Text: word, Tokens: 1}
			switch {
			case i+1 >= g.maxTokens:
				c.FinishReason = otelstats.FinishLength
			case i+1 >= natural:
				c.Text += "."
				c.FinishReason = otelstats.FinishStop
			}
			g.record(otelstats.Update{Kind: otelstats.KindDecoding, NumNewTokens: 1})
			if c.FinishReason != "" {
				g.record(otelstats.Update{Kind: otelstats.KindFinished, FinishReason: c.FinishReason})
			}
			if !yield(c, nil) {
				if c.FinishReason == "" {
					g.record(otelstats.Update{Kind: otelstats.KindFinished, FinishReason: otelstats.FinishAbort})
				}
				return
			}
			if c.FinishReason != "" {
				return
			}
		}
	}
}

// lookup returns how many of the prompt's tokens the prefix cache holds:
// those of its first message when that message was seen before.
func (s *Server) lookup(p *prompt, promptTokens int) int {
	key := sha256.Sum256([]byte(p.first))
	firstTokens := min(len(strings.Fields(p.first)), promptTokens-1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.cache[key]; ok {
		return n
	}
	if len(s.cache) >= 1024 {
		clear(s.cache)
	}
	s.cache[key] = max(firstTokens, 0)
	return 0
}
