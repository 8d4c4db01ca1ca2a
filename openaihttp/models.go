package openaihttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/llmtrace/llmtrace/internal/textcap"
	"github.com/llmtrace/llmtrace/otelstats"
)

// maxModels bounds the models UpstreamModels returns.
const maxModels = 256

// UpstreamModels asks an OpenAI-compatible server which models it serves
// (GET {upstream}/v1/models, whose "data" lists them by "id"), to give
// otelstats.WithModels: the names that keep their own metric series, so
// that a client naming junk models cannot push the served ones into
// "other". At most 256 names, each cut to otelstats.MaxModelLength; the
// answer is read up to 1 MiB.
func UpstreamModels(ctx context.Context, client *http.Client, upstream *url.URL) ([]string, error) {
	u := *upstream
	u.Path, u.RawPath = upstreamPath(upstream.Path, "/v1/models"), ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("openaihttp: %s answered %s", u.String(), resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("openaihttp: reading %s: %w", u.String(), err)
	}
	var out []string
	for _, m := range list.Data {
		if m.ID != "" && len(out) < maxModels {
			out = append(out, textcap.Cut(m.ID, otelstats.MaxModelLength))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("openaihttp: %s lists no models", u.String())
	}
	return out, nil
}
