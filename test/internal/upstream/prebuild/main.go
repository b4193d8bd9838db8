// Command prebuild builds into the user's cache what the kube suites build
// on their first run (whereabouts' own binary, upstream.Whereabouts), so
// that .ci/run can build it beside make lint and make test rather than in
// make test-kube-api's path: `go run ./test/internal/upstream/prebuild`.
package main

import (
	"fmt"
	"os"

	"github.com/cnibox/cnibox/test/internal/upstream"
)

func main() {
	bin, err := upstream.Whereabouts()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prebuild:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
