# cnibox: every CNI plugin a node needs, in one static binary.
SHELL      := /bin/bash
GO         ?= go
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PREFIX     ?= /usr/local
CNI_BIN_DIR ?= /opt/cni/bin
DESTDIR    ?=
# --version's release (a v* tag's git describe, else internal/buildinfo's v0.0.0-dev) and commit
RELEASE    ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null)
COMMIT     ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c-dirty; })
LDFLAGS    := -s -w -X main.version=$(VERSION) -X github.com/cnibox/cnibox/internal/buildinfo.Release=$(RELEASE) \
	-X github.com/cnibox/cnibox/internal/buildinfo.Commit=$(COMMIT)
# urfave/cli's man/markdown generator (blackfriday) costs 0.5 ms of init per exec: left out.
GOTAGS     := urfave_cli_no_docs
GOTEST_FLAGS ?= -count=1 -timeout 14m
# Debian packages the tests drive: the kernel tools for test namespaces, podman
# with runc for the end-to-end test, the reference plugins to compare with,
# containerd for the image test (deploy/image), docker-registry for its push
# test (a registry on loopback), qemu-user-static to run the arm64 build
# (no binfmt handler is registered: the test calls qemu-aarch64-static).
TEST_DEBS  := iproute2 nftables iptables ipset iperf3 podman runc busybox-static containernetworking-plugins conntrack etcd-server containerd openssl curl dnsmasq-base docker-registry qemu-user-static
# firewalld for the firewall role's firewalld tests (they run it on a private
# D-Bus in their own namespaces), only where systemd is not PID 1: there,
# installing Debian's package would start firewalld on the machine itself.
# Elsewhere those tests skip unless firewalld is installed by hand.
TEST_DEBS  += $(if $(filter systemd,$(shell cat /proc/1/comm 2>/dev/null)),,firewalld)

.PHONY: build install test unit check e2e demo deps bench bench-scale bench-policy bench-services bench-lb lint clean fuzz soak

# BINDIR: where build writes the binaries (make image builds each of
# IMAGE_ARCHES into bin/linux-ARCH with GOARCH set).
BINDIR ?= bin
# Each binary is linked beside its place and renamed over it: a test or a
# node running bin/cnibox while another make builds (.ci/run's lanes) sees
# the old file or the new one, never a half-written one.
gobuild = t=$(BINDIR)/.$(1).$$$$; CGO_ENABLED=0 $(GO) build -trimpath $(2) -ldflags '$(LDFLAGS)' -o $$t $(3) && mv -f $$t $(BINDIR)/$(1)
build:
	@mkdir -p $(BINDIR)
	$(call gobuild,cnibox,-tags $(GOTAGS),.)
	$(call gobuild,cnibox-agent,-tags nokube,./cmd/cnibox-agent)
	$(call gobuild,cnibox-agent-kube,,./cmd/cnibox-agent)
	$(call gobuild,cnibox-dhcp,,./cmd/cnibox-dhcp)

install: build
	install -D -m 0755 bin/cnibox $(DESTDIR)$(PREFIX)/bin/cnibox
	install -D -m 0755 bin/cnibox-agent $(DESTDIR)$(PREFIX)/bin/cnibox-agent
	install -D -m 0755 bin/cnibox-agent-kube $(DESTDIR)$(PREFIX)/bin/cnibox-agent-kube
	install -D -m 0755 bin/cnibox-dhcp $(DESTDIR)$(PREFIX)/bin/cnibox-dhcp
	mkdir -p $(DESTDIR)$(CNI_BIN_DIR)
	for r in $$(bin/cnibox roles); do ln -sfn $(PREFIX)/bin/cnibox $(DESTDIR)$(CNI_BIN_DIR)/$$r; done

# image: bin/cnibox-image.tar, an OCI image archive holding one image index
# with an image per platform of IMAGE_ARCHES (linux/amd64, linux/arm64,
# linux/arm/v7, linux/ppc64le, linux/s390x: flannel's list but riscv64,
# which is not a release architecture of Debian 12, whose static busybox
# the image needs), each of the four static binaries built with GOARCH
# (GOARM=7 for arm) in /usr/local/bin, Debian's static busybox for that
# architecture in /bin and flannel's paths (/flannel, /opt/bin/flanneld,
# /opt/bin/install-conf: kube-flannel.yml runs on it); a Docker-style
# manifest.json too, of the first platform's image (ctr images import
# picks the host's platform from the index, podman load takes the
# manifest.json). The index is named $(IMAGE):$(VERSION). Beside it
# bin/cnibox.yaml, bin/cnibox-multus.yaml and bin/cnibox-dhcp.yaml,
# deploy/kubernetes' manifests naming the index by tag and digest
# (NAME:TAG@sha256:..., a name the archive gives it too: a node of any of
# the platforms runs its own image of those bytes), and
# bin/cnibox-values.yaml, that image as deploy/helm/cnibox's values (helm
# install -f bin/cnibox-values.yaml). No registry or container daemon; a
# commit gives the same bytes every time (every mtime is the commit's
# time). See docs/deploy.md.
IMAGE       ?= ghcr.io/cnibox/cnibox
IMAGE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_ARCHES ?= amd64 arm64 arm ppc64le s390x
# The OCI platform of a Go architecture (arm is GOARM=7: arm/v7).
platform = linux/$(1)$(if $(filter arm,$(1)),/v7)
# Each image's /bin/busybox: Debian's busybox-static at this version for
# that architecture (deploy/image/busybox.sh: apt-get download into
# ~/.cache/cnibox-busybox, once); a version the archive lacks stops make
# image (a point release of bookworm replaces it: bump it then).
BUSYBOX_DEB ?= 1:1.35.0-4+deb12u1+b1
.PHONY: image image-bins busybox
image: image-bins
	$(GO) run ./deploy/image -o bin/cnibox-image.tar -ref $(IMAGE):$(VERSION) -epoch $(IMAGE_EPOCH) \
		-manifest deploy/kubernetes/cnibox.yaml -manifest-out bin/cnibox.yaml \
		-manifest deploy/kubernetes/cnibox-multus.yaml -manifest-out bin/cnibox-multus.yaml \
		-manifest deploy/kubernetes/cnibox-dhcp.yaml -manifest-out bin/cnibox-dhcp.yaml \
		-values-out bin/cnibox-values.yaml \
		$(foreach a,$(IMAGE_ARCHES),-platform $(call platform,$(a))=bin/linux-$(a))

