#!/usr/bin/env bash
# The "debugging a node" walkthrough of the README, run for real: two pods on
# the example network in a private node namespace, then the CLI's views, a
# broken route, a pod that vanished without DEL, and gc. Nothing outside the
# namespaces it creates is touched. Usage: test/cli_walkthrough.sh [BIN]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-bin/cnibox}")
# Fixed names, so that the output reads the same every run.
W=/tmp/cnibox-doc
node=cnibox-doc
if [ -e $W ] || [ -e /run/netns/$node ]; then
  echo "$W or /run/netns/$node exists: another walkthrough is running (or remove them)" >&2
  exit 1
fi
mkdir -p $W
pods="web-0 web-1"
# $W stands for the node's root: its CNI dirs, store and log live below it.
export CNIBOX_DATA_DIR=$W/var/lib/cnibox CNIBOX_LOG_FILE=$W/var/log/cnibox/cnibox.log
CONF=$W/etc/cni/net.d BINS=$W/opt/cni/bin CACHE=$W/var/lib/cni
mkdir -p $CONF $BINS $W/usr/local/bin
cp examples/10-bridge.conflist $CONF/
echo '{"cniVersion": "1.0.0", "name": "old"' > $CONF/05-old.conflist # a broken leftover
install -m 0755 "$BIN" $W/usr/local/bin/cnibox
export PATH=$W/usr/local/bin:$PATH
cleanup() {
  for p in $pods; do ip netns del $node-$p 2>/dev/null; done
  ip netns del $node 2>/dev/null
  rm -rf $W
}
trap cleanup EXIT
cnibox install --dir $BINS >/dev/null
ip netns add $node
nsenter --net=/run/netns/$node ip link set lo up
on_node() { nsenter --net=/run/netns/$node "$@"; }
# run shows a command as typed, then runs it on the node.
run() {
  echo "# $*"
  on_node "$@" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] && echo "(exit status $rc)"
  echo
}
C="--conf-dir $CONF --bin-dir $BINS --cache-dir $CACHE"
i=0
for p in $pods; do
  on_node cnibox exec add --conf $CONF/10-bridge.conflist --bin-dir $BINS --cache-dir $CACHE \
    --new-netns $node-$p --container-id 3f2a9c0${i}d4e5b6a7c8d9e0f1 \
    --args "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=$p;K8S_POD_UID=5c1e-000$i" >/dev/null
  i=$((i+1))
done
echo "### which config"
run cnibox inspect config --conf-dir $CONF --bin-dir $BINS
echo "### healthy"
run cnibox doctor $C
echo "### a pod lost its default route"
ip -n $node-web-1 route del default
run cnibox doctor $C --pod shop/web-1
ip -n $node-web-1 route add default via 10.88.7.1 dev eth0
echo "### endpoints"
run cnibox inspect endpoints
run cnibox inspect endpoints --pod shop/web-1 --detail
run cnibox inspect endpoints --pod shop/web-1 --json
echo "### ipam"
run cnibox inspect ipam --conf-dir $CONF
echo "### topology"
run cnibox inspect topology
run cnibox inspect topology --format dot
echo "### logs"
run cnibox logs --container 3f2a9c01
echo "### web-0 vanishes without DEL"
ip netns del $node-web-0
sleep 1
run cnibox doctor $C
run cnibox gc --dry-run --cache-dir $CACHE
run cnibox gc --cache-dir $CACHE
run cnibox gc --cache-dir $CACHE
ip -n $node-web-1 neigh del 10.88.7.1 dev eth0 2>/dev/null
run cnibox doctor $C
