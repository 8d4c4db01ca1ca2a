package main

// The work protocol between frontend and engine: JSON lines over one Unix
// socket connection, like vLLM's ZMQ sockets between its API server and its
// EngineCore process. It carries work and tokens, never timing: timing goes
// to the collector.

// toEngine is a frontend → engine message.
type toEngine struct {
	Op        string `json:"op"` // "add" or "abort"
	ID        string `json:"id"`
	Prompt    int    `json:"prompt,omitempty"`
	MaxTokens int    `json:"max_tokens,omitempty"`
	StopAt    int    `json:"stop_at,omitempty"` // the toy model's EOS position (0: none)
}

// toFrontend is an engine → frontend message: new tokens, or the end.
type toFrontend struct {
	ID     string `json:"id"`
	Tokens int    `json:"n,omitempty"`
	Finish string `json:"finish,omitempty"`
}
