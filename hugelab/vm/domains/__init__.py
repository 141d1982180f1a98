"""Users' own libvirt domains: the transient copy an arm runs, and the ways into its guest (the
guest agent, SSH); the Debian test image and a demo domain of it."""
