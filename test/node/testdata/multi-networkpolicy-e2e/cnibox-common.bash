# The common.bash that the anchor's .bats files load (`load "common"`) when
# test/node's TestKubeMNPE2E runs them: the harness copies this file over
# the anchor's common.bash in the run's temporary copy of the tests. It
# defines what theirs does, with the same answers: kubewait_timeout, and
# get_net1_ip / get_net1_ip6 NAMESPACE POD, the pod's global IPv4 / IPv6
# address on net1. Theirs reads `ip -j a show` with jq; the harness's pod
# image has busybox's ip, which prints no JSON, so this reads `ip -o`.
#
# An address, once found, is kept in the bats run's file directory
# ($BATS_FILE_TMPDIR) for the rest of that run: the tests' setup() asks
# for every pod's address before each test, a kubectl exec each, and a
# pod's address does not change while its file runs. No address (before
# the file's setup test created the pods) is never kept.

kubewait_timeout=300s

# net1_addr 4|6 NAMESPACE POD
net1_addr() {
	local keep="${BATS_FILE_TMPDIR:-}/net1-$1-$2-$3" addr
	if [ -n "${BATS_FILE_TMPDIR:-}" ] && [ -s "$keep" ]; then
		cat "$keep"
		return
	fi
	addr=$(kubectl exec -n "$2" "$3" -- ip -o "-$1" addr show dev net1 2>/dev/null |
		awk '/ scope global/ { sub("/.*", "", $4); print $4; exit }')
	if [ -n "$addr" ] && [ -n "${BATS_FILE_TMPDIR:-}" ]; then
		echo "$addr" >"$keep"
	fi
	echo "$addr"
}

get_net1_ip() {
	if [ "$#" == "2" ]; then
		net1_addr 4 "$1" "$2"
	else
		echo "unknown ip $1"
	fi
}

get_net1_ip6() {
	if [ "$#" == "2" ]; then
		net1_addr 6 "$1" "$2"
	else
		echo "unknown ip $1"
	fi
}
