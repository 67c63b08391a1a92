package meter

import "unsafe"

// A small allocation-free JSON scanner. It never builds values: it validates a
// document and notes the values at a few paths on the way (scanJSON, used by
// the per-event classifiers), finds a member of an object by key (jobject,
// jfield: format detection, once per stream) and answers the few questions
// the classifiers ask of a value (non-empty string or array, string equality
// or prefix, integer). Every function works on a byte slice holding one value
// (leading and trailing whitespace allowed) and does not allocate.
//
// jobject and jfield trust that the bytes are valid (validJSON said so) and
// only skip over them. On bytes that are not valid they give unspecified
// results, but never panic or loop.

// maxJSONDepth bounds nesting; deeper documents are treated as malformed (it
// is also the width of validJSON's container stack).
const maxJSONDepth = 64

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// validJSON reports whether b is exactly one well-formed JSON value,
// surrounded by optional whitespace, nested at most maxJSONDepth deep.
func validJSON(b []byte) bool { return scanJSON(b, nil, nil) }

// A jpath names the values a classifier wants from an event, as a tree of
// object keys and array elements under the root object. scanJSON notes them
// while it validates, so an event is read once: a second look (or a third,
// into nested values) costs as much again, and WebAssembly makes every pass
// and every call dear. Make one with newJPath.
type jpath struct {
	nodes []jnode
	kids  [maxJNodes + 1][]int8 // kids[p+1]: the nodes whose parent is p
}

// A jnode is one step of a jpath.
type jnode struct {
	key    string // the member's key (compared after unescaping)
	elems  bool   // instead of key: every element of the parent array
	parent int8   // index of the parent node; -1: a member of the root object
	want   byte   // '"': hit when a non-empty string; '[': when a non-empty array; wantStringOrArray: either
}

// wantStringOrArray is a jnode's want for a value that is output either as a
// string or as an array of parts (Mistral's delta content).
const wantStringOrArray = 'a'

// newJPath indexes nodes (a parent before its children, at most maxJNodes).
func newJPath(nodes []jnode) *jpath {
	if len(nodes) > maxJNodes {
		panic("meter: jpath too long")
	}
	p := &jpath{nodes: nodes}
	for n, nd := range nodes {
		if int(nd.parent) >= n || nd.parent < -1 {
			panic("meter: jpath parent must come first")
		}
		p.kids[nd.parent+1] = append(p.kids[nd.parent+1], int8(n))
	}
	return p
}

// maxJNodes bounds a jpath (a jscan's hit mask and spans).
const maxJNodes = 24

// jscan is what scanJSON noted for a jpath: for each node the span of its
// last occurrence (duplicate keys: the last wins, as in JavaScript), and
// whether any occurrence was the non-empty string or array the node wants.
// It is also scanJSON's scratch, reused from one event to the next.
type jscan struct {
	span [maxJNodes][2]int32 // [start, end) in the scanned bytes; end 0: absent
	hits uint32              // bit n: node n was a hit
	log  []jnote             // the notes in document order (span and hits replay it)

	// keep: the caller leaves the scanned bytes unchanged until its next
	// scanJSON with this jscan (the meter keeps the previous SSE event in a
	// second buffer), so that scan may resume where the two agree.
	keep     bool
	prev     []byte // the last document scanned with keep
	prevPath *jpath // its jpath
	rootAt   int32  // where its root object began
	cps      []jcheckpoint
}

// A jnote is one value noted: node n at b[start:end].
type jnote struct {
	n          int8
	start, end int32
}

// A jcheckpoint is where a member of the root object began in prev, and how
// many notes had been made before it.
type jcheckpoint struct{ pos, log int32 }

// val returns node n's last value, or nil.
func (r *jscan) val(b []byte, n int) []byte {
	if r.span[n][1] == 0 {
		return nil
	}
	return b[r.span[n][0]:r.span[n][1]]
}

func (r *jscan) hit(n int) bool { return r.hits&(1<<n) != 0 }

