package podapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/cniargs"
)

// checkCNIArgs refuses a NAD whose config, with the pod's cni-args merged
// as the multi role merges them (internal/cniargs), leaves what the NAD may
// be: a gated key (ips, mac, portMappings) on a network none of whose
// plugins declares the capability, from any namespace; and, for a
// namespace trust does not name, anything the allowlist refuses (a pod
// cannot add to an untrusted NAD, through args.cni, what the NAD could not
// say itself: a MAC, a forwarding sysctl, a node path). The message names
// the field and never quotes a value. raw is the request's cniArgs.
func checkCNIArgs(nad *agentapi.NetAttachDef, raw json.RawMessage, trust NADTrust) error {
	if nad == nil || len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	q := nad.Namespace + "/" + nad.Name
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("network-attachment-definition %s: cniArgs is not a JSON object", q)}
	}
	if len(args) == 0 || strings.TrimSpace(nad.Config) == "" {
		return nil // the node's own file (confDir): multi merges and gates
	}
	merged, err := cniargs.Merge(cniargs.AsList([]byte(nad.Config)), args)
	var ne *cniargs.NotEntitledError
	switch {
	case errors.As(err, &ne):
		return &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf("network-attachment-definition %s: the pod's %v", q, err)}
	case err != nil:
		return &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf("network-attachment-definition %s: the pod's cni-args cannot be merged into spec.config: %v", q, err)}
	case trust.Trusts(nad.Namespace):
		return nil
	}
	err = walkNAD(string(merged))
	if err == nil {
		return nil
	}
	var r *refusal
	if !errors.As(err, &r) {
		return &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf("network-attachment-definition %s: spec.config with the pod's cni-args merged: %v", q, err)}
	}
	return &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf(
		"network-attachment-definition %s: the pod's cni-args (annotation %s) would set spec.config field %s; this node does not trust the NADs of namespace %q with that: "+
			"remove it from the pod's cni-args, or trust the namespace (cnibox-agent --nad-trusted-namespaces=%s)",
		q, agentapi.NetworksAnnotation, r, nad.Namespace, trust.with(nad.Namespace))}
}
