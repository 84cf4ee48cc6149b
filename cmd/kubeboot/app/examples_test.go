package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// documentedCommands are the commands of the tree whose help kubeboot
// writes: not hidden, and not cobra's own help and completion commands.
func documentedCommands() []*cobra.Command {
	var commands []*cobra.Command
	visitCommands(newRootCommand(newDeps(""), &bytes.Buffer{}, &bytes.Buffer{}), func(c *cobra.Command) {
		hidden := false
		for p := c; p != nil; p = p.Parent() {
			hidden = hidden || p.Hidden || p.Name() == "help" || p.Name() == "completion"
		}
		if !hidden {
			commands = append(commands, c)
		}
	})
	return commands
}

// TestEveryCommandHasExamples checks that every command's help shows how
// it is run.
func TestEveryCommandHasExamples(t *testing.T) {
	for _, c := range documentedCommands() {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("`%s` has no Example", c.CommandPath())
		}
	}
}

// TestExamplesRun checks each example line as the command line it shows:
// it runs the command or one below it, and its flags and arguments pass
// that command's parsing and checks (run nothing: the tree is rebuilt for
// each line, whose flags it sets).
func TestExamplesRun(t *testing.T) {
	for _, c := range documentedCommands() {
		for _, line := range strings.Split(c.Example, "\n") {
			words := exampleWords(line)
			if len(words) < 1 || words[0] != "kubeboot" || !strings.HasPrefix(strings.TrimSpace(line)+" ", c.CommandPath()+" ") {
				t.Errorf("`%s`: example %q does not run it or a command below it", c.CommandPath(), line)
				continue
			}
			if err := parseExample(words[1:]); err != nil {
				t.Errorf("`%s`: example %q: %v", c.CommandPath(), line, err)
			}
		}
	}
}

// exampleWords are the words of an example's command line, before any
// redirection or pipe.
func exampleWords(line string) []string {
	var words []string
	for _, w := range strings.Fields(line) {
		if w == ">" || w == "|" {
			break
		}
		words = append(words, w)
	}
	return words
}

// parseExample finds the command args name in a fresh tree and checks its
// flags, required flags and positional arguments.
func parseExample(args []string) error {
	root := newRootCommand(newDeps(""), &bytes.Buffer{}, &bytes.Buffer{})
	target, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := target.ParseFlags(rest); err != nil {
		return err
	}
	if err := target.ValidateRequiredFlags(); err != nil {
		return err
	}
	return target.ValidateArgs(target.Flags().Args())
}