# image-bins: bin/linux-ARCH/ for each of IMAGE_ARCHES: make build's four
# binaries for that architecture and its busybox.
image-bins: build busybox
	@set -e; for a in $(IMAGE_ARCHES); do \
		echo "build bin/linux-$$a (GOARCH=$$a)"; \
		GOOS=linux GOARCH=$$a GOARM=7 $(MAKE) -s --no-print-directory build BINDIR=bin/linux-$$a VERSION=$(VERSION); \
	done

busybox:
	bash deploy/image/busybox.sh '$(BUSYBOX_DEB)' bin $(IMAGE_ARCHES)

# push: make image's archive, the one image index of every platform, to
# $(IMAGE):$(VERSION) in a registry, with go-containerregistry in the build
# tool (go run ./deploy/image push): no container daemon; credentials from
# the Docker config (~/.docker/config.json), as docker/podman login write
# it. The index and its image manifests keep their digests: bin/cnibox.yaml's
# NAME:TAG@sha256:... resolves in the registry, each node pulling its
# platform's image. docs/deploy.md.
.PHONY: push
push: image
	$(GO) run ./deploy/image push -ref $(IMAGE):$(VERSION) bin/cnibox-image.tar

# deps installs what the tests need (root, Debian). Packages already present are skipped.
deps:
	@missing=$$(for p in $(TEST_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	$(GO) mod download

# test: unit, kernel integration (private namespaces) and end-to-end (libcni,
# podman), with the race detector (the plugin binaries run without it); then
# the fuzz targets (make fuzz, a short run). Its budget is 12 minutes on 2
# cores with warm caches (docs/reliability.md, The suites' time). -p 4: four
# test binaries (or builds) at once on 2 cores, because much of the suite
# waits (on the kernel's timers, etcd, podman, child processes) and with -p
# 2 a third of the run had no test running and another third one. make
# fuzz runs beside go test, one target at a time, for the same reason (its
# output a block per target, as each ends): the run fails if either does.
# helm's first build (deploy/helm/helm.sh: ~6 minutes on a fresh, loaded
# machine) starts beside them too, so that deploy/kubernetes' chart tests
# wait on its lock for a build already under way instead of making all of
# it inside their package's 14-minute timeout (a fresh CI run at 185cdf7
# timed out there); with helm in the cache it returns at once.
# TEST_VET=0 leaves go vet out, and go test's own vet of each package and
# fuzz target (-vet=off): .ci/run, where make lint runs go vet beside it
# (the first run's vet compiles every package a second time: minutes).
TEST_VET ?= 1
VETFLAG = $(if $(filter 0,$(TEST_VET)),-vet=off)
test: deps build
	@if [ "$(TEST_VET)" != 0 ]; then echo "$(GO) vet ./..."; $(GO) vet ./...; fi
	CGO_ENABLED=0 $(GO) build -tags faultpoints -o bin/cnibox-fault .
	@$(MAKE) -s --no-print-directory fuzz FUZZ_JOBS=1 & fuzz=$$!; \
	bash deploy/helm/helm.sh >/dev/null & helm=$$!; trap 'kill $$fuzz $$helm 2>/dev/null || true' EXIT; \
	echo "go test $(GOTEST_FLAGS) $(VETFLAG) -race -p 4 ./... (make fuzz and helm's first build beside it)"; \
	CNIBOX_BIN=$(CURDIR)/bin/cnibox CNIBOX_FAULT_BIN=$(CURDIR)/bin/cnibox-fault $(GO) test $(GOTEST_FLAGS) $(VETFLAG) -race -p 4 ./...; tests=$$?; \
	wait $$fuzz; fuzzed=$$?; wait $$helm; trap - EXIT; \
	[ $$fuzzed = 0 ] || echo "make fuzz failed (its target's output above)"; \
	[ $$tests = 0 ] && [ $$fuzzed = 0 ]

unit:
	$(GO) test -count=1 ./cniplug/... ./store/... ./ipam/... ./roles/...

# check: the first run, as a normal user (no root, no kernel, no apt-get):
# go vet (also -tags kube, so the Kubernetes tests compile), staticcheck and
# every test that needs neither root nor a kernel (-short skips the ones that
# build helm, images or foreign plugins). Root runs the same set:
# CNIBOX_TEST_UNPRIVILEGED=1 makes internal/testenv answer "not root", so
# the root and kernel tests skip. Nothing is read from or written to the
# machine's paths (every test has a scratch directory of its own), so it
# passes on a node where containerd, CRI-O or podman have run. Each step
# says what it does first: the first go vet and staticcheck compile for
# minutes without a word. Times on 2 cores: README.
check:
	@echo "check: go vet ./... (the first run compiles every package: minutes)"
	$(GO) vet ./...
	@echo "check: go vet -tags kube ./..."
	$(GO) vet -tags kube ./...
	@echo "check: staticcheck (the first run fetches and compiles it, then checks every package: minutes)"
	$(GO) run $(STATICCHECK) ./...
	@echo "check: go test -short: the tests that need neither root nor a kernel (a line per package)"
	CNIBOX_TEST_UNPRIVILEGED=1 $(GO) test -short -count=1 ./...
	@echo "check: passed"

e2e: deps build
	CNIBOX_BIN=$(CURDIR)/bin/cnibox $(GO) test $(GOTEST_FLAGS) -v ./test/...

# test-kube: the overlay's Kubernetes backend against a real control plane
# (test/kube/control-plane.sh; its first build takes ~8 minutes), the
# policy watcher against one (both ClusterNetworkPolicy CRDs), the
# agent's one informer cache (one watch per kind, also with the Services
# proxy, the DNS resolvers and the LoadBalancer IPAM on it), the
# LoadBalancer IPAM (allocation, failover, the pool admission policy) and
# its announcement on the LAN (one announcer, failover), then
# test-rbac, test-whereabouts (all of these: test-kube-api, on an API
# server of the host's loopback, one at a time) and test-node (kubelets,
# each cluster in namespaces of its own: .ci/run runs it beside
# test-kube-api).
.PHONY: test-kube test-kube-api
test-kube: test-kube-api
	$(MAKE) test-node

test-kube-api: deps build
	bash test/kube/control-plane.sh build
	CNIBOX_BIN=$(CURDIR)/bin/cnibox $(GO) test $(GOTEST_FLAGS) -tags kube -run TestKube -v ./test/overlay/
	$(GO) test -count=1 -p 1 -tags kube -run 'TestWatchKube' -v ./agent/policy/ ./agent/mnp/
	$(GO) test -count=1 -tags kube -run 'TestKubeEgress$$|TestKubeEgressScopeWarning|TestKubeEgressForwarding6|TestKubeEgressPolicyIPv6Only' -v ./agent/egress/
	$(GO) test -count=1 -tags kube -run 'TestPolicyAdmitKube' -v ./roles/bridge/
	$(GO) test -count=1 -tags kube -run 'TestKubeOneWatch$$|TestKubeOneServiceWatch' -v ./agent/cluster/
	$(GO) test -count=1 -tags kube -run 'TestKubeLBIPAM|TestKubePoolPolicy' -v ./agent/lbipam/
	$(GO) test -count=1 -tags kube -run '^TestKubeLBAnnounce$$' -v ./agent/lbannounce/
	$(MAKE) test-rbac
	$(MAKE) test-whereabouts

# bench-egress: TestKubeEgress and TestKubeEgress6 (an IPv6 address) with
# 20 deaths of the holder node each (its agent SIGKILLed and its uplink
# down), the p50/p99 from a death to a pod's first connection from the
# egress address (docs/benchmarks.md, "Egress failover"); about 4 minutes.
.PHONY: bench-egress
bench-egress: deps
	bash test/kube/control-plane.sh build
	EGRESS_KILLS=20 $(GO) test -count=1 -timeout 20m -tags kube -run 'TestKubeEgress6?$$' -v ./agent/egress/

# bench-lb: LoadBalancer Services (issue 64): the allocation by the real
# agent's --lb-ipam on the test API server at 1,000 Services (a backlog at
# the agent's start, 1,000 created at once, one at a time p50/p99, the
# leader SIGKILLed; test/benchlb, BENCH_LB_ARGS passes flags), then the
# announcers' failover over 20 deaths each for IPv4 and IPv6
# (TestKubeLBAnnounce, LB_KILLS, LB_KILLS6). docs/benchmarks.md; about 15
# minutes. Not in make test or CI.
.PHONY: bench-lb
bench-lb: deps build
	bash test/kube/control-plane.sh build
	$(GO) run ./test/benchlb -agent-kube $(CURDIR)/bin/cnibox-agent-kube -kcp $(CURDIR)/test/kube/control-plane.sh $(BENCH_LB_ARGS)
	LB_KILLS=20 LB_KILLS6=20 flock /tmp/cnibox-kube.lock $(GO) test -count=1 -timeout 30m -tags kube -run '^TestKubeLBAnnounce$$' -v ./agent/lbannounce/

# test-rbac: the manifests' RBAC (kubectl auth can-i as the agents' service
# accounts) and admission policy (tokens bound to agent pods) on a real API
# server (docs/security.md); about a minute.
.PHONY: test-rbac
test-rbac:
	kube=$$(bash test/kube/control-plane.sh build kubectl) && \
	CNIBOX_KUBE_BIN=$$kube $(GO) test -count=1 -timeout 10m -tags kube -run TestKube -v ./test/rbac/

# test-whereabouts: the whereabouts role side by side with whereabouts
# v0.9.4's own binary (built once into the user's cache) on a real control
# plane, three agents and 660 pods; part of test-kube (about 3 minutes).
.PHONY: test-whereabouts
test-whereabouts: deps build
	bash test/kube/control-plane.sh build
	CNIBOX_BIN=$(CURDIR)/bin/cnibox $(GO) test -count=1 -timeout 40m -tags kube -run TestKube -v ./test/whereabouts/

# test-node: the real-node tests (test/node): a one-node cluster with a real
# kubelet and containerd in private namespaces (test/kube/node.sh), the
# image of make image imported, bin/cnibox.yaml applied with kubectl; nodes
# Ready, pods on cnibox, a second network, a rollout, kubectl delete. Then
# three kubelet nodes on one control plane: flannel's own kube-flannel.yml
# with a real flanneld (built once from the module proxy into
# ~/.cache/cnibox-flannel), moved to cnibox's image and back with pings
# running; cnibox's manifest on three nodes (agent restart, node deletion,
# FORWARD policy DROP); bin/cnibox-multus.yaml over the reference bridge on
# one node (a macvlan and a host-device secondary, then kubectl delete -f);
# cnibox's Helm chart on one node with a real helm (deploy/helm/helm.sh
# builds it once into ~/.cache/cnibox-helm), its image pushed to a
# docker-registry on the node's loopback and pulled by the kubelet: install,
# upgrade, rollback and uninstall with pings running; flannel's own chart
# moved to cnibox's image and back with helm upgrade on three nodes.
# It also builds kube-scheduler, kubelet and kubectl
# into the control plane's cache; times in docs/deploy.md.
.PHONY: test-kube test-node
test-node: deps image
	kube=$$(bash test/kube/control-plane.sh build kube-scheduler kubelet kubectl) && helm=$$(bash deploy/helm/helm.sh) && \
	CNIBOX_KUBE_BIN=$$kube CNIBOX_HELM=$$helm CNIBOX_IMAGE_TAR=$(CURDIR)/bin/cnibox-image.tar CNIBOX_MANIFEST=$(CURDIR)/bin/cnibox.yaml \
		CNIBOX_MULTUS_MANIFEST=$(CURDIR)/bin/cnibox-multus.yaml \
		$(GO) test -count=1 -timeout 40m -tags kube -run TestKubeNode -v ./test/node/

# test-conformance: Kubernetes' own [sig-network] e2e specs (v1.34.2) on
# three real kubelet nodes with kube-proxy (nftables) and CoreDNS, once per
# configuration: the anchor (flannel v0.28.9 with the reference plugins
# v1.9.1), cnibox on vxlan and on host-gw (bin/cnibox.yaml), and cnibox on
# a dual-stack cluster (its [Feature:IPv6DualStack] specs); netpol and
# netpol-anchor (not in the default list) run the NetworkPolicy suite on
# cnibox-vxlan and on the anchor with kube-router v2.1.0's policy
# controller (test/internal/kuberouter builds it once); services and
# services-anchor (not in the default list) run the Services, Conntrack,
# KubeProxy and Networking specs with cnibox's Services proxy and no
# kube-proxy (the chart's serviceProxy.enabled, rendered by a real helm),
# services also the LoadBalancers specs with cnibox's LoadBalancer IPAM and
# announcements and a pool on the nodes' LAN, and on cnibox-vxlan with
# kube-proxy (nftables). The e2e
# binary, agnhost and CoreDNS are built once from the module proxy
# (test/conformance/build.sh), the images written from them and Debian's
# tools. JUnit reports in bin/conformance/CONFIG/; the last lines are the
# counts (docs/conformance.md). CONFORMANCE_CONFIGS picks configurations,
# CONFORMANCE_FOCUS / CONFORMANCE_SKIP the specs (ginkgo regexps).
CONFORMANCE_CONFIGS ?= anchor cnibox-vxlan cnibox-hostgw dualstack
# spaces or commas between them (CONFORMANCE_CONFIGS=netpol,netpol-anchor)
comma := ,
conformance_configs = $(subst $(comma), ,$(CONFORMANCE_CONFIGS))
CONFORMANCE_DEBS := wget netcat-openbsd bind9-dnsutils iproute2 curl
# deps-conformance: the Debian tools the conformance images take (.ci/run
# installs them before its parallel part, so no two apt-get run at once).
.PHONY: test-conformance deps-conformance
deps-conformance:
	@missing=$$(for p in $(CONFORMANCE_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	[ -z "$$missing" ] || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null)

test-conformance: deps deps-conformance image
	kube=$$(bash test/kube/control-plane.sh build kube-scheduler kubelet kubectl kube-proxy) && \
	helm=$$(bash deploy/helm/helm.sh) && \
	tools=$$(bash test/conformance/build.sh) && rc=0 && \
	for c in $(conformance_configs); do \
		rm -f bin/conformance/$$c/summary; \
		CNIBOX_CONFORMANCE=$$c CNIBOX_CONFORMANCE_TOOLS=$$tools CNIBOX_CONFORMANCE_REPORT=$(CURDIR)/bin/conformance/$$c \
		CNIBOX_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' CNIBOX_CONFORMANCE_SKIP='$(CONFORMANCE_SKIP)' \
		CNIBOX_KUBE_BIN=$$kube CNIBOX_HELM=$$helm CNIBOX_IMAGE_TAR=$(CURDIR)/bin/cnibox-image.tar CNIBOX_MANIFEST=$(CURDIR)/bin/cnibox.yaml \
			$(GO) test -count=1 -timeout 120m -tags kube -run 'TestKubeConformance$$' -v ./test/node/ || rc=1; \
	done; \
	for c in $(conformance_configs); do cat bin/conformance/$$c/summary 2>/dev/null || echo "conformance $$c: no result"; done; \
	exit $$rc

# test-cnp: the ClusterNetworkPolicy conformance profile of
# sigs.k8s.io/network-policy-api v0.3.0 (the module's own suite, built once
# from the module proxy by test/conformance/build.sh cnp) on the three-node
# harness of test-conformance, cnibox with --cluster-network-policies, its
# chart's RBAC and the module's experimental CRD (the standard fields and
# the nodes peer, whose tests run). Report in bin/conformance/cnp/;
# the last line is the counts (docs/conformance.md).
.PHONY: test-cnp
test-cnp: deps deps-conformance image
	rc=0; kube=$$(bash test/kube/control-plane.sh build kube-scheduler kubelet kubectl kube-proxy) && \
	tools=$$(for b in agnhost regression coredns; do bash test/conformance/build.sh $$b >/dev/null || exit 1; done; \
		bash test/conformance/build.sh cnp) && \
	rm -f bin/conformance/cnp/summary && \
	CNIBOX_CONFORMANCE_TOOLS=$$tools CNIBOX_CONFORMANCE_REPORT=$(CURDIR)/bin/conformance/cnp \
	CNIBOX_KUBE_BIN=$$kube CNIBOX_IMAGE_TAR=$(CURDIR)/bin/cnibox-image.tar CNIBOX_MANIFEST=$(CURDIR)/bin/cnibox.yaml \
		$(GO) test -count=1 -timeout 60m -tags kube -run 'TestKubeCNPConformance$$' -v ./test/node/ || rc=1; \
	cat bin/conformance/cnp/summary 2>/dev/null || echo "conformance cnp: no result"; \
	exit $$rc

# test-mnp: the MultiNetworkPolicy e2e traffic tests of
# k8snetworkplumbingwg/multi-networkpolicy-iptables (its e2e/tests/*.bats
# at cbf2b11, run with Debian's bats; not in the repository: MNP_E2E names
# their directory, test/node/testdata/multi-networkpolicy-e2e/README.md)
# on one kubelet node: cnibox from bin/cnibox.yaml with secondary networks
# and MultiNetworkPolicy turned on as docs/deploy.md says (the CRDs,
# multi-network-policies.yaml and its patch); the tests that check the
# anchor's own iptables rules and bond-cni.bats are left out. Report in
# bin/conformance/mnp/; the last line is the counts (docs/conformance.md).
MNP_E2E ?=
MNP_DEBS := bats
.PHONY: test-mnp
test-mnp: deps image
	@missing=$$(for p in $(MNP_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	[ -z "$$missing" ] || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null)
	rc=0; kube=$$(bash test/kube/control-plane.sh build kube-scheduler kubelet kubectl) && \
	rm -f bin/conformance/mnp/summary && \
	CNIBOX_MNP_E2E=$(if $(MNP_E2E),$(abspath $(MNP_E2E))) CNIBOX_CONFORMANCE_REPORT=$(CURDIR)/bin/conformance/mnp \
	CNIBOX_KUBE_BIN=$$kube CNIBOX_IMAGE_TAR=$(CURDIR)/bin/cnibox-image.tar CNIBOX_MANIFEST=$(CURDIR)/bin/cnibox.yaml \
		$(GO) test -count=1 -timeout 30m -tags kube -run 'TestKubeMNPE2E$$' -v ./test/node/ || rc=1; \
	cat bin/conformance/mnp/summary 2>/dev/null || echo "mnp e2e: no result"; \
	exit $$rc

# soak-cluster: the cluster soak (not in CI, not in make test): the
# conformance cluster (three kubelet nodes, kube-proxy, CoreDNS, cnibox from
# bin/cnibox.yaml wrapped in multi with a whereabouts secondary, a
# NetworkPolicy) under a churn of pod creates and deletes (target 5/s) for
# DURATION while a seeded fault injector kills agents, restarts containerd,
# stops the API server, kills etcd and reboots nodes, one at a time;
# invariants checked all along, leftovers at the end (docs/reliability.md).
# SEED repeats a run; the log and summary go to bin/soak/.
DURATION ?= 10m
SEED ?=
.PHONY: soak-cluster
soak-cluster: deps image
	kube=$$(bash test/kube/control-plane.sh build kube-scheduler kubelet kubectl kube-proxy) && \
	tools=$$(bash test/conformance/build.sh) && \
	CNIBOX_SOAK_DURATION=$(DURATION) CNIBOX_SOAK_SEED=$(SEED) CNIBOX_SOAK_REPORT=$(CURDIR)/bin/soak \
	CNIBOX_CONFORMANCE_TOOLS=$$tools CNIBOX_KUBE_BIN=$$kube CNIBOX_IMAGE_TAR=$(CURDIR)/bin/cnibox-image.tar \
	CNIBOX_MANIFEST=$(CURDIR)/bin/cnibox.yaml \
		$(GO) test -count=1 -timeout 90m -tags kube -run 'TestSoakCluster$$' -v ./test/node/

# soak-reboot: the soak's node reboot alone, on one node, with pods deleted
# before, during and after it: afterwards the node's store holds records of
# the pods that exist only (a few minutes; not in CI).
.PHONY: soak-reboot
soak-reboot: deps image
	kube=$$(bash test/kube/control-plane.sh build kube-scheduler kubelet kubectl kube-proxy) && \
	tools=$$(bash test/conformance/build.sh) && \
	CNIBOX_CONFORMANCE_TOOLS=$$tools CNIBOX_KUBE_BIN=$$kube CNIBOX_IMAGE_TAR=$(CURDIR)/bin/cnibox-image.tar \
	CNIBOX_MANIFEST=$(CURDIR)/bin/cnibox.yaml \
		$(GO) test -count=1 -timeout 30m -tags kube -run 'TestSoakReboot$$' -v ./test/node/

# test-kernel: the tests that touch the kernel, run as root inside a qemu VM
# (TCG) booted on Debian's newest linux-image-cloud-amd64 (KERNEL=/boot/vmlinuz-VER
# for another), with every network module loaded; TEST_KERNEL_ARGS='-run X'.
.PHONY: test-kernel
test-kernel: deps build
	$(GO) run ./test/kernel -cnibox $(CURDIR)/bin/cnibox -kernel '$(KERNEL)' $(TEST_KERNEL_ARGS)

# demo: builds bin/cnibox only (not the agents), then test/demo.sh; KEEP=1
# leaves the node namespace and pods up and prints how to explore them.
demo:
	@[ "$$(id -u)" = 0 ] || { echo "make demo: run it as root (sudo make demo): it makes network namespaces, links and nftables tables (in namespaces of its own; the machine's are left alone). make check is the test a normal user runs." >&2; exit 1; }
	@command -v ip >/dev/null && [ -x /bin/busybox ] || (echo "demo: installing iproute2 busybox-static"; apt-get update -qq && apt-get install -y -qq iproute2 busybox-static >/dev/null)
	@echo "demo: building bin/cnibox (the first build compiles every dependency: minutes; later ones take seconds)"
	CGO_ENABLED=0 $(GO) build -trimpath -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o bin/cnibox .
	KEEP='$(KEEP)' ./test/demo.sh

# bench: ours vs the reference plugins (REF=upstream builds v1.9.1 once), in a
# private network namespace; BENCH_ARGS='-n 20 -rounds 1' for a quick run.
bench: build
	CNIBOX_BIN=$(CURDIR)/bin/cnibox $(GO) run ./test/bench $(BENCH_ARGS)
	@if [ -z "$(BENCH_ARGS)" ]; then $(MAKE) bench-whereabouts; else echo "make bench: BENCH_ARGS given, bench-whereabouts skipped"; fi

# bench-whereabouts: the whereabouts role's ADD against host-local's and
# whereabouts v0.9.4's own (built once into the user's cache) on a real
# control plane with three agents; BENCH_WB_ARGS='-n 48' for a quick run.
.PHONY: bench-whereabouts
bench-whereabouts: build
	$(GO) run ./test/benchwb -cnibox $(CURDIR)/bin/cnibox -agent $(CURDIR)/bin/cnibox-agent-kube $(BENCH_WB_ARGS)

# bench-overlay: N simulated nodes (N=10,100,200) joining one etcd, removal,
# agent RSS/CPU, iperf3 pod to pod with and without the overlay; in a private
# network namespace. BENCH_OVERLAY_ARGS='-n 10 -iperf 2' for a quick run.
bench-overlay: build
	@command -v etcd >/dev/null && command -v iperf3 >/dev/null || (apt-get update -qq && apt-get install -y -qq etcd-server iperf3 >/dev/null)
	CNIBOX_BIN=$(CURDIR)/bin/cnibox $(GO) run ./test/benchoverlay -agent $(CURDIR)/bin/cnibox-agent $(BENCH_OVERLAY_ARGS)

# bench-datapath: the data path pod to pod, side by side in one run (issue
# 53): the floor (two namespaces on a bare veth pair; the two nodes over
# their underlay), flanneld v0.28.9 with the reference plugins v1.9.1
# (built once into the user's cache) and cnibox on vxlan and host-gw, and
# on both with 200 NetworkPolicies selecting the pods and the flow log
# (deny) for their namespace beside the policy anchor (issue 65): flanneld
# + the reference plugins + kube-router v2.1.0's policy controller
# (test/internal/kuberouter, built once; it execs ipset and iptables) with
# the same 200 policies; for same-node and cross-node pods: iperf3
# TCP (1 and 4 streams), TCP_RR p50/p99 and TCP_CRR (test/internal/netload:
# netperf is not in Debian), UDP packets a second at 64 bytes. Two node
# namespaces on a real control plane (test/kube/control-plane.sh), in a
# private network namespace. Through a Service (issue 63 item 3): cnibox
# with its Services proxy (--service-proxy), cnibox's overlay with
# kube-proxy v1.34.2 --proxy-mode nftables on each node (built once into
# the control plane's cache; it execs nft inside the node's namespace),
# and flanneld + the reference plugins with kube-proxy, on vxlan and
# host-gw: TCP_RR and TCP_CRR through a ClusterIP from a pod and through a
# NodePort from a client off the cluster, same node and across the overlay
# (-configs services for those alone, pods for the rest; -rule-walk DIR
# -no-measure counts the nftables rules each packet of a connection is
# evaluated against, from the kernel's trace). Medians of -rounds x -runs, the load average
# before and after each configuration; -path-state DIR writes each path's
# devices, offloads and base chains. BENCH_DATAPATH_ARGS='-quick' for a
# run of a few minutes. docs/benchmarks.md. Not in make test or CI.
# bench-fastpath: the fast path (agent --fast-path, a flowtable) against the
# forward chains on one routed path, request/response and a stream
# (netops/nft's BenchmarkFastPath, BenchmarkFastPathReset), in make
# test-kernel's VM: this machine's kernel has no flowtables. TCG: compare
# the two rows of one run, not with other tables. docs/benchmarks.md.
.PHONY: bench-fastpath
bench-fastpath: deps build
	$(GO) run ./test/kernel -cnibox $(CURDIR)/bin/cnibox -pkgs ./netops/nft -forwarding-pkgs none -run '^$$' -bench 'FastPath' \
		-bench-args '-test.count=5 -test.benchtime=2s' $(BENCH_FASTPATH_ARGS)

.PHONY: bench-datapath
bench-datapath: build
	@command -v etcd >/dev/null && command -v iperf3 >/dev/null && command -v ipset >/dev/null && command -v nft >/dev/null || (apt-get update -qq && apt-get install -y -qq etcd-server iperf3 ipset nftables >/dev/null)
	bash test/kube/control-plane.sh build >/dev/null
	kube=$$(bash test/kube/control-plane.sh build kube-proxy) && \
	CNIBOX_BIN=$(CURDIR)/bin/cnibox $(GO) run ./test/benchdatapath -agent-kube $(CURDIR)/bin/cnibox-agent-kube \
		-kcp $(CURDIR)/test/kube/control-plane.sh -kube-proxy $$kube/kube-proxy $(BENCH_DATAPATH_ARGS)

# bench-services: the Services proxy's control plane beside kube-proxy
# v1.34.2 in nftables mode (built once into the control plane's cache by
# test/kube/control-plane.sh; it execs nft: Debian's nftables), in one run
# on one real control plane: 1,000, 10,000 and 30,000 ClusterIP Services x
# 4 ready endpoints (API objects, no pods), each proxy alone in a fresh
# node namespace: first sync, one change p50/p99 (a Service created to its
# ClusterIP in the kernel's map), RSS after the first sync; the Markdown
# table and the issue's goals on stdout. cnibox's side is reported
# unavailable while bin/cnibox-agent-kube has no --service-proxy.
# BENCH_SERVICES_ARGS='-n 1000 -samples 10' for a quick run; in full
# about an hour on 2 loaded cores (creating 30,000 Services alone took 30
# minutes at load 7-10). docs/benchmarks.md. Not in make test or CI.
.PHONY: bench-services
bench-services: build
	@missing=$$(for p in etcd-server nftables openssl curl; do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	[ -z "$$missing" ] || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null)
	kube=$$(bash test/kube/control-plane.sh build kube-proxy) && \
	$(GO) run ./test/benchservices -kube-proxy $$kube/kube-proxy -agent-kube $(CURDIR)/bin/cnibox-agent-kube \
		-kcp $(CURDIR)/test/kube/control-plane.sh $(BENCH_SERVICES_ARGS)

# bench-scale: one real agent among N simulated nodes (N=1000,5000) for the
# etcd backend (leases written into etcd) and the kube backend (realistic
# Node objects in a real control plane, test/kube/control-plane.sh): converge,
# RSS/peak, removal, bytes and CPU per unrelated node status update; in a
# private network namespace. FLANNELD=path runs flanneld side by side;
# BENCH_SCALE_ARGS='-n 1000 -backends kube' for a part.
bench-scale: build
	@command -v etcd >/dev/null || (apt-get update -qq && apt-get install -y -qq etcd-server >/dev/null)
	bash test/kube/control-plane.sh build >/dev/null
	$(GO) run ./test/benchscale -agent $(CURDIR)/bin/cnibox-agent -agent-kube $(CURDIR)/bin/cnibox-agent-kube -kcp $(CURDIR)/test/kube/control-plane.sh $(BENCH_SCALE_ARGS)

# bench-policy: the NetworkPolicy engine beside kube-router v2.1.0's policy
# controller (test/internal/kuberouter builds it once), on one control plane
# with 1,000 pods and 200 NetworkPolicies as API objects and three node
# namespaces per agent: programming latency (a pod turning Running, a policy
# created, to its transaction on every node), TCP request/response between
# two pods with 200 policies selecting them; then bench-scale's harness at
# 5,000 nodes with 50,000 pods and 1,000 policies, the agent with
# --network-policy=false and on (RSS, peak, the cost of a pod churn).
# BENCH_POLICY_ARGS and BENCH_POLICY_SCALE_ARGS pass flags to each part
# (e.g. BENCH_POLICY_SCALE_ARGS='-n 1000 -pods 10000 -policies 200').
# docs/benchmarks.md. Not in make test or CI.
bench-policy: build
	@command -v etcd >/dev/null || (apt-get update -qq && apt-get install -y -qq etcd-server >/dev/null)
	@command -v ipset >/dev/null || (apt-get update -qq && apt-get install -y -qq ipset >/dev/null)
	bash test/kube/control-plane.sh build >/dev/null
	$(GO) run ./test/benchpolicy -agent-kube $(CURDIR)/bin/cnibox-agent-kube -kcp $(CURDIR)/test/kube/control-plane.sh $(BENCH_POLICY_ARGS)
	$(GO) run ./test/benchscale -agent $(CURDIR)/bin/cnibox-agent -agent-kube $(CURDIR)/bin/cnibox-agent-kube -kcp $(CURDIR)/test/kube/control-plane.sh \
		-backends kube -n 5000 -pods 50000 -policies 1000 $(BENCH_POLICY_SCALE_ARGS)

# fuzz runs every fuzz target for a number of executions, about 2 s each on
# 2 idle cores, or for FUZZTIME when set (make soak: 3m each, the long runs).
# In make test it is a short smoke run: the seed corpora run as unit tests
# in go test ./... already, and most of a target's time here is building
# its instrumented test binary and replaying its corpus; the counts were
# three times these until make test had to fit 12 minutes (docs/reliability.md,
# The suites' time: 432 s of make fuzz at load 12-17 before). A
# count, not a time: with a -fuzztime duration, Go 1.26's fuzz coordinator
# can fail a target with a bare "context deadline exceeded" when the time is
# up while a worker is mid-call (golang/go#75804, fixed in Go 1.27); it hit
# make test once. The committed seed corpus is in each package's
# testdata/fuzz. FuzzEscape sends each input through a kernel lab (root; it
# skips without): a few milliseconds an input, a second for a fragment
# alone, hence its small count (most of its time is its seeds' baseline).
FUZZ_TARGETS := ./cniplug:FuzzInvoke:47000 ./roles/bridge:FuzzParseConf:53000 \
	./roles/hostlocal:FuzzLoadConfig:60000 ./roles/static:FuzzStaticConfig:53000 \
	./store:FuzzDecodeReservation:67000 ./roles/flannel:FuzzFlannelEnv:20000 \
	./agent/netconf:FuzzParse:100000 ./roles/cloudipam:FuzzAzureXML:27000 \
	./roles/cloudipam:FuzzAWSENI:20000 ./roles/cloudipam:FuzzPoolFile:23000 \
	./roles/ptp:FuzzParseConf:20000 ./roles/internal/lower:FuzzParseConf:20000 \
	./roles/vlan:FuzzParseConf:13000 ./roles/sbr:FuzzParseConf:13000 ./roles/vrf:FuzzParseConf:13000 \
	./roles/hostdevice:FuzzParseConf:13000 ./roles/tap:FuzzParseConf:13000 \
	./roles/cloudipam:FuzzHTTPResponse:13000 ./roles/azurevnet:FuzzParse:13000 \
	./agent/podapi:FuzzPodAPIRequest:10000 ./agent/podapi:FuzzCNIArgsMerge:13000 \
	./agent/podapi:FuzzNADPolicy:20000 ./roles/portmap:FuzzParseConf:20000 \
	./roles/dhcp/daemon:FuzzACK:33000 ./agent/policy:FuzzPolicyShapes:1000 \
	./agent/fqdn:FuzzParseAnswer:83000 ./agent/policynft:FuzzEscape:50
# FUZZ_JOBS targets at a time (much of a short run is a target's link and
# its corpus's replay, one process each), each target's output printed as a
# block when it ends; the first failure stops the rest. make soak runs one
# at a time, so that each target has the cores for its whole FUZZTIME.
FUZZTIME ?=
FUZZ_JOBS ?= 2
fuzz:
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(FUZZ_JOBS) -I{} bash -c '\
		t={}; pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest#*:}; \
		budget=$${n}x; [ -n "$(FUZZTIME)" ] && budget=$(FUZZTIME); \
		out=$$(mktemp); rc=0; \
		$(GO) test $(VETFLAG) -run "^$$" -fuzz "^$$name\$$" -fuzztime $$budget -fuzzminimizetime 5s "$$pkg" >"$$out" 2>&1 || rc=$$?; \
		echo "fuzz $$name ($$pkg) for $$budget"; cat "$$out"; rm -f "$$out"; \
		[ $$rc = 0 ] || exit 255'

# soak: the long runs: a storm of SOAK_CALLS CNI calls, the chained crash
# matrix's every fault point x runtime action (make test runs each point and
# each action once: test/reliability crashPairs), every fuzz target
# for SOAK_FUZZTIME, and the build of kube-router from the module proxy
# (test/internal/kuberouter's TestBinary, which make test runs only on a
# cached build).
SOAK_CALLS ?= 5000
SOAK_FUZZTIME ?= 3m
soak: build
	CGO_ENABLED=0 $(GO) build -tags faultpoints -o bin/cnibox-fault .
	CNIBOX_BIN=$(CURDIR)/bin/cnibox CNIBOX_FAULT_BIN=$(CURDIR)/bin/cnibox-fault CNIBOX_STORM_CALLS=$(SOAK_CALLS) CNIBOX_CRASH_MATRIX=full \
		$(GO) test -count=1 -timeout 60m -v -run 'TestStorm|TestCrashConsistency|TestRebootReclaim' ./test/reliability
	CNIBOX_KUBE_ROUTER_BUILD=1 $(GO) test -count=1 -timeout 30m -run 'TestBinary$$' ./test/internal/kuberouter
	$(MAKE) fuzz FUZZTIME=$(SOAK_FUZZTIME) FUZZ_JOBS=1

# lint: go vet (plain, -tags kube, and -tags nokube: the lean agent's
# build) and staticcheck (pinned;
# fetched through the module proxy into the module cache on first use).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet ./...
	$(GO) vet -tags kube ./...
	$(GO) vet -tags nokube ./...
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf bin
