#!/usr/bin/env bash
# A one-node Kubernetes cluster with a real kubelet, for the real-node test
# (test/node). Everything runs inside new network, mount, PID and UTS
# namespaces (a joined node has its own host name, NODE_NAME):
# the machine's own interfaces, routes, firewall, sysctls and mounts are
# never touched, and killing this script's process (it becomes `unshare`)
# ends every process the node started: unshare's child is the namespace's
# init, and the kernel kills a PID namespace with its init.
#
#   node.sh run DIR      start the node in DIR and stay in the foreground;
#                        DIR/up appears once the kubelet answers. End it with
#                        SIGKILL (unshare --fork ignores SIGTERM and SIGINT).
#   node.sh cri DIR      the same node with containerd alone (no control
#                        plane, no kubelet): DIR/up appears once containerd
#                        answers; a test drives its CRI socket directly
#                        (test/node's kind test)
#   node.sh cluster DIR  the control plane of a cluster of several nodes, in
#                        namespaces of its own that are also the nodes'
#                        underlay: a bridge br0 ($UPLINK_IP/24) that every
#                        node's eth0 plugs into, etcd, kube-apiserver
#                        (0.0.0.0:443, advertising $UPLINK_IP),
#                        kube-controller-manager and kube-scheduler. The
#                        kubernetes Service's address (10.96.0.1) is an
#                        address of its own (the nodes route there: no
#                        kube-proxy is needed for a pod to reach the API).
#                        DIR/up appears once the API server is ready.
#   node.sh join DIR     a kubelet node of that cluster ($CLUSTER_DIR), its
#                        eth0 ($NODE_IP/24, default route to $UPLINK_IP) a
#                        port of the cluster's br0 ($UNDERLAY: the cluster's
#                        network namespace); DIR/up once the kubelet answers.
#                        Its /opt/cni/bin and /etc/cni/net.d are DIR/host/...
#                        (private mounts): a manifest's host paths need no
#                        rewriting
#   node.sh cleanup DIR  afterwards: remove the containers' cgroups, the one
#                        thing that outlives the namespaces
#
# Inside: a veth "NIC" eth0 ($NODE_IP/24, default route to its peer, which
# lives in a namespace of its own), etcd, kube-apiserver and
# kube-controller-manager (control-plane.sh, on the node's loopback, with
# the controllers a node needs), kube-scheduler, containerd (Debian's, root,
# state, socket and CNI dirs in DIR) and the kubelet (node $NODE_NAME, its
# root, certificates and pod logs in DIR). The CNI dirs containerd reads are
# DIR/host/opt/cni/bin and DIR/host/etc/cni/net.d; the test points the
# manifest's host paths there. /run, /var/lib and /var/log are private
# tmpfs mounts: what the agent, the plugins and the kubelet write there
# (/run/flannel/subnet.env, /run/cnibox/agent.sock, /var/lib/cnibox,
# /var/lib/cni, /var/lib/kubelet/device-plugins, /var/log/containers) stays
# in the node; read it through /proc/PID/root of a process inside.
#
# The kubelet sets six kernel-wide sysctls (vm.overcommit_memory,
# kernel.panic, ...) unless they already hold its values: files bound over
# them in the namespace's own /proc hold those values, so it writes none.
#
# KUBE_BIN is the directory of kube-scheduler and kubelet (control-plane.sh
# build kube-scheduler kubelet kubectl prints it); SANDBOX_IMAGE the pod
# sandbox image (the test imports it); NODE_NAME, NODE_IP, CLUSTER_CIDR.
# For the conformance run (test/node's TestKubeConformance), a joined node
# also runs kube-proxy (KUBE_PROXY=nftables or iptables; KUBE_BIN has it)
# and its kubelet points pods at CLUSTER_DNS (CoreDNS's Service address);
# CLUSTER_CONTROLLERS and SERVICE_CIDR change the control plane's. Dual
# stack: CLUSTER_CIDR and SERVICE_CIDR with an IPv6 range after a comma,
# UPLINK_IP6 on the cluster's br0 and NODE_IP6 on a node's eth0 (a /64).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NODE_NAME=${NODE_NAME:-cnibox-node}
NODE_IP=${NODE_IP:-172.31.250.2}
UPLINK_IP=${UPLINK_IP:-172.31.250.1}
SANDBOX_IMAGE=${SANDBOX_IMAGE:-localhost/cnibox-test/busybox:1}
CLUSTER_CIDR=${CLUSTER_CIDR:-10.244.0.0/16}

