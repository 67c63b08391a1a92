package ingest

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Site is one site key and the page origins allowed to send for it.
type Site struct {
	Key string
	// Origins are exact browser origins ("https://chat.example.com",
	// "http://127.0.0.1:8080"). "*" allows any origin, including requests
	// without an Origin header (server-side reporters); use it only for
	// sites whose data is not worth forging.
	Origins []string
}

// Errors returned by ParseSite and LoadSitesFile.
var (
	ErrSiteSyntax = errors.New("want KEY=ORIGIN[,ORIGIN...]")
	ErrSiteKey    = errors.New("site key must be 1-64 of [A-Za-z0-9_.-]")
	ErrOrigin     = errors.New("origin must be scheme://host[:port] with scheme http or https, or *")
)

// ParseSite parses "KEY=ORIGIN[,ORIGIN...]".
func ParseSite(s string) (Site, error) {
	key, origins, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || origins == "" {
		return Site{}, fmt.Errorf("site %q: %w", s, ErrSiteSyntax)
	}
	if !validKey(key) {
		return Site{}, fmt.Errorf("site %q: %w", key, ErrSiteKey)
	}
	site := Site{Key: key}
	for _, o := range strings.Split(origins, ",") {
		norm, err := NormalizeOrigin(strings.TrimSpace(o))
		if err != nil {
			return Site{}, fmt.Errorf("site %s: %w", key, err)
		}
		site.Origins = append(site.Origins, norm)
	}
	return site, nil
}

// LoadSitesFile reads one KEY=ORIGIN[,ORIGIN...] per line; blank lines and
// lines starting with # are ignored.
func LoadSitesFile(path string) ([]Site, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var sites []Site
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := ParseSite(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		sites = append(sites, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return sites, nil
}

// NormalizeOrigin checks an origin and returns it lower-cased, without a
// default port, the way browsers send it.
func NormalizeOrigin(o string) (string, error) {
	if o == "*" {
		return o, nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("origin %q: %w", o, ErrOrigin)
	}
	host := strings.ToLower(u.Host)
	if u.Scheme == "http" {
		host = strings.TrimSuffix(host, ":80")
	} else {
		host = strings.TrimSuffix(host, ":443")
	}
	return u.Scheme + "://" + host, nil
}

func validKey(k string) bool {
	if len(k) == 0 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		b := k[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-') {
			return false
		}
	}
	return true
}
