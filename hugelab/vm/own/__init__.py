"""hugelab's own image-less guests: the host's kernel and root filesystem, an initramfs and an
agent, under QEMU directly or under libvirtd."""
