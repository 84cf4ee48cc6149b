package lab

import (
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// hostNft is the host's nft, which kube-proxy's image holds at the same
// path.
const hostNft = "/usr/sbin/nft"

// nftNames are the files nft names protocols and services by. Without
// /etc/protocols it lists a map's "tcp" as 6, so that kube-proxy, which
// reads its maps back when it starts, took its own elements for stale ones
// and deleted them: every other restart of a node's kube-proxy left it
// with no Services.
var nftNames = []string{"/etc/protocols", "/etc/services"}

// nftFiles are what kube-proxy's nftables mode needs in its image: it runs
// nft from PATH (build puts /usr/sbin on it). The image has no libraries,
// so it gets the host's nft with every shared library it loads, and the
// dynamic loader, each at its path on the host, as ldd lists them, and the
// host's names of protocols and services.
func nftFiles() (map[string]string, error) { return nftFilesOf(hostNft) }

// nftFilesOf are nftFiles for the nft at path.
func nftFilesOf(nft string) (map[string]string, error) {
	if _, err := os.Stat(nft); err != nil {
		return nil, fmt.Errorf("kube-proxy's nftables mode needs the host's nft: %w (apt-get install nftables, or `make host-packages`)", err)
	}
	files := map[string]string{nft: nft}
	for _, path := range nftNames {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("kube-proxy's nft needs the host's %s: %w (apt-get install netbase)", path, err)
		}
		files[path] = path
	}
	libs, err := libraryFiles(nft)
	if err != nil {
		return nil, err
	}
	maps.Copy(files, libs)
	return files, nil
}

// libraryFiles are the shared libraries the program at path loads, and
// the dynamic loader, each at its path on the host, as ldd lists them:
// none for a static program.
func libraryFiles(path string) (map[string]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s is no ELF executable: %w", path, err)
	}
	dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	_ = f.Close()
	files := map[string]string{}
	if !dynamic { // ldd fails on a static binary
		return files, nil
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("list the libraries of %s: ldd: %w", path, err)
	}
	// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", the loader
	// as "/lib64/ld-linux-x86-64.so.2 (0x...)", the kernel's vDSO as
	// "linux-vdso.so.1 (0x...)", a library ld.so cannot find as
	// "libfoo.so.1 => not found".
	for line := range strings.Lines(string(out)) {
		lib := strings.TrimSpace(line)
		if _, target, ok := strings.Cut(lib, "=>"); ok {
			lib = strings.TrimSpace(target)
		}
		if strings.HasPrefix(lib, "not found") {
			return nil, fmt.Errorf("%s needs a library ld.so cannot find: %s", path, strings.TrimSpace(line))
		}
		lib, _, _ = strings.Cut(lib, " ")
		if filepath.IsAbs(lib) {
			files[lib] = lib
		}
	}
	return files, nil
}

// hostIPTables is the host's iptables, which flannel's image holds at
// the same path.
const hostIPTables = "/usr/sbin/iptables"

// iptablesNames are the names flanneld runs iptables by, each the same
// multi-call program (Debian's xtables-nft-multi), which acts by the name
// it is called.
var iptablesNames = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// iptablesFiles are what flanneld needs of iptables in its image: even in
// nftables mode it runs iptables, to clean up what iptables mode left. The
// image gets the host's program under each of iptablesNames in /usr/sbin,
// with its libraries and loader and the extensions it loads at run time
// from the directory beside libxtables.
func iptablesFiles() (map[string]string, error) {
	program, err := filepath.EvalSymlinks(hostIPTables)
	if err != nil {
		return nil, fmt.Errorf("flannel's image needs the host's iptables: %w (apt-get install iptables, or `make host-packages`)", err)
	}
	files, err := libraryFiles(program)
	if err != nil {
		return nil, err
	}
	for _, name := range iptablesNames {
		files["/usr/sbin/"+name] = program
	}
	for lib := range maps.Clone(files) {
		if !strings.Contains(filepath.Base(lib), "libxtables") {
			continue
		}
		// Debian's libxtables, in /lib/<triplet> (/usr/lib/<triplet>
		// merged), loads them from /usr/lib/<triplet>/xtables.
		dir := filepath.Dir(lib)
		if !strings.HasPrefix(dir, "/usr/") {
			dir = "/usr" + dir
		}
		extensions, err := filepath.Glob(filepath.Join(dir, "xtables", "*.so"))
		if err != nil {
			return nil, err
		}
		if len(extensions) == 0 {
			return nil, fmt.Errorf("iptables' extensions: none in %s/xtables (apt-get install --reinstall libxtables12)", dir)
		}
		for _, e := range extensions {
			files[e] = e
		}
	}
	return files, nil
}
