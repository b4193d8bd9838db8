#!/usr/bin/env bash
# make demo: two pods on the default example network, inside a private "node"
# namespace so the machine's own interfaces, routes and nftables are untouched.
# KEEP=1 leaves the node namespace, the pods and the demo's store, conf dir
# and plugin dir in place, and prints the commands to explore them.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin/cnibox
work=$(mktemp -d /tmp/cnibox-demo.XXXXXX)
node=cnibox-demo-node-$$
CONF_DIR=$work/conf
export CNIBOX_DATA_DIR=$work/data CNIBOX_LOG_FILE=$work/cnibox.log
bold='' plain=''
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
# run echoes a command, then runs it.
run() { printf '+'; printf ' %q' "$@"; echo; "$@"; }
on_node() { nsenter --net=/run/netns/$node "$@"; }
# The flags that point cnibox at the demo's own conf, plugin and cache dirs.
dirs="--conf-dir $CONF_DIR --bin-dir $work/bin --cache-dir $work/cache"
cnibox_exec() { verb=$1; shift; run nsenter --net=/run/netns/$node "$BIN" exec "$verb" --net cnibox $dirs "$@"; }

cleanup() {
  set +e
  for p in a b; do
    [ -e /run/netns/$node-$p ] && on_node "$BIN" exec del --net cnibox $dirs --new-netns "$node-$p" >/dev/null 2>&1
    [ -e /run/netns/$node-$p ] && ip netns del "$node-$p" 2>/dev/null
  done
  [ -e /run/netns/$node ] && ip netns del "$node"
  rm -rf "$work"
}
[ -n "${KEEP:-}" ] || trap cleanup EXIT

say "install cnibox and a symlink per role into a plugin dir: $work/bin"
run "$BIN" install --dir "$work/bin" | sed -n '1,4p'; echo "... ($("$BIN" roles | wc -l) roles)"
mkdir -p "$CONF_DIR"
run cp examples/10-bridge.conflist "$CONF_DIR/"

say "a private network namespace that stands for the node: $node"
run ip netns add "$node"
run nsenter --net=/run/netns/$node ip link set lo up

for p in a b; do
  say "ADD pod $p: a namespace, a veth into it, an address from host-local, the bridge, masquerade"
  cnibox_exec add --new-netns "$node-$p" --args "IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=pod-$p"
done

ip_of() { ip -n "$node-$1" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1; }
say "pod a pings pod b ($(ip_of b))"
run nsenter --net=/run/netns/$node-a busybox ping -c 3 -W 2 "$(ip_of b)"

say "what the plugins recorded (cnibox inspect endpoints)"
run "$BIN" inspect endpoints

say "CHECK both pods"
for p in a b; do cnibox_exec check --netns /run/netns/$node-$p; done

if [ -n "${KEEP:-}" ]; then
  say "KEEP=1: the node namespace, both pods and the store stay; explore them with"
  cat <<EOT
export CNIBOX_DATA_DIR=$work/data CNIBOX_LOG_FILE=$work/cnibox.log
nsenter --net=/run/netns/$node $BIN doctor $dirs
nsenter --net=/run/netns/$node $BIN inspect endpoints --detail
nsenter --net=/run/netns/$node $BIN inspect ipam --conf-dir $CONF_DIR
nsenter --net=/run/netns/$node $BIN inspect topology
$BIN logs
# when done: DEL both pods (removing their namespaces), then the node and the files
nsenter --net=/run/netns/$node $BIN exec del --net cnibox $dirs --new-netns $node-a
nsenter --net=/run/netns/$node $BIN exec del --net cnibox $dirs --new-netns $node-b
ip netns del $node; rm -rf $work
EOT
  exit 0
fi

say "DEL both pods, then nothing is left"
for p in a b; do cnibox_exec del --new-netns "$node-$p"; done
run "$BIN" inspect endpoints
echo
echo "demo done: nothing left on the node (make demo KEEP=1 keeps it to explore)"
