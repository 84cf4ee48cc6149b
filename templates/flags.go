package templates

import (
	"slices"
	"strconv"
	"strings"

	"github.com/kubeboot/kubeboot/internal/config"
)

// flag is one command-line flag of a component.
type flag struct {
	name  string
	value string
}

// mergeFlags applies the user's extra args to a component's default flags.
// An extra arg named like a default replaces it, and one with Remove drops
// it; several extra args with the same name give a repeated flag. The result
// is sorted by name so the command line does not depend on the order of the
// input. Same-named flags keep the user's order, because it can matter: the
// first --service-account-issuer is the one the API server signs with.
func mergeFlags(defaults []flag, extra []config.Arg) []flag {
	overridden := map[string]bool{}
	for _, a := range extra {
		overridden[a.Name] = true
	}
	var flags []flag
	for _, f := range defaults {
		if !overridden[f.name] {
			flags = append(flags, f)
		}
	}
	for _, a := range extra {
		if !a.Remove {
			flags = append(flags, flag{name: a.Name, value: a.Value})
		}
	}
	slices.SortStableFunc(flags, func(a, b flag) int { return strings.Compare(a.name, b.name) })
	return flags
}

// commandLine renders a container command: the binary, then --name=value
// for every flag.
func commandLine(binary string, flags []flag) []string {
	command := []string{binary}
	for _, f := range flags {
		command = append(command, "--"+f.name+"="+f.value)
	}
	return command
}

// flagValue returns the value of the last flag called name, which is the
// one the component's flag parser keeps, and whether there is one.
func flagValue(flags []flag, name string) (string, bool) {
	for i := len(flags) - 1; i >= 0; i-- {
		if flags[i].name == name {
			return flags[i].value, true
		}
	}
	return "", false
}

// portFlag returns the port in the flag called name, or fallback when the
// flag is missing or not a port number.
func portFlag(flags []flag, name string, fallback int32) int32 {
	value, _ := flagValue(flags, name)
	port, err := strconv.ParseUint(value, 10, 16)
	if err != nil || port == 0 {
		return fallback
	}
	return int32(port)
}

// hasArg reports whether the user set a flag called name.
func hasArg(args []config.Arg, name string) bool {
	return slices.ContainsFunc(args, func(a config.Arg) bool { return a.Name == name && !a.Remove })
}
