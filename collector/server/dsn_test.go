package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/secret"
)

func TestRedactDSN(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"clickhouse://db:9000/itlmon", "clickhouse://db:9000/itlmon"},
		{"clickhouse://user@db:9000/itlmon", "clickhouse://user@db:9000/itlmon"},
		{"clickhouse://user:hunter2@db:9000/itlmon", "clickhouse://user:***@db:9000/itlmon"},
		{"clickhouse://user:@db:9000/itlmon", "clickhouse://user:***@db:9000/itlmon"},
		{"clickhouse://db:9000/itlmon?password=hunter2", "clickhouse://db:9000/itlmon?password=***"},
		{"clickhouse://db:9000/itlmon?username=u&password=hunter2&dial_timeout=2s",
			"clickhouse://db:9000/itlmon?username=u&password=***&dial_timeout=2s"},
		{"tcp://db:9000?PASSWORD=hunter2&Secure=true", "tcp://db:9000?PASSWORD=***&Secure=true"},
		{"clickhouse://db:9000/x?secret=hunter2&token=hunter2&key=hunter2&api_key=hunter2",
			"clickhouse://db:9000/x?secret=***&token=***&key=***&api_key=***"},
		// An unknown parameter is a ClickHouse setting: its value may be anything.
		{"clickhouse://db:9000/x?max_execution_time=60", "clickhouse://db:9000/x?max_execution_time=***"},
		{"clickhouse://db:9000/x?http_proxy=http://p:hunter2@proxy:3128", "clickhouse://db:9000/x?http_proxy=***"},
		{"clickhouse://db:9000/x?secure", "clickhouse://db:9000/x?secure"},
		{"clickhouse://u:p@db:9000/x#hunter2", "clickhouse://u:***@db:9000/x#***"},
		// Malformed: unescaped '/', '@' or '?' inside the password.
		// A DSN that does not parse is redacted whole.
		{"clickhouse://user:hun/ter2@db:9000/itlmon", "clickhouse://***"},
		{"clickhouse://user:hun@ter2@db:9000/itlmon", "clickhouse://user:***@db:9000/itlmon"},
		{"clickhouse://user:hun?ter2@db:9000/itlmon", "clickhouse://***"},
		{"clickhouse://user:hun#ter2@db:9000/itlmon", "clickhouse://***"},
		{"clickhouse://u:hunter2@[::1/x?password=hunter2", "clickhouse://***"},
		{"clickhouse://us/er@db/x", "clickhouse://***@db/x"},
		{"user:hunter2@db:9000", "***"},
		{"my sql://u:hunter2@db", "***"},
		{"mysql://u:hunter2@db", "mysql://u:***@db"},
	} {
		got := redactDSN(tc.in)
		if got != tc.want {
			t.Errorf("redactDSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "hunter2") || strings.Contains(got, "ter2") {
			t.Errorf("redactDSN(%q) = %q: a secret shows", tc.in, got)
		}
	}
}

// TestSecretDSNOpaque checks every way a DSN can be printed or encoded.
func TestSecretDSNOpaque(t *testing.T) {
	const raw = "clickhouse://u:hunter2@db:9000/x?password=hunter2"
	var d SecretDSN
	if err := d.Set(raw); err != nil {
		t.Fatal(err)
	}
	if d.Reveal() != raw {
		t.Fatalf("Reveal = %q, want the DSN", d.Reveal())
	}
	c := Config{ClickHouse: d}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	l := zerolog.New(&log)
	l.Info().Stringer("a", d).Interface("b", d).Interface("c", c).Msg("")
	for _, s := range []string{
		d.String(), fmt.Sprint(d), fmt.Sprintf("%v %s %q %+v %#v %x", d, d, d, d, d, d),
		fmt.Sprintf("%v %+v %#v", c, c, c), fmt.Sprintf("%v", &c), string(js), log.String(),
		fmt.Errorf("open %v: %w", d, fmt.Errorf("x")).Error(),
	} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "68756e74657232") {
			t.Errorf("secret shows in %q", s)
		}
		if !strings.Contains(s, "db:9000") && !strings.Contains(s, "64623a39303030") {
			t.Errorf("redacted form lost the host: %q", s)
		}
	}
}

// TestConfigSecretsOpaque: a whole Config, printed or encoded every way,
// shows none of its secrets: the DSN's password, the read token, the
// origin keys.
func TestConfigSecretsOpaque(t *testing.T) {
	c := DefaultConfig()
	c.ClickHouse = NewSecretDSN("clickhouse://u:hunter2-dsn@db:9000/x")
	c.ReadToken = secret.New("hunter2-read-token")
	c.OriginKeys = map[string]secret.Token{"chat": secret.New("hunter2-origin-key")}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	l := zerolog.New(&log)
	l.Info().Interface("config", c).Interface("ptr", &c).Msgf("%v", c)
	for _, s := range []string{fmt.Sprintf("%v|%+v|%#v", c, c, c), fmt.Sprintf("%v %+v", &c, &c), string(js), log.String()} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("a secret shows in %q", s)
		}
	}
}
