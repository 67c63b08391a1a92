package beacon

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// singles are the one-record batches of every record of b (decoded from
// src), by AppendRecordBatch.
func singles(t tb, src []byte) (*Batch, [][]byte) {
	t.Helper()
	b, wire, _, err := DecodeBatchWire(src, bigLimits)
	if err != nil {
		t.Fatalf("DecodeBatchWire: %v", err)
	}
	if len(wire) != len(b.Records) {
		t.Fatalf("%d wires for %d records", len(wire), len(b.Records))
	}
	var out [][]byte
	for i := range b.Records {
		p, err := AppendRecordBatch(nil, b.Site, &b.Client, &b.Records[i], wire[i])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		out = append(out, p)
	}
	return b, out
}

// TestAppendRecordBatch: from a canonical batch, the one-record batch
// copied from the wire is byte for byte the one the encoder writes, with
// the strings as the caller has them.
func TestAppendRecordBatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		src := mustEncode(t, genBatch(t))
		b, ones := singles(t, src)
		for i, p := range ones {
			want := mustEncode(t, &Batch{Site: b.Site, Client: b.Client, Records: []Record{b.Records[i]}})
			if !bytes.Equal(p, want) {
				t.Fatalf("record %d: AppendRecordBatch differs from the encoder's batch of one", i)
			}
		}
		if len(b.Records) == 0 {
			return
		}
		// A string changed after decoding is written as changed.
		_, wire, _, _ := DecodeBatchWire(src, bigLimits)
		r := b.Records[0]
		r.PagePath, r.Model = "/other/path", "another-model"
		p, _ := AppendRecordBatch(nil, b.Site, &b.Client, &r, wire[0])
		if !bytes.Equal(p, mustEncode(t, &Batch{Site: b.Site, Client: b.Client, Records: []Record{r}})) {
			t.Fatal("changed strings: AppendRecordBatch differs from the encoder's batch of one")
		}
		// Cloned wires no longer depend on the message's buffer.
		CloneWires(wire)
		clear(src)
		p2, _ := AppendRecordBatch(nil, b.Site, &b.Client, &r, wire[0])
		if !bytes.Equal(p2, p) {
			t.Fatal("cloned wire: batch of one differs after the message's buffer was cleared")
		}
	})
}

// TestAppendRecordBatchVersions: records of an older minor (fewer fields)
// and of a newer one (fields this decoder skips, unknown flag bits) keep
// their minor, and decode to the records of the batch they came in.
func TestAppendRecordBatchVersions(t *testing.T) {
	for _, e := range []encoder{{minor: 0}, {minor: 1}, {minor: Minor + 1, extra: []byte{0xde, 0xad}}} {
		src := reencode(t, typicalBatch(), e)
		b, ones := singles(t, src)
		for i, p := range ones {
			if p[4] != e.minor {
				t.Fatalf("minor %d: batch of one has minor %d", e.minor, p[4])
			}
			got := mustDecode(t, p, bigLimits)
			want := &Batch{Site: b.Site, Client: b.Client, Records: []Record{b.Records[i]}}
			if !batchesEqual(got, want) {
				t.Fatalf("minor %d, record %d: decodes to %+v, want %+v", e.minor, i, normalized(got), normalized(want))
			}
		}
	}
}

// TestAppendRecordBatchRefuses: no wire, or a string the encoder refuses,
// appends nothing.
func TestAppendRecordBatchRefuses(t *testing.T) {
	b, wire, _, err := DecodeBatchWire(mustEncode(t, typicalBatch()), bigLimits)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := AppendRecordBatch([]byte{1}, b.Site, &b.Client, &b.Records[0], Wire{}); !errors.Is(err, ErrNoWire) || !bytes.Equal(p, []byte{1}) {
		t.Fatalf("zero Wire: appended %x, error %v, want ErrNoWire", p, err)
	}
	r := b.Records[0]
	r.PagePath = "/chat?q=secret"
	p, err := AppendRecordBatch(nil, b.Site, &b.Client, &r, wire[0])
	var de *DecodeError
	if len(p) > 0 || !errors.As(err, &de) || !errors.Is(err, ErrInvalid) || de.Field != "page_path" {
		t.Fatalf("path with a query: appended %d bytes, error %v, want ErrInvalid for page_path", len(p), err)
	}
	// The encoder refuses the same string with the same error.
	if _, encErr := (&Batch{Site: b.Site, Client: b.Client, Records: []Record{r}}).AppendBinary(nil); fmt.Sprint(encErr) != fmt.Sprint(err) {
		t.Fatalf("AppendRecordBatch: %v; the encoder: %v", err, encErr)
	}
}

