#!/usr/bin/env bash
# mkdeb.sh: the azgate Debian package, from this checkout and nothing
# fetched but Go modules (go.sum pins them): dpkg-deb on a staged tree.
#
#   scripts/mkdeb.sh [OUTDIR]      (make deb)
#
# DEB_VERSION   package version (default 0.0~git<commit date>.<hash>)
# ETC_DIR       default configuration files, installed as conffiles in
#               /etc/azgate (default packaging/etc/azgate, if it exists)
# GO            the go command
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-bin}
GO=${GO:-go}
etc=${ETC_DIR:-packaging/etc/azgate}
arch=$(dpkg --print-architecture)
if [ -z "${DEB_VERSION:-}" ]; then
	if git rev-parse --git-dir >/dev/null 2>&1; then
		DEB_VERSION="0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d).$(git rev-parse --short HEAD)"
		git diff --quiet HEAD 2>/dev/null || DEB_VERSION+="~dirty"
	else
		DEB_VERSION=0.0~dev
	fi
fi
# Reproducible: every timestamp (man pages, files) is the commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/pkg
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/usr/share/man/man1" \
	"$pkg/usr/share/doc/azgate" "$pkg/etc/azgate" "$pkg/usr/share/azgate/prometheus" "$pkg/usr/share/azgate/grafana"

export GOFLAGS=${GOFLAGS:--buildvcs=false}
# Built as `make build` builds it (the same flags: Go's build cache serves
# both; -s -w only strip the symbol tables at link time).
$GO build -ldflags "-s -w -X main.version=$DEB_VERSION" -o "$pkg/usr/bin/azgate" ./cmd/azgate
# azgate-node: the same source with the node tag, the edge and agent
# roles only (their units run it: cmd/azgate/node.go, docs/deploy.md).
$GO build -tags node -ldflags "-s -w -X main.version=$DEB_VERSION" -o "$pkg/usr/bin/azgate-node" ./cmd/azgate
# The man pages: from the same command trees, by builds with the mangen
# tag (cmd/azgate/mangen.go); those builds are not shipped.
$GO build -tags mangen -ldflags "-X main.version=$DEB_VERSION" -o "$stage/azgate-mangen" ./cmd/azgate
"$stage/azgate-mangen" gen-man "$stage/man1"
$GO build -tags mangen,node -ldflags "-X main.version=$DEB_VERSION" -o "$stage/azgate-node-mangen" ./cmd/azgate
"$stage/azgate-node-mangen" gen-man "$stage/man1"
for f in "$stage"/man1/*.1; do
	gzip -9n <"$f" >"$pkg/usr/share/man/man1/$(basename "$f").gz"
done

install -m 0644 packaging/systemd/*.service "$pkg/lib/systemd/system/"
install -m 0644 packaging/debian/copyright "$pkg/usr/share/doc/azgate/copyright"
# The alert rules and the dashboard (docs/observability.md, Metrics).
install -m 0644 packaging/prometheus/azgate-rules.yml "$pkg/usr/share/azgate/prometheus/"
install -m 0644 packaging/grafana/azgate.json "$pkg/usr/share/azgate/grafana/"
for d in deploy.md upgrades.md roles.md observability.md; do
	[ -f "docs/$d" ] && gzip -9n <"docs/$d" >"$pkg/usr/share/doc/azgate/$d.gz"
done
printf 'azgate (%s) unstable; urgency=medium\n\n  * Built from the azgate repository (%s).\n\n -- azgate maintainers <azgate@example.org>  %s\n' \
	"$DEB_VERSION" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	"$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n >"$pkg/usr/share/doc/azgate/changelog.gz"

: >"$pkg/DEBIAN/conffiles"
if [ -d "$etc" ]; then
	for f in "$etc"/*; do
		[ -f "$f" ] || continue
		install -m 0644 "$f" "$pkg/etc/azgate/"
		echo "/etc/azgate/$(basename "$f")" >>"$pkg/DEBIAN/conffiles"
	done
fi
[ -s "$pkg/DEBIAN/conffiles" ] || rm "$pkg/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$pkg/DEBIAN/"

# cgo's resolver links libc dynamically (as `make build` does).
depends="passwd"
if ldd "$pkg/usr/bin/azgate" "$pkg/usr/bin/azgate-node" 2>/dev/null | grep -q 'libc\.so'; then
	depends="libc6, $depends"
fi
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<CTRL
Package: azgate
Version: $DEB_VERSION
Architecture: $arch
Maintainer: azgate maintainers <azgate@example.org>
Installed-Size: $size
Depends: $depends
Recommends: systemd
Suggests: etcd-server, redis-server, bird2 | frr
Section: net
Priority: optional
Homepage: https://github.com/azgate/azgate
Description: software edge gateway for multi-AZ clouds (XDP/eBPF)
 azgate routes elastic IPs and load-balanced VIPs between the Internet and
 an availability zone's underlay in XDP, with a controller keeping the
 desired state in etcd. One binary holds every role (controller, edge,
 agent, bwmgr, gslb, pathd, prober, announce), each with a systemd unit,
 and the CLI.
CTRL
(cd "$pkg" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$pkg/DEBIAN/md5sums"
find "$pkg" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$out"
deb="$out/azgate_${DEB_VERSION}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb"
