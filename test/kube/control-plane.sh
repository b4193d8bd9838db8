#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for the tests: etcd (Debian's
# etcd-server), kube-apiserver and kube-controller-manager (node IPAM by
# default: it sets node.spec.podCIDR out of the cluster CIDR, as on a real
# cluster). The Kubernetes binaries are built from the Go module proxy with
# `go` into a cache the first time (~35 minutes and ~1 GB of modules on 2
# quiet cores for all five); later starts reuse them.
#
#   control-plane.sh build [CMD...]            build (or find in the cache) kube-apiserver and
#                                              kube-controller-manager, plus any of kube-scheduler,
#                                              kubelet, kubectl named; prints the cache directory
#   control-plane.sh start DIR [CIDR] [MASK]   start; default cluster CIDR 10.244.0.0/16, node mask 24
#   control-plane.sh stop DIR                  stop what start started (its pids are in DIR/*.pid)
#   control-plane.sh module DIR                write DIR/go.mod: a module that requires
#                                              k8s.io/kubernetes VERSION with its staging replaces
#                                              (test/conformance/build.sh builds e2e.test in one)
#
# start prints KUBECONFIG=DIR/kubeconfig (token auth, system:masters) once
# /readyz answers. Ports: etcd 127.0.0.1:23791 (peers 23801), API 127.0.0.1:16443;
# override with KCP_ETCD_PORT, KCP_ETCD_PEER_PORT, KCP_API_PORT. KCP_CONTROLLERS
# picks the controller-manager's controllers (default nodeipam). KCP_BIND and
# KCP_ADVERTISE (default 127.0.0.1) are the API server's bind address and the
# address it advertises (the kubernetes Service's endpoint). KCP_SERVICE_CIDR
# (default 10.96.0.0/16; an IPv4 and an IPv6 range, comma-separated, for dual
# stack) is the Services' range; a CIDR of start with a comma is dual stack
# too (the node mask is then MASK for IPv4 and 64 for IPv6). KCP_VERSION
# (default v1.34.2) and KCP_CACHE (default ~/.cache/cnibox-kube/VERSION) pick the
# build.
set -euo pipefail
VER=${KCP_VERSION:-v1.34.2}
CACHE=${KCP_CACHE:-$HOME/.cache/cnibox-kube/$VER}
ETCD_PORT=${KCP_ETCD_PORT:-23791}
ETCD_PEER=${KCP_ETCD_PEER_PORT:-23801}
API_PORT=${KCP_API_PORT:-16443}
BIND=${KCP_BIND:-127.0.0.1}
ADVERTISE=${KCP_ADVERTISE:-127.0.0.1}
SERVICE_CIDR=${KCP_SERVICE_CIDR:-10.96.0.0/16}
TOKEN=testtoken

