#!/usr/bin/env bash
# setup.sh: make a fresh Debian machine (as root) ready for azgate, then run
# one Make target. Installs only what is missing; safe to run again.
#
#   scripts/setup.sh demo    # the lab demo
#   scripts/setup.sh test    # every test
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:-test}

if [ "$(id -u)" != 0 ]; then
	echo "setup.sh: run as root (network namespaces, XDP and apt need it)" >&2
	exit 1
fi

# command -> Debian package
declare -A need=(
	[make]=make
	[clang]=clang
	[llc]=llvm
	[bpftool]=bpftool
	[ip]=iproute2
	[ethtool]=ethtool
	[nsenter]=util-linux
	[setpriv]=util-linux
	[etcd]=etcd-server
	[curl]=curl
	[nft]=nftables
	[git]=git
	[bird]=bird2
	[birdc]=bird2
	[redis-server]=redis-server
	[iperf3]=iperf3
	[dig]=dnsutils
	[mmdblookup]=mmdb-bin
	[gdnsd]=gdnsd
	[dnsperf]=dnsperf
	[taskset]=util-linux
	[tshark]=tshark # azgate capture's test reads the pcapng it writes
	[systemd-nspawn]=systemd-container # packaging's TestNspawnRegion boots the units in a container
	[promtool]=prometheus # the metrics, alert-rule and dashboard tests (internal/promcheck)
	[prometheus]=prometheus # azgate-lab lab prometheus: the lab's own Prometheus (docs/lab.md)
	[chromium-headless-shell]=chromium-headless-shell # screenshots: the status page /ui (TestStatusPageChromium) and the lab's dashboard and status page (TestLabDashboard)
)
missing=()
for cmd in "${!need[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
[ -e /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
[ -e /usr/include/x86_64-linux-gnu/asm/types.h ] || [ -e /usr/include/asm/types.h ] || missing+=(linux-libc-dev)
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup.sh: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
	# Debian starts the daemons of what it installs: redis-server on
	# 127.0.0.1:6379 and etcd on localhost:2379, both without a password,
	# which any local user could drive, gdnsd on port 53 and prometheus
	# on :9090 of every address. azgate needs only the binaries (it
	# starts its own servers, on sockets only root reaches; bench gslb
	# runs its own gdnsd, as nobody on loopback for the run; the tests
	# use promtool only): stop and disable the services of the packages
	# this run installed. Without systemd, gdnsd's package starts nothing
	# (it ships only a unit).
	if [ -d /run/systemd/system ]; then
		for ps in redis-server:redis-server etcd-server:etcd gdnsd:gdnsd prometheus:prometheus; do
			case " ${missing[*]} " in
			*" ${ps%%:*} "*) systemctl disable --now "${ps#*:}.service" || true ;;
			esac
		done
	fi
fi

# Go: the machine's, or /usr/local/go.
if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH=/usr/local/go/bin:$PATH
	else
		echo "setup.sh: Go 1.26 or newer is needed (https://go.dev/dl/, unpacked in /usr/local/go)" >&2
		exit 1
	fi
fi

# bpffs, where the data plane pins its maps and links.
if ! mount | grep -q ' /sys/fs/bpf type bpf'; then
	mount -t bpf bpf /sys/fs/bpf
fi

exec make "$target"
