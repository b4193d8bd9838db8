// Command cnibox-dhcp is the dhcp daemon (package roles/dhcp/daemon) in a
// binary of its own, so that the DHCP library's package inits never run in
// the short-lived plugin processes of cnibox. `dhcp daemon` (cnibox through
// its dhcp symlink) execs it; run by hand it takes the same flags:
// `cnibox-dhcp daemon -socketpath ...` (the "daemon" word is optional).
// `cnibox-dhcp --version` prints its release and commit as cnibox does.
package main

import (
	"io"
	"os"

	"github.com/cnibox/cnibox/internal/buildinfo"
	"github.com/cnibox/cnibox/roles/dhcp/daemon"
)

// version is set by the build (-X main.version=...: git describe's); the
// release and the commit --version prints beside it are
// internal/buildinfo's, as cnibox's.
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, stdout io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		buildinfo.Get().Write(stdout, "cnibox-dhcp", version)
		return 0
	}
	if len(args) > 0 && args[0] == "daemon" {
		args = args[1:]
	}
	return daemon.Main(args)
}
