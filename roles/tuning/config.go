package tuning

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

const (
	// TuningAllowlist is the file of regular expressions (one per line) that
	// every sysctl name in a tuning config must match, as in the reference
	// plugin. When the file does not exist, every net.* sysctl is allowed.
	TuningAllowlist = "/etc/cni/tuning/allowlist.conf"
	// TuningAllowlistEnv names another allowlist file (for tests and
	// packagers); it is read from the plugin's environment, never from the
	// network config, so a config cannot widen what the node allows.
	TuningAllowlistEnv = "CNIBOX_TUNING_ALLOWLIST"
	// tuningIfnameToken in a sysctl name stands for CNI_IFNAME.
	tuningIfnameToken = "IFNAME"
)

// tuningConf is the tuning config as written, field names as in the
// reference plugin.
type tuningConf struct {
	tuningFields
	// DataDir is decoded so that ADD refuses one that is not a string;
	// the store is found through chain.Dir.
	DataDir string `json:"dataDir"`

	RuntimeConfig struct {
		MAC string `json:"mac"`
	} `json:"runtimeConfig"`
	Args struct {
		CNI tuningFields `json:"cni"`
	} `json:"args"`
}

// tuningFields are what a config asks of the pod, at its top level or in
// args.cni, which overrides it; a field left out (nil) asks nothing.
type tuningFields struct {
	SysCtl   tuningSysctlMap `json:"sysctl"`
	MAC      *string         `json:"mac"`
	MTU      *int            `json:"mtu"`
	Promisc  *bool           `json:"promisc"`
	Allmulti *bool           `json:"allmulti"`
	TxQLen   *int            `json:"txQLen"`
}

// tuningSettings is what one call asks of CNI_IFNAME and the pod namespace,
// validated.
type tuningSettings struct {
	sysctls  []tuningSysctl // sorted by name
	mac      net.HardwareAddr
	mtu      int // 0 = leave alone
	promisc  *bool
	allmulti *bool
	txQLen   *int
}

// tuningSysctl is one sysctl to set.
type tuningSysctl struct {
	name  string // as in the config, e.g. "net.ipv4.conf.IFNAME.arp_filter"
	key   string // path under /proc/sys with CNI_IFNAME put in, e.g. "net/ipv4/conf/eth0/arp_filter"
	value string
}

// linkChanges reports whether any interface attribute is to be changed.
func (s *tuningSettings) linkChanges() bool {
	return s.mac != nil || s.mtu != 0 || s.promisc != nil || s.allmulti != nil || s.txQLen != nil
}

// tuningSysctlMap is the "sysctl" object. Unlike a plain map it refuses a
// name given twice (the reference plugin does too), since which one wins
// would be an accident of the decoder.
type tuningSysctlMap map[string]string

// errTuningDupSysctl is a sysctl name given twice.
type errTuningDupSysctl struct{ name string }

func (e *errTuningDupSysctl) Error() string {
	return fmt.Sprintf("sysctl %q is given twice", e.name)
}

func (m *tuningSysctlMap) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*m = nil
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf(`"sysctl" must be an object of name: "value" pairs`)
	}
	out := tuningSysctlMap{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		k, _ := kt.(string)
		var v string
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("sysctl %q: the value must be a string (quote numbers, e.g. \"1\"): %w", k, err)
		}
		if _, dup := out[k]; dup {
			return &errTuningDupSysctl{name: k}
		}
		out[k] = v
	}
	*m = out
	return nil
}

