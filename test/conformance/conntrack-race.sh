#!/usr/bin/env bash
# conntrack-race.sh MAKELOG [OUT]: the cause of the Conntrack spec "proxy
# implementation should not be vulnerable to the invalid conntrack state
# bug" failing now and then, shown on a running `make test-conformance`
# cluster (any configuration) whose `go test -v` output is MAKELOG (the
# line that starts the e2e names the control plane's process and
# kubeconfig; the script waits for it).
#
# The spec's server (the regression-issue-74839 image) keeps the pending
# handshake in a map keyed by the client's IP alone and takes the next ACK
# from that IP, of whichever connection, for that handshake's: the
# out-of-window packet it then sends carries another connection's ACK
# number. Conntrack checks the ACK before the SEQ: such a packet is
# INVALID ("ACK is over upper bound") about half the time, where the
# spec's own packet is only ignored ("SEQ is under lower bound").
# kube-proxy's nftables mode lets INVALID packets through, so that one
# reaches the client without the Service's reverse NAT and the client
# resets: the server logs "ERROR: RST received" and the spec fails. The
# spec's client opens a connection every 2 s and the server closes each
# after 10 s, so a closing ACK meets a new handshake now and then (under
# load: about 1 handshake in 190 on this machine).
#
# Here the race is made certain: the same server and Service as the spec's
# in namespace ct-race, its pod's replies slowed by a token bucket on its
# eth0 (32 kbit/s: a SYN-ACK waits behind the others, as on a loaded node),
# and a client on another node that opens 20 connections at once, five
# times. It prints the server's count of established connections and of
# ERROR lines, and leaves the server's log and the pods in OUT (default
# bin/conformance/conntrack-race).
set -euo pipefail
log=$1 out=${2:-bin/conformance/conntrack-race} ns=ct-race
kubectl=${CNIBOX_KUBE_BIN:-$HOME/.cache/cnibox-kube/v1.34.2}/kubectl
mkdir -p "$out"
until line=$(grep -m1 -o 'nsenter -t [0-9]* -n .*--kubeconfig=[^ ]*' "$log"); do sleep 5; done
cp=$(echo "$line" | awk '{print $3}') kc=$(echo "$line" | grep -o 'kubeconfig=[^ ]*' | cut -d= -f2)
k() { nsenter -t "$cp" -n "$kubectl" --kubeconfig="$kc" "$@"; }
read -r -a nodes <<<"$(k get nodes -o jsonpath='{.items[*].metadata.name}')"
k create namespace $ns
k -n $ns apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: boom-server, labels: {app: boom-server}}
spec:
  nodeName: ${nodes[0]}
  containers:
  - name: boom-server
    image: registry.k8s.io/e2e-test-images/regression-issue-74839:1.2
    ports: [{containerPort: 9000}]
    env:
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: POD_IPS, valueFrom: {fieldRef: {fieldPath: status.podIPs}}}
    securityContext: {capabilities: {add: [NET_RAW]}}
---
apiVersion: v1
kind: Service
metadata: {name: boom-server}
spec: {selector: {app: boom-server}, ports: [{protocol: TCP, port: 9000}]}
EOF
k -n $ns wait --for=condition=Ready pod/boom-server --timeout=180s
sip=$(k -n $ns get pod boom-server -o jsonpath='{.status.podIP}')
slowed=
for p in $(pgrep -f /regression-issue-74839); do
  if nsenter -t "$p" -n ip -4 -o addr show dev eth0 2>/dev/null | grep -q " $sip/"; then
    nsenter -t "$p" -n tc qdisc add dev eth0 root tbf rate 32kbit burst 100 limit 30000
    slowed=$p
  fi
done
[ -n "$slowed" ] || { echo "conntrack-race.sh: no process of the server pod $sip" >&2; exit 1; }
k -n $ns apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: burst}
spec:
  nodeName: ${nodes[1]}
  restartPolicy: Never
  containers:
  - name: burst
    image: registry.k8s.io/e2e-test-images/busybox:1.37.0-1
    command: [sh, -c, 'sleep 5; for r in 1 2 3 4 5; do for i in \$(seq 20); do nc \$BOOM_SERVER_SERVICE_HOST 9000 </dev/null & done; sleep 3; done; sleep 15']
EOF
k -n $ns wait --for=condition=Ready pod/burst --timeout=180s
k -n $ns wait --for=jsonpath='{.status.phase}'=Succeeded pod/burst --timeout=180s
k -n $ns get pods -o wide >"$out/pods"
k -n $ns logs boom-server >"$out/boom-server.log"
k delete namespace $ns --wait=false
echo "conntrack-race: server $sip on ${nodes[0]}, client on ${nodes[1]}:" \
  "$(grep -c 'connection established' "$out/boom-server.log") connections established," \
  "$(grep -c ERROR "$out/boom-server.log") ERROR lines (RSTs from the client)"
