//go:build !nokube

package kubelease

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
)

var (
	_ lease.Completer      = (*Manager)(nil)
	_ lease.PublicIPSource = (*Manager)(nil)
)

// The node's NetworkUnavailable condition, as flanneld sets it once its
// network is up (its CompleteLease): a cloud's node controller marks a new
// node NetworkUnavailable=True until the network provider says otherwise,
// and the scheduler keeps pods off it meanwhile.
const (
	conditionNetworkUnavailable = "NetworkUnavailable"
	conditionReason             = "FlannelIsUp"
	conditionMessage            = "Flannel is running on this node"
)

// CompleteLease sets this node's NetworkUnavailable condition to False
// (reason FlannelIsUp, flanneld's, so tools that look for it keep
// working), unless Config.SetNodeNetworkUnavailable is false. The patch
// is a strategic merge of status.conditions, keyed by type: the kubelet's
// conditions stay.
func (m *Manager) CompleteLease(ctx context.Context) error {
	if !m.setUnavailable {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	now := time.Now().UTC().Format(time.RFC3339)
	cond := map[string]any{
		"type": conditionNetworkUnavailable, "status": "False",
		"reason": conditionReason, "message": conditionMessage,
		"lastTransitionTime": now, "lastHeartbeatTime": now,
	}
	if err := kubeapi.PatchStatus(ctx, m.c, m.ref(), map[string]any{"conditions": []any{cond}}); err != nil {
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("%w: %w", lease.ErrNotAllowed, err)
		}
		return fmt.Errorf("kube: set node %s NetworkUnavailable=False: %w (the agent needs patch on nodes/status)", m.node, err)
	}
	m.log.Info("set the node's NetworkUnavailable condition to False", "node", m.node)
	return nil
}

// StoredPublicIPs returns this node's node-public-ip and node-public-ipv6
// annotations ("" when absent).
func (m *Manager) StoredPublicIPs(ctx context.Context) (v4, v6 string, err error) {
	n, err := m.getNode(ctx)
	if err != nil {
		return "", "", fmt.Errorf("kube: get node %s: %w", m.node, err)
	}
	return n.Annotations[m.an.NodePublicIP], n.Annotations[m.an.NodePublicIPv6], nil
}
