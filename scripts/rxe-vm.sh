#!/usr/bin/env bash
# Runs COMMAND as root inside a qemu VM booted from Debian's stock kernel, with Soft-RoCE
# (rdma_rxe) on a veth pair: device rxe0, RoCE v2 GID index 1, address 10.250.0.1.
#
#   scripts/rxe-vm.sh WORKDIR 'COMMAND'
#
# The host's root file system is shared read-only (virtio-9p) and the guest chroots into it, so
# binaries built on the host and the host's rdma-core run unchanged; WORKDIR/out is writable.
# The guest's only writable places are WORKDIR/out and /run (a tmpfs); /tmp is the host's,
# read-only. The exit status is COMMAND's (99 if the VM did not report one). The host kernel of these
# machines has no RDMA stack (shared/notes/rdma-environment.md §2), hence the VM; KVM does not
# work nested here, so qemu emulates (TCG): correctness only, never timing.
#
# Needs `scripts/setup.sh --vm` (qemu-system-x86, busybox-static, rdma-core's runtime
# libraries). The kernel package is fetched once into WORKDIR/kernel with `apt-get download`.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 WORKDIR 'COMMAND'" >&2
    exit 2
fi
work=$(realpath -m "$1")
cmd=$2
for tool in qemu-system-x86_64 busybox dpkg-deb apt-get; do
    if ! command -v "$tool" >/dev/null; then
        echo "rxe-vm: $tool is missing (run scripts/setup.sh --vm)" >&2
        exit 3
    fi
done
origin=$PWD
mkdir -p "$work/out"
cd "$work"

# Debian's current stock kernel, unpacked (not installed).
if [ ! -d kernel ]; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
    if [ -z "$pkg" ]; then
        echo "rxe-vm: cannot find Debian's kernel package (apt-get update?)" >&2
        exit 3
    fi
    rm -rf kernel.tmp && mkdir kernel.tmp
    (cd kernel.tmp && apt-get download "$pkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb . && rm -f ./*.deb)
    mv kernel.tmp kernel
fi
kver=$(ls kernel/lib/modules | head -1)
mods_dir=kernel/lib/modules/$kver/kernel

# Modules, in load order: virtio and 9p for the shared root, the RDMA core, Soft-RoCE (which
# needs crc32_generic), and veth.
modules="drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev
drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci net/9p/9pnet fs/netfs/netfs
fs/fscache/fscache fs/9p/9p net/9p/9pnet_virtio drivers/infiniband/core/ib_core
drivers/infiniband/core/ib_uverbs net/ipv4/udp_tunnel net/ipv6/ip6_udp_tunnel
crypto/crc32_generic drivers/infiniband/sw/rxe/rdma_rxe drivers/net/veth"
rm -rf initrd && mkdir -p initrd/bin initrd/mods initrd/proc initrd/sys initrd/dev initrd/host
cp "$(command -v busybox)" initrd/bin/busybox
names=""
for m in $modules; do
    f=$(ls "$mods_dir/$m".ko* 2>/dev/null | head -1 || true)
    if [ -n "$f" ]; then
        cp "$f" initrd/mods/
        names="$names $(basename "$m")"
    fi
done
printf '%s\n' "$cmd" >"$work/out/cmd.sh"
cat >initrd/init <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $names; do
    f=\$(ls /mods/\$m.ko* 2>/dev/null | head -1)
    case "\$f" in
        *.xz) xz -dc "\$f" > /tmp.ko 2>/dev/null && insmod /tmp.ko || echo "insmod \$m failed" ;;
        *.zst) echo "insmod \$m: zstd modules unsupported" ;;
        *) insmod "\$f" || echo "insmod \$m failed" ;;
    esac
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /host
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mount -t tmpfs tmpfs /host/run
mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=262144 out /host$work/out
chroot /host /bin/bash -c 'ip link set lo up; ip link add vethA type veth peer name vethB; ip addr add 10.250.0.1/24 dev vethA; ip link set vethA up; ip link set vethB up; rdma link add rxe0 type rxe netdev vethA && cd $origin && bash $work/out/cmd.sh' >/host$work/out/guest.log 2>&1
echo \$? >/host$work/out/rc
sync; poweroff -f
INIT
chmod +x initrd/init
(cd initrd && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >../initrd.gz)
rm -f out/rc out/guest.log
timeout "${RXE_VM_TIMEOUT:-1500}" qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 2 -nographic -no-reboot \
    -nic none -kernel "kernel/boot/vmlinuz-$kver" -initrd initrd.gz -append "console=ttyS0 quiet panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on \
    -virtfs "local,path=$work/out,mount_tag=out,security_model=none" >qemu.log 2>&1 || true
cat out/guest.log 2>/dev/null || true
exit "$(cat out/rc 2>/dev/null || echo 99)"
