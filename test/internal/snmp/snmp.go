// Package snmp reads a counter of a network namespace's /proc/net/snmp
// (each protocol a header line of names and a line of values).
package snmp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Value is the counter name of protocol proto ("Ip", "Tcp", ...) in text,
// the contents of a /proc/net/snmp.
func Value(text, proto, name string) (int64, error) {
	var head []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		if i := slices.Index(head, name); i > 0 && i < len(f) {
			return strconv.ParseInt(f[i], 10, 64)
		}
		break
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", proto, name)
}
