package enrich

import (
	_ "embed"
	"slices"
	"strings"
	"sync"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// subdivisionsTSV maps subdivision names to ISO 3166-2 codes: "CC-SUB",
// level (1: first-level, 2: inside another subdivision), locale, name per
// line (Unicode CLDR's display names and containment; see gensubdiv).
//
//go:embed subdivisions.tsv
var subdivisionsTSV string

// subdivisionIndex finds the ISO 3166-2 code of a subdivision by name within
// its country. Names are compared folded (case, diacritics and punctuation
// ignored). A name that folds to several codes of one country matches the
// one first-level subdivision among them (what a GeoIP database's first
// subdivision field holds: "Madrid" is the community ES-MD, not the province
// ES-M), else none.
type subdivisionIndex struct {
	// tiers, tried in order: English names as written, English names without
	// generic words ("Moscow Oblast" and "Moscow" differ in the first tier,
	// not in the second), names in other Latin-script locales. Key: country
	// code + " " + folded name.
	tiers [3]map[string][]subdivCandidate
}

type subdivCandidate struct {
	code  string
	level byte
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
		x.tiers[i] = map[string][]subdivCandidate{}
	}
	for line := range strings.Lines(tsv) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) != 4 || len(f[0]) < 4 || f[0][2] != '-' || len(f[1]) != 1 {
			continue
		}
		c := subdivCandidate{code: f[0], level: f[1][0] - '0'}
		cc, locale, name := c.code[:2], f[2], f[3]
		if locale == "en" {
			x.add(0, cc, foldName(name, false), c)
			x.add(1, cc, foldName(name, true), c)
		} else {
			x.add(2, cc, foldName(name, false), c)
			x.add(2, cc, foldName(name, true), c)
		}
	}
	return x
}

func (x *subdivisionIndex) add(tier int, cc, folded string, c subdivCandidate) {
	if folded == "" {
		return
	}
	k := cc + " " + folded
	if !slices.Contains(x.tiers[tier][k], c) {
		x.tiers[tier][k] = append(x.tiers[tier][k], c)
	}
}

func (x *subdivisionIndex) lookup(country, name string) (string, bool) {
	exact, bare := foldName(name, false), foldName(name, true)
	for i, t := range x.tiers {
		keys := []string{exact}
		if i > 0 {
			keys = append(keys, bare)
		}
		for _, f := range keys {
			if cs, ok := t[country+" "+f]; ok {
				return pick(cs)
			}
		}
	}
	return "", false
}

// pick resolves the candidates of one name: the only one, or the only
// first-level one; else none (no guess).
func pick(cs []subdivCandidate) (string, bool) {
	if len(cs) == 1 {
		return cs[0].code, true
	}
	code := ""
	for _, c := range cs {
		if c.level != 1 {
			continue
		}
		if code != "" && code != c.code {
			return "", false
		}
		code = c.code
	}
	return code, code != ""
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
// punctuation, spells "St" as "saint", and joins the remaining words with one
// space; bare also drops genericWords and one-letter words (unless nothing
// else is left).
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
	for i, w := range words {
		if w == "st" { // "St.-Petersburg", "St. Gallen"
			words[i] = "saint"
		}
	}
	if bare {
		kept := words[:0:0]
		for _, w := range words {
			if !genericWords[w] && len(w) > 1 { // and initials: "Bogota D.C."
				kept = append(kept, w)
			}
		}
		if len(kept) > 0 {
			words = kept
		}
	}
	return strings.Join(words, " ")
}
