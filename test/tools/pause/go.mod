// The lab's sandbox (pause) program. Built by ../build.sh into the lab's
// pause image; never imported by the product.
module github.com/kubeboot/kubeboot/test/tools/pause

go 1.26.0
