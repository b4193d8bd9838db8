package cloudipam

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// checkNICs fails the test unless every parsed NIC has a valid subnet that
// holds its addresses.
func checkNICs(t *testing.T, nics []nicInfo) {
	t.Helper()
	for _, n := range nics {
		if !n.Subnet.IsValid() {
			t.Fatalf("NIC %+v has no valid subnet", n)
		}
	}
}

// FuzzAzureXML: whatever the host agent (or something in its place) answers,
// the parser returns NICs or an error; it never panics or hangs.
func FuzzAzureXML(f *testing.F) {
	if b, err := os.ReadFile("testdata/nmagent-getinterfaceinfov1.xml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><Interfaces>&a;</Interfaces>`))
	f.Add([]byte(`<Interfaces><Interface MacAddress="000D3A6E1B7C" IsPrimary="true"><IPSubnet Prefix="10.240.0.0/16"><IPAddress Address="10.240.0.4" IsPrimary="true"/><IPAddress Address="10.240.0.5" IsPrimary="false"/></IPSubnet></Interface></Interfaces>`))
	f.Add([]byte(strings.Repeat("<a>", 100) + strings.Repeat("</a>", 100)))
	f.Fuzz(func(t *testing.T, body []byte) {
		nics, err := parseAzureXML(body)
		if err == nil {
			checkNICs(t, nics)
		}
	})
}

// FuzzPoolFile: a pool file of any content parses or is refused.
func FuzzPoolFile(f *testing.F) {
	f.Add([]byte(`{"interfaces":[{"mac":"00:0d:3a:6e:1b:7c","subnet":"10.240.0.0/16","primary":"10.240.0.4","addresses":["10.240.0.5","10.240.0.6"]}]}`))
	f.Add([]byte(`{"interfaces":[{"subnet":"fd00::/64","addresses":["fd00::5"]}]}`))
	f.Add([]byte(`{"interfaces":[{"subnet":"10.0.0.0/8","addresses":["192.0.2.1"]}],"extra":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		nics, err := parsePoolFile(body)
		if err == nil {
			checkNICs(t, nics)
		}
	})
}

// FuzzAWSENI: the IMDS answers for one ENI (local-ipv4s, subnet, device
// number), whatever they hold, give an ENI whose subnet is valid or an error.
func FuzzAWSENI(f *testing.F) {
	f.Add("10.0.1.10\n10.0.1.11\n10.0.1.12", "10.0.1.0/24", "0")
	f.Add("", "10.0.1.0/24", "1")
	f.Add("fd00::1", "10.0.1.5/24", "-1")
	f.Add("10.0.1.10", "10.0.1.0/24", "99999999999999999999")
	f.Fuzz(func(t *testing.T, ips, cidr, dev string) {
		p := &awsProvider{c: &config{Endpoint: "http://169.254.169.254"}}
		answers := map[string]string{"local-ipv4s": ips, "subnet-ipv4-cidr-block": cidr, "device-number": dev}
		get := func(path string) (string, error) {
			for k, v := range answers {
				if strings.HasSuffix(path, "/"+k) {
					return v, nil
				}
			}
			return "", errors.New("not found")
		}
		n, err := p.eni(get, "0a:1b:2c:3d:4e:5f", "0a1b2c3d4e5f")
		if err == nil {
			checkNICs(t, []nicInfo{n})
			if len(n.Primary) != 1 {
				t.Fatalf("ENI with %d primary addresses", len(n.Primary))
			}
		}
	})
}

// FuzzHTTPResponse: whatever a host agent or IMDS answers (status lines,
// headers, chunked, sized or unframed bodies), the client never panics and
// never returns more than the body limit.
func FuzzHTTPResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n7fffffffffffffff\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\n\r\nno",
		"HTTP/1.0 200 OK\r\n\r\nuntil the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	const maxBody = 64
	f.Fuzz(func(t *testing.T, answer []byte) {
		resp, err := readResponse(bytes.NewReader(answer), maxBody, "GET")
		if err == nil && len(resp.Body) > maxBody {
			t.Fatalf("body of %d bytes, past the limit of %d", len(resp.Body), maxBody)
		}
	})
}
