// Package multi is the multi role: several networks per pod, Multus style,
// from the config's delegates or, on Kubernetes, from the pod's networks
// annotation through cnibox-agent's pod API.
package multi