// parseTuningConf decodes and validates the tuning fields of a call: the
// config, args.cni, runtimeConfig.mac and CNI_ARGS MAC, merged as the
// reference plugin does (args.cni over runtimeConfig over CNI_ARGS over the
// config), and the sysctl names against the node's allowlist.
func parseTuningConf(a *cniplug.Args) (*tuningSettings, error) {
	var c tuningConf
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		var dup *errTuningDupSysctl
		if errors.As(err, &dup) {
			return nil, cniplug.ConfError("sysctl", "%s: give each name once", dup)
		}
		return nil, cniplug.DecodeConf("tuning config", a.StdinData, &c)
	}
	ac := c.Args.CNI
	s := &tuningSettings{promisc: cmp.Or(ac.Promisc, c.Promisc), allmulti: cmp.Or(ac.Allmulti, c.Allmulti), txQLen: cmp.Or(ac.TxQLen, c.TxQLen)}
	if mtu := cmp.Or(ac.MTU, c.MTU); mtu != nil {
		s.mtu = *mtu
	}

	macSource, mac := `config field "mac"`, ""
	if c.MAC != nil {
		mac = *c.MAC
	}
	for _, src := range []struct{ what, val string }{
		{"CNI_ARGS MAC", string(a.CNIArgs.MAC)},
		{`config field "runtimeConfig.mac"`, c.RuntimeConfig.MAC},
	} {
		if src.val != "" {
			macSource, mac = src.what, src.val
		}
	}
	if ac.MAC != nil {
		macSource, mac = `config field "args.cni.mac"`, *ac.MAC
	}
	if mac != "" {
		hw, err := net.ParseMAC(mac)
		if err != nil || len(hw) != 6 || hw[0]&1 != 0 || bytes.Equal(hw, make([]byte, 6)) {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s: %q is not a unicast Ethernet MAC address (want e.g. c2:b0:57:49:47:f1)", macSource, mac)
		}
		s.mac = hw
	}
	if s.mtu != 0 && (s.mtu < 68 || s.mtu > 65535) {
		return nil, cniplug.ConfError("mtu", "%d is out of range: use 68..65535, or leave it out to keep the interface's MTU", s.mtu)
	}
	if s.txQLen != nil && (*s.txQLen < 0 || *s.txQLen > math.MaxInt32) {
		return nil, cniplug.ConfError("txQLen", "%d is out of range: use 0..%d", *s.txQLen, math.MaxInt32)
	}

	names := map[string]string{}
	for k, v := range c.SysCtl {
		names[k] = v
	}
	for k, v := range ac.SysCtl {
		names[k] = v // args.cni.sysctl adds to and overrides the config's
	}
	for name, value := range names {
		key, err := tuningSysctlKey(name, a.IfName)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(value, "\x00\n") {
			return nil, cniplug.ConfError("sysctl", "%s: value %q contains a newline or NUL byte: give a single line", name, value)
		}
		s.sysctls = append(s.sysctls, tuningSysctl{name: name, key: key, value: value})
	}
	sort.Slice(s.sysctls, func(i, j int) bool { return s.sysctls[i].name < s.sysctls[j].name })
	if len(s.sysctls) > 0 {
		if err := tuningCheckAllowlist(a, s.sysctls); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// tuningSysctlKey validates a sysctl name from the config and returns its
// path under /proc/sys, with the part IFNAME replaced by ifname (which may
// contain dots, as in eth0.100). Only names under net. are accepted, and no
// name can leave /proc/sys/net.
func tuningSysctlKey(name, ifname string) (string, error) {
	bad := func(why string) error {
		return cniplug.ConfError("sysctl", "%q %s: write a dotted name under net., e.g. net.core.somaxconn or net.ipv4.conf.IFNAME.arp_filter (IFNAME stands for CNI_IFNAME)", name, why)
	}
	switch {
	case name == "":
		return "", bad("is empty")
	case strings.ContainsAny(name, "/\\"):
		return "", bad("contains a slash")
	case strings.Contains(name, ".."):
		return "", bad("contains \"..\"")
	case strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return "", bad("contains a space or control character")
	}
	parts := strings.Split(name, ".")
	if parts[0] != "net" {
		return "", bad("is not a network sysctl (it must start with net.)")
	}
	if len(parts) < 3 {
		return "", bad("names a directory, not a sysctl")
	}
	for i, p := range parts {
		switch p {
		case "":
			return "", bad("has an empty part")
		case tuningIfnameToken:
			parts[i] = ifname
		}
	}
	return strings.Join(parts, "/"), nil
}

// tuningCheckAllowlist checks the sysctl names (as written in the config,
// IFNAME not replaced) against the node's allowlist, when it exists: each
// must match one of its regular expressions (unanchored, as in the
// reference plugin; anchor them with ^...$). Empty lines and lines starting
// with # are skipped.
func tuningCheckAllowlist(a *cniplug.Args, sysctls []tuningSysctl) error {
	path := a.Setting("", TuningAllowlistEnv, TuningAllowlist)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "read the sysctl allowlist %s: %w", path, err)
	}
	var allow []*regexp.Regexp
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		re, err := regexp.Compile(line)
		if err != nil {
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "sysctl allowlist %s line %d is not a regular expression (%s; its text is not repeated here): fix the file", path, n, reCode(err))
		}
		allow = append(allow, re)
	}
	for _, s := range sysctls {
		ok := false
		for _, re := range allow {
			if re.MatchString(s.name) {
				ok = true
				break
			}
		}
		if !ok {
			return cniplug.ConfError("sysctl", "%q is not allowed on this node: it matches no line of %s; remove it from the config or ask the node's administrator to allow it", s.name, path)
		}
	}
	return nil
}

// reCode is what is wrong with a regular expression, without the
// expression (a regexp error quotes it, and the file's lines stay out of
// messages).
func reCode(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return string(se.Code)
	}
	return "it does not compile"
}