// child returns the node for the member key (a raw string token) of a value
// at node parent, or for an element of it (elems), or -2 when not wanted.
func (p *jpath) child(parent int8, key []byte, elems bool) int8 {
	kids := p.kids[parent+1]
	if elems {
		for _, n := range kids {
			if p.nodes[n].elems {
				return n
			}
		}
		return -2
	}
	k := key[1 : len(key)-1]
	for _, n := range kids {
		nd := &p.nodes[n]
		if !nd.elems && len(k) == len(nd.key) && string(k) == nd.key {
			return n
		}
	}
	if indexByte(k, '\\') >= 0 { // an escaped key: compare it decoded
		for _, n := range kids {
			if nd := &p.nodes[n]; !nd.elems && jstrEqual(key, nd.key) {
				return n
			}
		}
	}
	return -2
}

// replay sets span and hits from log.
func (r *jscan) replay(p *jpath, b []byte) {
	r.span, r.hits = [maxJNodes][2]int32{}, 0
	for _, e := range r.log {
		r.span[e.n] = [2]int32{e.start, e.end}
		switch p.nodes[e.n].want {
		case '"':
			if jnonEmptyString(b[e.start:e.end]) {
				r.hits |= 1 << e.n
			}
		case '[':
			if jnonEmptyArray(b[e.start:e.end]) {
				r.hits |= 1 << e.n
			}
		case wantStringOrArray:
			if v := b[e.start:e.end]; jnonEmptyString(v) || jnonEmptyArray(v) {
				r.hits |= 1 << e.n
			}
		}
	}
}

// resumeAt returns the last checkpoint of the previous document before the
// first byte where b differs from it (ok false: none, or the previous scan
// was of another jpath or not kept). The byte at the checkpoint itself must
// agree too (the key's opening quote): whitespace there would be skipped.
func (r *jscan) resumeAt(b []byte, p *jpath) (cp jcheckpoint, ok bool) {
	if !r.keep || r.prev == nil || r.prevPath != p || len(r.cps) == 0 {
		return cp, false
	}
	same := commonPrefix(b, r.prev)
	k := len(r.cps) - 1
	for k >= 0 && int(r.cps[k].pos) >= same {
		k--
	}
	if k < 0 {
		return cp, false
	}
	r.cps = r.cps[:k+1]
	return r.cps[k], true
}

