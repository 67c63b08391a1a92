package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/collector/server"
)

// TestFlagUsageNames: every flag of serve (a superset of migrate's storage
// flags) names its value in -h with one word or one KEY=VALUE form, never
// the flag package's generic "value" nor a phrase it took from back quotes
// ("-chdb-lib make deps-chdb").
func TestFlagUsageNames(t *testing.T) {
	c := server.DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs, &c)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
			return
		}
		if name == "" || name == "value" || name == "string" || strings.ContainsAny(name, " \t") {
			t.Errorf("-%s %s: name its value (a back-quoted word in the usage)", f.Name, name)
		}
		if strings.Contains(usage, "`") {
			t.Errorf("-%s: usage keeps a back quote: %q", f.Name, usage)
		}
	})
}

// TestHelpListsCommands: itlmon -h and --help list the commands (they used
// to print serve's flags under "Usage of itlmon serve").
func TestHelpListsCommands(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help", "help"} {
		var out, errOut bytes.Buffer
		if got := dispatch(t.Context(), []string{arg}, &out, &errOut); got != 0 {
			t.Errorf("itlmon %s: exit %d, stderr %q", arg, got, errOut.String())
		}
		for _, cmd := range []string{"serve", "migrate", "gate"} {
			if !strings.Contains(out.String(), cmd) {
				t.Errorf("itlmon %s does not list %s: %q", arg, cmd, out.String())
			}
		}
	}
}
