package meter

// A small allocation-free JSON scanner. It never builds values: it validates a
// document (validJSON), finds a member of an object by key (jfield, jget),
// walks array elements (jarray) and answers the few questions the format
// classifiers ask of a value (non-empty string, string equality or prefix,
// integer). Every function works on a byte slice holding one value (leading and
// trailing whitespace allowed), is safe on malformed or truncated input (it
// reports "not found" instead of panicking) and does not allocate.

// maxJSONDepth bounds nesting; deeper documents are treated as malformed so
// that recursion stays shallow whatever the input.
const maxJSONDepth = 64

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// validJSON reports whether b is exactly one well-formed JSON value,
// surrounded by optional whitespace.
func validJSON(b []byte) bool {
	i := skipWS(b, 0)
	j, ok := skipValue(b, i, 0)
	return ok && skipWS(b, j) == len(b)
}

// skipValue returns the index just past the value starting at b[i] (no
// leading whitespace).
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{':
		if depth >= maxJSONDepth {
			return i, false
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			var ok bool
			if i, ok = skipString(b, i); !ok {
				return i, false
			}
			i = skipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = skipValue(b, skipWS(b, i+1), depth+1); !ok {
				return i, false
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return i, false
			}
			if b[i] == '}' {
				return i + 1, true
			}
			if b[i] != ',' {
				return i, false
			}
			i = skipWS(b, i+1)
		}
	case c == '[':
		if depth >= maxJSONDepth {
			return i, false
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = skipValue(b, i, depth+1); !ok {
				return i, false
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return i, false
			}
			if b[i] == ']' {
				return i + 1, true
			}
			if b[i] != ',' {
				return i, false
			}
			i = skipWS(b, i+1)
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return i, false
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
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
	for i++; i < len(b); i++ {
		for i < len(b) && !strStop[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 {
					return len(b), false
				}
				for k := 1; k <= 4; k++ {
					if hexVal(b[i+k]) < 0 {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
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
func jfield(b []byte, key string) ([]byte, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, false
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		ks := i
		var ok bool
		if i, ok = skipString(b, i); !ok {
			return nil, false
		}
		match := jstrEqual(b[ks:i], key)
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		vs := skipWS(b, i+1)
		if i, ok = skipValue(b, vs, 1); !ok {
			return nil, false
		}
		if match {
			return b[vs:i], true
		}
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i = skipWS(b, i+1)
	}
}

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

// jarray iterates the elements of a JSON array without allocating:
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
	j, ok := skipValue(b, i, 1)
	if !ok {
		it.done = true
		return false
	}
	it.elem, it.i = b[i:j], j
	return true
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

// jobject iterates the members of a JSON object without allocating:
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
	closed   bool // the iteration ended at the object's closing brace
}

// valid reports, once next has returned false, whether the whole of b was
// one well-formed object (members are validated as they are skipped).
func (it *jobjectIter) valid() bool {
	return it.closed && skipWS(it.b, it.i) == len(it.b)
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
			it.done, it.closed, it.i = true, true, i+1
			return false
		}
		if i >= len(b) || b[i] != ',' {
			it.done = true
			return false
		}
		i = skipWS(b, i+1)
	} else if i < len(b) && b[i] == '}' {
		it.done, it.closed, it.i = true, true, i+1
		return false
	}
	it.started = true
	if i >= len(b) || b[i] != '"' {
		it.done = true
		return false
	}
	ke, ok := skipString(b, i)
	if !ok {
		it.done = true
		return false
	}
	j := skipWS(b, ke)
	if j >= len(b) || b[j] != ':' {
		it.done = true
		return false
	}
	vs := skipWS(b, j+1)
	ve, ok := skipValue(b, vs, 1)
	if !ok {
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
