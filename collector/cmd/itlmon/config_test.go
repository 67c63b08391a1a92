package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/server"
)

func TestParseFlags(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libchdb.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sites := filepath.Join(t.TempDir(), "sites")
	os.WriteFile(sites, []byte("# comment\nshop=https://shop.example.com\n\nblog=https://blog.example.com,https://www.blog.example.com\n"), 0o644)

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // substring; "" = ok
		check   func(t *testing.T, c server.Config)
	}{
		{"defaults need a site", []string{"--chdb-lib", lib}, nil, "no sites configured", nil},
		{"demo alone", []string{"--chdb-lib", lib, "--demo"}, nil, "", func(t *testing.T, c server.Config) {
			if c.Addr != "127.0.0.1:8080" || c.Data != "./data" || c.TTL != 90*24*time.Hour || !c.Demo {
				t.Errorf("config = %+v", c)
			}
		}},
		{"promote gather", []string{"--chdb-lib", lib, "--demo", "--promote-gather", "5s"}, nil, "", func(t *testing.T, c server.Config) {
			if c.PromoteGather != 5*time.Second {
				t.Errorf("promote gather = %v, want 5s", c.PromoteGather)
			}
		}},
		{"inbox inserts", []string{"--chdb-lib", lib, "--demo"}, nil, "", func(t *testing.T, c server.Config) {
			if c.InboxInserts != 2 {
				t.Errorf("inbox inserts = %d, want 2 by default", c.InboxInserts)
			}
		}},
		{"one inbox insert", []string{"--chdb-lib", lib, "--demo", "--inbox-inserts", "1"}, nil, "", func(t *testing.T, c server.Config) {
			if c.InboxInserts != 1 {
				t.Errorf("inbox inserts = %d, want 1", c.InboxInserts)
			}
		}},
		{"no inbox inserts", []string{"--chdb-lib", lib, "--demo", "--inbox-inserts", "0"}, nil, "inbox inserts must be between 1 and 16", nil},
		{"promote gather past a span", []string{"--chdb-lib", lib, "--demo", "--promote-gather", "31s"}, nil, "promote gather 31s: want 0 to 30s", nil},
		{"no engine library", []string{"--chdb-lib", "", "--demo"}, nil, "make deps-chdb", nil},
		{"missing engine library", []string{"--chdb-lib", "/nonexistent/libchdb.so", "--demo"}, nil, "make deps-chdb", nil},
		{"dsn needs no library", []string{"--chdb-lib", "", "--clickhouse", "clickhouse://u:p@db:9000/itlmon", "--demo"}, nil, "", nil},
		{"bad dsn", []string{"--clickhouse", "mysql://u:secret@db", "--demo"}, nil, "clickhouse://", func(t *testing.T, c server.Config) {}},
		{"sites", []string{"--chdb-lib", lib, "--site", "a=https://a.example.com", "--site", "b=https://b.example.com,http://localhost:3000"}, nil, "", func(t *testing.T, c server.Config) {
			if len(c.Sites) != 2 || c.Sites[1].Origins[1] != "http://localhost:3000" {
				t.Errorf("sites = %+v", c.Sites)
			}
		}},
		{"bad site", []string{"--chdb-lib", lib, "--site", "a=https://a.example.com/path"}, nil, "origin", nil},
		{"sites file", []string{"--chdb-lib", lib, "--sites-file", sites}, nil, "", func(t *testing.T, c server.Config) {
			if len(c.Sites) != 2 || c.Sites[1].Key != "blog" || len(c.Sites[1].Origins) != 2 {
				t.Errorf("sites = %+v", c.Sites)
			}
		}},
		{"duplicate site", []string{"--chdb-lib", lib, "--sites-file", sites, "--site", "shop=https://x.example.com"}, nil, "twice", nil},
		{"demo site with more origins", []string{"--chdb-lib", lib, "--demo", "--site", "demo=http://192.168.1.5:8080"}, nil, "", nil},
		{"ttl days", []string{"--chdb-lib", lib, "--demo", "--ttl", "30d"}, nil, "", func(t *testing.T, c server.Config) {
			if c.TTL != 30*24*time.Hour {
				t.Errorf("ttl = %v", c.TTL)
			}
		}},
		{"ttl too short", []string{"--chdb-lib", lib, "--demo", "--ttl", "1h"}, nil, "at least 1d", nil},
		{"ttl garbage", []string{"--chdb-lib", lib, "--demo", "--ttl", "forever"}, nil, "duration", nil},
		{"log format", []string{"--chdb-lib", lib, "--demo", "--log-format", "xml"}, nil, "log format", nil},
		{"log level", []string{"--chdb-lib", lib, "--demo", "--log-level", "loud"}, nil, "log level", nil},
		{"geoip missing", []string{"--chdb-lib", lib, "--demo", "--geoip", "/nonexistent.mmdb"}, nil, "geoip", nil},
		{"geoip none", []string{"--chdb-lib", lib, "--demo", "--geoip", "none"}, nil, "", func(t *testing.T, c server.Config) {
			if c.GeoIPPath() != "" {
				t.Errorf("--geoip none: GeoIPPath = %q", c.GeoIPPath())
			}
		}},
		{"geoip empty", []string{"--chdb-lib", lib, "--demo", "--geoip", ""}, nil, "", func(t *testing.T, c server.Config) {
			if c.GeoIPPath() != "" {
				t.Errorf("--geoip '': GeoIPPath = %q", c.GeoIPPath())
			}
		}},
		{"geoip none from env", []string{"--chdb-lib", lib, "--demo"}, map[string]string{"ITLMON_GEOIP": "none"}, "", func(t *testing.T, c server.Config) {
			if c.GeoIPPath() != "" {
				t.Errorf("ITLMON_GEOIP=none: GeoIPPath = %q", c.GeoIPPath())
			}
		}},
		{"geoip list, one missing", []string{"--chdb-lib", lib, "--demo", "--geoip", lib + ",/nonexistent-ipv6.mmdb"}, nil, "nonexistent-ipv6", nil},
		{"otlp", []string{"--chdb-lib", lib, "--demo", "--otlp-endpoint", "http://otel:4318", "--otlp-interval", "30s"}, nil, "", func(t *testing.T, c server.Config) {
			if c.OTLPEndpoint != "http://otel:4318" || c.OTLPInterval != 30*time.Second {
				t.Errorf("otlp = %q every %v", c.OTLPEndpoint, c.OTLPInterval)
			}
		}},
		{"otlp from env", []string{"--chdb-lib", lib, "--demo"}, map[string]string{"ITLMON_OTLP_ENDPOINT": "https://otel.example.com/v1/metrics"}, "", func(t *testing.T, c server.Config) {
			if c.OTLPEndpoint != "https://otel.example.com/v1/metrics" || c.OTLPInterval != time.Minute {
				t.Errorf("otlp = %q every %v", c.OTLPEndpoint, c.OTLPInterval)
			}
		}},
		{"otlp grpc endpoint", []string{"--chdb-lib", lib, "--demo", "--otlp-endpoint", "grpc://otel:4317"}, nil, "otlp endpoint", nil},
		{"otlp interval", []string{"--chdb-lib", lib, "--demo", "--otlp-endpoint", "http://otel:4318", "--otlp-interval", "10ms"}, nil, "otlp interval", nil},
		{"env", []string{"--chdb-lib", lib}, map[string]string{
			"ITLMON_ADDR": "127.0.0.1:9999", "ITLMON_SITES": "a=https://a.example.com; b=https://b.example.com",
			"ITLMON_TRUST_PROXY": "true", "ITLMON_TTL": "7d",
		}, "", func(t *testing.T, c server.Config) {
			if c.Addr != "127.0.0.1:9999" || len(c.Sites) != 2 || !c.TrustProxy || c.TTL != 7*24*time.Hour {
				t.Errorf("config = %+v", c)
			}
		}},
		{"flag beats env", []string{"--chdb-lib", lib, "--demo", "--addr", "127.0.0.1:1"}, map[string]string{"ITLMON_ADDR": "127.0.0.1:9999"}, "", func(t *testing.T, c server.Config) {
			if c.Addr != "127.0.0.1:1" {
				t.Errorf("addr = %s, want the flag's", c.Addr)
			}
		}},
		{"origin key", []string{"--chdb-lib", lib, "--site", "chat=https://a.example.com", "--origin-key", "chat=0123456789abcdef"}, nil, "", func(t *testing.T, c server.Config) {
			if c.OriginKeys["chat"].Reveal() != "0123456789abcdef" {
				t.Errorf("origin keys = %v", c.OriginKeys)
			}
		}},
		{"origin key too short", []string{"--chdb-lib", lib, "--site", "chat=https://a.example.com", "--origin-key", "chat=short"}, nil, "at least", nil},
		{"origin key unknown site", []string{"--chdb-lib", lib, "--site", "chat=https://a.example.com", "--origin-key", "blog=0123456789abcdef"}, nil, "no such site", nil},
		{"bad env", []string{"--chdb-lib", lib, "--demo"}, map[string]string{"ITLMON_TRUST_PROXY": "maybe"}, "ITLMON_TRUST_PROXY", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := server.DefaultConfig()
			err := parseServeFlags(&c, &strings.Builder{}, tt.args, func(k string) string { return tt.env[k] })
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseServeFlags: %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("parseServeFlags err = %v, want one containing %q", err, tt.wantErr)
			}
			if tt.check != nil && err == nil {
				tt.check(t, c)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Fatalf("error leaks the DSN password: %v", err)
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	var out, errOut strings.Builder
	if got := dispatch(t.Context(), []string{"frobnicate"}, &out, &errOut); got != 2 {
		t.Fatalf("unknown command: exit %d, want 2", got)
	}
	if !strings.Contains(errOut.String(), "serve") || !strings.Contains(errOut.String(), "migrate") {
		t.Fatalf("usage does not list the commands: %s", errOut.String())
	}
	out.Reset()
	if got := dispatch(t.Context(), []string{"help"}, &out, &errOut); got != 0 || !strings.Contains(out.String(), "migrate") {
		t.Fatalf("help: exit %d, %q", got, out.String())
	}
	errOut.Reset()
	if got := dispatch(t.Context(), []string{"--site", "nokey"}, &out, &errOut); got != 2 || !strings.Contains(errOut.String(), "KEY=ORIGIN") {
		t.Fatalf("serve with a bad flag: exit %d, %q", got, errOut.String())
	}
}
