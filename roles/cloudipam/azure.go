package cloudipam

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// azureProvider asks the Azure host agent (NMAgent through the WireServer)
// for the NICs of the VM:
//
//	<Interfaces><Interface MacAddress="000D3A51C490" IsPrimary="true">
//	  <IPSubnet Prefix="10.240.0.0/16">
//	    <IPAddress Address="10.240.0.35" IsPrimary="true"/>
//	    <IPAddress Address="10.240.0.36" IsPrimary="false"/> ...
type azureProvider struct{ c *config }

func (p *azureProvider) describe() string { return "the Azure host agent at " + p.c.Endpoint }

func (p *azureProvider) query(ctx context.Context, _ func(string) bool) ([]nicInfo, error) {
	body, err := fetch(ctx, p.c, p.describe(), httpRequest{Method: "GET", URL: p.c.Endpoint})
	if err != nil {
		return nil, err
	}
	nics, err := parseAzureXML(body)
	if err != nil {
		return nil, malformed(p.describe(), "%v", err)
	}
	return tidy(p.describe(), nics)
}

// Limits of the XML that parseAzureXML accepts. The real answer has depth 4
// and a few hundred elements; the body is capped at MaxAnswer before.
const (
	xmlMaxDepth    = 8
	xmlMaxElements = 1 << 16
	xmlMaxAttrs    = 16
)

// parseAzureXML reads the host agent's getinterfaceinfov1 answer. It walks
// the tokens itself (no reflection into structs), so it can refuse what a
// well-behaved agent never sends: a DTD or other directive (no entity can be
// declared, and encoding/xml never expands any but the predefined ones),
// nesting deeper than xmlMaxDepth, more than xmlMaxElements elements, an
// attribute given twice, a character set other than UTF-8. Unknown elements
// and attributes are skipped, so later versions of the answer still parse.
func parseAzureXML(body []byte) ([]nicInfo, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("the answer is empty")
	}
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	d.CharsetReader = func(cs string, _ io.Reader) (io.Reader, error) {
		return nil, fmt.Errorf("character set %q is not supported (want UTF-8)", cs)
	}
	var (
		stack    []string // local names of the open elements
		elements int
		nics     []nicInfo
		cur      *nicInfo // the open <Interface>
		subnet   *nicInfo // the open <IPSubnet> (a copy of cur with the subnet)
		rootSeen bool
	)
	path := func() string { return strings.Join(stack, "/") }
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				return nil, fmt.Errorf("not well-formed XML (line %d): %s", se.Line, se.Msg)
			}
			return nil, fmt.Errorf("not well-formed XML: %v", err)
		}
		switch t := tok.(type) {
		case xml.Directive:
			return nil, errors.New("it holds a DTD or other <!...> directive, which cnibox does not accept")
		case xml.StartElement:
			elements++
			if elements > xmlMaxElements {
				return nil, fmt.Errorf("more than %d elements", xmlMaxElements)
			}
			if len(stack) >= xmlMaxDepth {
				return nil, fmt.Errorf("elements nested deeper than %d (at %s)", xmlMaxDepth, path())
			}
			attrs, err := attrMap(t)
			if err != nil {
				return nil, fmt.Errorf("<%s> at %s: %v", t.Name.Local, path(), err)
			}
			name := t.Name.Local
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			stack = append(stack, name)
			switch {
			case len(stack) == 1:
				if name != "Interfaces" {
					return nil, fmt.Errorf("the root element is <%s>, not <Interfaces>", name)
				}
				if rootSeen {
					return nil, errors.New("more than one root element")
				}
				rootSeen = true
			case name == "Interface" && parent == "Interfaces":
				mac, ok := normMAC(attrs["MacAddress"])
				if !ok {
					return nil, fmt.Errorf("<Interface> %d has MacAddress %q, which is not a MAC address (want 12 hex digits, e.g. 000D3A51C490)", len(nics)+1, clip(attrs["MacAddress"]))
				}
				for _, n := range nics {
					if n.MAC == mac {
						return nil, fmt.Errorf("<Interface MacAddress=%q> is listed twice", attrs["MacAddress"])
					}
				}
				cur = &nicInfo{MAC: mac}
			case name == "IPSubnet" && parent == "Interface" && cur != nil:
				p, err := netip.ParsePrefix(strings.TrimSpace(attrs["Prefix"]))
				if err != nil || p.Masked() != p {
					return nil, fmt.Errorf("<IPSubnet> of NIC %s has Prefix %q, which is not a subnet in CIDR notation", macString(cur.MAC), clip(attrs["Prefix"]))
				}
				subnet = &nicInfo{MAC: cur.MAC, Subnet: p}
			case name == "IPAddress" && parent == "IPSubnet" && subnet != nil:
				a, err := netip.ParseAddr(strings.TrimSpace(attrs["Address"]))
				if err != nil || a.Zone() != "" {
					return nil, fmt.Errorf("<IPAddress> in %s of NIC %s has Address %q, which is not an IP address", subnet.Subnet, macString(subnet.MAC), clip(attrs["Address"]))
				}
				primary, err := parseBool(attrs["IsPrimary"])
				if err != nil {
					return nil, fmt.Errorf("<IPAddress Address=%q> has IsPrimary %q: %v", attrs["Address"], clip(attrs["IsPrimary"]), err)
				}
				if primary {
					subnet.Primary = append(subnet.Primary, a.Unmap())
				} else {
					subnet.Secondary = append(subnet.Secondary, a.Unmap())
				}
			}
		case xml.EndElement:
			name := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			switch {
			case name == "IPSubnet" && subnet != nil && len(stack) == 2:
				nics = append(nics, *subnet)
				subnet = nil
			case name == "Interface" && cur != nil && len(stack) == 1:
				if !hasMAC(nics, cur.MAC) {
					// A NIC without a subnet still counts (for the duplicate check).
					nics = append(nics, nicInfo{MAC: cur.MAC})
				}
				cur = nil
			}
		}
	}
	if !rootSeen {
		return nil, errors.New("no <Interfaces> element")
	}
	// Drop the subnet-less placeholders.
	out := nics[:0]
	for _, n := range nics {
		if n.Subnet.IsValid() {
			out = append(out, n)
		}
	}
	return out, nil
}

func hasMAC(nics []nicInfo, mac string) bool {
	for _, n := range nics {
		if n.MAC == mac {
			return true
		}
	}
	return false
}

// attrMap returns an element's attributes by local name; a name given twice
// is an error.
func attrMap(t xml.StartElement) (map[string]string, error) {
	if len(t.Attr) > xmlMaxAttrs {
		return nil, fmt.Errorf("more than %d attributes", xmlMaxAttrs)
	}
	m := make(map[string]string, len(t.Attr))
	for _, a := range t.Attr {
		if _, dup := m[a.Name.Local]; dup {
			return nil, fmt.Errorf("attribute %s is given twice", a.Name.Local)
		}
		m[a.Name.Local] = a.Value
	}
	return m, nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1":
		return true, nil
	case "false", "0", "":
		return false, nil
	}
	return false, errors.New("want true or false")
}