# The controllers a cluster of these nodes runs: node IPAM (podCIDR), node
# lifecycle (the not-ready taint goes), the DaemonSet, service accounts
# with their tokens and kube-root-ca.crt (a pod needs both), and the garbage
# collector (kubectl delete -f: the DaemonSet's pods go with it; a deleted
# node's pods go too). CLUSTER_CONTROLLERS=* runs every default controller
# (Services' endpoints, namespaces, ...: the conformance run).
CLUSTER_CONTROLLERS=${CLUSTER_CONTROLLERS:-node-ipam-controller,node-lifecycle-controller,daemonset-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,garbage-collector-controller,pod-garbage-collector-controller}

log() { echo "node.sh: $*" >&2; }

# wait_for DESC SECONDS PID CMD...: poll CMD every 0.2 s until it succeeds;
# fail at once if process PID (the one that should answer) is gone.
wait_for() {
  local desc=$1 secs=$2 pid=$3 i
  shift 3
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { log "$desc: exited"; return 1; }
    sleep 0.2
  done
  log "$desc: not after $secs s"
  return 1
}

# shadow_sysctls binds a file holding the kubelet's value over each kernel
# tunable it would otherwise write (kubelet's setupKernelTunables).
shadow_sysctls() {
  local d=$D/sysctl kv f
  mkdir -p "$d"
  for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    f=$d/${kv%%=*}
    mkdir -p "$(dirname "$f")"
    echo "${kv#*=}" >"$f"
    mount --bind "$f" "/proc/sys/${kv%%=*}"
  done
}

# other_netns PID: PID is in another network namespace than this shell.
other_netns() { [ "$(readlink "/proc/$1/ns/net")" != "$(readlink /proc/$$/ns/net)" ]; }

# network gives the node eth0 with NODE_IP and a default route to the peer,
# which lives in a namespace of its own (a sleeping process holds it).
network() {
  ip link set lo up
  unshare --net sleep infinity &
  local up=$!
  wait_for "the uplink namespace" 10 "$up" other_netns "$up"
  ip link add eth0 type veth peer name uplink0
  ip link set uplink0 netns "$up"
  nsenter --net=/proc/$up/ns/net ip addr add "$UPLINK_IP/24" dev uplink0
  nsenter --net=/proc/$up/ns/net ip link set uplink0 up
  nsenter --net=/proc/$up/ns/net ip link set lo up
  ip addr add "$NODE_IP/24" dev eth0
  ip link set eth0 up
  ip route add default via "$UPLINK_IP"
  if [ -n "${NODE_IP6:-}" ]; then
    ip addr add "$NODE_IP6/64" dev eth0 nodad
    ip -6 route add default via "$UPLINK_IP6"
  fi
}

# SERVICE_IP is the kubernetes Service's ClusterIP (the first address of
# control-plane.sh's service range).
SERVICE_IP=10.96.0.1

# private_dirs mounts the tmpfs that keep the node's /run, /var/lib and
# /var/log its own. The machine's mounts under them (this namespace's
# private copies) are unmounted first: hidden under the tmpfs they would
# still be listed in mountinfo, and containerd, looking up the mount of a
# hostPath, takes the first of two mounts on one path: the machine's
# private /run/netns instead of the node's. /run is then made shared
# (within the node's mount namespace, which nothing outside joins), as
# every mount is on a systemd host: containerd refuses a hostPath with
# mountPropagation HostToContainer unless its source is a shared or slave
# mount (cnibox-multus.yaml's dhcp daemon sees new pod namespaces under
# /run/netns that way).
private_dirs() {
  local d m
  for d in /run /var/lib /var/log; do
    awk -v d="$d/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    mount -t tmpfs -o mode=0755 tmpfs "$d"
  done
  mount --make-shared /run
}

