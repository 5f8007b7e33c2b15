//go:build tenure_release

package main

import "github.com/spf13/cobra"

// developerCommands: the release build has none.
func developerCommands(*env) []*cobra.Command { return nil }
