#!/bin/bash
# busybox.sh VERSION OUTDIR GOARCH...: Debian's static busybox
# (busybox-static at VERSION, bookworm's) for each Go architecture, as
# OUTDIR/linux-GOARCH/busybox: make image puts it into that platform's
# image. Each package comes from the archive through apt (apt-get download
# of busybox-static:DEBARCH=VERSION, checked against the archive's signed
# Release), with package lists of its own under the cache: the machine's
# dpkg architectures and apt lists are not touched. The binary is cached
# in ~/.cache/cnibox-busybox/VERSION/DEBARCH/busybox, so a second build
# needs no network; a version the archive does not have stops the build.
set -euo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 VERSION OUTDIR GOARCH..." >&2
	exit 2
fi
version=$1 out=$2
shift 2
cache=${XDG_CACHE_HOME:-$HOME/.cache}/cnibox-busybox

# Debian's name of a Go architecture.
debarch() {
	case $1 in
	arm) echo armhf ;;
	ppc64le) echo ppc64el ;;
	386) echo i386 ;;
	*) echo "$1" ;;
	esac
}

missing=()
for a in "$@"; do
	d=$(debarch "$a")
	[ -s "$cache/$version/$d/busybox" ] || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
	lists=$cache/lists
	mkdir -p "$lists/partial"
	opts=(-q -o "Dir::State::Lists=$lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
	pkgs=()
	for d in "${missing[@]}"; do
		opts+=(-o "APT::Architectures::=$d")
		pkgs+=("busybox-static:$d=$version")
	done
	echo "busybox.sh: fetching ${pkgs[*]}" >&2
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	download() { (cd "$tmp" && apt-get "${opts[@]}" download "${pkgs[@]}" >/dev/null 2>&1); }
	# the cache's package lists first; then, unless they are from the last
	# day, lists fetched anew (an index of another suite failing, a
	# mirror's hiccup, is not fatal: the download finds the version or
	# says it cannot)
	fresh=true
	for d in "${missing[@]}"; do
		[ -n "$(find "$lists" -name "*_binary-${d}_Packages*" -mmin -1440 2>/dev/null)" ] || fresh=false
	done
	if ! download; then
		$fresh || apt-get "${opts[@]}" update >/dev/null 2>&1 || echo "busybox.sh: apt-get update reported errors; trying the download" >&2
		if ! (cd "$tmp" && apt-get "${opts[@]}" download "${pkgs[@]}" >/dev/null); then
			echo "busybox.sh: apt-get download ${pkgs[*]} failed: the image pins busybox-static $version (BUSYBOX_DEB in the Makefile); bump it to the version bookworm has (apt-cache policy busybox-static)" >&2
			exit 1
		fi
	fi
	for d in "${missing[@]}"; do
		mkdir -p "$tmp/x-$d" "$cache/$version/$d"
		dpkg-deb -x "$tmp"/busybox-static_*_"$d".deb "$tmp/x-$d"
		install -m 0755 "$tmp/x-$d/bin/busybox" "$cache/$version/$d/busybox.tmp"
		mv "$cache/$version/$d/busybox.tmp" "$cache/$version/$d/busybox"
	done
fi
for a in "$@"; do
	mkdir -p "$out/linux-$a"
	install -m 0755 "$cache/$version/$(debarch "$a")/busybox" "$out/linux-$a/busybox"
done
