package openaihttp

import (
	"net/http"
	"strings"
)

// GenAI operation names of the default routes.
const (
	OperationChat           = "chat"
	OperationTextCompletion = "text_completion"
	OperationEmbeddings     = "embeddings"
)

// DefaultRoutes are the paths traced by default (POST) and their GenAI
// operation names. The Responses API is "chat": a conversation in, a
// message out.
var DefaultRoutes = map[string]string{
	"/v1/chat/completions": OperationChat,
	"/v1/completions":      OperationTextCompletion,
	"/v1/responses":        OperationChat,
	"/v1/embeddings":       OperationEmbeddings,
}

// route returns the traced route of a request to path (a trailing slash
// ignored) and its operation.
func (c *config) route(method, path string) (route, op string, ok bool) {
	if method != http.MethodPost {
		return "", "", false
	}
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	op, ok = c.routes[path]
	return path, op, ok
}

// isResponsesAPI reports a Responses API route, whose streams always end
// with the usage.
func isResponsesAPI(route string) bool { return strings.HasSuffix(route, "/responses") }
