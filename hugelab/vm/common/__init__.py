"""What both kinds of guest share: QEMU-side evidence."""
