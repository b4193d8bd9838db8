package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnibox/cnibox/internal/atomicfile"
)

// SubnetEnv is what the agent writes to the subnet file (flanneld's
// subnet.env), which the flannel and vxlan roles read.
type SubnetEnv struct {
	Network  netip.Prefix // FLANNEL_NETWORK
	Subnet   netip.Prefix // the node's subnet; written with its first address (10.244.1.1/24)
	Network6 netip.Prefix // FLANNEL_IPV6_NETWORK
	Subnet6  netip.Prefix // FLANNEL_IPV6_SUBNET
	MTU      int
	IPMasq   bool
}

// Bytes renders the file as flanneld does.
func (e SubnetEnv) Bytes() []byte {
	var b bytes.Buffer
	if e.Subnet.IsValid() {
		fmt.Fprintf(&b, "FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s\n", e.Network, firstHost(e.Subnet))
	}
	if e.Subnet6.IsValid() {
		fmt.Fprintf(&b, "FLANNEL_IPV6_NETWORK=%s\nFLANNEL_IPV6_SUBNET=%s\n", e.Network6, firstHost(e.Subnet6))
	}
	fmt.Fprintf(&b, "FLANNEL_MTU=%d\nFLANNEL_IPMASQ=%t\n", e.MTU, e.IPMasq)
	return b.Bytes()
}

// firstHost is the subnet written with its first address: 10.244.1.0/24 ->
// 10.244.1.1/24.
func firstHost(p netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(p.Masked().Addr().Next(), p.Bits())
}

// WriteSubnetFile writes e to path atomically: a reader sees the old file or
// the new one, never a part. The directory is created if needed.
func WriteSubnetFile(path string, e SubnetEnv) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write subnet file %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, e.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write subnet file %s: %w", path, err)
	}
	return nil
}

// readPreviousSubnets returns the node subnets recorded in an earlier subnet
// file (zero prefixes when the file or a key is missing).
func readPreviousSubnets(path string) (sn4, sn6 netip.Prefix, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return sn4, sn6, nil
	}
	if err != nil {
		return sn4, sn6, fmt.Errorf("read subnet file %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		p, perr := netip.ParsePrefix(strings.Trim(strings.TrimSpace(v), `"'`))
		if perr != nil {
			continue
		}
		switch strings.TrimSpace(k) {
		case "FLANNEL_SUBNET":
			if p.Addr().Is4() {
				sn4 = p.Masked()
			}
		case "FLANNEL_IPV6_SUBNET":
			if p.Addr().Is6() {
				sn6 = p.Masked()
			}
		}
	}
	return sn4, sn6, nil
}
