// Package lab runs local clusters on this machine, as kind does with
// Docker: each node gets its own containerd (with runc), whose root, state,
// config, socket and pod network are the node's alone, and the real
// kubelet; the images the node runs are built from the pinned binaries
// with go-containerregistry, under the references kubeboot renders, and
// imported into that containerd, so no registry is needed. Down removes
// every process, mount, link, iptables chain and file the node's lab
// created.
package lab
