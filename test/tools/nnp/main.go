// Command nnp prints the user ID it runs as. The conformance tests' nonewprivs
// image installs it setuid root: a container that allows privilege escalation
// sees "Effective uid: 0", one that does not sees its own user's ID.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
