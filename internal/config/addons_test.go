package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestManifestPathsLoad: addons.manifests loads as written, and a path
// that is relative, unclean or given twice is refused at load, exit 2,
// naming the entry and the fix.
func TestManifestPathsLoad(t *testing.T) {
	c, err := loadInit(writeConfig(t, header+"addons:\n  manifests: [/etc/kubeboot/manifests, /srv/app.yaml]\n"), testHost)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc/kubeboot/manifests", "/srv/app.yaml"}; !slices.Equal(c.Addons.Manifests, want) {
		t.Errorf("addons.manifests = %v, want %v", c.Addons.Manifests, want)
	}

	tests := []struct {
		name, paths, want string
	}{
		{"relative", "[/srv/a.yaml, manifests]", `addons.manifests[1]: Invalid value: "manifests": must be an absolute path of a YAML or JSON file or of a directory of them, like /etc/kubeboot/manifests`},
		{"empty", `[""]`, `addons.manifests[0]: Invalid value: "": must be an absolute path`},
		{"unclean", "[/srv/manifests/]", `addons.manifests[0]: Invalid value: "/srv/manifests/": not clean: use /srv/manifests`},
		{"twice", "[/srv/a.yaml, /srv/a.yaml]", `addons.manifests[1]: Duplicate value: "/srv/a.yaml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadInit(writeConfig(t, header+"addons:\n  manifests: "+tt.paths+"\n"), testHost)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
			if code := exit.Code(err); code != exit.Usage {
				t.Errorf("exit code %d, want %d", code, exit.Usage)
			}
		})
	}
}

// TestCNIDefaults: flannel is the pod network unless the file says none;
// an IPv4 cluster without a pod subnet gets flannel's, a dual-stack one
// must name its own, and none leaves the pod subnet and images empty.
func TestCNIDefaults(t *testing.T) {
	tests := []struct {
		name, yaml                 string
		provider, podSubnet, image string
		wantErr                    string
	}{
		{"default", "", CNIFlannel, DefaultFlannelPodSubnet, DefaultFlannelImage, ""},
		{"own pod subnet", "networking: {podSubnet: 192.168.0.0/16}\n", CNIFlannel, "192.168.0.0/16", DefaultFlannelImage, ""},
		{"none", "addons: {cni: {provider: none}}\n", CNINone, "", "", ""},
		{"dual-stack without pod subnet", "networking: {serviceSubnet: '10.96.0.0/16,fd00:10:96::/112'}\n", "", "", "",
			"addons.cni.provider: Required value: flannel needs networking.podSubnet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadInit(writeConfig(t, header+tt.yaml), testHost)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Addons.CNI; got.Provider != tt.provider || got.Image != tt.image || c.Networking.PodSubnet != tt.podSubnet {
				t.Errorf("cni = %+v, podSubnet %q; want provider %q, image %q, podSubnet %q", got, c.Networking.PodSubnet, tt.provider, tt.image, tt.podSubnet)
			}
		})
	}
}
