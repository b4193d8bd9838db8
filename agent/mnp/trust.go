package mnp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/store"
)

// The addresses of this node's pods on their secondary networks come from
// what the multi role's ADD recorded in the node's store (its delegate
// records: each delegate's interface and result), not from the pod's
// network-status annotation: the annotation is an API object, and one
// that anyone who may patch pods could write (issue 60, finding 7; the
// manifests' admission policy cnibox-network-status now keeps it to the
// agents, which covers the other nodes' pods). The annotation still says
// which network an interface is on; the addresses are the ADD's.

// multiPlugin is the multi role's name in its delegate records.
const multiPlugin = "multi"

// recordedIPs returns, by pod ("namespace/name") and interface, the
// addresses the multi role's ADDs recorded in the store of dataDir. No
// store yet: none.
func recordedIPs(dataDir string) (map[string]map[string][]netip.Addr, error) {
	st, err := store.OpenWith(store.Dir(dataDir), store.Options{NoCreate: true})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the store's delegate records: %w", err)
	}
	recs, err := delegaterec.Records.In(st).List("")
	st.Close()
	if err != nil {
		return nil, fmt.Errorf("the store's delegate records: %w", err)
	}
	out := map[string]map[string][]netip.Addr{}
	for _, r := range recs {
		if r.Plugin != multiPlugin || r.Pod == "" {
			continue
		}
		for _, d := range r.Delegates {
			ips := resultIPs(d.Result)
			if len(ips) == 0 {
				continue
			}
			if out[r.Pod] == nil {
				out[r.Pod] = map[string][]netip.Addr{}
			}
			out[r.Pod][d.IfName] = append(out[r.Pod][d.IfName], ips...)
		}
	}
	return out, nil
}

// resultIPs are the addresses of a CNI result (any version's "ips"; 0.2.0's
// "ip4"/"ip6" are not read: multi records its results as 1.x).
func resultIPs(raw json.RawMessage) []netip.Addr {
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &res) != nil {
		return nil
	}
	var out []netip.Addr
	for _, ip := range res.IPs {
		s, _, _ := strings.Cut(ip.Address, "/")
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// trustLocal returns in with the attachments of node's pods holding the
// addresses recorded (rec) instead of their annotation's: an interface
// with no record has none. The pods are copies; in's are not changed.
func trustLocal(in Input, node string, rec map[string]map[string][]netip.Addr) Input {
	out := in
	out.Pods = make([]*Pod, len(in.Pods))
	for i, p := range in.Pods {
		out.Pods[i] = p
		if p.Node != node || len(p.Attachments) == 0 {
			continue
		}
		c := *p
		c.Attachments = make([]Attachment, len(p.Attachments))
		for j, a := range p.Attachments {
			a.IPs = rec[p.Key()][a.Iface]
			c.Attachments[j] = a
		}
		out.Pods[i] = &c
	}
	return out
}
