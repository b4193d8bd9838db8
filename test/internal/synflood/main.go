// Command synflood opens TCP connections to ADDR:PORT at a steady rate and
// abandons each as soon as its SYN is out (test/internal/flood): a flood
// of new connections from one process, as a misbehaving pod sends them. It
// prints how many SYNs it sent and over how long.
//
// The real-node flow log test (test/node, TestKubeNodeFlowLog) copies it
// into a pod, statically linked:
//
//	CGO_ENABLED=0 go build -o synflood ./test/internal/synflood
//	synflood -rate 10000 -for 30s 10.244.1.5:81
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cnibox/cnibox/test/internal/flood"
)

func main() {
	rate := flag.Int("rate", 10000, "SYNs a second")
	dur := flag.Duration("for", 30*time.Second, "how long")
	flag.Parse()
	if flag.NArg() != 1 || *rate < 1 || *dur <= 0 {
		fmt.Fprintln(os.Stderr, "usage: synflood [-rate N] [-for DURATION] ADDR:PORT")
		os.Exit(64)
	}
	ap, err := netip.ParseAddrPort(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "synflood: %v\n", err)
		os.Exit(64)
	}
	sent, took, err := flood.SYNs(ap, *rate, *dur)
	fmt.Printf("sent %d SYNs in %.2f s\n", sent, took.Seconds())
	if err != nil {
		fmt.Fprintf(os.Stderr, "synflood: %v\n", err)
		os.Exit(1)
	}
}
