// Command build builds flanneld (test/internal/flanneld.Version) into the
// user's cache and prints its directory: make deps and test-kernel run it
// before anything enters a private namespace.
package main

import (
	"fmt"
	"os"

	"github.com/cnibox/cnibox/test/internal/flanneld"
)

func main() {
	dir, err := flanneld.Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flanneld:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
