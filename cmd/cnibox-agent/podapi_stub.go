//go:build nokube

package main

import (
	"context"
	"errors"
	"log/slog"
)

// startPodAPI: this build has no Kubernetes client.
func startPodAPI(context.Context, *flags, *slog.Logger) (func() error, error) {
	return nil, errors.New("--pod-api: this cnibox-agent is built without the Kubernetes client (tag nokube)")
}
