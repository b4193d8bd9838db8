package cloudipam

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
)

// awsProvider asks the EC2 instance metadata service (IMDSv2): a session
// token first, then for each ENI of the node its addresses (the first is the
// ENI's primary), its subnet and its device number.
type awsProvider struct{ c *config }

// IMDS paths and headers.
const (
	imdsTokenPath = "/latest/api/token"
	imdsMACsPath  = "/latest/meta-data/network/interfaces/macs/"
	imdsTokenTTL  = "X-aws-ec2-metadata-token-ttl-seconds"
	imdsTokenHdr  = "X-aws-ec2-metadata-token"
	imdsMaxENIs   = 64
	imdsTokenSecs = "60"
)

func (p *awsProvider) describe() string { return "AWS IMDS at " + p.c.Endpoint }

func (p *awsProvider) query(ctx context.Context, want func(string) bool) ([]nicInfo, error) {
	what := p.describe()
	token, err := fetch(ctx, p.c, what, httpRequest{Method: "PUT", URL: p.c.Endpoint + imdsTokenPath, Header: [][2]string{{imdsTokenTTL, imdsTokenSecs}}})
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(string(token))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return nil, malformed(what, "the session token from %s is empty or spans lines", imdsTokenPath)
	}
	get := func(path string) (string, error) {
		b, err := fetch(ctx, p.c, what, httpRequest{Method: "GET", URL: p.c.Endpoint + path, Header: [][2]string{{imdsTokenHdr, tok}}})
		return string(b), err
	}
	list, err := get(imdsMACsPath)
	if err != nil {
		return nil, err
	}
	var nics []nicInfo
	seen := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSuffix(strings.TrimSpace(line), "/")
		if line == "" {
			continue
		}
		mac, ok := normMAC(line)
		if !ok || strings.Count(line, ":") != 5 {
			return nil, malformed(what, "%s lists %q, which is not a MAC address (want e.g. 0e:1f:2a:3b:4c:5d/)", imdsMACsPath, clip(line))
		}
		if seen[mac] {
			return nil, malformed(what, "%s lists MAC %s twice", imdsMACsPath, line)
		}
		seen[mac] = true
		if len(seen) > imdsMaxENIs {
			return nil, malformed(what, "%s lists more than %d ENIs", imdsMACsPath, imdsMaxENIs)
		}
		if want != nil && !want(mac) {
			continue
		}
		n, err := p.eni(get, line, mac)
		if err != nil {
			return nil, err
		}
		nics = append(nics, n)
	}
	return tidy(what, nics)
}

// eni reads one ENI's addresses, subnet and device number.
func (p *awsProvider) eni(get func(string) (string, error), macPath, mac string) (nicInfo, error) {
	what := p.describe()
	base := imdsMACsPath + macPath + "/"
	n := nicInfo{MAC: mac}
	ips, err := get(base + "local-ipv4s")
	if err != nil {
		return n, err
	}
	cidr, err := get(base + "subnet-ipv4-cidr-block")
	if err != nil {
		return n, err
	}
	dev, err := get(base + "device-number")
	if err != nil {
		return n, err
	}
	if n.Subnet, err = netip.ParsePrefix(strings.TrimSpace(cidr)); err != nil || !n.Subnet.Addr().Is4() || n.Subnet.Masked() != n.Subnet {
		return n, malformed(what, "%ssubnet-ipv4-cidr-block is %q, not an IPv4 subnet in CIDR notation", base, clip(cidr))
	}
	if n.Device, err = strconv.Atoi(strings.TrimSpace(dev)); err != nil || n.Device < 0 || n.Device > 1024 {
		return n, malformed(what, "%sdevice-number is %q, not a small number", base, clip(dev))
	}
	first := true
	for _, line := range strings.Split(ips, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		a, err := netip.ParseAddr(line)
		if err != nil || !a.Is4() {
			return n, malformed(what, "%slocal-ipv4s lists %q, which is not an IPv4 address", base, clip(line))
		}
		if first {
			n.Primary = append(n.Primary, a) // the ENI's own address
			first = false
			continue
		}
		n.Secondary = append(n.Secondary, a)
	}
	if first {
		return n, malformed(what, "%slocal-ipv4s lists no address", base)
	}
	return n, nil
}