// TestRecordBatcher: a RecordBatcher reset once for a batch's site and
// client facts appends, record by record, exactly what AppendRecordBatch
// appends, and refuses what it refuses with the same error: strings
// changed after decoding (a refused one between accepted ones, which must
// not let the next record's equal string through), records of other minor
// versions, and refused client facts.
func TestRecordBatcher(t *testing.T) {
	same := func(t tb, what string, p1 []byte, err1 error, p2 []byte, err2 error) {
		t.Helper()
		if !bytes.Equal(p1, p2) || fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Fatalf("%s: RecordBatcher appended %x, %v; AppendRecordBatch %x, %v", what, p1, err1, p2, err2)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		src := mustEncode(t, genBatch(t))
		b, wire, _, err := DecodeBatchWire(src, bigLimits)
		if err != nil {
			t.Fatal(err)
		}
		var rb RecordBatcher
		rb.Reset(b.Site, &b.Client)
		for i := range b.Records {
			r := b.Records[i]
			switch rapid.IntRange(0, 3).Draw(t, "change") {
			case 1:
				r.PagePath = "/chat?q=secret"
			case 2:
				r.Model = "gpt-\xff"
			case 3:
				r.URLPath = "/other/path"
			}
			p1, err1 := rb.Append([]byte{7}, &r, wire[i])
			p2, err2 := AppendRecordBatch([]byte{7}, b.Site, &b.Client, &r, wire[i])
			same(t, fmt.Sprintf("record %d", i), p1, err1, p2, err2)
		}
	})
	for _, e := range []encoder{{minor: 0}, {minor: 1}, {minor: Minor + 1, extra: []byte{0xde, 0xad}}} {
		src := reencode(t, typicalBatch(), e)
		b, wire, _, err := DecodeBatchWire(src, bigLimits)
		if err != nil {
			t.Fatal(err)
		}
		var rb RecordBatcher
		rb.Reset(b.Site, &b.Client)
		for _, pass := range []string{"first", "again"} {
			for i := range b.Records {
				p1, err1 := rb.Append(nil, &b.Records[i], wire[i])
				p2, err2 := AppendRecordBatch(nil, b.Site, &b.Client, &b.Records[i], wire[i])
				same(t, fmt.Sprintf("minor %d (%s), record %d", e.minor, pass, i), p1, err1, p2, err2)
			}
			// The next minor's head replaces this one's: back again.
			other := reencode(t, typicalBatch(), encoder{minor: (e.minor + 1) % (Minor + 1)})
			_, ow, _, err := DecodeBatchWire(other, bigLimits)
			if err != nil {
				t.Fatal(err)
			}
			p1, err1 := rb.Append(nil, &b.Records[0], ow[0])
			p2, err2 := AppendRecordBatch(nil, b.Site, &b.Client, &b.Records[0], ow[0])
			same(t, fmt.Sprintf("minor %d: a record of another minor", e.minor), p1, err1, p2, err2)
		}
		p1, err1 := rb.Append([]byte{1}, &b.Records[0], Wire{})
		p2, err2 := AppendRecordBatch([]byte{1}, b.Site, &b.Client, &b.Records[0], Wire{})
		same(t, "zero Wire", p1, err1, p2, err2)
		c := b.Client
		c.Release = "v\xff"
		rb.Reset(b.Site, &c)
		p1, err1 = rb.Append(nil, &b.Records[0], wire[0])
		p2, err2 = AppendRecordBatch(nil, b.Site, &c, &b.Records[0], wire[0])
		if err1 == nil {
			t.Fatal("a refused release: RecordBatcher appended the record")
		}
		same(t, "refused client facts", p1, err1, p2, err2)
	}
}

// TestCheckText: checkText, the one-pass check of the hot paths, gives
// checkString's verdict for every string, path fields and others.
func TestCheckText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOf(rapid.SampledFrom([]string{
			"", "a", "/v1/chat", "?", "#", "q=1", "ü", "✓", "\xff", "\xc3", "\x80", "https://x.example", "\x00", "é?",
		})).Draw(t, "parts")
		s := strings.Join(parts, "")
		for _, field := range []string{"page_path", "url_path", "page_origin", "url_origin", "route", "model", "origin_id", "site"} {
			if got, want := checkText(s, isPathField(field)), checkString(field, []byte(s)); got != want {
				t.Fatalf("%s %q: checkText %q, checkString %q", field, s, got, want)
			}
		}
	})
}
