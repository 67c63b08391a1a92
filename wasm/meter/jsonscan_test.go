package meter

import (
	"encoding/json"
	"testing"

	"github.com/itlmon/itlmon/internal/cpubench"
)

func TestValidJSON(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{` { "a" : [ 1 , -2.5e+3 , true , false , null , "x\"\\\/\b\f\n\r\t\u00e9" , { } , [ ] ] } `, true},
		{`"str"`, true},
		{`0`, true},
		{`-0.0e0`, true},
		{`[]`, true},
		{``, false},
		{`{`, false},
		{`{"a"}`, false},
		{`{"a":}`, false},
		{`{"a":1,}`, false},
		{`[1,]`, false},
		{`[1 2]`, false},
		{`01`, false},
		{`1.`, false},
		{`1e`, false},
		{`-`, false},
		{`"a`, false},
		{`"\x"`, false},
		{`"\u12"`, false},
		{"\"a\x01\"", false},
		{`tru`, false},
		{`nul`, false},
		{`{} {}`, false},
		{`{'a':1}`, false},
	}
	for _, tt := range tests {
		if got := validJSON([]byte(tt.in)); got != tt.want {
			t.Errorf("validJSON(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if std := json.Valid([]byte(tt.in)); std != tt.want {
			t.Errorf("test case %q disagrees with encoding/json (%v)", tt.in, std)
		}
	}
	deep := make([]byte, 0, 2*maxJSONDepth+4)
	for range maxJSONDepth + 2 {
		deep = append(deep, '[')
	}
	for range maxJSONDepth + 2 {
		deep = append(deep, ']')
	}
	if validJSON(deep) {
		t.Errorf("validJSON accepted nesting deeper than %d", maxJSONDepth)
	}
}

func TestJGet(t *testing.T) {
	doc := []byte(`{"skip":{"usage":{"completion_tokens":1}},"arr":[{"x":[1,{"y":2}]}],
		"usage" : { "prompt_tokens": 3, "completion_tokens" : 42 }, "s":"a\"b", "e":"", "k\u0065y":"v"}`)
	tests := []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"usage", "completion_tokens"}, `42`, true},
		{[]string{"skip", "usage", "completion_tokens"}, `1`, true},
		{[]string{"arr"}, `[{"x":[1,{"y":2}]}]`, true},
		{[]string{"s"}, `"a\"b"`, true},
		{[]string{"key"}, `"v"`, true},
		{[]string{"missing"}, ``, false},
		{[]string{"s", "x"}, ``, false},
	}
	for _, tt := range tests {
		v, ok := jget(doc, tt.path...)
		if ok != tt.ok || string(v) != tt.want {
			t.Errorf("jget(%v) = %q, %v; want %q, %v", tt.path, v, ok, tt.want, tt.ok)
		}
	}
}

func TestJArrayAndObject(t *testing.T) {
	var got []string
	for it := jarray([]byte(` [ 1 , "a,b" , {"c":[2,3]} , [] ] `)); it.next(); {
		got = append(got, string(it.elem))
	}
	want := []string{`1`, `"a,b"`, `{"c":[2,3]}`, `[]`}
	if len(got) != len(want) {
		t.Fatalf("elements %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("elements %q, want %q", got, want)
		}
	}
	for it := jarray([]byte(`[]`)); it.next(); {
		t.Fatal("empty array yielded an element")
	}
	var keys []string
	for it := jobject([]byte(`{"a":1, "b" : {"c":2} ,"d":[]}`)); it.next(); {
		keys = append(keys, string(it.key)+"="+string(it.val))
	}
	if len(keys) != 3 || keys[1] != `"b"={"c":2}` {
		t.Fatalf("members %q", keys)
	}
}