# cluster_inner: the underlay and the control plane (node.sh cluster).
cluster_inner() {
  private_dirs
  ip link set lo up
  # The bridge's MAC is given (02:00 and the uplink address in hex): a bridge
  # created without one takes its lowest port's MAC and changes it when that
  # node leaves, and the other nodes lose the control plane until their ARP
  # entries are probed again (TestKubeNodeCluster's node delete timed out so).
  local mac
  mac=$(printf '02:00:%02x:%02x:%02x:%02x' ${UPLINK_IP//./ })
  ip link add br0 address "$mac" type bridge
  ip addr add "$UPLINK_IP/24" dev br0
  ip link set br0 up
  ip addr add "$SERVICE_IP/32" dev lo
  if [ -n "${UPLINK_IP6:-}" ]; then
    ip addr add "$UPLINK_IP6/64" dev br0 nodad
    # the router of the routes to the nodes' IPv6 podCIDRs (the test adds them)
    sysctl -qw net.ipv6.conf.all.forwarding=1
  fi
  KCP_CONTROLLERS=$CLUSTER_CONTROLLERS KCP_BIND=0.0.0.0 KCP_ADVERTISE=$UPLINK_IP KCP_API_PORT=443 \
    KCP_SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16} \
    bash "$HERE/control-plane.sh" start "$D/cp" "$CLUSTER_CIDR" 24 >/dev/null
  "$KUBE_BIN/kube-scheduler" --kubeconfig="$D/cp/kubeconfig" --leader-elect=false --bind-address=127.0.0.1 \
    --secure-port=0 >"$D/scheduler.log" 2>&1 &
  touch "$D/up"
  sleep infinity &
  wait $!
}

# join_network plugs the node's eth0 into the cluster's bridge: the veth's
# peer goes into the cluster's namespace (fd 3, opened before unshare).
join_network() {
  local peer=$1
  ip link set lo up
  ip link add eth0 type veth peer name "$peer" netns /proc/self/fd/3
  nsenter --net=/proc/self/fd/3 ip link set "$peer" master br0 up
  ip addr add "$NODE_IP/24" dev eth0
  ip link set eth0 up
  ip route add default via "$UPLINK_IP"
  if [ -n "${NODE_IP6:-}" ]; then
    ip addr add "$NODE_IP6/64" dev eth0 nodad
    ip -6 route add default via "$UPLINK_IP6"
  fi
}

# cni_dirs makes the node's CNI dirs (DIR/host/...) its /opt/cni/bin and
# /etc/cni/net.d as well, so that a DaemonSet's hostPath volumes reach them
# on every node of a cluster without being rewritten: /opt and /etc/cni get
# a private tmpfs each (the machine's stay as they are; /etc/cni is made if
# the machine lacks it, an empty directory to mount over) with the node's
# dirs bound into it.
cni_dirs() {
  mkdir -p "$D/host/opt/cni/bin" "$D/host/etc/cni/net.d"
  [ -d /etc/cni ] || mkdir /etc/cni
  mount -t tmpfs -o mode=0755 tmpfs /opt
  mount -t tmpfs -o mode=0755 tmpfs /etc/cni
  mkdir -p /opt/cni/bin /etc/cni/net.d
  mount --bind "$D/host/opt/cni/bin" /opt/cni/bin
  mount --bind "$D/host/etc/cni/net.d" /etc/cni/net.d
}

# join_inner: a kubelet node of the cluster (node.sh join).
join_inner() {
  # the node's own host name (a host-network pod's, as on a real node)
  hostname "$NODE_NAME"
  private_dirs
  shadow_sysctls
  cni_dirs
  join_network "$PEER"
  mkdir -p "$D/containerd" "$D/kubelet"
  sed "s#https://127.0.0.1:443#https://$UPLINK_IP:443#" "$CLUSTER_DIR/cp/kubeconfig" >"$D/kubeconfig"
  start_containerd
  start_kubelet "$D/kubeconfig"
  [ -z "${KUBE_PROXY:-}" ] || start_kube_proxy
  touch "$D/up"
  sleep infinity &
  wait $!
}

containerd_conf() {
  cat <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$D/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$D/host/opt/cni/bin"
    conf_dir = "$D/host/etc/cni/net.d"
EOF
}

kubelet_conf() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$D/containerd.sock
podLogsDir: $D/pod-logs
volumePluginDir: $D/kubelet-plugins
resolvConf: ""
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
EOF
  if [ -n "${CLUSTER_DNS:-}" ]; then
    printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$CLUSTER_DNS"
  fi
}

# start_kube_proxy: kube-proxy in mode $KUBE_PROXY (nftables or iptables)
# for node $NODE_NAME. --conntrack-max-per-core=0 leaves nf_conntrack_max
# alone: it is the machine's, not the namespace's. The TCP timeouts are the
# namespace's own (the kernel keeps them per network namespace): kube-proxy
# sets its defaults, as a [sig-network] spec checks; the UDP ones it leaves.
start_kube_proxy() {
  "$KUBE_BIN/kube-proxy" --kubeconfig="$D/kubeconfig" --hostname-override="$NODE_NAME" \
    --proxy-mode="$KUBE_PROXY" --cluster-cidr="$CLUSTER_CIDR" --conntrack-max-per-core=0 --conntrack-min=0 \
    --conntrack-tcp-timeout-established=24h --conntrack-tcp-timeout-close-wait=1h --conntrack-udp-timeout=0 \
    --conntrack-udp-timeout-stream=0 --metrics-bind-address=127.0.0.1:10249 \
    --healthz-bind-address=127.0.0.1:10256 >"$D/kube-proxy.log" 2>&1 &
  wait_for "kube-proxy (see $D/kube-proxy.log)" 120 $! curl -s http://127.0.0.1:10256/healthz
}

