package flannel

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"net/netip"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

const (
	// FlannelSubnetFile is where flanneld writes the node's lease.
	FlannelSubnetFile = "/run/flannel/subnet.env"
	// EnvFlannelSubnetFile overrides FlannelSubnetFile (a config's
	// subnetFile overrides both); tests point it at a temp file.
	EnvFlannelSubnetFile = "CNIBOX_FLANNEL_SUBNET_FILE"
	// maxSubnetFile bounds what is read of subnet.env.
	maxSubnetFile = 64 << 10
)

// flannelEnv is what flanneld wrote to subnet.env.
type flannelEnv struct {
	path     string
	networks []netip.Prefix // FLANNEL_NETWORK then FLANNEL_IPV6_NETWORK, masked
	subnet4  netip.Prefix   // FLANNEL_SUBNET, masked (the node's pod subnet)
	subnet6  netip.Prefix   // FLANNEL_IPV6_SUBNET, masked
	mtu      int            // FLANNEL_MTU
	ipMasq   bool           // FLANNEL_IPMASQ: flanneld masquerades itself
}

// errNoSubnetFile wraps fs.ErrNotExist: flanneld has not written the file yet.
type errNoSubnetFile struct{ path string }

func (e *errNoSubnetFile) Error() string {
	return fmt.Sprintf("subnet file %s does not exist yet: flanneld writes it once it has a lease for this node (or fix \"subnetFile\", or $%s)", e.path, EnvFlannelSubnetFile)
}

func (e *errNoSubnetFile) Unwrap() error { return fs.ErrNotExist }

// subnetEnvFile is flanneld's subnet.env.
var subnetEnvFile = delegate.File{What: "subnet file", IsNot: "flanneld's subnet.env", Max: maxSubnetFile, Missing: func(path string) error {
	return &errNoSubnetFile{path: path}
}}

// readFlannelEnv reads and checks subnet.env. A missing file returns an
// *errNoSubnetFile (no code: the caller picks 11 or 50); a file that is not
// KEY=VALUE lines with the keys flanneld writes is code 6, naming the file,
// the line's number and the key, never the line's text (subnetFile may name
// any file on the node); any other read error is code 5.
func readFlannelEnv(path string) (*flannelEnv, error) {
	data, err := subnetEnvFile.Read(path)
	if err != nil {
		return nil, err
	}
	return parseFlannelEnv(path, data)
}

func parseFlannelEnv(path string, data []byte) (*flannelEnv, error) {
	env := &flannelEnv{path: path}
	var haveMTU, haveMasq bool
	var nets4, nets6 []netip.Prefix
	bad := func(line int, format string, args ...any) error {
		return cniplug.Errorf(types.ErrDecodingFailure, "subnet file %s line %d: %s", path, line, fmt.Sprintf(format, args...))
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, bad(n, "not a KEY=VALUE line (its text is not repeated here)")
		}
		key, val = strings.TrimSpace(key), unquote(strings.TrimSpace(val))
		var err error
		switch key {
		case "FLANNEL_NETWORK":
			nets4, err = parsePrefixes(val, true)
		case "FLANNEL_IPV6_NETWORK":
			nets6, err = parsePrefixes(val, false)
		case "FLANNEL_SUBNET":
			env.subnet4, err = parseSubnet(val, true)
		case "FLANNEL_IPV6_SUBNET":
			env.subnet6, err = parseSubnet(val, false)
		case "FLANNEL_MTU":
			if env.mtu, err = strconv.Atoi(val); err != nil {
				err = fmt.Errorf("not an integer") // strconv's error quotes the value
			} else if env.mtu < 68 || env.mtu > 65535 {
				err = fmt.Errorf("out of range 68..65535")
			}
			haveMTU = err == nil
		case "FLANNEL_IPMASQ":
			if env.ipMasq, err = strconv.ParseBool(val); err != nil {
				err = fmt.Errorf("not true or false")
			}
			haveMasq = err == nil
		default:
			continue // other keys (FLANNEL_IPV6_...): not ours to judge
		}
		if err != nil {
			return nil, bad(n, "%s: %v", key, err)
		}
	}
	env.networks = append(nets4, nets6...)
	var missing []string
	if len(env.networks) == 0 {
		missing = append(missing, "FLANNEL_NETWORK or FLANNEL_IPV6_NETWORK")
	}
	if !env.subnet4.IsValid() && !env.subnet6.IsValid() {
		missing = append(missing, "FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET")
	}
	if !haveMTU {
		missing = append(missing, "FLANNEL_MTU")
	}
	if !haveMasq {
		missing = append(missing, "FLANNEL_IPMASQ")
	}
	if len(missing) > 0 {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "subnet file %s lacks %s: it is not a complete flanneld subnet.env (is flanneld writing it?)", path, strings.Join(missing, ", "))
	}
	return env, nil
}

// parsePrefixes parses a comma separated list of CIDRs of one family.
func parsePrefixes(val string, v4 bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(val, ",") {
		p, err := parseSubnet(strings.TrimSpace(s), v4)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// parseSubnet parses one CIDR of the given family and masks it (flanneld
// writes the node subnet with the gateway address, e.g. 10.244.0.1/24).
func parseSubnet(s string, v4 bool) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR (want e.g. 10.244.0.1/24)")
	}
	if p.Addr().Is4() != v4 {
		return netip.Prefix{}, fmt.Errorf("not an IPv%s CIDR", map[bool]string{true: "4", false: "6"}[v4])
	}
	return p.Masked(), nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
