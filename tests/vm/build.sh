#!/usr/bin/env bash
# tests/vm/build.sh: everything `make test-vm` boots, cached under
# tests/.cache/vm (gitignored). Idempotent: a second run only checks stamps.
#
#   build.sh                      packages, kernel, modules, base initramfs
#   build.sh --overlay DIR OUT    also: OUT = base initramfs + a second cpio
#                                 archive of DIR's tree (laid at /), for the
#                                 per-run files (registry CA, auth.json)
#   PH_VM_KERNEL_ONLY=1 build.sh  packages, kernel and modules only (for
#                                 tests/vm/systemd/build.sh)
#
# - qemu-system-x86 and busybox-static are installed with apt-get when missing
#   (apt-get update only then).
# - The kernel is Debian's: the package linux-image-amd64 depends on is fetched
#   with `apt-get download` and unpacked with `dpkg -x` (never installed); only
#   vmlinuz and the modules the guest loads (plus their dependencies from
#   modules.dep, made with busybox depmod) are kept.
# - The base initramfs (cpio newc, gzip) holds busybox with its applet links,
#   bin/pullhelper (`make build`: static, CGO_ENABLED=0), /init
#   (tests/vm/init), the guest tests (tests/vm/guest-tests.sh, sourcing
#   tests/vm/harness.sh) and the modules with their load order. Secrets are never in it: the CA and the
#   auth file travel in the overlay, which the kernel unpacks on top.
#
# Prints the paths it produced as KEY=VALUE lines on stdout (VM_KERNEL,
# VM_INITRD_BASE, VM_KERNEL_PKG); progress goes to stderr.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HARNESS=$VM_DIR/harness.sh
ROOT=$(cd "$VM_DIR/../.." && pwd)
CACHE=${PH_VM_CACHE:-$ROOT/tests/.cache/vm}
# Modules the guest loads: the NIC (-device e1000), the disk (virtio-blk on
# virtio-pci) and the filesystem on it (ext2 through ext4, which supports
# cgroup writeback, and wants the crc32c driver at mount time). Their
# dependencies are added from modules.dep.
VM_MODULES=${PH_VM_MODULES:-"e1000 virtio_pci virtio_blk ext4 crc32c_generic"}
APT_PACKAGES="qemu-system-x86 busybox-static"
BUSYBOX=/bin/busybox

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() {
    printf 'build.sh: error: %s\n' "$*" >&2
    exit 1
}

