#!/usr/bin/env bash
# tests/vm/systemd/build.sh: everything `make test-vm-systemd` boots, cached
# under tests/.cache/vm-systemd (gitignored). Idempotent: a second run only
# checks stamps.
#
#   build.sh                      packages, kernel, root filesystem, initramfs
#   build.sh --overlay DIR OUT    also: OUT = base initramfs + a second cpio
#                                 archive of DIR's tree (the per-run files:
#                                 registry CA, auth.json, addresses)
#
# - mmdebstrap, qemu-system-x86, busybox-static and e2fsprogs are installed
#   with apt-get when missing (apt-get update only then).
# - The kernel and its modules are tests/vm/build.sh's (Debian's kernel
#   package, fetched with apt-get download, never installed).
# - The root filesystem is Debian bookworm built by mmdebstrap (variant
#   minbase) from deb.debian.org with systemd as /sbin/init and dbus (for
#   systemd's transient units), customised (a fixed machine-id, no getty on
#   the serial console, the test unit enabled) and made into an ext4 image
#   with `mke2fs -d`. Its stamp is the recipe (suite, packages, the
#   customisation, the unit file): a change rebuilds it, nothing else does.
#   The guest boots it with snapshot=on, so the cached image never changes.
# - The initramfs (busybox, the modules, tests/vm/systemd/init, bin/pullhelper
#   and the guest tests with tests/vm/harness.sh) loads the modules, mounts the image as /, copies
#   pullhelper, the tests and the per-run files in and switch_roots to
#   systemd. pullhelper is not in the image: a rebuild of it only remakes the
#   initramfs (seconds), never the root filesystem.
#
# Prints KEY=VALUE lines on stdout (VM_KERNEL, VM_KERNEL_PKG, VM_INITRD_BASE,
# VM_ROOTFS); progress goes to stderr.
set -euo pipefail

