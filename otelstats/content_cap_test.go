package otelstats

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
)

// schemaMessage is what a reader of the GenAI conventions' message schema
// parses.
type schemaMessage struct {
	Role         *string          `json:"role"`
	Parts        []map[string]any `json:"parts"`
	FinishReason *string          `json:"finish_reason"`
}

// checkSchema parses s as the conventions' message array and checks each
// part has the fields its type requires (gen-ai-input-messages.json,
// gen-ai-output-messages.json, semantic conventions v1.41).
func checkSchema(t *testing.T, s string) []schemaMessage {
	t.Helper()
	var msgs []schemaMessage
	if err := json.Unmarshal([]byte(s), &msgs); err != nil {
		t.Fatalf("not the message schema's JSON: %v: %q", err, s)
	}
	required := map[string][]string{
		PartText: {"content"}, PartReasoning: {"content"}, PartToolCall: {"name"},
		PartToolCallResponse: {"response"}, PartURI: {"modality", "uri"}, PartBlob: {"modality", "content"},
	}
	for _, m := range msgs {
		if m.Role == nil || m.Parts == nil {
			t.Errorf("message without role or parts: %q", s)
		}
		for _, p := range m.Parts {
			typ, _ := p["type"].(string)
			for _, k := range required[typ] {
				if _, ok := p[k].(string); !ok {
					t.Errorf("%s part without %s: %q", typ, k, s)
				}
			}
		}
	}
	return msgs
}