overlay_dir="" overlay_out=""
while (($#)); do
    case "$1" in
        --overlay)
            [[ $# -ge 3 ]] || die "--overlay needs DIR and OUT"
            overlay_dir=$2 overlay_out=$3
            shift 3
            ;;
        *) die "unknown argument $1" ;;
    esac
done

mkdir -p "$CACHE"
exec {lockfd}>"$CACHE/.lock"
flock -w 900 "$lockfd" || die "could not lock $CACHE/.lock"

###############################################################################
# Packages

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=""
for p in $APT_PACKAGES; do installed "$p" || missing+=" $p"; done
if [[ -n $missing ]]; then
    [[ $(id -u) == 0 ]] || die "need root to apt-get install:$missing"
    log "installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found after installing qemu-system-x86"
# grep without -q reads the whole list: -q would exit at the match and fail the
# pipeline (pipefail) with busybox killed by SIGPIPE, now and then.
[[ -x $BUSYBOX ]] && "$BUSYBOX" --list | grep -x cpio >/dev/null || die "$BUSYBOX (busybox-static) missing or without cpio"

###############################################################################
# Kernel

resolve_kernel_pkg() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
kpkg=${PH_VM_KERNEL_PKG:-$(resolve_kernel_pkg)}
if [[ -z $kpkg ]]; then
    log "apt-cache knows no linux-image-amd64; running apt-get update"
    apt-get update -qq
    kpkg=$(resolve_kernel_pkg)
fi
[[ $kpkg =~ ^linux-image-([0-9][A-Za-z0-9.+-]*)$ ]] || die "cannot resolve the kernel package from linux-image-amd64 (got '$kpkg')"
kver=${kpkg#linux-image-}
KDIR="$CACHE/kernel-$kver"
kstamp="$kpkg modules: $VM_MODULES"
if [[ ! -f $KDIR/vmlinuz || ! -f $KDIR/modules/load.order || $(cat "$KDIR/.stamp" 2>/dev/null) != "$kstamp" ]]; then
    mkdir -p "$CACHE/dl"
    deb=$(ls "$CACHE"/dl/"${kpkg}"_*.deb 2>/dev/null | head -1 || true)
    if [[ -z $deb ]]; then
        log "apt-get download $kpkg"
        if ! (cd "$CACHE/dl" && apt-get -q -o APT::Sandbox::User=root download "$kpkg" >&2); then
            # A stale package list names a version the archive dropped.
            [[ -z ${PH_VM_KERNEL_PKG:-} ]] || die "apt-get download $kpkg failed"
            log "download failed; apt-get update and resolving again"
            apt-get update -qq
            kpkg=$(resolve_kernel_pkg)
            kver=${kpkg#linux-image-}
            KDIR="$CACHE/kernel-$kver"
            kstamp="$kpkg modules: $VM_MODULES"
            (cd "$CACHE/dl" && apt-get -q -o APT::Sandbox::User=root download "$kpkg" >&2) ||
                die "apt-get download $kpkg failed"
        fi
        deb=$(ls "$CACHE"/dl/"${kpkg}"_*.deb | head -1)
    fi
    tmp=$(mktemp -d "$CACHE/.kernel.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    log "unpacking $(basename "$deb")"
    dpkg -x "$deb" "$tmp/x"
    [[ -f $tmp/x/boot/vmlinuz-$kver ]] || die "no boot/vmlinuz-$kver in $deb"
    "$BUSYBOX" depmod -b "$tmp/x" "$kver"
    mdir="$tmp/x/lib/modules/$kver"
    [[ -s $mdir/modules.dep ]] || die "busybox depmod wrote no modules.dep"

    # modules.dep: "kernel/path/a.ko: kernel/path/b.ko ..." -> load order,
    # dependencies first, each module once.
    declare -A deps=() bypath=() seen=()
    while IFS= read -r line; do
        m=${line%%:*}
        deps[$m]=${line#*:}
        n=${m##*/}
        n=${n%.ko*}
        bypath[$n]=$m
    done <"$mdir/modules.dep"
    order=()
    visit() {
        local m=$1 d
        [[ -n ${seen[$m]:-} ]] && return 0
        seen[$m]=1
        for d in ${deps[$m]}; do visit "$d"; done
        order+=("$m")
    }
    for n in $VM_MODULES; do
        [[ -n ${bypath[$n]:-} ]] || die "module $n not in $kpkg (builtin? see modules.builtin)"
        visit "${bypath[$n]}"
    done
    rm -rf "$KDIR.new"
    mkdir -p "$KDIR.new/modules"
    cp "$tmp/x/boot/vmlinuz-$kver" "$KDIR.new/vmlinuz"
    cp "$tmp/x/boot/config-$kver" "$KDIR.new/config"
    for m in "${order[@]}"; do
        case $m in *.ko) ;; *) die "$m is compressed; the guest's insmod takes plain .ko only" ;; esac
        cp "$mdir/$m" "$KDIR.new/modules/"
        n=${m##*/}
        echo "${n%.ko}"
    done >"$KDIR.new/modules/load.order"
    echo "$kstamp" >"$KDIR.new/.stamp"
    rm -rf "$KDIR"
    mv "$KDIR.new" "$KDIR"
    rm -rf "$tmp"
    trap - EXIT
    log "kernel $kver with modules: $(tr '\n' ' ' <"$KDIR/modules/load.order")"
fi

if [[ ${PH_VM_KERNEL_ONLY:-0} == 1 ]]; then
    # tests/vm/systemd/build.sh: only the kernel and modules.
    echo "VM_KERNEL_PKG=$kpkg"
    echo "VM_KERNEL=$KDIR/vmlinuz"
    exit 0
fi

###############################################################################
# Base initramfs

log "make build"
make -s -C "$ROOT" build >&2
PULLHELPER="$ROOT/bin/pullhelper"
# The initramfs has no dynamic loader: the binary must have no PT_INTERP.
python3 - "$PULLHELPER" <<'EOF' || die "$PULLHELPER is not a static ELF binary (CGO_ENABLED=0)"
import struct, sys
d = open(sys.argv[1], "rb").read(4096)
assert d[:4] == b"\x7fELF" and d[4] == 2
phoff, = struct.unpack_from("<Q", d, 32)
phentsize, phnum = struct.unpack_from("<HH", d, 54)
sys.exit(any(struct.unpack_from("<I", d, phoff + i * phentsize)[0] == 3 for i in range(phnum)))
EOF

base="$CACHE/initramfs-base.cpio.gz"
bstamp=$(
    {
        echo "$kstamp"
        sha256sum "$PULLHELPER" "$PULLHELPER-child" "$BUSYBOX" "$VM_DIR/init" "$VM_DIR/guest-tests.sh" "$HARNESS" "$KDIR"/modules/* "${BASH_SOURCE[0]}"
    } | sha256sum | cut -d' ' -f1
)
if [[ ! -f $base || $(cat "$base.stamp" 2>/dev/null) != "$bstamp" ]]; then
    st=$(mktemp -d "$CACHE/.initramfs.XXXXXX")
    trap 'rm -rf "$st"' EXIT
    mkdir -p "$st"/{bin,dev,proc,sys,tmp,root,mnt,run,etc/phvm,var/tmp,lib/modules,phvm}
    ln -s bin "$st/sbin"
    mkdir -p "$st/usr"
    ln -s ../bin "$st/usr/bin"
    ln -s ../bin "$st/usr/sbin"
    cp "$BUSYBOX" "$st/bin/busybox"
    for a in $("$BUSYBOX" --list); do
        [[ $a == busybox ]] || ln -s busybox "$st/bin/$a"
    done
    install -m 0755 "$PULLHELPER" "$st/bin/pullhelper"
    install -m 0755 "$PULLHELPER-child" "$st/bin/pullhelper-child"
    install -m 0755 "$VM_DIR/init" "$st/init"
    install -m 0755 "$VM_DIR/guest-tests.sh" "$st/phvm/guest-tests.sh"
    install -m 0644 "$HARNESS" "$st/phvm/harness.sh"
    cp "$KDIR"/modules/* "$st/lib/modules/"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$st/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$st/etc/group"
    chmod 0700 "$st/root"
    chmod 1777 "$st/tmp" "$st/var/tmp"
    # The kernel opens /dev/console for init before /init mounts devtmpfs.
    mknod -m 0600 "$st/dev/console" c 5 1 2>/dev/null || true
    (cd "$st" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -1 >"$base.tmp"
    mv -f "$base.tmp" "$base"
    echo "$bstamp" >"$base.stamp"
    rm -rf "$st"
    trap - EXIT
    log "initramfs $(du -h "$base" | cut -f1) $base"
fi

###############################################################################
# Per-run overlay

if [[ -n $overlay_dir ]]; then
    [[ -d $overlay_dir ]] || die "--overlay: $overlay_dir is not a directory"
    (
        umask 077
        (cd "$overlay_dir" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -1 >"$overlay_out.overlay"
        cat "$base" "$overlay_out.overlay" >"$overlay_out"
        rm -f "$overlay_out.overlay"
    )
fi

echo "VM_KERNEL_PKG=$kpkg"
echo "VM_KERNEL=$KDIR/vmlinuz"
echo "VM_INITRD_BASE=$base"
