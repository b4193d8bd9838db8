package bandwidth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// bwIfbPrefix starts the name of every ifb device the bandwidth role
// creates; GC only ever deletes ifbs with this prefix.
const bwIfbPrefix = "cbw"

// bwEntryJSON is a bandwidth entry as written: in the config's top level or
// in runtimeConfig.bandwidth (the "bandwidth" capability). Numbers are kept
// as written so that a bad one is reported naming its field.
type bwEntryJSON struct {
	IngressRate  json.Number `json:"ingressRate"`
	IngressBurst json.Number `json:"ingressBurst"`
	EgressRate   json.Number `json:"egressRate"`
	EgressBurst  json.Number `json:"egressBurst"`
}

type bwConfJSON struct {
	bwEntryJSON
	// DataDir is decoded so that ADD refuses one that is not a string;
	// the store is found through chain.Dir.
	DataDir         string   `json:"dataDir"`
	UnshapedSubnets []string `json:"unshapedSubnets"`
	ShapedSubnets   []string `json:"shapedSubnets"`
	RuntimeConfig   struct {
		Bandwidth *bwEntryJSON `json:"bandwidth"`
	} `json:"runtimeConfig"`
}

// bwLimits are the validated limits: rates in bits per second, bursts in
// bits; a zero rate means that direction is not shaped.
type bwLimits struct {
	IngressRate, IngressBurst uint64
	EgressRate, EgressBurst   uint64
}

func (l bwLimits) isZero() bool { return l == bwLimits{} }

// parseBandwidthConf decodes and validates the bandwidth fields. The
// bandwidth capability (runtimeConfig.bandwidth), when the runtime passes
// it, replaces the config's own limits.
func parseBandwidthConf(a *cniplug.Args) (*bwLimits, error) {
	var c bwConfJSON
	if err := cniplug.DecodeConf("bandwidth config", a.StdinData, &c); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    []string
	}{{"unshapedSubnets", c.UnshapedSubnets}, {"shapedSubnets", c.ShapedSubnets}} {
		if len(f.v) > 0 {
			return nil, cniplug.Errorf(types.ErrUnsupportedField, "config field %q is not supported by cnibox's bandwidth: remove it (every packet of the pod is shaped)", f.name)
		}
	}
	entry, prefix := c.bwEntryJSON, ""
	if c.RuntimeConfig.Bandwidth != nil {
		entry, prefix = *c.RuntimeConfig.Bandwidth, "runtimeConfig.bandwidth."
	}
	var l bwLimits
	for _, f := range []struct {
		name string
		raw  json.Number
		dst  *uint64
	}{
		{"ingressRate", entry.IngressRate, &l.IngressRate},
		{"ingressBurst", entry.IngressBurst, &l.IngressBurst},
		{"egressRate", entry.EgressRate, &l.EgressRate},
		{"egressBurst", entry.EgressBurst, &l.EgressBurst},
	} {
		v, err := bwNumber(prefix+f.name, f.raw)
		if err != nil {
			return nil, err
		}
		*f.dst = v
	}
	if err := bwValidate(prefix+"ingress", l.IngressRate, l.IngressBurst); err != nil {
		return nil, err
	}
	if err := bwValidate(prefix+"egress", l.EgressRate, l.EgressBurst); err != nil {
		return nil, err
	}
	return &l, nil
}

// bwNumber parses a rate or burst: a whole number >= 0 that fits 64 bits
// ("" is 0).
func bwNumber(field string, n json.Number) (uint64, error) {
	s := n.String()
	if s == "" {
		return 0, nil
	}
	if v, err := strconv.ParseUint(s, 10, 64); err == nil {
		return v, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f >= math.MaxUint64 {
		return 0, cniplug.ConfError(field, "%s is not a whole number from 0 to %d", s, uint64(math.MaxUint64))
	}
	return uint64(f), nil
}

// bwValidate checks one direction's rate and burst as the reference plugin
// does (both or neither, a burst under 4 GiB), and that each is at least a
// byte, since the kernel counts bytes.
func bwValidate(dir string, rate, burst uint64) error {
	switch {
	case rate == 0 && burst == 0:
		return nil
	case burst == 0:
		return cniplug.ConfError(dir+"Burst", "missing while %sRate is %d: set both (burst in bits, e.g. the rate's bits per 100 ms) or neither", dir, rate)
	case rate == 0:
		return cniplug.ConfError(dir+"Rate", "missing while %sBurst is %d: set both (rate in bits per second) or neither", dir, burst)
	case rate < 8:
		return cniplug.ConfError(dir+"Rate", "%d bits per second is less than a byte per second: use at least 8", rate)
	case burst < 8:
		return cniplug.ConfError(dir+"Burst", "%d bits is less than a byte: use at least 8", burst)
	case burst/8 >= math.MaxUint32:
		return cniplug.ConfError(dir+"Burst", "%d bits is 4 GiB or more: use less than %d", burst, uint64(math.MaxUint32)*8)
	}
	return nil
}

// bwIfbName is the deterministic name of an attachment's ifb device, so that
// DEL and GC need no lookup: "cbw" + 12 hex digits of sha256(cid, ifname).
func bwIfbName(containerID, ifname string) string {
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return bwIfbPrefix + hex.EncodeToString(sum[:6])
}

// bwIsOurIfb reports whether a link name has the shape of our ifb names.
func bwIsOurIfb(name string) bool {
	if len(name) != len(bwIfbPrefix)+12 || !strings.HasPrefix(name, bwIfbPrefix) {
		return false
	}
	_, err := hex.DecodeString(name[len(bwIfbPrefix):])
	return err == nil
}