# module writes a throwaway module that requires k8s.io/kubernetes at VER.
# Kubernetes points its staging modules (k8s.io/api, client-go, ...) at
# ./staging with replace lines; they are published as v0.MINOR.PATCH, so each
# gets a replace to that version.
module() {
  local m=$1 sv="v0.${VER#v1.}" gomod
  mkdir -p "$m"
  printf 'module kcp\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n' "$VER" >"$m/go.mod"
  gomod=$(cd "$m" && go mod download -json "k8s.io/kubernetes@$VER" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [ -r "$gomod" ] || { echo "control-plane.sh: no go.mod of k8s.io/kubernetes@$VER from the module proxy" >&2; exit 1; }
  awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod" | sort -u | while read -r mod; do
    echo "replace $mod => $mod $sv" >>"$m/go.mod"
  done
}

build() {
  local cmds=(kube-apiserver kube-controller-manager "$@") todo=() c
  for c in "${cmds[@]}"; do
    [ -x "$CACHE/$c" ] || todo+=("$c")
  done
  command -v etcd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; }
  if [ ${#todo[@]} -gt 0 ]; then
    local m="$CACHE/mod" out="$CACHE/build.tmp" pkgs=()
    [ -f "$m/go.mod" ] && grep -q replace "$m/go.mod" || module "$m"
    for c in "${todo[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    echo "control-plane.sh: building ${todo[*]} $VER into $CACHE (once)" >&2
    # One go build for all of them: the packages are loaded once and the
    # links run side by side; -s -w leaves out the symbol table and DWARF,
    # which the tests never read (stack traces keep their file:line).
    rm -rf "$out" && mkdir -p "$out"
    (cd "$m" && GOFLAGS=-mod=mod go get "${pkgs[@]/%/@$VER}" >/dev/null 2>&1 &&
      CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/" "${pkgs[@]}")
    # each binary is moved into place whole: an interrupted build leaves none
    for c in "${todo[@]}"; do mv "$out/$c" "$CACHE/$c"; done
    rmdir "$out"
  fi
  echo "$CACHE"
}

ready() {
  curl -skf -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1
}

start() {
  local d=$1 cidr=${2:-10.244.0.0/16} mask=${3:-24} i masks
  masks=(--node-cidr-mask-size="$mask")
  [[ $cidr != *,* ]] || masks=(--node-cidr-mask-size-ipv4="$mask" --node-cidr-mask-size-ipv6=64)
  build >/dev/null
  mkdir -p "$d"
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  echo "$TOKEN,admin,admin,system:masters" >"$d/tokens.csv"
  cat >"$d/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: $TOKEN}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
KC
  # Debian's etcd (3.4.23) is older than the 3.4.31 the API server asks
  # before it requests watch progress from etcd: its watch cache of a
  # resource then only moves when that resource is written, or at etcd's
  # periodic progress notification (every 10 minutes by default). A watch
  # without a resourceVersion waits for the cache to reach etcd's current
  # revision and fails after 3 s ("Too large resource version") while
  # other resources move it: a quiet resource's informers never started
  # (TestKubeLBIPAMCutOff, CI at d28b6d0). Progress every 500 ms keeps each
  # cache within that wait, as the progress requests of a newer etcd do.
  setsid etcd --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --experimental-watch-progress-notify-interval=500ms \
    >"$d/etcd.log" 2>&1 &
  echo $! >"$d/etcd.pid"
  setsid "$CACHE/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$BIND" --secure-port="$API_PORT" --advertise-address="$ADVERTISE" \
    --cert-dir="$d/certs" --token-auth-file="$d/tokens.csv" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$d/sa.pub" \
    --service-account-signing-key-file="$d/sa.key" --service-cluster-ip-range="$SERVICE_CIDR" \
    --allow-privileged=true --kubelet-preferred-address-types=InternalIP \
    >"$d/apiserver.log" 2>&1 &
  echo $! >"$d/apiserver.pid"
  for i in $(seq 1 240); do
    ready && break
    sleep 0.5
  done
  if ! ready; then
    echo "control-plane.sh: the API server is not ready after 120 s; see $d/apiserver.log and $d/etcd.log" >&2
    stop "$d"
    exit 1
  fi
  setsid "$CACHE/kube-controller-manager" --kubeconfig="$d/kubeconfig" \
    --controllers="${KCP_CONTROLLERS:-nodeipam}" --service-account-private-key-file="$d/sa.key" \
    --root-ca-file="$d/certs/apiserver.crt" --allocate-node-cidrs=true --cluster-cidr="$cidr" \
    "${masks[@]}" --service-cluster-ip-range="$SERVICE_CIDR" --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false \
    >"$d/kcm.log" 2>&1 &
  echo $! >"$d/kcm.pid"
  echo "KUBECONFIG=$d/kubeconfig"
}

stop() {
  local d=$1 f p i
  for f in kcm apiserver etcd; do
    [ -f "$d/$f.pid" ] || continue
    p=$(cat "$d/$f.pid")
    kill "$p" 2>/dev/null || true
    for i in $(seq 1 50); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$p" 2>/dev/null || true
    rm -f "$d/$f.pid"
  done
}

case "${1:-}" in
build) shift; build "$@" ;;
start) shift; start "$@" ;;
stop) shift; stop "$1" ;;
module) shift; module "$1" ;;
*) sed -n '2,29p' "$0"; exit 2 ;;
esac
