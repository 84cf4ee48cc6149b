#!/usr/bin/env bash
# Builds the pinned etcd, Kubernetes and CRI binaries used by the end-to-end
# tests and benchmarks, from the Go module proxy:
#
#   bash test/tools/build.sh <bin-dir> [--lab | --with-v1.35] [--conformance] [--force]
#
# --lab builds only what `kubeboot lab` runs (no kube-bench, weed or v1.35);
# --conformance adds what only the conformance tests' images hold.
#
#   <bin-dir>/etcd etcdctl etcdutl                 etcd        (module ./etcd)
#   <bin-dir>/kube-apiserver kube-controller-manager kube-scheduler
#             kubelet kubectl kubeadm kube-proxy agnhost
#                                                  Kubernetes  (module ./kubernetes/v1.36)
#   <bin-dir>/crictl                               cri-tools   (module ./crictl)
#   <bin-dir>/kube-bench, kube-bench-cfg/          kube-bench  (module ./kube-bench)
#   <bin-dir>/containerd containerd-shim-runc-v2 ctr
#                                                  containerd  (module ./containerd)
#   <bin-dir>/cni/bridge host-local loopback portmap
#                                                  CNI plugins (module ./cni)
#   <bin-dir>/flanneld                             flannel, the pod network, for the lab's flannel
#                                                  image (module ./flannel; cgo, linked statically)
#   <bin-dir>/flannel-cni-plugin                   flannel's CNI plugin, for the lab's flannel-cni-plugin
#                                                  image (module ./cni/flannel)
#   <bin-dir>/pause                                the lab's sandbox program (module ./pause)
#   <bin-dir>/coredns                              CoreDNS     (module ./coredns)
#   <bin-dir>/local-path-provisioner               the lab's default StorageClass
#                                                  (module ./local-path-provisioner)
#   <bin-dir>/weed                                 SeaweedFS, the S3 server of s3store's tests
#                                                  and the e2e suite (module ./seaweedfs)
#   <bin-dir>/v1.35/kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
#                                                  only with --with-v1.35 (module ./kubernetes/v1.35)
#   <bin-dir>/rootfs/busybox agnhost               the trees the lab's agnhost image is laid from:
#                                                  BusyBox built from its source, and Debian's
#                                                  packages of the tools the tests run in agnhost
#   <bin-dir>/rootfs/nginx glibc-dns-testing, sample-apiserver, nnp
#                                                  only with --conformance: the conformance tests'
#                                                  other images (modules ./sample-apiserver, ./nnp)
#   <bin-dir>/v1.13/coredns                        only with --with-v1.35: the CoreDNS v1.35
#                                                  installs (module ./coredns/v1.13)
#
# Versions live only in each module's go.mod; this script reads them from there.
# Each family of binaries is one `go build` so that shared packages compile
# once and both cores stay busy. A family whose inputs (go.mod, go.sum,
# toolchain, flags) are unchanged since its last build is reused, so a second
# run takes a second or two. --force rebuilds anyway (still using Go's build cache).
#
# Adding a family: create its module (a go.mod with `tool` lines, then
# `go mod tidy`; for a Kubernetes release run kubernetes/mkmod.sh), write a
# family_<name> function below and list it in `families`.
set -euo pipefail

usage() {
	echo "usage: $0 <bin-dir> [--lab | --with-v1.35] [--conformance] [--bench] [--force]" >&2
	exit 2
}

tools_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# --- flag parsing ---------------------------------------------------------

bin_dir=
force=false
lab_families=(family_etcd family_kubernetes_v1_36 family_crictl family_containerd family_cni family_flannel family_cni_flannel family_pause family_coredns family_local_path_provisioner family_busybox family_agnhost_tree)
families=("${lab_families[@]}" family_kube_bench family_seaweedfs)
for arg in "$@"; do
	case $arg in
	--lab) families=("${lab_families[@]}") ;;
	--with-v1.35) families+=(family_kubernetes_v1_35 family_coredns_v1_13) ;;
	--conformance) families+=(family_conformance_trees family_sample_apiserver family_nnp) ;;
	--bench) families+=(family_kube_router family_kube_router_tree) ;;
	--force) force=true ;;
	-h | --help) usage ;;
	-*) echo "build.sh: unknown flag $arg" >&2; usage ;;
	*) [[ -z $bin_dir ]] || usage; bin_dir=$arg ;;
	esac
