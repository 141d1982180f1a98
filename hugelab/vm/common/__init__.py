"""What both kinds of guest share: the guest's spec, its libvirt <memoryBacking>, QEMU-side
evidence, a process's identity, and libvirtd's connection and records."""
