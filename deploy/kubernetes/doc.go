// Package kubernetes holds cnibox's Kubernetes manifest, cnibox.yaml (one
// `kubectl apply` sets up every node; docs/deploy.md). Its tests decode
// every object into the API types and run the manifest's install step and
// agent flags against the binaries.
package kubernetes
