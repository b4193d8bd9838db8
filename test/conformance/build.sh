#!/usr/bin/env bash
# The conformance run's toolchain (make test-conformance), built from the Go
# module proxy once per version and cached beside the Kubernetes binaries
# (~/.cache/cnibox-kube/VERSION/conformance):
#
#   e2e-network.test  Kubernetes' e2e suite of VERSION with only its
#                     [sig-network] specs linked in (testdata/e2enet; with
#                     E2E=all the whole k8s.io/kubernetes/test/e2e as
#                     e2e.test instead)
#   agnhost           k8s.io/kubernetes/test/images/agnhost of VERSION, the
#                     e2e images' server (test/node writes its image), with
#                     porter's localhost.crt and localhost.key
#   coredns-CDVER     github.com/coredns/coredns at CDVER (default v1.12.4),
#                     the cluster DNS
#   regression-issue-74839  the image of the conntrack spec of that name
#                     (k8s.io/kubernetes/test/images/regression-issue-74839)
#   ginkgo            the ginkgo CLI at the version Kubernetes requires: it
#                     runs the e2e binary's specs in parallel processes
#   cnp-conformance-CNPVER.test  (build.sh cnp only) the conformance suite
#                     of sigs.k8s.io/network-policy-api at CNPVER (default
#                     v0.3.0: ClusterNetworkPolicy v1beta1): its ./conformance
#                     package's test binary, built in the module as its
#                     own main module (its go.mod and go.sum), make test-cnp;
#                     cnp-crd-CNPVER.yaml and cnp-crd-experimental-CNPVER.yaml
#                     beside it, the module's config/crd/standard and
#                     config/crd/experimental ClusterNetworkPolicy CRDs
#
#   build.sh          build what is missing; print the cache directory
#
# Kube-proxy is built with the other Kubernetes binaries
# (control-plane.sh build kube-proxy). Everything is built with
# CGO_ENABLED=0 and -trimpath (the Go build cache is shared with
# control-plane.sh's builds) and moved into place whole: an interrupted
# build leaves nothing half written. `go test -c` runs with -vet=off (vet
# alone costs minutes). BUILD_TIMES=FILE appends each build's seconds.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VER=${KCP_VERSION:-v1.34.2}
CDVER=${COREDNS_VERSION:-v1.12.4}
CNPVER=${CNP_VERSION:-v0.3.0}
OUT=${KCP_CACHE:-$HOME/.cache/cnibox-kube/$VER}/conformance
E2E=${E2E:-network}
export CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { echo "build.sh: $*" >&2; }

# timed NAME CMD...: run CMD, noting its seconds in $BUILD_TIMES.
timed() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  [ -z "${BUILD_TIMES:-}" ] || echo "$name $((SECONDS - start))s" >>"$BUILD_TIMES"
}

# kube_module: the module that requires k8s.io/kubernetes (its staging
# replaces from control-plane.sh module) with test/e2e and agnhost got.
kube_module() {
  local m=$OUT/mod
  if ! [ -f "$m/go.mod" ] || ! grep -q replace "$m/go.mod"; then
    KCP_VERSION=$VER bash "$HERE/../kube/control-plane.sh" module "$m"
  fi
  if ! [ -f "$m/got" ]; then
    (cd "$m" && go get "k8s.io/kubernetes/test/e2e@$VER" "k8s.io/kubernetes/test/images/agnhost@$VER" >/dev/null 2>&1)
    touch "$m/got"
  fi
  echo "$m"
}

e2e_test() {
  local m name pkg
  m=$(kube_module)
  if [ "$E2E" = all ]; then
    name=e2e.test pkg=k8s.io/kubernetes/test/e2e
  else
    name=e2e-network.test pkg=./e2enet
    mkdir -p "$m/e2enet"
    cp "$HERE/testdata/e2enet/e2e_test.go" "$m/e2enet/e2e_test.go"
  fi
  [ -x "$OUT/$name" ] && return
  log "building $name of $VER (once)"
  (cd "$m" && timed "$name" go test -c -vet=off -trimpath -ldflags='-s -w' -o "$OUT/$name.tmp" "$pkg")
  mv "$OUT/$name.tmp" "$OUT/$name"
}

