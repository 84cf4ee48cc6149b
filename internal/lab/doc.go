// Package lab runs local clusters on this machine, as kind does with
// Docker: every node is a machine (package machine) with systemd as PID 1,
// containerd and the kubelet as its services, in a network namespace of
// its own on the lab's bridge, behind the lab's load balancer. The images
// the nodes run are built from the pinned binaries with
// go-containerregistry, under the references kubeboot renders, and loaded
// into each node's containerd at its first boot, so no registry is needed.
// Each node brings itself up from its one file, as a provisioned machine
// does; the lab watches from outside. Down removes every process, mount,
// cgroup, namespace, link and file the lab created.
package lab
