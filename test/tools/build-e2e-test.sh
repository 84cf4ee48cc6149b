#!/usr/bin/env bash
# Builds Kubernetes' end-to-end test binary, e2e.test, of the release the
# tools module test/tools/kubernetes/v1.36 pins, into <bin-dir>/e2e.test,
# and the ginkgo runner of the Ginkgo release it links, which runs its
# tests in parallel, into <bin-dir>/ginkgo:
#
#   bash test/tools/build-e2e-test.sh <bin-dir> [--force]
#
# The tools module lists only the commands build.sh builds, so e2e.test's
# own dependencies are resolved in a copy of it under .cache, never in the
# repository. An e2e.test and ginkgo newer than the module's go.mod are
# reused.
set -euo pipefail

bin=${1:?usage: build-e2e-test.sh <bin-dir> [--force]}
force=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/kubernetes/v1.36"
out="$(mkdir -p "$bin" && cd "$bin" && pwd)/e2e.test"
ginkgo="$(dirname "$out")/ginkgo"
if [[ $force != --force && -x $out && $out -nt $mod/go.mod && -x $ginkgo && $ginkgo -nt $mod/go.mod ]]; then
	echo "reused e2e.test and ginkgo ($out)"
	exit 0
fi
work="$here/../../.cache/e2e-test-module"
rm -rf "$work"
mkdir -p "$work"
cp "$mod/go.mod" "$mod/go.sum" "$work/"
sed -i 's|^module .*|module e2etest|' "$work/go.mod"
echo "building e2e.test of $(sed -n 's|^\t*k8s.io/kubernetes \(v[0-9.]*\).*|\1|p' "$mod/go.mod" | head -1) (about 12 minutes on idle cores)"
start=$(date +%s)
(cd "$work" && GOWORK=off GOFLAGS=-mod=mod go test -c -o "$out.tmp" k8s.io/kubernetes/test/e2e)
(cd "$work" && GOWORK=off GOFLAGS=-mod=mod go build -o "$ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo)
mv "$out.tmp" "$out"
mv "$ginkgo.tmp" "$ginkgo"
echo "built e2e.test and ginkgo in $(( $(date +%s) - start ))s ($out)"
