#!/bin/bash
# fitgate's offline kind node image: everything from Go modules and Debian packages, no
# image registry. Prints the image's tag on stdout (progress on stderr).
#
#   e2e/cluster/kind/build-node.sh <python>
#
# 1. A container engine (../container/engine.sh: the user's Docker or a private dockerd).
# 2. Binaries from Go modules (e2e/cluster/local/build.py, cached under $FITGATE_CACHE/bin):
#    kubelet, kubeadm, kube-proxy, kubectl, crictl, coredns, kind, containerd v2.4.2 (with
#    its runc shim and ctr), and the control plane (kube-apiserver, kube-controller-manager,
#    kube-scheduler, etcd).
# 3. Two Debian bookworm bases made by mmdebstrap and `docker import`ed: the node's (systemd,
#    runc, CNI plugins, iptables) and the component images' (iptables,
#    conntrack). Tagged with a hash of their package lists.
# 4. One image per component under kubeadm's names (registry.k8s.io/...), plus pause and the
#    fake DRA kubelet plugin (fitgate.local/kind-dra-driver:latest, dra-driver.yaml) and
#    Kueue (fitgate.local/kueue:v0.19.2, for its own manifests: stack.py) and the tests'
#    workload image (fitgate.local/kind-workload:latest: a shell and coreutils); saved
#    into one tar that the node imports at boot (node/kind-images.service).
# 5. The node image (node/Dockerfile) with kind v0.33.0's own node files (images/base/files
#    from its Go module), tagged fitgate-kind-node:v1.37.2-<hash of every input>. When that
#    tag exists nothing is rebuilt (the warm path).
set -euo pipefail
py=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cache=${FITGATE_CACHE:-$HOME/.cache/fitgate}
start=$(date +%s)
eval "$("$root/e2e/cluster/container/engine.sh")"
log() { echo "[kind-node] $*" >&2; }

kube=v1.37.2
etcd_tag=3.6.16-0       # the project's etcd (set as etcd.local.imageTag in kind-config)
coredns_tag=v1.15.0     # set as dns.imageTag in kind-config
pause_tag=3.10.2        # kubeadm's pause for v1.37; containerd's sandbox_image too
kueue_tag=v0.19.2       # Kueue's manifests get this image (stack.py)

bins=(kubelet kubeadm kube-proxy kubectl crictl coredns kind containerd containerd-shim-runc-v2
      ctr kind-dra-driver kueue kube-apiserver kube-controller-manager kube-scheduler etcd)
