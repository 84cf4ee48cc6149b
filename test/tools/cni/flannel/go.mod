// Pins the flannel CNI plugin, which the flannel image installs into a
// node's /opt/cni/bin: the last containernetworking/plugins release that
// held it (flannel-io/cni-plugin, its successor, is not served here).
// Built by ../../build.sh; never imported by the product.
module github.com/kubeboot/kubeboot/test/tools/cni/flannel

go 1.26.0

tool github.com/containernetworking/plugins/plugins/meta/flannel

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/containernetworking/plugins v0.9.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
