package e2e

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/itlmon/itlmon/collector/demo"
)

// TestStoredMultibyte: strings the module cuts to its limits (a model name
// of 128 UTF-16 units that is more bytes than that, an X-Request-Id of
// Latin-1 bytes) with a multibyte character across the cut are stored, cut
// before that character, and do not cost the records sent with them.
func TestStoredMultibyte(t *testing.T) {
	t.Parallel()
	o, c, ctx, site := sharedCollectorPage(t, nil)
	completions := demo.Completions()
	// X-Request-Id: 127 ASCII bytes and the Latin-1 byte 0xE9, which the
	// page reads as "é" (a ByteString), two bytes in UTF-8.
	requestID := strings.Repeat("r", 127) + "\xe9"
	o.Handle("/api/latin1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", requestID)
		completions.ServeHTTP(w, r)
	}))
	models := []string{
		strings.Repeat("m", 127) + "é", // é across byte 128
		strings.Repeat("m", 126) + "€", // € across byte 128
		strings.Repeat("🚀", 33),        // 4-byte runes, 132 bytes
		strings.Repeat("模", 43),        // 3-byte runes, 129 bytes
		"gpt-4o-mini",
	}
	var ids []string
	for _, m := range models {
		page := RunStream(t, ctx, StreamOpts{Query: "tokens=3&interval_ms=1", Path: "/api/latin1/chat", Model: m})
		if page.Error != "" {
			t.Fatalf("page error: %s", page.Error)
		}
		ids = append(ids, lastSummary(t, ctx).ID)
	}
	rows := WaitStreams(t, c, site, len(models))
	for i, id := range ids {
		row := StreamByID(t, rows, id)
		want := models[i]
		for len(want) > 128 {
			_, n := utf8.DecodeLastRuneInString(want)
			want = want[:len(want)-n]
		}
		if row.Model != want {
			t.Errorf("stream %d: model %q (%d bytes), want %q (%d bytes)", i, row.Model, len(row.Model), want, len(want))
		}
		if got, want := row.OriginID, strings.Repeat("r", 127); got != want {
			t.Errorf("stream %d: origin_id %q, want the 127 r before the cut", i, got)
		}
		if row.Status != statusComplete {
			t.Errorf("stream %d: status %s, want complete", i, row.Status)
		}
	}
}