SD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_DIR=$(cd "$SD_DIR/.." && pwd)
HARNESS=$VM_DIR/harness.sh
ROOT=$(cd "$VM_DIR/../.." && pwd)
CACHE=${PH_VM_SYSTEMD_CACHE:-$ROOT/tests/.cache/vm-systemd}
SUITE=bookworm
MIRROR=${PH_VM_MIRROR:-http://deb.debian.org/debian}
# systemd as PID 1 (systemd-sysv: /sbin/init), dbus for its D-Bus API
# (transient scopes are made over it), iproute2 to configure the NIC.
ROOT_PACKAGES="systemd systemd-sysv dbus iproute2"
APT_PACKAGES="mmdebstrap qemu-system-x86 busybox-static e2fsprogs"
BUSYBOX=/bin/busybox
ROOTFS_SIZE=1536M

log() { printf 'vm-systemd/build.sh: %s\n' "$*" >&2; }
die() {
    printf 'vm-systemd/build.sh: error: %s\n' "$*" >&2
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
command -v mmdebstrap >/dev/null || die "mmdebstrap not found after installing it"
command -v mke2fs >/dev/null || die "mke2fs not found after installing e2fsprogs"

###############################################################################
# Kernel and modules: tests/vm/build.sh's.

vars=$(PH_VM_KERNEL_ONLY=1 bash "$VM_DIR/build.sh")
eval "$vars"
KDIR=$(dirname "$VM_KERNEL")
[[ -f $KDIR/modules/load.order ]] || die "no modules in $KDIR"

###############################################################################
# Root filesystem

# customize ROOT: what the image holds beyond the packages. Part of the
# stamp (declare -f), so a change here rebuilds the image.
customize() {
    local r=$1 u
    # Not a first boot (no systemd-firstboot prompt on the console): a fixed
    # machine-id.
    echo 5eb1e0c0a9d34c3fa1d0c2e7f09b7a11 >"$r/etc/machine-id"
    echo phvm-systemd >"$r/etc/hostname"
    : >"$r/etc/fstab"
    # The console is the test's output channel: no getty on it, nothing
    # that waits for a terminal, no timers that would start work mid-test.
    for u in serial-getty@ttyS0.service getty@tty1.service systemd-firstboot.service \
        apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
        fstrim.timer systemd-tmpfiles-clean.timer; do
        ln -sf /dev/null "$r/etc/systemd/system/$u"
    done
    mkdir -p "$r/etc/systemd/system.conf.d" "$r/etc/systemd/system/multi-user.target.wants" "$r/phvm" "$r/etc/phvm"
    printf '[Manager]\nShowStatus=no\nLogLevel=info\nDefaultTimeoutStartSec=60s\n' >"$r/etc/systemd/system.conf.d/phvm.conf"
    install -m 0644 "$SD_DIR/pullhelper-vmtest.service" "$r/etc/systemd/system/pullhelper-vmtest.service"
    ln -sf ../pullhelper-vmtest.service "$r/etc/systemd/system/multi-user.target.wants/pullhelper-vmtest.service"
    rm -rf "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/*
}
rootfs="$CACHE/rootfs-$SUITE.ext4"
rstamp=$(
    {
        echo "$SUITE $MIRROR $ROOT_PACKAGES $ROOTFS_SIZE"
        declare -f customize
        cat "$SD_DIR/pullhelper-vmtest.service"
    } | sha256sum | cut -d' ' -f1
)
if [[ ! -f $rootfs || $(cat "$rootfs.stamp" 2>/dev/null) != "$rstamp" ]]; then
    t=$SECONDS
    rt=$(mktemp -d "$CACHE/.rootfs.XXXXXX")
    trap 'rm -rf "$rt"' EXIT
    log "mmdebstrap --variant=minbase $SUITE with: $ROOT_PACKAGES (from $MIRROR)"
    # No documentation, manuals or translations: a smaller image, faster to
    # make and to boot from.
    mmdebstrap --quiet --mode=root --variant=minbase --include="${ROOT_PACKAGES// /,}" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        "$SUITE" "$rt/root" "$MIRROR" >&2 || die "mmdebstrap failed"
    customize "$rt/root"
    truncate -s "$ROOTFS_SIZE" "$rt/rootfs.ext4"
    mke2fs -q -F -t ext4 -L phvmroot -d "$rt/root" "$rt/rootfs.ext4" >&2 || die "mke2fs -d failed"
    mv -f "$rt/rootfs.ext4" "$rootfs"
    echo "$rstamp" >"$rootfs.stamp"
    rm -rf "$rt"
    trap - EXIT
    log "root filesystem $rootfs ($(du -h "$rootfs" | cut -f1) used) in $((SECONDS - t)) s"
fi

###############################################################################
# Initramfs: busybox, modules, /init, pullhelper and the guest tests.

log "make build"
make -s -C "$ROOT" build >&2
PULLHELPER="$ROOT/bin/pullhelper"
base="$CACHE/initramfs-base.cpio.gz"
bstamp=$(
    sha256sum "$PULLHELPER" "$PULLHELPER-child" "$BUSYBOX" "$SD_DIR/init" "$SD_DIR/guest-tests.sh" "$HARNESS" "$KDIR"/modules/* "${BASH_SOURCE[0]}" |
        sha256sum | cut -d' ' -f1
)
if [[ ! -f $base || $(cat "$base.stamp" 2>/dev/null) != "$bstamp" ]]; then
    st=$(mktemp -d "$CACHE/.initramfs.XXXXXX")
    trap 'rm -rf "$st"' EXIT
    mkdir -p "$st"/{bin,dev,proc,sys,newroot,lib/modules,phvm,etc/phvm}
    ln -s bin "$st/sbin"
    cp "$BUSYBOX" "$st/bin/busybox"
    for a in $("$BUSYBOX" --list); do
        [[ $a == busybox ]] || ln -s busybox "$st/bin/$a"
    done
    install -m 0755 "$SD_DIR/init" "$st/init"
    install -m 0755 "$PULLHELPER" "$st/phvm/pullhelper"
    install -m 0755 "$PULLHELPER-child" "$st/phvm/pullhelper-child"
    install -m 0755 "$SD_DIR/guest-tests.sh" "$st/phvm/guest-tests.sh"
    install -m 0644 "$HARNESS" "$st/phvm/harness.sh"
    cp "$KDIR"/modules/* "$st/lib/modules/"
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

echo "VM_KERNEL_PKG=$VM_KERNEL_PKG"
echo "VM_KERNEL=$VM_KERNEL"
echo "VM_INITRD_BASE=$base"
echo "VM_ROOTFS=$rootfs"
