package sdk

import (
	"strings"
	"testing"
)

type params struct {
	PreferNvlink bool    `json:"preferNvlink"`
	Share        float64 `json:"share" wasmgpu:"min=0,max=1"`
	Floor        uint64  `json:"minFreeMib" wasmgpu:"min=1024"`
	Slots        *int    `json:"slots" wasmgpu:"max=8"`
	Name         string
	Skipped      int `json:"-"`
	hidden       int
}

func TestConfigTakesNumbersRangesAndExactKeys(t *testing.T) {
	p := params{Share: 0.5, Floor: 2048}
	if err := ParseConfig("  \n", &p); err != nil || p.Share != 0.5 {
		t.Fatalf("blank: %v %+v", err, p)
	}
	// 0 is a float where one is expected; a field without a json tag goes
	// by its Go name.
	if err := ParseConfig(`{"share": 0, "minFreeMib": 4096, "slots": 3, "Name": "x", "preferNvlink": true}`, &p); err != nil {
		t.Fatal(err)
	}
	if p.Share != 0 || p.Floor != 4096 || *p.Slots != 3 || p.Name != "x" || !p.PreferNvlink {
		t.Fatalf("parsed: %+v", p)
	}
	if err := ParseConfig(`{"share": 1, "slots": null}`, &p); err != nil || p.Share != 1 || p.Slots != nil {
		t.Fatalf("null pointer: %v %+v", err, p)
	}
	// The fields in order, as serde reads a struct from an array.
	if err := ParseConfig(`[false, 0.25]`, &p); err != nil || p.PreferNvlink || p.Share != 0.25 || p.Floor != 4096 {
		t.Fatalf("array: %v %+v", err, p)
	}
	before := p
	for _, c := range []struct{ config, want string }{
		// An unknown key names itself and the known ones.
		{`{"preferNVLink": true}`, "invalid policy config.json: unknown field `preferNVLink`, expected one of `preferNvlink`, `share`, `minFreeMib`, `slots`, `Name` (keys are case-sensitive: remove it or correct its spelling)"},
		{`{"Skipped": 1}`, "unknown field `Skipped`"},
		{`{"hidden": 1}`, "unknown field `hidden`"},
		// A range error names the field, the value and what to write.
		{`{"share": 1.5}`, "invalid policy config.json: `share` is 1.5, out of range: set it to a number from 0 to 1"},
		{`{"share": -0.1}`, "`share` is -0.1, out of range: set it to a number from 0 to 1"},
		{`{"minFreeMib": 512}`, "`minFreeMib` is 512, out of range: set it to a whole number of at least 1024"},
		{`{"slots": 9}`, "`slots` is 9, out of range: set it to a whole number of at most 8"},
		{`{"minFreeMib": -1}`, "`minFreeMib` is -1, expected a whole number of at least 1024"},
		{`{"minFreeMib": 1.5}`, "`minFreeMib` is 1.5, expected a whole number of at least 1024"},
		{`{"share": "0.5"}`, "`share` is \"0.5\", expected a number from 0 to 1"},
		{`{"preferNvlink": 1}`, "`preferNvlink` is 1, expected a boolean (true or false)"},
		{`{"preferNvlink": null}`, "`preferNvlink` is null, expected a boolean (true or false) (leave `preferNvlink` out for its default)"},
		{`{"share": 0.5, "share": 0.5}`, "duplicate field `share`"},
		{`{"share": 0.5`, "invalid policy config.json: not valid JSON"},
		{`{"share": 0.5} {}`, "trailing characters"},
		{`null`, "expected a JSON object"},
		{`"x"`, "expected a JSON object"},
		{`[true, 0.5, 2048, 1, "n", 6]`, "a JSON array of 6 or more values, expected at most 5"},
	} {
		err := ParseConfig(c.config, &p)
		if err == nil || !strings.HasPrefix(err.Error(), "invalid policy config.json: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.config, err, c.want)
		}
		if p != before {
			t.Errorf("%s changed the defaults: %+v", c.config, p)
		}
	}
	if err := ParseConfig(`{}`, p); err == nil {
		t.Fatal("not a pointer")
	}
	var bad struct {
		X string `wasmgpu:"min=1"`
	}
	if err := ParseConfig(`{"X": "a"}`, &bad); err == nil || !strings.Contains(err.Error(), "on a number field") {
		t.Fatalf("range tag on a string: %v", err)
	}
}

func TestPlacementParamsReadNvlinkAndTheOlderBool(t *testing.T) {
	read := func(config string) Nvlink {
		p, err := ParsePlacementParams(config)
		if err != nil {
			t.Fatalf("%s: %v", config, err)
		}
		return p.NvlinkMode()
	}
	for config, want := range map[string]Nvlink{
		"":                        NvlinkPrefer,
		`{"preferNvlink": false}`: NvlinkIgnore,
		`{"nvlink": "require"}`:   NvlinkRequire,
		`{"nvlink": "prefer"}`:    NvlinkPrefer,
		`{"nvlink": null}`:        NvlinkPrefer,
		`{"nvlink": "ignore", "preferNvlink": true}`:  NvlinkIgnore,
		`{"preferNvlink": false, "nvlink": "prefer"}`: NvlinkPrefer,
		`[false, "require"]`:                          NvlinkRequire,
	} {
		if got := read(config); got != want {
			t.Errorf("%s: %v, want %v", config, got, want)
		}
	}
	if p, _ := ParsePlacementParams(""); !p.Preemption || !p.PreferNvlink || p.Nvlink != nil {
		t.Fatalf("defaults: %+v", p)
	}
	if p, _ := ParsePlacementParams(`{"preemption": false}`); p.Preemption {
		t.Fatal("preemption off")
	}
	for config, want := range map[string]string{
		`{"nvlink": "always"}`:         `"require"`,
		`{"nvlink": "Require"}`:        `unknown value "Require"`,
		`{"nvlink": true}`:             "`nvlink` is true",
		`{"preemption": 1}`:            "`preemption` is 1, expected a boolean",
		`{"preemption": "yes"}`:        "`preemption` is \"yes\"",
		`{"preemption": null}`:         "`preemption` is null",
		`{"preferNvlink": null}`:       "`preferNvlink` is null",
		`{"zone": "a"}`:                "unknown field `zone`, expected one of `preferNvlink`, `nvlink`, `preemption`",
		`{"nvlink": "prefer", "x": 1}`: "unknown field `x`",
	} {
		if _, err := ParsePlacementParams(config); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", config, err, want)
		}
	}
}
