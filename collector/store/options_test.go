package store

import (
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// TestCompressionChoice: blocks to the embedded engine go uncompressed (the
// loopback saves nothing and both ends pay the CPU); to a ClickHouse named by
// a DSN, LZ4 unless the DSN says otherwise.
func TestCompressionChoice(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want clickhouse.CompressionMethod // 0xff: none
	}{
		{"embedded engine", Options{Addr: "127.0.0.1:9000"}, 0xff},
		{"DSN", Options{DSN: "clickhouse://ch.example.net:9000/itlmon"}, clickhouse.CompressionLZ4},
		{"DSN compress=zstd", Options{DSN: "clickhouse://ch.example.net:9000/itlmon?compress=zstd"}, clickhouse.CompressionZSTD},
		{"DSN compress=true", Options{DSN: "clickhouse://ch.example.net:9000/itlmon?compress=true"}, clickhouse.CompressionLZ4},
		{"DSN compress=false", Options{DSN: "clickhouse://ch.example.net:9000/itlmon?compress=false"}, 0xff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := clickhouseOptions(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := clickhouse.CompressionMethod(0xff)
			if o.Compression != nil {
				got = o.Compression.Method
			}
			if got != tt.want {
				t.Fatalf("compression %v, want %v", got, tt.want)
			}
		})
	}
}

// Every insert asks for LowCardinality columns as String unless its caller
// set otherwise, and the caller's settings are left as they were.
func TestInsertSettings(t *testing.T) {
	tok := TokenSettings("w/1")
	got := insertSettings(tok)
	if got["low_cardinality_allow_in_native_format"] != 0 || got["insert_deduplication_token"] != "w/1" {
		t.Errorf("insertSettings(TokenSettings) = %v, want the token and low_cardinality_allow_in_native_format 0", got)
	}
	if _, ok := tok["low_cardinality_allow_in_native_format"]; ok {
		t.Error("insertSettings changed its caller's settings")
	}
	if got := insertSettings(clickhouse.Settings{"low_cardinality_allow_in_native_format": 1}); got["low_cardinality_allow_in_native_format"] != 1 {
		t.Errorf("a caller's low_cardinality_allow_in_native_format = 1 became %v", got["low_cardinality_allow_in_native_format"])
	}
	if got := insertSettings(nil); len(got) != 1 {
		t.Errorf("insertSettings(nil) = %v, want the one setting", got)
	}
}
