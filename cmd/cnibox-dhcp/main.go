// Command cnibox-dhcp is the dhcp daemon (package roles/dhcp/daemon) in a
// binary of its own, so that the DHCP library's package inits never run in
// the short-lived plugin processes of cnibox. `dhcp daemon` (cnibox through
// its dhcp symlink) execs it; run by hand it takes the same flags:
// `cnibox-dhcp daemon -socketpath ...` (the "daemon" word is optional).
package main

import (
	"os"

	"github.com/cnibox/cnibox/roles/dhcp/daemon"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "daemon" {
		args = args[1:]
	}
	os.Exit(daemon.Main(args))
}
