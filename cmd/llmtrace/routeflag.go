package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// route is one -route: a path traced as an operation, or no longer traced
// (operation "").
type route struct{ path, operation string }

// routeOperations are the operations -route accepts: those whose bodies
// and streams the proxy knows how to read.
var routeOperations = []string{openaihttp.OperationChat, openaihttp.OperationTextCompletion, openaihttp.OperationEmbeddings}

// maxRoutePath bounds a -route path: a request path longer than this is
// not an API route.
const maxRoutePath = 256

// parseRoute reads PATH=OPERATION. The path is matched exactly, as the
// proxy matches a request's (a trailing slash ignored, so it is dropped
// here too).
func parseRoute(s string) (route, error) {
	path, op, ok := strings.Cut(s, "=")
	if !ok {
		return route{}, errors.New("want PATH=OPERATION, e.g. /chat/completions=chat (PATH= stops tracing PATH)")
	}
	switch {
	case !strings.HasPrefix(path, "/") || len(path) > maxRoutePath || strings.ContainsAny(path, "?# \t"):
		return route{}, fmt.Errorf("the path must begin with / and hold no query, fragment or space (at most %d bytes)", maxRoutePath)
	case op != "" && !slices.Contains(routeOperations, op):
		return route{}, fmt.Errorf("the operation must be one of %s, or empty to stop tracing the path", strings.Join(routeOperations, ", "))
	}
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	return route{path, op}, nil
}