// TestContentCapHolds: captured content on the root span is never longer
// than ContentCapture.MaxBytes (SPEC §6: opted-in content comes with a
// size cap), stays the conventions' JSON whatever the cap, and keeps the
// text's head, cut on a rune boundary, marked when there is room.
func TestContentCapHolds(t *testing.T) {
	in := strings.Repeat("é", 40) // 80 bytes, 2-byte runes
	out := strings.Repeat("x", 80)
	for _, max := range []int{1, 2, 3, 8, 13, 14, 15, 40, 60, 70, 80, 100, 200} {
		h := newHarness(t, WithContentCapture(&ContentCapture{MaxBytes: max}))
		q, err := h.tr.Arrive(context.Background(), "c", Arrival{Time: at(0), Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		q.RecordContent(in, out)
		mustOK(t, q.Finish(at(5), "stop"))
		root, _ := h.treeOf(h.statsOf("c"))
		for key, text := range map[attribute.Key]string{attributes.InputMessages: in, attributes.OutputMessages: out} {
			got := sattr(root.Attributes(), key)
			if len(got) > max {
				t.Errorf("MaxBytes %d: %s is %d bytes: %q", max, key, len(got), got)
			}
			if max < 2 {
				if got != "" {
					t.Errorf("MaxBytes %d: %s = %q, want nothing", max, key, got)
				}
				continue
			}
			msgs := checkSchema(t, got)
			if len(msgs) == 0 {
				continue // the structure alone does not fit
			}
			content, _ := msgs[0].Parts[0]["content"].(string)
			head := strings.TrimSuffix(content, "…[truncated]")
			switch {
			case !utf8.ValidString(content) || !strings.HasPrefix(text, head):
				t.Errorf("MaxBytes %d: %s content %q, not the text's head", max, key, content)
			case max >= 200 && content != text:
				t.Errorf("MaxBytes %d: %s content %q, want the whole text", max, key, content)
			}
		}
	}
}

// TestMessagesCap: the cap shortens the longest texts first, to one common
// length, keeps short ones whole, drops the oldest messages only when the
// structure does not fit, and never writes more than the cap or invalid
// JSON, with escapes and invalid UTF-8 in the texts.
func TestMessagesCap(t *testing.T) {
	long := strings.Repeat("a\"\n\x01é", 500)
	msgs := []Message{
		TextMessage("system", long),
		TextMessage("user", "short question"),
		{Role: "assistant", Parts: []MessagePart{{Type: PartToolCall, ID: "c1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", Parts: []MessagePart{{Type: PartToolCallResponse, ID: "c1", Content: long + "\xff"}}},
		{Role: "user", Parts: []MessagePart{{Type: PartURI, Modality: "image", URI: "https://example.com/a.png"}, {Type: PartText, Content: "what is this?"}}},
	}
	whole := marshalMessages(msgs, 1<<20, nil)
	checkSchema(t, whole)
	for max := 0; max <= len(whole)+10; max += 7 {
		got := marshalMessages(msgs, max, nil)
		if len(got) > max {
			t.Fatalf("cap %d: %d bytes", max, len(got))
		}
		if max < 2 {
			continue
		}
		parsed := checkSchema(t, got)
		if max >= len(whole) && got != whole {
			t.Errorf("cap %d: cut although the whole (%d bytes) fits", max, len(whole))
		}
		if max >= 700 {
			if len(parsed) != len(msgs) {
				t.Errorf("cap %d: %d messages of %d kept", max, len(parsed), len(msgs))
			} else if q, _ := parsed[1].Parts[0]["content"].(string); q != "short question" {
				t.Errorf("cap %d: the short question became %q", max, q)
			}
		}
	}
	// A cap below the structure of all messages keeps the newest.
	got := checkSchema(t, marshalMessages(msgs, 200, nil))
	if len(got) == 0 || *got[len(got)-1].Role != "user" {
		t.Errorf("cap 200: %v, want the newest messages", got)
	}
}

// TestMessagesRedactEveryText: the redaction hook sees every free text,
// tool arguments and URIs included, and the caller's messages stay as given.
func TestMessagesRedactEveryText(t *testing.T) {
	msgs := []Message{
		{Role: "assistant", Parts: []MessagePart{{Type: PartToolCall, Name: "mail", Arguments: `{"to":"a@b.c"}`}}},
		{Role: "user", Parts: []MessagePart{{Type: PartText, Content: "mail a@b.c"}, {Type: PartURI, Modality: "image", URI: "https://x/?u=a@b.c"}}},
	}
	got := marshalMessages(msgs, 4096, func(s string) string { return strings.ReplaceAll(s, "a@b.c", "***") })
	if strings.Contains(got, "a@b.c") || strings.Count(got, "***") != 3 {
		t.Errorf("redacted: %s", got)
	}
	if msgs[1].Parts[0].Content != "mail a@b.c" {
		t.Error("the caller's message was changed")
	}
}

func FuzzMarshalMessages(f *testing.F) {
	f.Add("system", "be brief", "user", "hi \"there\"\n", "c1", `{"a":1}`, 100)
	f.Add("", "", "", "\xff\xfe", "", "", 3)
	f.Fuzz(func(t *testing.T, r1, c1, r2, c2, id, args string, limit int) {
		limit = min(max(limit, 0), 1<<16)
		msgs := []Message{
			TextMessage(r1, c1),
			{Role: r2, Parts: []MessagePart{{Type: PartText, Content: c2}, {Type: PartToolCall, ID: id, Name: id, Arguments: args}}},
			{Role: "assistant", FinishReason: "stop", Parts: []MessagePart{{Type: PartReasoning, Content: c1 + c2}}},
		}
		got := marshalMessages(msgs, limit, nil)
		if len(got) > limit {
			t.Fatalf("cap %d: %d bytes", limit, len(got))
		}
		if limit >= 2 && !json.Valid([]byte(got)) {
			t.Fatalf("cap %d: invalid JSON %q", limit, got)
		}
	})
}

// TestOutputMessagesFinishReason: every output message carries the finish
// reason the conventions require: its own, else its choice's from the
// frontend's FINISHED, else the request's; OpenAI's "tool_calls" is the
// conventions' "tool_call".
func TestOutputMessagesFinishReason(t *testing.T) {
	h := newHarness(t, WithContentCapture(&ContentCapture{}))
	q, err := h.tr.Arrive(context.Background(), "c", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	q.RecordMessages([]Message{TextMessage("user", "hi")}, []Message{
		TextMessage("assistant", "a"),
		{Role: "assistant", FinishReason: "tool_calls", Parts: []MessagePart{{Type: PartToolCall, ID: "c", Name: "f", Arguments: "{}"}}},
	})
	mustOK(t, q.Finish(at(5), "length"))
	root, _ := h.treeOf(h.statsOf("c"))
	got := checkSchema(t, sattr(root.Attributes(), attributes.OutputMessages))
	var reasons []string
	for _, m := range got {
		if m.FinishReason != nil {
			reasons = append(reasons, *m.FinishReason)
		}
	}
	if strings.Join(reasons, ",") != "length,tool_call" {
		t.Errorf("finish reasons %q, want length (the request's) and tool_call", reasons)
	}
	if in := sattr(root.Attributes(), attributes.InputMessages); in != `[{"role":"user","parts":[{"type":"text","content":"hi"}]}]` {
		t.Errorf("input %s", in)
	}
}