# start_kubelet KUBECONFIG: the kubelet of node $NODE_NAME, until it answers.
start_kubelet() {
  kubelet_conf >"$D/kubelet/config.yaml"
  pod_resources
  "$KUBE_BIN/kubelet" --config="$D/kubelet/config.yaml" --kubeconfig="$1" --root-dir="$D/kubelet/root" \
    --cert-dir="$D/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP${NODE_IP6:+,$NODE_IP6}" >"$D/kubelet.log" 2>&1 &
  wait_for "the kubelet (see $D/kubelet.log)" 120 $! curl -sf http://127.0.0.1:10248/healthz
}

start_containerd() {
  containerd_conf >"$D/containerd/config.toml"
  containerd --config "$D/containerd/config.toml" >"$D/containerd.log" 2>&1 &
  wait_for "containerd (see $D/containerd.log)" 120 $! ctr --address "$D/containerd.sock" version
}

# pod_resources makes the kubelet's pod-resources socket (under its root
# dir, DIR/kubelet/root) appear where a DaemonSet mounts it from,
# /var/lib/kubelet/pod-resources (the agent's device handoff).
pod_resources() {
  mkdir -p "$D/kubelet/root/pod-resources" /var/lib/kubelet/pod-resources
  mount --bind "$D/kubelet/root/pod-resources" /var/lib/kubelet/pod-resources
}

inner() {
  private_dirs
  shadow_sysctls
  network
  mkdir -p "$D/host/opt/cni/bin" "$D/host/etc/cni/net.d" "$D/containerd" "$D/kubelet"
  if [ "${MODE:-}" = cri ]; then
    start_containerd
    touch "$D/up"
    sleep infinity &
    wait $!
    return
  fi
  KCP_CONTROLLERS=$CLUSTER_CONTROLLERS bash "$HERE/control-plane.sh" start "$D/cp" "$CLUSTER_CIDR" 24 >/dev/null
  local kc=$D/cp/kubeconfig
  "$KUBE_BIN/kube-scheduler" --kubeconfig="$kc" --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 \
    >"$D/scheduler.log" 2>&1 &
  start_containerd
  start_kubelet "$kc"
  touch "$D/up"
  sleep infinity &
  wait $!
}

# cleanup removes the cgroups of the node's containers (runc's, named by the
# task directories in containerd's state) and the k8s.io parents run
# created, once they are empty. The namespaces, mounts and processes are
# gone with the namespace's init.
cleanup() {
  local d=$1 id cg i
  for id in $(ls "$d/containerd/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null); do
    for cg in /sys/fs/cgroup/*/k8s.io/"$id"; do
      [ -d "$cg" ] || continue
      # a killed container's cgroup empties once its processes are reaped
      for i in $(seq 1 50); do
        rmdir "$cg" 2>/dev/null && break
        sleep 0.2
      done
      [ ! -d "$cg" ] || log "cleanup: cannot remove $cg: $(cat "$cg/cgroup.procs" 2>/dev/null | wc -l) processes in it"
    done
  done
  if [ -f "$d/cgroup-parents" ]; then
    while read -r cg; do
      rmdir "$cg" 2>/dev/null || true # in use by another runtime: not ours to remove
    done <"$d/cgroup-parents"
  fi
}

# start MODE DIR: the node (or cluster) in new network, mount and PID
# namespaces, with this script's inner function for MODE.
start() {
  local mode=$1 d
  D=$(cd "$2" && pwd)
  [ "$mode" = cri ] || : "${KUBE_BIN:?KUBE_BIN: the directory of kube-scheduler and kubelet}"
  # runc puts each container in /k8s.io/ID of every cgroup hierarchy; note
  # the k8s.io parents that do not exist yet, for cleanup.
  for d in /sys/fs/cgroup/*/; do
    [ -d "${d}k8s.io" ] || echo "${d}k8s.io"
  done >"$D/cgroup-parents"
  exec unshare --net --mount --pid --uts --fork --kill-child --mount-proc --propagation private \
    env D="$D" KUBE_BIN="${KUBE_BIN:-}" MODE="$mode" bash "$0" inner
}

case "${1:-}" in
cluster) start cluster "$2" ;;
join)
  : "${UNDERLAY:?UNDERLAY: the cluster's network namespace (/proc/PID/ns/net)}" "${CLUSTER_DIR:?CLUSTER_DIR: node.sh cluster's DIR}"
  # the veth's peer in the cluster's namespace: a name per node
  PEER=${PEER:-n-${NODE_IP##*.}}
  export PEER CLUSTER_DIR
  exec 3<"$UNDERLAY"
  start join "$2"
  ;;
run | cri) start "$1" "$2" ;;
inner)
  case "$MODE" in
  cluster) cluster_inner ;;
  join) join_inner ;;
  *) inner ;;
  esac
  ;;
cleanup) cleanup "$(cd "$2" && pwd)" ;;
*) sed -n '2,62p' "$0"; exit 2 ;;
esac
