package enrich

import (
	_ "embed"
	"strings"
	"sync"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// subdivisionsTSV maps subdivision names to ISO 3166-2 codes: "CC-SUB",
// locale, name per line (Unicode CLDR's display names; see gensubdiv).
//
//go:embed subdivisions.tsv
var subdivisionsTSV string

// subdivisionIndex finds the ISO 3166-2 code of a subdivision by name within
// its country. Names are compared folded (case, diacritics and punctuation
// ignored); a name that folds to two codes in one country matches neither.
type subdivisionIndex struct {
	// tiers, tried in order: English names as written, English names without
	// generic words ("Moscow Oblast" and "Moscow" differ in the first tier,
	// not in the second), names in other Latin-script locales. Key: country
	// code + " " + folded name; value: the code, or "" when ambiguous.
	tiers [3]map[string]string
}

var (
	subdivOnce sync.Once
	subdivIdx  *subdivisionIndex
)

// regionFromName returns the ISO 3166-2 code ("US-CA") of the subdivision
// named name in country ("California" in "US"), or false when the name is
// unknown or ambiguous there.
func regionFromName(country, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	loadSubdivisions()
	return subdivIdx.lookup(country, name)
}

// loadSubdivisions builds the index once (~35 ms); openGeoDB calls it so
// that the first request does not pay it.
func loadSubdivisions() {
	subdivOnce.Do(func() { subdivIdx = parseSubdivisions(subdivisionsTSV) })
}

func parseSubdivisions(tsv string) *subdivisionIndex {
	x := &subdivisionIndex{}
	for i := range x.tiers {
		x.tiers[i] = map[string]string{}
	}
	for line := range strings.Lines(tsv) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		code, rest, ok1 := strings.Cut(line, "\t")
		locale, name, ok2 := strings.Cut(rest, "\t")
		if !ok1 || !ok2 || len(code) < 4 || code[2] != '-' {
			continue
		}
		cc := code[:2]
		if locale == "en" {
			x.add(0, cc, foldName(name, false), code)
			x.add(1, cc, foldName(name, true), code)
		} else {
			x.add(2, cc, foldName(name, false), code)
			x.add(2, cc, foldName(name, true), code)
		}
	}
	return x
}

func (x *subdivisionIndex) add(tier int, cc, folded, code string) {
	if folded == "" {
		return
	}
	k := cc + " " + folded
	if cur, ok := x.tiers[tier][k]; ok && cur != code {
		x.tiers[tier][k] = ""
		return
	}
	x.tiers[tier][k] = code
}

func (x *subdivisionIndex) lookup(country, name string) (string, bool) {
	exact, bare := foldName(name, false), foldName(name, true)
	for i, t := range x.tiers {
		keys := []string{exact}
		if i > 0 {
			keys = append(keys, bare)
		}
		for _, f := range keys {
			if code, ok := t[country+" "+f]; ok {
				if code == "" {
					return "", false // ambiguous: no guess
				}
				return code, true
			}
		}
	}
	return "", false
}

// genericWords are the administrative-level words that names carry or omit
// from one source to the next ("Gyeonggi-do", "Gyeonggi"; "Stockholm County",
// "Stockholm").
var genericWords = map[string]bool{
	"autonomous": true, "canton": true, "city": true, "community": true, "county": true, "department": true,
	"district": true, "division": true, "do": true, "governorate": true, "krai": true, "kray": true, "lan": true,
	"municipality": true, "oblast": true, "of": true, "okrug": true, "parish": true, "prefecture": true,
	"province": true, "region": true, "republic": true, "state": true, "territory": true, "the": true,
	"voivodeship": true,
}

// latinFold spells the Latin letters that have no canonical decomposition.
var latinFold = strings.NewReplacer("ø", "o", "Ø", "o", "æ", "ae", "Æ", "ae", "œ", "oe", "Œ", "oe", "ß", "ss",
	"ł", "l", "Ł", "l", "đ", "d", "Đ", "d", "ı", "i", "þ", "th", "Þ", "th", "ð", "d", "Ð", "d")

// foldName lowercases name, drops diacritics, footnote digits and
// punctuation, and joins the remaining words with one space; bare also drops
// genericWords (unless nothing else is left).
func foldName(name string, bare bool) string {
	var b strings.Builder
	for _, r := range norm.NFKD.String(strings.Map(func(r rune) rune {
		if unicode.Is(unicode.No, r) { // "Île-de-France²"
			return -1
		}
		return r
	}, latinFold.Replace(name))) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + 'a' - 'A')
		case unicode.Is(unicode.Mn, r):
		default:
			b.WriteByte(' ')
		}
	}
	words := strings.Fields(b.String())
	if bare {
		kept := words[:0:0]
		for _, w := range words {
			if !genericWords[w] {
				kept = append(kept, w)
			}
		}
		if len(kept) > 0 {
			words = kept
		}
	}
	return strings.Join(words, " ")
}
