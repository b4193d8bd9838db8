package ipamrole

import (
	"bufio"
	"bytes"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/conffile"
)

// MaxFile bounds the files a config names (rangeFromFile, resolvConf).
const MaxFile = 1 << 20

// ParseResolvConf reads the nameserver, domain, search and options lines of
// a resolv.conf file into the result's DNS, as the reference plugin does.
// field names the config field that gave path.
func ParseResolvConf(field, path string) (types.DNS, error) {
	var dns types.DNS
	b, err := conffile.Read(path, MaxFile)
	if err != nil {
		return dns, cniplug.ConfError(field, "cannot read %q: %v: fix the path or remove the field", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			dns.Nameservers = append(dns.Nameservers, f[1])
		case "domain":
			dns.Domain = f[1]
		case "search":
			dns.Search = append(dns.Search, f[1:]...)
		case "options":
			dns.Options = append(dns.Options, f[1:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return dns, cniplug.ConfError(field, "cannot read %q: %v", path, err)
	}
	return dns, nil
}
