package podapi

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// The trust model of NetworkAttachmentDefinitions (docs/security.md).
// Multus' is "whoever may create a NAD is root on every node": a NAD's
// config runs as root with whatever fields it holds. cnibox's pod API
// serves a NAD of a namespace the node does not trust only if its config
// stays within an allowlist (nadfields.go): the roles whose every object
// lives in the pod's own network namespace, with the fields that shape
// the pod's own attachment. A field that names a host path, a socket, an
// endpoint, a device or a node-wide object, a role that makes or joins an
// object in the node's network namespace, a plugin that is not a cnibox
// role, and any field the allowlist does not know, are refused at any
// depth (plugins, ipam, delegate, any nested object), keys compared as
// encoding/json compares them. A namespace the operator trusts
// (--nad-trusted-namespaces) gets Multus' model.

// NADTrust is the set of namespaces whose NADs may use anything.
type NADTrust struct {
	all        bool
	namespaces []string
}

// DefaultNADTrust is --nad-trusted-namespaces' default: kube-system, Multus'
// multusNamespace, where the NADs of clusterNetwork and defaultNetworks
// live; whoever writes there can already run privileged pods.
const DefaultNADTrust = "kube-system"

// ParseNADTrust reads a comma separated list of namespaces; "*" trusts
// every namespace (Multus' model); "" none.
func ParseNADTrust(s string) (NADTrust, error) {
	var t NADTrust
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		switch {
		case ns == "":
		case ns == "*":
			t.all = true
		default:
			if err := agentapi.CheckNames(ns, "x"); err != nil {
				return NADTrust{}, fmt.Errorf("--nad-trusted-namespaces: %w", err)
			}
			t.namespaces = append(t.namespaces, ns)
		}
	}
	return t, nil
}

// Trusts reports whether the NADs of namespace ns may use anything.
func (t NADTrust) Trusts(ns string) bool {
	return t.all || slices.Contains(t.namespaces, ns)
}

// with is the flag's value that also trusts ns.
func (t NADTrust) with(ns string) string {
	return strings.Join(append(slices.Clone(t.namespaces), ns), ",")
}

// String is the list as the flag takes it.
func (t NADTrust) String() string {
	if t.all {
		return "*"
	}
	return strings.Join(t.namespaces, ",")
}

// refusal is a field of a NAD's config that an untrusted namespace may not
// set: path names it as written ("plugins[1].ipam.LogFile"), why says what
// it reaches on the node.
type refusal struct {
	path, why string
}

func (r *refusal) Error() string { return r.path + " " + r.why }

// checkNADConfig refuses a NetworkAttachmentDefinition of a namespace that
// trust does not name when its config leaves the allowlist. The message
// names the field and never quotes a value. An empty config (the file of
// that name in the node's confDir, which the node's operator wrote) passes.
func checkNADConfig(nad *agentapi.NetAttachDef, trust NADTrust) error {
	if nad == nil || strings.TrimSpace(nad.Config) == "" || trust.Trusts(nad.Namespace) {
		return nil
	}
	err := walkNAD(nad.Config)
	if err == nil {
		return nil
	}
	q := nad.Namespace + "/" + nad.Name
	var r *refusal
	if !errors.As(err, &r) {
		return &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf("network-attachment-definition %s: spec.config %v: fix it", q, err)}
	}
	return &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf(
		"network-attachment-definition %s: spec.config field %s; this node does not trust the NADs of namespace %q with that: remove the field, "+
			"or put the network in a file of the node's confDir and leave spec.config empty, or trust the namespace (cnibox-agent --nad-trusted-namespaces=%s)",
		q, r, nad.Namespace, trust.with(nad.Namespace))}
}

// walkNAD checks a config (a conflist or one plugin's config) against the
// allowlist: first every key at any depth against the fields that name
// something on the node (so that such a field is named even inside a role
// that is refused as a whole), then the allowlist.
func walkNAD(config string) error {
	root, err := parseTree([]byte(config))
	if err != nil {
		return err
	}
	if !root.obj {
		return errNotJSON
	}
	if err := scanNodeFields(root, ""); err != nil {
		return err
	}
	if plugins, _ := root.get(fold("plugins")); plugins != nil {
		return checkObject(root, "", conflistFields)
	}
	return checkPlugin(root, "")
}

