//go:build !nokube

package lbipam

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// warn records a Warning Event on Service s for problem p, once while the
// problem stays the same (the Event is named after the Service's UID and
// the message: a new leader that reports it again finds it there).
func (c *controller) warn(ctx context.Context, s *svcObj, p *Problem) {
	c.mu.Lock()
	if p == nil {
		delete(c.reported, s.Key())
		c.mu.Unlock()
		return
	}
	if c.reported[s.Key()] == p.Message {
		c.mu.Unlock()
		return
	}
	c.reported[s.Key()] = p.Message
	c.mu.Unlock()
	sum := sha256.Sum256([]byte(s.UID + "\x00" + p.Message))
	t := metav1.NewTime(time.Now())
	msg := p.Message
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name + "." + hex.EncodeToString(sum[:8]), Namespace: s.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: s.Namespace, Name: s.Name,
			UID: types.UID(s.UID), ResourceVersion: s.ResourceVersion},
		Reason: p.Reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "cnibox-lb-ipam", Host: c.el.identity},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
	}
	err := c.core.Post().Namespace(s.Namespace).Resource("events").Body(e).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		c.cfg.Log.Warn("LoadBalancer IPAM: cannot record the Service's event", "service", s.Key(), "reason", p.Reason, "err", err)
	}
}
