package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDSNSecretsNotInOutput runs serve and migrate with DSNs carrying a
// password in every form and asserts it reaches neither stdout nor stderr:
// through their validation errors, migrate's failed connection, and serve,
// which starts while ClickHouse is unreachable and logs why (it is stopped
// after a second, once it has tried).
func TestDSNSecretsNotInOutput(t *testing.T) {
	t.Setenv("ITLMON_CLICKHOUSE", "")
	dsns := []string{
		"mysql://u:hunter2@db/x?password=hunter2",                                   // refused scheme
		"clickhouse://u:hunter2@127.0.0.1:1/x?password=hunter2",                     // nothing listens
		"clickhouse://127.0.0.1:1/x?password=hunter2&secret=hunter2&token=hunter2",  // query credentials
		"clickhouse://u:hunter2@[::1/x?password=hunter2",                            // unparsable
		"clickhouse://u:hun/ter2@127.0.0.1:1/x",                                     // unescaped '/'
		"clickhouse://127.0.0.1:1/x?password=hunter2&dial_timeout=soon",             // bad option
		"clickhouse://127.0.0.1:1/x?password=hunter2&http_proxy=http://a:hunter2@[", // bad proxy
	}
	for _, dsn := range dsns {
		for _, cmd := range [][]string{
			{"serve", "--demo", "--log-format", "json", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--clickhouse", dsn},
			{"migrate", "--log-format", "json", "--data", t.TempDir(), "--clickhouse", dsn},
			{"serve", "--demo", "--ttl", "1h", "--clickhouse", dsn}, // refused by validation
		} {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			var out, errOut strings.Builder
			code := dispatch(ctx, cmd, &out, &errOut)
			cancel()
			if cmd[0] == "migrate" && code == 0 || cmd[2] == "--ttl" && code == 0 {
				t.Errorf("%v: exit 0, want a failure", cmd)
			}
			all := out.String() + errOut.String()
			if strings.Contains(all, "hunter2") || strings.Contains(all, "ter2") {
				t.Errorf("%v: the password shows in the output:\n%s", cmd, all)
			}
			if errOut.Len() == 0 {
				t.Errorf("%v: exit %d without a word", cmd, code)
			}
		}
	}
	// With the DSN from the environment, the usage text keeps it too.
	t.Setenv("ITLMON_CLICKHOUSE", "clickhouse://u:hunter2@db/x?password=hunter2")
	var out, errOut strings.Builder
	dispatch(t.Context(), []string{"serve", "--no-such-flag"}, &out, &errOut)
	if all := out.String() + errOut.String(); strings.Contains(all, "hunter2") {
		t.Errorf("usage shows the password:\n%s", all)
	}
}

// TestReadTokenAndOriginKeysNotInOutput: the read token and the origin
// keys, given as flags or in the environment, reach neither stdout nor
// stderr: not in a serve that starts (with ClickHouse unreachable, so it
// logs why) and is stopped after a second, not in the errors of invalid
// values, not in usage text.
func TestReadTokenAndOriginKeysNotInOutput(t *testing.T) {
	const token, key = "hunter2-read-token-secret", "hunter2-origin-key-secret"
	dsn := "clickhouse://127.0.0.1:1/x"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		ok   bool // the command runs until stopped
	}{
		{args: []string{"--read-token", token, "--origin-key", "demo=" + key}, ok: true},
		{env: map[string]string{"ITLMON_READ_TOKEN": token, "ITLMON_ORIGIN_KEYS": "demo=" + key}, ok: true},
		{args: []string{"--read-token", "hunter2"}},           // too short
		{args: []string{"--origin-key", key}},                 // no SITE=
		{args: []string{"--origin-key", "demo=hunter2"}},      // too short
		{args: []string{"--origin-key", "nosuchsite=" + key}}, // unknown site
		{args: []string{"--no-such-flag"}, env: map[string]string{"ITLMON_READ_TOKEN": token, "ITLMON_ORIGIN_KEYS": "demo=" + key}},
	} {
		for _, k := range []string{"ITLMON_READ_TOKEN", "ITLMON_ORIGIN_KEYS", "ITLMON_CLICKHOUSE"} {
			t.Setenv(k, tc.env[k])
		}
		cmd := append([]string{"serve", "--demo", "--log-format", "json", "--log-level", "debug", "--addr", "127.0.0.1:0",
			"--data", t.TempDir(), "--clickhouse", dsn}, tc.args...)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		var out, errOut strings.Builder
		code := dispatch(ctx, cmd, &out, &errOut)
		cancel()
		if !tc.ok && code == 0 {
			t.Errorf("%v: exit 0, want a failure", tc.args)
		}
		all := out.String() + errOut.String()
		if strings.Contains(all, "hunter2") {
			t.Errorf("%v %v: a secret shows in the output:\n%s", tc.args, tc.env, all)
		}
		if errOut.Len() == 0 {
			t.Errorf("%v: exit %d without a word", tc.args, code)
		}
	}
}
