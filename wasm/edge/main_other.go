//go:build !js

package main

import (
	"fmt"
	"os"
)

// main: the Worker runs only as WebAssembly under the Workers runtime
// (`make edge`, then wrangler or workerd).
func main() {
	fmt.Fprintln(os.Stderr, "itlmon edge: a Cloudflare Worker; build it with `make edge` (GOOS=js GOARCH=wasm) and deploy with wrangler")
	os.Exit(2)
}
