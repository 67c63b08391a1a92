package secret

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

const raw = "hunter2-0123456789abcdef"

// holder is how a Token is usually kept: a field of a configuration, and
// values of a map (the origin keys).
type holder struct {
	Addr  string
	Token Token
	Keys  map[string]Token
}

// leaks reports whether s shows the secret, whole, in part or encoded.
func leaks(s string) bool {
	for _, form := range []string{raw, raw[:7], hex.EncodeToString([]byte(raw[:7])), fmt.Sprintf("%q", raw)} {
		if strings.Contains(s, form) {
			return true
		}
	}
	return false
}

func TestTokenOpaque(t *testing.T) {
	tok := New(raw)
	if tok.Reveal() != raw || tok.IsZero() || tok.Len() != len(raw) {
		t.Fatalf("Reveal/IsZero/Len = %q %v %d", tok.Reveal(), tok.IsZero(), tok.Len())
	}
	h := holder{Addr: "127.0.0.1:8080", Token: tok, Keys: map[string]Token{"chat": tok}}
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	l := zerolog.New(&log)
	l.Info().Stringer("a", tok).Interface("b", tok).Interface("c", h).Interface("d", &h).Msgf("%v %+v", tok, h)
	outs := []string{
		tok.String(), fmt.Sprint(tok), fmt.Sprintln(tok, &tok),
		fmt.Sprintf("%v|%+v|%#v|%s|%q|%x|%X|%10s|%-8v|%d|%T", tok, tok, tok, tok, tok, tok, tok, tok, tok, tok, tok),
		fmt.Sprintf("%v|%+v|%#v|%s", h, h, h, h), fmt.Sprintf("%v|%+v|%#v", &h, &h, &h),
		fmt.Sprintf("%v %#v", h.Keys, h.Keys), fmt.Sprintf("%v", []Token{tok}),
		string(js), log.String(),
		fmt.Errorf("open with %v: %w", tok, errors.New("x")).Error(),
	}
	for _, s := range outs {
		if leaks(s) {
			t.Errorf("secret shows in %q", s)
		}
	}
	if !strings.Contains(string(js), `"Token":"***"`) || !strings.Contains(fmt.Sprintf("%+v", h), "Token:***") {
		t.Errorf("redacted form missing: %s / %+v", js, h)
	}
	if got := fmt.Sprintf("%v|%s|%#v", Token{}, Token{}, Token{}); got != `||secret.Token("")` {
		t.Errorf("zero Token prints %q", got)
	}
}

func TestTokenEqual(t *testing.T) {
	tok := New(raw)
	for got, want := range map[string]bool{raw: true, raw + "x": false, raw[:8]: false, "": false, strings.ToUpper(raw): false} {
		if tok.Equal(got) != want {
			t.Errorf("Equal(%q) = %v, want %v", got, !want, want)
		}
	}
	if (Token{}).Equal("") || New("").Equal("") {
		t.Error("a zero Token equals the empty string: an unset secret would let anyone in")
	}
}

// TestTokenFlag: a Token flag never shows its value in usage text.
func TestTokenFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var tok Token
	fs.Var(&tok, "token", "the token")
	var usage strings.Builder
	fs.SetOutput(&usage)
	if err := fs.Parse([]string{"--token", raw}); err != nil || tok.Reveal() != raw {
		t.Fatalf("parse: %v, %q", err, tok.Reveal())
	}
	fs.PrintDefaults()
	fs.VisitAll(func(f *flag.Flag) { usage.WriteString(f.Value.String()) })
	if leaks(usage.String()) {
		t.Errorf("usage shows the token:\n%s", usage.String())
	}
}

// TestTokenPanic: an unrecovered panic with a Token, or a struct holding
// one, prints no secret (the runtime prints a Stringer's String, and a
// struct's address). Run in a child process, which panics.
func TestTokenPanic(t *testing.T) {
	if what := os.Getenv("SECRET_TEST_PANIC"); what != "" {
		tok := New(raw)
		switch what {
		case "token":
			panic(tok)
		case "holder":
			panic(holder{Token: tok})
		case "error":
			panic(fmt.Errorf("bad %v", tok))
		}
		return
	}
	for _, what := range []string{"token", "holder", "error"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTokenPanic$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SECRET_TEST_PANIC="+what, "GOTRACEBACK=all")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "panic") {
			t.Fatalf("%s: the child did not panic (%v):\n%s", what, err, out)
		}
		if leaks(string(out)) {
			t.Errorf("%s: the panic shows the secret:\n%s", what, out)
		}
	}
}