done
[[ -n $bin_dir ]] || usage
mkdir -p "$bin_dir"
bin_dir=$(cd "$bin_dir" && pwd)

# --- build environment ----------------------------------------------------

# Static, toolchain-pinned builds that ignore any go.work the developer has.
export CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local
# The cri-tools tag is missing from the checksum database. Its hash is in the
# committed go.sum, so builds do not need this; `go mod tidy` in ./crictl
# does, and setting it here keeps the two paths alike.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}sigs.k8s.io/cri-tools"
# Likewise the kube-bench tag (see ./kube-bench/go.mod).
export GONOSUMDB="$GONOSUMDB,github.com/aquasecurity/kube-bench"

# Flags common to every build. With -trimpath and a build date taken from the
# release (see k8s_ldflags), the binaries depend neither on the checkout path
# nor on the day they were built.
go_build_flags=(-mod=readonly -trimpath -buildvcs=false)

# The scratch directory of the family being built, removed however we exit.
scratch=
trap 'if [[ -n $scratch ]]; then rm -rf "$scratch"; fi' EXIT

# Two concurrent runs on one bin-dir would race on the same files.
exec 9>"$bin_dir/.build.lock"
if ! flock -n 9; then
	echo "build.sh: waiting for another build into $bin_dir" >&2
	flock 9
fi

# --- helpers ----------------------------------------------------------------

# fmt_duration 754 -> 12m34s
fmt_duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# module_field <module> <template> reads a field of a required module (with
# its version as resolved by the current directory's go.mod).
module_field() { go list -mod=readonly -m -f "$2" "$1"; }