// commonPrefix returns how many leading bytes a and b share (8 at a time).
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		if *(*uint64)(unsafe.Pointer(&a[i])) != *(*uint64)(unsafe.Pointer(&b[i])) {
			break
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// scanJSON reports whether b is one well-formed JSON value (validJSON) and,
// with a jpath, notes the values it names into r (reset first).
//
// It is one iterative pass: an explicit stack of container kinds (and their
// jpath nodes), no recursion, strings and integers scanned in line. It runs
// once per event and is the bulk of the meter's work, so it is written for
// speed (in WebAssembly a call costs as much as scanning ~10 bytes). Where a
// container is not on the jpath its members cost no key comparison.
//
// With r.keep it resumes: events of one stream repeat most of their bytes
// (an OpenAI chat chunk's id, object, created, model and fingerprint come
// before the delta), so when b starts like the previous document up to one
// of its root members, the scan starts there, in the state the previous scan
// had there (which is the state a scan of b would reach: the bytes before it
// are the same), with the notes made before it.
func scanJSON(b []byte, p *jpath, r *jscan) bool {
	if p == nil {
		return scan(b, nil, nil)
	}
	if len(b) > 1<<31-1 { // spans would not fit: validate only
		r.span, r.hits, r.prev = [maxJNodes][2]int32{}, 0, nil
		return scan(b, nil, nil)
	}
	ok := scan(b, p, r)
	if ok {
		r.replay(p, b)
	} else {
		r.span, r.hits = [maxJNodes][2]int32{}, 0
	}
	r.prev, r.prevPath = nil, nil
	if r.keep {
		r.prev, r.prevPath = b, p
	}
	return ok
}

// scan is scanJSON's pass; it leaves the notes in r.log.
func scan(b []byte, p *jpath, r *jscan) bool {
	var (
		objects uint64 // bit d: the container at depth d is an object
		depth   int    // containers open
		i       = skipWS(b, 0)
		vs      int       // where the current value (or key) starts
		vn      int8 = -2 // its jpath node (-1: the root, -2: none)
		isKey   bool      // the string being scanned is a member's key
		closed  bool      // a container just closed (its node: nodes[depth])
		ok      bool
		c       byte
		nodes   [maxJSONDepth]int8
		starts  [maxJSONDepth]int32
	)
	if p != nil {
		vn = -1
		if cp, ok := r.resumeAt(b, p); ok {
			r.log = r.log[:cp.log]
			depth, objects, i = 1, 1, int(cp.pos)
			nodes[0], starts[0] = -1, r.rootAt
			goto key
		}
		r.log, r.cps = r.log[:0], r.cps[:0]
	}
value:
	if i >= len(b) {
		return false
	}
	vs, c = i, b[i]
	switch {
	case c == '"':
		goto str
	case c == '{' || c == '[':
		if depth >= maxJSONDepth {
			return false
		}
		nodes[depth], starts[depth] = vn, int32(vs)
		if depth == 0 && p != nil {
			r.rootAt = int32(vs)
		}
		i = skipWS(b, i+1)
		if c == '{' {
			objects |= 1 << depth
			depth++
			if i < len(b) && b[i] == '}' {
				i++
				depth--
				closed = true
				goto after
			}
			goto key
		}
		objects &^= 1 << depth
		depth++
		if i < len(b) && b[i] == ']' {
			i++
			depth--
			closed = true
			goto after
		}
		if vn != -2 {
			vn = p.child(vn, nil, true)
		}
		goto value
	case c >= '1' && c <= '9': // an integer in line; anything else in skipNumber
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			if i, ok = skipNumber(b, vs); !ok {
				return false
			}
		}
	case c == '-' || c == '0':
		if i, ok = skipNumber(b, i); !ok {
			return false
		}
	case c == 't':
		if i, ok = skipLiteral(b, i, "true"); !ok {
			return false
		}
	case c == 'f':
		if i, ok = skipLiteral(b, i, "false"); !ok {
			return false
		}
	case c == 'n':
		if i, ok = skipLiteral(b, i, "null"); !ok {
			return false
		}
	default:
		return false
	}
noted:
	if vn >= 0 {
		r.log = append(r.log, jnote{vn, int32(vs), int32(i)})
	}
	// After a value: a separator, the end of its container or of b.
after:
	for {
		if closed {
			closed = false
			if n := nodes[depth]; n >= 0 {
				r.log = append(r.log, jnote{n, starts[depth], int32(i)})
			}
		}
		i = skipWS(b, i)
		if depth == 0 {
			return i == len(b)
		}
		if i >= len(b) {
			return false
		}
		inObject := objects>>(depth-1)&1 == 1
		switch c = b[i]; {
		case c == ',':
			i = skipWS(b, i+1)
			if inObject {
				goto key
			}
			if vn = nodes[depth-1]; vn != -2 {
				vn = p.child(vn, nil, true)
			}
			goto value
		case c == '}' && inObject, c == ']' && !inObject:
			i++
			depth--
			closed = true
			continue
		}
		return false
	}
key:
	if i >= len(b) || b[i] != '"' {
		return false
	}
	if depth == 1 && p != nil && r.keep && nodes[0] == -1 {
		r.cps = append(r.cps, jcheckpoint{int32(i), int32(len(r.log))})
	}
	vs, isKey = i, true
str: // the string at b[vs]
	for i = vs + 1; ; i++ {
		i = skipPlain(b, i)
		for i < len(b) && !strStop[b[i]] {
			i++
		}
		if i >= len(b) {
			return false
		}
		if b[i] == '"' {
			i++
			break
		}
		if i, ok = skipEscape(b, i); !ok {
			return false
		}
	}
	if !isKey {
		goto noted
	}
	isKey = false
	if vn = nodes[depth-1]; vn != -2 {
		vn = p.child(vn, b[vs:i], false)
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipWS(b, i+1)
	goto value
}

// skipTrusted returns the index just past the value starting at b[i] in
// bytes validJSON accepted (a member's or element's value). It checks nothing
// but bounds: on other input it returns some index <= len(b), never panics.
func skipTrusted(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipStringTrusted(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipStringTrusted(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && !scalarEnd[b[i]] { // number, true, false, null
		i++
	}
	return i
}

// scalarEnd marks the bytes that end a number or literal in valid JSON.
var scalarEnd = func() (t [256]bool) {
	for _, c := range []byte(",}] \t\n\r") {
		t[c] = true
	}
	return t
}()

// skipStringTrusted returns the index just past the string token at b[i] ==
// '"' of valid JSON.
func skipStringTrusted(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return len(b)
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// Word-at-a-time tests on 8 bytes (SWAR): ones*c repeats byte c.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// skipPlain returns the index of the first 8-byte word from b[i] on that may
// hold a byte strStop marks (or where fewer than 8 bytes are left): string
// bodies are skipped a word per step, which matters most in WebAssembly.
// A word is flagged when some byte is '"', '\\' or < 0x20 (exact: no byte is
// missed; a flagged word is then scanned byte by byte).
func skipPlain(b []byte, i int) int {
	for i >= 0 && i+8 <= len(b) {
		w := *(*uint64)(unsafe.Pointer(&b[i])) // little-endian on amd64, arm64 and wasm
		q := w ^ (ones * '"')
		e := w ^ (ones * '\\')
		if ((q-ones)&^q|(e-ones)&^e|(w-ones*0x20)&^w)&highs != 0 {
			return i
		}
		i += 8
	}
	return i
}

// strStop marks the bytes a string scan must look at: the closing quote, an
// escape, and control characters (invalid inside a string).
var strStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	var ok bool
	for i++; i < len(b); i++ {
		i = skipPlain(b, i)
		for i < len(b) && !strStop[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		if b[i] == '"' {
			return i + 1, true
		}
		if i, ok = skipEscape(b, i); !ok {
			return i, false
		}
	}
	return i, false
}

// skipEscape checks the escape at b[i] == '\\' inside a string (any other
// byte there is a control character: an error) and returns the index of its
// last byte.
func skipEscape(b []byte, i int) (int, bool) {
	if b[i] != '\\' {
		return i, false
	}
	i++
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i, true
	case 'u':
		if len(b)-i <= 4 {
			return len(b), false
		}
		for k := 1; k <= 4; k++ {
			if hexVal(b[i+k]) < 0 {
				return i, false
			}
		}
		return i + 4, true
	}
	return i, false
}

func skipNumber(b []byte, i int) (int, bool) {
	start := i
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, false
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return i, false
		}
	}
	return i, i > start
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// jfield returns the value of member key of the object in b (b holds one
// value, whitespace allowed around it). The first member with that key wins.
// Keys are compared after unescaping, so "\u0063ontent" matches "content".
// Like jobject, it expects bytes validJSON accepted.
func jfield(b []byte, key string) ([]byte, bool) {
	for it := jobject(b); it.next(); {
		if jstrEqual(it.key, key) {
			return it.val, true
		}
	}
	return nil, false
}

// jnonEmptyString reports whether v is a string with at least one character.
func jnonEmptyString(v []byte) bool {
	return len(v) >= 3 && v[0] == '"' && v[1] != '"'
}

// jnonEmptyArray reports whether v is an array with at least one element.
func jnonEmptyArray(v []byte) bool {
	if len(v) < 2 || v[0] != '[' {
		return false
	}
	i := skipWS(v, 1)
	return i < len(v) && v[i] != ']'
}

// jstrEqual reports whether the JSON string token v (with quotes) decodes to s.
// Escapes are decoded; a \u escape outside ASCII never equals an ASCII s
// character, which is all the callers need.
func jstrEqual(v []byte, s string) bool {
	if len(v) == len(s)+2 && v[0] == '"' && string(v[1:len(v)-1]) == s {
		return true // the common case: no escapes
	}
	if indexByte(v, '\\') < 0 {
		return false
	}
	n, ok := jstrMatch(v, s, false)
	return ok && n == len(s)
}

// jstrHasPrefix reports whether the JSON string token v decodes to a string
// starting with s.
func jstrHasPrefix(v []byte, s string) bool {
	_, ok := jstrMatch(v, s, true)
	return ok
}

// jstrMatch decodes the string token v and compares it with s. With prefix it
// stops once s is matched; otherwise the decoded string must end there too.
// It returns how many bytes of s matched.
func jstrMatch(v []byte, s string, prefix bool) (int, bool) {
	if len(v) < 2 || v[0] != '"' {
		return 0, false
	}
	n := 0
	for i := 1; i < len(v); i++ {
		if prefix && n == len(s) {
			return n, true
		}
		c := v[i]
		switch c {
		case '"':
			return n, n == len(s)
		case '\\':
			i++
			if i >= len(v) {
				return n, false
			}
			switch v[i] {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'u':
				if len(v)-i <= 4 {
					return n, false
				}
				r := 0
				for k := 1; k <= 4; k++ {
					h := hexVal(v[i+k])
					if h < 0 {
						return n, false
					}
					r = r<<4 | h
				}
				i += 4
				if r >= 0x80 {
					return n, false
				}
				c = byte(r)
			default:
				c = v[i]
			}
		}
		if n >= len(s) || s[n] != c {
			return n, false
		}
		n++
	}
	return n, false
}

// jint parses v as a non-negative integer (a JSON number without fraction or
// exponent; "12.0" is accepted as 12). It saturates instead of overflowing.
func jint(v []byte) (int64, bool) {
	if len(v) == 0 || v[0] < '0' || v[0] > '9' {
		return 0, false
	}
	var n int64
	i := 0
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if n < (1<<62)/10 {
			n = n*10 + int64(v[i]-'0')
		}
	}
	if i < len(v) && v[i] == '.' {
		for i++; i < len(v) && v[i] == '0'; i++ {
		}
	}
	return n, i == len(v)
}

// jobject iterates the members of a JSON object (valid JSON, see above)
// without allocating:
//
//	for it := jobject(v); it.next(); { use(it.key, it.val) }
//
// key is the raw string token (quotes and escapes included): compare it with
// jstrEqual.
type jobjectIter struct {
	b        []byte
	i        int
	key, val []byte
	started  bool
	done     bool
}

func jobject(b []byte) jobjectIter {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return jobjectIter{done: true}
	}
	return jobjectIter{b: b, i: i + 1}
}