func TestJStrings(t *testing.T) {
	tests := []struct {
		v, s           string
		equal, prefix  bool
		nonEmpty       bool
		suffixDelta    bool
		prefixResponse bool
	}{
		{`"content"`, "content", true, true, true, false, false},
		{`"\u0063ontent"`, "content", true, true, true, false, false},
		{`"contents"`, "content", false, true, true, false, false},
		{`"conten"`, "content", false, false, true, false, false},
		{`""`, "", true, true, false, false, false},
		{`"response.output_text.delta"`, "response.", false, true, true, true, true},
		{`"\u00e9"`, "e", false, false, true, false, false},
	}
	for _, tt := range tests {
		v := []byte(tt.v)
		if got := jstrEqual(v, tt.s); got != tt.equal {
			t.Errorf("jstrEqual(%s, %q) = %v", tt.v, tt.s, got)
		}
		if got := jstrHasPrefix(v, tt.s); got != tt.prefix {
			t.Errorf("jstrHasPrefix(%s, %q) = %v", tt.v, tt.s, got)
		}
		if got := jnonEmptyString(v); got != tt.nonEmpty {
			t.Errorf("jnonEmptyString(%s) = %v", tt.v, got)
		}
		if got := jstrHasSuffix(v, ".delta"); got != tt.suffixDelta {
			t.Errorf("jstrHasSuffix(%s, .delta) = %v", tt.v, got)
		}
	}
}

func TestJInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"12.0", 12, true}, {"12.5", 0, false},
		{"-1", 0, false}, {"null", 0, false}, {`"3"`, 0, false}, {"1e3", 0, false},
		{"99999999999999999999999", 0, true},
	}
	for _, tt := range tests {
		got, ok := jint([]byte(tt.in))
		if ok != tt.ok || (ok && tt.want != 0 && got != tt.want) {
			t.Errorf("jint(%s) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if n, _ := jint([]byte("99999999999999999999999")); n <= 0 {
		t.Errorf("jint overflowed to %d", n)
	}
}

// FuzzValidJSON checks the scanner against encoding/json (tests only: the
// package itself never imports it) and that lookups never panic.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":"c\u00e9"}]}`, `[`, `"\u`, `{"choices":[{"delta":{"content":"x"}}]}`, `-0.1e-5`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			// Deeper nesting than maxJSONDepth is the one intended difference.
			if !(want && !got) {
				t.Fatalf("validJSON(%q) = %v, encoding/json says %v", b, got, want)
			}
		}
		jget(b, "choices")
		for it := jarray(b); it.next(); {
			jfield(it.elem, "delta")
		}
		for it := jobject(b); it.next(); {
			jstrEqual(it.key, "a")
			jint(it.val)
		}
	})
}

// BenchmarkValidJSON compares the scanner's validation with encoding/json's
// on one OpenAI chat chunk (a yardstick for the machine the numbers come from).
func BenchmarkValidJSON(b *testing.B) {
	data := []byte(apiChatChunk)
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"scanner", validJSON}, {"encoding-json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu0 := cpubench.Now()
			for i := 0; i < b.N; i++ {
				if !v.valid(data) {
					b.Fatal("invalid")
				}
			}
			cpubench.Report(b, cpu0, 0)
		})
	}
}

// Test helpers: since the classifiers scan in one pass (scanJSON), only the
// tests walk paths and arrays with the trusted iterators.

// jget follows a path of object keys.
func jget(b []byte, keys ...string) ([]byte, bool) {
	for _, k := range keys {
		var ok bool
		if b, ok = jfield(b, k); !ok {
			return nil, false
		}
	}
	return b, true
}

// jarray iterates the elements of a JSON array (valid JSON, see above)
// without allocating:
//
//	for it := jarray(v); it.next(); { use(it.elem) }
type jarrayIter struct {
	b    []byte
	i    int
	elem []byte
	done bool
}

func jarray(b []byte) jarrayIter {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return jarrayIter{done: true}
	}
	return jarrayIter{b: b, i: i + 1}
}

func (it *jarrayIter) next() bool {
	if it.done {
		return false
	}
	b := it.b
	i := skipWS(b, it.i)
	if i < len(b) && b[i] == ',' && it.elem != nil {
		i = skipWS(b, i+1)
	} else if i < len(b) && b[i] == ']' {
		it.done = true
		return false
	}
	j := skipTrusted(b, i)
	if j <= i {
		it.done = true
		return false
	}
	it.elem, it.i = b[i:j], j
	return true
}
