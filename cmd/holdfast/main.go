// Command holdfast is the Holdfast broker and its tools, in one binary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{
	"serve":   {"run a broker (no flags: single node, data in ./data, Kafka on localhost:9092)", serveCommand},
	"topic":   {"create, list, describe and delete topics", topicCommand},
	"produce": {"produce lines from stdin to a topic", produceCommand},
	"consume": {"print a topic's records", consumeCommand},
	"group":   {"list and describe consumer groups, show lag, reset offsets", groupCommand},
	"version": {"print the version", func([]string) error { fmt.Println("holdfast", version); return nil }},
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func usage() {
	fmt.Fprintf(os.Stderr, "Holdfast: a Kafka-compatible log that never loses an acknowledged message.\n\nUsage: holdfast <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'holdfast <command> -h' for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "holdfast: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "holdfast %s: %v\n", name, err)
		os.Exit(1)
	}
}