# binary_name <package>: the name `go build -o dir/` gives a main package,
# the last path element that is not a major-version suffix (server/v3 -> server).
binary_name() {
	local base=${1##*/}
	if [[ $base =~ ^v[0-9]+$ ]]; then
		base=${1%/*}
		base=${base##*/}
	fi
	echo "$base"
}

# build_family <family> <module dir> <bin subdir> <versioned module> <ldflags> <name=package>...
#
# $build_tags, when set, is passed to `go build -tags`.
# Builds the given main packages of one tools module with a single `go build`
# and installs them as <bin-dir>/<bin subdir>/<name>, or reuses them when the
# recorded fingerprint of the inputs still matches. <versioned module> is the
# module whose version is printed; <ldflags> is appended to -s -w.
build_family() {
	local family=$1 moddir="$tools_dir/$2" subdir=$3 vmod=$4 ldflags="-s -w $5"
	shift 5
	local specs=("$@") dest="$bin_dir${subdir:+/$subdir}"
	local stamp="$bin_dir/.stamps/$family" version
	version=$(cd "$moddir" && module_field "$vmod" '{{.Version}}')

	# Everything that changes the output. The go.sum is included so that a
	# re-resolved dependency invalidates the stamp even if go.mod did not move.
	local fingerprint
	fingerprint=$(
		{
			go env GOVERSION GOOS GOARCH GOAMD64 GOEXPERIMENT GOFLAGS CGO_ENABLED
			printf '%s\n' "${go_build_flags[@]}" "$ldflags" "${build_tags:-}" "$subdir" "${specs[@]}"
			cat "$moddir/go.mod"
			if [[ -f $moddir/go.sum ]]; then cat "$moddir/go.sum"; fi
		} | sha256sum | cut -d' ' -f1
	)

	local spec name all_present=true
	for spec in "${specs[@]}"; do
		[[ -x $dest/${spec%%=*} ]] || all_present=false
	done
	if ! $force && $all_present && [[ -f $stamp ]] && [[ $(sed -n 1p "$stamp") == "$fingerprint" ]]; then
		local took
		took=$(sed -n 2p "$stamp")
		for spec in "${specs[@]}"; do
			printf 'reused %-30s %-9s (%s build took %s)\n' "${subdir:+$subdir/}${spec%%=*}" "$version" "$family" "$(fmt_duration "$took")"
		done
		return
	fi

	# Build into a scratch directory on the same filesystem, then rename each
	# binary into place: a failed or interrupted build never leaves a partial
	# binary under a name the tests use.
	mkdir -p "$dest" "$bin_dir/.stamps"
	rm -f "$stamp"
	local pkgs=()
	scratch=$(mktemp -d "$bin_dir/.build-$family.XXXXXX")
	for spec in "${specs[@]}"; do pkgs+=("${spec#*=}"); done

	echo "building $family $version: ${pkgs[*]}" >&2
	local start=$SECONDS
	(cd "$moddir" && go build "${go_build_flags[@]}" ${build_tags:+-tags="$build_tags"} -ldflags="$ldflags" -o "$scratch/" "${pkgs[@]}")
	local took=$((SECONDS - start))

	for spec in "${specs[@]}"; do
		name=${spec%%=*}
		mv -f "$scratch/$(binary_name "${spec#*=}")" "$dest/$name"
		printf 'built  %-30s %-9s (%s build took %s)\n' "${subdir:+$subdir/}$name" "$version" "$family" "$(fmt_duration "$took")"
	done
	printf '%s\n%s\n' "$fingerprint" "$took" >"$stamp"
	rm -rf "$scratch"
	scratch=
}

# k8s_ldflags <module dir>: the version stamps Kubernetes' release build sets,
# in both packages that carry them (component-base for the servers and
# kubeadm, client-go for kubectl's client version). The build date is the
# release's publication time, so rebuilding does not change the binaries.
k8s_ldflags() {
	local version date
	version=$(cd "$tools_dir/$1" && module_field k8s.io/kubernetes '{{.Version}}')
	date=$(cd "$tools_dir/$1" && module_field k8s.io/kubernetes '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}')
	[[ $version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "build.sh: unexpected Kubernetes version $version" >&2; exit 1; }
	local major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} pkg key
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		for key in gitVersion="$version" gitMajor="$major" gitMinor="$minor" gitTreeState=clean buildDate="$date"; do
			printf -- '-X %s.%s ' "$pkg" "$key"
		done
	done
}

# --- families -----------------------------------------------------------------

family_etcd() {
	# The etcd server's main package is the root of the server/v3 module. Its
	# version is a constant; only the git SHA is a link-time variable, and the
	# module proxy does not tell us the commit, so it is left unset.
	build_family etcd etcd "" go.etcd.io/etcd/server/v3 "" \
		etcd=go.etcd.io/etcd/server/v3 \
		etcdctl=go.etcd.io/etcd/etcdctl/v3 \
		etcdutl=go.etcd.io/etcd/etcdutl/v3
}

family_kubernetes_v1_36() {
	local ldflags
	ldflags=$(k8s_ldflags kubernetes/v1.36)
	build_family kubernetes-v1.36 kubernetes/v1.36 "" k8s.io/kubernetes "$ldflags" \
		kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
		kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
		kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
		kubelet=k8s.io/kubernetes/cmd/kubelet \
		kubectl=k8s.io/kubernetes/cmd/kubectl \
		kubeadm=k8s.io/kubernetes/cmd/kubeadm \
		kube-proxy=k8s.io/kubernetes/cmd/kube-proxy \
		agnhost=k8s.io/kubernetes/test/images/agnhost
}

# The previous minor release, for the upgrade test. Installed under v1.35/ so
# that it never shadows the current binaries.
family_kubernetes_v1_35() {
	local ldflags
	ldflags=$(k8s_ldflags kubernetes/v1.35)
	build_family kubernetes-v1.35 kubernetes/v1.35 v1.35 k8s.io/kubernetes "$ldflags" \
		kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
		kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
		kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
		kubelet=k8s.io/kubernetes/cmd/kubelet \
		kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
}

family_crictl() {
	local version
	version=$(cd "$tools_dir/crictl" && module_field sigs.k8s.io/cri-tools '{{.Version}}')
	# cri-tools' own Makefile stamps the version without the leading v.
	build_family crictl crictl "" sigs.k8s.io/cri-tools "-X sigs.k8s.io/cri-tools/pkg/version.Version=${version#v}" \
		crictl=sigs.k8s.io/cri-tools/cmd/crictl
}

# kube-bench reads the benchmark definitions (cfg/<benchmark>/*.yaml) at run
# time; they ship in its module, not in the binary. They are copied next to
# it on every run, which takes no time, so a reused binary never meets
# definitions of another version.
family_kube_bench() {
	local version src dest="$bin_dir/kube-bench-cfg"
	version=$(cd "$tools_dir/kube-bench" && module_field github.com/aquasecurity/kube-bench '{{.Version}}')
	build_family kube-bench kube-bench "" github.com/aquasecurity/kube-bench \
		"-X github.com/aquasecurity/kube-bench/cmd.KubeBenchVersion=$version" \
		kube-bench=github.com/aquasecurity/kube-bench
	src=$(cd "$tools_dir/kube-bench" && module_field github.com/aquasecurity/kube-bench '{{.Dir}}')/cfg
	scratch=$(mktemp -d "$bin_dir/.kube-bench-cfg.XXXXXX")
	cp -R "$src/." "$scratch/"
	chmod -R u+w "$scratch" # the module cache is read-only
	rm -rf "$dest"
	mv "$scratch" "$dest"
	scratch=
	echo "copied kube-bench-cfg                  $version (benchmark definitions)"
}

# containerd 2.x answers the kubelet's RuntimeConfig call, so the kubelet
# takes its cgroup driver from the runtime. Built without cgo, so without the
# snapshotters that need it (the lab uses overlayfs).
family_containerd() {
	local version
	version=$(cd "$tools_dir/containerd" && module_field github.com/containerd/containerd/v2 '{{.Version}}')
	build_tags="no_btrfs no_zfs no_aufs no_devmapper" build_family containerd containerd "" github.com/containerd/containerd/v2 \
		"-X github.com/containerd/containerd/v2/version.Version=$version" \
		containerd=github.com/containerd/containerd/v2/cmd/containerd \
		containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		ctr=github.com/containerd/containerd/v2/cmd/ctr
}

# The plugins a lab node's CNI configuration names, in their own directory
# (containerd's bin_dirs), as /opt/cni/bin holds them on a real node.
family_cni() {
	build_family cni cni cni github.com/containernetworking/plugins "" \
		bridge=github.com/containernetworking/plugins/plugins/main/bridge \
		host-local=github.com/containernetworking/plugins/plugins/ipam/host-local \
		loopback=github.com/containernetworking/plugins/plugins/main/loopback \
		portmap=github.com/containernetworking/plugins/plugins/meta/portmap
}

# flannel, whose image the lab lays from flanneld, the program of flannel's
# own image that kubeboot's DaemonSet runs. Its udp backend needs cgo on amd64; the
# binary is linked statically, with Go's own resolver and user lookup, so
# that the image needs no C library.
family_flannel() {
	local version
	version=$(cd "$tools_dir/flannel" && module_field github.com/flannel-io/flannel '{{.Version}}')
	CGO_ENABLED=1 build_tags="netgo osusergo" build_family flannel flannel "" github.com/flannel-io/flannel \
		"-X github.com/flannel-io/flannel/pkg/version.Version=$version -extldflags -static" \
		flanneld=github.com/flannel-io/flannel
}

# flannel's CNI plugin, which the flannel-cni-plugin image holds as
# /flannel and the flannel DaemonSet copies into each node's /opt/cni/bin.
family_cni_flannel() {
	build_family cni-flannel cni/flannel "" github.com/containernetworking/plugins "" \
		flannel-cni-plugin=github.com/containernetworking/plugins/plugins/meta/flannel
}

# CoreDNS stamps only its git commit at link time; its version is a constant.
family_coredns() {
	build_family coredns coredns "" github.com/coredns/coredns "" \
		coredns=github.com/coredns/coredns
}

# rancher's local-path-provisioner, the lab's default StorageClass. Its main
# package is its module's root; its release build stamps the version, which
# `local-path-provisioner --version` prints and lab.ResolveImage checks.
family_local_path_provisioner() {
	local version
	version=$(cd "$tools_dir/local-path-provisioner" && module_field github.com/rancher/local-path-provisioner '{{.Version}}')
	build_family local-path-provisioner local-path-provisioner "" github.com/rancher/local-path-provisioner "-X main.VERSION=$version" \
		local-path-provisioner=github.com/rancher/local-path-provisioner
}

# kube-router, the pod network make bench measures beside kubeboot's flannel
# (--bench): routes between the nodes by BGP, and its own NetworkPolicy. The
# module proxy serves it only at v2.1.0, which has reported flaws, so
# kubeboot never installs it; the bench runs it as a user's own CNI
# (addons.cni none and addons.manifests). Its release build stamps the
# version, which lab.ResolveImage checks.
family_kube_router() {
	local version
	version=$(cd "$tools_dir/kube-router" && module_field github.com/cloudnativelabs/kube-router/v2 '{{.Version}}')
	build_family kube-router kube-router "" github.com/cloudnativelabs/kube-router/v2 \
		"-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$version" \
		kube-router=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
}

# The CoreDNS kubeadm v1.35 pins, for a v1.35 lab cluster and the upgrade
# test. The lab looks up an image's binary in the v<major>.<minor>/ of its
# tag (v1.13/ for coredns:v1.13.1), as it does the v1.35 set's.
family_coredns_v1_13() {
	build_family coredns-v1.13 coredns/v1.13 v1.13 github.com/coredns/coredns "" \
		coredns=github.com/coredns/coredns
}

# SeaweedFS's version is a constant of the module; the git commit it stamps
# is unknown to the module proxy, so it is left unset.
family_seaweedfs() {
	build_family seaweedfs seaweedfs "" github.com/seaweedfs/seaweedfs "" \
		weed=github.com/seaweedfs/seaweedfs/weed
}

family_pause() {
	build_family pause pause "" github.com/kubeboot/kubeboot/test/tools/pause "" \
		pause=github.com/kubeboot/kubeboot/test/tools/pause
}

# build_tree <family> <fingerprint> <dest> <function>: runs <function>
# <scratch dir> to make a directory tree, then renames it to <dest>, or
# reuses <dest> when the recorded fingerprint still matches. For the
# families that are no `go build`.
build_tree() {
	local family=$1 fingerprint=$2 dest=$3 make_tree=$4
	local stamp="$bin_dir/.stamps/$family"
	if ! $force && [[ -d $dest && -f $stamp && $(sed -n 1p "$stamp") == "$fingerprint" ]]; then
		printf 'reused %-40s (%s build took %s)\n' "${dest#"$bin_dir"/}" "$family" "$(fmt_duration "$(sed -n 2p "$stamp")")"
		return
	fi
	mkdir -p "$bin_dir/.stamps" "$(dirname "$dest")"
	rm -f "$stamp"
	scratch=$(mktemp -d "$bin_dir/.build-$family.XXXXXX")
	echo "building $family" >&2
	local start=$SECONDS
	"$make_tree" "$scratch"
	local took=$((SECONDS - start))
	rm -rf "$dest"
	mv "$scratch/tree" "$dest"
	printf 'built  %-40s (%s build took %s)\n' "${dest#"$bin_dir"/}" "$family" "$(fmt_duration "$took")"
	printf '%s\n%s\n' "$fingerprint" "$took" >"$stamp"
	rm -rf "$scratch"
	scratch=
}

# Upstream's BusyBox, as the root file system of Kubernetes' busybox test
# image (busybox:1.37.0-1), which the lab's agnhost image is laid on: the
# release's source, from the tarball Debian mirrors (Debian's own build
# drops environment variables whose names are no shell names, which the
# conformance tests pass), its default configuration linked statically;
# every applet a hard link in /bin, the busybox image's users and groups.
busybox_version=1.37.0
busybox_sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4

make_busybox_tree() {
	local work=$1 src tree=$1/tree applet
	src="$work/busybox-$busybox_version"
	curl -fsSL -o "$work/busybox.tar.bz2" "http://deb.debian.org/debian/pool/main/b/busybox/busybox_$busybox_version.orig.tar.bz2"
	echo "$busybox_sha256  $work/busybox.tar.bz2" | sha256sum --check --quiet
	tar -xjf "$work/busybox.tar.bz2" -C "$work"
	(
		cd "$src"
		make -s defconfig >/dev/null
		sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config
		make -s -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
	)
	mkdir -p "$tree"/{bin,dev,etc,home,root,tmp,usr/sbin,var/spool/mail,var/www}
	chmod 700 "$tree/root"
	chmod 1777 "$tree/tmp"
	install -m 755 "$src/busybox" "$tree/bin/busybox"
	for applet in $("$src/busybox" --list); do
		[[ -e $tree/bin/$applet ]] || ln "$tree/bin/busybox" "$tree/bin/$applet"
	done
	cat >"$tree/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		daemon:x:1:1:daemon:/usr/sbin:/bin/false
		bin:x:2:2:bin:/bin:/bin/false
		sys:x:3:3:sys:/dev:/bin/false
		sync:x:4:100:sync:/bin:/bin/sync
		mail:x:8:8:mail:/var/spool/mail:/bin/false
		www-data:x:33:33:www-data:/var/www:/bin/false
		operator:x:37:37:Operator:/var:/bin/false
		nobody:x:65534:65534:nobody:/home:/bin/false
	EOF
	cat >"$tree/etc/group" <<-'EOF'
		root:x:0:
		daemon:x:1:
		bin:x:2:
		sys:x:3:
		adm:x:4:
		tty:x:5:
		disk:x:6:
		lp:x:7:
		mail:x:8:
		kmem:x:9:
		wheel:x:10:root
		cdrom:x:11:
		dialout:x:18:
		floppy:x:19:
		video:x:28:
		audio:x:29:
		tape:x:32:
		www-data:x:33:
		operator:x:37:
		utmp:x:43:
		plugdev:x:46:
		staff:x:50:
		lock:x:54:
		netdev:x:82:
		users:x:100:
		nobody:x:65534:
	EOF
}

family_busybox() {
	build_tree busybox "$(printf '%s\n' "$busybox_version" "$busybox_sha256" "$(declare -f make_busybox_tree)" | sha256sum | cut -d' ' -f1)" \
		"$bin_dir/rootfs/busybox" make_busybox_tree
}

# deb_closure <package>...: the packages and, recursively, the first
# installable alternative of each of their dependencies, but not the
# packages that only run maintainer scripts (an image runs none).
maintainer_packages=" dpkg debconf cdebconf install-info perl-base base-files debianutils tar gawk mawk original-awk "
deb_closure() {
	local -A seen=()
	local queue=("$@") pkg dep
	while ((${#queue[@]})); do
		pkg=${queue[0]}
		queue=("${queue[@]:1}")
		[[ -z ${seen[$pkg]:-} && $maintainer_packages != *" $pkg "* ]] || continue
		seen[$pkg]=1
		echo "$pkg"
		for dep in $(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$pkg" |
			awk '/^ [ |](Pre)?Depends: / { alt = substr($0, 2, 1) == "|"; if (!done && $2 !~ /^</) { print $2; done = 1 }; if (!alt) done = 0 }'); do
			queue+=("$dep")
		done
	done
}

# unpack_debs <tree> <package>...: Debian's packages and their closure,
# unpacked into <tree> without their documentation.
unpack_debs() {
	local tree=$1 debs deb
	shift
	mkdir -p "$tree" "$tree.debs"
	# A fresh machine's package lists may be missing, or name versions the
	# mirror has replaced since.
	apt-cache show --no-all-versions "$@" >/dev/null 2>&1 || apt-get update -qq
	debs=$(deb_closure "$@")
	# shellcheck disable=SC2086 # one word per package
	(cd "$tree.debs" && { apt-get download -qq $debs 2>/dev/null || { apt-get update -qq && apt-get download -qq $debs; }; })
	for deb in "$tree.debs"/*.deb; do
		dpkg-deb -x "$deb" "$tree"
	done
	rm -rf "$tree.debs" "$tree"/usr/share/{doc,man,info,locale,lintian,bash-completion} "$tree"/usr/lib/x86_64-linux-gnu/gconv
}

# The tools Kubernetes' agnhost image adds to its base, which its tests run
# in agnhost's pods (curl, dig and nslookup, nc, ip and ss, iperf, bash,
# and getent, which Alpine's C library has), from Debian's packages. The agnhost image is this tree laid on BusyBox's,
# with agnhost (see lab.ResolveImage); the tree adds agnhost's /agnhost-2,
# /uploads and the porter's and test-webserver's /localhost.crt and .key.
agnhost_packages=(curl bind9-dnsutils netcat-openbsd iproute2 iperf bash libc-bin)

make_agnhost_tree() {
	local tree=$1/tree
	unpack_debs "$tree" "${agnhost_packages[@]}"
	# What the packages' maintainer scripts would have linked.
	ln -sf /bin/nc.openbsd "$tree/usr/bin/nc"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$tree/etc/nsswitch.conf"
	mkdir "$tree/uploads"
	ln -s agnhost "$tree/agnhost-2"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj /CN=localhost \
		-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$tree/localhost.key" -out "$tree/localhost.crt" 2>/dev/null
	chmod 644 "$tree/localhost.key"
}

family_agnhost_tree() {
	local fingerprint
	fingerprint=$(printf '%s\n' "$(declare -f make_agnhost_tree unpack_debs deb_closure)" "$maintainer_packages" "${agnhost_packages[@]}" | sha256sum | cut -d' ' -f1)
	build_tree agnhost-tree "$fingerprint" "$bin_dir/rootfs/agnhost" make_agnhost_tree
}

# What kube-router runs besides itself (--bench), from Debian's packages:
# ipset, ip (iproute2) and iptables, whose names its maintainer scripts would have linked
# to the nftables backend, as the host's are. The lab's kube-router image is
# this tree laid on BusyBox's (whose sh its CNI installer runs), with the
# binary (see lab.ResolveImage).
make_kube_router_tree() {
	local tree=$1/tree name
	unpack_debs "$tree" ipset iptables iproute2
	for name in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -sf xtables-nft-multi "$tree/usr/sbin/$name"
	done
}

family_kube_router_tree() {
	local fingerprint
	fingerprint=$(printf '%s\n' "$(declare -f make_kube_router_tree unpack_debs deb_closure)" "$maintainer_packages" | sha256sum | cut -d' ' -f1)
	build_tree kube-router-tree "$fingerprint" "$bin_dir/rootfs/kube-router" make_kube_router_tree
}

# The conformance tests' images that are not the lab's (--conformance):
# nginx's (upstream's is nginx on Alpine, so here Debian's nginx, laid on
# BusyBox's tree) and glibc-dns-testing's (upstream's is Debian's bookworm
# with dnsutils: dash, coreutils, glibc's getent and dig).
make_nginx_tree() {
	local tree=$1/tree
	unpack_debs "$tree" nginx-light
	rm -rf "$tree/etc/nginx/sites-enabled" "$tree/etc/nginx/sites-available"
	mkdir -p "$tree"/var/{log,lib}/nginx "$tree/usr/share/nginx/html" "$tree/run"
	echo '<h1>Welcome to nginx!</h1>' >"$tree/usr/share/nginx/html/index.html"
	cat >"$tree/etc/nginx/nginx.conf" <<-'EOF'
		user www-data;
		worker_processes 1;
		error_log /dev/stderr;
		pid /run/nginx.pid;
		events { worker_connections 256; }
		http {
			include /etc/nginx/mime.types;
			access_log /dev/stdout;
			server {
				listen 80;
				root /usr/share/nginx/html;
			}
		}
	EOF
}

make_glibc_dns_testing_tree() {
	local tree=$1/tree
	unpack_debs "$tree" dash coreutils libc-bin bind9-dnsutils
	ln -sf dash "$tree/bin/sh"
	mkdir -p "$tree/tmp"
	chmod 1777 "$tree/tmp"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$tree/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$tree/etc/group"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$tree/etc/nsswitch.conf"
}

family_conformance_trees() {
	local name fn fingerprint
	for name in nginx glibc-dns-testing; do
		fn=make_${name//-/_}_tree
		fingerprint=$(printf '%s\n' "$(declare -f "$fn" unpack_debs deb_closure)" "$maintainer_packages" | sha256sum | cut -d' ' -f1)
		build_tree "$name-tree" "$fingerprint" "$bin_dir/rootfs/$name" "$fn"
	done
}

# The aggregated API server of the aggregator's conformance test, at the
# release its image's tag names (sample-apiserver:1.29.2), and nnp, the
# nonewprivs image's setuid program (this repository's own).
family_sample_apiserver() {
	build_family sample-apiserver sample-apiserver "" k8s.io/sample-apiserver "" \
		sample-apiserver=k8s.io/sample-apiserver
}

family_nnp() {
	build_family nnp nnp "" github.com/kubeboot/kubeboot/test/tools/nnp "" \
		nnp=github.com/kubeboot/kubeboot/test/tools/nnp
}

# --- main -----------------------------------------------------------------------

start=$SECONDS
for family in "${families[@]}"; do
	"$family"
done
echo "binaries in $bin_dir ($(fmt_duration $((SECONDS - start))) in total)"