func (it *jobjectIter) next() bool {
	if it.done {
		return false
	}
	b := it.b
	i := skipWS(b, it.i)
	if it.started {
		if i < len(b) && b[i] == '}' {
			it.done, it.i = true, i+1
			return false
		}
		if i >= len(b) || b[i] != ',' {
			it.done = true
			return false
		}
		i = skipWS(b, i+1)
	} else if i < len(b) && b[i] == '}' {
		it.done, it.i = true, i+1
		return false
	}
	it.started = true
	if i >= len(b) || b[i] != '"' {
		it.done = true
		return false
	}
	ke := skipStringTrusted(b, i)
	j := skipWS(b, ke)
	if j >= len(b) || b[j] != ':' {
		it.done = true
		return false
	}
	vs := skipWS(b, j+1)
	ve := skipTrusted(b, vs)
	if ve <= vs {
		it.done = true
		return false
	}
	it.key, it.val, it.i = b[i:ke], b[vs:ve], ve
	return true
}

// jstrHasSuffix reports whether the JSON string token v ends with s. It
// compares raw bytes, so a suffix written with escapes does not match.
func jstrHasSuffix(v []byte, s string) bool {
	n := len(v) - 1 - len(s)
	return n >= 1 && v[0] == '"' && v[len(v)-1] == '"' && string(v[n:len(v)-1]) == s
}
