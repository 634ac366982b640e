package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
)

const configError = "invalid policy config.json: "

// ParseConfig decodes the snapshot's config string (the policy's
// config.json, verbatim) into out, a pointer to a struct holding the
// defaults. Empty (or all blanks) leaves the defaults. Otherwise it must be
// one JSON object whose keys are each exactly a field's name: its `json` tag
// name, else the Go field name (Go's decoder alone would accept any letter
// case); an unknown key, a key given twice, a value of the wrong type and
// null for a field that is not a pointer, slice, map or interface are
// refused. JSON numbers are numbers: 0 is a fine value for a float64 field,
// 1.5 is refused for an int one. A numeric field (or pointer to one) may
// carry a range,
//
//	Floor uint64  `json:"minFreeMib" wasmgpu:"min=1024"`
//	Share float64 `json:"share" wasmgpu:"min=0,max=1"`
//
// and a value outside it is refused. Every error starts with "invalid
// policy config.json: ", names the field and says what to write instead;
// on an error out is left as it was. A field's own json.Unmarshaler (as
// Nvlink has) decides its values. Like the Rust SDK's parse_config (serde),
// it also reads a JSON array as the fields' values in declaration order.
func ParseConfig(config string, out any) error {
	target := reflect.ValueOf(out)
	if target.Kind() != reflect.Pointer || target.IsNil() || target.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("%sParseConfig needs a pointer to a struct, not %T", configError, out)
	}
	if strings.TrimSpace(config) == "" {
		return nil
	}
	st := target.Elem().Type()
	type field struct {
		index    int
		min, max *float64
	}
	known := map[string]field{}
	var names, order []string
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		spec := field{index: i}
		if tag, ok := f.Tag.Lookup("wasmgpu"); ok {
			for _, part := range strings.Split(tag, ",") {
				key, value, _ := strings.Cut(strings.TrimSpace(part), "=")
				bound, err := strconv.ParseFloat(value, 64)
				if (key != "min" && key != "max") || err != nil || !isNumber(f.Type) {
					return fmt.Errorf("%sthe policy's field %s has tag wasmgpu:%q; it takes min=N and max=N on a number field", configError, f.Name, tag)
				}
				if key == "min" {
					spec.min = &bound
				} else {
					spec.max = &bound
				}
			}
		}
		known[name] = spec
		order = append(order, name)
		names = append(names, "`"+name+"`")
	}
	expected := "expected one of " + strings.Join(names, ", ")
	if len(names) == 0 {
		expected = "the policy takes no parameters"
	}

	result := reflect.New(st).Elem()
	result.Set(target.Elem())
	set := func(key string, spec field, raw json.RawMessage) error {
		slot := result.Field(spec.index)
		shown := string(raw)
		if len(shown) > 40 {
			shown = shown[:37] + "..."
		}
		if string(raw) == "null" {
			switch slot.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
				slot.SetZero()
				return nil
			}
			return fmt.Errorf("%s`%s` is null, expected %s (leave `%s` out for its default)", configError, key, describe(slot.Type(), spec.min, spec.max), key)
		}
		value := reflect.New(slot.Type())
		if err := json.Unmarshal(raw, value.Interface()); err != nil {
			if unmarshaler(slot.Type()) {
				return fmt.Errorf("%s`%s` is %s: %v", configError, key, shown, err)
			}
			return fmt.Errorf("%s`%s` is %s, expected %s", configError, key, shown, describe(slot.Type(), spec.min, spec.max))
		}
		if n, ok := number(value.Elem()); ok && ((spec.min != nil && n < *spec.min) || (spec.max != nil && n > *spec.max)) {
			return fmt.Errorf("%s`%s` is %s, out of range: set it to %s", configError, key, shown, describe(slot.Type(), spec.min, spec.max))
		}
		slot.Set(value.Elem())
		return nil
	}

	dec := json.NewDecoder(strings.NewReader(config))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s%v", configError, syntax(err))
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%s%v", configError, syntax(err))
			}
			key := tok.(string)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%s%v", configError, syntax(err))
			}
			spec, ok := known[key]
			if !ok {
				return fmt.Errorf("%sunknown field `%s`, %s (keys are case-sensitive: remove it or correct its spelling)", configError, key, expected)
			}
			if seen[key] {
				return fmt.Errorf("%sduplicate field `%s`: give it once", configError, key)
			}
			seen[key] = true
			if err := set(key, spec, raw); err != nil {
				return err
			}
		}
	case json.Delim('['):
		// The fields' values in order, as serde (the Rust SDK) also reads a
		// struct; the ones left out keep their defaults.
		for i := 0; dec.More(); i++ {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%s%v", configError, syntax(err))
			}
			if i >= len(order) {
				return fmt.Errorf("%sa JSON array of %d or more values, expected at most %d (%s in that order); write an object instead", configError, i+1, len(order), strings.Join(names, ", "))
			}
			if err := set(order[i], known[order[i]], raw); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%sexpected a JSON object ({\"key\": value, ...}), found %s", configError, describeToken(tok))
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%s%v", configError, syntax(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%strailing characters after the JSON value: config.json holds one object", configError)
	}
	target.Elem().Set(result)
	return nil
}

// MustParseConfig is ParseConfig that fails the round (Fail) on an error,
// as an operator must fix config.json.
func MustParseConfig(config string, out any) {
	if err := ParseConfig(config, out); err != nil {
		Fail(err.Error())
	}
}

func syntax(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, err)
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return "not valid JSON: it ends too early"
	}
	return "not valid JSON: " + err.Error()
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return string(t)
	case string:
		return strconv.Quote(t)
	case nil:
		return "null"
	}
	return fmt.Sprint(tok)
}

func unmarshaler(t reflect.Type) bool {
	target := reflect.TypeFor[json.Unmarshaler]()
	for {
		if reflect.PointerTo(t).Implements(target) || t.Implements(target) {
			return true
		}
		if t.Kind() != reflect.Pointer {
			return false
		}
		t = t.Elem()
	}
}

func isNumber(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// number is v (or what it points to) as a float64, when it is a number.
func number(v reflect.Value) (float64, bool) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(v.Uint()), true
	case reflect.Float32, reflect.Float64:
		return v.Float(), true
	}
	return 0, false
}

// describe is what a field of type t takes, in words, within [min, max].
func describe(t reflect.Type, min, max *float64) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	whole := true
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	case reflect.Interface:
		return "a JSON value"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if bits := t.Bits(); bits < 64 {
			lo, hi = -math.Pow(2, float64(bits-1)), math.Pow(2, float64(bits-1))-1
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		lo = 0
		if bits := t.Bits(); bits < 64 {
			hi = math.Pow(2, float64(bits)) - 1
		}
	case reflect.Float32, reflect.Float64:
		whole = false
	default:
		return "a value of type " + t.String()
	}
	if min != nil && *min > lo {
		lo = *min
	}
	if max != nil && *max < hi {
		hi = *max
	}
	kind := "a number"
	if whole {
		kind = "a whole number"
	}
	format := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	switch {
	case !math.IsInf(lo, 0) && !math.IsInf(hi, 0):
		return fmt.Sprintf("%s from %s to %s", kind, format(lo), format(hi))
	case !math.IsInf(lo, 0):
		return fmt.Sprintf("%s of at least %s", kind, format(lo))
	case !math.IsInf(hi, 0):
		return fmt.Sprintf("%s of at most %s", kind, format(hi))
	}
	return kind
}