declare -A bin
while IFS='=' read -r k v; do bin[$k]=$v; done < <(cd "$root" && "$py" -c '
import sys
from e2e.cluster.local import build
for k, v in build.ensure(sys.argv[1:], "1.37").items():
    print(f"{k}={v}")' "${bins[@]}")
t_bins=$(date +%s)
kind_mod=$(cd "$root" && "$py" -c '
from e2e.cluster.local import build
print(build.module_source("sigs.k8s.io/kind", build.KIND_VERSION, "kind"))')

# The node's packages: runc is Debian bookworm's (1.1.5). containerd is ours (v2.4.2, for CDI:
# see README.md); Debian's 1.6 comes with the package list and node/Dockerfile deletes its
# binaries, so only ours can run.
node_pkgs=systemd,dbus,containerd,runc,containernetworking-plugins,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,bash,ca-certificates,jq,procps,socat,pigz,e2fsprogs
img_pkgs=iptables,conntrack,nftables,iproute2,ca-certificates,netbase
node_base=fitgate-kind-base:bookworm-$(echo "$node_pkgs" | sha256sum | cut -c1-12)
img_base=fitgate-kind-imgbase:bookworm-$(echo "$img_pkgs" | sha256sum | cut -c1-12)

inputs=$( { echo "$node_base $img_base $kube $etcd_tag $coredns_tag $pause_tag $kueue_tag";
            for b in "${bins[@]}"; do echo "$b ${bin[$b]}"; done
            sha256sum < "$0"
            (cd "$here" && find node images -type f -print0 | sort -z | xargs -0 sha256sum); } \
          | sha256sum | cut -c1-12)
tag=fitgate-kind-node:$kube-$inputs
if docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is up to date ($(( $(date +%s) - start ))s)"
    echo "$tag"
    exit 0
fi

debian_base() {  # <tag> <packages> [extra mmdebstrap args]
    local t=$1 pkgs=$2; shift 2
    docker image inspect "$t" >/dev/null 2>&1 && return 0
    command -v mmdebstrap >/dev/null 2>&1 || \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mmdebstrap >&2
    local tmp; tmp=$(mktemp -d)
    log "mmdebstrap $t"
    mmdebstrap --variant=minbase --quiet --include="$pkgs" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        "$@" bookworm "$tmp/rootfs.tar" >&2
    docker import --change 'CMD ["/bin/sh"]' "$tmp/rootfs.tar" "$t" >/dev/null
    rm -rf "$tmp"
}
debian_base "$node_base" "$node_pkgs"
debian_base "$img_base" "$img_pkgs"
t_bases=$(date +%s)

ctx=$cache/kind/ctx
rm -rf "$ctx"
mkdir -p "$ctx/img" "$ctx/node/bin" "$ctx/node/kind"
trap 'docker image prune --force --filter "label=org.fitgate.kind=1" >/dev/null || true; rm -rf "$ctx"' EXIT
cp "$here/images/Dockerfile" "$here/images/pause" "$ctx/img/"
component_image() {  # <binary name> <image name:tag> [alias path] [user]
    local b=$1
    [ "$b" = pause ] || cp "${bin[$b]}" "$ctx/img/$b"
    DOCKER_BUILDKIT=0 docker build --quiet --force-rm --build-arg "IMG_BASE=$img_base" \
        --build-arg "BIN=$b" --build-arg "ALIAS=${3:-}" --build-arg "USER=${4:-0}" -t "$2" "$ctx/img" >/dev/null
    [ "$b" = pause ] || rm -f "$ctx/img/$b"
}
images=(registry.k8s.io/kube-apiserver:$kube registry.k8s.io/kube-controller-manager:$kube
        registry.k8s.io/kube-scheduler:$kube registry.k8s.io/kube-proxy:$kube
        registry.k8s.io/etcd:$etcd_tag registry.k8s.io/coredns/coredns:$coredns_tag
        registry.k8s.io/pause:$pause_tag fitgate.local/kind-dra-driver:latest
        fitgate.local/kueue:$kueue_tag fitgate.local/kind-workload:latest)
for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    component_image "$b" "registry.k8s.io/$b:$kube"
done
component_image etcd "registry.k8s.io/etcd:$etcd_tag"
component_image coredns "registry.k8s.io/coredns/coredns:$coredns_tag"
component_image pause "registry.k8s.io/pause:$pause_tag"
component_image kind-dra-driver fitgate.local/kind-dra-driver:latest
component_image kueue "fitgate.local/kueue:$kueue_tag" /manager 65532:65532
# The tests' workload image: the component base (a shell, coreutils), command given by the pod.
component_image pause fitgate.local/kind-workload:latest
docker save "${images[@]}" > "$ctx/node/images.tar"
t_images=$(date +%s)

cp -r "$kind_mod/images/base/files/usr" "$kind_mod/images/base/files/kind" \
      "$kind_mod/images/base/files/etc" "$ctx/node/kind/"
chmod -R u+w "$ctx/node/kind"
for b in kubelet kubeadm kubectl crictl containerd containerd-shim-runc-v2 ctr; do cp "${bin[$b]}" "$ctx/node/bin/$b"; done
# kind's containerd config with the sandbox image kubeadm expects and, because the node's
# bounding set may lack CAP_SYS_RESOURCE (see README.md), restrict_oom_score_adj on.
sed -e "s#registry.k8s.io/pause:3.10\"#registry.k8s.io/pause:$pause_tag\"#" \
    -e 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
    "$kind_mod/images/base/files/etc/containerd/config.toml" > "$ctx/node/config.toml"
grep -q "pause:$pause_tag" "$ctx/node/config.toml"
grep -q 'restrict_oom_score_adj = true' "$ctx/node/config.toml"
cp "$here/node/Dockerfile" "$here/node/12-cgroupv1.conf" "$here/node/kind-images.service" "$ctx/node/"
echo "$kube" > "$ctx/node/version"
DOCKER_BUILDKIT=0 docker build --quiet --force-rm --build-arg "NODE_BASE=$node_base" \
    -t "$tag" "$ctx/node" >/dev/null
docker image ls --format '{{.Repository}}:{{.Tag}}' fitgate-kind-node | grep -vx "$tag" \
    | xargs -r docker image rm >/dev/null || true
end=$(date +%s)
size=$(docker image inspect -f '{{.Size}}' "$tag")
log "built $tag in $(( end - start ))s (binaries $(( t_bins - start ))s, bases" \
    "$(( t_bases - t_bins ))s, component images $(( t_images - t_bases ))s, node image" \
    "$(( end - t_images ))s); size $(( size / 1000000 )) MB"
echo "$tag"
