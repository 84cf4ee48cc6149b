// nnp, the program of the nonewprivs image the conformance tests run
// (see ../build.sh); never imported by the product.
module github.com/kubeboot/kubeboot/test/tools/nnp

go 1.26.0