agnhost() {
  local m src
  [ -x "$OUT/agnhost" ] && return
  m=$(kube_module)
  log "building agnhost of $VER (once)"
  (cd "$m" && timed agnhost go build -trimpath -ldflags='-s -w' -o "$OUT/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost)
  # porter's certificate, which the image has beside agnhost
  src=$(cd "$m" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter
  cp "$src/localhost.crt" "$src/localhost.key" "$OUT/"
  mv "$OUT/agnhost.tmp" "$OUT/agnhost"
}

regression() {
  local m
  [ -x "$OUT/regression-issue-74839" ] && return
  m=$(kube_module)
  log "building regression-issue-74839 of $VER (once)"
  (cd "$m" && timed regression-issue-74839 go build -trimpath -ldflags='-s -w' -o "$OUT/regression-issue-74839.tmp" \
    k8s.io/kubernetes/test/images/regression-issue-74839)
  mv "$OUT/regression-issue-74839.tmp" "$OUT/regression-issue-74839"
}

ginkgo() {
  local m
  [ -x "$OUT/ginkgo" ] && return
  m=$(kube_module)
  log "building ginkgo (once)"
  (cd "$m" && timed ginkgo go build -trimpath -ldflags='-s -w' -o "$OUT/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo)
  mv "$OUT/ginkgo.tmp" "$OUT/ginkgo"
}

# coredns: its own module (its go.mod has no replace lines: go install
# builds it as its release does).
coredns() {
  [ -x "$OUT/coredns-$CDVER" ] && return
  log "building coredns $CDVER (once)"
  rm -rf "$OUT/coredns.tmp" && mkdir -p "$OUT/coredns.tmp"
  GOBIN=$OUT/coredns.tmp timed coredns go install -trimpath -ldflags='-s -w' "github.com/coredns/coredns@$CDVER"
  mv "$OUT/coredns.tmp/coredns" "$OUT/coredns-$CDVER"
  rmdir "$OUT/coredns.tmp"
}

# cnp: the module's conformance suite, built where the module is its own
# main module (a writable copy of the module cache's tree).
cnp() {
  local name=cnp-conformance-$CNPVER.test dir src crd=config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml
  [ -x "$OUT/$name" ] && [ -f "$OUT/cnp-crd-$CNPVER.yaml" ] && [ -f "$OUT/cnp-crd-experimental-$CNPVER.yaml" ] && return
  src=$(cd / && go mod download -json "sigs.k8s.io/network-policy-api@$CNPVER" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { log "sigs.k8s.io/network-policy-api@$CNPVER: no module directory"; return 1; }
  cp "$src/$crd" "$OUT/cnp-crd-experimental-$CNPVER.yaml.tmp" && mv "$OUT/cnp-crd-experimental-$CNPVER.yaml.tmp" "$OUT/cnp-crd-experimental-$CNPVER.yaml"
  [ -x "$OUT/$name" ] && [ -f "$OUT/cnp-crd-$CNPVER.yaml" ] && return
  log "building $name (once)"
  dir=$OUT/cnp.tmp
  rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
  (cd "$dir" && timed "$name" go test -c -vet=off -trimpath -ldflags='-s -w' -o "$OUT/$name.tmp" ./conformance)
  cp "$dir/config/crd/standard/policy.networking.k8s.io_clusternetworkpolicies.yaml" "$OUT/cnp-crd-$CNPVER.yaml"
  rm -rf "$dir"
  mv "$OUT/$name.tmp" "$OUT/$name"
}

mkdir -p "$OUT"
case "${1:-all}" in
all) agnhost && regression && ginkgo && coredns && e2e_test ;;
agnhost | regression | ginkgo | coredns | e2e_test | cnp) "$1" ;;
*) sed -n '2,35p' "$0"; exit 2 ;;
esac
echo "$OUT"
