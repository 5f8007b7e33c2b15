package tenurectl

import (
	"errors"
	"time"

	"github.com/spf13/pflag"
)

// boundedDuration is a duration flag that refuses values below its floor
// as it parses them, so the flag error names the flag and the value
// (`invalid value "-5m" for flag -node-grace-period: must not be
// negative`) and the command stops before it does anything.
type boundedDuration struct {
	d     *time.Duration
	floor floor
}

type floor int

const (
	anyDuration floor = iota
	notNegative
	positive
)

func (b boundedDuration) String() string {
	if b.d == nil {
		return "0s"
	}
	return b.d.String()
}

func (b boundedDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("parse error")
	}
	switch {
	case v < 0 && b.floor == notNegative:
		return errors.New("must not be negative")
	case v <= 0 && b.floor == positive:
		return errors.New("must be positive")
	}
	*b.d = v
	return nil
}

func (boundedDuration) Type() string { return "duration" }

// PositiveDuration defines a duration flag that refuses zero and negative
// values (timeouts and periods).
func PositiveDuration(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(boundedDuration{d: p, floor: positive}, name, usage+"; a positive `duration`")
}

// DurationFlag defines a duration flag whose parse errors read as the flag
// package's.
func DurationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(boundedDuration{d: p}, name, usage)
}

// nonNegativeDuration defines a duration flag that refuses negative values.
func nonNegativeDuration(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(boundedDuration{d: p, floor: notNegative}, name, usage+"; a `duration`, not negative")
}
