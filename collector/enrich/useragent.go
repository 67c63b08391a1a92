package enrich

import (
	"net/http"
	"strconv"
	"strings"

	useragent "github.com/medama-io/go-useragent"
	"github.com/medama-io/go-useragent/agents"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// uaParser wraps the User-Agent parser (github.com/medama-io/go-useragent,
// a trie built once at start; Parse does not allocate).
type uaParser struct{ p *useragent.Parser }

func newUAParser() *uaParser { return &uaParser{p: useragent.NewParser()} }

// osNames maps the parser's OS names onto the names itlmon stores.
var osNames = map[agents.OS]string{
	agents.OSAndroid:  "Android",
	agents.OSChromeOS: "ChromeOS",
	agents.OSIOS:      "iOS",
	agents.OSLinux:    "Linux",
	agents.OSFreeBSD:  "FreeBSD",
	agents.OSOpenBSD:  "OpenBSD",
	agents.OSMacOS:    "macOS",
	agents.OSWindows:  "Windows",
}

var deviceNames = map[agents.Device]string{
	agents.DeviceDesktop: "desktop",
	agents.DeviceMobile:  "mobile",
	agents.DeviceTablet:  "tablet",
	agents.DeviceTV:      "tv",
	agents.DeviceBot:     "bot",
}

// userAgent fills browser, OS and device: the User-Agent string first (the
// header, else the one the page reported), then UA client hints (the
// Sec-CH-UA* headers, else the page's own navigator.userAgentData) refine the
// browser major (frozen or missing in reduced UA strings), the OS and mobile.
func (e *Enricher) userAgent(info *Info, h http.Header, c *beacon.Client) {
	info.Browser, info.OS, info.Device = Unknown, Unknown, Unknown
	ua := h.Get("User-Agent")
	if ua == "" && c != nil {
		ua = c.UserAgent
	}
	if ua != "" {
		a := e.ua.p.Parse(ua)
		if b := string(a.Browser()); b != "" {
			info.Browser = b
			info.BrowserMajor = parseMajor(a.BrowserVersionMajor())
		}
		if os, ok := osNames[a.OS()]; ok {
			info.OS = os
		}
		if d, ok := deviceNames[a.Device()]; ok {
			info.Device = d
		}
		if isBot(ua) {
			info.Device = "bot"
		}
	}

	// Client hints.
	brands, platform, mobile := h.Get("Sec-CH-UA"), h.Get("Sec-CH-UA-Platform"), h.Get("Sec-CH-UA-Mobile")
	var hb []brand
	if brands != "" {
		hb = parseSecCHUA(brands)
	} else if c != nil && c.UABrands != "" {
		hb = parseBrandList(c.UABrands)
	}
	if fam, major, headless, ok := pickBrand(hb); ok {
		info.Browser, info.BrowserMajor = fam, major
		if headless {
			info.Device = "bot"
		}
	}
	if platform != "" {
		platform = strings.Trim(platform, `"`)
	} else if c != nil {
		platform = c.UAPlatform
	}
	if os, ok := platformOS(platform); ok {
		info.OS = os
	}
	isMobile := mobile == "?1"
	if mobile == "" && c != nil && c.UABrands != "" {
		isMobile = c.UAMobile
	}
	if isMobile && (info.Device == "desktop" || info.Device == Unknown) {
		info.Device = "mobile"
	}
}

func parseMajor(s string) uint16 {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}

// isBot catches crawlers the parser's trie does not know (GPTBot, ...) by the
// conventions crawlers follow: a "...bot/" product token, "crawler", "spider".
func isBot(ua string) bool {
	l := strings.ToLower(ua)
	return strings.Contains(l, "bot/") || strings.Contains(l, "bot;") ||
		strings.Contains(l, "crawler") || strings.Contains(l, "spider") ||
		strings.Contains(l, "headlesschrome")
}

type brand struct {
	name  string
	major uint16
}

// parseSecCHUA parses a Sec-CH-UA structured header list:
// `"Chromium";v="142", "Google Chrome";v="142", "Not_A Brand";v="99"`.
func parseSecCHUA(v string) []brand {
	var out []brand
	for _, item := range strings.Split(v, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		b := brand{name: strings.Trim(strings.TrimSpace(name), `"`)}
		for _, p := range strings.Split(params, ";") {
			if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && k == "v" {
				b.major = parseMajor(majorOf(strings.Trim(val, `"`)))
			}
		}
		out = append(out, b)
	}
	return out
}

// parseBrandList parses the batch's "Brand;major,Brand;major".
func parseBrandList(v string) []brand {
	var out []brand
	for _, item := range strings.Split(v, ",") {
		name, major, _ := strings.Cut(item, ";")
		out = append(out, brand{name: strings.TrimSpace(name), major: parseMajor(majorOf(strings.TrimSpace(major)))})
	}
	return out
}

func majorOf(v string) string { m, _, _ := strings.Cut(v, "."); return m }

// brandFamilies maps client-hint brand names onto browser families, most
// specific first: a Chromium-based browser lists "Chromium" too.
var brandFamilies = []struct{ brand, family string }{
	{"Microsoft Edge", "Edge"},
	{"Opera", "Opera"},
	{"Opera GX", "Opera"},
	{"Vivaldi", "Vivaldi"},
	{"YaBrowser", "Yandex Browser"},
	{"Samsung Internet", "Samsung Browser"},
	{"Google Chrome", "Chrome"},
	{"HeadlessChrome", "Chrome"},
	{"Chromium", "Chrome"},
}

// pickBrand chooses the most specific known brand; GREASE brands ("Not A;Brand")
// and unknown ones are skipped.
func pickBrand(bs []brand) (family string, major uint16, headless, ok bool) {
	for _, b := range bs {
		if b.name == "HeadlessChrome" {
			headless = true
		}
	}
	for _, f := range brandFamilies {
		for _, b := range bs {
			if b.name == f.brand && b.major > 0 {
				return f.family, b.major, headless, true
			}
		}
	}
	return "", 0, headless, false
}

// platformOS maps Sec-CH-UA-Platform values onto OS names.
func platformOS(p string) (string, bool) {
	switch p {
	case "Windows", "Android", "iOS", "Linux":
		return p, true
	case "macOS":
		return "macOS", true
	case "Chrome OS", "Chromium OS":
		return "ChromeOS", true
	}
	return "", false
}
