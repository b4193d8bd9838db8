package podapi

import (
	"encoding/json"
	"fmt"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// nodeWideKeys are config keys that choose something for the whole node
// (the store, the log file), not for one attachment: a NAD's author (anyone
// who may create NADs in a namespace) must not set them.
var nodeWideKeys = []string{"dataDir", "logFile"}

// checkNADConfig refuses a NetworkAttachmentDefinition whose config sets a
// node-wide key, at its top level, in its ipam, or in any of its plugins (a
// conflist). A config that is not a JSON object is left to the caller.
func checkNADConfig(nad *agentapi.NetAttachDef) error {
	if nad == nil || nad.Config == "" {
		return nil
	}
	var top struct {
		Plugins []map[string]json.RawMessage `json:"plugins"`
	}
	var objs []map[string]json.RawMessage
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(nad.Config), &m) != nil {
		return nil
	}
	_ = json.Unmarshal([]byte(nad.Config), &top)
	objs = append(append(objs, m), top.Plugins...)
	for _, o := range objs {
		var ipam map[string]json.RawMessage
		if raw, ok := o["ipam"]; ok && json.Unmarshal(raw, &ipam) == nil {
			objs = append(objs, ipam)
		}
	}
	for _, o := range objs {
		for _, k := range nodeWideKeys {
			if _, ok := o[k]; ok {
				return &agentapi.Error{Reason: agentapi.ReasonBadRequest,
					Msg: fmt.Sprintf("network-attachment-definition %s/%s sets %q, a node-wide setting a NAD may not choose: remove it from the NAD's config", nad.Namespace, nad.Name, k)}
			}
		}
	}
	return nil
}