// join appends key to path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// scanNodeFields refuses any key, at any depth, that names a host path, a
// socket or an endpoint in some role (nodeFields), and any key that folds
// to the same form as another key of its object.
func scanNodeFields(n *jsonNode, path string) error {
	seen := map[string]string{}
	for i, k := range n.keys {
		f := fold(k)
		p := join(path, k)
		if prev, dup := seen[f]; dup {
			return &refusal{p, fmt.Sprintf("is the same key as %s to the roles' decoder, which merges the two: write it once", join(path, prev))}
		}
		seen[f] = k
		if r, ok := nodeFields[f]; ok {
			return &refusal{p, r.why}
		}
		if err := scanNodeFields(n.vals[i], p); err != nil {
			return err
		}
	}
	return eachElem(n, path, scanNodeFields)
}

// typeOf returns the "type" of the object n and the path of that field
// (as written), refusing a type that nodeTypes names, with its reason;
// kind is what the type names, with its article ("a role").
func typeOf(n *jsonNode, path, kind string, nodeTypes map[string]string) (typ *jsonNode, tp string, err error) {
	if !n.obj {
		return nil, "", &refusal{path, "is not an object (" + kind + "'s config)"}
	}
	typ, typKey := n.get(fold("type"))
	if typ == nil || !typ.isStr {
		return nil, "", &refusal{join(path, "type"), "is missing or not a string: it names " + kind}
	}
	tp = join(path, typKey)
	if why, ok := nodeTypes[typ.str]; ok {
		return nil, "", &refusal{tp, fmt.Sprintf("is %s, %s that %s", typ.str, kind, why)}
	}
	return typ, tp, nil
}

// checkPlugin checks one plugin's config by its type.
func checkPlugin(n *jsonNode, path string) error {
	typ, tp, err := typeOf(n, path, "a role", nodeRoles)
	if err != nil {
		return err
	}
	spec, ok := podRoles[typ.str]
	if _, isIPAM := podIPAM[typ.str]; isIPAM {
		return &refusal{tp, fmt.Sprintf("is %s, an IPAM role: it belongs in a plugin's \"ipam\" section", typ.str)}
	}
	if !ok {
		return &refusal{tp, "names a plugin that is not a cnibox role: it would be exec'd from CNI_PATH, and what its fields reach is not known to this node"}
	}
	if spec.inPodIf != "" {
		v, k := n.get(fold(spec.inPodIf))
		if v == nil || !isTrue(v) {
			at := tp
			if m, mk := n.get(fold("master")); m != nil {
				at = join(path, mk)
			}
			return &refusal{at, fmt.Sprintf("puts a %s on an interface of the node (master, or the default route's interface when none is named): it hands the pod a share of a node device (%q: true, a master in the pod, needs no trust)", typ.str, orKey(k, spec.inPodIf))}
		}
		if err := checkInPodMaster(n, path, k); err != nil {
			return err
		}
	}
	return checkObject(n, path, spec.fields)
}

// isTrue reports whether n is the JSON literal true.
func isTrue(n *jsonNode) bool { return n.scalar() && !n.isStr && n.str == "true" }

func orKey(written, key string) string {
	if written != "" {
		return written
	}
	return key
}

// checkObject checks every key of the object n against fields.
func checkObject(n *jsonNode, path string, fields fieldSet) error {
	if !n.obj {
		return &refusal{path, "is not an object"}
	}
	for i, k := range n.keys {
		p := join(path, k)
		r, ok := fields[fold(k)]
		if !ok {
			return &refusal{p, "is not a field this node lets a NAD of an untrusted namespace set (the allowed fields of each role are in docs/security.md)"}
		}
		if r.why != "" {
			return &refusal{p, r.why}
		}
		if r.shape != nil {
			if err := r.shape(n.vals[i], p); err != nil {
				return err
			}
		}
	}
	return nil
}
