#!/usr/bin/env bash
# make demo: two pods on the default example network, inside a private "node"
# namespace so the machine's own interfaces, routes and nftables are untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin/cnibox
CONF=$PWD/examples/10-bridge.conflist
work=$(mktemp -d /tmp/cnibox-demo.XXXXXX)
node=cnibox-demo-node-$$
export CNIBOX_DATA_DIR=$work/data CNIBOX_LOG_FILE=$work/cnibox.log
on_node() { nsenter --net=/run/netns/$node "$@"; }
cnibox_exec() { on_node "$BIN" exec "$@" --conf "$CONF" --bin-dir "$work/bin" --cache-dir "$work/cache"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cleanup() {
  set +e
  for p in a b; do
    [ -e /run/netns/$node-$p ] && cnibox_exec del --new-netns "$node-$p" >/dev/null 2>&1
    [ -e /run/netns/$node-$p ] && ip netns del "$node-$p" 2>/dev/null
  done
  [ -e /run/netns/$node ] && ip netns del "$node"
  rm -rf "$work"
}
trap cleanup EXIT

say "install the role symlinks into a plugin dir"
"$BIN" install --dir "$work/bin" | head -3; echo "... ($("$BIN" roles | wc -l) roles)"

say "a private node namespace: $node"
ip netns add "$node"
on_node ip link set lo up

for p in a b; do
  say "ADD pod $p (network $(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$CONF" | head -1), conflist $CONF)"
  cnibox_exec add --new-netns "$node-$p" --args "IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=pod-$p"
done

ip_of() { ip -n "$node-$1" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1; }
say "addresses"
for p in a b; do echo "pod $p: $(ip_of $p)"; done

say "pod a pings pod b ($(ip_of b))"
nsenter --net=/run/netns/$node-a busybox ping -c 3 -W 2 "$(ip_of b)"

say "endpoint records (cnibox inspect endpoints)"
"$BIN" inspect endpoints

say "CHECK both, then DEL both"
for p in a b; do cnibox_exec check --netns /run/netns/$node-$p; done
for p in a b; do cnibox_exec del --new-netns "$node-$p"; done
"$BIN" inspect endpoints
echo
echo "demo done: nothing left on the node"
