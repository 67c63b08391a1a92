package enrich

import "testing"

func TestRegionFromName(t *testing.T) {
	tests := []struct{ country, name, want string }{
		{"US", "California", "US-CA"},
		{"GB", "England", "GB-ENG"},
		{"NL", "North Holland", "NL-NH"},
		{"DE", "Hesse", "DE-HE"},
		{"FR", "Ile-de-France", "FR-IDF"},   // CLDR: "Île-de-France²"
		{"BR", "Sao Paulo", "BR-SP"},        // CLDR: "São Paulo"
		{"KR", "Gyeonggi-do", "KR-41"},      // CLDR: "Gyeonggi"
		{"SE", "Stockholm County", "SE-AB"}, // CLDR: "Stockholm"
		{"RU", "Moscow", "RU-MOW"},          // the city; "Moscow Province" is RU-MOS
		{"JP", "tokyo", "JP-13"},            // case
		{"NO", "Ostfold", "NO-01"},          // CLDR: "Østfold" (ø has no decomposition)
		{"RU", "St.-Petersburg", "RU-SPE"},
		{"US", "Bavaria", ""},       // a name of another country
		{"RU", "Moscow Oblast", ""}, // folds to both Moscow codes: no guess
		{"ES", "Madrid", "ES-MD"},   // the community (first level), not the province ES-M
		{"XX", "California", ""},    // no such country
		{"US", "", ""},
	}
	for _, tt := range tests {
		got, ok := regionFromName(tt.country, tt.name)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("regionFromName(%q, %q) = %q, %v; want %q", tt.country, tt.name, got, ok, tt.want)
		}
	}
}

func TestFoldName(t *testing.T) {
	tests := []struct {
		in   string
		bare bool
		want string
	}{
		{"Île-de-France²", false, "ile de france"},
		{"Provence-Alpes-Côte-d’Azur", false, "provence alpes cote d azur"},
		{"Moscow Oblast", true, "moscow"},
		{"District of Columbia", true, "columbia"},
		{"Region", true, "region"}, // nothing else left: kept
		{"Ta‘izz", false, "ta izz"},
		{"St.-Petersburg", false, "saint petersburg"},
		{"Bogota D.C.", true, "bogota"},
	}
	for _, tt := range tests {
		if got := foldName(tt.in, tt.bare); got != tt.want {
			t.Errorf("foldName(%q, %v) = %q, want %q", tt.in, tt.bare, got, tt.want)
		}
	}
}

func BenchmarkParseSubdivisions(b *testing.B) {
	for b.Loop() {
		parseSubdivisions(subdivisionsTSV)
	}
}
