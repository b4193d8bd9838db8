package multi

import (
	"encoding/json"
	"errors"
	"fmt"
)

// wrapConflist returns the conflist data wrapped in the multi role with the
// pod path on (docs/roles/multi.md): the list runs as multi's one
// delegate, so the pod network stays what it was, and a pod's
// k8s.v1.cni.cncf.io/networks annotation adds secondary networks from
// NetworkAttachmentDefinitions. The wrapper keeps the list's name (the
// runtime's network name) and declares every capability a plugin of the
// list does, so that portMappings and bandwidth still reach them; it is
// version 1.0.0, and the list keeps its own cniVersion (multi hands each
// plugin the previous result in the delegate's version). A list that
// already is multi is returned as it is.
func wrapConflist(data []byte) ([]byte, error) {
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	name, _ := list["name"].(string)
	plugins, _ := list["plugins"].([]any)
	if name == "" || len(plugins) == 0 {
		return nil, errors.New(`a conflist with a "name" and "plugins" is wrapped in multi; this is not one`)
	}
	caps := map[string]bool{}
	for _, p := range plugins {
		pm, _ := p.(map[string]any)
		if pm["type"] == multiPlugin {
			return data, nil
		}
		c, _ := pm["capabilities"].(map[string]any)
		for k, v := range c {
			if v == true {
				caps[k] = true
			}
		}
	}
	wrapper := map[string]any{"type": multiPlugin, "kubernetes": true, "delegates": []any{list}}
	if len(caps) > 0 {
		wrapper["capabilities"] = caps
	}
	out, err := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{wrapper}}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
