package bootstraptoken

import "fmt"

// fmtV is how a Token prints in a log line by mistake.
func fmtV(t Token) string { return fmt.Sprintf("%v %s", t, t) }
