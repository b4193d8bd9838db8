package nstest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// NetStats are the IP statistics of the namespace at nsPath, as
// /proc/net/snmp, netstat and snmp6 show them there: "Ip.InHdrErrors",
// "IpExt.InCsumErrors", "Ip6InTruncatedPkts", ... What the stack drops
// before any hook (a wrong header checksum, a length past the frame) or
// holds (fragments waiting for the rest) is counted there.
func NetStats(t testing.TB, nsPath string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	err := Run(t, nsPath, func() error {
		for _, f := range []string{"snmp", "netstat", "snmp6"} {
			// thread-self: /proc/net is the namespace of the process's
			// first thread, not this one's.
			b, err := os.ReadFile("/proc/thread-self/net/" + f)
			if err != nil {
				return err
			}
			if f == "snmp6" {
				sc := bufio.NewScanner(bytes.NewReader(b))
				for sc.Scan() {
					if k, v, ok := strings.Cut(strings.Join(strings.Fields(sc.Text()), " "), " "); ok {
						out[k], _ = strconv.ParseUint(v, 10, 64)
					}
				}
				continue
			}
			lines := strings.Split(string(b), "\n")
			for i := 0; i+1 < len(lines); i += 2 {
				names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(names) != len(values) || len(names) == 0 {
					return fmt.Errorf("/proc/net/%s: lines %d and %d do not pair", f, i+1, i+2)
				}
				prefix := strings.TrimSuffix(names[0], ":")
				for j := 1; j < len(names); j++ {
					out[prefix+"."+names[j]], _ = strconv.ParseUint(values[j], 10, 64)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("IP statistics of %s: %v", nsPath, err)
	}
	return out
}
