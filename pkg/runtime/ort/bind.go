//go:build ort

package ort

import (
	"fmt"
	"reflect"

	"github.com/ebitengine/purego"
)

// bindAPI points every function field of a at its OrtApi slot.
func bindAPI(a *api, slots []uintptr) error {
	v := reflect.ValueOf(a).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name := t.Field(i).Name
		idx, ok := apiSlots[name]
		if !ok {
			return fmt.Errorf("OrtApi function %s has no slot number", name)
		}
		if idx >= len(slots) || slots[idx] == 0 {
			return fmt.Errorf("OrtApi slot %d (%s) is empty", idx, name)
		}
		purego.RegisterFunc(v.Field(i).Addr().Interface(), slots[idx])
	}
	return nil
}
