#!/usr/bin/env bash
# helm.sh: prints the path of a helm v3 binary at the pinned version, built
# once from the Go module proxy into the user's cache
# (${XDG_CACHE_HOME:-~/.cache}/cnibox-helm/VERSION/helm), as
# test/kube/control-plane.sh does for the Kubernetes binaries. Nothing is
# installed into the system. HELM_VERSION overrides the pin.
set -euo pipefail
version=${HELM_VERSION:-v3.22.0}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/cnibox-helm/$version
if [ ! -x "$dir/helm" ]; then
	mkdir -p "$(dirname "$dir")"
	# One build at a time: a second caller (make test builds helm in the
	# background while its tests run, and a test may ask for it meanwhile)
	# waits for the first's build instead of building it again.
	exec 9>"$(dirname "$dir")/.lock-$version"
	flock 9
fi
if [ ! -x "$dir/helm" ]; then
	tmp=$(mktemp -d "$(dirname "$dir")/.build-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "helm.sh: building helm $version into $dir (once; it needs the Go module proxy)" >&2
	CGO_ENABLED=0 GOBIN="$tmp/out" GOFLAGS=-trimpath go install \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
		"helm.sh/helm/v3/cmd/helm@$version" >&2
	# A rename: another run sees all of it or none of it.
	mv -T "$tmp/out" "$dir" 2>/dev/null || [ -x "$dir/helm" ]
fi
echo "$dir/helm"
